// core/nn/layers.h — the basic layers: Linear, Embedding, LayerNorm, RMSNorm, Dropout.
//
// Shape legend: B = batch, T = sequence, C = channels (d_model), V = vocabulary, I/O = in/out features.
// Invariant: parameter names and shapes are PyTorch's (Linear.weight [O, I], Linear.bias [O],
// Embedding.weight [V, C], LayerNorm.weight/bias [C], RMSNorm.weight [C]) so state dicts line up.
// Initialization draws from the Generator passed in (GPT-2 style normal(0, init_std) for weights,
// zeros for biases, ones for norm weights; or Linear's explicit distributions, which the Python face uses for
// torch's uniform(-1/sqrt(I), 1/sqrt(I))) so a run is reproducible from its seed.
//
// Example:
//   Generator gen(0);
//   nn::Linear fc(/*in=*/16, /*out=*/32, /*bias=*/true, gen);
//   Tensor y_BTO = fc(x_BTI);
//   fc.set_fused_gelu("tanh");      // from now on fc(x) = gelu(x · wᵀ + b), one fused op
#pragma once

#include <optional>
#include <string>

#include "core/nn/module.h"
#include "core/tensor/random.h"

namespace tessel::nn {

class Linear : public Module {  // not final: bindings/nn_py.cc subclasses the layers (PyLayer)
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias, Generator& gen, double init_std = 0.02,
         DType dtype = DType::kFloat32);
  // Weight drawn from weight_init, then the bias from bias_init (nullopt: zeros).
  Linear(int64_t in_features, int64_t out_features, bool bias, Generator& gen, Distribution weight_init,
         std::optional<Distribution> bias_init, DType dtype);
  TensorList Forward(const TensorList& inputs) override;  // x [..., I] → [..., O]
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  // GELU fused into this layer's forward: Forward returns gelu(x · wᵀ + b) through the op linear_gelu
  // (core/ops/linear_gelu.h: GELU in the GEMM's epilogue) instead of x · wᵀ + b. approximate "tanh" or
  // "none"; "" (the default) turns it off. Parameters, names and hooks stay as they are, so fully_shard,
  // parallelize_module (ColwiseParallel: gelu is pointwise on its Shard(-1) output) and checkpoints see
  // the same Linear; the owner (MLP) applies no GELU of its own afterwards.
  void set_fused_gelu(const std::string& approximate);
  const std::string& fused_gelu() const { return fused_gelu_; }

 private:
  int64_t in_, out_;
  std::string fused_gelu_;
};

class Embedding : public Module {
 public:
  // padding_idx (torch's): that row starts at zero and gets no gradient from the positions that look it
  // up (core/ops/embedding.h); negative counts from the end. max_norm (torch's): every forward first
  // renormalizes the rows it looks up to at most max_norm in the norm_type-norm, in place
  // (EmbeddingRenorm_); on a plain weight only (not a DTensor table).
  Embedding(int64_t num_embeddings, int64_t dim, Generator& gen, double init_std = 0.02,
            DType dtype = DType::kFloat32, std::optional<int64_t> padding_idx = std::nullopt,
            std::optional<double> max_norm = std::nullopt, double norm_type = 2.0);
  TensorList Forward(const TensorList& inputs) override;  // idx int64 [...] → [..., C]
  std::optional<int64_t> padding_idx() const { return padding_idx_; }
  std::optional<double> max_norm() const { return max_norm_; }
  double norm_type() const { return norm_type_; }
  // Assignable after construction, as torch's attributes (`emb.padding_idx = None`): the next forward uses them.
  // A new padding_idx only stops that row's gradient; its values stay (torch zeroes it at construction only).
  void set_padding_idx(std::optional<int64_t> padding_idx);
  void set_max_norm(std::optional<double> max_norm) { max_norm_ = max_norm; }
  void set_norm_type(double norm_type) { norm_type_ = norm_type; }
  // torch's scale_grad_by_freq: gradients divided by each index's count in the batch (core/ops/embedding.h).
  bool scale_grad_by_freq() const { return scale_grad_by_freq_; }
  void set_scale_grad_by_freq(bool on) { scale_grad_by_freq_ = on; }

 private:
  std::optional<int64_t> padding_idx_;  // normalized to [0, V)
  std::optional<double> max_norm_;
  double norm_type_ = 2.0;
  bool scale_grad_by_freq_ = false;
};

// LayerNorm and RMSNorm normalize over the trailing dims `normalized_shape` (torch's; one dim in the models
// here, several in some vision models: their weight and bias have that shape, and the input is viewed as
// [..., prod(normalized_shape)] for the one-dim op).
class LayerNorm : public Module {
 public:
  // `bias` false (torch's LayerNorm(bias=False)): a weight only.
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool affine = true, DType dtype = DType::kFloat32,
                     bool bias = true)
      : LayerNorm(Shape{dim}, eps, affine, dtype, bias) {}
  LayerNorm(Shape normalized_shape, double eps, bool affine, DType dtype, bool bias);
  TensorList Forward(const TensorList& inputs) override;
  const Shape& normalized_shape() const { return shape_; }
  double eps() const { return eps_; }
  void set_eps(double eps) { eps_ = eps; }  // torch's `ln.eps = 1e-12`: the next forward uses it

 private:
  Shape shape_;
  double eps_;
};

class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6, DType dtype = DType::kFloat32)
      : RMSNorm(Shape{dim}, eps, dtype, /*affine=*/true) {}
  // affine false (torch's elementwise_affine=False): no weight. No eps (torch's eps=None): the machine
  // epsilon of each call's input, float64's for float64 and float32's otherwise (after .double() too).
  RMSNorm(Shape normalized_shape, std::optional<double> eps, DType dtype, bool affine);
  TensorList Forward(const TensorList& inputs) override;
  const Shape& normalized_shape() const { return shape_; }
  std::optional<double> eps() const { return eps_; }
  void set_eps(std::optional<double> eps) { eps_ = eps; }

 private:
  Shape shape_;
  std::optional<double> eps_;
};

// torch.nn.Dropout(p) drawing from the caller's generator (core/ops/dropout.h; it must outlive the
// module): the same seed on every rank gives each DTensor shard its block of one mask, and a module
// under activation checkpointing needs the generator in CheckpointOptions::generators. Identity in
// eval mode. p outside [0, 1] is kInvalidArgument at construction, as torch's ValueError.
class Dropout final : public Module {
 public:
  Dropout(double p, Generator& gen);
  TensorList Forward(const TensorList& inputs) override;
  double p() const { return p_; }

 private:
  double p_;
  Generator* gen_;
};

}  // namespace tessel::nn
