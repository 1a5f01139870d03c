// Replicas of the parameter server on standby workers (--ps-standby, docs/fault-model.md,
// "Standby replicas").
//
// Every --replica-interval updates each shard copies its state (its parameters, its optimizer
// state buffers, the push number it handled last per data slot (ps/resilience/push_journal.hpp); shard 0 also
// the BatchNorm statistics and the app's progress record: data
// cursors, time and cost so far, the job's configuration) into send buffers and sends it to the
// standby workers without waiting, paced: in slices, a few after each update, so that a replica
// spreads over the interval beside the replies instead of bursting onto the shard's link ahead of
// them (a replica is several messages' worth: with `dana`, the parameters, one momentum per worker
// and the gap buffer; measured on a 50 Mbit/s link, bench/README.md "`plan` against a real link").
// While a replica is still in flight the next one waits for the next update, so the update loop
// never blocks on a standby. A standby keeps the newest replica that arrived whole (a receive cut
// by the shard's death, or a replica given up midway, leaves the previous one untouched). When
// the parameter server is lost, the standby hands that replica to the app, which writes it as a
// checkpoint before the worker exits 10: the restart resumes about two intervals behind at most,
// more where the shard's link is full (the slices' sends complete late and the next replica waits).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "nn/params.hpp"
#include "ps/events.hpp"
#include "ps/wire/partition.hpp"
#include "ps/wire/transport.hpp"

namespace mt {

// A shard's side: one send buffer shared by the sends to every standby.
class ReplicaSender {
 public:
  struct Dest {
    int id = 0;  // the standby's rank as the reports name it
    MPI_Comm comm = MPI_COMM_WORLD;
    int peer = 0;
  };
  // `interval`: updates between two replicas at least. `budget`: the share of the shard's time
  // replicas may take at most (their copy is the cost; measured): when the shard is the
  // bottleneck and a replica costs more than that share of `interval` updates, replicas are
  // spaced further apart in time instead of slowing training.
  ReplicaSender(std::int64_t interval, double budget) : interval_(interval), budget_(budget) {}

  // Whether a replica is due at `step`: the interval and the budget (no MPI call, no allocation:
  // asked after every update).
  bool due(std::int64_t step) const {
    return last_step_ < 0 || (step - last_step_ >= interval_ && since(last_at_) * budget_ >= cost_);
  }
  // Whether every earlier replica has left, so the buffer may take the next. Sends to a standby no
  // longer in `dests` (it was lost, or another took its place) are given up: their buffer is
  // abandoned and a fresh one taken.
  bool ready(const std::vector<Dest>& dests);
  // Packs `pieces` and the record (bytes after them) into the slices (replica_slices) and sends
  // the first few to `dests`; pace() sends the others (replica_slices_per_update: `reply_floats`
  // is the shard's reply as floats' worth). `handover`: the last replica, every slice at once;
  // each standby acknowledges it once it holds it whole.
  void send(std::int64_t step, int state_buffers, std::span<const std::span<const float>> pieces,
            const std::string& record, const std::vector<Dest>& dests, std::int64_t reply_floats,
            bool handover = false);
  // Whether slices of the replica in flight are still to be sent.
  bool pacing() const { return next_slice_ < slices_.size(); }
  // After an update: the next slices of the replica in flight (replica_slices_per_update), if
  // any, to those of its destinations still among the standbys `now`.
  void pace(const std::vector<Dest>& now);
  // Every slice of the replica in flight that pace() has not sent yet, now (before a handover or
  // a standby's stop).
  void flush(const std::vector<Dest>& now);
  // The standby `d`'s answer to the handover replica of `step`, within `seconds`: taken; refused
  // (it has a notice too, `signo`: the whole job is being stopped); or none (it is gone, or slow).
  enum class Answer { kTaken, kRefused, kNone };
  static Answer acknowledged(const Dest& d, std::int64_t step, double seconds, int* signo = nullptr);
  // The replica in flight to `id` has left, within `seconds` (before the standby is told to
  // stop, so that no send is left unmatched). False: given up (the standby is presumed lost).
  bool settle(int id, double seconds);
  // Between two replicas: tests the sends in flight (no allocation), so that settled_step() follows.
  void progress();
  // The step of the newest replica that has left for every standby it was sent to (-1: none yet):
  // pushes applied up to it need no log (ps/resilience/push_journal.hpp).
  std::int64_t settled_step() const { return settled_step_; }
  std::int64_t sent() const { return sent_; }
  // Updates between consecutive replicas, on average (0 before the second).
  double mean_interval() const { return sent_ > 1 ? double(last_step_ - first_step_) / double(sent_ - 1) : 0.0; }
  double mean_cost_seconds() const { return sent_ > 0 ? cost_sum_ / double(sent_) : 0.0; }

 private:
  void give_up();  // abandon the buffers that unfinished sends still read
  void settled();  // every slice was sent, and every send has completed
  void send_slice(std::size_t i, const std::vector<Dest>& now);
  const std::int64_t interval_;
  const double budget_;
  std::vector<Buffer> slices_;                         // the replica in flight, slice by slice
  std::size_t next_slice_ = 0;                         // the next slice to send
  std::int64_t per_update_ = 1;                        // slices sent after each update
  std::vector<Dest> dests_;                            // where it goes
  std::vector<std::pair<int, MPI_Request>> inflight_;  // (dest id, request), a slice each
  std::int64_t first_step_ = -1, last_step_ = -1, sent_ = 0, settled_step_ = -1;
  Clock::time_point last_at_{};
  double cost_ = 0, cost_sum_ = 0;  // the last replica's copy and send (s); their sum
};

// A standby worker's side: the newest whole replica of each shard.
class ReplicaHost {
 public:
  explicit ReplicaHost(int shards);
  // With the MPI lock held: receives replicas that arrived from the shards on `comm`, never
  // blocking; acknowledges a handover replica. Throws ProcessFailed (ULFM) when a shard is known dead.
  void poll(MPI_Comm comm);
  // Whether any shard's replica arrived.
  bool any() const;
  // The step of shard `s`'s newest whole replica here (-1: none yet), which this standby's pushes
  // tell the shard (thread-safe).
  std::int64_t newest_step(int s) const;
  // The newest replicas, assembled (thread-safe: the poll may run on another thread): nothing
  // unless every shard's arrived at least once. `slots`: the job's data slots (each replica's
  // table of the pushes its shard handled has one row per slot).
  std::optional<ReplicaState> assemble(const Model& model, const Partition& part, int slots) const;
  // The end: receives still posted are cancelled (the shards settle their sends before the stop);
  // polls do nothing from then on.
  void close();
  // The parameter server is lost: receives still posted keep their buffers to the end of the
  // process, with no MPI call (those from a dead shard never complete); polls do nothing from then on.
  void abandon_receives();

 private:
  struct Part {
    Buffer slice{0};               // the slice being received
    Buffer incoming{0}, newest{0};  // the replica being assembled; the newest whole one
    std::int64_t filled = -1;      // the payload floats `incoming` holds so far (-1: none being assembled)
    MPI_Request req = MPI_REQUEST_NULL;
    bool has = false;
  };
  // The header of `p`'s newest whole replica (its first slice's, the payload the whole replica).
  static const MsgHeader& newest_header(const Part& p);
  // A slice of shard `s` arrived in `p.slice`: into the replica it belongs to.
  void take_slice(Part& p, std::size_t s, MPI_Comm comm);
  std::vector<Part> parts_;
  bool closed_ = false;
  mutable std::mutex mu_;  // guards `newest` and `has` against assemble() from another thread
};

}  // namespace mt
