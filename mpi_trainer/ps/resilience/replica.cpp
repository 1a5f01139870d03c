#include "ps/resilience/replica.hpp"

#include <algorithm>
#include <cstring>

#include <chrono>
#include <thread>

#include "core/error.hpp"
#include "ps/resilience/notices.hpp"
#include "ps/resilience/push_journal.hpp"
#include "ps/resilience/replica_pacing.hpp"
#include "ps/wire/mpi_env.hpp"

namespace mt {

namespace {

// How long a standby given the handover replica waits for a notice of its own before it takes it:
// a notice to the whole job (Slurm's, a signal to mpirun or to the launcher's group) reaches every
// process within milliseconds, and then the job is to checkpoint and stop, not to hand over.
constexpr double kHandoverGrace = 0.25;

// Whether the standby `id` is among `dests`.
bool has_id(const std::vector<ReplicaSender::Dest>& dests, int id) {
  return std::any_of(dests.begin(), dests.end(), [id](const ReplicaSender::Dest& d) { return d.id == id; });
}

std::int64_t record_floats(std::size_t bytes) {
  return static_cast<std::int64_t>((bytes + sizeof(float) - 1) / sizeof(float));
}

}  // namespace

void ReplicaSender::give_up() {
  for (Buffer& b : slices_)
    abandon(std::move(b));
  slices_.clear();
  inflight_.clear();
  next_slice_ = 0;
}

bool ReplicaSender::ready(const std::vector<Dest>& dests) {
  bool done = next_slice_ >= slices_.size();
  for (auto& [id, req] : inflight_) {
    const bool wanted = has_id(dests, id);
    int flag = 1;
    try {
      if (req != MPI_REQUEST_NULL) MT_MPI(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
    } catch (const ProcessFailed&) {  // ULFM: that standby died; the shard drops it on its own
      flag = 0;
      req = MPI_REQUEST_NULL;
      if (wanted) continue;
    }
    if (!flag && !wanted) {  // a former standby that does not take it: let it go
      give_up();
      return true;
    }
    done = done && flag;
  }
  // Slices still to go, to none of the standbys now: given up midway.
  if (!done && next_slice_ < slices_.size() &&
      std::none_of(dests_.begin(), dests_.end(), [&](const Dest& d) { return has_id(dests, d.id); })) {
    give_up();
    return true;
  }
  if (done) settled();
  return done;
}

void ReplicaSender::progress() {
  if (inflight_.empty() || next_slice_ < slices_.size()) return;
  for (auto& [id, req] : inflight_) {
    int flag = 1;
    try {
      if (req != MPI_REQUEST_NULL) MT_MPI(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
    } catch (const ProcessFailed&) {  // ULFM: that standby died; ready() lets it go
      return;
    }
    if (!flag) return;
  }
  settled();
}

void ReplicaSender::settled() {
  if (!inflight_.empty()) settled_step_ = last_step_;
  inflight_.clear();
}

void ReplicaSender::send_slice(std::size_t i, const std::vector<Dest>& now) {
  Buffer& b = slices_[i];
  for (const Dest& d : dests_) {
    // Not to one no longer a standby (it may have left): it drops what it holds of this replica.
    if (!has_id(now, d.id)) continue;
    MPI_Request req = MPI_REQUEST_NULL;
    try {
      isend(b, b.header().payload, d.peer, kTagReplica, &req, d.comm);
    } catch (const LibraryError&) {  // known dead (ULFM), or its connection broke: the shard drops it
      continue;
    }
    inflight_.emplace_back(d.id, req);
  }
}

void ReplicaSender::pace(const std::vector<Dest>& now) {
  for (std::int64_t k = 0; k < per_update_ && next_slice_ < slices_.size(); ++k)
    send_slice(next_slice_++, now);
}

void ReplicaSender::flush(const std::vector<Dest>& now) {
  while (next_slice_ < slices_.size())
    send_slice(next_slice_++, now);
}

void ReplicaSender::send(std::int64_t step, int state_buffers, std::span<const std::span<const float>> pieces,
                         const std::string& record, const std::vector<Dest>& dests, std::int64_t reply_floats,
                         bool handover) {
  MT_ASSERT(inflight_.empty() && next_slice_ >= slices_.size(), "the previous replica has left");
  const auto t0 = Clock::now();
  const std::int64_t record_n = record_floats(record.size());
  std::int64_t floats = record_n;
  for (const auto& p : pieces)
    floats += static_cast<std::int64_t>(p.size());
  const std::int64_t n = replica_slices(floats);
  const std::int64_t each = (floats + n - 1) / n;
  per_update_ = replica_slices_per_update(floats, interval_, reply_floats);
  slices_.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t size = std::min(each, floats - i * each);
    Buffer& b = slices_[static_cast<std::size_t>(i)];
    if (static_cast<std::int64_t>(b.data.size()) != kHeaderFloats + size) b = Buffer(size);
    MsgHeader& h = b.header();
    h = MsgHeader{};
    h.kind = MsgKind::kReplica;
    h.step = h.model_version = step;
    h.payload = size;
    h.cursor_position = i * each;  // where the slice's floats go in the replica
    h.param_count = floats;        // the replica's floats
    h.request_id = static_cast<std::int64_t>(record.size());
    h.slots = state_buffers;
    if (handover) h.end = kHandover;
  }
  // The pieces, then the record (padded to whole floats), across the slices.
  std::size_t at = 0;
  std::int64_t room = 0;
  float* out = nullptr;
  const auto put = [&](const float* src, std::int64_t count) {
    while (count > 0) {
      if (room == 0) {
        Buffer& b = slices_[at++];
        out = b.payload();
        room = b.header().payload;
      }
      const std::int64_t k = std::min(room, count);
      out = std::copy_n(src, k, out);
      src += k;
      count -= k;
      room -= k;
    }
  };
  for (const auto& p : pieces)
    put(p.data(), static_cast<std::int64_t>(p.size()));
  if (record_n > 0) {
    std::vector<float> tail(static_cast<std::size_t>(record_n), 0.f);  // the padding after the last byte
    std::memcpy(tail.data(), record.data(), record.size());
    put(tail.data(), record_n);
  }
  dests_ = dests;
  next_slice_ = 0;
  if (handover) {
    flush(dests);
  } else {
    pace(dests);
  }
  if (first_step_ < 0) first_step_ = step;
  last_step_ = step;
  ++sent_;
  last_at_ = Clock::now();
  cost_ = seconds_between(t0, last_at_);
  cost_sum_ += cost_;
}

bool ReplicaSender::settle(int id, double seconds) {
  const auto t0 = Clock::now();
  for (auto it = inflight_.begin(); it != inflight_.end();) {
    if (it->first != id) {
      ++it;
      continue;
    }
    if (!wait_for(&it->second, std::max(0.0, seconds - since(t0)))) {
      give_up();
      return false;
    }
    it = inflight_.erase(it);
  }
  return true;
}

ReplicaSender::Answer ReplicaSender::acknowledged(const Dest& d, std::int64_t step, double seconds, int* signo) {
  Buffer ack(0);
  MPI_Request req = MPI_REQUEST_NULL;
  try {
    irecv(ack, d.peer, kTagReplica, &req, d.comm);
    if (!wait_for(&req, seconds)) {
      if (MPI_Cancel(&req) != MPI_SUCCESS || !wait_for(&req, 1.0)) abandon(std::move(ack));
      return Answer::kNone;
    }
  } catch (const ProcessFailed&) {  // ULFM: the standby is gone (it left on a notice of its own)
    abandon(std::move(ack));
    return Answer::kNone;
  }
  const MsgHeader& h = ack.header();
  if (!check_header(h, 0).empty() || h.kind != MsgKind::kReplica || h.step != step) return Answer::kNone;
  if (signo) *signo = h.signal;
  return h.end == kHandover ? Answer::kTaken : Answer::kRefused;
}

ReplicaHost::ReplicaHost(int shards) : parts_(static_cast<std::size_t>(shards)) {}

void ReplicaHost::poll(MPI_Comm comm) {
  if (closed_) return;
  for (std::size_t s = 0; s < parts_.size(); ++s) {
    Part& p = parts_[s];
    for (;;) {  // every slice that came (a shard sends one after each of its updates)
      if (p.req == MPI_REQUEST_NULL) {
        int flag = 0;
        MPI_Status st;
        MT_MPI(MPI_Iprobe(static_cast<int>(s), kTagReplica, comm, &flag, &st));
        if (!flag) break;
        int count = 0;
        MT_MPI(MPI_Get_count(&st, MPI_FLOAT, &count));
        if (count < kHeaderFloats)
          throw Error(kExitInternal, "worker: malformed replica from shard " + std::to_string(s) + ": " +
                                         std::to_string(count) + " floats");
        if (static_cast<int>(p.slice.data.size()) != count) p.slice = Buffer(count - kHeaderFloats);
        MT_MPI(MPI_Irecv(p.slice.data.data(), count, MPI_FLOAT, static_cast<int>(s), kTagReplica, comm, &p.req));
      }
      int done = 0;
      MT_MPI(MPI_Test(&p.req, &done, MPI_STATUS_IGNORE));
      if (!done) break;
      take_slice(p, s, comm);
    }
  }
}

void ReplicaHost::take_slice(Part& p, std::size_t s, MPI_Comm comm) {
  const MsgHeader h = p.slice.header();
  const std::int64_t size = static_cast<std::int64_t>(p.slice.data.size()) - kHeaderFloats;
  std::string bad = check_header(h, size);
  if (bad.empty() && h.kind != MsgKind::kReplica) bad = "not a replica";
  if (bad.empty() && (h.payload != size || h.param_count < h.payload || h.cursor_position < 0 ||
                      h.cursor_position > h.param_count - h.payload))
    bad = "a slice of " + std::to_string(h.payload) + " floats at " + std::to_string(h.cursor_position) + " of " +
          std::to_string(h.param_count);
  if (!bad.empty()) throw Error(kExitInternal, "worker: malformed replica from shard " + std::to_string(s) + ": " + bad);
  if (h.cursor_position == 0) {  // a replica begins (one given up midway before it is dropped)
    if (static_cast<std::int64_t>(p.incoming.data.size()) != kHeaderFloats + h.param_count)
      p.incoming = Buffer(h.param_count);
    p.incoming.header() = h;
    p.incoming.header().payload = h.param_count;
    p.filled = 0;
  } else if (p.filled != h.cursor_position || p.incoming.header().step != h.step) {
    p.filled = -1;  // the rest of a replica whose beginning this standby does not hold: dropped
    return;
  }
  std::copy_n(p.slice.payload(), h.payload, p.incoming.payload() + h.cursor_position);
  p.filled += h.payload;
  if (p.filled < h.param_count) return;
  p.filled = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::swap(p.incoming, p.newest);
    p.has = true;
  }
  if (h.end == kHandover) {  // the shard waits for this before it leaves
    // Taken unless this process has a notice too (within the grace): a notice to the whole job.
    const auto t0 = Clock::now();
    while (!notice_signal() && since(t0) < kHandoverGrace)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const int sig = notice_signal();
    Buffer ack(0);
    ack.header() = MsgHeader{};
    ack.header().kind = MsgKind::kReplica;
    ack.header().step = h.step;
    ack.header().end = sig ? 0 : kHandover;
    ack.header().signal = sig;
    MPI_Request req = MPI_REQUEST_NULL;
    isend(ack, 0, static_cast<int>(s), kTagReplica, &req, comm);
    if (!wait_for(&req, 1.0)) abandon(std::move(ack));
  }
}

bool ReplicaHost::any() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::any_of(parts_.begin(), parts_.end(), [](const Part& p) { return p.has; });
}

