// The exchange core of a worker, in the spirit of ps-lite's KVWorker: one push_pull sends this
// worker's push (or join) to every shard and receives their replies and the parameters. It owns
// the buffers, the shared-memory segments and doorbells of same-node shards, the requests in
// flight and their deadline, and reports what happened as a value (ok, stop, a shard reported
// failed, a shard silent). It knows nothing of notices, standbys or takeovers: run_worker
// (ps/resilience/worker.cpp), the fault-tolerance layer above it, decides what each answer means.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "ps/events.hpp"
#include "ps/wire/bell.hpp"
#include "ps/wire/partition.hpp"
#include "ps/wire/protocol.hpp"
#include "ps/wire/shm.hpp"
#include "ps/wire/transport.hpp"

namespace mt {

inline constexpr double kReportedByMpi = -1;  // PsLoss::waited when the MPI library (ULFM) reported it

// How a worker lost its parameter server.
struct PsLoss {
  int shard = 0;
  double waited = kReportedByMpi;  // seconds without an answer (--failure-timeout), or kReportedByMpi
  double at_unix = 0;              // when this worker learned of it
};

class WorkerClient {
 public:
  // kStop: a shard said stop (clean_end, failed_code say how); kFailed: the MPI library (ULFM)
  // reported a shard failed (`ps_failed` raised); kLost: a shard stayed silent past the deadline
  // (loss() says which and how long).
  enum class Reply { kOk, kStop, kFailed, kLost };

  // `mpi` is held for every MPI call (the worker's agent shares the library). `ps_failed` is the
  // flag `on_failed(shard)` raises, with `mpi` held, when the MPI library (ULFM) reports a shard
  // failed (the agent's thread may raise it too). `after_test`, with `mpi` held, runs after each
  // successful test of the replies (a standby takes its replicas there).
  WorkerClient(const WorkerOptions& opts, const Model& model, MPI_Comm comm, std::mutex& mpi,
               const std::atomic<bool>& ps_failed, std::function<void(int)> on_failed,
               std::function<void()> after_test);
  WorkerClient(const WorkerClient&) = delete;
  WorkerClient& operator=(const WorkerClient&) = delete;

  // The join's message: this worker's model and batch size (the shards check that it fits) and,
  // to same-node shards when `offer_shm`, a shared-memory segment per pair (ps/wire/shm.hpp).
  void prepare_join(bool offer_shm);
  // A push of `grads` and `batch_stats` with the step's loss, cursor and time. A synthetic
  // gradient (benchmark) is packed once.
  void prepare_push(const StepComputer::Step& st, const FlatTensors& grads, const FlatTensors& batch_stats,
                    bool synthetic, std::int64_t push_id);
  // --corrupt-push discard: the push prepared is marked not to be applied (kDiscardPush).
  void mark_discard();
  // A standby's push prepared tells shard s the step of its newest whole replica of that shard
  // (MsgHeader::replica_step; -1: none): what the shard's replies may say every standby holds.
  void mark_replica_held(int s, std::int64_t step) { send_.at(static_cast<std::size_t>(s)).header().replica_step = step; }
  // One exchange with every shard (`kind`: kJoin or kPush); on kOk the parameters are in params().
  // The replies are awaited `deadline` seconds (0: --failure-timeout for a push, for a join at
  // least a minute: the parameter server may load a checkpoint first).
  Reply push_pull(MsgKind kind, double deadline = 0);

