#include "app/emulation.hpp"

#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include "plan/table_file.hpp"
#include "core/error.hpp"

namespace mt {

const char* DeviceTable::shipped_text() {
  return R"(# mpi_trainer's device table: the step time of one worker training the paper's workload,
# ResNet-32 (Tensor2Tensor variant, 1.9M parameters) on CIFAR-10, batch 128, TensorFlow 1.10 on GCE.
# --emulate-scale X multiplies every time (e.g. to match a smaller model or batch, or a short test).
# name  step_seconds  jitter_cv
k80     0.220   0.02   # ICAC'19 Table I: 1 K80, 64K steps in 3.91 h (CM-DARE: ~4.5 steps/s, 0.222 s)
p100    0.084   0.02   # ICAC'19 Table III: 1 P100, 64K steps in 1.50 h (CM-DARE: ~11.5 steps/s, 0.087 s)
v100    0.069   0.02   # ICAC'19 Table III: 1 V100, 64K steps in 1.23 h
# The times are whole-run averages (input pipeline, evaluation and checkpoints included), so a
# slight overestimate of the step itself. jitter_cv is an assumption, not a measurement: neither
# paper publishes per-step spread; give your own table with --emulate-device FILE.
)";
}

DeviceTable DeviceTable::parse(std::istream& in, const std::string& what) {
  DeviceTable t;
  t.source_ = what;
  for (const TableRow& row : read_table(in, "name")) {
    const std::string where = "--emulate-device " + what + " line " + std::to_string(row.line) + ": ";
    if (row.fields.size() < 2 || row.fields.size() > 3)
      throw DataError(where + "expected 'NAME STEP_SECONDS [JITTER_CV]', got '" + row.text + "'");
    const std::string& name = row.fields[0];
    if (t.devices_.count(name)) throw DataError(where + "device '" + name + "' is listed twice");
    DeviceSpeed d;
    d.step_seconds = table_number(row.fields[1], where, "a step time (seconds > 0)");
    if (d.step_seconds <= 0) throw DataError(where + "a step time must be above 0 seconds");
    if (row.fields.size() == 3) d.jitter_cv = table_number(row.fields[2], where, "a coefficient of variation (>= 0)");
    t.devices_[name] = d;
  }
  if (t.devices_.empty()) throw DataError("--emulate-device " + what + ": no devices in the file");
  return t;
}

DeviceTable DeviceTable::shipped() {
  std::istringstream in(shipped_text());
  return parse(in, "shipped");
}

DeviceTable DeviceTable::from_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw DataError("--emulate-device " + path + ": cannot open the file");
  return parse(in, path);
}

const DeviceSpeed& DeviceTable::at(const std::string& name) const {
  if (const auto it = devices_.find(name); it != devices_.end()) return it->second;
  throw UsageError("no device '" + name + "' in the device table (" + source_ + "): it has " + listed() +
                   ". Step times come only from measurements: time this model on a '" + name +
                   "' machine with `mpi_trainer calibrate --name " + name +
                   " --out FILE` and give --devices FILE (docs/user-guide.md, \"Plan before renting\")");
}

std::string DeviceTable::listed() const {
  std::string out;
  for (const auto& n : names()) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::vector<std::string> DeviceTable::names() const {
  std::vector<std::string> out;
  for (const auto& [name, d] : devices_) out.push_back(name);
  return out;
}

std::vector<Emulation> emulations(const TrainConfig& cfg, const std::vector<std::string>& types) {
  std::vector<Emulation> out(types.size());
  const std::string& spec = cfg.emulate_device;
  if (spec.empty() || spec == "off") return out;
  if (!(cfg.emulate_scale > 0) || !std::isfinite(cfg.emulate_scale))
    throw UsageError("--emulate-scale must be a number above 0");
  const DeviceTable shipped = DeviceTable::shipped();
  // A device of the shipped table for all; else `worker-types` or a table file, by instance type.
  const bool one_device = spec != "worker-types" && shipped.has(spec);
  const bool is_file = !one_device && spec != "worker-types";
  if (is_file && spec.find('/') == std::string::npos && !std::ifstream(spec))
    throw UsageError("--emulate-device '" + spec + "': not a device of the shipped table (" + shipped.listed() +
                     "), 'worker-types', or a device table file");
  const DeviceTable table = is_file ? DeviceTable::from_file(spec) : shipped;
  const bool only = is_file && table.size() == 1;
  for (std::size_t i = 0; i < types.size(); ++i) {
    const std::string name = one_device ? spec : only ? table.names()[0] : types[i];
    const DeviceSpeed& d = table.at(name);
    out[i] = Emulation{name, d.step_seconds * cfg.emulate_scale, d.jitter_cv, table.source()};
  }
  return out;
}

std::string describe(const std::vector<Emulation>& e) {
  if (e.empty() || !e[0].on()) return "";
  bool same = true;
  std::string all;
  for (const auto& x : e) {
    same = same && x.device == e[0].device;
    all += (all.empty() ? "" : ",") + x.device;
  }
  return same ? e[0].device : all;
}

std::uint64_t pacer_seed(std::uint64_t seed, int rank) {
  return seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(rank) + 1;
}

std::string emulating_note(const TrainConfig& cfg, const std::vector<Emulation>& e) {
  const std::string d = describe(e);
  if (d.empty()) return d;
  std::ostringstream s;
  s << ", emulating " << d << " (table x " << cfg.emulate_scale << ": steps of " << e[0].step_seconds << " s";
  if (d != e[0].device) s << " for the first";
  s << ")";
  return s.str();
}

nlohmann::ordered_json emulation_json(const TrainConfig& cfg, const std::vector<Emulation>& e) {
  if (e.empty() || !e[0].on()) return nullptr;
  nlohmann::ordered_json devices = nlohmann::ordered_json::array(), steps = nlohmann::ordered_json::array();
  for (const auto& x : e) {
    devices.push_back(x.device);
    steps.push_back(x.step_seconds);
  }
  return {{"table", e[0].table},
          {"scale", cfg.emulate_scale},
          {"devices", devices},
          {"step_seconds", steps}};
}

StepPacer::StepPacer(const Emulation& e, std::uint64_t seed)
    : e_(e),
      rng_(seed),
      // Log-normal with mean 1 and the given coefficient of variation.
      jitter_(-0.5 * std::log1p(e.jitter_cv * e.jitter_cv), std::sqrt(std::log1p(e.jitter_cv * e.jitter_cv))) {}

double StepPacer::draw_target() { return e_.step_seconds * (e_.jitter_cv > 0 ? jitter_(rng_) : 1.0); }

void StepPacer::begin() { t0_ = std::chrono::steady_clock::now(); }

double StepPacer::finish() {
  using Seconds = std::chrono::duration<double>;
  if (e_.on()) {
    const auto target =
        t0_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(Seconds(draw_target()));
    ++steps_;
    if (std::chrono::steady_clock::now() >= target)
      ++slower_;
    else
      std::this_thread::sleep_until(target);
  }
  return Seconds(std::chrono::steady_clock::now() - t0_).count();
}

}  // namespace mt
