// Witnesses: the worker's failure detector does not trust one observer (docs/fault-model.md,
// "Partitions"). A worker that has heard nothing from a shard for --failure-timeout asks the other
// workers of its communicator when they last heard from that shard before it calls the parameter
// server lost (reports it failed to the runtime under ULFM; writes its replica and ends the job as
// a standby of the default build). One that heard from it since is proof that the shard lives and
// that the broken link is this worker's: it leaves, and the job goes on. None answering: this
// worker reaches no one (its own link is down), and it must not decide for the others either.
//
//   worker -> worker  kWitnessAsk on kTagWitnessAsk (no payload): request_id = the ask's number,
//                     model_version = the shard asked about
//   worker -> worker  kWitnessAnswer on kTagWitnessAnswer: request_id = the ask's number, step =
//                     the answerer's global step; payload: per shard, the seconds since the
//                     answerer last heard from it (a reply), measured when it answers
//
// Every worker answers from its heartbeat thread (WitnessDesk::serve), so also while its step
// computes; a worker that reached a verdict keeps answering a while before it ends (the others,
// whose silence began at other moments, ask a little later).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "ps/wire/transport.hpp"

namespace mt {

struct WitnessVerdict {
  enum class Kind {
    kNoPeers,      // no other worker to ask (one worker, a joiner): this worker's silence decides
    kSilentToAll,  // every worker that answered is as deaf to the shard: it is lost
    kAlive,        // another worker heard the shard after this one's silence began: the link is ours
    kIsolated,     // no other worker answered: this worker reaches no one (its own link)
    // ULFM: every ask failed in the MPI library at once (the others reported failed, or the
    // communicator revoked by a takeover under way): a failure, not this worker's link
    kFailureReported
  };
  Kind kind = Kind::kNoPeers;
  int asked = 0;
  int answered = 0;
  int witness = -1;          // kAlive: the rank that heard the shard
  double heard_ago = -1;     // kAlive: how long before its answer it heard it (s)
  double waited = 0;         // seconds the ask took
  std::string describe(int shard) const;  // for the worker's line
};

// Answers the other workers' asks: one receive posted per other worker of `comm` (ranks `shards`
// and up, this one excepted; no MPI_ANY_SOURCE, which ULFM fails on any process's death).
// Every call with the MPI lock held.
class WitnessDesk {
 public:
  WitnessDesk(MPI_Comm comm, int shards);
  WitnessDesk(const WitnessDesk&) = delete;
  WitnessDesk& operator=(const WitnessDesk&) = delete;
  ~WitnessDesk();  // close()
  // Every ask that came is answered with heard_ago(shard) for each shard (seconds; -1: never).
  void serve(const std::function<double(int)>& heard_ago, std::int64_t global_step);
  // The receives cancelled (or, where they cannot be, abandoned) and the answers in flight kept to
  // the end of the process: none is waited for.
  void close();

 private:
  MPI_Comm comm_;
  int shards_;
  std::vector<int> peers_;
  std::vector<Buffer> asks_;
  std::vector<MPI_Request> reqs_;
  std::vector<Buffer> answers_;
  std::vector<MPI_Request> answer_reqs_;
};

// Asks every other worker of `comm` about `shard`, whose silence to this worker has lasted
// `silence` seconds, and waits up to `timeout` seconds (less once every one answered or one heard
// it). `lock`: the MPI lock, taken for each poll. A worker heard the shard if its answer's age is
// below `silence` - `margin` at the answer (the shard answered it clearly after it stopped
// answering this worker).
WitnessVerdict ask_witnesses(MPI_Comm comm, int shards, int shard, double silence, double margin, double timeout,
                             std::mutex& lock);

}  // namespace mt
