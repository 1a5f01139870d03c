// Fault injection, independent of MPI (the notices it may send are ps/resilience/notices.hpp's):
//  - `--revoke "rank=2@30s,rank=3@step=400"`: real revocations at chosen times (the process
//    signals itself, SIGKILL unless the entry names another signal);
//  - `--revocation-model`: lifetimes sampled from a table of the cumulative fraction of servers
//    revoked by age (the GCE preemptible model is built in; tables are data files), which the
//    virtual simulator and `plan` use too.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/clock.hpp"
#include "ps/resilience/notices.hpp"

namespace mt {

// One `--revoke` entry: at `seconds` of this process's run time, at global step `step`, or in
// the middle of writing its `ckpt_write`-th checkpoint (rank 0 only; a test of torn writes).
struct RevokeEntry {
  int rank = -1;
  double seconds = -1;
  std::int64_t step = -1;
  std::int64_t ckpt_write = -1;
  std::int64_t replica_send = -1;  // rank=0@replica=N: as the Nth replica to the standby leaves
  std::int64_t takeover = -1;      // rank=R@takeover=N: a worker inside its Nth takeover (ULFM)
  std::int64_t replay = -1;        // rank=R@replay=N: the new parameter server halfway through its Nth journal replay
  int signal = 9;                  // SIGKILL
};

// Parses "rank=R@30s", "rank=R@2.5m", "rank=R@step=N", "rank=R@ckpt=N", "rank=0@replica=N",
// "rank=R@takeover=N", "rank=R@replay=N", each optionally
// followed by ":KILL", ":TERM" or ":USR1", comma-separated. Throws UsageError.
std::vector<RevokeEntry> parse_revoke(const std::string& spec);
// "30s", "2.5m", "2h" (--revoke, --virtual-joins) into `seconds`; else why not ("" when parsed).
std::string parse_duration(const std::string& text, double& seconds);

// --corrupt-push: what a worker does to one of its pushes, to test the parameter server's push
// check (ps/exchange/push_check.hpp): NaN in every 1024th gradient value and the last (every shard's part), every
// value times 1e6, every value zero (a device that returns nothing; the reference that shows the
// parameter server's state untouched by a push), or the push sent as it is but marked not to be
// applied (the reference run: a rejected push must leave the state exactly as a discarded one does).
enum class PushFault { kNone, kNan, kHuge, kZero, kDiscard };
// This rank's entries of "rank=R@push=N:nan|huge|zero|discard,..." by its push number N (1: its first
// push after joining). Throws UsageError naming a malformed entry.
std::map<std::int64_t, PushFault> parse_corrupt_push(const std::string& spec, int rank);

// What --revoke and --revocation-model ask of this process. The process signals itself: SIGKILL
// ends it where it stands (like a revoked VM), a notice signal sets the notice flag.
struct FaultPlan {
  std::vector<RevokeEntry> entries;  // this rank's, each fired once
  double lifetime_seconds = -1;      // sampled from the model (workers); negative: none
  Clock::time_point start = Clock::now();
  // Called before an entry due at a step or a time kills this process (a shard's test hook:
  // MT_FAULT_DUMP_DIR, ps/resilience/shard_takeover.cpp); empty: none.
  std::function<void()> before_kill;

  // This rank's entries of `revoke` and, for a worker, a lifetime drawn from `model` (empty: none;
  // gce: the table of its `instance_type`) with `seed` (each attempt of launch/restart_loop.sh,
  // MT_RESTART_ATTEMPT, draws anew). Throws UsageError for a rank outside the job, DataError for a
  // bad model file.
  static FaultPlan make(const std::string& revoke, const std::string& model, std::uint64_t seed, double time_scale,
                        int num_ps, int rank, int size, const std::string& instance_type);

  static void fire(int rank, int signo, const std::string& why);
  // The global step this run started from: entries at or below it were for an earlier attempt.
  void started_at(std::int64_t step);
  // Entries due at this global step (workers see the step jump by several between replies).
  void at_step(int rank, std::int64_t step);
  // Entries due by now (run time), and the model's lifetime.
  void at_time(int rank);
  // `rank=0@ckpt=N[:SIG]`: a function for the checkpoint writer to call in the middle of each write,
  // which kills this process in the Nth; empty when no entry asks.
  std::function<void(std::int64_t global_step)> checkpoint_write_hook() const;
  // `rank=0@replica=N[:SIG]`: the Nth replica sent to the standby (--ps-standby) has just left,
  // not yet arrived: fires now (a kill in the middle of replication).
  void at_replica(int rank, std::int64_t nth, std::int64_t global_step);
  // `rank=R@takeover=N[:SIG]`: this worker is inside its Nth takeover of a lost parameter server
  // (ULFM), the communicator revoked, the survivors' agreement ahead: fires now (a second failure
  // inside the recovery).
  void at_takeover(int rank, int nth);
  // `rank=R@replay=N[:SIG]`: worker R took the parameter server over and is halfway through
  // replaying the survivors' push journals for the Nth time (ps/resilience/push_journal.hpp): fires now (a
  // second failure inside the replay).
  void at_replay(int rank);
  int replays = 0;  // journal replays so far (at_replay)
};

}  // namespace mt
