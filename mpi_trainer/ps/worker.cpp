// The worker: pulls parameters, computes a gradient on its own mini-batch (StepComputer, from the
// app), pushes it to every shard, and repeats until a shard says stop.
#include <atomic>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <sstream>

#include "core/error.hpp"
#include "ps/mpi_env.hpp"
#include "ps/partition.hpp"
#include "ps/ps.hpp"
#include "ps/recovery.hpp"
#include "ps/replica.hpp"
#include "ps/transport.hpp"
#include "ps/ulfm.hpp"
#include "ps/worker_agent.hpp"
#include "ps/worker_client.hpp"

namespace mt {

namespace {

// One line (one write: lines of several workers do not interleave).
std::string loss_line(int rank, const PsLoss& loss) {
  std::ostringstream line;
  line << "mpi_trainer: " << worker_label(rank) << ": parameter-server shard " << loss.shard;
  if (loss.waited < 0)
    line << " failed (reported by the MPI library, ULFM)";
  else
    line << " did not answer within " << std::setprecision(3) << loss.waited << " s (--failure-timeout)";
  line << " at unix " << std::fixed << std::setprecision(3) << loss.at_unix << ": the parameter server is lost; exit "
       << kExitPsLost << '\n';
  return line.str();
}

}  // namespace

// The fault-tolerance layer of a worker over its exchange core (WorkerClient): what a notice, a
// standby's replicas, a lost parameter server and (ULFM) a takeover mean for it.
WorkerResult run_worker(const WorkerOptions& opts, const Model& model, MPI_Comm ps, int rank, FaultPlan plan,
                        const std::function<std::unique_ptr<StepComputer>()>& make_computer) {
  const int shards = opts.num_ps;
  // ULFM, a launched worker: the survivors take a lost parameter-server shard over.
  const bool takeover = opts.takeover && ulfm_available() && rank >= 0;
  MPI_Comm comm = ps;  // the parameter server's; a takeover replaces it with the survivors'
  std::mutex mpi_lock;
  // A standby's replicas of the shards (any worker may be made one, at any time), taken with the
  // MPI lock held by the polls below and by the agent while a step computes.
  std::optional<ReplicaHost> replicas(std::in_place, shards);
  // The MPI library (ULFM) reported shard `s` failed (with `mpi_lock` held, on either thread):
  // flagged for the main thread, which at its next exchange ends this worker or (a takeover
  // ahead) takes the parameter server over.
  std::atomic<bool> ps_failed{false};
  PsLoss reported;  // with `mpi_lock` held
  auto reported_failed = [&](int s) {
    if (!ps_failed) reported = PsLoss{s, kReportedByMpi, unix_now()};
    ps_failed = true;
  };
  std::optional<PsLoss> lost;  // the main thread's verdict: the parameter server is lost
  auto take_replicas = [&] {
    try {
      replicas->poll(comm);
    } catch (const ProcessFailed&) {  // ULFM: a shard died
      reported_failed(0);
    } catch (const std::exception& e) {
      // A malformed replica (a parameter server of another build) or a failed receive: this
      // worker trains on as before, without a replica (also on the heartbeat thread).
      replicas->close();
      std::cerr << "mpi_trainer: " + worker_label(rank) + ": warning: no standby replica here: " + e.what() + "\n"
                << std::flush;
    }
  };
  // First: heartbeats must flow before anything slow happens here.
  std::optional<WorkerAgent> agent;
  auto start_agent = [&] { agent.emplace(mpi_lock, comm, opts, rank, plan, take_replicas, reported_failed); };
  start_agent();
  struct CloseReplicas {
    std::mutex& lock;
    std::optional<ReplicaHost>& host;
    ~CloseReplicas() {
      const std::lock_guard<std::mutex> hold(lock);
      if (host) host->close();
    }
  } close_replicas{mpi_lock, replicas};
  std::unique_ptr<StepComputer> computer;
  if (!opts.synthetic_gradients) computer = make_computer();
  FlatTensors grads(model.params()), batch_stats(model.stats());
  WorkerClient client(opts, model, comm, mpi_lock, ps_failed, reported_failed, take_replicas);
  int my_slot = rank - shards, data_slots = 0;  // shard 0's answer to the first join says

  // After a reply: a notice ends this worker here (its last step is pushed), and --revoke
  // entries for this global step fire.
  auto leave_if_noticed = [&] {
    plan.at_step(rank, client.global_step());
    const int sig = notice_signal();
    if (!sig) return false;
    if (agent->claim_leave()) {
      std::lock_guard<std::mutex> lock(mpi_lock);
      WorkerAgent::send_leave(comm, shards, sig, opts.failure_timeout);
    }
    if (!opts.quiet)
      std::cerr << "mpi_trainer: " << worker_label(rank) << ": " << signal_name(sig)
                << ": pushed its last step and left at global step " << client.global_step() << '\n'
                << std::flush;
    return true;
  };

  // The takeover of a lost parameter-server shard (ULFM; docs/fault-model.md, "Takeover under
  // ULFM"). Every survivor comes here (the surviving shards too, ps/run_ps.cpp): the first to learn
  // of the loss revokes the communicator, so that the others' next MPI call fails too (a worker
  // computing a step comes at its end). Together they shrink it and agree (ps/recovery.hpp): the
  // worker holding the newest replica becomes shard 0 of the new parameter server and starts it
  // from that replica, the surviving shards follow it, the global step counts on from the highest
  // any survivor saw. That worker gets its Takeover; the others keep their data slots and cursors
  // and join the new parameter server (`comm` is theirs). When no takeover is possible (no whole
  // replica, two shards lost, none left to train) or another process fails meanwhile, each ends
  // as without a takeover (a standby writing its replica first): the restart resumes from the
  // newest checkpoint.
  WorkerResult res;
  enum class Recovered { kRejoin, kBecamePs, kLost };  // kBecamePs: res.takeover; kLost: `lost`
  auto recover = [&]() -> Recovered {
    const double lost_at = unix_now();
    agent.reset();  // no heartbeats to the dead; MPI is this thread's alone from here
    const std::lock_guard<std::mutex> lock(mpi_lock);
    try {
      replicas->poll(comm);  // a replica received whole but not yet taken (a handover's last)
    } catch (const std::exception&) {
    }
    std::optional<ReplicaState> held = replicas->assemble(model, client.partition());
    try {
      ulfm_revoke(comm);
      client.renew();
      replicas->close();
      std::string why;
      std::optional<TakeoverPlan> agreed = agree_takeover(
          comm, SurvivorOffer{held ? held->global_step : -1, client.global_step(), rank, -1, my_slot}, shards, &why);
      if (!agreed) {  // a standby writes its replica for the restart (end_lost)
        if (!opts.quiet) std::cerr << "mpi_trainer: " + worker_label(rank) + ": " + why + ": no takeover\n" << std::flush;
        lost = PsLoss{0, kReportedByMpi, lost_at};
        return Recovered::kLost;
      }
      ++res.takeovers;
      if (agreed->shard < 0) {
        comm = agreed->comm;
        client.set_comm(comm);
        return Recovered::kRejoin;
      }
      MT_ASSERT(agreed->shard == 0 && held, "the replica's holder becomes shard 0");
      Takeover t;
      t.comm = agreed->comm;
      t.first_step = agreed->first_step;
      t.replica = std::move(*held);
      t.worker_ranks = std::move(agreed->worker_ranks);
      t.worker_slots = std::move(agreed->worker_slots);
      t.lost_shards = std::move(agreed->lost_shards);
      t.data_slots = data_slots;
      t.lost_at = lost_at;
      t.takeovers = res.takeovers;
      t.plan = std::move(plan);
      res.takeover = std::move(t);
      return Recovered::kBecamePs;
    } catch (const ProcessFailed&) {  // another process failed during the takeover
      lost = PsLoss{0, kReportedByMpi, lost_at};
      return Recovered::kLost;
    }
  };
  // One exchange; when the parameter server is lost in it (a takeover ahead): take it over, or
  // join the survivors' parameter server (lost too: again). kLost: `lost` says how.
  enum class Exchange { kGoOn, kStopped, kBecamePs, kLost };
  auto exchange = [&](MsgKind kind) -> Exchange {
    for (;;) {
      switch (client.push_pull(kind)) {  // kFailed: a push in flight is lost with the parameter server
        case WorkerClient::Reply::kOk: return Exchange::kGoOn;
        case WorkerClient::Reply::kStop: return Exchange::kStopped;
        case WorkerClient::Reply::kLost: lost = client.loss(); return Exchange::kLost;
        case WorkerClient::Reply::kFailed: break;
      }
      if (!takeover) {
        const std::lock_guard<std::mutex> lock(mpi_lock);
        lost = reported;
        return Exchange::kLost;
      }
      switch (recover()) {
        case Recovered::kBecamePs: return Exchange::kBecamePs;
        case Recovered::kLost: return Exchange::kLost;
        case Recovered::kRejoin: break;
      }
      ps_failed = false;
      replicas.emplace(shards);
      start_agent();
      client.prepare_join(false);  // the new parameter server's messages go through MPI
      kind = MsgKind::kJoin;
    }
  };
  // The parameter server is lost (`lost`), no takeover follows: this worker says so, a standby
  // writes its replica as the newest checkpoint (WorkerOptions::on_ps_lost), and it returns
  // kExitPsLost with `ps_lost` set. Nothing on the way out waits on MPI (Open MPI 4.1 never
  // completes a send to a dead peer): heartbeats, replica receives and exchange buffers in flight
  // are abandoned, kept to the end of the process, whose main leaves without MPI_Finalize.
  auto end_lost = [&]() -> WorkerResult {
    if (agent) {
      agent->ps_lost();
      agent.reset();
    }
    const std::lock_guard<std::mutex> lock(mpi_lock);
    unlink_pending_segments();
    std::cout << std::flush;
    std::cerr << loss_line(rank, *lost) << std::flush;
    if (opts.on_ps_lost) {
      try {
        if (auto r = replicas->assemble(model, client.partition())) {
          opts.on_ps_lost(*r);
        } else if (replicas->any() && !opts.quiet) {  // a standby that has not heard from every shard yet
          std::cerr << "mpi_trainer: " + worker_label(rank) +
                           " (standby): no replica from every shard yet: the restart resumes from the newest checkpoint\n"
                    << std::flush;
        }
      } catch (...) {
        const ErrorReport e = describe_error(std::current_exception());
        std::cerr << "mpi_trainer: " + worker_label(rank) + ": error: " + e.what + "\n" << std::flush;
      }
    }
    replicas->abandon_receives();
    client.abandon_in_flight();
    res.exit_code = kExitPsLost;
    res.ps_lost = true;
    return std::move(res);
  };

  client.prepare_join(true);
  const Exchange joined = exchange(MsgKind::kJoin);
  if (joined == Exchange::kLost) return end_lost();
  if (joined == Exchange::kBecamePs) return res;
  if (joined == Exchange::kStopped) {
    res.exit_code = client.failed_code();
    // The parameter server's own message says what failed; a worker of the job adds nothing.
    if (res.exit_code == 0 && !opts.quiet)
      std::cerr << "mpi_trainer: " << worker_label(rank) << ": the parameter server did not take this worker "
                << "(training over, no free slot, or another model or batch size)\n"
                << std::flush;
    return res;
  }
  plan.started_at(client.global_step());
  if (leave_if_noticed()) return res;
  // Shard 0 says which data slot of how many this worker trains (the launched workers, or the
  // --max-workers slots) and where it continues (a resume) or starts.
  const MsgHeader h = client.first_reply();
  my_slot = h.slot;
  data_slots = std::max(1, h.slots);
  if (computer) {
    computer->start(h.slot, data_slots, LoaderCursor{h.cursor_epoch, h.cursor_position});
  } else {
    // Benchmark: a fixed, harmless gradient and the initial BN statistics; no compute.
    model.init_params(grads, batch_stats, opts.seed);
    for (std::int64_t i = 0; i < grads.flat().numel(); ++i)
      grads.flat().data()[i] *= 1e-6f;
  }
  for (;;) {
    StepComputer::Step st;
    if (computer) st = computer->step(client.params(), grads, batch_stats);
    if (agent->left()) break;  // at --drain-deadline, while this step computed: its gradient is dropped
    client.prepare_push(st, grads, batch_stats, !computer);
    ++res.pushes;
    const Exchange more = exchange(MsgKind::kPush);
    if (more == Exchange::kLost) return end_lost();
    if (more == Exchange::kBecamePs) return res;
    if (more == Exchange::kStopped) {
      // The end: a clean one may wait for shard 0's final checkpoint and evaluation in MPI_Finalize.
      res.clean_end = client.clean_end();
      res.exit_code = client.failed_code();
      break;
    }
    if (leave_if_noticed()) break;
  }
  return res;
}

}  // namespace mt