  MsgHeader& first_reply() { return recv_.front().header(); }
  // For the push journal (ps/resilience/push_journal.hpp): shard s's message as prepared (header, payload), the
  // payload of its last reply (what the next gradient is computed on), that reply's header, and
  // whether its reply to the last exchange arrived (also when another shard failed in it).
  const MsgHeader& prepared(int s) { return send_[static_cast<std::size_t>(s)].header(); }
  std::span<const float> push_payload(int s);
  std::span<const float> pulled(int s);
  const MsgHeader& reply(int s) { return recv_[static_cast<std::size_t>(s)].header(); }
  bool replied(int s) const { return replied_[static_cast<std::size_t>(s)]; }
  // Shard s's process id when it runs on this node (it took this worker's shared-memory segment),
  // else 0.
  int local_pid(int s) const { return local_pid_[static_cast<std::size_t>(s)]; }
  // Waits up to `seconds` for the MPI library (ULFM) to report a shard of the last exchange
  // failed (on_failed raises `ps_failed`); whether it did. A reply that arrives meanwhile ends the
  // wait too (`answered`: the shard is alive, only slow; the reply is not used).
  bool await_failure(double seconds, bool* answered = nullptr);
  const FlatTensors& params() const { return params_; }
  const Partition& partition() const { return part_; }
  std::int64_t global_step() const { return global_step_; }           // the highest any shard replied
  bool clean_end() const { return clean_end_ && failed_code_ == 0; }  // every stop said no rank was lost
  int failed_code() const { return failed_code_; }                    // a shard said it failed, with this exit code
  bool rejected() const { return rejected_; }  // a shard stopped it: its pushes kept being rejected
  bool retired() const { return retired_; }    // a replacement whose slot its worker took back (kRetiredEnd)
  // A shard refused its join: the job's model size, batch size or push precision differ from this worker's.
  const std::optional<JobShape>& job_shape() const { return job_shape_; }
  const PsLoss& loss() const { return loss_; }
  // Seconds since shard s's last reply came (since this client was made, before the first), for
  // the other workers' witness asks (ps/resilience/witness.hpp). With the MPI lock held.
  double heard_ago(int s) const { return since(heard_[static_cast<std::size_t>(s)]); }
  // The longest this process went without polling while it waited for replies (seconds): longer
  // than --failure-timeout, it was suspended (SIGSTOP, a debugger, a frozen VM) and the parameter
  // server has dropped it, not the other way round.
  double longest_gap() const { return longest_gap_; }
  void reset_gap() { longest_gap_ = 0; }  // a rejoin: the suspension it was dropped for is over

  // After a clean stop (clean_end()): waits up to `deadline` seconds for every shard that said so to
  // confirm it once it has no live worker left (kEnd). kLost: a rank was found lost after the stop
  // (or a shard died since): MPI_Finalize's fence could wait for the dead, leave without it.
  // kUnknown: no answer in time (the stop's word stands).
  enum class EndCheck { kClean, kLost, kUnknown };
  EndCheck confirm_end(double deadline);

  // The communicator was revoked (a takeover): MPI may still hold the buffers of the exchange the
  // loss interrupted: they are kept to the end, fresh ones taken (no shared memory: the new
  // parameter server's messages go through MPI); requests on the revoked communicator are never
  // tested again.
  void renew();
  // The survivors' communicator, after a takeover.
  void set_comm(MPI_Comm comm) { comm_ = comm; }
  // The parameter server is lost: buffers with a request in flight are kept to the end of the
  // process (requests to the dead never complete), with no MPI call.
  void abandon_in_flight();
  // This worker was dropped while it was suspended and rejoins (Worker::rejoin): a reply receive
  // still posted is cancelled (the shard answers the join, not the push before it), a push in flight
  // left to complete (the shard drops it); then renew(). With the MPI lock held.
  void cancel_in_flight();

 private:
  std::int64_t send_floats(int s) const;   // float slots of a push to shard s
  std::int64_t reply_floats(int s) const;  // of its reply
  void post(MsgKind kind);                 // irecv + isend to every shard
  Reply wait_replies(double deadline);     // until every request completes
  // After a join's replies: a shard's that is a push's (stale: kParams naming no slots) is dropped
  // and its receive posted again. True: one was.
  bool repost_stale_join_replies();
  Reply tell_others_stop();                // shards that did not say stop are told this worker leaves
  void take_replies(MsgKind kind);         // segments accepted, parameters unpacked, versions

  const WorkerOptions& opts_;
  const Model& model_;
  const Partition part_;
  const int shards_;
  MPI_Comm comm_;
  std::mutex& mpi_;
  const std::atomic<bool>& ps_failed_;
  const std::function<void(int)> on_failed_;
  const std::function<void()> after_test_;
  FlatTensors params_;
  std::vector<float> scratch_;  // --push-precision bf16: one shard's part in fp32, before encoding or after decoding
  std::vector<Buffer> send_, recv_;
  std::vector<std::shared_ptr<ShmSegment>> offered_;  // until the join's reply
  std::vector<PairBells> bells_;                      // with the shards that took a segment
  BellWait replies_;                                  // the doorbells of the replies awaited
  std::vector<MPI_Request> reqs_;                     // shard s: 2s its reply, 2s + 1 this worker's message
  std::vector<MPI_Status> statuses_;
  std::vector<std::int64_t> version_;
  std::vector<bool> replied_;
  std::vector<Clock::time_point> heard_;  // each shard's last reply, written with the MPI lock held
  std::vector<int> local_pid_;
  Backoff backoff_{5, 1000};  // the time from a push to the replies
  std::int64_t global_step_ = 0;
  bool clean_end_ = true;
  int failed_code_ = 0;
  bool rejected_ = false, retired_ = false;
  std::optional<JobShape> job_shape_;
  bool packed_ = false;  // a synthetic gradient in the send buffers
  PsLoss loss_;
  double longest_gap_ = 0;
};

}  // namespace mt
