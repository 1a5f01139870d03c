#include "optim/optimizer.hpp"

#include <cmath>
#include <sstream>

#include "core/error.hpp"

namespace mt {

Sgd::Sgd(const ParamLayout& layout, SgdConfig config, Backend& memory)
    : Sgd(layout, config, FlatTensors(layout, memory.make_tensor(Dims{layout.total()}, Layout::kPlain))) {}

Sgd::Sgd(const ParamLayout& layout, SgdConfig config) : Sgd(layout, config, FlatTensors(layout)) {}

Sgd::Sgd(const ParamLayout& layout, SgdConfig config, FlatTensors velocity)
    : config_(config), velocity_(std::move(velocity)) {
  // Alignment gaps hold zeros everywhere, so they may join either neighbouring run.
  for (const auto& e : layout.entries()) {
    if (!runs_.empty() && runs_.back().decay == e.decay) {
      runs_.back().end = e.offset + e.size;
    } else {
      const std::int64_t begin = runs_.empty() ? 0 : runs_.back().end;
      runs_.push_back({begin, e.offset + e.size, e.decay});
    }
  }
}

void Sgd::step(Backend& backend, FlatTensors& params, const FlatTensors& grads, float lr) {
  step(backend, params, grads, lr, config_.momentum);
}

void Sgd::step(Backend& backend, FlatTensors& params, const FlatTensors& grads, float lr, float momentum) {
  auto p = params.span();
  auto g = grads.span();
  auto v = velocity_.span();
  for (const auto& r : runs_) {
    const auto b = static_cast<std::size_t>(r.begin), n = static_cast<std::size_t>(r.end - r.begin);
    SgdSpec spec{lr, momentum, r.decay ? config_.weight_decay : 0.f, config_.nesterov};
    backend.sgd_update(p.subspan(b, n), g.subspan(b, n), v.subspan(b, n), spec);
  }
}

void check_divergence(double loss, double max_loss, std::int64_t global_step) {
  const bool finite = std::isfinite(loss);
  if (finite && (max_loss <= 0 || loss <= max_loss)) return;
  std::ostringstream why;
  why << "training diverged at global step " << global_step << ": loss " << loss;
  if (finite)
    why << " is above --max-loss " << max_loss;
  else
    why << " is not finite";
  why << "; nothing of this state was checkpointed (the newest checkpoint holds the last good one): lower --lr "
         "(or raise --max-loss), then rerun";
  throw DataError(why.str());
}

}  // namespace mt
