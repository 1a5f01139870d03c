// The parameter server's typed events about joins, standbys and handovers, worded for the job
// log (app/ps_report.hpp): the runtime reports what happened, the app names the flags and the
// documentation that explain it.
#include <string>

#include "app/ps_report.hpp"

namespace mt {

void PsReport::joins_open(int max_workers, const std::string& port_file, bool ulfm) {
  if (!cfg_.quiet)
    log("mpi_trainer: accepting up to " + std::to_string(max_workers) + " workers: `mpi_trainer join --port-file " +
        port_file + "` (under mpirun --ompi-server, docs/fault-model.md)");
  if (ulfm)
    log("mpi_trainer: warning: joins from another mpirun need Open MPI 4.1's ompi-server; this ULFM build's "
        "Open MPI 5 has none (and its mpirun --dvm crashed when tried), so `mpi_trainer join` cannot "
        "reach this job: use the Debian build for elastic joins (docs/fault-model.md, \"Heartbeats and "
        "ULFM\")");
}

void PsReport::join_refused(const JoinRefused& e) {
  using Why = JoinRefused::Why;
  const std::string detail =
      e.why == Why::kMismatch
          ? "it trains " + e.shape.describe() + ", this job " +
                JobShape{model_.param_count(), cfg_.batch_size, parse_push_precision(cfg_.push_precision)}.describe()
          : e.detail;
  metrics_.write(nlohmann::ordered_json{
      {"event", "join_refused"},
      {"why", e.why == Why::kMismatch          ? "mismatch"
              : e.why == Why::kFull            ? "full"
              : e.why == Why::kStopping        ? "stopping"
              : e.why == Why::kFailed          ? "failed"
                                               : "unauthenticated"},
      {"detail", detail},
      {"unix_time", unix_now()}});
  if (e.why == Why::kUnauthenticated) {
    log("mpi_trainer: a process connected to join and was refused: " + e.detail +
        "; the run goes on (docs/fault-model.md, \"Who can read, join or poison a run\")");
    return;
  }
  if (e.why == Why::kMismatch) {
    log("mpi_trainer: worker rank " + std::to_string(e.rank) + " refused: " + detail +
        " (give it the job's --model, --batch-size and --push-precision)");
    return;
  }
  log(std::string("mpi_trainer: a worker asked to join, but ") +
      (e.why == Why::kFailed     ? "the parameter server failed"
       : e.why == Why::kStopping ? "the job is stopping"
                                 : "every slot is taken") +
      " (--max-workers " + std::to_string(cfg_.max_workers) + ")");
}

void PsReport::waiting_for_joins(std::int64_t global_step) {
  log("mpi_trainer: no worker left at global step " + std::to_string(global_step) + ": waiting for workers to join");
}

void PsReport::standbys_chosen(const StandbysChosen& e) {
  if (cfg_.quiet) return;
  std::string names;
  for (const int r : e.ranks)
    names += (names.empty() ? "" : ", ") + std::to_string(r);
  log("mpi_trainer: parameter server: standby replica on worker rank " + names + " at global step " +
      std::to_string(e.global_step) + ", every " + std::to_string(e.interval) + " updates" +
      (e.change == StandbyChange::kGone ? " (the previous standby is gone)"
       : e.change == StandbyChange::kLowerJoined
           ? " (a lower-ranked worker joined: the lowest-ranked workers are the standbys)"
           : ""));
}

void PsReport::no_handover(const NoHandover& e) {
  using Why = NoHandover::Why;
  const std::string why = e.why == Why::kNoStandby ? "no standby is left to take it"
                          : e.why == Why::kLate    ? "the standby did not take the handover within --failure-timeout"
                          : e.why == Why::kStandbyGone
                              ? "the standby is gone"
                              : "the standby (worker rank " + std::to_string(e.standby) + ") has a notice too (" +
                                    signal_name(e.their_signo) + "): the whole job is being stopped";
  log("mpi_trainer: parameter server: " + signal_name(e.signo) + ": no handover (" + why +
      "): checkpointing and stopping the job");
}

}  // namespace mt
