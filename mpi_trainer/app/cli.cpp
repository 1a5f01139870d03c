#include "app/cli.hpp"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "plan/calibrate.hpp"
#include "app/cli_help.hpp"
#include "app/cli_hints.hpp"
#include "app/cli_tool_options.hpp"
#include "app/cli_train_options.hpp"
#include "app/config.hpp"
#include "app/emulation.hpp"
#include "app/evaluate.hpp"
#include "app/export.hpp"
#include "plan/plan.hpp"
#include "app/ps_report.hpp"
#include "app/report_command.hpp"
#include "app/train.hpp"
#include "app/train_dist.hpp"
#include "app/train_virtual.hpp"
#include "app/version.hpp"
#include "ps/ps.hpp"
#include "ps/wire/mpi_env.hpp"
#include "nn/resnet.hpp"
#include "ckpt/checkpoint.hpp"
#include "core/error.hpp"
#include "data/dataset.hpp"
#include "nn/resnet.hpp"

namespace mt {

namespace {

using cli::env_default;
using cli::kNonNegative;
using cli::kPositive;
using cli::name_the_variable;

// The version, and which MPI and failure detection this build uses (launch/mpirun.sh reads the
// `failure detection:` and `mpirun:` lines to start this build's mpirun, with --with-ft ulfm for a
// ULFM build).
std::string version_text() {
  const std::string launcher = mpi_launcher_path();
  return std::string("mpi_trainer ") + kVersion + "\nmpi: " + mpi_library_name() + "\nfailure detection: " +
         (ulfm_available() ? "ULFM (the MPI library reports failed processes) + heartbeats (--failure-timeout)"
                           : "heartbeats (--failure-timeout)") +
         "\nmpirun: " + (launcher.empty() ? "mpirun (from PATH)" : launcher);
}



// `ckpt verify`: one line per file, exit 0 only when every file is valid (and, for a directory,
// LATEST names an existing checkpoint).
int verify_checkpoints(const std::string& path, std::ostream& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw CheckpointError(path + ": not found (no such file or directory)");
  std::vector<fs::path> files;
  bool all_ok = true;
  if (fs::is_directory(path)) {
    files = ckpt::list(path);
    if (files.empty()) throw CheckpointError(path + ": no checkpoints (ckpt-*.h5) in this directory");
    // LATEST is for scripts (readers do not depend on it): one that names a missing file misleads them.
    if (std::ifstream latest(fs::path(path) / "LATEST"); latest) {
      std::string name;
      std::getline(latest, name);
      if (!fs::is_regular_file(fs::path(path) / name, ec)) {
        out << "dangling: " << (fs::path(path) / "LATEST").string() << " names " << name
            << ", which does not exist\n";
        all_ok = false;
      }
    }
  } else {
    files.push_back(path);
  }
  for (const auto& f : files) {
    const auto r = ckpt::verify_contained(f);
    if (r.ok)
      out << "ok: " << f.string() << " (model " << r.model << ", global_step " << r.global_step << ")\n";
    else
      out << "damaged: " << r.reason << '\n';
    all_ok = all_ok && r.ok;
  }
  return all_ok ? kExitOk : kExitCheckpoint;
}

// A command line that does not parse, under a launcher: the status file (found in the arguments
// as the restart loop finds it) says so, when there is one.
void write_usage_error_status(int argc, char** argv, const std::string& what) {
  TrainConfig c;
  c.train_steps = 0;  // not known: the command line did not parse
  const auto value = [&](int i, const std::string& flag, std::string& into) {
    const std::string a = argv[i];
    if (a == flag && i + 1 < argc) into = argv[i + 1];
    if (a.rfind(flag + "=", 0) == 0) into = a.substr(flag.size() + 1);
  };
  for (int i = 1; i < argc; ++i) {
    value(i, "--ckpt-dir", c.ckpt_dir);
    value(i, "--status-file", c.status_file);
  }
  if (c.ckpt_dir.empty())
    if (const char* v = std::getenv("MT_CKPT_DIR")) c.ckpt_dir = v;
  if (c.status_file.empty())
    if (const char* v = std::getenv("MT_STATUS_FILE")) c.status_file = v;
  write_failed_status(c, kExitUsage, what);
}

// The end of an MPI process's run: MPI_Finalize within the run's bound, or none (a lost
// parameter server, a takeover), and then main ends the process (mpi_left_unfinalized).
int end_mpi(MpiSession& mpi, const TrainResult& r) {
  if (r.abort_job) {
    std::cerr << "mpi_trainer: rank " << mpi.rank()
              << ": the parameter server is silent but not known to be dead (hung: stopped, a stuck disk?): "
                 "ending the job (MPI_Abort) so that the launcher does not wait for it; a restart resumes from "
                 "the newest checkpoint\n";
    return mpi.abort_job(r.exit_code);
  }
  if (!r.skip_finalize) return mpi.finalize(r.exit_code, r.finalize_timeout_s);
  mpi.leave_unfinalized();
  return r.exit_code;
}

// A command line that does not parse. Under an MPI launcher every rank parses the same flags:
// rank 0 alone says what is wrong, and writes the status file a launcher reads (mpirun
// --enable-recovery exits 0 whatever the ranks did, so without it the restart loop would rerun a
// bad command line).
// `hints`: what the line most likely meant (app/cli_hints.hpp), said after CLI11's message.
int usage_error(const CLI::ParseError& e, int argc, char** argv, const std::string& hints, std::ostream& err) {
  const int rank = launcher_rank();
  const std::string what = name_the_variable(e.what());
  if (rank <= 0)
    err << "mpi_trainer: " << what << '\n' << hints << "Run 'mpi_trainer --help' or 'mpi_trainer <command> --help'.\n";
  if (rank == 0) write_usage_error_status(argc, argv, what);
  return kExitUsage;
}

// Every message of an exchange at once, without MPI's rendezvous (tcp_eager_up_to): the largest is
// one shard's push of the whole model, parameters and BatchNorm statistics in fp32 (more shards
// and bf16 pushes make each smaller). Every rank of a job computes the same from the same --model.
// An unknown model sets nothing: once MPI runs the ranks say so together, one line and the run's
// status file (agree_on_start), which an error here, before MPI, would bypass.
void eager_exchanges(const std::string& model) {
  ModelSpec spec;
  try {
    spec = parse_model(model);
  } catch (const UsageError&) {
    return;
  }
  const Model m(spec);
  tcp_eager_up_to(m.params().total() + m.stats().total());
}

// `train`: one process alone, virtual workers, or (under an MPI launcher, or with --max-workers)
// a shard or worker of a parameter-server job. Throws Error (main's caller maps it to its code).
int train_command(TrainConfig& cfg, int* argc, char*** argv, std::ostream& out, std::ostream& err) {
  if (cfg.virtual_workers > 0) {
    if (launcher_world_size() > 1)
      throw UsageError("--virtual-workers runs in one process: start it without mpirun or srun");
    return train_virtual(cfg, out).exit_code;
  }
  if (launcher_world_size() > 1 || cfg.max_workers > 0) {  // --max-workers: a PS may start alone
    // Elastic joins accept, and replacements are spawned, on a thread while the loop serves
    // workers: MPI_THREAD_MULTIPLE.
    cfg.command_args.assign(*argv + 1, *argv + *argc);  // before MPI_Init may touch them
    eager_exchanges(cfg.model);
    MpiSession mpi(argc, argv,
                   cfg.max_workers > 0 || cfg.replace_workers ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED);
    try {
      return end_mpi(mpi, train_distributed(cfg, mpi, out));
    } catch (const PsSuperseded& e) {
      // A former parameter server, woken after its successor took over: its job goes on without
      // it. One line; no MPI_Finalize (its peers count it failed).
      err << "mpi_trainer: " + std::string(e.what()) + '\n' << std::flush;
      mpi.leave_unfinalized();
      return e.exit_code();
    } catch (...) {
      // No MPI_Abort (a banner per rank, and a worker's error must not end the job): a
      // parameter server that failed has told its workers (run_ps); a worker that failed is
      // dropped by the parameter server as lost. One line, then this rank's exit code.
      const ErrorReport e = describe_error(std::current_exception());
      // One write: the ranks' lines must not interleave.
      err << "mpi_trainer: error (" + std::string(mpi.rank() < cfg.num_ps ? "parameter server" : "worker") +
                 ", rank " + std::to_string(mpi.rank()) + "): " + e.what + '\n'
          << std::flush;
      return mpi.finalize(e.exit_code, short_finalize_seconds());
    }
  }
  if (!cfg.revoke.empty() || !cfg.revocation_model.empty())
    throw UsageError("--revoke and --revocation-model need the parameter server (several MPI processes)");
  if (cfg.num_ps != 1)
    err << "mpi_trainer: warning: --num-ps " << cfg.num_ps
        << " applies to parameter-server runs (mpirun -np 2 or more); this single process trains alone\n";
  if (cfg.replace_workers)
    err << "mpi_trainer: warning: --replace-workers applies to parameter-server runs (mpirun -np 2 or more); "
           "this single process trains alone\n";
  return train(cfg, out).exit_code;  // 0, or stopped on a notice (75) or Ctrl-C (130)
}

// `join`: one more worker of a running parameter-server job, its own MPI job.
int join_command(const TrainConfig& cfg, int* argc, char*** argv, std::ostream& out, std::ostream& err) {
  eager_exchanges(cfg.model);
  MpiSession mpi(argc, argv, MPI_THREAD_SERIALIZED);
  TrainResult r;
  try {
    r = join_running_job(cfg, out);
  } catch (const Error& e) {
    err << "mpi_trainer join: error: " << e.what() << '\n' << std::flush;
    r = TrainResult{};
    r.exit_code = e.exit_code();
  }
  return end_mpi(mpi, r);
}

void model_info(const std::string& name, std::ostream& out) {
  const Model model(parse_model(name));
  out << "model: " << model.spec().name << '\n';
  for (const auto& e : model.params().entries())
    out << "  " << e.name << ' ' << dims_to_string(e.dims) << '\n';
  std::int64_t bn_stats = 0;
  for (const auto& e : model.stats().entries()) bn_stats += e.size;
  out << "bn_running_stats: " << bn_stats << '\n';
  out << "parameters: " << model.param_count() << '\n';
}

}  // namespace

// Every subcommand declared, then the one given dispatched: one function, in --help's order, so
// that a command's flags and its action sit side by side (each action is a call of a few lines).
int run_cli(int argc, char** argv, std::ostream& out, std::ostream& err) {
  // `report` is the Python script's: every argument after it, --help too, goes there.
  if (argc > 1 && std::string(argv[1]) == "report") return report_command(argc, argv, err);
  cli::begin_parse(argc, argv);
  CLI::App app{
      "mpi_trainer: ResNet training for preemptible (spot) servers.\n"
      "Exit codes: 0 done, 1 internal error, 2 usage, 3 config/data error, 4 checkpoint error,\n"
      "10 parameter server lost (a worker), 11 a former parameter server woken after its successor took\n"
      "over (ULFM; it wrote nothing), 75 stopped on SIGTERM/SIGUSR1 after a checkpoint: rerun\n"
      "with --resume auto, 130 stopped by Ctrl-C (SIGINT) after a checkpoint: rerun the same command\n"
      "(a second Ctrl-C ends it at once). Under mpirun a parameter server that fails stops its workers\n"
      "with its own code; <ckpt-dir>/run-status.json says how the run ended (docs/fault-model.md)."};
  // Every command's --help in sections, wrapped to the terminal (subcommands take the formatter
  // they are made with: set first).
  app.formatter(std::make_shared<cli::HelpFormatter>(cli::train_sections(), cli::help_width()));
  app.set_version_flag("--version", version_text());
  app.require_subcommand(1);
  app.footer("Every train flag also reads an environment default MT_<FLAG>, e.g. MT_TRAIN_STEPS.\n"
             "Run 'mpi_trainer <command> --help' for a command's options.");

  TrainConfig cfg;
  auto* train_cmd = app.add_subcommand(
      "train", "Train a model: one process alone (the single-server baseline), or under mpirun/srun as "
               "parameter-server shards and workers");
  cli::add_train_options(*train_cmd, cfg);

  TrainConfig join_cfg;
  auto* join_cmd = app.add_subcommand(
      "join", "Join a running parameter-server job (started with --max-workers) as one more worker: run it "
              "as its own MPI job sharing the training job's ompi-server, with the job's model and data "
              "flags and its --ckpt-dir or --port-file");
  cli::add_train_options(*join_cmd, join_cfg);

  std::string info_model = "resnet32";
  auto* info_cmd = app.add_subcommand("model-info", "Print a model's layers and parameter count");
  env_default(info_cmd->add_option("--model", info_model, "Model: " + model_choices())->capture_default_str(),
              "MT_MODEL");

  auto* devices_cmd = app.add_subcommand(
      "devices", "Print the device table --emulate-device uses (step times and their sources)");

  PlanConfig plan_cfg;
  auto* plan_cmd = app.add_subcommand(
      "plan", "Predict the training time, cost and risk of a (transient) cluster before renting it: the "
              "virtual runs' cluster simulator without gradients, over Monte-Carlo draws of revocations "
              "(evidence S; docs/user-guide.md, \"Plan before renting\")");
  std::string plan_deadline;
  cli::add_plan_options(*plan_cmd, plan_cfg, plan_deadline);

  CalibrateConfig cal_cfg;
  auto* cal_cmd = app.add_subcommand(
      "calibrate", "Measure this machine's (or GPU's) step time and the parameter server's time per update, and "
                   "write a device table for 'plan --devices' and '--emulate-device'");
  cli::add_calibrate_options(*cal_cmd, cal_cfg);

  cli::GenDataConfig gen_cfg;
  auto* gen_cmd = app.add_subcommand(
      "gen-data", "Write a small generated, learnable data set in CIFAR-10 binary format");
  cli::add_gen_data_options(*gen_cmd, gen_cfg);

  EvalConfig eval_cfg;
  auto* eval_cmd = app.add_subcommand(
      "eval", "Test accuracy and loss of a checkpoint on a data set's test split (one process, any device), "
              "with the input normalization the checkpoint records");
  cli::add_eval_options(*eval_cmd, eval_cfg);

  ExportConfig export_cfg;
  auto* export_cmd = app.add_subcommand(
      "export", "Write a checkpoint's model for PyTorch: safetensors with the state_dict of the module in "
                "ckpt/pytorch_model.py (BN running statistics included; normalization and labels in its metadata)");
  cli::add_export_options(*export_cmd, export_cfg);

  // Listed for --help only: run_cli hands `report` to the script before parsing.
  app.add_subcommand("report",
                     "Turn runs' --metrics files into one HTML page with charts: curves, the timeline of revocations "
                     "and joins, throughput, cost against the prediction, a summary, and a plan's forecast scored "
                     "(mpi_trainer report --help; docs/user-guide.md, \"See a run\")");

  auto* ckpt_cmd = app.add_subcommand("ckpt", "Check or describe checkpoints");
  ckpt_cmd->require_subcommand(1);
  std::string ckpt_path;
  auto* verify_cmd = ckpt_cmd->add_subcommand(
      "verify", "Verify a checkpoint file, or every checkpoint in a directory (exit 0 all valid, 4 otherwise)");
  verify_cmd->add_option("path", ckpt_path, "Checkpoint file or directory")->required();
  auto* inspect_cmd = ckpt_cmd->add_subcommand(
      "inspect", "Print a checkpoint's attributes and arrays (a directory: its newest valid one)");
  inspect_cmd->add_option("path", ckpt_path, "Checkpoint file or directory")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e, out, err);  // the help of the (sub)command that asked for it
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::CallForVersion&) {
    out << version_text() << '\n';
    return 0;
  } catch (const CLI::ParseError& e) {
    return usage_error(e, argc, argv, cli::usage_hints(app, argc, argv), err);
  }

  if (cfg.ps_handover.empty()) cfg.ps_handover = "on";  // the bare --ps-handover
  resolve_policy(cfg);
  resolve_policy(join_cfg);
  try {
    if (*train_cmd) {
      return train_command(cfg, &argc, &argv, out, err);
    } else if (*join_cmd) {
      return join_command(join_cfg, &argc, &argv, out, err);
    } else if (*info_cmd) {
      model_info(info_model, out);
    } else if (*plan_cmd) {
      cli::resolve_deadline(plan_deadline, plan_cfg);
      return plan_command(plan_cfg, out);
    } else if (*cal_cmd) {
      return calibrate_command(cal_cfg, out);
    } else if (*devices_cmd) {
      out << DeviceTable::shipped_text();
    } else if (*export_cmd) {
      return export_checkpoint(export_cfg, out);
    } else if (*eval_cmd) {
      return evaluate_checkpoint(eval_cfg, out);
    } else if (*verify_cmd) {
      return verify_checkpoints(ckpt_path, out);
    } else if (*inspect_cmd) {
      out << ckpt::describe(load_named_checkpoint(ckpt_path).checkpoint);
    } else if (*gen_cmd) {
      write_synthetic_cifar10(gen_cfg.dir, gen_cfg.train, gen_cfg.test, gen_cfg.seed);
      out << "wrote " << gen_cfg.train << " training and " << gen_cfg.test << " test images to " << gen_cfg.dir << '\n';
    }
    return kExitOk;
  } catch (const Error& e) {
    err << "mpi_trainer: error: " << e.what() << '\n';
    return e.exit_code();
  }
}

}  // namespace mt
