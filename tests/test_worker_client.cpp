// ps/exchange/worker_client (the worker's exchange core) against a fake shard: this process itself over
// MPI_COMM_SELF (a singleton MPI, no launcher). The test plays shard 0: it posts the shard's
// receive of the push and the reply before the client's exchange, then reads what arrived. Built
// into mt_ps_transport_tests (its main starts MPI); CTest runs these as `worker_client` ([client]).
// Each answer the fault-tolerance layer acts on: ok, stop (clean, failed), a silent shard, a
// shard the MPI library reported failed.
#include <mpi.h>

#include <atomic>
#include <mutex>
#include <span>
#include <vector>

#include <catch2/catch.hpp>

#include "nn/resnet.hpp"
#include "ps/wire/mpi_env.hpp"
#include "ps/wire/transport.hpp"
#include "ps/exchange/worker_client.hpp"

using namespace mt;

namespace {

// One client of a one-shard parameter server at rank 0 of MPI_COMM_SELF, and the fake shard's side.
struct Fixture {
  explicit Fixture(PushPrecision precision = PushPrecision::kFp32) : opts(options(precision)) {}
  static WorkerOptions options(PushPrecision precision) {
    WorkerOptions o;
    o.num_ps = 1;
    o.batch_size = 32;
    o.failure_timeout = 0.3;
    o.push_precision = precision;
    return o;
  }
  Model model{parse_model("resnet8")};
  WorkerOptions opts;
  std::mutex mpi;
  std::atomic<bool> ps_failed{false};
  std::vector<int> reported;  // shards on_failed named
  int after_tests = 0;
  WorkerClient client{opts,
                      model,
                      MPI_COMM_SELF,
                      mpi,
                      ps_failed,
                      [this](int s) {
                        reported.push_back(s);
                        ps_failed = true;
                      },
                      [this] { ++after_tests; }};
  const std::int64_t reply_floats = wire_floats(opts.push_precision, model.param_count());
  const std::int64_t push_floats = reply_floats + model.stats().total();
  Buffer push{push_floats};  // what the shard received
  Buffer reply{reply_floats};
  MPI_Request push_req = MPI_REQUEST_NULL, reply_req = MPI_REQUEST_NULL;

  // The shard's receive of the worker's next message.
  void shard_receives() { irecv(push, 0, kTagToPs, &push_req, MPI_COMM_SELF); }
  // The shard's answer, sent ahead: `kind` with `payload` floats of `value`; to a join (`slots`
  // > 0), its data slot 0 of `slots`, as Shard::reply says.
  void shard_replies(MsgKind kind, std::int64_t step, float value, std::int32_t end = 0, int exit_code = 0,
                     std::int32_t slots = 0) {
    reply.header() = MsgHeader{};
    reply.header().kind = kind;
    reply.header().step = step;
    reply.header().model_version = step;
    reply.header().end = end;
    reply.header().exit_code = exit_code;
    reply.header().slots = slots;
    const std::int64_t payload = kind == MsgKind::kParams ? reply_floats : 0;
    reply.header().payload = payload;
    if (payload > 0) {
      const std::vector<float> params(static_cast<std::size_t>(model.param_count()), value);
      encode_values(opts.push_precision, params, reply.payload());
    }
    isend(reply, payload, 0, kTagToWorker, &reply_req, MPI_COMM_SELF);
  }
  void settle() {
    REQUIRE(wait_for(&push_req, 5.0));
    REQUIRE(wait_for(&reply_req, 5.0));
  }
  // The join, answered with parameters of `value`.
  void join(float value) {
    client.prepare_join(false);
    shard_receives();
    shard_replies(MsgKind::kParams, 0, value, 0, 0, /*slots=*/1);
    REQUIRE(client.push_pull(MsgKind::kJoin) == WorkerClient::Reply::kOk);
    settle();
  }
};

}  // namespace

