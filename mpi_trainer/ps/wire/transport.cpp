#include "ps/wire/transport.hpp"

#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <ostream>
#include <variant>

#include "core/error.hpp"
#include "ps/wire/mpi_env.hpp"

namespace mt {

void nap_microseconds(long us) {
  timespec ts{0, us * 1000};
  nanosleep(&ts, nullptr);
}

void Backoff::idle() { nap_microseconds(next(cap())); }

long Backoff::next(long cap_us) {
  const long nap = std::min(nap_, cap_us);
  nap_ = std::min(nap_ * 2, cap_us);
  return nap;
}

void Backoff::done() {
  const auto now = Clock::now();
  const double us = std::chrono::duration<double, std::micro>(now - since_).count();
  mean_us_ = mean_us_ < 0 ? us : 0.9 * mean_us_ + 0.1 * us;
  since_ = now;
  nap_ = floor_;
}

// A tenth of the mean wait; the ceiling until one wait has ended (the floor would spin through
// a first wait that may be long: a parameter server loading a checkpoint, an idle one).
long Backoff::cap() const {
  return mean_us_ < 0 ? ceiling_ : std::clamp(static_cast<long>(mean_us_ / 10), floor_, ceiling_);
}

void precise_naps(std::ostream& log) {
#ifdef PR_SET_TIMERSLACK
  if (prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL) != 0)
    log << "mpi_trainer: warning: prctl(PR_SET_TIMERSLACK): " << std::strerror(errno) << '\n';
#else
  (void)log;
#endif
}

bool wait_for(MPI_Request* req, double seconds, MPI_Status* status) {
  const auto t0 = Clock::now();
  Backoff backoff(5, 1000);
  for (;;) {
    int done = 0;
    try {
      MT_MPI(MPI_Test(req, &done, status));
    } catch (const ProcessFailed&) {
      return false;  // ULFM: the peer died; the caller abandons the request as for a silent one
    }
    if (done) return true;
    if (since(t0) >= seconds) return false;
    backoff.idle();
  }
}

void Buffer::share(std::shared_ptr<ShmSegment> seg, std::size_t offset) {
  shared = seg->floats() + offset;
  segment = std::move(seg);
  data.resize(static_cast<std::size_t>(kHeaderFloats));
  data.shrink_to_fit();
}

void isend(Buffer& buf, std::int64_t payload, int dest, int tag, MPI_Request* req, MPI_Comm comm) {
  const std::int64_t count = buf.shared ? kHeaderFloats : kHeaderFloats + payload;
  MT_MPI(MPI_Isend(buf.data.data(), static_cast<int>(count), MPI_FLOAT, dest, tag, comm, req));
}

void irecv(Buffer& buf, int source, int tag, MPI_Request* req, MPI_Comm comm) {
  MT_MPI(MPI_Irecv(buf.data.data(), buf.count(), MPI_FLOAT, source, tag, comm, req));
}

std::optional<std::vector<int>> max_over_ranks(const std::vector<int>& values, MPI_Comm comm, double seconds) {
  // Static: MPI may still write to them after a timeout.
  static std::array<int, 8> in{}, out{};
  MT_ASSERT(values.size() <= in.size(), "at most 8 values");
  std::copy(values.begin(), values.end(), in.begin());
  const int n = static_cast<int>(values.size());
  MPI_Request req = MPI_REQUEST_NULL;
  MT_MPI(MPI_Iallreduce(in.data(), out.data(), n, MPI_INT, MPI_MAX, comm, &req));
  if (!wait_for(&req, seconds)) return std::nullopt;
  return std::vector<int>(out.begin(), out.begin() + n);
}

namespace {
// Destroyed only at exit, after MPI_Finalize: MPI may touch these until then. Moving a Buffer or
// a vector keeps its storage where MPI saw it.
void keep_until_exit(std::variant<Buffer, std::vector<std::uint8_t>>&& kept_one) {
  static std::mutex mutex;
  static std::deque<std::variant<Buffer, std::vector<std::uint8_t>>> kept;
  std::lock_guard<std::mutex> lock(mutex);
  kept.push_back(std::move(kept_one));
}
}  // namespace

void abandon(Buffer&& buf) { keep_until_exit(std::move(buf)); }
void abandon(std::vector<std::uint8_t>&& bytes) { keep_until_exit(std::move(bytes)); }

}  // namespace mt
