// The flags of plan, calibrate, eval, export and gen-data (app/cli_tool_options.hpp).
#include "app/cli_tool_options.hpp"

#include "app/cli_train_options.hpp"
#include "core/error.hpp"
#include "nn/resnet.hpp"
#include "ps/ps.hpp"

namespace mt::cli {

void add_plan_options(CLI::App& cmd, PlanConfig& c, std::string& deadline) {
  cmd.add_option("--model", c.model, "Model: " + model_choices() + " (its size sets the messages)")
      ->capture_default_str();
  cmd.add_option("--steps", c.steps, "Global steps to train")->capture_default_str()->check(kSteps);
  cmd.add_option("--epochs", c.epochs, "Epochs instead of --steps (with --train-images and --batch-size)")
      ->check(kPositive);
  cmd.add_option("--train-images", c.train_images, "Training images, for --epochs (CIFAR-10: 50000)")
      ->capture_default_str()
      ->check(kPositive);
  cmd.add_option("--batch-size", c.batch_size, "Images per step, for --epochs")
      ->capture_default_str()
      ->check(kPositive);
  cmd.add_option("--workers", c.workers, "Workers at the start")->capture_default_str()->check(CLI::Range(1, 4096));
  cmd.add_option("--worker-types", c.worker_types,
                 "Instance type of every worker (one for all, or one per worker, comma-separated): a device "
                 "of the device table and a type of the price table")
      ->capture_default_str();
  cmd.add_option("--num-ps", c.num_ps,
                 "Parameter-server shards (each updates its part of every push); 0: one process training "
                 "alone (--workers 1, the single-server baseline)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  cmd.add_option("--ps-type", c.ps_type, "Instance type of every parameter-server shard")->capture_default_str();
  cmd.add_option("--pricing", c.pricing, "The workers' billing: transient or on-demand (on-demand: never revoked)")
      ->capture_default_str()
      ->check(CLI::IsMember({"transient", "on-demand"}));
  cmd.add_option("--ps-pricing", c.ps_pricing,
                 "The parameter servers' billing: on-demand (the paper's) or transient (then a revoked one "
                 "restarts the job from its newest checkpoint)")
      ->capture_default_str()
      ->check(CLI::IsMember({"transient", "on-demand"}));
  cmd.add_option("--prices", c.prices,
                 "Price table file (TYPE ON_DEMAND TRANSIENT, $/hour); default: the paper's Table II");
  cmd.add_option("--devices", c.devices,
                 "Device table file (NAME STEP_SECONDS [JITTER_CV]); default: the shipped one ('mpi_trainer devices')");
  cmd.add_option("--worker-links", c.worker_links,
                 "Each worker's link LATENCY_MS/GBIT_PER_S, one for all or one per worker (default 0.1/10)");
  cmd.add_option("--ps-link", c.ps_link, kPsLinkHelp);
  cmd.add_option("--push-precision", c.push_precision,
                 "The values of pushes and replies: fp32, or bf16 (half the bytes on every link; train's "
                 "--push-precision)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd.add_option("--ps-update-seconds", c.ps_update_seconds,
                 "The parameter server's time per update (default: measured with bench/ps_bench, in proportion "
                 "to the model's parameters; bf16 pushes add their coding)")
      ->check(kNonNegative);
  cmd.add_option("--revocation-model", c.revocation_model,
                 "Lifetimes of transient servers: gce (built in: the paper's GCE preemptible VMs, per GPU "
                 "type), aws-v100 (built in: AWS spot V100s, public traces of 2023), aws-advisor[:REGION] "
                 "(each type's AWS interruption band there, default us-east-1, as a constant hazard), "
                 "aws-band:BAND (<5%, 5-10%, 10-15%, 15-20% or a percentage revoked a month), a table file "
                 "(HOURS,FRACTION_REVOKED), or none")
      ->capture_default_str();
  cmd.add_option("--failure-timeout", c.failure_timeout, "Seconds until a lost worker is noticed")
      ->capture_default_str()
      ->check(kPositive);
  cmd.add_option("--ckpt-every-steps", c.ckpt_every_steps,
                 "Periodic checkpoint interval (0: none): what a revoked parameter server loses")
      ->capture_default_str()
      ->check(kStepsOrZero);
  cmd.add_option("--ps-standby", c.ps_standby,
                 "Standby workers holding a replica of the parameter server (train's --ps-standby): "
                 "a lost parameter server then costs the updates since the last replica while a "
                 "worker outlives it. -1: 1 with 2 or more workers, else 0")
      ->capture_default_str()
      ->check(CLI::Range(-1, 64));
  cmd.add_option("--replica-interval", c.replica_interval, "Updates between two replicas")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  cmd.add_option("--restart-seconds", c.restart_seconds,
                 "Seconds from a stopped job to training again (new servers, start, resume)")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd.add_option("--notice-seconds", c.notice_seconds,
                 "The cloud's warning before it reclaims a server: GCE and Azure Spot 30, AWS Spot 120 (0: "
                 "none acted on, as the paper's TensorFlow). A worker warned a step ahead pushes it and "
                 "leaves; a parameter server warned 5 s ahead checkpoints first, so its restart loses nothing")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd.add_flag("--takeover", c.takeover,
               "The job runs a ULFM build (launch/setup.sh --mpi ulfm): a lost parameter server "
               "whose standby is up is taken over inside the job (--replica-interval updates lost "
               "at most, --takeover-seconds) instead of restarting it; with --ps-pricing transient "
               "the parameter server may then run on a preemptible server");
  cmd.add_option("--takeover-seconds", c.takeover_seconds,
                 "Seconds from the parameter server's loss to the next applied step after a takeover "
                 "(bench/faults/ps_takeover.sh measured 0.17 s median)")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd.add_option("--draws", c.draws, "Monte-Carlo draws of revocations")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  cmd.add_option("--seed", c.seed, "Seed of the draws")->capture_default_str();
  cmd.add_flag("--json", c.json, "One JSON object instead of the report");
  cmd.add_flag("--per-draw", c.per_draw, "With --json: every draw's time, cost, revocations and restarts");
  cmd.add_option("--joins", c.joins,
                 "Workers joining later, TYPE@step=N or TYPE@TIME, comma-separated (the paper's Fig. 5: "
                 "k80@step=16000,k80@step=32000,k80@step=48000)");
  cmd.add_option("--deadline", deadline,
                 "Search cluster shapes (type, count, transient or on demand, 1 or 2 shards) for the cheapest "
                 "that finish within this time (e.g. 2h, 90m) at the 90th percentile; exit 1 when none does");
  cmd.add_option("--budget", c.budget_usd,
                 "Search (as --deadline) for shapes whose 90th-percentile cost stays within these dollars")
      ->check(kPositive);
  cmd.add_option("--target-accuracy", c.target_accuracy,
                 "Search (as --deadline) for the shapes that reach this test accuracy (percent) soonest: each "
                 "runs the shortest schedule measured to reach it with its worker count (bench/README.md, "
                 "\"Speed-up\"; measured: resnet8 on Fashion-MNIST); exit 1 when none does")
      ->check(CLI::Range(0.01, 100.0));
  cmd.add_option("--max-workers", c.max_workers, "The largest worker count the search tries")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd.get_option("--epochs")->excludes(cmd.get_option("--steps"));
}

void resolve_deadline(const std::string& deadline, PlanConfig& c) {
  if (deadline.empty()) return;
  if (const std::string why = parse_duration(deadline, c.deadline_seconds); !why.empty())
    throw UsageError("--deadline: '" + deadline + "': " + why);
  if (!(c.deadline_seconds > 0)) throw UsageError("--deadline must be above 0");
}

void add_calibrate_options(CLI::App& cmd, CalibrateConfig& c) {
  cmd.add_option("--model", c.model, "Model: " + model_choices())->capture_default_str();
  cmd.add_option("--batch-size", c.batch_size, "Images per step")->capture_default_str()->check(CLI::Range(1, 65536));
  cmd.add_option("--device", c.device, "cpu, cuda or auto")->capture_default_str();
  cmd.add_option("--threads", c.threads, "CPU threads (0: the cores this process may use)")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  cmd.add_option("--steps", c.steps, "Timed training steps")->capture_default_str()->check(CLI::Range(2, 100000));
  cmd.add_option("--warmup", c.warmup, "Untimed steps first")->capture_default_str()->check(CLI::Range(0, 100000));
  cmd.add_option("--updates", c.updates, "Timed parameter-server updates")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  cmd.add_option("--name", c.name,
                 "The device's name in the table (default: cpu or cuda; a Table II type such as v100 makes "
                 "plan price it)");
  cmd.add_option("--out", c.out, "Write the device table here (default: print it)");
}

void add_eval_options(CLI::App& cmd, EvalConfig& c) {
  cmd.add_option("--ckpt", c.ckpt, "Checkpoint file, or a directory (its newest valid checkpoint)")->required();
  cmd.add_option("--data", c.data, "Data directory (CIFAR-10 binary or Fashion-MNIST IDX). Default: as for train");
  cmd.add_option("--device", c.device, "cpu, cuda or auto")->capture_default_str();
  cmd.add_option("--threads", c.threads, "CPU threads (0: the cores this process may use)")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  cmd.add_option("--batch-size", c.batch_size, "Images per evaluation batch")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  cmd.add_flag("--json", c.json, "One JSON object instead of a line");
}

void add_export_options(CLI::App& cmd, ExportConfig& c) {
  cmd.add_option("--ckpt", c.ckpt, "Checkpoint file, or a directory (its newest valid checkpoint)")->required();
  cmd.add_option("--format", c.format, "Export format")->capture_default_str()->check(CLI::IsMember({"safetensors"}));
  cmd.add_option("out", c.out, "The file to write")->required();
}

void add_gen_data_options(CLI::App& cmd, GenDataConfig& c) {
  cmd.add_option("dir", c.dir, "Output directory")->required();
  cmd.add_option("--train", c.train, "Training images")->capture_default_str()->check(kPositive);
  cmd.add_option("--test", c.test, "Test images")->capture_default_str()->check(kPositive);
  cmd.add_option("--seed", c.seed, "Seed")->capture_default_str();
}

}  // namespace mt::cli
