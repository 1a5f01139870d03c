#include "backend/reference/reference.hpp"

namespace mt {

namespace {

class RefConv final : public ConvOp {
 public:
  explicit RefConv(const ConvSpec& s) : s_(s) {}
  void forward(const Tensor& x, const Tensor& w, Tensor& y) override { ref::conv2d_forward(s_, x, w, y); }
  void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) override {
    ref::conv2d_backward_data(s_, dy, w, dx);
  }
  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw) override {
    ref::conv2d_backward_weights(s_, x, dy, dw);
  }

 private:
  ConvSpec s_;
};

class RefBatchNorm final : public BatchNormOp {
 public:
  RefBatchNorm(float eps, bool relu) : eps_(eps), relu_(relu) {}
  void forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                        Tensor& mean, Tensor& var) override {
    ref::batchnorm_forward_training(x, gamma, beta, eps_, relu_, y, mean, var);
  }
  void forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                         const Tensor& mean, const Tensor& var, Tensor& y) override {
    ref::batchnorm_forward_inference(x, gamma, beta, mean, var, eps_, relu_, y);
  }
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& gamma,
                const Tensor& mean, const Tensor& var, Tensor& dx, Tensor& dgamma,
                Tensor& dbeta) override {
    ref::batchnorm_backward(x, y, dy, gamma, mean, var, eps_, relu_, dx, dgamma, dbeta);
  }

 private:
  float eps_;
  bool relu_;
};

class RefBackend final : public Backend {
 public:
  std::string name() const override { return "reference"; }
  Layout activation_layout() const override { return Layout::kPlain; }
  std::unique_ptr<ConvOp> make_conv(const ConvSpec& spec, const Dims&, Layout, Layout) override {
    return std::make_unique<RefConv>(spec);
  }
  std::unique_ptr<BatchNormOp> make_batchnorm(const Dims&, Layout, float eps, bool relu) override {
    return std::make_unique<RefBatchNorm>(eps, relu);
  }
  void relu_forward(const Tensor& x, Tensor& y) override { ref::relu_forward(x, y); }
  void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) override { ref::relu_backward(y, dy, dx); }
  void add(const Tensor& a, const Tensor& b, Tensor& y) override { ref::add(a, b, y); }
  void add_relu(const Tensor& a, const Tensor& b, Tensor& y) override { ref::add_relu(a, b, y); }
  void pad_shortcut_forward(const Tensor& x, int stride, Tensor& y) override {
    ref::pad_shortcut_forward(x, stride, y);
  }
  void pad_shortcut_backward(const Tensor& dy, int stride, Tensor& dx) override {
    ref::pad_shortcut_backward(dy, stride, dx);
  }
  void pad_shortcut_backward_accumulate(const Tensor& dy, int stride, Tensor& dx) override {
    Tensor tmp(dx.dims());
    ref::pad_shortcut_backward(dy, stride, tmp);
    ref::add(dx, tmp, dx);
  }
  void global_avg_pool_forward(const Tensor& x, Tensor& y) override { ref::global_avg_pool_forward(x, y); }
  void global_avg_pool_backward(const Tensor& dy, Tensor& dx) override { ref::global_avg_pool_backward(dy, dx); }
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    ref::linear_forward(x, w, b, y);
  }
  void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                       Tensor& db) override {
    ref::linear_backward(x, w, dy, dx, dw, db);
  }
  float softmax_cross_entropy(const Tensor& logits, std::span<const std::int32_t> labels,
                              Tensor& dlogits, int& correct) override {
    return ref::softmax_cross_entropy(logits, labels, dlogits, correct);
  }
  void sgd_update(std::span<float> param, std::span<const float> grad, std::span<float> velocity,
                  const SgdSpec& spec) override {
    ref::sgd_update(param, grad, velocity, spec);
  }
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<RefBackend>(); }

}  // namespace mt
