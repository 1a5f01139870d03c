// The push journal: what makes a takeover lose no update (docs/fault-model.md, "Zero-loss takeover").
//
// Under ULFM with standbys a lost parameter-server shard is taken over inside the job from the
// newest replica (ps/resilience/recovery.hpp), which is up to a replica interval (and the replica in flight)
// behind. Each worker therefore keeps its own pushes since then: for every shard, the message as
// sent (header and gradient in the wire's precision, and on shard 0 the BatchNorm statistics) and
// the reply payload the gradient was computed on (the parameters "pulled", which the gap penalty
// compares with the parameters it is applied to), with how the shard's reply says it applied it
// (its global step, applied or only counted, the rate and momentum). The survivors hand their logs
// to the new shard 0 during the takeover; every shard of the new parameter server replays, after
// its part of the replica, the pushes of its part that replica does not hold, in the order the
// lost shard applied them (its steps); pushes whose reply never came follow, each once. A push is
// in the replica when its shard had handled the worker's push number by then: the replica carries
// that number for every data slot (ReplicaState::handled), so nothing is applied twice.
//
// A worker drops an entry once every shard's reply reports a replica of a later step that every
// standby said, in its pushes, it holds whole (MsgHeader::replica_step; a replica that has merely
// left may still be in the shard's kernel): the log holds the pushes of a replica interval, the
// replica in flight and a step of the standby's, spread over the workers.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ps/wire/protocol.hpp"

namespace mt {

// One push as one shard (part of the parameters) received it.
struct LoggedPush {
  int part = 0;              // the shard index (the partition's part): the same after a takeover
  int slot = 0;              // the worker's data slot
  std::int64_t push_id = 0;  // the worker's push number (MsgHeader::push_id)
  bool acked = false;        // the shard's reply arrived: step, applied, lr and momentum are its
  bool applied = false;
  std::int64_t step = 0;  // the global step its reply gave (after it)
  float lr = 0, momentum = 0;
  std::vector<float> message;  // header and payload as sent
  std::vector<float> pulled;   // the payload of the reply its gradient was computed on (wire format)
};

// A worker's side.
class PushJournal {
 public:
  // `max_bytes`: the most it holds; beyond, the oldest entries are dropped (counted: dropped()):
  // a standby that never takes its replicas must not make the workers run out of memory. A
  // takeover then counts those pushes' steps as lost.
  explicit PushJournal(int shards, std::size_t max_bytes = std::size_t{512} << 20)
      : replica_step_(static_cast<std::size_t>(shards), -1), max_bytes_(max_bytes) {}
  // A push about to be sent (record), then for every shard s its message (header and payload) and
  // the reply payload its gradient was computed on (part).
  void record(int slot, std::int64_t push_id);
  void part(int s, const MsgHeader& header, std::span<const float> payload, std::span<const float> pulled);
  // Shard s's reply to the push recorded last (a kParams reply to a push; one that names another
  // push is not its reply and is ignored). Entries every shard's replica holds are dropped.
  void acknowledge(int s, const MsgHeader& reply);
  // The push recorded last, when no shard acknowledged it: its worker was dropped (suspended) and
  // rejoins; the shard that dropped it did not apply it, so no takeover may replay it.
  void forget_unacknowledged();
  // Every entry, serialized for the takeover (parse_push_journal reads it); the log is emptied.
  std::string take();
  std::size_t entries() const { return entries_.size(); }
  std::size_t bytes() const { return bytes_; }
  std::int64_t dropped() const { return dropped_; }
  std::size_t peak_bytes() const { return peak_bytes_; }
  std::size_t peak_entries() const { return peak_entries_; }

 private:
  std::deque<std::vector<LoggedPush>> entries_;  // per push, one LoggedPush per shard
  std::vector<std::vector<LoggedPush>> spare_;   // dropped entries' memory, for the next pushes
  void pop_front();
  std::vector<std::int64_t> replica_step_;  // per shard, from its latest reply
  const std::size_t max_bytes_;
  std::size_t bytes_ = 0, peak_bytes_ = 0, peak_entries_ = 0;
  std::int64_t dropped_ = 0;
};

// Serialization (4-byte aligned, so that it travels as floats).
void append_logged(std::string& out, const LoggedPush& p);
std::vector<LoggedPush> parse_push_journal(std::string_view bytes);  // throws Error on a malformed log

// What shard `part` replays after its part of a replica of step `from` whose shard had handled,
// per data slot, the pushes up to `handled[slot]`: the entries of that part not handled,
// acknowledged ones in the order of their steps, then the others by slot and push number. Each
// push once. A step between `from` and an acknowledged push that no acknowledged push made was
// made by a push whose reply never came (or by one lost with its worker): the first push without
// a reply that can have made it (computed on parameters older than that step) fills it, so that
// the replay makes every step the lost shard made, in its order where that is known.
std::vector<LoggedPush> replay_order(std::vector<LoggedPush> all, int part, std::span<const std::int64_t> handled,
                                     std::int64_t from);

// A surviving shard's own part at a takeover (several shards): its step, the push it handled last
// per data slot, its parameters, its state buffers (one after the other) and, on the old shard 0,
// the BatchNorm statistics. The new parameter server starts that part from it instead of from the
// replica, and replays only the journaled pushes it never handled: nothing that shard applied is
// undone or reordered.
struct PartState {
  int part = 0;
  std::int64_t step = 0;
  std::vector<std::int64_t> handled;
  std::vector<float> params, state, stats;
};
void append_part_state(std::string& out, const PartState& s);
std::vector<PartState> parse_part_states(std::string_view bytes);  // throws Error when malformed

// Per data slot, the push numbers handled, as the floats a replica carries (two per slot: the
// int64's bytes) and back.
void handled_to_floats(std::span<const std::int64_t> handled, std::span<float> out);
std::vector<std::int64_t> handled_from_floats(std::span<const float> in);

}  // namespace mt
