#include "ps/exchange/worker_client.hpp"

#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <thread>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "ps/wire/mpi_env.hpp"
#include "ps/wire/ulfm.hpp"

namespace mt {

namespace {

// The first error in statuses of an MPI_ERR_IN_STATUS answer (MPI_ERR_PENDING: not completed).
int first_error(const std::vector<MPI_Status>& statuses) {
  for (const MPI_Status& st : statuses)
    if (st.MPI_ERROR != MPI_SUCCESS && st.MPI_ERROR != MPI_ERR_PENDING) return st.MPI_ERROR;
  return MPI_ERR_IN_STATUS;
}

}  // namespace

WorkerClient::WorkerClient(const WorkerOptions& opts, const Model& model, MPI_Comm comm, std::mutex& mpi,
                           const std::atomic<bool>& ps_failed, std::function<void(int)> on_failed,
                           std::function<void()> after_test)
    : opts_(opts),
      model_(model),
      part_(model.params(), opts.num_ps),
      shards_(opts.num_ps),
      comm_(comm),
      mpi_(mpi),
      ps_failed_(ps_failed),
      on_failed_(std::move(on_failed)),
      after_test_(std::move(after_test)),
      params_(model.params()),
      offered_(static_cast<std::size_t>(shards_)),
      bells_(static_cast<std::size_t>(shards_)),
      reqs_(static_cast<std::size_t>(2 * shards_), MPI_REQUEST_NULL),
      statuses_(reqs_.size()),
      version_(static_cast<std::size_t>(shards_), 0),
      replied_(static_cast<std::size_t>(shards_), false),
      heard_(static_cast<std::size_t>(shards_), Clock::now()),
      local_pid_(static_cast<std::size_t>(shards_), 0) {
  for (int s = 0; s < shards_; ++s) {
    send_.emplace_back(send_floats(s));
    recv_.emplace_back(reply_floats(s));
    if (opts_.push_precision != PushPrecision::kFp32)
      scratch_.resize(std::max(scratch_.size(), static_cast<std::size_t>(part_.floats(s))));
  }
}

// Shard 0's part carries the batch's BatchNorm statistics too, in fp32.
std::int64_t WorkerClient::send_floats(int s) const { return reply_floats(s) + (s == 0 ? model_.stats().total() : 0); }
std::int64_t WorkerClient::reply_floats(int s) const { return wire_floats(opts_.push_precision, part_.floats(s)); }

void WorkerClient::prepare_join(bool offer_shm) {
  for (int s = 0; s < shards_; ++s) {
    Buffer& b = send_[static_cast<std::size_t>(s)];
    b.header() = MsgHeader{};
    b.header().param_count = model_.param_count();
    b.header().batch = opts_.batch_size;
    b.header().precision = static_cast<std::int32_t>(opts_.push_precision);
    if (!offer_shm || !shm_transport_enabled()) continue;
    auto seg = ShmSegment::create(
        shm_bytes(b.count() - kHeaderFloats, recv_[static_cast<std::size_t>(s)].count() - kHeaderFloats));
    const std::string& name = seg->name();
    const auto floats = static_cast<std::int64_t>((name.size() + sizeof(float)) / sizeof(float));  // with the NUL
    std::fill_n(b.payload(), floats, 0.f);
    std::memcpy(b.payload(), name.data(), name.size());
    b.header().shm = kShmOffer;
    b.header().payload = floats;
    offered_[static_cast<std::size_t>(s)] = std::move(seg);
  }
}

void WorkerClient::prepare_push(const StepComputer::Step& st, const FlatTensors& grads, const FlatTensors& batch_stats,
                                bool synthetic, std::int64_t push_id) {
  for (int s = 0; s < shards_; ++s) {
    Buffer& b = send_[static_cast<std::size_t>(s)];
    MsgHeader& h = b.header();
    h = MsgHeader{};
    h.kind = MsgKind::kPush;
    h.model_version = version_[static_cast<std::size_t>(s)];
    h.payload = send_floats(s);
    h.cursor_epoch = st.cursor.epoch;
    h.cursor_position = st.cursor.position;
    h.loss = st.loss;
    h.correct = st.correct;
    h.step_seconds = static_cast<float>(st.seconds);
    h.batch = opts_.batch_size;
    h.push_id = push_id;
    if (!synthetic || !packed_) {
      const auto n = static_cast<std::size_t>(part_.floats(s));
      if (opts_.push_precision == PushPrecision::kFp32) {
        part_.pack(s, grads, std::span<float>(b.payload(), n));
      } else {  // bf16: packed in fp32, then rounded into the message
        part_.pack(s, grads, std::span<float>(scratch_).first(n));
        encode_values(opts_.push_precision, std::span<const float>(scratch_).first(n), b.payload());
      }
      if (s == 0)
        std::copy(batch_stats.flat().data(), batch_stats.flat().data() + model_.stats().total(),
                  b.payload() + reply_floats(0));
    }
  }
  packed_ = true;
}

std::span<const float> WorkerClient::push_payload(int s) {
  Buffer& b = send_[static_cast<std::size_t>(s)];
  return {b.payload(), static_cast<std::size_t>(b.header().payload)};
}

std::span<const float> WorkerClient::pulled(int s) {
  return {recv_[static_cast<std::size_t>(s)].payload(), static_cast<std::size_t>(reply_floats(s))};
}

void WorkerClient::mark_discard() {
  for (auto& b : send_)
    b.header().end = kDiscardPush;
}

WorkerClient::Reply WorkerClient::push_pull(MsgKind kind, double deadline) {
  // The first exchange waits for the parameter server to start (it may load a checkpoint).
  if (deadline <= 0)
    deadline = kind == MsgKind::kJoin ? std::max(60.0, 10 * opts_.failure_timeout) : opts_.failure_timeout;
  if (ps_failed_) return Reply::kFailed;  // reported while a step computed: nothing more is sent
  post(kind);
  if (ps_failed_) return Reply::kFailed;
  const auto t0 = Clock::now();
  if (const Reply r = wait_replies(deadline); r != Reply::kOk) return r;
  // A join's receive may take the reply to a push whose receive was cancelled (a rejoin:
  // cancel_in_flight), sent before the link broke and delivered once it healed: not a join's
  // reply (it names no data slots), it is dropped and the receive posted again.
  while (kind == MsgKind::kJoin && repost_stale_join_replies())
    if (const Reply r = wait_replies(std::max(0.0, deadline - since(t0))); r != Reply::kOk) return r;
  bool stop = false;
  for (int s = 0; s < shards_; ++s) {
    const MsgHeader& h = recv_[static_cast<std::size_t>(s)].header();
    if (const auto bad = check_header(h, reply_floats(s)); !bad.empty())
      throw Error(kExitInternal, "worker: malformed reply from shard " + std::to_string(s) + ": " + bad);
    stop = stop || h.kind == MsgKind::kStop;
    if (h.kind == MsgKind::kStop) clean_end_ = clean_end_ && h.end == kCleanEnd;
    if (h.kind == MsgKind::kStop && h.end == kFailedEnd) failed_code_ = h.exit_code;
    if (h.kind == MsgKind::kStop && h.end == kRejectedEnd) rejected_ = true;
    if (h.kind == MsgKind::kStop && h.end == kRetiredEnd) retired_ = true;
    if (h.kind == MsgKind::kStop && h.end == kMismatchEnd)
      job_shape_ = JobShape{h.param_count, h.batch, static_cast<PushPrecision>(h.precision)};
  }
  if (stop) return tell_others_stop();
  take_replies(kind);
  return Reply::kOk;
}

bool WorkerClient::repost_stale_join_replies() {
  std::lock_guard<std::mutex> lock(mpi_);
  bool stale = false;
  for (int s = 0; s < shards_; ++s) {
    auto& r = recv_[static_cast<std::size_t>(s)];
    if (!check_header(r.header(), reply_floats(s)).empty() || r.header().kind != MsgKind::kParams ||
        r.header().slots > 0)
      continue;
    stale = true;
    try {
      irecv(r, s, kTagToWorker, &reqs_[static_cast<std::size_t>(2 * s)], comm_);
    } catch (const ProcessFailed&) {  // ULFM: the shard died since: the wait says so
      on_failed_(s);
    }
  }
  return stale;
}

void WorkerClient::post(MsgKind kind) {
  std::lock_guard<std::mutex> lock(mpi_);
  for (int s = 0; s < shards_; ++s) {
    try {
      auto& r = recv_[static_cast<std::size_t>(s)];
      irecv(r, s, kTagToWorker, &reqs_[static_cast<std::size_t>(2 * s)], comm_);
      auto& b = send_[static_cast<std::size_t>(s)];
      const std::int64_t payload = kind == MsgKind::kPush || kind == MsgKind::kJoin ? b.header().payload : 0;
      isend(b, payload, s, kTagToPs, &reqs_[static_cast<std::size_t>(2 * s + 1)], comm_);
      if (const auto& bell = bells_[static_cast<std::size_t>(s)]) bell.to_shard().ring();
    } catch (const ProcessFailed&) {  // ULFM: the shard is known dead already
      on_failed_(s);
    }
  }
}

// Polls with naps instead of MPI_Waitall's busy wait: on a shared node the spin would take the
// core from the parameter server and the other workers. Shards on this node ring a doorbell with
// each reply (ps/wire/bell.hpp): while every shard can, the naps may be long, as each reply ends them.
WorkerClient::Reply WorkerClient::wait_replies(double deadline) {
  backoff_.restart();
  std::fill(replied_.begin(), replied_.end(), false);
  const auto t0 = Clock::now();
  auto polled = t0;
  for (;;) {
    const auto now = Clock::now();
    longest_gap_ = std::max(longest_gap_, seconds_between(polled, now));
    polled = now;
    if (ps_failed_) return Reply::kFailed;  // the heartbeat thread heard it first
    int done = 0;
    int rc = MPI_SUCCESS;
    replies_.clear();
    for (int s = 0; s < shards_; ++s)
      replies_.add(bells_[static_cast<std::size_t>(s)].to_worker());
    {
      std::lock_guard<std::mutex> lock(mpi_);
      rc = MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &done, statuses_.data());
      if (rc == MPI_SUCCESS && done) std::fill(heard_.begin(), heard_.end(), Clock::now());
      if (rc == MPI_SUCCESS && after_test_) after_test_();
    }
    if (rc != MPI_SUCCESS) {
      // ULFM: a request with a dead shard completed with the error (in its status when
      // MPI_ERR_IN_STATUS): this worker learns of it within milliseconds instead of --failure-timeout.
      {
        std::lock_guard<std::mutex> lock(mpi_);
        for (std::size_t i = 0; i < reqs_.size(); ++i)
          if (ulfm_is_proc_failed(rc == MPI_ERR_IN_STATUS ? statuses_[i].MPI_ERROR : rc))
            on_failed_(static_cast<int>(i / 2));
        // The replies that came all the same (from the surviving shards): their pushes are acknowledged.
        for (int s = 0; s < shards_ && rc == MPI_ERR_IN_STATUS; ++s) {
          MPI_Request& r = reqs_[static_cast<std::size_t>(2 * s)];
          int flag = r == MPI_REQUEST_NULL && statuses_[static_cast<std::size_t>(2 * s)].MPI_ERROR == MPI_SUCCESS;
          if (!flag && r != MPI_REQUEST_NULL && MPI_Test(&r, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) flag = 0;
          replied_[static_cast<std::size_t>(s)] =
              flag && recv_[static_cast<std::size_t>(s)].header().kind == MsgKind::kParams;
          if (replied_[static_cast<std::size_t>(s)]) heard_[static_cast<std::size_t>(s)] = Clock::now();
        }
      }
      if (ps_failed_) return Reply::kFailed;
      MT_MPI(rc == MPI_ERR_IN_STATUS ? first_error(statuses_) : rc);
    }
    if (done) {
      std::fill(replied_.begin(), replied_.end(), true);
      break;
    }
    if (since(t0) > deadline) {
      // A suspension inside this round of the loop counts too.
      longest_gap_ = std::max(longest_gap_, seconds_between(polled, Clock::now()));
      int silent = 0;
      for (int s = 0; s < shards_; ++s)
        if (reqs_[static_cast<std::size_t>(2 * s)] != MPI_REQUEST_NULL) silent = s;
      loss_ = PsLoss{silent, since(t0), unix_now()};
      return Reply::kLost;
    }
    replies_.sleep(backoff_);
  }
  backoff_.done();
  return Reply::kOk;
}

// Shards count their own steps and may disagree on which push is the last: those that still
// expect pushes from this worker are told it leaves.
WorkerClient::Reply WorkerClient::tell_others_stop() {
  std::lock_guard<std::mutex> lock(mpi_);
  for (int s = 0; s < shards_; ++s) {
    if (recv_[static_cast<std::size_t>(s)].header().kind == MsgKind::kStop) continue;
    Buffer& b = send_[static_cast<std::size_t>(s)];
    b.header() = MsgHeader{};
    b.header().kind = MsgKind::kStop;
    MPI_Request req = MPI_REQUEST_NULL;
    isend(b, 0, s, kTagToPs, &req, comm_);
    if (const auto& bell = bells_[static_cast<std::size_t>(s)]) bell.to_shard().ring();
    if (!wait_for(&req, opts_.failure_timeout)) {
      abandon(std::move(b));
      loss_ = PsLoss{s, opts_.failure_timeout, unix_now()};
      return Reply::kLost;
    }
  }
  return Reply::kStop;
}

void WorkerClient::take_replies(MsgKind kind) {
  for (int s = 0; s < shards_; ++s) {
    auto& r = recv_[static_cast<std::size_t>(s)];
    if (kind == MsgKind::kJoin) {
      // The join's reply says whether the shard mapped our segment: payloads move there.
      auto& seg = offered_[static_cast<std::size_t>(s)];
      if (seg && r.header().shm == kShmAccepted) {
        auto& b = send_[static_cast<std::size_t>(s)];
        const std::int64_t push_floats = b.count() - kHeaderFloats;
        b.share(seg, 0);
        r.share(seg, shm_reply_offset(push_floats));
        bells_[static_cast<std::size_t>(s)] = shm_bells(*seg, push_floats, reply_floats(s));
        local_pid_[static_cast<std::size_t>(s)] = r.header().pid;
      }
      if (seg) seg->unlink();
      seg.reset();
    }
    // A synthetic-gradient worker (benchmark) does not use the parameters.
    if (!opts_.synthetic_gradients) {
      const auto n = static_cast<std::size_t>(part_.floats(s));
      if (opts_.push_precision == PushPrecision::kFp32) {
        part_.unpack(s, std::span<const float>(r.payload(), n), params_);
      } else {  // bf16: decoded, then unpacked
        decode_values(opts_.push_precision, r.payload(), std::span<float>(scratch_).first(n));
        part_.unpack(s, std::span<const float>(scratch_).first(n), params_);
      }
    }
    version_[static_cast<std::size_t>(s)] = r.header().model_version;
    global_step_ = std::max(global_step_, r.header().step);
  }
}

bool WorkerClient::await_failure(double seconds, bool* answered) {
  const auto t0 = Clock::now();
  bool replied = false;
  for (;;) {
    if (ps_failed_) return true;
    {
      std::lock_guard<std::mutex> lock(mpi_);
      for (std::size_t i = 0; i < reqs_.size(); ++i) {
        if (reqs_[i] == MPI_REQUEST_NULL) continue;
        int flag = 0;
        const int rc = MPI_Test(&reqs_[i], &flag, MPI_STATUS_IGNORE);
        if (ulfm_is_proc_failed(rc)) on_failed_(static_cast<int>(i / 2));
        if (rc == MPI_SUCCESS && flag && i % 2 == 0) {  // a reply (even index: receives)
          replied = true;
          heard_[i / 2] = Clock::now();
        }
      }
    }
    if (answered) *answered = replied;
    if (ps_failed_ || replied || since(t0) > seconds) return ps_failed_;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void WorkerClient::renew() {
  for (int s = 0; s < shards_; ++s) {
    const auto k = static_cast<std::size_t>(s);
    abandon(std::move(send_[k]));
    abandon(std::move(recv_[k]));
    send_[k] = Buffer(send_floats(s));
    recv_[k] = Buffer(reply_floats(s));
    bells_[k] = PairBells{};
    local_pid_[k] = 0;  // the new parameter server's messages go through MPI
  }
  std::fill(reqs_.begin(), reqs_.end(), MPI_REQUEST_NULL);
  packed_ = false;
}

WorkerClient::EndCheck WorkerClient::confirm_end(double deadline) {
  std::vector<Buffer> ends;
  std::vector<MPI_Request> reqs;
  {
    std::lock_guard<std::mutex> lock(mpi_);
    for (int s = 0; s < shards_; ++s) {
      const MsgHeader& h = recv_[static_cast<std::size_t>(s)].header();
      if (h.kind != MsgKind::kStop || h.end != kCleanEnd) continue;
      ends.emplace_back(0);
      reqs.push_back(MPI_REQUEST_NULL);
      try {
        irecv(ends.back(), s, kTagEnd, &reqs.back(), comm_);
      } catch (const LibraryError&) {  // the shard died since its stop (ULFM) or its link broke
        return EndCheck::kLost;
      }
    }
  }
  Backoff backoff{100, 20000};
  const auto t0 = Clock::now();
  for (;;) {
    int done = 0, rc = MPI_SUCCESS;
    {
      std::lock_guard<std::mutex> lock(mpi_);
      rc = MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE);
    }
    if (rc != MPI_SUCCESS) return EndCheck::kLost;  // ULFM: a shard died after it said stop
    if (done) break;
    if (since(t0) > deadline) {
      std::lock_guard<std::mutex> lock(mpi_);
      for (std::size_t i = 0; i < reqs.size(); ++i)
        if (reqs[i] != MPI_REQUEST_NULL) {
          MPI_Cancel(&reqs[i]);
          abandon(std::move(ends[i]));
        }
      return EndCheck::kUnknown;
    }
    backoff.idle();
  }
  for (Buffer& b : ends)
    if (const auto bad = check_header(b.header(), 0); !bad.empty() || b.header().kind != MsgKind::kEnd)
      throw Error(kExitInternal, "worker: malformed end message from a shard: " + (bad.empty() ? "not kEnd" : bad));
  for (Buffer& b : ends)
    if (b.header().end != kCleanEnd) return EndCheck::kLost;
  return EndCheck::kClean;
}

void WorkerClient::abandon_in_flight() {
  for (int s = 0; s < shards_; ++s) {
    const auto k = static_cast<std::size_t>(s);
    if (reqs_[2 * k] != MPI_REQUEST_NULL) abandon(std::move(recv_[k]));
    if (reqs_[2 * k + 1] != MPI_REQUEST_NULL) abandon(std::move(send_[k]));
  }
}

void WorkerClient::cancel_in_flight() {
  for (int s = 0; s < shards_; ++s) {
    MPI_Request& r = reqs_[2 * static_cast<std::size_t>(s)];
    // Cancelling a receive is local; had the reply come meanwhile, it completes (and is not used).
    if (r != MPI_REQUEST_NULL && MPI_Cancel(&r) == MPI_SUCCESS) wait_for(&r, opts_.failure_timeout);
  }
  renew();  // what is still in flight keeps its buffer to the end
}

}  // namespace mt