TEST_CASE("worker client: a join and a push answered with parameters are ok", "[mpi][ps][client]") {
  Fixture f;
  f.join(0.5f);
  CHECK(f.push.header().kind == MsgKind::kJoin);
  CHECK(f.push.header().param_count == f.model.param_count());
  CHECK(f.push.header().batch == 32);
  CHECK(f.client.params().flat().data()[0] == 0.5f);
  CHECK(f.after_tests >= 1);

  // A push carries the gradient, the BN batch statistics and the step's header fields.
  FlatTensors grads(f.model.params()), stats(f.model.stats());
  for (std::int64_t i = 0; i < grads.flat().numel(); ++i) grads.flat().data()[i] = 0.125f;
  for (std::int64_t i = 0; i < stats.flat().numel(); ++i) stats.flat().data()[i] = 2.0f;
  StepComputer::Step st;
  st.loss = 1.5f;
  st.cursor = LoaderCursor{3, 96};
  CHECK(f.client.pulled(0)[0] == 0.5f);  // the push journal's copy: what the gradient is computed on
  f.client.prepare_push(st, grads, stats, false, 1);
  CHECK(f.client.prepared(0).push_id == 1);
  CHECK(f.client.push_payload(0).size() == static_cast<std::size_t>(f.push_floats));
  f.shard_receives();
  f.shard_replies(MsgKind::kParams, 7, 0.25f);
  REQUIRE(f.client.push_pull(MsgKind::kPush) == WorkerClient::Reply::kOk);
  f.settle();
  const MsgHeader& h = f.push.header();
  CHECK(h.kind == MsgKind::kPush);
  CHECK(h.payload == f.push_floats);
  CHECK(h.loss == 1.5f);
  CHECK(h.cursor_epoch == 3);
  CHECK(h.cursor_position == 96);
  CHECK(f.push.payload()[0] == 0.125f);
  CHECK(f.push.payload()[f.push_floats - 1] == 2.0f);
  CHECK(f.client.global_step() == 7);
  CHECK(f.client.params().flat().data()[f.model.param_count() - 1] == 0.25f);
  CHECK(f.client.replied(0));
  CHECK(f.client.pulled(0)[0] == 0.25f);
  CHECK(h.push_id == 1);
  CHECK(f.reported.empty());
}

TEST_CASE("worker client: a push's reply that comes after its receive was cancelled is not the join's", "[mpi][ps][fault][client]") {
  // A rejoin after a cut: the reply to the last push before it, delivered once the cut healed,
  // reaches the join's receive first. It names no data slots: dropped, the join's own is taken.
  Fixture f;
  f.join(0.5f);
  f.client.cancel_in_flight();
  f.client.prepare_join(false);
  f.shard_receives();
  f.shard_replies(MsgKind::kParams, 62, 0.25f);  // the stale one: a push's reply
  Buffer join_reply{f.reply_floats};
  join_reply.header() = MsgHeader{};
  join_reply.header().kind = MsgKind::kParams;
  join_reply.header().step = join_reply.header().model_version = 104;
  join_reply.header().payload = f.reply_floats;
  join_reply.header().slots = 2;
  join_reply.header().slot = 1;
  const std::vector<float> params(static_cast<std::size_t>(f.model.param_count()), 0.75f);
  encode_values(f.opts.push_precision, params, join_reply.payload());
  MPI_Request join_req = MPI_REQUEST_NULL;
  isend(join_reply, f.reply_floats, 0, kTagToWorker, &join_req, MPI_COMM_SELF);
  REQUIRE(f.client.push_pull(MsgKind::kJoin) == WorkerClient::Reply::kOk);
  f.settle();
  REQUIRE(wait_for(&join_req, 5.0));
  CHECK(f.client.global_step() == 104);
  CHECK(f.client.params().flat().data()[0] == 0.75f);  // the join's parameters, not the stale reply's
}

TEST_CASE("worker client: a stop ends the exchange, clean or with the parameter server's exit code", "[mpi][ps][client]") {
  for (const bool failed : {false, true}) {
    Fixture f;
    f.client.prepare_join(false);
    f.shard_receives();
    f.shard_replies(MsgKind::kStop, 0, 0, failed ? kFailedEnd : kCleanEnd, failed ? kExitCheckpoint : 0);
    REQUIRE(f.client.push_pull(MsgKind::kJoin) == WorkerClient::Reply::kStop);
    f.settle();
    CHECK(f.client.clean_end() == !failed);
    CHECK(f.client.failed_code() == (failed ? kExitCheckpoint : 0));
  }
}

