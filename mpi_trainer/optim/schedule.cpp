#include "optim/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.hpp"

namespace mt {

double LrSchedule::lr_at(std::int64_t step) const {
  const double warm = warmup_steps > 0 ? std::min(1.0, double(step + 1) / double(warmup_steps)) : 1.0;
  switch (kind) {
    case Kind::kConstant: return base_lr * warm;
    case Kind::kStep: {
      double lr = base_lr * warm;
      for (auto b : boundaries)
        if (step >= b) lr *= factor;
      return lr;
    }
    case Kind::kCosine: {
      const double t = std::min(1.0, double(step) / double(std::max<std::int64_t>(decay_steps, 1)));
      return base_lr * warm * 0.5 * (1.0 + std::cos(M_PI * t));
    }
  }
  return base_lr;
}

std::string LrSchedule::describe() const {
  std::ostringstream os;
  switch (kind) {
    case Kind::kConstant: os << "constant " << base_lr; break;
    case Kind::kStep:
      os << "step " << base_lr << " x" << factor << " at";
      for (auto b : boundaries) os << ' ' << b;
      break;
    case Kind::kCosine: os << "cosine " << base_lr << ", decay over " << decay_steps; break;
  }
  if (warmup_steps > 0) os << ", warm-up " << warmup_steps;
  return os.str();
}

std::string LrSchedule::identity() const {
  if (!scaled) return describe();
  std::ostringstream os;
  if (kind == Kind::kStep)
    os << "step " << base_lr << " x" << factor << " at 0.5 0.75 of the run";
  else
    os << "cosine " << base_lr << ", decay over 1.875 x the run";
  if (warmup_steps > 0) os << ", warm-up " << warmup_steps;
  return os.str();
}

std::string LrSchedule::flag() const {
  switch (kind) {
    case Kind::kConstant: return "constant";
    case Kind::kStep: {
      std::ostringstream out;
      out << "step:";
      for (std::size_t i = 0; i < boundaries.size(); ++i) out << (i ? "," : "") << boundaries[i];
      return out.str();
    }
    case Kind::kCosine: return "cosine:" + std::to_string(decay_steps);
  }
  return "";
}

LrSchedule parse_schedule(const std::string& text, bool t2t_model, double lr, std::int64_t warmup,
                          std::int64_t train_steps) {
  LrSchedule s;
  s.warmup_steps = 0;
  // The recipe's lengths in proportion to the run's (exact at kRecipeSteps), at least 1.
  const auto scaled = [&](std::int64_t recipe) {
    return std::max<std::int64_t>(1, static_cast<std::int64_t>(
                                         std::llround(double(recipe) * double(train_steps) / double(kRecipeSteps))));
  };
  s.boundaries = {scaled(32000), scaled(48000)};
  s.decay_steps = scaled(120000);
  std::string kind = text, args;
  if (auto colon = text.find(':'); colon != std::string::npos) {
    kind = text.substr(0, colon);
    args = text.substr(colon + 1);
  }
  if (kind == "default") kind = t2t_model ? "cosine" : "step";
  if (kind == "constant") {
    s.kind = LrSchedule::Kind::kConstant;
  } else if (kind == "step") {
    s.kind = LrSchedule::Kind::kStep;
    s.scaled = args.empty();
    if (!args.empty()) {
      s.boundaries.clear();
      std::stringstream ss(args);
      std::string item;
      while (std::getline(ss, item, ',')) {
        try {
          std::size_t used = 0;
          const long long v = std::stoll(item, &used);
          if (used != item.size() || v < 0) throw std::invalid_argument(item);
          s.boundaries.push_back(v);
        } catch (const std::exception&) {
          throw UsageError("--lr-schedule: bad step boundary '" + item + "' in '" + text + "'");
        }
      }
    }
  } else if (kind == "cosine") {
    s.kind = LrSchedule::Kind::kCosine;
    s.base_lr = 0.4;
    s.warmup_steps = 100;
    s.scaled = args.empty();
    if (!args.empty()) {
      try {
        std::size_t used = 0;
        s.decay_steps = std::stoll(args, &used);
        if (used != args.size() || s.decay_steps <= 0) throw std::invalid_argument(args);
      } catch (const std::exception&) {
        throw UsageError("--lr-schedule: bad cosine decay steps '" + args + "'");
      }
    }
  } else {
    throw UsageError("--lr-schedule: unknown schedule '" + text +
                     "'; choose default, step[:B1,B2,...], cosine[:DECAY_STEPS] or constant");
  }
  if (lr > 0) s.base_lr = lr;
  if (warmup >= 0) s.warmup_steps = warmup;
  return s;
}

std::vector<std::string> schedule_warnings(const std::string& text, const LrSchedule& s, std::int64_t train_steps,
                                           bool warmup_given) {
  std::vector<std::string> out;
  const std::string run = " (--train-steps " + std::to_string(train_steps) + ")";
  if (s.kind == LrSchedule::Kind::kStep && text.find(':') != std::string::npos)  // boundaries given
    for (const auto b : s.boundaries)
      if (b >= train_steps)
        out.push_back("warning: --lr-schedule's step boundary " + std::to_string(b) + " is at or after the run's end" +
                      run + ": the rate never drops there");
  if (s.warmup_steps >= train_steps && train_steps > 1)
    out.push_back("warning: the warm-up of " + std::to_string(s.warmup_steps) + " steps (" +
                  (warmup_given ? "--lr-warmup-steps" : "the schedule's own; --lr-warmup-steps sets it") +
                  ") lasts the whole run" + run + ": the rate never reaches its base, " +
                  std::to_string(s.base_lr).substr(0, 6));
  return out;
}

}  // namespace mt
