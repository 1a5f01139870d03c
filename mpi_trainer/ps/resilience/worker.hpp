// A worker's life (run_worker, ps/ps.hpp): the fault-tolerance layer over its exchange core. Its
// loop, notices and ends are worker.cpp's; the takeover of a lost parameter server (ULFM) is
// worker_takeover.cpp's. Internal to ps/.
#pragma once

#include <algorithm>
#include <iostream>
#include <limits>
#include <string>
#include <utility>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "ps/events.hpp"
#include "ps/exchange/worker_agent.hpp"
#include "ps/exchange/worker_client.hpp"
#include "ps/resilience/push_journal.hpp"
#include "ps/resilience/replica.hpp"
#include "ps/resilience/witness.hpp"
#include "ps/wire/mpi_env.hpp"
#include "ps/wire/ulfm.hpp"

namespace mt {

// The fault-tolerance layer of a worker over its exchange core (WorkerClient): what a notice, a
// standby's replicas, a lost parameter server and (ULFM) a takeover mean for it. run() is the
// worker's life: join, then push and pull until a stop, a notice or the loss of the parameter server.
class Worker {
 public:
  Worker(const WorkerOptions& opts, const Model& model, MPI_Comm ps, int rank, FaultPlan plan,
         const std::function<std::unique_ptr<StepComputer>()>& make_computer)
      : opts_(opts),
        model_(model),
        rank_(rank),
        shards_(opts.num_ps),
        takeover_(opts.takeover && ulfm_available() && rank >= 0),
        plan_(std::move(plan)),
        comm_(ps) {
    start_agent();  // first: heartbeats must flow before anything slow happens here
    if (!opts.synthetic_gradients) computer_ = make_computer();
    client_.emplace(
        opts, model, comm_, mpi_lock_, ps_failed_, [this](int s) { reported_failed(s); }, [this] { take_replicas(); });
    if (takeover_ && opts.push_journal) journal_.emplace(shards_);
    open_desk();
  }
  // The agent first (it serves the desk), then the desk.
  ~Worker() {
    stop_agent();
    close_desk();
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  const std::vector<int>& hung() const { return hung_; }
  WorkerResult run() {
    client_->prepare_join(true);
    const Exchange joined = exchange(MsgKind::kJoin);
    if (joined == Exchange::kLost) return end_lost();
    if (joined == Exchange::kCutOff) return end_cut_off();
    if (joined == Exchange::kBecamePs) return std::move(res_);
    if (joined == Exchange::kStopped) return refused();
    plan_.started_at(client_->global_step());
    if (leave_if_noticed()) return std::move(res_);
    start_computing();
    for (;;) {
      StepComputer::Step st;
      if (computer_) st = computer_->step(client_->params(), grads_, batch_stats_);
      if (agent_->left()) break;  // at --drain-deadline, while this step computed: its gradient is dropped
      // Stopped while it computed, past --failure-timeout since shard 0 last answered (a heartbeat
      // thread merely starved is no drop: the pushes went on): dropped meanwhile, so this step's
      // gradient is not pushed.
      if (suspended() > opts_.failure_timeout && client_->heard_ago(0) > opts_.failure_timeout) {
        if (auto end = come_back(false)) return std::move(*end);
        continue;
      }
      const PushFault fault = corrupt(res_.pushes + 1);
      client_->prepare_push(st, grads_, batch_stats_, !computer_, push_base_ + res_.pushes + 1);
      if (fault == PushFault::kDiscard) client_->mark_discard();
      for (int s = 0; s < shards_; ++s)
        client_->mark_replica_held(s, replicas_ ? replicas_->newest_step(s) : -1);
      ++res_.pushes;
      journal_push();
      const Exchange more = exchange(MsgKind::kPush);
      if (more == Exchange::kLost) return end_lost();
      if (more == Exchange::kCutOff || more == Exchange::kDropped) {
        if (auto end = come_back(more == Exchange::kCutOff)) return std::move(*end);
        continue;
      }
      if (more == Exchange::kBecamePs) return std::move(res_);
      if (more == Exchange::kStopped) {
        // The end: a clean one may wait for shard 0's final checkpoint and evaluation in MPI_Finalize.
        res_.clean_end = client_->clean_end();
        res_.exit_code = client_->failed_code();
        // A retired replacement (a process spawned for the job, not launched with it) ends with
        // MPI_Finalize: without it PRRTE counts its exit 0 an abnormal one and the launcher's exit
        // turns 1 (Open MPI 5); its finalize waits for no rank of the job.
        res_.peer_lost = !res_.clean_end && res_.exit_code == 0 && !client_->retired();
        if (res_.clean_end) confirm_end();
        if (client_->retired()) std::cerr << retired_line() << std::flush;
        if (client_->rejected())
          std::cerr << "mpi_trainer: " + worker_label(rank_) +
                           ": the parameter server rejected its last pushes (values not finite, or too large for "
                           "--push-norm-limit) and dropped it; the job goes on without it; exit 0\n"
                    << std::flush;
        break;
      }
      if (leave_if_noticed()) break;
    }
    return std::move(res_);
  }

 private:
  // kCutOff: the parameter server is silent to this worker alone (witnessed_ says how it knows).
  // kDropped: this process was suspended past --failure-timeout: the silence was its own.
  enum class Exchange { kGoOn, kStopped, kBecamePs, kLost, kCutOff, kDropped };

  // The stops said no rank was lost; a worker that died just before the end may be found only
  // after them (--failure-timeout): the shards confirm or withdraw it once they are settled. The
  // wait covers the slowest worker's last step and a silent one's detection.
  void confirm_end() {
    const double deadline = std::max(60.0, 10 * opts_.failure_timeout);
    if (client_->confirm_end(deadline) != WorkerClient::EndCheck::kLost) return;
    res_.clean_end = false;
    res_.peer_lost = true;
    std::cerr << "mpi_trainer: " + worker_label(rank_) +
                     ": a rank was lost just before the end: leaving without MPI_Finalize (it could wait "
                     "for the dead rank)\n"
              << std::flush;
  }

  // --corrupt-push: this push's fault, done to the gradient (nan, huge, zero); discard marks the push.
  PushFault corrupt(std::int64_t push) {
    const auto it = opts_.push_faults.find(push);
    if (it == opts_.push_faults.end()) return PushFault::kNone;
    float* g = grads_.flat().data();
    const std::int64_t n = grads_.flat().numel();
    if (it->second == PushFault::kNan)  // every 1024th value and the last: in every shard's part
      for (std::int64_t i = 0; i < n; i += (i + 1024 < n ? 1024 : std::max<std::int64_t>(1, n - 1 - i)))
        g[i] = std::numeric_limits<float>::quiet_NaN();
    if (it->second == PushFault::kHuge)
      for (std::int64_t i = 0; i < n; ++i)
        g[i] *= 1e6f;
    if (it->second == PushFault::kZero) std::fill_n(g, n, 0.f);
    return it->second;
  }
  enum class Recovered { kRejoin, kBecamePs, kLost };  // kBecamePs: res_.takeover; kLost: lost_

  void start_agent() {
    agent_.emplace(
        mpi_lock_, comm_, opts_, rank_, plan_,
        [this] {
          take_replicas();
          serve_witnesses();
        },
        [this](int s) { reported_failed(s); });
  }
  // The witness desk (ps/resilience/witness.hpp) on comm_, served by the agent: made once the
  // client exists (its replies' times are the answers) and again on the survivors' communicator.
  void open_desk() {
    const std::lock_guard<std::mutex> lock(mpi_lock_);
    if (rank_ >= 0) desk_.emplace(comm_, shards_);  // a joiner shares no communicator with the workers
  }
  void close_desk() {
    const std::lock_guard<std::mutex> lock(mpi_lock_);
    desk_.reset();
  }
  // With the MPI lock held (the agent's beat).
  void serve_witnesses() {
    if (desk_) desk_->serve([this](int s) { return client_->heard_ago(s); }, client_->global_step());
  }
  // Ends the heartbeat thread (its gap to now counted: under ULFM a verdict can come the moment a
  // stopped process is continued, before that thread ticks again).
  void stop_agent() {
    if (!agent_) return;
    agent_gap_ = std::max(agent_gap_, agent_->stop());
    agent_.reset();
  }
  // The longest this process went unscheduled, as either thread saw it (seconds): longer than
  // --failure-timeout, the silence the parameter server heard was this process's own. The running
  // heartbeat thread's gaps count too: a worker stopped while it computed (no wait of its own
  // polling) sees its pause there alone (before, it then took the parameter server that had
  // dropped it for hung and reported it failed under ULFM: nemesis.sh `pause`, 2026-12-06).
  double suspended() const {
    return std::max({client_->longest_gap(), agent_gap_, agent_ ? agent_->longest_gap() : 0.0});
  }
  // The MPI library (ULFM) reported shard `s` failed (with the MPI lock held, on either thread):
  // flagged for the main thread, which at its next exchange ends this worker or (a takeover
  // ahead) takes the parameter server over.
  void reported_failed(int s) {
    if (!ps_failed_) reported_ = PsLoss{s, kReportedByMpi, unix_now()};
    ps_failed_ = true;
  }
  // With the MPI lock held (the exchange's polls, or the agent while a step computes).
  void take_replicas() {
    try {
      replicas_->poll(comm_);
    } catch (const ProcessFailed&) {  // ULFM: a shard died
      reported_failed(0);
    } catch (const std::exception& e) {
      // A malformed replica (a parameter server of another build) or a failed receive: this
      // worker trains on as before, without a replica (also on the heartbeat thread).
      replicas_->close();
      std::cerr << "mpi_trainer: " + worker_label(rank_) + ": warning: no standby replica here: " + e.what() + "\n"
                << std::flush;
    }
  }
  std::string retired_line() const {
    return "mpi_trainer: " + worker_label(rank_) +
           ": the worker whose data slot this replacement took was dropped while alive and came back: "
           "it takes the slot again, this replacement stops; exit 0\n";
  }
  // The join was answered with a stop.
  WorkerResult refused() {
    res_.exit_code = client_->failed_code();
    if (const auto& job = client_->job_shape()) {
      const JobShape mine{model_.param_count(), opts_.batch_size, opts_.push_precision};
      res_.refused = "the parameter server refused this worker: the job trains " + job->describe() + ", this worker " +
                     mine.describe() + " (give `join` the job's --model, --batch-size and --push-precision)";
      return std::move(res_);
    }
    if (client_->retired()) {
      std::cerr << retired_line() << std::flush;
      return std::move(res_);
    }
    // The parameter server's own message says what failed; a worker of the job adds nothing.
    if (res_.exit_code == 0 && !opts_.quiet)
      std::cerr << "mpi_trainer: " << worker_label(rank_) << ": the parameter server did not take this worker "
                << "(training over, no free slot, or another model or batch size)\n"
                << std::flush;
    return std::move(res_);
  }
  // Shard 0 says which data slot of how many this worker trains (the launched workers, or the
  // --max-workers slots) and where it continues (a resume) or starts.
  void start_computing(bool rejoined = false) {
    const MsgHeader h = client_->first_reply();
    my_slot_ = h.slot;
    data_slots_ = std::max(1, h.slots);
    // A joiner (a replacement, a rejoined worker) numbers its pushes on from the last its data
    // slot's previous worker made (the reply's push_id): a push is its slot's and number's, once
    // (the history).
    if (rank_ < 0 || rejoined) push_base_ = h.push_id - (rejoined ? res_.pushes : 0);
    if (computer_) {
      computer_->start(h.slot, data_slots_, LoaderCursor{h.cursor_epoch, h.cursor_position});
    } else {
      // Benchmark: a fixed, harmless gradient and the initial BN statistics; no compute.
      model_.init_params(grads_, batch_stats_, opts_.seed);
      for (std::int64_t i = 0; i < grads_.flat().numel(); ++i)
        grads_.flat().data()[i] *= 1e-6f;
    }
  }
  // The push journal (ps/resilience/push_journal.hpp): the push about to be sent, then each shard's reply to it.
  void journal_push() {
    if (!journal_) return;
    journal_->record(my_slot_, push_base_ + res_.pushes);
    for (int s = 0; s < shards_; ++s)
      journal_->part(s, client_->prepared(s), client_->push_payload(s), client_->pulled(s));
  }
  void journal_replies(bool all) {
    if (!journal_ || journal_->entries() == 0) return;
    for (int s = 0; s < shards_; ++s)
      if (all || client_->replied(s)) journal_->acknowledge(s, client_->reply(s));
    res_.push_journal_peak_bytes = journal_->peak_bytes();
    res_.push_journal_peak_pushes = journal_->peak_entries();
    res_.push_journal_dropped = journal_->dropped();
  }
  // Shard 0's reply to this worker's push, for the run's history (WorkerOptions::on_acknowledged).
  void acknowledged() {
    if (!opts_.on_acknowledged) return;
    const MsgHeader& r = client_->reply(0);
    if (r.kind != MsgKind::kParams || r.push_id <= 0) return;
    opts_.on_acknowledged(WorkerOptions::Ack{my_slot_, r.push_id, r.step, r.applied != 0, r.epoch});
  }
  bool end_hung_shard();
  // Dropped while suspended, or cut off from the parameter server: rejoins the job (rejoin) and
  // computes on from what shard 0 answers; nothing when it did, else how this worker ends (worker.cpp).
  std::optional<WorkerResult> come_back(bool cut_off);
  Exchange rejoin(bool cut_off);
  bool cut_off();
  void stop_serving();
  WorkerResult end_cut_off();
  bool leave_if_noticed();
  Exchange exchange(MsgKind kind);
  Recovered recover();
  WorkerResult end_lost();
  WorkerResult end_dropped(const std::string& line);
  std::string suspended_line(double seconds, const std::string& then) const;

  const WorkerOptions& opts_;
  const Model& model_;
  const int rank_, shards_;
  const bool takeover_;  // ULFM, a launched worker: the survivors take a lost parameter-server shard over
  FaultPlan plan_;
  MPI_Comm comm_;          // the parameter server's; a takeover replaces it with the survivors'
  std::vector<int> hung_;  // world ranks of hung shards this worker reported failed, no takeover agreed yet
  std::mutex mpi_lock_;
  // A standby's replicas of the shards (any worker may be made one, at any time), taken with the
  // MPI lock held by the polls and by the agent while a step computes.
  std::optional<ReplicaHost> replicas_{std::in_place, shards_};
  std::atomic<bool> ps_failed_{false};
  PsLoss reported_;             // with the MPI lock held
  std::optional<PsLoss> lost_;  // the main thread's verdict: the parameter server is lost
  std::optional<WorkerAgent> agent_;
  std::optional<WitnessDesk> desk_;           // with the MPI lock held
  std::optional<WitnessVerdict> witnessed_;  // the other workers' word on the last silence
  double agent_gap_ = 0;  // the longest gap of the heartbeat threads stopped so far
  double rejoining_ = 0;  // in rejoin's exchange, how long it waits: no answer ends this worker (no witnesses, no takeover)
  // Declared after the agent: destroyed before it, so the replicas are closed first (as before).
  struct CloseReplicas {
    std::mutex& lock;
    std::optional<ReplicaHost>& host;
    ~CloseReplicas() {
      const std::lock_guard<std::mutex> hold(lock);
      if (host) host->close();
    }
  } close_replicas_{mpi_lock_, replicas_};
  std::unique_ptr<StepComputer> computer_;
  FlatTensors grads_{model_.params()}, batch_stats_{model_.stats()};
  std::optional<WorkerClient> client_;
  // Under a takeover with standbys (WorkerOptions::push_journal): this worker's pushes that the newest
  // replica may not hold.
  std::optional<PushJournal> journal_;
  int my_slot_ = rank_ - shards_, data_slots_ = 0;  // shard 0's answer to the first join says
  std::int64_t push_base_ = 0;                       // a joiner's: its slot's last push number before it
  WorkerResult res_;
};

}  // namespace mt
