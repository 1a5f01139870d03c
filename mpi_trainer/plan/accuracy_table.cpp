#include "plan/accuracy_table.hpp"

#include <cmath>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "plan/table_file.hpp"
#include "plan/tables_builtin.hpp"

namespace mt {

namespace {

constexpr const char* kSource = "plan/accuracy_measured.csv";

double signed_number(const std::string& text, const std::string& where) {
  try {
    std::size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  throw DataError(where + "'" + text + "' is not a number");
}

std::string list(const std::set<double>& values) {
  std::ostringstream s;
  for (auto it = values.begin(); it != values.end(); ++it)
    s << (it == values.begin() ? "" : ", ") << *it;
  return s.str();
}

}  // namespace

std::vector<MeasuredAccuracy> measured_accuracy() {
  std::istringstream in(kAccuracyMeasured);
  std::vector<MeasuredAccuracy> out;
  for (const TableRow& row : read_table(in, "model")) {
    const std::string where = std::string(kSource) + " line " + std::to_string(row.line) + ": ";
    if (row.fields.size() != 8)
      throw DataError(where + "expected MODEL,DATA,EPOCHS,WORKERS,DELTA,SD,SEEDS,ONE_WORKER, got '" + row.text + "'");
    MeasuredAccuracy m;
    m.model = row.fields[0];
    m.data = row.fields[1];
    m.epochs = table_number(row.fields[2], where, "a number of epochs");
    m.workers = static_cast<int>(table_number(row.fields[3], where, "a worker count"));
    m.delta_points = signed_number(row.fields[4], where);
    m.sd_points = table_number(row.fields[5], where, "a spread in points");
    m.seeds = static_cast<int>(table_number(row.fields[6], where, "a number of seeds"));
    m.one_worker_percent = table_number(row.fields[7], where, "an accuracy in percent");
    out.push_back(m);
  }
  return out;
}

std::optional<MeasuredAccuracy> accuracy_for(const std::string& model, double epochs, int workers) {
  for (const auto& m : measured_accuracy())
    if (m.model == model && m.workers == workers && std::abs(epochs - m.epochs) <= 0.05 * m.epochs) return m;
  return std::nullopt;
}

std::optional<EpochsToTarget> epochs_to_reach(const std::string& model, int workers, double target_percent) {
  std::optional<EpochsToTarget> best;
  for (const auto& m : measured_accuracy()) {
    if (m.model != model || (workers != 1 && m.workers != workers)) continue;
    const double predicted = m.one_worker_percent + (workers == 1 ? 0 : m.delta_points);
    if (predicted >= target_percent && (!best || m.epochs < best->epochs))
      best = EpochsToTarget{m.epochs, predicted, m.data};
  }
  return best;
}

std::string target_unreached_line(const std::string& model, double target_percent) {
  std::map<std::string, const MeasuredAccuracy*> best;  // by model and data: the highest one-worker accuracy
  const std::vector<MeasuredAccuracy> all = measured_accuracy();
  for (const auto& m : all) {
    auto& b = best[m.model + " on " + m.data];
    if (!b || m.one_worker_percent > b->one_worker_percent) b = &m;
  }
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << "  no measured schedule of " << model << " is predicted to reach "
    << target_percent << "%; measured: ";
  for (auto it = best.begin(); it != best.end(); ++it)
    s << (it == best.begin() ? "" : "; ") << it->first << ", " << std::setprecision(2) << it->second->one_worker_percent
      << "% at most (one worker, " << std::setprecision(0) << it->second->epochs << " epochs)";
  s << " (bench/README.md, \"Speed-up\"); train --virtual-workers measures yours\n";
  return s.str();
}

std::string accuracy_line(const std::string& model, double epochs, int workers) {
  std::ostringstream s;
  s << std::fixed;
  if (workers == 1) {
    s << "  accuracy: one worker, the reference the measured costs of asynchrony are taken against\n";
    return s.str();
  }
  if (const auto m = accuracy_for(model, epochs, workers)) {
    s << "  accuracy: " << std::showpos << std::setprecision(2) << m->delta_points << std::noshowpos
      << " points against one worker (sd " << m->sd_points << ", " << m->seeds << " seeds; one worker "
      << m->one_worker_percent << "%), measured for " << m->model << " on " << m->data << ", " << std::setprecision(0)
      << m->epochs << " epochs, " << m->workers
      << " workers, the default policy (evidence E; bench/README.md, \"Speed-up\")\n";
    return s.str();
  }
  std::set<double> all_epochs, all_workers;
  std::set<std::string> models;
  for (const auto& m : measured_accuracy()) {
    all_epochs.insert(m.epochs);
    all_workers.insert(m.workers);
    models.insert(m.model + " on " + m.data);
  }
  s << std::setprecision(1) << "  accuracy: not measured for " << model << " over " << epochs << " epochs with "
    << workers << " workers; measured: ";
  for (auto it = models.begin(); it != models.end(); ++it)
    s << (it == models.begin() ? "" : "; ") << *it;
  s << ", " << list(all_epochs) << " epochs, " << list(all_workers)
    << " workers (bench/README.md, \"Speed-up\"); train --virtual-workers measures yours\n";
  return s.str();
}

}  // namespace mt
