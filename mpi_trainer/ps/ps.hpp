// The parameter-server runtime's face (docs/architecture.md, "Parameter server"): ranks 0..S-1
// of an MPI job are shards of an asynchronous parameter server, the others workers; each push a
// shard applies is one global step. The runtime knows MPI, the model's layout and the optimizer;
// it does not know the command line, checkpoint files, metrics or prices: it reports through
// `PsEvents` and hands consistent state to a `SnapshotSink`, both implemented by the app
// (app/ps_report.hpp). Nothing under ps/ includes app/ or ckpt/.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "data/loader.hpp"
#include "nn/params.hpp"
#include "nn/resnet.hpp"
#include "optim/schedule.hpp"
#include "ps/elastic/join_auth.hpp"  // the join secret and its files (app: --join-secret)
#include "ps/events.hpp"
#include "ps/options.hpp"
#include "ps/wire/ulfm.hpp"  // ulfm_available: what this build uses

namespace mt {

class Backend;

// After a takeover (ULFM): `o` serves the survivors on `comm` (its shards at ranks 0..num_ps-1,
// each worker i after them named worker_ranks[i], training data slot worker_slots[i] of
// `data_slots`), its global step counting on from `first_step`; `self_rank` names this process.
// No more standbys than workers (a handover needs one).
void serve_survivors(PsOptions& o, MPI_Comm comm, std::vector<int> worker_ranks, std::vector<int> worker_slots,
                     int data_slots, std::int64_t first_step, int self_rank);

// This rank's shard. `update` computes the optimizer update on host buffers; `sink` is used on
// shard 0 only. Throws mt::Error (exit 10 when another shard is lost). On any error, from the
// start (a resume) to the end (the final evaluation), the shard first answers every worker's
// join or push with a stop that carries the error's exit code (kFailedEnd), so that the job ends
// at once with a defined code instead of an MPI_Abort; shard 0 reports `PsEvents::failed`; then
// the error is rethrown.
PsResult run_ps(const PsOptions& opts, const Model& model, const LrSchedule& schedule, Backend& update, FaultPlan plan,
                PsEvents& events, SnapshotSink& sink);

// A worker: `ps` holds the shards at ranks 0..S-1 (MPI_COMM_WORLD, or the intercommunicator of a
// worker that joined); `rank` names it in messages (-1: a joiner). `make_computer` is called once
// heartbeats flow (building a network can take a while); unused with synthetic gradients. Returns
// with `ps_lost` and kExitPsLost when the parameter server is lost; never ends the process.
WorkerResult run_worker(const WorkerOptions& opts, const Model& model, MPI_Comm ps, int rank, FaultPlan plan,
                        const std::function<std::unique_ptr<StepComputer>()>& make_computer);

// What this build of the runtime uses, and what the app needs of MPI beside run_ps and
// run_worker (the MPI session itself is ps/wire/mpi_env.hpp's MpiSession).

// Whether this build uses ULFM: ulfm_available() (ps/wire/ulfm.hpp).

// What this build uses, for --version and the run's first metrics line (no MPI_Init needed):
// the MPI library ("Open MPI v5.0.11"), how failures are detected ("ulfm+heartbeat": the library
// reports failed processes, heartbeats catch hung ones; "heartbeat": --failure-timeout only), and
// the launcher it was built with (CMake's MPIEXEC_EXECUTABLE; empty when unknown).
std::string mpi_library_name();
std::string failure_detection();
std::string mpi_launcher_path();

// Linux lets a sleep overrun by the thread's timer slack, 50 us by default: longer than the short
// naps of the polling loops. Lowers it for this process; a failure is reported on `log` and ignored.
void precise_naps(std::ostream& log);

// The largest of each of `values` over every rank of `comm` (MPI_Iallreduce; at most 8), or
// nothing when not every rank took part within `seconds` (one died before getting here): then
// the request is left pending and `comm` must see no other collective.
std::optional<std::vector<int>> max_over_ranks(const std::vector<int>& values, MPI_Comm comm, double seconds);

// `mpi_trainer join`: waits up to 60 s for the port file, reads the job's join secret from
// `secret_file`, connects (one joiner at a time), proves the secret (ps/elastic/join_auth.hpp; `prove`
// false: connects and stays silent, a test hook) and returns the intercommunicator to the
// parameter server, with errors returned. Throws Error with exit 10 when no parameter server
// answers, exit 3 when the secret file is missing or unsafe or the proof is refused. A notice
// (SIGTERM, SIGUSR1) while waiting returns MPI_COMM_NULL (or, during the connect itself, exits
// 0): the worker leaves before joining.
MPI_Comm connect_to_parameter_server(const std::string& port_file, const std::string& secret_file, bool prove = true);

// --replace-workers (ps/elastic/replacements.hpp): a replacement's command line, the training
// command's arguments with `train` turned into `join` and --revoke (which names ranks of the
// launched job) left out; and, in a spawned replacement, the parameter server that started it
// (MPI_COMM_NULL in any other process).
std::vector<std::string> replacement_arguments(const std::vector<std::string>& train_args);
MPI_Comm spawning_parameter_server();

}  // namespace mt
