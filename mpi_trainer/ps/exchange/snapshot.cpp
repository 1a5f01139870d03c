#include "ps/exchange/snapshot.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/error.hpp"
#include "ps/wire/mpi_env.hpp"

namespace mt {

Error shard_lost(int shard, double deadline) {
  return Error(kExitPsLost, "parameter-server shard " + std::to_string(shard) + " did not answer within " +
                                std::to_string(static_cast<int>(deadline)) + " s: the parameter server is lost");
}

void mean_momentum(std::span<const FlatTensors> momenta, FlatTensors& out) {
  MT_ASSERT(!momenta.empty(), "a momentum to average");
  float* o = out.flat().data();
  const std::int64_t n = out.flat().numel();
  std::fill_n(o, n, 0.f);
  for (const auto& m : momenta) {
    const float* v = m.flat().data();
    for (std::int64_t i = 0; i < n; ++i)
      o[i] += v[i];
  }
  const float scale = 1.f / static_cast<float>(momenta.size());
  for (std::int64_t i = 0; i < n; ++i)
    o[i] *= scale;
}

StateView view_state(const std::vector<FlatTensors>& state, int momenta, bool gap, FlatTensors& mean) {
  MT_ASSERT(momenta >= 1 && state.size() == static_cast<std::size_t>(momenta + (gap ? 1 : 0)),
            "the state buffers: the momenta, then the gap's");
  const std::span<const FlatTensors> all(state);
  if (momenta > 1) mean_momentum(all.first(static_cast<std::size_t>(momenta)), mean);
  return StateView{
      momenta > 1 ? mean : state[0],
      ExtraOptimizerState{momenta > 1 ? all.first(static_cast<std::size_t>(momenta)) : std::span<const FlatTensors>(),
                          gap ? &state.back() : nullptr}};
}

SnapshotGather::SnapshotGather(const Model& model, const Partition& part, double deadline, int momenta, bool gap,
                               MPI_Comm comm)
    : comm_(comm),
      part_(part),
      deadline_(deadline),
      momenta_(momenta),
      buffers_(momenta + (gap ? 1 : 0)),
      params_(model.params()),
      stats_(model.stats()),
      mean_(momenta > 1 ? FlatTensors(model.params()) : FlatTensors()) {  // dana only
  MT_ASSERT(momenta >= 1, "at least one momentum buffer");
  for (int j = 0; j < buffers_; ++j)
    velocities_.emplace_back(model.params());
  for (int k = 1; k < part.shards(); ++k) {
    parts_.emplace_back(message_floats(k));
    requests_.emplace_back(0);
  }
  part_reqs_.assign(parts_.size(), MPI_REQUEST_NULL);
  request_reqs_.assign(parts_.size(), MPI_REQUEST_NULL);
}

void SnapshotGather::wait(MPI_Request* req, int k) const {
  if (!wait_for(req, deadline_)) throw shard_lost(k, deadline_);
}

void SnapshotGather::unpack(int k, std::span<const float> message, FlatTensors& params,
                            std::vector<FlatTensors>& state) const {
  const auto n = static_cast<std::size_t>(part_.floats(k));
  MT_ASSERT(static_cast<int>(state.size()) == buffers_ && message.size() == (1 + state.size()) * n,
            "a shard's message: its parameters and every state buffer");
  part_.unpack(k, message.subspan(0, n), params);
  for (std::size_t j = 0; j < state.size(); ++j)
    part_.unpack(k, message.subspan((1 + j) * n, n), state[j]);
}

void SnapshotGather::send_start(const FlatTensors& params, const std::vector<FlatTensors>& state, std::int64_t step,
                                std::span<const StartLog> logs) {
  MT_ASSERT(static_cast<int>(state.size()) == buffers_, "every state buffer");
  for (int k = 1; k < part_.shards(); ++k) {
    const auto n = static_cast<std::size_t>(part_.floats(k));
    const StartLog none;
    const StartLog& log = static_cast<std::size_t>(k) < logs.size() ? logs[static_cast<std::size_t>(k)] : none;
    const auto log_floats = static_cast<std::int64_t>((log.log.size() + sizeof(float) - 1) / sizeof(float));
    Buffer b(message_floats(k) + log_floats);
    b.header() = MsgHeader{};
    b.header().kind = MsgKind::kParams;
    b.header().step = step;
    b.header().payload = message_floats(k) + log_floats;
    b.header().model_version = log.replica_step;
    b.header().request_id = static_cast<std::int64_t>(log.log.size());
    part_.pack(k, params, std::span<float>(b.payload(), n));
    for (std::size_t j = 0; j < state.size(); ++j)
      part_.pack(k, state[j], std::span<float>(b.payload() + (1 + j) * n, n));
    if (!log.log.empty()) {
      b.payload()[message_floats(k) + log_floats - 1] = 0.f;  // the padding after the last byte
      std::memcpy(b.payload() + message_floats(k), log.log.data(), log.log.size());
    }
    MT_MPI(MPI_Send(b.data.data(), b.count(), MPI_FLOAT, k, kTagControl, comm_));
  }
}

void SnapshotGather::post(int k, const MsgHeader& h, bool blocking) {
  const auto i = static_cast<std::size_t>(k - 1);
  wait(&request_reqs_[i], k);  // the previous one, a header-only message sent long ago
  Buffer& b = requests_[i];
  b.header() = h;
  if (blocking)
    MT_MPI(MPI_Send(b.data.data(), b.count(), MPI_FLOAT, k, kTagControl, comm_));
  else
    isend(b, 0, k, kTagControl, &request_reqs_[i], comm_);
}

void SnapshotGather::send_control(MsgKind kind, std::int32_t end, bool blocking) {
  MsgHeader h;
  h.kind = kind;
  h.end = end;
  for (int k = 1; k < part_.shards(); ++k)
    post(k, h, blocking);
}

void SnapshotGather::begin(unsigned purposes, std::span<const float> params0, std::span<const float> velocity0,
                           const FlatTensors& stats, SnapshotMeta meta) {
  MT_ASSERT(!gathering_, "a snapshot is already being gathered");
  gathering_ = true;
  purposes_ = purposes;
  started_ = Clock::now();
  ++id_;
  part_.unpack(0, params0, params_);
  const auto n0 = static_cast<std::size_t>(part_.floats(0));
  MT_ASSERT(velocity0.size() == static_cast<std::size_t>(buffers_) * n0, "shard 0's state buffers");
  for (std::size_t j = 0; j < velocities_.size(); ++j)
    part_.unpack(0, velocity0.subspan(j * n0, n0), velocities_[j]);
  std::copy_n(stats.flat().data(), stats.flat().numel(), stats_.flat().data());
  meta_ = std::move(meta);
  MsgHeader request;
  request.kind = MsgKind::kSnapshotRequest;
  request.request_id = id_;
  for (int k = 1; k < part_.shards(); ++k) {
    const auto i = static_cast<std::size_t>(k - 1);
    post(k, request, /*blocking=*/false);
    irecv(parts_[i], k, kTagSnapshot, &part_reqs_[i], comm_);
  }
}

bool SnapshotGather::arrived() {
  if (!gathering_) return false;
  if (part_reqs_.empty()) return true;
  int all = 0;
  MT_MPI(MPI_Testall(static_cast<int>(part_reqs_.size()), part_reqs_.data(), &all, MPI_STATUSES_IGNORE));
  return all != 0;
}

Snapshot SnapshotGather::complete() {
  for (int k = 1; k < part_.shards(); ++k) {
    Buffer& b = parts_[static_cast<std::size_t>(k - 1)];
    if (const auto bad = check_header(b.header(), message_floats(k)); !bad.empty())
      throw Error(kExitInternal, "parameter server: bad snapshot from shard " + std::to_string(k) + ": " + bad);
    unpack(k, std::span<const float>(b.payload(), static_cast<std::size_t>(message_floats(k))), params_, velocities_);
  }
  gathering_ = false;
  const StateView state = view_state(velocities_, momenta_, buffers_ > momenta_, mean_);
  return Snapshot{params_,           state.momentum, stats_,        meta_.global_step, meta_.slot_cursors,
                  meta_.run_seconds, meta_.lr,       meta_.workers, state.extra};
}

void SnapshotGather::collect_final(FlatTensors& params, std::vector<FlatTensors>& state) {
  for (int k = 1; k < part_.shards(); ++k) {
    Buffer b(message_floats(k));
    MPI_Request req = MPI_REQUEST_NULL;
    irecv(b, k, kTagFinal, &req, comm_);
    wait(&req, k);
    unpack(k, std::span<const float>(b.payload(), static_cast<std::size_t>(message_floats(k))), params, state);
  }
}

void SnapshotGather::settle() {
  if (!gathering_) return;
  for (std::size_t i = 0; i < part_reqs_.size(); ++i)
    wait(&part_reqs_[i], static_cast<int>(i) + 1);
  gathering_ = false;
}

SnapshotAnswer::SnapshotAnswer(int shard, std::int64_t floats, double deadline, int buffers, MPI_Comm comm)
    : comm_(comm),
      shard_(shard),
      floats_(floats),
      buffers_(buffers),
      deadline_(deadline),
      snapshot_((1 + buffers) * floats) {}

void SnapshotAnswer::wait(MPI_Request* req) const {
  if (!wait_for(req, deadline_)) throw shard_lost(0, deadline_);
}

std::int64_t SnapshotAnswer::receive_start(std::span<float> params, std::span<float> velocity, StartLog* log) {
  const std::int64_t total = (1 + buffers_) * floats_;
  MT_ASSERT(static_cast<std::int64_t>(velocity.size()) == buffers_ * floats_, "this shard's state buffers");
  MPI_Status st;
  MT_MPI(MPI_Probe(0, kTagControl, comm_, &st));  // a takeover's start carries the replay log too
  int count = 0;
  MT_MPI(MPI_Get_count(&st, MPI_FLOAT, &count));
  Buffer b(std::max<std::int64_t>(total, count - kHeaderFloats));
  MT_MPI(MPI_Recv(b.data.data(), count, MPI_FLOAT, 0, kTagControl, comm_, MPI_STATUS_IGNORE));
  const MsgHeader& h = b.header();
  if (const auto bad = check_header(h, b.count() - kHeaderFloats);
      !bad.empty() || h.payload < total || h.request_id < 0 ||
      h.request_id > (h.payload - total) * static_cast<std::int64_t>(sizeof(float)))
    throw Error(kExitInternal, "parameter server shard " + std::to_string(shard_) +
                                   ": bad start state: " + (bad.empty() ? "its sizes" : bad));
  std::copy_n(b.payload(), floats_, params.data());
  std::copy_n(b.payload() + floats_, buffers_ * floats_, velocity.data());
  if (log) {
    log->replica_step = h.model_version;
    log->log.assign(reinterpret_cast<const char*>(b.payload() + total), static_cast<std::size_t>(h.request_id));
  }
  rearm();
  return b.header().step;
}

void SnapshotAnswer::rearm() { irecv(control_, 0, kTagControl, &control_req_, comm_); }

void SnapshotAnswer::send(Buffer& buf, int tag, std::int64_t id, std::int64_t step, std::span<const float> params,
                          std::span<const float> velocity, MPI_Request* req) {
  buf.header() = MsgHeader{};
  buf.header().kind = MsgKind::kSnapshot;
  buf.header().step = step;
  buf.header().request_id = id;
  const std::int64_t total = (1 + buffers_) * floats_;
  MT_ASSERT(static_cast<std::int64_t>(velocity.size()) == buffers_ * floats_, "this shard's state buffers");
  buf.header().payload = total;
  std::copy(params.begin(), params.end(), buf.payload());
  std::copy(velocity.begin(), velocity.end(), buf.payload() + floats_);
  isend(buf, total, 0, tag, req, comm_);
}

void SnapshotAnswer::answer(std::int64_t id, std::int64_t step, std::span<const float> params,
                            std::span<const float> velocity) {
  wait(&snapshot_req_);  // shard 0 took the previous answer before asking again
  send(snapshot_, kTagSnapshot, id, step, params, velocity, &snapshot_req_);
}

std::int32_t SnapshotAnswer::finish(std::int64_t step, std::span<const float> params, std::span<const float> velocity) {
  Buffer final_state((1 + buffers_) * floats_);
  MPI_Request final_req = MPI_REQUEST_NULL;
  send(final_state, kTagFinal, 0, step, params, velocity, &final_req);
  wait(&final_req);
  std::int32_t end = 0;
  for (;;) {
    wait(&control_req_);
    if (control().kind == MsgKind::kStop) {
      end = control().end;
      break;
    }
    if (control().kind != MsgKind::kDrain) answer(control().request_id, step, params, velocity);
    rearm();
  }
  wait(&snapshot_req_);
  return end;
}

}  // namespace mt
