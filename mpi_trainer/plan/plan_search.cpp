// `mpi_trainer plan --deadline/--budget`: every cluster shape tried, the cheapest meeting both first.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "app/emulation.hpp"
#include "core/error.hpp"
#include "plan/accuracy_table.hpp"
#include "plan/cluster_sim.hpp"
#include "plan/cost.hpp"
#include "plan/plan.hpp"
#include "plan/plan_format.hpp"

namespace mt {

using namespace plan_format;

namespace {

// The search tries 1 and 2 shards, then 4 and 8 while the parameter servers saturate below the
// worker count.
constexpr int kMaxSearchShards = 8;

}  // namespace

std::vector<PlanShape> search_plans(const PlanConfig& c) {
  if (c.max_workers < 1) throw UsageError("--max-workers must be 1 or more");
  const PriceTable prices = PriceTable::load(c.prices);
  const DeviceTable table = c.devices.empty() ? DeviceTable::shipped() : DeviceTable::from_file(c.devices);
  std::vector<std::string> types;  // every worker type with both a step time and a price
  const std::vector<std::string> priced = prices.types();
  for (const auto& t : table.names())
    if (t != c.ps_type && std::find(priced.begin(), priced.end(), t) != priced.end()) types.push_back(t);
  if (types.empty()) throw UsageError("plan: no instance type has both a step time and a price to search");
  std::vector<int> counts;
  for (int n : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64})
    if (n <= c.max_workers) counts.push_back(n);
  if (counts.back() != c.max_workers && c.max_workers > 1) counts.push_back(c.max_workers);
  std::vector<PlanShape> out;
  for (const auto& type : types)
    for (const char* pricing : {"transient", "on-demand"})
      for (int n : counts) {
        const InstancePrice& p = prices.at(type);
        if (!std::isfinite(std::string(pricing) == "transient" ? p.transient : p.on_demand)) break;  // not offered so
        for (int ps = n == 1 ? 0 : 1;
             ps <= 2 || (ps <= kMaxSearchShards && out.back().result.ps_saturation_workers < n);
             ps = ps < 2 ? ps + 1 : ps * 2) {  // one worker: also alone; more shards while they saturate
          if (n == 1 && ps == 2) break;
          PlanShape shape;
          shape.cfg = c;
          shape.cfg.workers = n;
          shape.cfg.worker_types = type;
          shape.cfg.pricing = pricing;
          shape.cfg.num_ps = ps;
          shape.cfg.worker_links.clear();
          if (c.target_accuracy > 0) {  // the shortest measured schedule reaching it, else the steps asked
            shape.target = epochs_to_reach(c.model, ps == 0 ? 1 : n, c.target_accuracy);
            if (shape.target) shape.cfg.epochs = shape.target->epochs;
          }
          shape.result = run_plan(shape.cfg);
          const auto& r = shape.result;
          shape.meets = !r.seconds.empty() && r.unfinished == 0 &&
                        (c.deadline_seconds < 0 || percentile(r.seconds, 0.9) <= c.deadline_seconds) &&
                        (c.budget_usd < 0 || percentile(r.cost_usd, 0.9) <= c.budget_usd) &&
                        (c.target_accuracy < 0 || shape.target.has_value());
          out.push_back(std::move(shape));
        }
      }
  const bool by_time = c.target_accuracy > 0;
  std::stable_sort(out.begin(), out.end(), [by_time](const PlanShape& a, const PlanShape& b) {
    if (a.meets != b.meets) return a.meets;
    const auto median = [](const std::vector<double>& v) { return v.empty() ? kNeverSeconds : percentile(v, 0.5); };
    const auto key = [&](const PlanShape& s) {  // cheapest first, or soonest then cheapest
      const double cost = median(s.result.cost_usd);
      return by_time ? std::pair(median(s.result.seconds), cost) : std::pair(cost, 0.0);
    };
    return key(a) < key(b);
  });
  return out;
}

namespace {

std::string shape_name(const PlanConfig& c) {
  if (c.num_ps == 0) return "1 " + c.worker_types + " alone (" + c.pricing + ")";
  return std::to_string(c.workers) + " x " + c.worker_types + " (" + c.pricing + ") + " + std::to_string(c.num_ps) +
         " PS";
}

}  // namespace

