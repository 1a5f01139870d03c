// The run's history (app/history_log.hpp).
#include "app/history_log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "core/clock.hpp"
#include "core/error.hpp"

namespace mt {

AppendedLines::AppendedLines(const std::string& path, const std::string& header, const char* what)
    : path_(path), what_(what) {
  if (path.empty()) return;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw DataError(std::string(what) + " " + path + ": cannot open for writing: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw DataError(std::string(what) + " " + path + ": " + std::strerror(err));
  }
  if (st.st_size == 0) write(header);
}

AppendedLines::~AppendedLines() {
  if (fd_ >= 0) ::close(fd_);
}

void AppendedLines::write(const std::string& line) {
  if (fd_ < 0) return;
  const std::string whole = line + '\n';
  ssize_t n;
  do {
    n = ::write(fd_, whole.data(), whole.size());
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(whole.size())) return;
  const std::string why = n < 0 ? std::strerror(errno) : "a short write";
  std::cerr << "mpi_trainer: " << what_ << " " << path_ << ": " << why
            << ": the run's history is incomplete from here (training goes on)\n"
            << std::flush;
  ::close(fd_);
  fd_ = -1;
}

namespace {

constexpr const char* kPushLogHeader = "step,rank,pulled,staleness,seconds,slot,push_id,epoch,kind";

const char* kind_name(PsEvents::Pushed::Kind k) {
  using K = PsEvents::Pushed::Kind;
  switch (k) {
    case K::kApplied: return "applied";
    case K::kCounted: return "counted";
    case K::kReplayed: return "replayed";
    case K::kReplayedCounted: return "replayed-counted";
  }
  return "?";
}

std::string push_line(std::int64_t step, int rank, std::int64_t pulled, double seconds, std::int64_t slot,
                      std::int64_t push_id, std::int64_t epoch, const char* kind) {
  std::ostringstream o;
  o.precision(9);
  o << step << ',' << rank << ',' << pulled << ',' << (pulled >= 0 ? step - 1 - pulled : 0) << ',' << seconds << ',' << slot << ','
    << push_id << ',' << epoch << ',' << kind;
  return o.str();
}

}  // namespace

PushLog::PushLog(const std::string& path) : out_(path, kPushLogHeader, "--push-log") {}

void PushLog::pushed(const PsEvents::Pushed& e, std::int64_t epoch) {
  if (out_.is_open())
    out_.write(push_line(e.step, e.rank, e.pulled, e.seconds, e.slot, e.push_id, epoch, kind_name(e.kind)));
}

void PushLog::write(std::int64_t step, int rank, std::int64_t pulled, double seconds) {
  if (out_.is_open()) out_.write(push_line(step, rank, pulled, seconds, -1, -1, 0, "applied"));
}

void PushLog::started(Start kind, std::int64_t step, std::int64_t epoch) {
  if (out_.is_open())
    out_.write(push_line(step, -1, -1, 0, -1, -1, epoch, kind == Start::kStart ? "start" : "takeover"));
}

void PushLog::checkpoint(std::int64_t step, std::int64_t epoch) {
  if (out_.is_open()) out_.write(push_line(step, -1, -1, 0, -1, -1, epoch, "checkpoint"));
}

AckLog::AckLog(const std::string& push_log, int rank) {
  if (!push_log.empty())
    path_ = push_log + ".acks/rank" + std::to_string(rank) + "-pid" + std::to_string(::getpid()) + ".csv";
}

void AckLog::acknowledged(const WorkerOptions::Ack& a) {
  if (path_.empty()) return;
  if (!out_) out_ = std::make_unique<AppendedLines>(path_, "slot,push_id,step,applied,epoch,unix_time", "--push-log");
  std::ostringstream o;
  o.precision(15);
  o << a.slot << ',' << a.push_id << ',' << a.step << ',' << (a.applied ? 1 : 0) << ',' << a.epoch << ','
    << unix_now();
  out_->write(o.str());
}

}  // namespace mt
