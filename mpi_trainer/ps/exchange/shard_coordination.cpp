// What follows a step on a shard (ps/exchange/shard.hpp): shard 0's coordinator
// (ps/exchange/coordinator.hpp: reports, checkpoints, evaluations) and the standbys' replicas
// (ps/resilience/standbys.hpp), and the background work polled between messages.
#include "ps/exchange/shard.hpp"

#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "ps/resilience/push_journal.hpp"
#include "ps/wire/mpi_env.hpp"

namespace mt {

void Shard::after_step(double lr) {
  if (coord_) coord_->after_step(part(), lr, stop_at_.has_value());
  // The final checkpoint follows a stop or the end: no replica then.
  if (standbys_ && !stop_at_ && step_ < opts_.train_steps && failure_code_ == 0)
    standbys_->after_update(step_, members_, [this] { return replica_content(); });
}

Standbys::Content Shard::replica_content() const {
  handled_to_floats(handled_, handled_floats_);
  Standbys::Content c{{current(), velocity_, handled_floats_}, {}};
  if (coord_) {
    c.pieces.push_back(stats_.span());
    c.record = coord_->replica_record(step_);
  }
  return c;
}

void Shard::poll_background() {
  if (!coord_ || failure_code_ != 0) return;
  if (const std::string why = coord_->poll(part(), stop_at_.has_value()); !why.empty()) begin_stop(why);
}

}  // namespace mt
