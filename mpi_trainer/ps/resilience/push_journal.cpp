#include "ps/resilience/push_journal.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <set>
#include <tuple>

#include "core/error.hpp"

namespace mt {

namespace {

// An entry's fixed part on the wire.
struct Head {
  std::int32_t part, slot;
  std::int64_t push_id, step;
  std::int32_t acked, applied;
  float lr, momentum;
  std::int64_t message_floats, pulled_floats;
};
static_assert(sizeof(Head) % sizeof(float) == 0, "the log travels as floats");

std::size_t entry_bytes(const LoggedPush& p) {
  return sizeof(Head) + (p.message.size() + p.pulled.size()) * sizeof(float);
}

template <class T>
void append_values(std::string& out, const std::vector<T>& v) {
  if (v.empty()) return;
  out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// Reads what append_values and a head wrote, each read checked against what is left; `what`
// names the bytes in the error.
struct Reader {
  std::string_view bytes;
  const char* what;
  std::size_t at = 0;
  bool done() const { return at >= bytes.size(); }
  Error cut() const {
    return Error(kExitInternal, std::string(what) + ": cut or malformed at byte " + std::to_string(at) + " of " +
                                    std::to_string(bytes.size()));
  }
  template <class H>
  H head() {
    H h{};
    if (bytes.size() - at < sizeof h) throw cut();
    std::memcpy(&h, bytes.data() + at, sizeof h);
    at += sizeof h;
    return h;
  }
  template <class T>
  void values(std::vector<T>& v, std::int64_t n) {
    if (n < 0 || static_cast<std::uint64_t>(n) > (bytes.size() - at) / sizeof(T)) throw cut();
    v.resize(static_cast<std::size_t>(n));
    if (v.empty()) return;  // memcpy's pointers must not be null, even for 0 bytes
    std::memcpy(v.data(), bytes.data() + at, v.size() * sizeof(T));
    at += v.size() * sizeof(T);
  }
};

}  // namespace

void PushJournal::record(int slot, std::int64_t push_id) {
  std::vector<LoggedPush> e;
  if (!spare_.empty()) {
    e = std::move(spare_.back());
    spare_.pop_back();
  }
  e.resize(replica_step_.size());
  for (std::size_t s = 0; s < e.size(); ++s) {
    LoggedPush& p = e[s];
    p.part = static_cast<int>(s);
    p.slot = slot;
    p.push_id = push_id;
    p.acked = p.applied = false;
    p.step = 0;
    p.lr = p.momentum = 0;
    p.message.clear();
    p.pulled.clear();
    bytes_ += entry_bytes(p);
  }
  entries_.push_back(std::move(e));
}

void PushJournal::part(int s, const MsgHeader& header, std::span<const float> payload, std::span<const float> pulled) {
  MT_ASSERT(!entries_.empty() && static_cast<std::size_t>(s) < replica_step_.size(), "a push recorded");
  LoggedPush& p = entries_.back()[static_cast<std::size_t>(s)];
  const auto* h = reinterpret_cast<const float*>(&header);
  p.message.assign(h, h + kHeaderFloats);
  p.message.insert(p.message.end(), payload.begin(), payload.end());
  p.pulled.assign(pulled.begin(), pulled.end());
  bytes_ += (p.message.size() + p.pulled.size()) * sizeof(float);
  if (static_cast<std::size_t>(s) + 1 == replica_step_.size()) {
    while (bytes_ > max_bytes_ && entries_.size() > 1) {
      pop_front();
      ++dropped_;
    }
    peak_bytes_ = std::max(peak_bytes_, bytes_);
    peak_entries_ = std::max(peak_entries_, entries_.size());
  }
}

void PushJournal::acknowledge(int s, const MsgHeader& reply) {
  const auto k = static_cast<std::size_t>(s);
  MT_ASSERT(k < replica_step_.size() && !entries_.empty(), "a reply to a push logged");
  LoggedPush& p = entries_.back()[k];
  if (reply.push_id != p.push_id) return;  // not this push's reply (an older one left in the buffer)
  p.acked = true;
  p.applied = reply.applied != 0;
  p.step = reply.step;
  p.lr = reply.lr;
  p.momentum = reply.momentum;
  replica_step_[k] = std::max(replica_step_[k], reply.replica_step);
  // The oldest entries first: each shard applies one worker's pushes in order.
  while (!entries_.empty()) {
    const auto& front = entries_.front();
    bool held = true;
    for (std::size_t j = 0; j < front.size(); ++j)
      held = held && front[j].acked && front[j].step <= replica_step_[j];
    if (!held) break;
    pop_front();
  }
  if (spare_.size() > 2) spare_.resize(2);  // enough to reuse; the rest is freed
}

void PushJournal::forget_unacknowledged() {
  if (entries_.empty()) return;
  const auto& last = entries_.back();
  if (std::any_of(last.begin(), last.end(), [](const LoggedPush& p) { return p.acked; })) return;
  for (const auto& p : last)
    bytes_ -= entry_bytes(p);
  spare_.push_back(std::move(entries_.back()));
  entries_.pop_back();
}

void PushJournal::pop_front() {
  for (const auto& p : entries_.front())
    bytes_ -= entry_bytes(p);
  spare_.push_back(std::move(entries_.front()));
  entries_.pop_front();
}

std::string PushJournal::take() {
  std::string out;
  out.reserve(bytes_);
  for (const auto& e : entries_)
    for (const auto& p : e)
      append_logged(out, p);
  entries_.clear();
  spare_.clear();
  bytes_ = 0;
  std::fill(replica_step_.begin(), replica_step_.end(), -1);
  return out;
}

void append_logged(std::string& out, const LoggedPush& p) {
  const Head h{p.part,
               p.slot,
               p.push_id,
               p.step,
               p.acked ? 1 : 0,
               p.applied ? 1 : 0,
               p.lr,
               p.momentum,
               static_cast<std::int64_t>(p.message.size()),
               static_cast<std::int64_t>(p.pulled.size())};
  out.append(reinterpret_cast<const char*>(&h), sizeof h);
  append_values(out, p.message);
  append_values(out, p.pulled);
}

std::vector<LoggedPush> parse_push_journal(std::string_view bytes) {
  std::vector<LoggedPush> out;
  Reader in{bytes, "push journal"};
  while (!in.done()) {
    const auto h = in.head<Head>();
    if (h.part < 0 || h.slot < 0 || h.push_id < 1 || h.message_floats < kHeaderFloats) throw in.cut();
    LoggedPush p;
    p.part = h.part;
    p.slot = h.slot;
    p.push_id = h.push_id;
    p.step = h.step;
    p.acked = h.acked != 0;
    p.applied = h.applied != 0;
    p.lr = h.lr;
    p.momentum = h.momentum;
    in.values(p.message, h.message_floats);
    in.values(p.pulled, h.pulled_floats);
    out.push_back(std::move(p));
  }
  return out;
}

namespace {

// The model version a logged push was computed on (-1: its message holds no header).
std::int64_t logged_version(const LoggedPush& p) {
  if (p.message.size() < static_cast<std::size_t>(kHeaderFloats)) return -1;
  MsgHeader h;
  std::memcpy(static_cast<void*>(&h), p.message.data(), sizeof h);
  return h.model_version;
}

// Acknowledged pushes (by step) with the steps between them that none made filled by the pushes
// without a reply that can have made them (`tail`: those, by slot and push number); the rest of
// the tail after them.
std::vector<LoggedPush> fill_steps(std::vector<LoggedPush> acked, std::vector<LoggedPush> tail, std::int64_t from) {
  std::vector<LoggedPush> out;
  out.reserve(acked.size() + tail.size());
  std::int64_t step = from;
  for (LoggedPush& a : acked) {
    for (; step + 1 < a.step; ++step) {
      // The oldest computed first (it waited longest), on a tie the first by slot.
      auto best = tail.end();
      std::int64_t oldest = step + 1;  // computed before the step it fills
      for (auto it = tail.begin(); it != tail.end(); ++it) {
        const std::int64_t v = logged_version(*it);
        if (v >= 0 && v < oldest) {
          best = it;
          oldest = v;
        }
      }
      if (best == tail.end()) break;  // none: a push lost with its worker made it
      out.push_back(std::move(*best));
      tail.erase(best);
    }
    step = std::max(step, a.step);
    out.push_back(std::move(a));
  }
  for (LoggedPush& t : tail)
    out.push_back(std::move(t));
  return out;
}

}  // namespace

std::vector<LoggedPush> replay_order(std::vector<LoggedPush> all, int part, std::span<const std::int64_t> handled,
                                     std::int64_t from) {
  std::erase_if(all, [&](const LoggedPush& p) {
    const auto slot = static_cast<std::size_t>(p.slot);
    return p.part != part || (slot < handled.size() && p.push_id <= handled[slot]);
  });
  std::sort(all.begin(), all.end(), [](const LoggedPush& a, const LoggedPush& b) {
    // Acknowledged first, by step; then by slot and push number.
    return std::make_tuple(!a.acked, a.acked ? a.step : 0, a.slot, a.push_id) <
           std::make_tuple(!b.acked, b.acked ? b.step : 0, b.slot, b.push_id);
  });
  // A push logged twice (never expected) is replayed once, where it was acknowledged.
  std::set<std::pair<int, std::int64_t>> seen;
  std::erase_if(all, [&](const LoggedPush& p) { return !seen.insert({p.slot, p.push_id}).second; });
  const auto first_tail = std::find_if(all.begin(), all.end(), [](const LoggedPush& p) { return !p.acked; });
  std::vector<LoggedPush> tail(std::make_move_iterator(first_tail), std::make_move_iterator(all.end()));
  all.erase(first_tail, all.end());
  return fill_steps(std::move(all), std::move(tail), from);
}

namespace {

struct StateHead {
  std::int32_t part, reserved;
  std::int64_t step, handled, params, state, stats;
};
static_assert(sizeof(StateHead) % sizeof(float) == 0, "part states travel as floats");

}  // namespace

void append_part_state(std::string& out, const PartState& s) {
  const StateHead h{s.part,
                    0,
                    s.step,
                    static_cast<std::int64_t>(s.handled.size()),
                    static_cast<std::int64_t>(s.params.size()),
                    static_cast<std::int64_t>(s.state.size()),
                    static_cast<std::int64_t>(s.stats.size())};
  out.append(reinterpret_cast<const char*>(&h), sizeof h);
  append_values(out, s.handled);
  append_values(out, s.params);
  append_values(out, s.state);
  append_values(out, s.stats);
}

std::vector<PartState> parse_part_states(std::string_view bytes) {
  std::vector<PartState> out;
  Reader in{bytes, "a surviving shard's state"};
  while (!in.done()) {
    const auto h = in.head<StateHead>();
    if (h.part < 0) throw in.cut();
    PartState s;
    s.part = h.part;
    s.step = h.step;
    in.values(s.handled, h.handled);
    in.values(s.params, h.params);
    in.values(s.state, h.state);
    in.values(s.stats, h.stats);
    out.push_back(std::move(s));
  }
  return out;
}

void handled_to_floats(std::span<const std::int64_t> handled, std::span<float> out) {
  MT_ASSERT(out.size() == 2 * handled.size(), "two floats per slot");
  if (handled.empty()) return;
  std::memcpy(out.data(), handled.data(), handled.size_bytes());
}

std::vector<std::int64_t> handled_from_floats(std::span<const float> in) {
  MT_ASSERT(in.size() % 2 == 0, "two floats per slot");
  std::vector<std::int64_t> out(in.size() / 2);
  if (out.empty()) return out;
  std::memcpy(out.data(), in.data(), in.size_bytes());
  return out;
}

}  // namespace mt
