// Times publishing a checkpoint (bench/faults/ckpt_figures.sh): reads FILE once, then publishes it ROUNDS
// times into DIR exactly as the trainer does (ckpt::publish: HDF5 image in memory, write, fsync,
// rename, fsync of the directory, LATEST, retention keeping 2), one JSON line per round:
//   {"round":1,"bytes":...,"image_s":...,"file_s":...,"durable_s":...,"published_s":...}
// image_s: the HDF5 file built in memory; file_s: written and fsync'ed under its temporary name;
// durable_s: from the start until durable under its final name (renamed, directory fsync'ed);
// published_s: LATEST replaced too. The global step advances each round, so each is a new file, and
// the values change as in training: every array's, and a string like the parameter server's data
// cursors (a writer that kept anything from the previous round must still write all of it).
// --warmup publishes untimed first, as a trainer's later checkpoints come after earlier ones (the
// first of a process also faults in its buffers: a few ms more).
//
//   ckpt_bench --from FILE --dir DIR [--rounds N] [--warmup W]
#include <CLI/CLI.hpp>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "ckpt/checkpoint.hpp"
#include "core/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Checkpoint publish timings"};
  std::string from, dir;
  int rounds = 1, warmup = 1;
  app.add_option("--from", from, "A checkpoint file to publish again")->required()->check(CLI::ExistingFile);
  app.add_option("--dir", dir, "Where to publish (the disk measured)")->required();
  app.add_option("--rounds", rounds, "Publishes timed")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--warmup", warmup, "Untimed publishes first")->check(CLI::NonNegativeNumber)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    mt::ckpt::Checkpoint c = mt::ckpt::read(from);
    for (int r = 1 - warmup; r <= rounds; ++r) {
      c.global_step += 1;
      c.created_unix = 0;
      for (auto& a : c.arrays)
        for (float& v : a.data) v += 1e-6F;
      c.strings["data_cursors"] = "[" + std::to_string(c.global_step * 128) + "," +
                                  std::to_string(c.global_step * 128 + 7) + "]";
      mt::ckpt::PublishStats s;
      mt::ckpt::publish(dir, c, /*keep=*/2, &s);
      if (r < 1) continue;
      std::cout << nlohmann::ordered_json{{"round", r},
                                          {"bytes", s.bytes},
                                          {"image_s", s.image_seconds},
                                          {"file_s", s.write_seconds - s.image_seconds},
                                          {"durable_s", s.durable_seconds},
                                          {"published_s", s.write_seconds + s.sync_seconds},
                                          {"rewritten", s.rewritten}}
                       .dump()
                << '\n'
                << std::flush;
    }
  } catch (const std::exception& e) {
    std::cerr << "ckpt_bench: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
