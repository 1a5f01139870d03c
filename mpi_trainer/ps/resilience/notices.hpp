// Preemption notices, independent of MPI: the notice signals (SIGTERM, SIGUSR1) that cloud
// shutdown hooks and Slurm deliver, Ctrl-C, and mpirun's SIGCONT at the end of a job, each
// setting a flag the runtime reads between messages; and how messages name signals and processes.
#pragma once

#include <string>

namespace mt {

// Preemption notices: SIGTERM and SIGUSR1 set a flag instead of ending the process.
void install_notice_handlers();
// SIGINT (Ctrl-C) as a notice too, once: a second SIGINT ends the process at once.
void install_interrupt_handler();
// MPI ranks: a SIGCONT that does not end a stop is a notice (SIGCONT). Open MPI's mpirun, when it
// gets SIGTERM or SIGINT itself, sends its ranks SIGCONT at once but SIGTERM only after
// odls_base_sigkill_timeout seconds (measured: 30 s with our launchers' setting, SIGKILL at 60 s),
// too late for a cloud's 30 s grace. A stopped process is told apart by a ticker thread that
// does not tick while it is stopped.
void install_job_end_handler();
// The notice signal received (0: none yet).
int notice_signal();

// "SIGTERM", "SIGKILL", ... for messages.
std::string signal_name(int signo);

// How messages name a process: "worker rank R", or (rank -1) "joined worker (pid P)" for a
// worker that joined with `mpi_trainer join` and has no rank in the training job.
std::string worker_label(int rank);

}  // namespace mt
