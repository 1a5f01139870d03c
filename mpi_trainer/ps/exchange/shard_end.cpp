// The end of a shard (ps/exchange/shard.hpp): members settled, an error ended for every worker, and the
// final snapshot, evaluation and report.
#include "ps/exchange/shard.hpp"

#include <algorithm>
#include <exception>
#include <vector>

#include "core/error.hpp"
#include "ps/wire/mpi_env.hpp"

namespace mt {

void Shard::settle_members() {
  for (auto& m : members_.members()) {
    if (m.state == MemberState::kLost) continue;
    if (!wait_for(&m.sreq, opts_.failure_timeout)) abandon(std::move(m.send));
    if (m.hbreq != MPI_REQUEST_NULL) {
      MT_MPI(MPI_Cancel(&m.hbreq));
      if (!wait_for(&m.hbreq, opts_.failure_timeout)) abandon(std::move(m.hb));
    }
  }
}

// A stop says kCleanEnd when no rank is known lost as it is sent; a worker that died just before
// the end may be found silent only after the others were told so (Open MPI 4.1 finds a death by
// --failure-timeout). Every member is settled now: each one told a clean stop learns whether that
// still holds, and leaves without MPI_Finalize (whose fence would wait for the dead rank) when not.
void Shard::confirm_end() {
  const std::int32_t end = members_.lost() == 0 ? kCleanEnd : 0;
  std::vector<Member*> told;
  for (auto& m : members_.members())
    if (m.clean_stop && m.state == MemberState::kFinished) told.push_back(&m);
  std::vector<Buffer> msgs(told.size());
  std::vector<MPI_Request> reqs(told.size(), MPI_REQUEST_NULL);
  for (std::size_t i = 0; i < told.size(); ++i) {
    MsgHeader& h = msgs[i].header();
    h = MsgHeader{};
    h.kind = MsgKind::kEnd;
    h.step = step_;
    h.end = end;
    try {
      isend(msgs[i], 0, told[i]->peer, kTagEnd, &reqs[i], told[i]->comm);
    } catch (const LibraryError&) {  // its connection broke, or (ULFM) it died since: it misses nothing
      reqs[i] = MPI_REQUEST_NULL;
    }
  }
  for (std::size_t i = 0; i < told.size(); ++i)
    if (reqs[i] != MPI_REQUEST_NULL && !wait_for(&reqs[i], opts_.failure_timeout)) abandon(std::move(msgs[i]));
}

// An error the parameter server cannot recover from. Every worker still here is answered (its
// join or its next push) with a stop carrying the exit code, the other shards are told to stop
// and, on shard 0, to hand in their final state, so that every process ends with a defined code
// and nothing waits for an MPI_Abort; shard 0 reports the failure (the status file); then the
// error goes on to the caller. A second error on this path stops the answering: the workers left
// find the parameter server lost (--failure-timeout) and exit 10.
void Shard::end_after_failure(const std::exception_ptr& error) {
  const ErrorReport e = describe_error(error);
  failure_code_ = e.exit_code;
  exit_code_ = e.exit_code;
  stop_reason_ = "an error";
  // No --drain-deadline here (stop_at_ stays unset): a worker still loading its data keeps the
  // start-up grace to send its join and get the answer.
  members_.drain();
  try {
    if (coord_ && !coord_->finals_collected() && shards_ > 1) coord_->tell_shards(MsgKind::kDrain);
    // A message the error interrupted: its answer is the failure, or (answered already) the
    // worker's next message is taken, to be answered so.
    for (auto& m : members_.members()) {
      if (!m.live() || m.rreq != MPI_REQUEST_NULL) continue;
      if (!m.owes_reply) {
        irecv(m.recv, m.peer, kTagToPs, &m.rreq, m.comm);
      } else if (reply(m, MsgKind::kStop)) {
        Membership::finished(m, Clock::now());
      }
    }
    serve();
    settle_members();
    if (coord_ && shards_ > 1) coord_->collect_final(full_, state_full_, /*clean=*/false);
  } catch (...) {
  }
  if (coord_) {
    try {
      events_.failed(step_, e.exit_code, e.what);
    } catch (...) {
    }
  }
  std::rethrow_exception(error);
}

PsResult Shard::finish() {
  PsResult res;
  res.global_step = step_;
  res.run_seconds = since(t0_);
  res.images_per_second = double(total_images_) / std::max(res.run_seconds, 1e-9);
  res.exit_code = exit_code_;
  res.peer_lost = members_.lost() > 0;
  if (!coord_) {
    const std::int32_t end = answer_->finish(step_, current(), velocity_);
    res.clean_end = end == kCleanEnd && members_.lost() == 0;
    return res;
  }
  // Shard 0: the final state of every shard, then no more requests.
  part_.unpack(0, current(), full_);
  for (std::size_t j = 0; j < state_full_.size(); ++j)
    part_.unpack(0, velocity(j), state_full_[j]);
  coord_->collect_final(full_, state_full_, /*clean=*/members_.lost() == 0);
  const StateView state = view_state(state_full_, momenta_, gap_aware_, mean_momentum_);
  SnapshotMeta meta = coord_->meta(step_);
  const Snapshot final_state{
      full_,   state.momentum,          stats_,     step_, std::move(meta.slot_cursors), res.run_seconds,
      meta.lr, std::move(meta.workers), state.extra};
  PsEvents::Finished done{final_state,
                          start_step_,
                          coord_->last_snapshot_step(),
                          res.images_per_second,
                          shards_,
                          workers_,
                          joined_,
                          members_.lost(),
                          members_.left(),
                          shm_workers_,
                          max_staleness_,
                          members_.dropped_stale(),
                          stop_at_.has_value(),
                          stop_reason_,
                          exit_code_};
  done.rejoined = rejoined_;
  done.retired = retired_;
  done.lr_cuts = policy_.guard().cuts();
  done.rejected_pushes = members_.rejected();
  if (standbys_) {
    done.standbys = opts_.ps_standby;
    done.replicas = standbys_->sent();
    done.replica_interval = standbys_->mean_interval();
    done.replica_seconds = standbys_->mean_cost_seconds();
  }
  res.evaluated = events_.finished(done);
  return res;
}

}  // namespace mt
