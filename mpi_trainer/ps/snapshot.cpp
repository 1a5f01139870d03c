#include "ps/snapshot.hpp"

#include <algorithm>
#include <utility>

#include "core/error.hpp"
#include "ps/mpi_env.hpp"

namespace mt {

Error shard_lost(int shard, double deadline) {
  return Error(kExitPsLost, "parameter-server shard " + std::to_string(shard) + " did not answer within " +
                                std::to_string(static_cast<int>(deadline)) + " s: the parameter server is lost");
}

SnapshotGather::SnapshotGather(const Model& model, const Partition& part, double deadline)
    : part_(part), deadline_(deadline), params_(model.params()), velocity_(model.params()), stats_(model.stats()) {
  for (int k = 1; k < part.shards(); ++k) {
    parts_.emplace_back(2 * part.floats(k));
    requests_.emplace_back(0);
  }
  part_reqs_.assign(parts_.size(), MPI_REQUEST_NULL);
  request_reqs_.assign(parts_.size(), MPI_REQUEST_NULL);
}

void SnapshotGather::wait(MPI_Request* req, int k) const {
  if (!wait_for(req, deadline_)) throw shard_lost(k, deadline_);
}

void SnapshotGather::send_start(const FlatTensors& params, const FlatTensors& momentum, std::int64_t step) {
  for (int k = 1; k < part_.shards(); ++k) {
    const auto n = static_cast<std::size_t>(part_.floats(k));
    Buffer b(2 * part_.floats(k));
    b.header() = MsgHeader{};
    b.header().kind = MsgKind::kParams;
    b.header().step = step;
    b.header().payload = 2 * part_.floats(k);
    part_.pack(k, params, std::span<float>(b.payload(), n));
    part_.pack(k, momentum, std::span<float>(b.payload() + n, n));
    MT_MPI(MPI_Send(b.data.data(), b.count(), MPI_FLOAT, k, kTagControl, MPI_COMM_WORLD));
  }
}

void SnapshotGather::post(int k, const MsgHeader& h, bool blocking) {
  const auto i = static_cast<std::size_t>(k - 1);
  wait(&request_reqs_[i], k);  // the previous one, a header-only message sent long ago
  Buffer& b = requests_[i];
  b.header() = h;
  if (blocking)
    MT_MPI(MPI_Send(b.data.data(), b.count(), MPI_FLOAT, k, kTagControl, MPI_COMM_WORLD));
  else
    isend(b, 0, k, kTagControl, &request_reqs_[i]);
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
  part_.unpack(0, velocity0, velocity_);
  std::copy_n(stats.flat().data(), stats.flat().numel(), stats_.flat().data());
  meta_ = std::move(meta);
  MsgHeader request;
  request.kind = MsgKind::kSnapshotRequest;
  request.request_id = id_;
  for (int k = 1; k < part_.shards(); ++k) {
    const auto i = static_cast<std::size_t>(k - 1);
    post(k, request, /*blocking=*/false);
    irecv(parts_[i], k, kTagSnapshot, &part_reqs_[i]);
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
    if (const auto bad = check_header(b.header(), 2 * part_.floats(k)); !bad.empty())
      throw Error(kExitInternal, "parameter server: bad snapshot from shard " + std::to_string(k) + ": " + bad);
    const auto n = static_cast<std::size_t>(part_.floats(k));
    part_.unpack(k, std::span<const float>(b.payload(), n), params_);
    part_.unpack(k, std::span<const float>(b.payload() + n, n), velocity_);
  }
  gathering_ = false;
  return Snapshot{params_,           velocity_, stats_,       meta_.global_step, meta_.slot_cursors,
                  meta_.run_seconds, meta_.lr,  meta_.workers};
}

void SnapshotGather::collect_final(FlatTensors& params, FlatTensors& momentum) {
  for (int k = 1; k < part_.shards(); ++k) {
    Buffer b(2 * part_.floats(k));
    MPI_Request req = MPI_REQUEST_NULL;
    irecv(b, k, kTagFinal, &req);
    wait(&req, k);
    const auto n = static_cast<std::size_t>(part_.floats(k));
    part_.unpack(k, std::span<const float>(b.payload(), n), params);
    part_.unpack(k, std::span<const float>(b.payload() + n, n), momentum);
  }
}

void SnapshotGather::settle() {
  if (!gathering_) return;
  for (std::size_t i = 0; i < part_reqs_.size(); ++i)
    wait(&part_reqs_[i], static_cast<int>(i) + 1);
  gathering_ = false;
}

SnapshotAnswer::SnapshotAnswer(int shard, std::int64_t floats, double deadline)
    : shard_(shard), floats_(floats), deadline_(deadline), snapshot_(2 * floats) {}

void SnapshotAnswer::wait(MPI_Request* req) const {
  if (!wait_for(req, deadline_)) throw shard_lost(0, deadline_);
}

std::int64_t SnapshotAnswer::receive_start(std::span<float> params, std::span<float> velocity) {
  Buffer b(2 * floats_);
  MT_MPI(MPI_Recv(b.data.data(), b.count(), MPI_FLOAT, 0, kTagControl, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
  if (const auto bad = check_header(b.header(), 2 * floats_); !bad.empty())
    throw Error(kExitInternal, "parameter server shard " + std::to_string(shard_) + ": bad start state: " + bad);
  std::copy_n(b.payload(), floats_, params.data());
  std::copy_n(b.payload() + floats_, floats_, velocity.data());
  rearm();
  return b.header().step;
}

void SnapshotAnswer::rearm() { irecv(control_, 0, kTagControl, &control_req_); }

void SnapshotAnswer::send(Buffer& buf, int tag, std::int64_t id, std::int64_t step, std::span<const float> params,
                          std::span<const float> velocity, MPI_Request* req) {
  buf.header() = MsgHeader{};
  buf.header().kind = MsgKind::kSnapshot;
  buf.header().step = step;
  buf.header().request_id = id;
  buf.header().payload = 2 * floats_;
  std::copy(params.begin(), params.end(), buf.payload());
  std::copy(velocity.begin(), velocity.end(), buf.payload() + floats_);
  isend(buf, 2 * floats_, 0, tag, req);
}

void SnapshotAnswer::answer(std::int64_t id, std::int64_t step, std::span<const float> params,
                            std::span<const float> velocity) {
  wait(&snapshot_req_);  // shard 0 took the previous answer before asking again
  send(snapshot_, kTagSnapshot, id, step, params, velocity, &snapshot_req_);
}

std::int32_t SnapshotAnswer::finish(std::int64_t step, std::span<const float> params, std::span<const float> velocity) {
  Buffer final_state(2 * floats_);
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
