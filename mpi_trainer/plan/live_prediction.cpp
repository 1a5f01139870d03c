// The live prediction on every progress line (plan.hpp, "Live prediction"): the expected finish
// time and total cost of a running job, integrated over its workers' revocation odds.
#include <iomanip>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "app/metrics.hpp"
#include "plan/plan.hpp"
#include "plan/revocation_model.hpp"

namespace mt {

LivePrediction predict_finish(std::int64_t steps_left, const std::vector<LiveWorker>& workers,
                              const std::map<std::string, RevocationModel>& models, double time_scale,
                              const PriceTable& prices, bool transient, double spent_usd, double ps_usd_per_second) {
  // Per worker, what does not change over the integration: its price per second, its model and
  // the chance it had to live to its age, 1 - F(age).
  struct Live {
    const LiveWorker* w;
    double usd_per_second;
    const RevocationModel* model;
    double alive_now;
  };
  const auto hours = [&](double seconds) { return seconds * time_scale / 3600.0; };
  std::vector<Live> live;
  double rate = 0, spend = ps_usd_per_second;
  for (const auto& w : workers) {
    const auto it = models.find(w.type);
    const RevocationModel* m = it == models.end() ? nullptr : &it->second;
    live.push_back(
        Live{&w, prices.cost_usd(w.type, transient, 1.0), m, m ? 1.0 - m->fraction_by(hours(w.age_seconds)) : 1.0});
    rate += w.steps_per_second;
    spend += live.back().usd_per_second;
  }
  if (steps_left <= 0) return {0, spent_usd};
  if (rate <= 0) return {};
  const double calm = double(steps_left) / rate;  // without revocations
  if (models.empty()) return {calm, spent_usd + spend * calm};
  // The chance that a worker alive at age a still runs t seconds later: (1 - F(a + t)) / (1 - F(a)).
  const auto alive = [&](const Live& l, double t) {
    if (!l.model || l.alive_now <= 0) return 1.0;
    return (1.0 - l.model->fraction_by(hours(l.w->age_seconds + t))) / l.alive_now;
  };
  const double dt = calm / 400;
  double t = 0, done = 0, cost = spent_usd;
  while (t < 100 * calm) {
    double r = 0, s = ps_usd_per_second;
    for (const auto& l : live) {
      const double a = alive(l, t + dt / 2);
      r += l.w->steps_per_second * a;
      s += l.usd_per_second * a;
    }
    if (done + r * dt >= double(steps_left)) {
      const double f = (double(steps_left) - done) / (r * dt);
      return {t + f * dt, cost + s * f * dt};
    }
    done += r * dt;
    cost += s * dt;
    t += dt;
  }
  return {};  // the expected rate fell to nothing first
}

std::string prediction_model(const std::string& revocation_model, bool transient) {
  if (!revocation_model.empty()) return revocation_model;
  return transient ? "gce" : "";
}

std::string format_prediction(const LivePrediction& p, const char* word) {
  if (p.seconds_left < 0) return std::string("  ") + word + " ? (a restart is likely)";
  std::ostringstream s;
  s << "  " << word << " ~" << format_eta(p.seconds_left) << " $" << std::fixed
    << std::setprecision(p.cost_usd < 10 ? 3 : 2) << p.cost_usd;
  return s.str();
}

nlohmann::ordered_json prediction_seconds_json(const LivePrediction& p) {
  return p.seconds_left < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(p.seconds_left);
}

nlohmann::ordered_json prediction_cost_json(const LivePrediction& p) {
  return p.cost_usd < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(p.cost_usd);
}

}  // namespace mt
