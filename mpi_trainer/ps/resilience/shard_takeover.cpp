// A shard's part in a takeover (ps/exchange/shard.hpp, docs/fault-model.md "Takeover under ULFM"):
// whether another shard's loss is one to follow (check_revoked, another_shard_lost); the new
// parameter server's start from the survivors' parts and the replay of their logged pushes
// (ps/resilience/push_journal.hpp, "Zero-loss takeover"); this shard's own part for the successor;
// the epoch fence of a woken former parameter server (check_superseded); the fault hook that
// dumps its state (tests).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "ps/exchange/push_check.hpp"
#include "ps/exchange/shard.hpp"
#include "ps/resilience/push_journal.hpp"
#include "ps/wire/mpi_env.hpp"
#include "ps/wire/ulfm.hpp"

namespace mt {

bool Shard::may_follow_takeover() const { return opts_.takeover && shards_ > 1 && ulfm_available(); }

void Shard::check_revoked() const {
  if (may_follow_takeover() && ulfm_is_revoked(opts_.comm)) throw ShardTakeover{};
}

// After an error: whether it is the loss of another shard (the communicator revoked by a survivor
// that learned of it, or a shard this one talks to reported failed: then this shard revokes it,
// so that every survivor learns), to be taken over.
bool Shard::another_shard_lost() const {
  if (!may_follow_takeover()) return false;
  try {
    if (ulfm_is_revoked(opts_.comm)) return true;
    const std::vector<int> failed = ulfm_failed_ranks(opts_.comm);
    if (std::none_of(failed.begin(), failed.end(), [&](int r) { return r < shards_; })) return false;
    ulfm_revoke(opts_.comm);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// Each push as the lost shard applied it: its gradient and the parameters it was computed on as
// they travelled, the staleness from its step, the rate and momentum its reply reported. The
// parameters advance in params_ (no worker has been answered yet); a push whose reply never came
// is judged and rated as a live one would be.
void Shard::replay(const std::string& log, std::int64_t replica_step) {
  const auto t0 = Clock::now();
  const std::vector<LoggedPush> todo = parse_push_journal(log);  // in replay order (split_replay)
  PsEvents::Replayed r;
  r.shard = shard_;
  r.replica_step = replica_step;
  step_ = replica_step;
  std::vector<float> out(params_.size()), grad(params_.size());
  const auto n = static_cast<std::size_t>(mine_);
  std::int64_t acked_in_range = 0;  // steps of (replica_step, first_step] a journal holds
  bool dumped = false;
  std::size_t tail = 0;  // the pushes after the last acknowledged one (replay_order)
  for (std::size_t i = 0; i < todo.size(); ++i)
    if (todo[i].acked) tail = i + 1;
  for (std::size_t i = 0; i < todo.size(); ++i) {
    const LoggedPush& p = todo[i];
    if (i == todo.size() / 2) plan_.at_replay(self_);  // --revoke rank=R@replay=N: a second failure
    if (i == tail && !dumped) {  // the lost shard's last acknowledged state (tests): what the kill's dump holds
      dump_state("replayed");
      dumped = true;
    }
    MsgHeader h;
    if (p.message.size() != static_cast<std::size_t>(kHeaderFloats + push_slots_) ||
        p.pulled.size() != static_cast<std::size_t>(reply_slots_) || p.slot >= members_.slots())
      throw Error(kExitInternal, "parameter server shard " + std::to_string(shard_) + ": a logged push of slot " +
                                     std::to_string(p.slot) + " does not fit this shard");
    std::memcpy(static_cast<void*>(&h), p.message.data(), sizeof h);
    const float* payload = p.message.data() + kHeaderFloats;
    const float* batch_stats = payload + (push_slots_ - stats_floats_);
    if (p.acked) step_ = std::max(step_, p.step - 1);  // steps no log holds: pushes lost with their workers
    handled_[static_cast<std::size_t>(p.slot)] = p.push_id;
    if (p.acked && p.step > replica_step && p.step <= opts_.first_step) ++acked_in_range;
    ++r.replayed;
    if (!p.acked) ++r.unacknowledged;
    if (p.acked && !p.applied) {  // too stale, or rejected: a step, no update
      ++r.not_applied;
      ++step_;
      if (coord_) coord_->replayed(p.slot, h, step_, false);
      continue;
    }
    if (bf16_) {
      decode_values(opts_.push_precision, payload, grad);
      decode_values(opts_.push_precision, p.pulled.data(), out);
    } else {
      std::copy_n(payload, n, grad.begin());
      std::copy_n(p.pulled.data(), n, out.begin());
    }
    const double staleness = double(step_ - h.model_version);
    const double sum_squares = gap_ ? gap_->penalize(grad, current(), out, staleness) : sum_of_squares(grad);
    Applied a{p.lr, p.momentum};
    if (!p.acked) {
      if (!check_.judge(sum_squares, {batch_stats, static_cast<std::size_t>(stats_floats_)}).empty()) {
        ++r.not_applied;
        ++step_;
        if (coord_) coord_->replayed(p.slot, h, step_, false);
        continue;
      }
      const int live = members_.live();
      a = Applied{static_cast<float>(policy_.lr(step_, live, staleness)), static_cast<float>(policy_.momentum(live))};
    }
    update(grad, out, p.slot, a, batch_stats);
    std::swap(params_, out);
    current_ = params_.data();
    ++step_;
    if (coord_) coord_->replayed(p.slot, h, step_, true);
  }
  if (!dumped) dump_state("replayed");
  // Steps no journal acknowledges: pushes of workers lost with the shard, or pushes applied whose
  // reply never came (replayed among the unacknowledged): those beyond them are lost for certain.
  const std::int64_t gaps = std::max<std::int64_t>(0, opts_.first_step - replica_step - acked_in_range);
  r.lost = std::max<std::int64_t>(0, gaps - r.unacknowledged);
  step_ = std::max(step_, opts_.first_step);
  r.global_step = step_;
  r.seconds = since(t0);
  events_.replayed(r);
}

std::vector<StartLog> Shard::split_replay(const std::vector<PartState>& survived) const {
  if (!opts_.replay) return {};
  const PsOptions::Replay& r = *opts_.replay;
  MT_ASSERT(r.handled.size() == static_cast<std::size_t>(shards_) && r.replica_steps.size() == r.handled.size(),
            "a replica's table and step per shard");
  const std::vector<LoggedPush> all = parse_push_journal(r.log);
  std::vector<StartLog> logs(static_cast<std::size_t>(shards_));
  for (int k = 0; k < shards_; ++k) {
    const auto i = static_cast<std::size_t>(k);
    std::int64_t from = r.replica_steps[i];
    std::span<const std::int64_t> handled = r.handled[i];
    for (const PartState& s : survived)
      if (s.part == k) {
        from = s.step;
        handled = s.handled;
      }
    logs[i].replica_step = from;
    for (const LoggedPush& p : replay_order(all, k, handled, from))
      append_logged(logs[i].log, p);
  }
  return logs;
}

void Shard::start_from_survivors(const std::vector<PartState>& survived) {
  for (const PartState& s : survived) {
    MT_ASSERT(s.part >= 0 && s.part < shards_, "a surviving shard's part");
    const auto n = static_cast<std::size_t>(part_.floats(s.part));
    if (s.params.size() != n || s.state.size() != n * state_full_.size() ||
        (!s.stats.empty() && s.stats.size() != stats_.span().size()))
      throw Error(kExitInternal, "parameter server: the surviving shard " + std::to_string(s.part) +
                                     "'s state does not fit this model");
    part_.unpack(s.part, s.params, full_);
    for (std::size_t j = 0; j < state_full_.size(); ++j)
      part_.unpack(s.part, std::span<const float>(s.state).subspan(j * n, n), state_full_[j]);
    if (!s.stats.empty()) std::copy(s.stats.begin(), s.stats.end(), stats_.span().begin());
  }
}

PartState Shard::part_state() const {
  PartState s;
  s.part = shard_;
  s.step = step_;
  s.handled = handled_;
  s.params.assign(current().begin(), current().end());
  s.state = velocity_;
  if (coord_) s.stats.assign(stats_.span().begin(), stats_.span().end());
  return s;
}

namespace {

const char* dump_dir() {
  const char* d = std::getenv("MT_FAULT_DUMP_DIR");
  return d && *d ? d : nullptr;
}

}  // namespace

void Shard::dump_state(const std::string& tag) const {
  const char* dir = dump_dir();
  if (!dir) return;
  const std::string base = std::string(dir) + "/" + tag + "-part" + std::to_string(shard_);
  std::ofstream bin(base + ".bin", std::ios::binary);
  const auto put = [&bin](std::span<const float> v) {
    bin.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size_bytes()));
  };
  put(current());
  put(velocity_);
  if (coord_) put(stats_.span());
  std::ofstream(base + ".step") << step_ << '\n';
  if (!bin.flush()) throw Error(kExitInternal, "MT_FAULT_DUMP_DIR: cannot write " + base + ".bin");
}

void Shard::before_kill() {
  if (!dump_dir()) return;
  for (Member& m : members_.members())
    if (m.sreq != MPI_REQUEST_NULL) wait_for(&m.sreq, 1.0);  // every applied push acknowledged
  dump_state("killed");
}

void Shard::check_superseded() {
  const auto now = Clock::now();
  const double paused = seconds_between(std::exchange(checked_, now), now);
  if (!lead() || paused <= opts_.failure_timeout || !events_.superseded()) return;
  throw PsSuperseded("parameter server (rank " + std::to_string(self_) + "): paused for " + std::to_string(paused) +
                     " s, and another has taken its place meanwhile (a newer epoch in the checkpoint directory): "
                     "ending without writing anything, exit " +
                     std::to_string(kExitSuperseded));
}

}  // namespace mt