TEST_CASE("worker client: a shard silent past --failure-timeout is lost, and said so", "[mpi][ps][fault][client]") {
  Fixture f;
  // The first exchange waits for the parameter server to start: max(60 s, 10 x the timeout). A
  // push waits the timeout: answer the join, then stay silent.
  f.join(0.5f);
  FlatTensors grads(f.model.params()), stats(f.model.stats());
  f.client.prepare_push(StepComputer::Step{}, grads, stats, false, 1);
  f.shard_receives();  // the push arrives; no reply comes
  const auto t = Clock::now();
  REQUIRE(f.client.push_pull(MsgKind::kPush) == WorkerClient::Reply::kLost);
  const double waited = since(t);
  CHECK(waited >= 0.3);
  CHECK(waited < 2.0);
  CHECK(f.client.loss().shard == 0);
  CHECK(f.client.loss().waited >= 0.3);
  CHECK(f.client.loss().at_unix > 0);
  CHECK(f.reported.empty());
  // The receive of the reply never completes: the buffer is kept to the end, no MPI call waits.
  f.client.abandon_in_flight();
  REQUIRE(wait_for(&f.push_req, 5.0));
  // A late reply lands in the abandoned buffer, not in a later test's receive.
  f.shard_replies(MsgKind::kParams, 1, 0.f);
  REQUIRE(wait_for(&f.reply_req, 5.0));
}

TEST_CASE("worker client: a shard the MPI library reported failed sends nothing more", "[mpi][ps][fault][client]") {
  Fixture f;
  f.client.prepare_join(false);
  f.ps_failed = true;  // as the heartbeat thread raises it (ULFM) while a step computes
  f.shard_receives();
  REQUIRE(f.client.push_pull(MsgKind::kJoin) == WorkerClient::Reply::kFailed);
  int arrived = 1;
  MT_MPI(MPI_Test(&f.push_req, &arrived, MPI_STATUS_IGNORE));
  CHECK_FALSE(arrived);  // nothing was sent
  MT_MPI(MPI_Cancel(&f.push_req));
  CHECK(wait_for(&f.push_req, 5.0));
}

TEST_CASE("worker client: bf16 pushes and replies carry two values a slot, the statistics in fp32", "[mpi][ps][client]") {
  Fixture f(PushPrecision::kBf16);
  f.join(1.0f / 3);
  CHECK(f.push.header().precision == static_cast<std::int32_t>(PushPrecision::kBf16));
  float third = 1.0f / 3;
  round_to_wire(PushPrecision::kBf16, std::span<float>(&third, 1));
  CHECK(third != 1.0f / 3);
  CHECK(f.client.params().flat().data()[0] == third);  // the reply's bf16, decoded
  CHECK(f.client.params().flat().data()[f.model.param_count() - 1] == third);

  FlatTensors grads(f.model.params()), stats(f.model.stats());
  for (std::int64_t i = 0; i < grads.flat().numel(); ++i) grads.flat().data()[i] = 0.1f * float(i % 7 + 1);
  for (std::int64_t i = 0; i < stats.flat().numel(); ++i) stats.flat().data()[i] = 1.0f / 3;
  f.client.prepare_push(StepComputer::Step{}, grads, stats, false, 1);
  f.shard_receives();
  f.shard_replies(MsgKind::kParams, 1, 0.25f);
  REQUIRE(f.client.push_pull(MsgKind::kPush) == WorkerClient::Reply::kOk);
  f.settle();
  CHECK(f.push.header().payload == f.push_floats);
  CHECK(f.push_floats == (f.model.param_count() + 1) / 2 + f.model.stats().total());
  std::vector<float> got(static_cast<std::size_t>(f.model.param_count()));
  decode_values(PushPrecision::kBf16, f.push.payload(), got);
  std::vector<float> want(grads.flat().data(), grads.flat().data() + f.model.param_count());
  round_to_wire(PushPrecision::kBf16, want);
  CHECK(got == want);
  CHECK(f.push.payload()[f.reply_floats] == 1.0f / 3);  // statistics: fp32, exact
  CHECK(f.push.payload()[f.push_floats - 1] == 1.0f / 3);
}
