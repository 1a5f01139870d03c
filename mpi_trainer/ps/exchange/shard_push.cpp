// The push path of a shard (ps/exchange/shard.hpp): a worker's message checked (handle_worker), a
// push applied (apply_push, update) or counted unapplied, and the reply sent; the buffers and
// shared-memory segments the path runs through (give_buffers, accept_segment).
#include "ps/exchange/shard.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "backend/backend.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "optim/optimizer.hpp"
#include "ps/wire/mpi_env.hpp"
#include "ps/wire/ulfm.hpp"

namespace mt {

void Shard::give_buffers(Member& m) const {
  m.recv = Buffer(push_slots_);
  m.send = Buffer(reply_slots_);
  if (bf16_) m.sent.assign(static_cast<std::size_t>(mine_), 0.f);
}

// A joining worker on this node offered a segment for this pair: map it and move both buffers'
// payloads there. A worker on another node (no such segment here) keeps plain messages.
void Shard::accept_segment(Member& m, const MsgHeader& h) {
  const auto* chars = reinterpret_cast<const char*>(m.recv.payload());
  const std::string name(chars, strnlen(chars, static_cast<std::size_t>(h.payload) * sizeof(float)));
  std::string why;
  auto seg = ShmSegment::open(name, shm_bytes(push_slots_, reply_slots_), &why);
  if (!seg) {
    if (opts_.shm_debug)
      events_.log("mpi_trainer: shard " + std::to_string(shard_) + ": worker rank " + std::to_string(m.rank) +
                  ": plain messages (" + why + ")");
    return;
  }
  m.recv.share(seg, 0);
  m.send.share(seg, shm_reply_offset(push_slots_));
  m.bells = shm_bells(*seg, push_slots_, reply_slots_);
  ++shm_workers_;
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
  if (kind == MsgKind::kStop && standbys_) standbys_->settle(m.rank, members_);
  MsgHeader& h = m.send.header();
  h = MsgHeader{};
  h.kind = kind;
  h.step = step_;
  h.model_version = step_;
  h.payload = kind == MsgKind::kParams ? reply_slots_ : 0;
  if (kind == MsgKind::kParams &&
      m.state != MemberState::kJoining) {  // a push's: how it was applied (ps/resilience/push_journal.hpp)
    h.applied = reply_ ? 1 : 0;
    if (reply_) {
      h.lr = reply_->lr;
      h.momentum = reply_->momentum;
    }
    h.replica_step = standbys_ ? standbys_->settled_step() : -1;
    h.push_id = handled_[static_cast<std::size_t>(m.slot)];  // the push it answers
    h.epoch = static_cast<std::int32_t>(epoch_);
  } else if (kind == MsgKind::kParams && (m.late || m.rejoined)) {
    // A joiner's (a replacement's, a rejoined worker's) pushes are numbered on from here: past its
    // slot's previous worker's, and past any number an earlier epoch gave (a replacement orphaned
    // by a takeover may have had pushes acknowledged that no replica holds): each push one (slot, number).
    h.push_id = std::max(handled_[static_cast<std::size_t>(m.slot)], epoch_ << 32);
  }
  reply_.reset();
  if (kind == MsgKind::kParams) {
    float* sent = sent_params(m);
    if (current_ != sent) std::copy_n(current_, mine_, sent);  // a join or a dropped push; updates write in place
    if (bf16_) encode_values(opts_.push_precision, {sent, static_cast<std::size_t>(mine_)}, m.send.payload());
  }
  if (m.state == MemberState::kJoining) {  // the reply to a join: where its data starts, its slot of how many
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
  if (kind == MsgKind::kStop) m.clean_stop = h.end == kCleanEnd;
  try {
    isend(m.send, h.payload, m.peer, kTagToWorker, &m.sreq, m.comm);
  } catch (const ProcessFailed&) {
    throw;                           // ULFM: the serve loop drops it (or a takeover follows)
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
  if (policy_.observe_loss(step_, h.loss, live) && lead())
    events_.log(describe_cut(step_ + 1, policy_.guard().last_cut()));
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

void Shard::update(std::span<const float> grad, std::span<float> out, int slot, Applied a, const float* batch_stats) {
  std::span<const float> before = current();
  if (gap_ && current_ == out.data()) {  // updated in place below: keep what it was
    std::copy(out.begin(), out.end(), gap_before_.begin());
    before = gap_before_;
  }
  // Its data slot's momentum under dana (UpdatePolicy::per_slot_momentum), else the one.
  const std::span<float> v = velocity(momenta_ > 1 ? static_cast<std::size_t>(slot) : 0);
  const bool nesterov = policy_.nesterov(opts_.nesterov);
  for (const auto& r : runs_) {
    const auto o = static_cast<std::size_t>(r.offset), len = static_cast<std::size_t>(r.length);
    update_.sgd_update_to(current().subspan(o, len), grad.subspan(o, len), v.subspan(o, len), out.subspan(o, len),
                          SgdSpec{a.lr, a.momentum, r.decay ? static_cast<float>(opts_.weight_decay) : 0.f, nesterov});
  }
  if (gap_) gap_->track(before, out);
  current_ = out.data();
  if (coord_) {  // shard 0 holds the BatchNorm running statistics
    std::copy(batch_stats, batch_stats + stats_floats_, batch_stats_.flat().data());
    model_.update_running_stats(stats_, batch_stats_, counts_);
  }
}

bool Shard::reject_push(Member& m, const std::string& why) {
  ++m.rejected;
  ++m.rejected_in_row;
  const bool drop_it = opts_.max_rejected_pushes > 0 && m.rejected_in_row >= opts_.max_rejected_pushes;
  std::ostringstream line;
  line << "mpi_trainer: parameter server shard " << shard_ << ": step " << step_ + 1 << ": push of worker rank "
       << m.rank << " rejected, not applied: " << why << " (" << m.rejected_in_row << " in a row"
       << (drop_it ? ": the worker is stopped and dropped)" : ")");
  events_.log(line.str());
  if (drop_it) {
    ++step_;
    if (coord_) coord_->counted(m, handled_[static_cast<std::size_t>(m.slot)], step_);
    if (reply(m, MsgKind::kStop, kRejectedEnd))
      drop(m, /*lost=*/true, "its last " + std::to_string(m.rejected_in_row) + " pushes were rejected");
    return false;
  }
  return count_unapplied(m);
}

bool Shard::count_unapplied(Member& m) {
  ++step_;
  if (coord_) coord_->counted(m, handled_[static_cast<std::size_t>(m.slot)], step_);
  if (!reply(m, MsgKind::kParams)) return false;
  if (coord_) coord_->after_step(part(), policy_.lr(step_ - 1, members_.live(), 0), stop_at_.has_value());
  plan_.at_step(self_, step_);
  return true;
}

void Shard::handle_worker(Member& m) {
  const MsgHeader h = m.recv.header();
  if (const auto bad = check_header(h, push_slots_); !bad.empty())
    throw Error(kExitInternal, "parameter server: malformed message from rank " + std::to_string(m.rank) + ": " + bad);
  if (!m.live()) return heard_from_dropped(m);  // dropped while alive, or a replacement retired
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
      if (m.joined_at) {
        // A worker suspended past --failure-timeout rejoins, but this shard had not dropped it yet
        // (it looks every 10 ms): dropped now (not replaced: it is back), then taken back as any other.
        drop(m, /*lost=*/true, "it was suspended past --failure-timeout and asks to rejoin", 0, /*back=*/true);
        return take_back(m, h);
      }
      if (h.param_count != model_.param_count() || h.batch != opts_.batch_size ||
          h.precision != static_cast<std::int32_t>(opts_.push_precision)) {
        // A worker started with another model, batch size or push precision (a `join` with other flags).
        if (lead())
          events_.join_refused(
              PsEvents::JoinRefused{PsEvents::JoinRefused::Why::kMismatch,
                                    m.rank,
                                    JobShape{h.param_count, h.batch, static_cast<PushPrecision>(h.precision)},
                                    {}});
        if (!reply(m, MsgKind::kStop, kMismatchEnd)) return;
        Membership::finished(m, now);
        return;
      }
      if (h.shm == kShmOffer && h.payload > 0 && shm_transport_enabled()) accept_segment(m, h);
      if (!reply(m, MsgKind::kParams)) return;
      Membership::joined(m, Clock::now(), stop_at_.has_value());
      if (m.late || m.rejoined) admit_late(m);
      break;
    case MsgKind::kPush:
      if (standbys_ && h.replica_step >= 0) standbys_->held(m.rank, h.replica_step);  // a standby's
      if (step_ >= opts_.train_steps || stop_at_) {
        // The end, or a notice: this push is not applied.
        if (!reply(m, MsgKind::kStop)) return;
        Membership::finished(m, Clock::now());
        return;  // no new receive
      }
      // A push this shard handled already (its number is not past its slot's last): sent again
      // by a worker that took an error for its parameter server's loss (under ULFM the late report
      // of a deposed one, found by nemesis.sh `ps-throttle`: push 40 of a slot applied at steps 107
      // and 109). Answered with the parameters; neither applied nor counted again.
      if (h.push_id > 0 && h.push_id <= handled_[static_cast<std::size_t>(m.slot)]) {
        if (!reply(m, MsgKind::kParams)) return;
        break;
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

}  // namespace mt
