// A shard's serve loop (ps/exchange/shard.hpp).
#include "ps/exchange/shard.hpp"

#include <chrono>
#include <vector>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "ps/wire/bell.hpp"
#include "ps/wire/mpi_env.hpp"
#include "ps/wire/ulfm.hpp"

namespace mt {

// What one pass of the serve loop tests: [workers' pushes][control from shard 0, shards > 0]
// [heartbeats, on a slow poll], the doorbells' counters read before the test, and what completed.
struct Shard::ServeLoop {
  std::vector<MPI_Request> rreqs;
  std::vector<int> ready;  // indexes into rreqs of the requests that completed normally: [0, n)
  std::vector<MPI_Status> statuses;
  std::vector<std::size_t> failed;  // indexes into rreqs of the requests ULFM failed
  int n = 0;
  std::size_t nw = 0, nc = 0, nh = 0;  // pushes (one per member), control (0 or 1), heartbeats
  bool slow_poll = false;
  Backoff backoff{10, 1000};  // the time between messages from any worker
  // Heartbeats, failure detection and timed revocations are checked every 10 ms, not at every
  // message: testing twice the requests per push cost up to a fifth of the PS's throughput with
  // 8 workers (bench/perf/ps_throughput.sh), and detection works at a scale of seconds.
  static constexpr auto kSlowPoll = std::chrono::milliseconds(10);
  Clock::time_point next_slow_poll = Clock::now();
  // Same-node workers ring a doorbell after each message (ps/wire/bell.hpp): while every live worker
  // can, the shard sleeps until one rings, up to the slow poll's period, instead of napping at
  // most a millisecond (bench/perf/ps_cpu.sh: an idle or lightly loaded shard no longer takes a share
  // of a core from the workers beside it). Messages between shards ring no doorbell: a snapshot's
  // parts, a drain or the end wait up to that period (10 ms), which nothing needs sooner.
  BellWait bells;
};

// Workers' messages, their heartbeats, then (shards > 0) the control channel from shard 0, until
// no worker is left. One receive per worker (never MPI_ANY_SOURCE: a worker killed in the middle
// of a message can leave an any-source receive hung, docs/fault-model.md).
void Shard::serve() {
  ServeLoop loop;
  // With --max-workers the parameter server also waits, with no worker at all, for joins.
  // With --replace-workers it waits for the replacements under way.
  while (members_.live() > 0 || awaiting_workers()) {
    check_superseded();  // woken after a pause: before any MPI call, whether another took its place
    if ((joins_ && joins_->pending()) || (spawner_ && spawner_->pending())) take_joins();
    test_requests(loop);
    drop_failed(loop);
    const int pushes = handle_completed(loop);
    if (loop.slow_poll) {
      loop.next_slow_poll = Clock::now() + ServeLoop::kSlowPoll;
      check_notice();
      if (handed_over_) return;
      detect_failures();
      plan_.at_time(self_);
    }
    poll_background();
    if (pushes > 0) {
      loop.backoff.done();
    } else {
      loop.bells.sleep(loop.backoff);
    }
  }
  // No worker left and none coming: the replacements could not start, or the last one was refused.
  if (lead() && !stop_at_ && !handed_over_ && failure_code_ == 0 && step_ < opts_.train_steps)
    begin_stop(kNoWorkerLeft);
}

// One MPI_Testsome over every request of this pass. With an ULFM MPI (cmake/ULFMProbe.cmake) a
// dead peer's request completes with an error (MPI_ERR_IN_STATUS, the cause in its status): it is
// set apart in `failed`, and the requests that completed normally beside it are handled as usual.
void Shard::test_requests(ServeLoop& loop) {
  auto& ms = members_.members();
  loop.nw = ms.size();  // grows when workers join
  loop.slow_poll = Clock::now() >= loop.next_slow_poll;
  const std::size_t nw = loop.nw;
  const std::size_t nc = loop.nc = lead() ? 0 : 1;
  const std::size_t nh = loop.nh = loop.slow_poll ? nw : 0;
  auto& rreqs = loop.rreqs;
  auto& ready = loop.ready;
  rreqs.resize(nw + nc + nh);
  ready.resize(rreqs.size());
  for (std::size_t i = 0; i < nw; ++i)
    rreqs[i] = ms[i].rreq;
  if (nc) rreqs[nw] = answer_->control_request();
  for (std::size_t i = 0; i < nh; ++i)
    rreqs[nw + nc + i] = ms[i].hbreq;
  // The doorbells' counters before the test: a message posted after it has moved one.
  loop.bells.clear();
  for (const Member& m : ms)
    if (m.live()) loop.bells.add(m.bells.to_shard());
  int n = 0;
  loop.statuses.resize(rreqs.size());
  const int rc = MPI_Testsome(static_cast<int>(rreqs.size()), rreqs.data(), &n, ready.data(), loop.statuses.data());
  if (n == MPI_UNDEFINED) n = 0;
  loop.failed.clear();
  if (rc != MPI_SUCCESS) {
    check_revoked();  // another shard lost: not these workers
    if (rc != MPI_ERR_IN_STATUS) MT_MPI(rc);
    int kept = 0;
    for (int k = 0; k < n; ++k) {
      const auto i = static_cast<std::size_t>(ready[static_cast<std::size_t>(k)]);
      const int err = loop.statuses[static_cast<std::size_t>(k)].MPI_ERROR;
      if (err == MPI_SUCCESS) {
        ready[static_cast<std::size_t>(kept++)] = static_cast<int>(i);
      } else if (ulfm_is_proc_failed(err) && (i < nw || i >= nw + nc)) {
        loop.failed.push_back(i);
      } else if (i < nw && !ms[i].live()) {
        rreqs[i] = MPI_REQUEST_NULL;  // a dropped worker's receive, kept posted to hear it again, failed: it stays dropped
      } else {
        MT_MPI(err);  // shard 0's control channel failed, or another error: the shard fails
      }
    }
    n = kept;
  }
  loop.n = n;
  for (std::size_t i = 0; i < nw; ++i)
    ms[i].rreq = rreqs[i];
  if (nc) answer_->control_request() = rreqs[nw];
  for (std::size_t i = 0; i < nh; ++i)
    ms[i].hbreq = rreqs[nw + nc + i];
}

// The workers whose push or heartbeat request ULFM failed are dropped as lost at once, instead of
// after --failure-timeout.
void Shard::drop_failed(ServeLoop& loop) {
  auto& ms = members_.members();
  const std::size_t nw = loop.nw, nc = loop.nc;
  for (const std::size_t i : loop.failed) {
    Member& m = ms[i < nw ? i : i - nw - nc];
    if (i < nw)
      m.rreq = MPI_REQUEST_NULL;
    else
      m.hbreq = MPI_REQUEST_NULL;  // completed, with the error
    if (m.live()) drop(m, /*lost=*/true, kUlfmReported);
  }
}

// Every request that completed normally: a worker's message (its push: handle_worker), a heartbeat
// (the worker heard, the next receive posted) or shard 0's control message (a drain, or a snapshot
// request answered). Returns the workers' messages handled.
int Shard::handle_completed(ServeLoop& loop) {
  auto& ms = members_.members();
  const std::size_t nw = loop.nw, nc = loop.nc;
  const auto request = [&](int k) { return static_cast<std::size_t>(loop.ready[static_cast<std::size_t>(k)]); };
  // Taken, to be answered (an error before then answers them with the failure).
  for (int k = 0; k < loop.n; ++k)
    if (const auto i = request(k); i < nw) ms[i].owes_reply = true;
  int pushes = 0;
  for (int k = 0; k < loop.n; ++k) {
    const auto i = request(k);
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
  return pushes;
}

}  // namespace mt