const MsgHeader& ReplicaHost::newest_header(const Part& p) {
  return *reinterpret_cast<const MsgHeader*>(p.newest.data.data());
}

std::int64_t ReplicaHost::newest_step(int s) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Part& p = parts_.at(static_cast<std::size_t>(s));
  return p.has ? newest_header(p).step : -1;
}

std::optional<ReplicaState> ReplicaHost::assemble(const Model& model, const Partition& part, int slots) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!std::all_of(parts_.begin(), parts_.end(), [](const Part& p) { return p.has; })) return std::nullopt;
  ReplicaState r;
  r.params = FlatTensors(model.params());
  r.bn_stats = FlatTensors(model.stats());
  const int buffers = newest_header(parts_[0]).slots;
  for (int j = 0; j < buffers; ++j)
    r.state.emplace_back(model.params());
  for (std::size_t s = 0; s < parts_.size(); ++s) {
    const MsgHeader h = newest_header(parts_[s]);
    const auto n = static_cast<std::size_t>(part.floats(static_cast<int>(s)));
    const std::size_t stats = s == 0 ? static_cast<std::size_t>(model.stats().total()) : 0;
    const std::size_t record =
        s == 0 ? static_cast<std::size_t>(record_floats(static_cast<std::size_t>(h.request_id))) : 0;
    const std::size_t table = 2 * static_cast<std::size_t>(slots);  // the pushes handled per slot
    if (h.slots != buffers || h.payload < 0 ||
        static_cast<std::size_t>(h.payload) != (1 + static_cast<std::size_t>(buffers)) * n + table + stats + record)
      throw Error(kExitInternal, "worker: shard " + std::to_string(s) + "'s replica does not fit this model (" +
                                     std::to_string(h.payload) + " floats, " + std::to_string(h.slots) +
                                     " state buffers)");
    const std::span<const float> payload(parts_[s].newest.data.data() + kHeaderFloats,
                                         static_cast<std::size_t>(h.payload));
    part.unpack(static_cast<int>(s), payload.subspan(0, n), r.params);
    for (int j = 0; j < buffers; ++j)
      part.unpack(static_cast<int>(s), payload.subspan((1 + static_cast<std::size_t>(j)) * n, n),
                  r.state[static_cast<std::size_t>(j)]);
    r.handled.push_back(handled_from_floats(payload.subspan((1 + static_cast<std::size_t>(buffers)) * n, table)));
    if (s == 0) {
      const auto tail = payload.subspan((1 + static_cast<std::size_t>(buffers)) * n + table);
      std::copy_n(tail.begin(), stats, r.bn_stats.flat().data());
      r.record.assign(reinterpret_cast<const char*>(tail.data() + stats), static_cast<std::size_t>(h.request_id));
      r.global_step = h.step;
    }
    r.shard_steps.push_back(h.step);
  }
  return r;
}

void ReplicaHost::close() {
  closed_ = true;
  for (Part& p : parts_) {
    if (p.req == MPI_REQUEST_NULL) continue;
    int done = 0;
    if (MPI_Test(&p.req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) continue;
    if (MPI_Cancel(&p.req) != MPI_SUCCESS || !wait_for(&p.req, 1.0)) abandon(std::move(p.slice));
  }
}

void ReplicaHost::abandon_receives() {
  closed_ = true;
  for (Part& p : parts_)
    if (p.req != MPI_REQUEST_NULL) {
      abandon(std::move(p.slice));
      p.req = MPI_REQUEST_NULL;
    }
}

}  // namespace mt