int plan_search_command(const PlanConfig& c, std::ostream& out) {
  const std::vector<PlanShape> shapes = search_plans(c);
  const auto meeting = std::count_if(shapes.begin(), shapes.end(), [](const PlanShape& s) { return s.meets; });
  if (c.json) {
    nlohmann::ordered_json all = nlohmann::ordered_json::array();
    for (const auto& s : shapes) {
      nlohmann::ordered_json j = plan_json(s.cfg, s.result);
      j["meets"] = s.meets;
      if (c.target_accuracy > 0)
        j["target"] = s.target ? nlohmann::ordered_json{{"epochs", s.target->epochs},
                                                        {"predicted_accuracy_percent", s.target->predicted_percent},
                                                        {"data", s.target->data}}
                               : nlohmann::ordered_json();
      all.push_back(std::move(j));
    }
    out << nlohmann::ordered_json{{"event", "plan_search"},
                                  {"deadline_seconds", c.deadline_seconds < 0
                                                           ? nlohmann::ordered_json()
                                                           : nlohmann::ordered_json(c.deadline_seconds)},
                                  {"budget_usd",
                                   c.budget_usd < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(c.budget_usd)},
                                  {"target_accuracy_percent", c.target_accuracy < 0
                                                                  ? nlohmann::ordered_json()
                                                                  : nlohmann::ordered_json(c.target_accuracy)},
                                  {"meeting", meeting},
                                  {"shapes", all}}
               .dump()
        << '\n';
    return 0;
  }
  const bool target = c.target_accuracy > 0;
  out << "plan search: " << c.model << ", ";
  if (target)
    out << "the shortest measured schedule predicted to reach " << std::fixed << std::setprecision(1)
        << c.target_accuracy << "% test accuracy, batch " << std::defaultfloat << c.batch_size;
  else
    out << shapes.front().result.steps << " global steps of " << c.batch_size;
  out << "; deadline " << (c.deadline_seconds < 0 ? std::string("none") : hours(c.deadline_seconds)) << ", budget "
      << (c.budget_usd < 0 ? std::string("none") : dollars(c.budget_usd))
      << " (both at the 90th percentile); parameter servers " << c.ps_type << " (" << c.ps_pricing << "); " << c.draws
      << " draws per shape; evidence S" << (target ? " and E (the accuracy)" : "") << "\n"
      << "  " << shapes.size() << " shapes tried, " << meeting << (target ? " meet all three" : " meet both")
      << (meeting ? (target ? "; the soonest:" : "; the cheapest:")
                  : (target ? ": none does; the closest, soonest first:" : ": none does; the closest, cheapest first:"))
      << '\n';
  if (target && !meeting && std::none_of(shapes.begin(), shapes.end(), [](const PlanShape& s) { return s.target; }))
    out << target_unreached_line(c.model, c.target_accuracy);
  out << "  " << std::left << std::setw(34) << "cluster" << std::right << std::setw(9) << "time" << std::setw(9)
      << "p90" << std::setw(9) << "cost" << std::setw(9) << "p90" << std::setw(11) << "restarts" << std::setw(8)
      << (target ? "epochs" : "acc.") << '\n';
  int shown = 0;
  for (const auto& s : shapes) {
    if (shown == 10 || (meeting && !s.meets)) break;
    const auto& r = s.result;
    if (r.seconds.empty()) continue;
    std::ostringstream restarts, accuracy;
    restarts << std::fixed << std::setprecision(1) << 100 * fraction_positive(r.restarts) << '%';
    const int workers = s.cfg.num_ps == 0 ? 1 : s.cfg.workers;
    if (target)
      accuracy << (s.target ? std::to_string(static_cast<int>(s.target->epochs)) : std::string("-"));
    else if (workers == 1)
      accuracy << "ref.";
    else if (const auto m = accuracy_for(c.model, plan_epochs(r.steps, c.batch_size, c.train_images), workers))
      accuracy << std::fixed << std::showpos << std::setprecision(2) << m->delta_points;
    else
      accuracy << '?';
    out << "  " << std::left << std::setw(34) << shape_name(s.cfg) << std::right << std::setw(9)
        << hours(percentile(r.seconds, 0.5)) << std::setw(9) << hours(percentile(r.seconds, 0.9)) << std::setw(9)
        << dollars(percentile(r.cost_usd, 0.5)) << std::setw(9) << dollars(percentile(r.cost_usd, 0.9)) << std::setw(11)
        << restarts.str() << std::setw(8) << accuracy.str() << '\n';
    ++shown;
  }
  if (target)
    out << "  epochs: the shortest schedule measured to reach the target with that many workers (one worker's "
           "final accuracy plus the measured cost of asynchrony; bench/README.md, \"Speed-up\"); -: none measured "
           "does\n";
  else
    out << "  acc.: final test accuracy against one worker, points, where measured for the shape (--model, "
           "--epochs, workers; bench/README.md, \"Speed-up\"); ?: not measured\n";
  return meeting ? 0 : 1;
}

}  // namespace mt
