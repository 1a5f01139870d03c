#include "ps/exchange/shard.hpp"

#include <unistd.h>
#include <algorithm>
#include <csignal>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "optim/optimizer.hpp"
#include "ps/wire/mpi_env.hpp"
#include "ps/wire/ulfm.hpp"

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

}  // namespace

Shard::Shard(const PsOptions& opts, const Model& model, const LrSchedule& schedule, Backend& update, FaultPlan plan,
             PsEvents& events, SnapshotSink& sink)
    : opts_(opts),
      model_(model),
      policy_(schedule, opts.lr_scaling, opts.momentum_correction, opts.momentum, opts.join_warmup,
              opts.momentum_by_workers),
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
  for (int j = 0; j < state_buffers(); ++j)
    state_full_.emplace_back(model.params());
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
    const std::vector<PartState> survived =
        opts_.replay ? parse_part_states(opts_.replay->states) : std::vector<PartState>{};
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
    if (lead()) {
      events_.started(PsEvents::Started{start_step_, shards_, workers_, policy_.momentum(workers_)});
      epoch_ = events_.epoch();
    }
    t0_ = Clock::now();
    if (coord_) coord_->clock_started(t0_);
    if (lead() && opts_.max_workers > 0) {
      joins_.emplace(
          opts_.port_file,
          nlohmann::ordered_json{
              {"model", model_.spec().name}, {"batch_size", opts_.batch_size}, {"max_workers", opts_.max_workers}}
              .dump(),
          opts_.join_secret, opts_.join_auth_seconds);
      events_.joins_open(opts_.max_workers, opts_.port_file, ulfm_available());
    }
    if (lead() && opts_.replace_workers) {
      spawner_.emplace(opts_.replacement_program, opts_.replacement_args, opts_.replacement_limit);
      refill();  // after a takeover: the slots of the standby that took over and of the workers lost with it
    }
    serve();
    if (spawner_) {  // a replacement still starting is told to stop
      spawner_->finish();
      take_joins();
    }
    if (handed_over_) {
      PsResult gone;
      gone.global_step = step_;
      gone.run_seconds = since(t0_);
      gone.handed_over = true;
      return gone;
    }
    settle_members();
    confirm_end();
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

}  // namespace mt
