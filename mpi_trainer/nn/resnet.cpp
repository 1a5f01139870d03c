#include "nn/resnet.hpp"

#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <optional>

#include "core/error.hpp"

namespace mt {

// ---------------------------------------------------------------- model definition

std::string model_choices() {
  return "resnet32 (default, 464,154 parameters), resnet32-t2t (1,857,722 parameters), or any "
         "resnetN / resnetN-t2t with N = 6n+2 (resnet8, resnet20, resnet44, resnet56, resnet110)";
}

ModelSpec parse_model(const std::string& name) {
  // resnet<digits>[-t2t]
  const std::string prefix = "resnet", suffix = "-t2t";
  const bool t2t = name.size() > suffix.size() && name.ends_with(suffix);
  const std::string digits = name.substr(
      std::min(prefix.size(), name.size()),
      name.size() - std::min(prefix.size(), name.size()) - (t2t ? suffix.size() : 0));
  if (!name.starts_with(prefix) || digits.empty() || digits.size() > 4 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    throw UsageError("unknown model '" + name + "'; choose " + model_choices());
  const int depth = std::stoi(digits);
  if (depth < 8 || depth > 1202 || (depth - 2) % 6 != 0)
    throw UsageError("model '" + name + "': depth must be 6n+2 between 8 and 1202; choose " +
                     model_choices());
  ModelSpec s;
  s.name = name;
  s.blocks_per_stage = (depth - 2) / 6;
  if (t2t) {
    s.kind = BlockKind::kPreActivation;
    s.stem_kernel = 7;
    s.widths = {32, 64, 128};
  }
  return s;
}

ConvDef Model::add_conv(const std::string& name, int in, int out, int k, int stride) {
  ConvDef c;
  c.spec = ConvSpec{in, out, k, stride, k / 2};
  c.weight = params_.add(name + ".weight", Dims{out, in, k, k});
  return c;
}

BnDef Model::add_bn(const std::string& name, int channels, bool relu) {
  // T2T decays every non-bias variable; beta is a bias. The He recipe decays everything.
  const bool decay_beta = spec_.kind == BlockKind::kPostActivation;
  BnDef b;
  b.channels = channels;
  b.relu = relu;
  b.gamma = params_.add(name + ".gamma", Dims{channels});
  b.beta = params_.add(name + ".beta", Dims{channels}, decay_beta);
  b.stats = stats_.add(name + ".running_mean", Dims{channels}, false);
  stats_.add(name + ".running_var", Dims{channels}, false);
  return b;
}

Model::Model(ModelSpec spec) : spec_(std::move(spec)) {
  const bool pre = spec_.kind == BlockKind::kPreActivation;
  stem_conv_ = add_conv("stem.conv", 3, spec_.stem_width, spec_.stem_kernel, 1);
  stem_bn_ = add_bn("stem.bn", spec_.stem_width, true);
  int in = spec_.stem_width;
  for (std::size_t s = 0; s < spec_.widths.size(); ++s) {
    for (int b = 0; b < spec_.blocks_per_stage; ++b) {
      const std::string p = "stage" + std::to_string(s + 1) + ".block" + std::to_string(b + 1);
      BlockDef d;
      d.in_channels = in;
      d.out_channels = spec_.widths[s];
      d.stride = b == 0 ? spec_.strides[s] : 1;
      if (pre) d.bn_in = add_bn(p + ".bn_in", in, true);
      d.conv1 = add_conv(p + ".conv1", in, d.out_channels, 3, d.stride);
      d.bn1 = add_bn(p + ".bn1", d.out_channels, true);
      d.conv2 = add_conv(p + ".conv2", d.out_channels, d.out_channels, 3, 1);
      if (!pre) d.bn2 = add_bn(p + ".bn2", d.out_channels, false);
      if (pre && b == 0) {
        d.has_projection = true;
        d.proj = add_conv(p + ".shortcut.conv", in, d.out_channels, 1, d.stride);
        d.proj_bn = add_bn(p + ".shortcut.bn", d.out_channels, false);
      }
      blocks_.push_back(d);
      in = d.out_channels;
    }
  }
  fc_weight_ = params_.add("fc.weight", Dims{spec_.classes, in});
  fc_bias_ = params_.add("fc.bias", Dims{spec_.classes}, !pre);
}

std::int64_t Model::param_count() const {
  std::int64_t n = 0;
  for (const auto& e : params_.entries()) n += e.size;
  return n;
}

std::vector<const BnDef*> Model::batchnorms() const {
  std::vector<const BnDef*> out{&stem_bn_};
  for (const auto& b : blocks_) {
    if (b.bn_in.channels) out.push_back(&b.bn_in);
    out.push_back(&b.bn1);
    if (b.bn2.channels) out.push_back(&b.bn2);
    if (b.has_projection) out.push_back(&b.proj_bn);
  }
  return out;
}

std::vector<std::int64_t> Model::bn_counts(int batch) const {
  std::int64_t hw = 32;  // every model here keeps the 32x32 input size through the stem
  std::vector<std::int64_t> out{batch * hw * hw};
  for (const auto& b : blocks_) {
    const std::int64_t in = batch * hw * hw;
    hw /= b.stride;
    const std::int64_t mid = batch * hw * hw;
    if (b.bn_in.channels) out.push_back(in);
    out.push_back(mid);
    if (b.bn2.channels) out.push_back(mid);
    if (b.has_projection) out.push_back(mid);
  }
  return out;
}

void Model::init_params(FlatTensors& params, FlatTensors& stats, std::uint64_t seed) const {
  Rng rng(seed);
  params.flat().zero();
  for (const auto& e : params_.entries()) {
    Tensor t = params.view(params_.find(e.name));
    const bool is_conv = e.dims.size() == 4;
    const bool is_fc = e.name.rfind("fc.", 0) == 0;
    const bool is_gamma = e.name.size() > 6 && e.name.ends_with(".gamma");
    if (is_conv) {
      const double fan_in = double(e.dims[1] * e.dims[2] * e.dims[3]);
      const double stddev = std::sqrt(2.0 / fan_in);
      for (auto& v : t.span()) v = static_cast<float>(rng.normal() * stddev);
    } else if (is_fc) {
      const double bound = 1.0 / std::sqrt(double(params_.at(fc_weight_).dims[1]));
      for (auto& v : t.span()) v = static_cast<float>((2.0 * rng.uniform() - 1.0) * bound);
    } else if (is_gamma) {
      t.fill(1.0f);
    }
  }
  stats.flat().zero();
  for (const BnDef* b : batchnorms()) stats.view(b->stats + 1).fill(1.0f);
}

void Model::update_running_stats(FlatTensors& running, const FlatTensors& batch,
                                 std::span<const std::int64_t> counts) const {
  const auto bns = batchnorms();
  MT_ASSERT(counts.size() == bns.size(), "one count per batch norm");
  const float m = spec_.bn_momentum;
  for (std::size_t i = 0; i < bns.size(); ++i) {
    const int idx = bns[i]->stats;
    const double unbias = counts[i] > 1 ? double(counts[i]) / double(counts[i] - 1) : 1.0;
    Tensor rm = running.view(idx), rv = running.view(idx + 1);
    Tensor bm = batch.view(idx), bv = batch.view(idx + 1);
    for (std::int64_t c = 0; c < rm.numel(); ++c) {
      rm.data()[c] = (1 - m) * rm.data()[c] + m * bm.data()[c];
      rv.data()[c] = static_cast<float>((1 - m) * rv.data()[c] + m * bv.data()[c] * unbias);
    }
  }
}

// ---------------------------------------------------------------- execution

namespace {

// Gradient views are temporaries; they live until the end of the call they are passed to.
Tensor& out_view(Tensor&& t) { return t; }

// One convolution bound to shapes; its weight and weight-gradient are views of the flat buffers.
struct ConvRun {
  const ConvDef* def = nullptr;
  std::unique_ptr<ConvOp> op;
};

struct BnRun {
  const BnDef* def = nullptr;
  std::unique_ptr<BatchNormOp> op;
};

}  // namespace

struct Network::Impl {
  const Model& model;
  Backend& be;
  int batch;
  Layout act;
  bool pre;
  // A device backend: activations live in its memory, and parameters, images and results are
  // staged through these mirrors (unless the caller passes device tensors already).
  bool dev;
  std::optional<FlatTensors> dparams, dgrads, dstats;
  Tensor dimages, logits_host;
  // Training batches staged ahead (stage_images): two device buffers, so one can be filled while
  // a step reads the other. `waiting`: staged and not yet consumed; `running`: the slot the
  // step in progress reads (-1 between steps).
  struct ImageSlot {
    Tensor images;
    std::uint64_t generation = 0;
    bool waiting = false;
  };
  std::array<ImageSlot, 2> slots;
  int running = -1;

  Tensor mk(const Dims& d, Layout l) { return be.make_tensor(d, l); }

  // Forward buffers, kept for the backward pass.
  struct BlockRun {
    const BlockDef* def;
    Dims in_dims, out_dims;
    ConvRun conv1, conv2, proj;
    BnRun bn_in, bn1, bn2, proj_bn;
    Tensor p;       // pre-activation: BN-ReLU of the input
    Tensor c1, a1;  // conv1 output, BN-ReLU of it
    Tensor c2;      // conv2 output
    Tensor s, sbn;  // projection output and its BN (pre-activation first block)
    Tensor sc;      // option-A shortcut of the input (post-activation, stride 2)
    Tensor out;
  };
  ConvRun stem_conv;
  BnRun stem_bn;
  Tensor stem_c, stem_out;
  std::vector<BlockRun> blocks;
  Tensor pooled;  // (B, C)
  Tensor logits, dlogits, dpooled;
  std::vector<std::int64_t> counts;  // per BN in model.batchnorms() order

  // Backward temporaries, shared by all blocks of one shape.
  std::map<std::pair<Dims, int>, Tensor> temps;
  Tensor& temp(const Dims& d, int slot) {
    auto it = temps.find({d, slot});
    if (it == temps.end()) it = temps.emplace(std::make_pair(d, slot), mk(d, act)).first;
    return it->second;
  }

  // Views of parameter tensors are made once per call: cheap (a shared_ptr copy).
  Impl(const Model& m, Backend& b, int n)
      : model(m), be(b), batch(n), act(b.activation_layout()), dev(b.device_resident()) {
    pre = m.spec().kind == BlockKind::kPreActivation;
    if (dev) {
      dparams.emplace(m.params(), mk(Dims{m.params().total()}, Layout::kPlain));
      dgrads.emplace(m.params(), mk(Dims{m.params().total()}, Layout::kPlain));
      dstats.emplace(m.stats(), mk(Dims{m.stats().total()}, Layout::kPlain));
      dimages = mk(Dims{n, 3, 32, 32}, Layout::kPlain);
      for (auto& sl : slots) sl.images = mk(Dims{n, 3, 32, 32}, Layout::kPlain);
      record = b.can_record();
      if (record) {
        dlabels = mk(Dims{n}, Layout::kPlain);
        dresult = mk(Dims{2}, Layout::kPlain);
      }
      logits_host = Tensor(Dims{n, m.spec().classes});
    }
    counts = m.bn_counts(n);
    const auto bn_of = [&](const BnDef& d, const Dims& dims) {
      return BnRun{&d, be.make_batchnorm(dims, act, m.spec().bn_eps, d.relu)};
    };
    Dims dims{n, 3, 32, 32};
    stem_conv = {&m.stem_conv(), be.make_conv(m.stem_conv().spec, dims, Layout::kPlain, act)};
    dims = {n, m.spec().stem_width, 32, 32};
    stem_bn = bn_of(m.stem_bn(), dims);
    stem_c = mk(dims, act);
    stem_out = mk(dims, act);
    blocks.reserve(m.blocks().size());
    for (const auto& d : m.blocks()) {
      BlockRun r{};
      r.def = &d;
      r.in_dims = dims;
      const std::int64_t hw = dims[2] / d.stride;
      r.out_dims = {n, d.out_channels, hw, hw};
      if (pre) {
        r.bn_in = bn_of(d.bn_in, r.in_dims);
        r.p = mk(r.in_dims, act);
      }
      r.conv1 = {&d.conv1, be.make_conv(d.conv1.spec, r.in_dims, act, act)};
      r.bn1 = bn_of(d.bn1, r.out_dims);
      r.conv2 = {&d.conv2, be.make_conv(d.conv2.spec, r.out_dims, act, act)};
      if (!pre) r.bn2 = bn_of(d.bn2, r.out_dims);
      if (d.has_projection) {
        r.proj = {&d.proj, be.make_conv(d.proj.spec, r.in_dims, act, act)};
        r.proj_bn = bn_of(d.proj_bn, r.out_dims);
        r.s = mk(r.out_dims, act);
        r.sbn = mk(r.out_dims, act);
      }
      r.c1 = mk(r.out_dims, act);
      r.a1 = mk(r.out_dims, act);
      r.c2 = mk(r.out_dims, act);
      r.out = mk(r.out_dims, act);
      if (!pre && r.in_dims != r.out_dims) r.sc = mk(r.out_dims, act);
      blocks.push_back(std::move(r));
      dims = blocks.back().out_dims;
    }
    const int classes = m.spec().classes;
    pooled = mk(Dims{n, dims[1]}, Layout::kPlain);
    dpooled = mk(Dims{n, dims[1]}, Layout::kPlain);
    logits = mk(Dims{n, classes}, Layout::kPlain);
    dlogits = mk(Dims{n, classes}, Layout::kPlain);
  }

  // BN in training or inference mode. `stats` holds batch statistics (training, written) or
  // running statistics (inference, read).
  void bn_forward(BnRun& r, const Tensor& x, Tensor& y, const FlatTensors& params,
                  const FlatTensors& stats, bool training) {
    Tensor g = params.view(r.def->gamma), b = params.view(r.def->beta);
    Tensor mean = stats.view(r.def->stats), var = stats.view(r.def->stats + 1);
    if (training)
      r.op->forward_training(x, g, b, y, mean, var);
    else
      r.op->forward_inference(x, g, b, mean, var, y);
  }
  void bn_backward(BnRun& r, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                   const FlatTensors& params, const FlatTensors& stats, FlatTensors& grads) {
    Tensor g = params.view(r.def->gamma);
    Tensor mean = stats.view(r.def->stats), var = stats.view(r.def->stats + 1);
    Tensor dg = grads.view(r.def->gamma), db = grads.view(r.def->beta);
    r.op->backward(x, y, dy, g, mean, var, dx, dg, db);
  }

  void forward(const Tensor& images, const FlatTensors& params, const FlatTensors& stats,
               bool training) {
    stem_conv.op->forward(images, params.view(stem_conv.def->weight), stem_c);
    bn_forward(stem_bn, stem_c, stem_out, params, stats, training);
    const Tensor* x = &stem_out;
    for (auto& r : blocks) {
      const BlockDef& d = *r.def;
      if (pre) {
        bn_forward(r.bn_in, *x, r.p, params, stats, training);
        r.conv1.op->forward(r.p, params.view(d.conv1.weight), r.c1);
        bn_forward(r.bn1, r.c1, r.a1, params, stats, training);
        r.conv2.op->forward(r.a1, params.view(d.conv2.weight), r.c2);
        if (d.has_projection) {
          r.proj.op->forward(r.p, params.view(d.proj.weight), r.s);
          bn_forward(r.proj_bn, r.s, r.sbn, params, stats, training);
          be.add(r.c2, r.sbn, r.out);
        } else {
          be.add(r.c2, *x, r.out);
        }
      } else {
        r.conv1.op->forward(*x, params.view(d.conv1.weight), r.c1);
        bn_forward(r.bn1, r.c1, r.a1, params, stats, training);
        r.conv2.op->forward(r.a1, params.view(d.conv2.weight), r.c2);
        bn_forward(r.bn2, r.c2, r.out, params, stats, training);
        if (r.sc.empty()) {
          be.add_relu(r.out, *x, r.out);
        } else {
          be.pad_shortcut_forward(*x, d.stride, r.sc);
          be.add_relu(r.out, r.sc, r.out);
        }
      }
      x = &r.out;
    }
    be.global_avg_pool_forward(*x, pooled);
    be.linear_forward(pooled, params.view(model.fc_weight()), params.view(model.fc_bias()), logits);
  }

  void backward(const FlatTensors& params, const FlatTensors& stats, FlatTensors& grads) {
    be.linear_backward(pooled, params.view(model.fc_weight()), dlogits, dpooled,
                       out_view(grads.view(model.fc_weight())), out_view(grads.view(model.fc_bias())));
    // dout of the current block; each block writes its input gradient to the other slot.
    int parity = 0;
    Tensor* dout = &temp(blocks.back().out_dims, 10 + parity);
    be.global_avg_pool_backward(dpooled, *dout);
    for (std::size_t i = blocks.size(); i-- > 0;) {
      BlockRun& r = blocks[i];
      const BlockDef& d = *r.def;
      const Tensor& x = i == 0 ? stem_out : blocks[i - 1].out;
      Tensor& dx = temp(r.in_dims, 10 + (1 - parity));
      Tensor& dc1 = temp(r.out_dims, 1);
      Tensor& da1 = temp(r.out_dims, 2);
      if (pre) {
        // out = c2 + shortcut: dout flows unchanged into conv2 and the shortcut.
        Tensor& dp = temp(r.in_dims, 3);
        r.conv2.op->backward_data(*dout, params.view(d.conv2.weight), da1);
        r.conv2.op->backward_weights(r.a1, *dout, out_view(grads.view(d.conv2.weight)));
        bn_backward(r.bn1, r.c1, r.a1, da1, dc1, params, stats, grads);
        r.conv1.op->backward_data(dc1, params.view(d.conv1.weight), dp);
        r.conv1.op->backward_weights(r.p, dc1, out_view(grads.view(d.conv1.weight)));
        if (d.has_projection) {
          Tensor& ds = temp(r.out_dims, 4);
          Tensor& dp2 = temp(r.in_dims, 5);
          bn_backward(r.proj_bn, r.s, r.sbn, *dout, ds, params, stats, grads);
          r.proj.op->backward_data(ds, params.view(d.proj.weight), dp2);
          r.proj.op->backward_weights(r.p, ds, out_view(grads.view(d.proj.weight)));
          be.add(dp, dp2, dp);
        }
        bn_backward(r.bn_in, x, r.p, dp, dx, params, stats, grads);
        if (!d.has_projection) be.add(dx, *dout, dx);
      } else {
        Tensor& dsum = temp(r.out_dims, 3);
        Tensor& dc2 = temp(r.out_dims, 4);
        be.relu_backward(r.out, *dout, dsum);
        bn_backward(r.bn2, r.c2, r.out, dsum, dc2, params, stats, grads);
        r.conv2.op->backward_data(dc2, params.view(d.conv2.weight), da1);
        r.conv2.op->backward_weights(r.a1, dc2, out_view(grads.view(d.conv2.weight)));
        bn_backward(r.bn1, r.c1, r.a1, da1, dc1, params, stats, grads);
        r.conv1.op->backward_data(dc1, params.view(d.conv1.weight), dx);
        r.conv1.op->backward_weights(x, dc1, out_view(grads.view(d.conv1.weight)));
        if (r.sc.empty())
          be.add(dx, dsum, dx);
        else
          be.pad_shortcut_backward_accumulate(dsum, d.stride, dx);
      }
      dout = &dx;
      parity = 1 - parity;
    }
    Tensor& dc = temp(stem_c.dims(), 1);
    bn_backward(stem_bn, stem_c, stem_out, *dout, dc, params, stats, grads);
    stem_conv.op->backward_weights(*last_images_, dc,
                                   out_view(grads.view(stem_conv.def->weight)));
  }

  const Tensor* last_images_ = nullptr;

  // Recorded training steps (Backend::can_record: CUDA Graphs). The loss then reads labels from
  // device memory and writes its result there, so the recorded work touches no host memory.
  // One recording per set of buffers a step uses (in practice one per image slot): the first
  // step of a set runs as is (it makes the backward temporaries) and leaves an empty entry, the
  // second records into it, the others replay.
  bool record = false;
  Tensor dlabels, dresult;
  std::array<float, 2> result_host{};
  static constexpr std::size_t kMaxRecordings = 8;  // more sets of buffers run as is
  std::map<std::array<const float*, 4>, std::unique_ptr<Backend::Recording>> recorded;

  void recorded_step(const Tensor& x, const FlatTensors& p, FlatTensors& bs, FlatTensors& g,
                     std::span<const std::int32_t> labels) {
    check_labels(labels, model.spec().classes);
    // The labels' int32 bit patterns travel in a float tensor (the copy moves bytes).
    be.upload(std::span<const float>(reinterpret_cast<const float*>(labels.data()), labels.size()), dlabels);
    const std::array<const float*, 4> key{x.data(), p.flat().data(), bs.flat().data(), g.flat().data()};
    auto it = recorded.find(key);
    if (it != recorded.end() && it->second) return it->second->replay();  // every step but two
    // Views sharing the storage: a CUDA graph keeps their addresses, a recording that replays
    // the closure itself keeps them alive.
    const auto share = [](const FlatTensors& f) {
      return std::make_shared<FlatTensors>(f.layout(), f.flat().view(0, f.flat().dims()));
    };
    auto xs = std::make_shared<Tensor>(x.view(0, x.dims(), x.layout()));
    std::function<void()> work = [this, xs, ps = share(p), bss = share(bs), gs = share(g)] {
      last_images_ = xs.get();
      forward(*xs, *ps, *bss, /*training=*/true);
      be.softmax_cross_entropy_to(logits, dlabels, dlogits, dresult);
      backward(*ps, *bss, *gs);
      last_images_ = nullptr;
    };
    if (it == recorded.end()) {
      if (recorded.size() < kMaxRecordings) recorded.emplace(key, nullptr);
      return work();
    }
    it->second = be.record(work);
    it->second->replay();
  }

  // The tensor the ops read: `host` itself, or (device backend, host tensor) its mirror with
  // the values uploaded.
  const FlatTensors& staged(const FlatTensors& host, std::optional<FlatTensors>& mirror) {
    if (!dev || host.flat().on_device()) return host;
    be.upload(host.span(), mirror->flat());
    return *mirror;
  }
  const Tensor& staged_images(const Tensor& images) {
    if (!dev || images.on_device()) return images;
    be.upload(images.span(), dimages);
    return dimages;
  }
  // The tensor the ops write: `host` itself, or its mirror (downloaded by fetch()).
  FlatTensors& target(FlatTensors& host, std::optional<FlatTensors>& mirror) {
    return !dev || host.flat().on_device() ? host : *mirror;
  }
  void fetch(const FlatTensors& written, FlatTensors& host) {
    if (&written != &host) be.download(written.flat(), host.span());
  }
};

Network::Network(const Model& model, Backend& backend, int batch)
    : impl_(std::make_unique<Impl>(model, backend, batch)), batch_(batch) {}
Network::~Network() = default;

std::span<const std::int64_t> Network::bn_counts() const { return impl_->counts; }

Network::StagedImages Network::stage_images(const Tensor& images) {
  MT_ASSERT(images.dims() == (Dims{batch_, 3, 32, 32}), "stage_images: images must be (B, 3, 32, 32)");
  Impl& m = *impl_;
  if (!m.dev || images.on_device()) return StagedImages{&images, -1, 0};
  int slot = -1;
  for (int i = 0; i < 2; ++i)
    if (i != m.running && !m.slots[static_cast<std::size_t>(i)].waiting) slot = i;
  MT_ASSERT(slot >= 0, "stage_images: a batch is already staged beside the running step");
  auto& s = m.slots[static_cast<std::size_t>(slot)];
  m.be.upload_ahead(images.span(), s.images);
  s.waiting = true;
  return StagedImages{nullptr, slot, ++s.generation};
}

StepStats Network::train_step(const StagedImages& images, std::span<const std::int32_t> labels,
                              const FlatTensors& params, FlatTensors& grads,
                              FlatTensors& batch_stats, const std::function<void()>& while_running) {
  MT_ASSERT(static_cast<int>(labels.size()) == batch_, "train_step: one label per image");
  Impl& m = *impl_;
  const Tensor* x = images.host;
  if (!x) {
    MT_ASSERT(images.slot == 0 || images.slot == 1, "train_step: images were not staged");
    auto& s = m.slots[static_cast<std::size_t>(images.slot)];
    MT_ASSERT(s.waiting && s.generation == images.generation,
              "train_step: staged images were used already or overwritten by a later stage_images");
    s.waiting = false;
    m.running = images.slot;
    m.be.upload_fence();
    x = &s.images;
  }
  // Between steps again whatever happens below (an exception leaves the slot free).
  struct Done {
    int& running;
    ~Done() { running = -1; }
  } done{m.running};
  const FlatTensors& p = m.staged(params, m.dparams);
  FlatTensors& bs = m.target(batch_stats, m.dstats);
  FlatTensors& g = m.target(grads, m.dgrads);
  StepStats st;
  if (m.record) {
    m.recorded_step(*x, p, bs, g, labels);
    m.be.download(m.dresult, m.result_host);
  } else {
    m.last_images_ = x;
    m.forward(*x, p, bs, /*training=*/true);
    m.be.softmax_cross_entropy_deferred(m.logits, labels, m.dlogits, &st.loss, &st.correct);
    m.backward(p, bs, g);
  }
  m.fetch(g, grads);
  m.fetch(bs, batch_stats);
  if (while_running) while_running();
  m.be.synchronize();
  if (m.record) {
    st.loss = m.result_host[0];
    std::memcpy(&st.correct, &m.result_host[1], sizeof st.correct);
  }
  return st;
}

StepStats Network::train_step(const Tensor& images, std::span<const std::int32_t> labels,
                              const FlatTensors& params, FlatTensors& grads,
                              FlatTensors& batch_stats) {
  return train_step(stage_images(images), labels, params, grads, batch_stats);
}

StepStats Network::evaluate(const Tensor& images, std::span<const std::int32_t> labels, int valid,
                            const FlatTensors& params, const FlatTensors& running_stats) {
  MT_ASSERT(images.dims() == (Dims{batch_, 3, 32, 32}), "evaluate: images must be (B, 3, 32, 32)");
  MT_ASSERT(valid <= batch_ && static_cast<int>(labels.size()) >= valid, "evaluate: labels");
  Impl& m = *impl_;
  m.forward(m.staged_images(images), m.staged(params, m.dparams), m.staged(running_stats, m.dstats),
            /*training=*/false);
  const Tensor* logits = &m.logits;
  if (m.dev) {
    m.be.download(m.logits, m.logits_host.span());
    logits = &m.logits_host;
  }
  m.be.synchronize();
  // Loss and accuracy over the valid rows only.
  const int classes = m.model.spec().classes;
  StepStats st;
  double loss = 0;
  for (int n = 0; n < valid; ++n) {
    const float* z = logits->data() + static_cast<std::int64_t>(n) * classes;
    int arg = 0;
    for (int m = 1; m < classes; ++m)
      if (z[m] > z[arg]) arg = m;
    double sum = 0;
    for (int m = 0; m < classes; ++m) sum += std::exp(double(z[m] - z[arg]));
    loss += std::log(sum) - double(z[labels[static_cast<std::size_t>(n)]] - z[arg]);
    st.correct += arg == labels[static_cast<std::size_t>(n)];
  }
  st.loss = static_cast<float>(loss);
  return st;
}

}  // namespace mt
