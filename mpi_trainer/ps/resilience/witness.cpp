#include "ps/resilience/witness.hpp"

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <sstream>
#include <thread>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "ps/wire/mpi_env.hpp"
#include "ps/wire/protocol.hpp"

namespace mt {

namespace {

// The other workers of `comm`: ranks `shards` and up, this one excepted.
std::vector<int> other_workers(MPI_Comm comm, int shards) {
  int size = 0, me = 0;
  MT_MPI(MPI_Comm_size(comm, &size));
  MT_MPI(MPI_Comm_rank(comm, &me));
  std::vector<int> peers;
  for (int r = shards; r < size; ++r)
    if (r != me) peers.push_back(r);
  return peers;
}

// A pending receive cancelled and completed, or (it does not complete at once: its peer is gone,
// the communicator revoked) its buffer kept to the end of the process. Never throws.
void cancel_receive(MPI_Request* req, Buffer& buf) {
  if (*req == MPI_REQUEST_NULL) return;
  MPI_Cancel(req);  // the return code says nothing a test below would not
  int done = 0;
  if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done) {
    abandon(std::move(buf));
    *req = MPI_REQUEST_NULL;  // the request itself is left to MPI
  }
}

}  // namespace

std::string WitnessVerdict::describe(int shard) const {
  std::ostringstream s;
  s << std::setprecision(3);
  switch (kind) {
    case Kind::kNoPeers: s << "no other worker to ask"; break;
    case Kind::kSilentToAll:
      s << "the " << answered << " other worker" << (answered == 1 ? "" : "s") << " that answered (of " << asked
        << ") have not heard from shard " << shard << " either";
      break;
    case Kind::kAlive:
      s << "rank " << witness << " heard from shard " << shard << " " << heard_ago << " s before it answered";
      break;
    case Kind::kIsolated:
      s << "none of the " << asked << " other worker" << (asked == 1 ? "" : "s") << " answered within " << waited
        << " s";
      break;
    case Kind::kFailureReported:
      s << "the MPI library failed the asks to the " << asked << " other worker" << (asked == 1 ? "" : "s")
        << " (a failure reported, or a takeover under way)";
      break;
  }
  return s.str();
}

WitnessDesk::WitnessDesk(MPI_Comm comm, int shards) : comm_(comm), shards_(shards), peers_(other_workers(comm, shards)) {
  asks_.resize(peers_.size());
  reqs_.assign(peers_.size(), MPI_REQUEST_NULL);
  int me = 0;
  MT_MPI(MPI_Comm_rank(comm_, &me));
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    try {
      irecv(asks_[i], peers_[i], kTagWitnessAsk, &reqs_[i], comm_);
    } catch (const ProcessFailed&) {  // ULFM: that worker is known dead already
      reqs_[i] = MPI_REQUEST_NULL;
      continue;
    }
    // The pair's connection made now, while every link is up: Open MPI 4.1's TCP transport
    // connects on a pair's first message, and a connect that fails ("Network is unreachable": this
    // worker's own link is down) ends the process (pml_ob1_sendreq.c, FATAL) instead of failing the
    // send; over a connection that exists, an ask waits in the socket. One per pair: the lower rank
    // says hello, the higher one's desk takes it as it takes an ask (serve: no answer).
    if (peers_[i] < me) continue;
    Buffer hello(0);
    hello.header() = MsgHeader{};
    hello.header().kind = MsgKind::kWitnessHello;
    MPI_Request req = MPI_REQUEST_NULL;
    try {
      isend(hello, 0, peers_[i], kTagWitnessAsk, &req, comm_);
      answers_.push_back(std::move(hello));
      answer_reqs_.push_back(req);
    } catch (const std::exception&) {  // that worker is gone: no ask will go to it either
    }
  }
}

WitnessDesk::~WitnessDesk() { close(); }

