// Who is working for a shard, and what became of them. Each worker is one `Member` whose state
// moves only forward:
//
//   joining --join--> active --PS stops--> draining
//      |                |                     |
//      +----------------+---------------------+--> finished (training over for it: told to stop,
//      |                |                     |              said stop, or its join refused)
//      +----------------+---------------------+--> left     (left on a preemption notice)
//      +----------------+---------------------+--> lost     (silent past the deadline, or failed)
//
// finished, left and lost are final: a lost worker never comes back as the same member (a
// replacement joins as a new member and takes the free data slot; a worker dropped while it was
// alive, suspended past --failure-timeout, that asks to rejoin comes back as a new member too:
// `rejoined`). A lost member that may be alive keeps its push receive posted, to hear that ask.
// The failure detector is a pure function of the member, the clock and the deadlines, so it is
// tested on a fake clock.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "data/loader.hpp"
#include "ps/wire/transport.hpp"

namespace mt {

enum class MemberState { kJoining, kActive, kDraining, kFinished, kLeft, kLost };
const char* to_string(MemberState s);

struct Member {
  int rank = 0;                    // world rank; joined workers: numbered after the world's ranks
  MPI_Comm comm = MPI_COMM_WORLD;  // joined workers: the intercommunicator of their connection
  int peer = 0;                    // its rank in `comm`
  int slot = 0;                    // data shard (0..slots-1)
  std::string type;                // instance type, for the cost
  MemberState state = MemberState::kJoining;
  Buffer recv, send, hb{0};
  std::vector<float> sent;  // --push-precision bf16: the fp32 parameters its last reply carried rounded
  PairBells bells;          // a same-node worker's doorbells (shared memory), else none
  MPI_Request rreq = MPI_REQUEST_NULL, sreq = MPI_REQUEST_NULL, hbreq = MPI_REQUEST_NULL;
  Clock::time_point added_at{};                 // launched (the shard's start) or connected
  std::optional<Clock::time_point> last_heard;  // any message or heartbeat
  std::optional<Clock::time_point> joined_at;   // its join was answered
  Clock::time_point last_reply{};
  bool owes_reply = false;    // its last message was taken and not answered yet
  bool clean_stop = false;    // told to stop with kCleanEnd: it is owed the kEnd that confirms or withdraws it
  bool late = false;          // connected to a running job through the join listener
  bool rejoined = false;      // a dropped worker taken back (Shard::take_back): numbered on like a joiner
  bool retired = false;       // a replacement that gave its slot back to the worker it stood in for
  double active_seconds = 0;  // billed seconds, fixed once it is no longer live
  LoaderCursor cursor;        // after its last applied push
  std::int64_t pushes = 0, dropped = 0;
  std::int64_t rejected = 0;  // pushes the check refused (ps/exchange/push_check.hpp)
  int rejected_in_row = 0;    // since its last applied push
  double staleness_sum = 0;
  std::int64_t window_pushes = 0, window_images = 0;  // since the last progress report
  double window_staleness = 0, window_step_seconds = 0;

  bool live() const {
    return state == MemberState::kJoining || state == MemberState::kActive || state == MemberState::kDraining;
  }
  bool working() const { return state == MemberState::kActive || state == MemberState::kDraining; }
  // A joiner's connection whose join was refused or not answered yet: not one of the job's workers.
  bool only_connected() const { return late && !joined_at; }
  // Billed seconds so far.
  double seconds_active(Clock::time_point now) const;
};

class Membership {
 public:
  struct Deadlines {
    double failure_timeout = 1.5;  // a member heard before, silent this long, is lost
    double startup_grace = 60;     // a member never heard, silent this long since it appeared, is lost
    double drain_deadline = 10;    // after the stop: every member has stopped by then
  };
  Membership(int slots, Deadlines d) : slots_(slots), deadlines_(d) {}

  std::deque<Member>& members() { return members_; }
  const std::deque<Member>& members() const { return members_; }
  int slots() const { return slots_; }
  // Members not yet finished, left or lost: they count for the learning rate.
  int live() const;
  int lost() const { return count(MemberState::kLost); }
  int left() const { return count(MemberState::kLeft); }
  // Pushes dropped as too stale, over every member the shard has had.
  std::int64_t dropped_stale() const;
  // Pushes rejected by the check, over every member the shard has had.
  std::int64_t rejected() const;
  // A data slot no live member holds (lowest first), or none.
  std::optional<int> free_slot() const;

  // A new member in state joining (references to members stay valid as members are added).
  Member& add(int rank, MPI_Comm comm, int peer, int slot, std::string type, Clock::time_point now);
  // Transitions. Each checks that it is allowed (an internal error otherwise).
  static void heard(Member& m, Clock::time_point now) { m.last_heard = now; }
  static void joined(Member& m, Clock::time_point now, bool stopping);
  void drain();                                            // the PS stops: active members drain
  static void finished(Member& m, Clock::time_point now);  // training is over for it
  // Left on a notice or lost; billed until `now` (left) or its last sign of life (lost).
  static void departed(Member& m, bool lost, Clock::time_point now);

  // The failure detector: why `m` is to be dropped as lost at `now`, or nothing. `stop_at`: when
  // the parameter server began stopping, if it did.
  std::optional<std::string> overdue(const Member& m, Clock::time_point now,
                                     std::optional<Clock::time_point> stop_at) const;

 private:
  int count(MemberState s) const;
  int slots_;
  Deadlines deadlines_;
  std::deque<Member> members_;
};

}  // namespace mt
