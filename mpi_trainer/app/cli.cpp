#include "app/cli.hpp"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "app/calibrate.hpp"
#include "app/cli_train_options.hpp"
#include "app/config.hpp"
#include "app/emulation.hpp"
#include "app/evaluate.hpp"
#include "app/export.hpp"
#include "app/plan.hpp"
#include "app/ps_report.hpp"
#include "app/train.hpp"
#include "app/train_dist.hpp"
#include "app/train_virtual.hpp"
#include "ps/ps.hpp"
#include "ps/mpi_env.hpp"
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

constexpr const char* kVersion = "0.1.0";

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
    const auto r = ckpt::verify(f);
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
  if (!r.skip_finalize) return mpi.finalize(r.exit_code, r.finalize_timeout_s);
  mpi.leave_unfinalized();
  return r.exit_code;
}

}  // namespace

int run_cli(int argc, char** argv, std::ostream& out, std::ostream& err) {
  cli::begin_parse(argc, argv);
  CLI::App app{
      "mpi_trainer: ResNet training for preemptible (spot) servers.\n"
      "Exit codes: 0 done, 1 internal error, 2 usage, 3 config/data error, 4 checkpoint error,\n"
      "10 parameter server lost (a worker), 75 stopped on SIGTERM/SIGUSR1 after a checkpoint: rerun\n"
      "with --resume auto, 130 stopped by Ctrl-C (SIGINT) after a checkpoint: rerun the same command\n"
      "(a second Ctrl-C ends it at once). Under mpirun a parameter server that fails stops its workers\n"
      "with its own code; <ckpt-dir>/run-status.json says how the run ended (docs/fault-model.md)."};
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
  plan_cmd->add_option("--model", plan_cfg.model, "Model: " + model_choices() + " (its size sets the messages)")
      ->capture_default_str();
  plan_cmd->add_option("--steps", plan_cfg.steps, "Global steps to train")->capture_default_str()->check(kPositive);
  plan_cmd->add_option("--epochs", plan_cfg.epochs, "Epochs instead of --steps (with --train-images and --batch-size)")
      ->check(kPositive);
  plan_cmd->add_option("--train-images", plan_cfg.train_images, "Training images, for --epochs (CIFAR-10: 50000)")
      ->capture_default_str()
      ->check(kPositive);
  plan_cmd->add_option("--batch-size", plan_cfg.batch_size, "Images per step, for --epochs")
      ->capture_default_str()
      ->check(kPositive);
  plan_cmd->add_option("--workers", plan_cfg.workers, "Workers at the start")->capture_default_str()->check(CLI::Range(1, 4096));
  plan_cmd->add_option("--worker-types", plan_cfg.worker_types,
                       "Instance type of every worker (one for all, or one per worker, comma-separated): a device "
                       "of the device table and a type of the price table")
      ->capture_default_str();
  plan_cmd->add_option("--num-ps", plan_cfg.num_ps,
                       "Parameter-server shards (each updates its part of every push); 0: one process training "
                       "alone (--workers 1, the single-server baseline)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  plan_cmd->add_option("--ps-type", plan_cfg.ps_type, "Instance type of every parameter-server shard")->capture_default_str();
  plan_cmd->add_option("--pricing", plan_cfg.pricing, "The workers' billing: transient or on-demand (on-demand: never revoked)")
      ->capture_default_str()
      ->check(CLI::IsMember({"transient", "on-demand"}));
  plan_cmd->add_option("--ps-pricing", plan_cfg.ps_pricing,
                       "The parameter servers' billing: on-demand (the paper's) or transient (then a revoked one "
                       "restarts the job from its newest checkpoint)")
      ->capture_default_str()
      ->check(CLI::IsMember({"transient", "on-demand"}));
  plan_cmd->add_option("--prices", plan_cfg.prices,
                       "Price table file (TYPE ON_DEMAND TRANSIENT, $/hour); default: the paper's Table II");
  plan_cmd->add_option("--devices", plan_cfg.devices,
                       "Device table file (NAME STEP_SECONDS [JITTER_CV]); default: the shipped one ('mpi_trainer devices')");
  plan_cmd->add_option("--worker-links", plan_cfg.worker_links,
                       "Each worker's link LATENCY_MS/GBIT_PER_S, one for all or one per worker (default 0.1/10)");
  plan_cmd->add_option("--ps-update-seconds", plan_cfg.ps_update_seconds,
                       "The parameter server's time per update (default: measured with bench/ps_bench, in proportion "
                       "to the model's parameters)")
      ->check(kNonNegative);
  plan_cmd->add_option("--revocation-model", plan_cfg.revocation_model,
                       "Lifetimes of transient servers: gce (built in), a table file (HOURS,FRACTION_REVOKED), or none")
      ->capture_default_str();
  plan_cmd->add_option("--failure-timeout", plan_cfg.failure_timeout, "Seconds until a lost worker is noticed")
      ->capture_default_str()
      ->check(kPositive);
  plan_cmd->add_option("--ckpt-every-steps", plan_cfg.ckpt_every_steps,
                       "Periodic checkpoint interval (0: none): what a revoked parameter server loses")
      ->capture_default_str()
      ->check(kNonNegative);
  plan_cmd->add_option("--ps-standby", plan_cfg.ps_standby,
                       "Standby workers holding a replica of the parameter server (train's --ps-standby): "
                       "a lost parameter server then costs the updates since the last replica while a "
                       "worker outlives it. -1: 1 with 2 or more workers, else 0")
      ->capture_default_str()
      ->check(CLI::Range(-1, 64));
  plan_cmd->add_option("--replica-interval", plan_cfg.replica_interval, "Updates between two replicas")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  plan_cmd->add_option("--restart-seconds", plan_cfg.restart_seconds,
                       "Seconds from a stopped job to training again (new servers, start, resume)")
      ->capture_default_str()
      ->check(kNonNegative);
  plan_cmd->add_flag("--takeover", plan_cfg.takeover,
                     "The job runs a ULFM build (launch/setup.sh --mpi ulfm): a lost parameter server "
                     "whose standby is up is taken over inside the job (--replica-interval updates lost "
                     "at most, --takeover-seconds) instead of restarting it; with --ps-pricing transient "
                     "the parameter server may then run on a preemptible server");
  plan_cmd->add_option("--takeover-seconds", plan_cfg.takeover_seconds,
                       "Seconds from the parameter server's loss to the next applied step after a takeover "
                       "(bench/ps_takeover.sh measured 0.17 s median)")
      ->capture_default_str()
      ->check(kNonNegative);
  plan_cmd->add_option("--draws", plan_cfg.draws, "Monte-Carlo draws of revocations")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  plan_cmd->add_option("--seed", plan_cfg.seed, "Seed of the draws")->capture_default_str();
  plan_cmd->add_flag("--json", plan_cfg.json, "One JSON object instead of the report");
  plan_cmd->add_flag("--per-draw", plan_cfg.per_draw, "With --json: every draw's time, cost, revocations and restarts");
  plan_cmd->add_option("--joins", plan_cfg.joins,
                       "Workers joining later, TYPE@step=N or TYPE@TIME, comma-separated (the paper's Fig. 5: "
                       "k80@step=16000,k80@step=32000,k80@step=48000)");
  std::string plan_deadline;
  plan_cmd->add_option("--deadline", plan_deadline,
                       "Search cluster shapes (type, count, transient or on demand, 1 or 2 shards) for the cheapest "
                       "that finish within this time (e.g. 2h, 90m) at the 90th percentile; exit 1 when none does");
  plan_cmd->add_option("--budget", plan_cfg.budget_usd,
                       "Search (as --deadline) for shapes whose 90th-percentile cost stays within these dollars")
      ->check(kPositive);
  plan_cmd->add_option("--max-workers", plan_cfg.max_workers, "The largest worker count the search tries")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  plan_cmd->get_option("--epochs")->excludes(plan_cmd->get_option("--steps"));

  CalibrateConfig cal_cfg;
  auto* cal_cmd = app.add_subcommand(
      "calibrate", "Measure this machine's (or GPU's) step time and the parameter server's time per update, and "
                   "write a device table for 'plan --devices' and '--emulate-device'");
  cal_cmd->add_option("--model", cal_cfg.model, "Model: " + model_choices())->capture_default_str();
  cal_cmd->add_option("--batch-size", cal_cfg.batch_size, "Images per step")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  cal_cmd->add_option("--device", cal_cfg.device, "cpu, cuda or auto")->capture_default_str();
  cal_cmd->add_option("--threads", cal_cfg.threads, "CPU threads (0: the cores this process may use)")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  cal_cmd->add_option("--steps", cal_cfg.steps, "Timed training steps")->capture_default_str()->check(CLI::Range(2, 100000));
  cal_cmd->add_option("--warmup", cal_cfg.warmup, "Untimed steps first")->capture_default_str()->check(CLI::Range(0, 100000));
  cal_cmd->add_option("--updates", cal_cfg.updates, "Timed parameter-server updates")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  cal_cmd->add_option("--name", cal_cfg.name,
                      "The device's name in the table (default: cpu or cuda; a Table II type such as v100 makes "
                      "plan price it)");
  cal_cmd->add_option("--out", cal_cfg.out, "Write the device table here (default: print it)");

  std::string gen_dir;
  std::int64_t gen_train = 5000, gen_test = 1000;
  std::uint64_t gen_seed = 1;
  auto* gen_cmd = app.add_subcommand(
      "gen-data", "Write a small generated, learnable data set in CIFAR-10 binary format");
  gen_cmd->add_option("dir", gen_dir, "Output directory")->required();
  gen_cmd->add_option("--train", gen_train, "Training images")->capture_default_str()->check(kPositive);
  gen_cmd->add_option("--test", gen_test, "Test images")->capture_default_str()->check(kPositive);
  gen_cmd->add_option("--seed", gen_seed, "Seed")->capture_default_str();

  EvalConfig eval_cfg;
  auto* eval_cmd = app.add_subcommand(
      "eval", "Test accuracy and loss of a checkpoint on a data set's test split (one process, any device), "
              "with the input normalization the checkpoint records");
  eval_cmd->add_option("--ckpt", eval_cfg.ckpt, "Checkpoint file, or a directory (its newest valid checkpoint)")
      ->required();
  eval_cmd->add_option("--data", eval_cfg.data,
                       "Data directory (CIFAR-10 binary or Fashion-MNIST IDX). Default: as for train");
  eval_cmd->add_option("--device", eval_cfg.device, "cpu, cuda or auto")->capture_default_str();
  eval_cmd->add_option("--threads", eval_cfg.threads, "CPU threads (0: the cores this process may use)")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  eval_cmd->add_option("--batch-size", eval_cfg.batch_size, "Images per evaluation batch")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  eval_cmd->add_flag("--json", eval_cfg.json, "One JSON object instead of a line");

  ExportConfig export_cfg;
  auto* export_cmd = app.add_subcommand(
      "export", "Write a checkpoint's model for PyTorch: safetensors with the state_dict of the module in "
                "ckpt/pytorch_model.py (BN running statistics included; normalization and labels in its metadata)");
  export_cmd->add_option("--ckpt", export_cfg.ckpt, "Checkpoint file, or a directory (its newest valid checkpoint)")
      ->required();
  export_cmd->add_option("--format", export_cfg.format, "Export format")
      ->capture_default_str()
      ->check(CLI::IsMember({"safetensors"}));
  export_cmd->add_option("out", export_cfg.out, "The file to write")->required();

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
    // Under an MPI launcher every rank parses the same flags: rank 0 alone says what is wrong,
    // and writes the status file a launcher reads (mpirun --enable-recovery exits 0 whatever
    // the ranks did, so without it the restart loop would rerun a bad command line).
    const int rank = launcher_rank();
    const std::string what = name_the_variable(e.what());
    if (rank <= 0) err << "mpi_trainer: " << what << "\nRun 'mpi_trainer --help' or 'mpi_trainer <command> --help'.\n";
    if (rank == 0) write_usage_error_status(argc, argv, what);
    return kExitUsage;
  }

  if (cfg.ps_handover.empty()) cfg.ps_handover = "on";  // the bare --ps-handover
  resolve_policy(cfg);
  resolve_policy(join_cfg);
  try {
    if (*train_cmd) {
      if (cfg.virtual_workers > 0) {
        if (launcher_world_size() > 1)
          throw UsageError("--virtual-workers runs in one process: start it without mpirun or srun");
        const TrainResult r = train_virtual(cfg, out);
        return r.exit_code;
      }
      if (launcher_world_size() > 1 || cfg.max_workers > 0) {  // --max-workers: a PS may start alone
        // Elastic joins accept on a thread while the loop serves workers: MPI_THREAD_MULTIPLE.
        MpiSession mpi(&argc, &argv, cfg.max_workers > 0 ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED);
        try {
          return end_mpi(mpi, train_distributed(cfg, mpi, out));
        } catch (...) {
          // No MPI_Abort (a banner per rank, and a worker's error must not end the job): a
          // parameter server that failed has told its workers (run_ps); a worker that failed is
          // dropped by the parameter server as lost. One line, then this rank's exit code.
          const ErrorReport e = describe_error(std::current_exception());
          // One write: the ranks' lines must not interleave.
          err << "mpi_trainer: error (" + std::string(mpi.rank() < cfg.num_ps ? "parameter server" : "worker") +
                     ", rank " + std::to_string(mpi.rank()) + "): " + e.what + '\n'
              << std::flush;
          return mpi.finalize(e.exit_code, kShortFinalizeSeconds);
        }
      } else {
        if (!cfg.revoke.empty() || !cfg.revocation_model.empty())
          throw UsageError("--revoke and --revocation-model need the parameter server (several MPI processes)");
        if (cfg.num_ps != 1)
          err << "mpi_trainer: warning: --num-ps " << cfg.num_ps
              << " applies to parameter-server runs (mpirun -np 2 or more); this single process trains alone\n";
        const TrainResult r = train(cfg, out);
        if (r.exit_code != kExitOk) return r.exit_code;  // stopped on a notice (75) or Ctrl-C (130)
      }
    } else if (*join_cmd) {
      MpiSession mpi(&argc, &argv, MPI_THREAD_SERIALIZED);
      TrainResult r;
      try {
        r = join_running_job(join_cfg, out);
      } catch (const Error& e) {
        err << "mpi_trainer join: error: " << e.what() << '\n' << std::flush;
        r = TrainResult{};
        r.exit_code = e.exit_code();
      }
      return end_mpi(mpi, r);
    } else if (*info_cmd) {
      const Model model(parse_model(info_model));
      out << "model: " << model.spec().name << '\n';
      for (const auto& e : model.params().entries())
        out << "  " << e.name << ' ' << dims_to_string(e.dims) << '\n';
      std::int64_t bn_stats = 0;
      for (const auto& e : model.stats().entries()) bn_stats += e.size;
      out << "bn_running_stats: " << bn_stats << '\n';
      out << "parameters: " << model.param_count() << '\n';
    } else if (*plan_cmd) {
      if (!plan_deadline.empty()) {
        if (const std::string why = parse_duration(plan_deadline, plan_cfg.deadline_seconds); !why.empty())
          throw UsageError("--deadline: '" + plan_deadline + "': " + why);
        if (!(plan_cfg.deadline_seconds > 0)) throw UsageError("--deadline must be above 0");
      }
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
      write_synthetic_cifar10(gen_dir, gen_train, gen_test, gen_seed);
      out << "wrote " << gen_train << " training and " << gen_test << " test images to " << gen_dir << '\n';
    }
    return kExitOk;
  } catch (const Error& e) {
    err << "mpi_trainer: error: " << e.what() << '\n';
    return e.exit_code();
  }
}

}  // namespace mt