void WitnessDesk::serve(const std::function<double(int)>& heard_ago, std::int64_t global_step) {
  // The answers sent before that have left: their buffers are free again.
  for (std::size_t i = 0; i < answer_reqs_.size();) {
    int done = 0;
    if (MPI_Test(&answer_reqs_[i], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) {
      answer_reqs_.erase(answer_reqs_.begin() + static_cast<std::ptrdiff_t>(i));
      answers_.erase(answers_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    if (reqs_[i] == MPI_REQUEST_NULL) continue;
    int done = 0;
    if (MPI_Test(&reqs_[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {  // ULFM: that worker died
      reqs_[i] = MPI_REQUEST_NULL;
      continue;
    }
    if (!done) continue;
    const MsgHeader ask = asks_[i].header();  // a kWitnessHello is taken and not answered
    if (check_header(ask, 0).empty() && ask.kind == MsgKind::kWitnessAsk && answers_.size() < 4 * peers_.size() + 4) {
      Buffer a(shards_);
      a.header() = MsgHeader{};
      a.header().kind = MsgKind::kWitnessAnswer;
      a.header().request_id = ask.request_id;
      a.header().step = global_step;
      a.header().payload = shards_;
      for (int s = 0; s < shards_; ++s)
        a.payload()[s] = static_cast<float>(heard_ago(s));
      MPI_Request req = MPI_REQUEST_NULL;
      try {
        isend(a, shards_, peers_[i], kTagWitnessAnswer, &req, comm_);
        answers_.push_back(std::move(a));
        answer_reqs_.push_back(req);
      } catch (const std::exception&) {  // its asker is gone: nothing to tell
      }
    }
    try {
      irecv(asks_[i], peers_[i], kTagWitnessAsk, &reqs_[i], comm_);
    } catch (const std::exception&) {
      reqs_[i] = MPI_REQUEST_NULL;
    }
  }
}

void WitnessDesk::close() {
  for (std::size_t i = 0; i < reqs_.size(); ++i)
    cancel_receive(&reqs_[i], asks_[i]);
  for (std::size_t i = 0; i < answer_reqs_.size(); ++i) {
    int done = 0;
    if (answer_reqs_[i] != MPI_REQUEST_NULL &&
        (MPI_Test(&answer_reqs_[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done))
      abandon(std::move(answers_[i]));
  }
  answers_.clear();
  answer_reqs_.clear();
}

WitnessVerdict ask_witnesses(MPI_Comm comm, int shards, int shard, double silence, double margin, double timeout,
                             std::mutex& lock) {
  static std::int64_t asks = 0;  // this process's asks, numbered: a late answer to an earlier one is not counted
  WitnessVerdict v;
  std::vector<int> peers;
  std::vector<Buffer> out, in;
  std::vector<MPI_Request> sent, got;
  const std::int64_t id = ++asks;
  const auto t0 = Clock::now();
  {
    const std::lock_guard<std::mutex> hold(lock);
    peers = other_workers(comm, shards);
    out.resize(peers.size());
    in.assign(peers.size(), Buffer(shards));
    sent.assign(peers.size(), MPI_REQUEST_NULL);
    got.assign(peers.size(), MPI_REQUEST_NULL);
    for (std::size_t i = 0; i < peers.size(); ++i) {
      out[i].header() = MsgHeader{};
      out[i].header().kind = MsgKind::kWitnessAsk;
      out[i].header().request_id = id;
      out[i].header().model_version = shard;
      try {
        irecv(in[i], peers[i], kTagWitnessAnswer, &got[i], comm);
        isend(out[i], 0, peers[i], kTagWitnessAsk, &sent[i], comm);
        ++v.asked;
      } catch (const std::exception&) {  // ULFM: that worker is known dead
        got[i] = MPI_REQUEST_NULL;
      }
    }
  }
  if (v.asked == 0) {
    v.kind = WitnessVerdict::Kind::kNoPeers;
    return v;
  }
  bool alive = false;
  int failed = 0;  // asks whose answer the MPI library failed (ULFM)
  for (;;) {
    int pending = 0;
    {
      const std::lock_guard<std::mutex> hold(lock);
      const double silent_now = silence + since(t0);
      for (std::size_t i = 0; i < peers.size() && !alive; ++i) {
        if (got[i] == MPI_REQUEST_NULL) continue;
        int done = 0;
        if (MPI_Test(&got[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {  // ULFM: it died, or a revoke
          got[i] = MPI_REQUEST_NULL;
          ++failed;
          continue;
        }
        if (!done) {
          ++pending;
          continue;
        }
        const MsgHeader& h = in[i].header();
        if (!check_header(h, shards).empty() || h.kind != MsgKind::kWitnessAnswer || h.request_id != id ||
            h.payload < shards) {
          try {  // not this ask's answer (a late one to an earlier ask): wait for the next
            irecv(in[i], peers[i], kTagWitnessAnswer, &got[i], comm);
            ++pending;
          } catch (const std::exception&) {
            got[i] = MPI_REQUEST_NULL;
          }
          continue;
        }
        ++v.answered;
        const double age = in[i].payload()[shard];
        if (age >= 0 && age < silent_now - margin) {
          alive = true;
          v.witness = peers[i];
          v.heard_ago = age;
        }
      }
    }
    if (alive || pending == 0 || since(t0) > timeout) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  v.waited = since(t0);
  {
    const std::lock_guard<std::mutex> hold(lock);
    for (std::size_t i = 0; i < peers.size(); ++i) {
      cancel_receive(&got[i], in[i]);
      int done = 0;
      if (sent[i] != MPI_REQUEST_NULL && (MPI_Test(&sent[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done))
        abandon(std::move(out[i]));  // an unreachable worker's ask stays in flight
    }
  }
  // Every ask failed in the library: not an unreachable link (that one waits out the timeout) but
  // failures it knows of, or the communicator revoked (a takeover that killed the hung shard):
  // this worker takes the loss path, and the takeover, instead of leaving as isolated (seen in
  // chaos.sh's hung-ps under load: it left, its journal with it, and 3 updates were lost).
  v.kind = alive              ? WitnessVerdict::Kind::kAlive
           : v.answered > 0   ? WitnessVerdict::Kind::kSilentToAll
           : failed == v.asked ? WitnessVerdict::Kind::kFailureReported
                               : WitnessVerdict::Kind::kIsolated;
  return v;
}

}  // namespace mt
