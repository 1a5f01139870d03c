// The run's history (--push-log FILE): every push that made a global step, as the parameter server
// made it and as its worker was told, for bench/faults/history_check.py (docs/fault-model.md,
// "The history and its checker").
//
// FILE, written by shard 0 of each parameter server (each epoch: the first attempt's, a resumed
// attempt's, a takeover's successor), CSV after the header
// `step,rank,pulled,staleness,seconds,slot,push_id,epoch,kind`, kind one of
//   applied           a push from worker `rank` of data slot `slot`, its push number `push_id`,
//                     computed on version `pulled`, made global step `step`, `seconds` after the start
//   counted           the same, counted as a step without an update (too stale, rejected)
//   replayed          a lost shard's push replayed by its successor (`rank` -1, `seconds` 0)
//   replayed-counted  one replayed as counted
//   start             the parameter server of epoch `epoch` starts from the state of `step` (a new
//                     run: 0; a resume: its checkpoint's step)
//   takeover          the parameter server of epoch `epoch` took a lost one over from the state of
//                     `step` (its replica, or a surviving shard's state); its replayed pushes follow
//   checkpoint        the parameter server of epoch `epoch` published its checkpoint of `step`
// FILE.acks/, one file per worker process (`rank<R>-pid<P>.csv`), header
// `slot,push_id,step,applied,epoch,unix_time`: each push of that worker shard 0 acknowledged, with
// the global step its reply gave and the replying parameter server's epoch.
//
// Each line is one write(2) to a file opened for appending: a process killed at any moment leaves
// every line it wrote whole, and the lines of two processes never interleave. Virtual runs write
// FILE's applied lines (slot and push_id -1, epoch 0).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ps/ps.hpp"

namespace mt {

// A file of lines, each appended with one write(2). Empty path: writes nothing. A line that cannot
// be written is said once on stderr and the file is given up (training goes on: the history is
// then incomplete, which its checker reports).
class AppendedLines {
 public:
  // Throws DataError when the file cannot be opened; the header goes into an empty file.
  AppendedLines(const std::string& path, const std::string& header, const char* what);
  AppendedLines(const AppendedLines&) = delete;
  AppendedLines& operator=(const AppendedLines&) = delete;
  ~AppendedLines();
  bool is_open() const { return fd_ >= 0; }
  void write(const std::string& line);

 private:
  std::string path_;
  const char* what_;
  int fd_ = -1;
};

class PushLog {
 public:
  explicit PushLog(const std::string& path);
  bool is_open() const { return out_.is_open(); }
  void pushed(const PsEvents::Pushed& e, std::int64_t epoch);
  // A virtual run's applied push.
  void write(std::int64_t step, int rank, std::int64_t pulled, double seconds);
  enum class Start { kStart, kTakeover };
  void started(Start kind, std::int64_t step, std::int64_t epoch);
  void checkpoint(std::int64_t step, std::int64_t epoch);

 private:
  AppendedLines out_;
};

// A worker's acknowledged pushes: FILE.acks/rank<R>-pid<P>.csv (made on the first acknowledgment).
class AckLog {
 public:
  AckLog(const std::string& push_log, int rank);
  void acknowledged(const WorkerOptions::Ack& a);

 private:
  std::string path_;
  std::unique_ptr<AppendedLines> out_;
};

}  // namespace mt
