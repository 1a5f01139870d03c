#include "ps/shard.hpp"

#include <algorithm>
#include <csignal>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "optim/optimizer.hpp"
#include "ps/mpi_env.hpp"
#include "ps/recovery.hpp"
#include "ps/ulfm.hpp"

namespace mt {

namespace {

// Shards wait for each other with this deadline: a lost shard is a lost parameter server.
double shard_deadline(const PsOptions& o) { return std::max(60.0, o.drain_deadline + 10 * o.failure_timeout); }

int comm_rank(MPI_Comm comm) {
  int v = 0;
  MT_MPI(MPI_Comm_rank(comm, &v));
  return v;
}
int comm_size(MPI_Comm comm) {
  int v = 0;
  MT_MPI(MPI_Comm_size(comm, &v));
  return v;
}
// The data slots: the launched workers' (a takeover keeps them), or the elastic joins' if more.
int data_slots(const PsOptions& o, int workers) { return std::max(o.slots > 0 ? o.slots : workers, o.max_workers); }

constexpr const char* kUlfmReported = "the MPI library (ULFM) reported the process failed";

}  // namespace

bool Shard::may_follow_takeover() const { return opts_.takeover && shards_ > 1 && ulfm_available(); }

void Shard::check_revoked() const {
  if (may_follow_takeover() && ulfm_is_revoked(opts_.comm)) throw ShardTakeover{};
}

// After an error: whether it is the loss of another shard (the communicator revoked by a survivor
// that learned of it, or a shard this one talks to reported failed: then this shard revokes it,
// so that every survivor learns), to be taken over.
bool Shard::another_shard_lost() const {
  if (!may_follow_takeover()) return false;
  try {
    if (ulfm_is_revoked(opts_.comm)) return true;
    const std::vector<int> failed = ulfm_failed_ranks(opts_.comm);
    if (std::none_of(failed.begin(), failed.end(), [&](int r) { return r < shards_; })) return false;
    ulfm_revoke(opts_.comm);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

Shard::Shard(const PsOptions& opts, const Model& model, const LrSchedule& schedule, Backend& update, FaultPlan plan,
             PsEvents& events, SnapshotSink& sink)
    : opts_(opts),
      model_(model),
      policy_(schedule, opts.lr_scaling, opts.momentum_correction, opts.momentum, opts.join_warmup, opts.momentum_by_workers),
      update_(update),
      plan_(std::move(plan)),
      events_(events),
      sink_(sink),
      shards_(opts.num_ps),
      shard_(comm_rank(opts.comm)),
      workers_(comm_size(opts.comm) - opts.num_ps),
      self_(opts.self_rank >= 0 ? opts.self_rank : shard_),
      part_(model.params(), shards_),
      mine_(part_.floats(shard_)),
      stats_floats_(shard_ == 0 ? model.stats().total() : 0),
      bf16_(opts.push_precision == PushPrecision::kBf16),
      push_slots_(wire_floats(opts.push_precision, mine_) + stats_floats_),
      reply_slots_(wire_floats(opts.push_precision, mine_)),
      momenta_(opts.momentum_correction == MomentumCorrection::kDana ? data_slots(opts, workers_) : 1),
      gap_aware_(policy_.gap_aware()),
      full_(model.params()),
      stats_(model.stats()),
      batch_stats_(model.stats()),
      mean_momentum_(momenta_ > 1 ? FlatTensors(model.params()) : FlatTensors()),  // dana only
      params_(static_cast<std::size_t>(mine_)),
      velocity_(params_.size() * static_cast<std::size_t>(state_buffers()), 0.f),
      check_(opts.push_norm_limit),
      runs_(part_.runs(shard_)),
      counts_(model.bn_counts(opts.batch_size)),
      members_(
          data_slots(opts, workers_),
          Membership::Deadlines{opts.failure_timeout, std::max(60.0, 10 * opts.failure_timeout), opts.drain_deadline}) {
  for (int j = 0; j < state_buffers(); ++j) state_full_.emplace_back(model.params());
  handled_.assign(static_cast<std::size_t>(members_.slots()), 0);
  plan_.before_kill = [this] { before_kill(); };
  handled_floats_.resize(2 * handled_.size());
  if (gap_aware_) {
    gap_.emplace(velocity(static_cast<std::size_t>(momenta_)));
    gap_before_.resize(static_cast<std::size_t>(mine_));
  }
  if (bf16_) grad_.resize(static_cast<std::size_t>(mine_));
  policy_.stabilize(opts.stability);
  if (opts.ps_standby > 0) standbys_.emplace(opts, lead(), state_buffers(), events, plan_, self_);
  if (lead())
    coord_.emplace(opts, model, part_, momenta_, gap_aware_, shard_deadline(opts), policy_, members_, events, sink);
  else
    answer_.emplace(shard_, mine_, shard_deadline(opts), state_buffers(), opts.comm);
}

// Every shard starts from the same state: shard 0 resumes (or initializes) and hands each shard
// its part, with the global step. Blocking calls are fine here: no worker is served yet.
void Shard::start_state() {
  model_.init_params(full_, stats_, opts_.seed);
  StartLog log;  // a takeover: what this shard replays after its part of the replica
  if (coord_) {
    const std::vector<PartState> survived = opts_.replay ? parse_part_states(opts_.replay->states) : std::vector<PartState>{};
    const std::vector<StartLog> logs = split_replay(survived);
    start_step_ = coord_->start(full_, state_full_, stats_, logs, [&] { start_from_survivors(survived); });
    part_.pack(0, full_, params_);
    for (std::size_t j = 0; j < state_full_.size(); ++j)
      part_.pack(0, state_full_[j], velocity(j));
    if (!logs.empty()) log = logs.front();
  } else {
    start_step_ = answer_->receive_start(params_, velocity_, &log);
  }
  step_ = start_step_;
  current_ = params_.data();
  if (log.replica_step >= 0) {
    replay(log.log, log.replica_step);
    start_step_ = step_;
    if (coord_) coord_->restart_at(step_);
  }
  plan_.started_at(step_);
}

bool Shard::settle_send(Member& m) {
  if (wait_for(&m.sreq, opts_.failure_timeout)) return true;
  drop(m, /*lost=*/true, "its previous reply was not taken within --failure-timeout");
  return false;
}

void Shard::stamp_failure(MsgHeader& stop) const {
  if (failure_code_ == 0) return;
  stop.end = kFailedEnd;
  stop.exit_code = failure_code_;
}

bool Shard::reply(Member& m, MsgKind kind, std::int32_t end) {
  if (!settle_send(m)) return false;
  // A standby's last replica is taken before it stops (it receives while it waits for this reply).
  if (kind == MsgKind::kStop && standbys_) standbys_->settle(m.rank);
  MsgHeader& h = m.send.header();
  h = MsgHeader{};
  h.kind = kind;
  h.step = step_;
  h.model_version = step_;
  h.payload = kind == MsgKind::kParams ? reply_slots_ : 0;
  if (kind == MsgKind::kParams && m.state != MemberState::kJoining) {  // a push's: how it was applied (ps/push_journal.hpp)
    h.applied = reply_ ? 1 : 0;
    if (reply_) {
      h.lr = reply_->lr;
      h.momentum = reply_->momentum;
    }
    h.replica_step = standbys_ ? standbys_->settled_step() : -1;
    h.push_id = handled_[static_cast<std::size_t>(m.slot)];  // the push it answers
  }
  reply_.reset();
  if (kind == MsgKind::kParams) {
    float* sent = sent_params(m);
    if (current_ != sent) std::copy_n(current_, mine_, sent);  // a join or a dropped push; updates write in place
    if (bf16_) encode_values(opts_.push_precision, {sent, static_cast<std::size_t>(mine_)}, m.send.payload());
  }
  if (m.state == MemberState::kJoining) {            // the reply to a join: where its data starts, its slot of how many
    h.cursor_epoch = m.cursor.epoch;
    h.cursor_position = m.cursor.position;
    h.slot = m.slot;
    h.slots = members_.slots();
    h.pid = static_cast<std::int32_t>(::getpid());
    if (m.send.shared) h.shm = kShmAccepted;
  } else if (kind == MsgKind::kStop && members_.lost() == 0) {
    h.end = kCleanEnd;
  }
  if (kind == MsgKind::kStop && end != 0) h.end = end;
  if (end == kMismatchEnd) {  // what the job trains, for the refused worker's message
    h.param_count = model_.param_count();
    h.batch = opts_.batch_size;
    h.precision = static_cast<std::int32_t>(opts_.push_precision);
  }
  if (kind == MsgKind::kStop) stamp_failure(h);
  try {
    isend(m.send, h.payload, m.peer, kTagToWorker, &m.sreq, m.comm);
  } catch (const ProcessFailed&) {
    throw;  // ULFM: the serve loop drops it (or a takeover follows)
  } catch (const LibraryError& e) {  // Open MPI 4.1: its connection broke (node down): it is lost
    drop(m, /*lost=*/true, std::string("a reply to it failed: ") + e.what());
    return false;
  }
  if (m.bells) m.bells.to_worker().ring();
  m.last_reply = Clock::now();
  m.owes_reply = false;
  return true;
}

bool Shard::apply_push(Member& m, const MsgHeader& h) {
  if (h.end == kDiscardPush) return reject_push(m, "its worker marked it not to be applied (--corrupt-push discard)");
  const double staleness = double(step_ - h.model_version);
  // The worker's previous reply is complete (it pushed again), so its buffer takes the update.
  if (!settle_send(m)) return false;
  const std::span<float> out(sent_params(m), static_cast<std::size_t>(mine_));
  const std::span<float> grad =
      bf16_ ? std::span<float>(grad_) : std::span<float>(m.recv.payload(), static_cast<std::size_t>(mine_));
  if (bf16_) decode_values(opts_.push_precision, m.recv.payload(), grad);
  const float* batch_stats = m.recv.payload() + (push_slots_ - stats_floats_);
  // `out` still holds the parameters this worker was sent (in fp32), which its gradient was
  // computed on. The penalty's pass also sums the squares the check needs; a rejected push's
  // gradient is penalized for nothing, and no state has changed yet.
  const double sum_squares = gap_ ? gap_->penalize(grad, current(), out, staleness) : sum_of_squares(grad);
  if (const std::string why = check_.judge(sum_squares, {batch_stats, static_cast<std::size_t>(stats_floats_)});
      !why.empty())
    return reject_push(m, why);
  m.rejected_in_row = 0;
  const int live = members_.live();
  if (policy_.observe_loss(step_, h.loss, live) && lead()) events_.log(describe_cut(step_ + 1, policy_.guard().last_cut()));
  const double lr = policy_.lr(step_, live, staleness);
  reply_ = Applied{static_cast<float>(lr), static_cast<float>(policy_.momentum(live))};
  update(grad, out, m.slot, *reply_, batch_stats);
  ++step_;
  if (coord_) coord_->applied(m, h, step_);
  ++m.pushes;
  m.staleness_sum += staleness;
  ++m.window_pushes;
  m.window_images += h.batch;
  m.window_staleness += staleness;
  m.window_step_seconds += h.step_seconds;
  total_images_ += h.batch;
  max_staleness_ = std::max(max_staleness_, staleness);
  const bool replied = reply(m, MsgKind::kParams);
  after_step(lr);
  plan_.at_step(self_, step_);
  return replied;
}

bool Shard::reject_push(Member& m, const std::string& why) {
  ++m.rejected;
  ++m.rejected_in_row;
  const bool drop_it = opts_.max_rejected_pushes > 0 && m.rejected_in_row >= opts_.max_rejected_pushes;
  std::ostringstream line;
  line << "mpi_trainer: parameter server shard " << shard_ << ": step " << step_ + 1 << ": push of worker rank " << m.rank
       << " rejected, not applied: " << why << " (" << m.rejected_in_row << " in a row"
       << (drop_it ? ": the worker is stopped and dropped)" : ")");
  events_.log(line.str());
  if (drop_it) {
    ++step_;
    if (reply(m, MsgKind::kStop, kRejectedEnd)) drop(m, /*lost=*/true, "its last " + std::to_string(m.rejected_in_row) + " pushes were rejected");
    return false;
  }
  return count_unapplied(m);
}

bool Shard::count_unapplied(Member& m) {
  ++step_;
  if (!reply(m, MsgKind::kParams)) return false;
  if (coord_) coord_->after_step(part(), policy_.lr(step_ - 1, members_.live(), 0), stop_at_.has_value());
  plan_.at_step(self_, step_);
  return true;
}

void Shard::handle_worker(Member& m) {
  const MsgHeader h = m.recv.header();
  if (const auto bad = check_header(h, push_slots_); !bad.empty())
    throw Error(kExitInternal, "parameter server: malformed message from rank " + std::to_string(m.rank) + ": " + bad);
  const auto now = Clock::now();
  Membership::heard(m, now);
  m.owes_reply = h.kind == MsgKind::kJoin || h.kind == MsgKind::kPush;
  if (failure_code_ != 0 && (h.kind == MsgKind::kJoin || h.kind == MsgKind::kPush)) {
    // The parameter server failed: the join or push is answered with the failure.
    if (reply(m, MsgKind::kStop)) Membership::finished(m, now);
    return;
  }
  switch (h.kind) {
    case MsgKind::kJoin:
      if (h.param_count != model_.param_count() || h.batch != opts_.batch_size ||
          h.precision != static_cast<std::int32_t>(opts_.push_precision)) {
        // A worker started with another model, batch size or push precision (a `join` with other flags).
        if (lead())
          events_.join_refused(
              PsEvents::JoinRefused{PsEvents::JoinRefused::Why::kMismatch, m.rank,
                                    JobShape{h.param_count, h.batch, static_cast<PushPrecision>(h.precision)}, {}});
        if (!reply(m, MsgKind::kStop, kMismatchEnd)) return;
        Membership::finished(m, now);
        return;
      }
      if (h.shm == kShmOffer && h.payload > 0 && shm_transport_enabled()) accept_segment(m, h);
      if (!reply(m, MsgKind::kParams)) return;
      Membership::joined(m, Clock::now(), stop_at_.has_value());
      if (m.late) admit_late(m);
      break;
    case MsgKind::kPush:
      if (step_ >= opts_.train_steps || stop_at_) {
        // The end, or a notice: this push is not applied.
        if (!reply(m, MsgKind::kStop)) return;
        Membership::finished(m, Clock::now());
        return;  // no new receive
      }
      // A diverged push ends the run (the failure path: workers stopped, exit 3) before it is
      // applied, so no checkpoint holds its state.
      if (lead()) check_divergence(h.loss, opts_.max_loss, step_ + 1);
      handled_[static_cast<std::size_t>(m.slot)] = h.push_id;  // applied or counted: in the next replica
      if (opts_.max_staleness >= 0 && step_ - h.model_version > opts_.max_staleness) {
        // Too stale: not applied; the worker gets the current parameters and computes again. It
        // still counts as a step: pushes reach the shards in different orders, so another shard
        // may have applied this one, and every shard must count the same pushes or their steps
        // drift apart and the run ends short of --train-steps.
        ++m.dropped;
        if (!count_unapplied(m)) return;
        break;
      }
      if (!apply_push(m, h)) return;
      break;
    case MsgKind::kLeave:
      // A preemption notice reached the worker: it pushed its last step and is gone.
      drop(m, /*lost=*/false, "left on a preemption notice", h.signal);
      return;
    case MsgKind::kStop:
      // Another shard ended training for this worker first; it sends no more pushes.
      Membership::finished(m, now);
      return;
    default:
      throw Error(kExitInternal, "parameter server: unexpected message kind from rank " + std::to_string(m.rank));
  }
  irecv(m.recv, m.peer, kTagToPs, &m.rreq, m.comm);
}

// A worker is gone: lost (silent past --failure-timeout: revoked, killed, or cut off) or left on a
// notice. The learning-rate policy and the momentum correction follow the new worker count.
void Shard::drop(Member& m, bool lost, const std::string& detail, int signo) {
  const auto now = Clock::now();
  const bool was_joined = m.joined_at.has_value();
  Membership::departed(m, lost, now);
  if (lost) {
    // The newest parameters may live in its reply buffer, which is abandoned now.
    if (current_ == sent_params(m)) {
      std::copy_n(current_, mine_, params_.data());
      current_ = params_.data();
    }
    abandon(std::move(m.recv));
    abandon(std::move(m.send));
    abandon(std::move(m.hb));
    m.rreq = m.sreq = m.hbreq = MPI_REQUEST_NULL;  // never waited for, never cancelled
    m.bells = PairBells{};
  }
  if (!lead()) return;
  const int live = members_.live();
  // A lost worker was computing on the parameters of its last reply: that step is lost.
  const bool computing = lost && was_joined;
  PsEvents::Departure e;
  e.global_step = step_;
  e.rank = m.rank;
  e.type = m.type;
  e.lost = lost;
  e.detected_by = !lost ? "notice" : detail == kUlfmReported ? "mpi" : "heartbeat";
  e.detail = detail;
  e.signo = signo;
  e.silent_seconds = seconds_between(m.last_heard.value_or(m.added_at), now);
  e.elapsed_seconds = since(t0_);
  e.work_lost_steps = computing ? 1 : 0;
  e.work_lost_seconds = computing ? std::max(0.0, seconds_between(m.last_reply, *m.last_heard)) : 0.0;
  e.active_seconds = m.active_seconds;
  e.active_workers = live;
  e.lr_divisor = policy_.lr_divisor(live);
  e.momentum = policy_.momentum(live);
  events_.departure(e);
  // The workers may have left on a notice that reached this process too: that is the reason.
  if (live == 0 && !stop_at_) check_notice();
  if (live == 0 && step_ < opts_.train_steps && !stop_at_) {
    if (opts_.max_workers > 0)
      events_.waiting_for_joins(step_);
    else
      begin_stop("every worker was revoked");
  }
}

void Shard::detect_failures() {
  check_superseded();  // a silence may be this process's own pause
  const auto now = Clock::now();
  for (auto& m : members_.members())
    if (const auto why = members_.overdue(m, now, stop_at_)) drop(m, /*lost=*/true, *why);
}

void Shard::check_notice() {
  if (notice_) return;
  if (const int sig = notice_signal()) {
    notice_ = sig;
    if ((sig == SIGTERM || sig == SIGUSR1) && opts_.hand_over && standbys_ && lead() && shards_ == 1 && !stop_at_ &&
        failure_code_ == 0 && step_ < opts_.train_steps) {
      PsEvents::NoHandover why;
      handed_over_ = standbys_->hand_over(step_, sig, members_, [this] { return replica_content(); }, &why);
      if (handed_over_) return;
      events_.no_handover(why);
    }
    if (!stop_at_) begin_stop(sig == SIGCONT ? "SIGCONT (mpirun is ending the job)" : signal_name(sig));
    if (sig == SIGINT) exit_code_ = kExitInterrupted;
  }
}

// A notice (or the loss of every worker): checkpoint at once, refuse further pushes (each worker
// is told to stop at its next push), then end with exit 75, so that a launcher reruns the job.
void Shard::begin_stop(const std::string& why) {
  stop_at_ = Clock::now();
  stop_reason_ = why;
  exit_code_ = kExitRequeue;
  members_.drain();
  events_.stopping(shard_, why, step_, members_.live());
  if (!coord_) return;
  if (sink_.checkpoints()) coord_->request_snapshot(kForCheckpoint, part());
  coord_->tell_shards(MsgKind::kDrain);
}

PsResult Shard::run() {
  try {
    // The workers' receives first: an error from here on (a resume that fails) still answers
    // every worker's join, with a stop that carries the error.
    t0_ = Clock::now();
    for (int w = 0; w < workers_; ++w) {
      const auto i = static_cast<std::size_t>(w);
      const int slot = opts_.worker_slots.empty() ? w : opts_.worker_slots.at(i);
      Member& m = members_.add(opts_.worker_ranks.empty() ? shards_ + w : opts_.worker_ranks.at(i), opts_.comm,
                               shards_ + w, slot, opts_.worker_types.at(static_cast<std::size_t>(slot)), t0_);
      give_buffers(m);
      irecv(m.recv, m.peer, kTagToPs, &m.rreq, m.comm);
      irecv(m.hb, m.peer, kTagHeartbeat, &m.hbreq, m.comm);
    }
    start_state();
    // The reports' set-up (the background evaluator builds a network) before the clock starts.
    if (lead()) events_.started(PsEvents::Started{start_step_, shards_, workers_, policy_.momentum(workers_)});
    t0_ = Clock::now();
    if (coord_) coord_->clock_started(t0_);
    if (lead() && opts_.max_workers > 0) {
      joins_.emplace(opts_.port_file, nlohmann::ordered_json{{"model", model_.spec().name},
                                                             {"batch_size", opts_.batch_size},
                                                             {"max_workers", opts_.max_workers}}
                                          .dump(),
                     opts_.join_secret, opts_.join_auth_seconds);
      events_.joins_open(opts_.max_workers, opts_.port_file, ulfm_available());
    }
    serve();
    if (handed_over_) {
      PsResult gone;
      gone.global_step = step_;
      gone.run_seconds = since(t0_);
      gone.handed_over = true;
      return gone;
    }
    settle_members();
    return finish();
  } catch (const ShardTakeover&) {
    dump_state("at-takeover");
    throw;
  } catch (const PsSuperseded&) {
    throw;  // nothing written, nobody answered
  } catch (...) {
    if (another_shard_lost()) {
      dump_state("at-takeover");
      throw ShardTakeover{};
    }
    end_after_failure(std::current_exception());
  }
}

// Workers' messages, their heartbeats, then (shards > 0) the control channel from shard 0, until
// no worker is left. One receive per worker (never MPI_ANY_SOURCE: a worker killed in the middle
// of a message can leave an any-source receive hung, docs/fault-model.md).
void Shard::serve() {
  std::vector<MPI_Request> rreqs;
  std::vector<int> ready;
  std::vector<MPI_Status> statuses;
  Backoff backoff(10, 1000);  // the time between messages from any worker
  // Heartbeats, failure detection and timed revocations are checked every 10 ms, not at every
  // message: testing twice the requests per push cost up to a fifth of the PS's throughput with
  // 8 workers (bench/ps_throughput.sh), and detection works at a scale of seconds.
  constexpr auto kSlowPoll = std::chrono::milliseconds(10);
  auto next_slow_poll = Clock::now();
  auto& ms = members_.members();
  // Same-node workers ring a doorbell after each message (ps/bell.hpp): while every live worker
  // can, the shard sleeps until one rings, up to the slow poll's period, instead of napping at
  // most a millisecond (bench/ps_cpu.sh: an idle or lightly loaded shard no longer takes a share
  // of a core from the workers beside it). Messages between shards ring no doorbell: a snapshot's
  // parts, a drain or the end wait up to that period (10 ms), which nothing needs sooner.
  BellWait bells;
  // With --max-workers the parameter server also waits, with no worker at all, for joins.
  while (members_.live() > 0 ||
         (opts_.max_workers > 0 && !stop_at_ && failure_code_ == 0 && step_ < opts_.train_steps)) {
    check_superseded();  // woken after a pause: before any MPI call, whether another took its place
    if (joins_ && joins_->pending()) take_joins();
    const std::size_t nw = ms.size();  // grows when workers join
    const bool slow_poll = Clock::now() >= next_slow_poll;
    // [workers' pushes][control from shard 0, shards > 0][heartbeats, on a slow poll]
    const std::size_t nc = lead() ? 0 : 1, nh = slow_poll ? nw : 0;
    rreqs.resize(nw + nc + nh);
    ready.resize(rreqs.size());
    for (std::size_t i = 0; i < nw; ++i)
      rreqs[i] = ms[i].rreq;
    if (nc) rreqs[nw] = answer_->control_request();
    for (std::size_t i = 0; i < nh; ++i)
      rreqs[nw + nc + i] = ms[i].hbreq;
    // The doorbells' counters before the test: a message posted after it has moved one.
    bells.clear();
    for (const Member& m : ms)
      if (m.live()) bells.add(m.bells.to_shard());
    int n = 0;
    statuses.resize(rreqs.size());
    const int rc = MPI_Testsome(static_cast<int>(rreqs.size()), rreqs.data(), &n, ready.data(), statuses.data());
    if (n == MPI_UNDEFINED) n = 0;
    // With an ULFM MPI (cmake/ULFMProbe.cmake) a dead peer's request completes with an error
    // (MPI_ERR_IN_STATUS, the cause in its status): that worker is dropped at once instead of after
    // --failure-timeout, and the requests that completed normally beside it are handled as usual.
    std::vector<std::size_t> failed;  // indexes into rreqs
    if (rc != MPI_SUCCESS) {
      check_revoked();  // another shard lost: not these workers
      if (rc != MPI_ERR_IN_STATUS) MT_MPI(rc);
      int kept = 0;
      for (int k = 0; k < n; ++k) {
        const auto i = static_cast<std::size_t>(ready[static_cast<std::size_t>(k)]);
        const int err = statuses[static_cast<std::size_t>(k)].MPI_ERROR;
        if (err == MPI_SUCCESS) {
          ready[static_cast<std::size_t>(kept++)] = static_cast<int>(i);
        } else if (ulfm_is_proc_failed(err) && (i < nw || i >= nw + nc)) {
          failed.push_back(i);
        } else {
          MT_MPI(err);  // shard 0's control channel failed, or another error: the shard fails
        }
      }
      n = kept;
    }
    for (std::size_t i = 0; i < nw; ++i)
      ms[i].rreq = rreqs[i];
    if (nc) answer_->control_request() = rreqs[nw];
    for (std::size_t i = 0; i < nh; ++i)
      ms[i].hbreq = rreqs[nw + nc + i];
    for (const std::size_t i : failed) {
      Member& m = ms[i < nw ? i : i - nw - nc];
      if (i < nw) m.rreq = MPI_REQUEST_NULL; else m.hbreq = MPI_REQUEST_NULL;  // completed, with the error
      if (m.live()) drop(m, /*lost=*/true, kUlfmReported);
    }
    // Taken, to be answered (an error before then answers them with the failure).
    for (int k = 0; k < n; ++k)
      if (const auto i = static_cast<std::size_t>(ready[static_cast<std::size_t>(k)]); i < nw) ms[i].owes_reply = true;
    int pushes = 0;
    for (int k = 0; k < n; ++k) {
      const auto i = static_cast<std::size_t>(ready[static_cast<std::size_t>(k)]);
      if (i < nw) {
        try {
          handle_worker(ms[i]);
        } catch (const ProcessFailed&) {  // ULFM: its reply or next receive found it dead
          check_revoked();
          if (!ms[i].live()) throw;
          drop(ms[i], /*lost=*/true, kUlfmReported);
        }
        ++pushes;
      } else if (i >= nw + nc) {
        Member& m = ms[i - nw - nc];
        Membership::heard(m, Clock::now());
        try {
          if (m.live()) irecv(m.hb, m.peer, kTagHeartbeat, &m.hbreq, m.comm);
        } catch (const ProcessFailed&) {
          check_revoked();
          drop(m, /*lost=*/true, kUlfmReported);
        }
      } else {
        const MsgHeader& c = answer_->control();
        if (c.kind == MsgKind::kDrain) {
          if (!stop_at_) begin_stop("shard 0 stops on a notice");
        } else {
          answer_->answer(c.request_id, step_, current(), velocity_);
        }
        answer_->rearm();
      }
    }
    if (slow_poll) {
      next_slow_poll = Clock::now() + kSlowPoll;
      check_notice();
      if (handed_over_) return;
      detect_failures();
      plan_.at_time(self_);
    }
    poll_background();
    if (pushes > 0) {
      backoff.done();
    } else {
      bells.sleep(backoff);
    }
  }
}

}  // namespace mt
