// core/nn/layers.cc — Linear, Embedding, LayerNorm, RMSNorm.
#include "core/nn/layers.h"

#include <limits>

#include "core/base/error.h"
#include "core/ops/dropout.h"
#include "core/ops/embedding.h"
#include "core/ops/linear_gelu.h"
#include "core/ops/matmul.h"
#include "core/ops/norm.h"
#include "core/ops/view.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"

namespace tessel::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, Generator& gen, double init_std, DType dtype)
    : Linear(in_features, out_features, bias, gen, Distribution::Normal(0, init_std), std::nullopt, dtype) {}

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, Generator& gen, Distribution weight_init,
               std::optional<Distribution> bias_init, DType dtype)
    : Module("Linear"), in_(in_features), out_(out_features) {
  TESSEL_CHECK(in_features > 0 && out_features > 0, "Linear: features must be positive, got in=", in_features,
               " out=", out_features);
  RegisterParameter("weight", Random(std::vector<int64_t>{out_, in_}, gen, weight_init, dtype));
  if (bias) {
    RegisterParameter("bias", bias_init ? Random(std::vector<int64_t>{out_}, gen, *bias_init, dtype)
                                        : Zeros({out_}, dtype));
  }
}

TensorList Linear::Forward(const TensorList& in) {
  const Tensor bias = OptionalParam("bias");  // also one assigned later to a layer built without
  if (!fused_gelu_.empty()) return {tessel::LinearGelu(in.at(0), Param("weight"), bias, fused_gelu_)};
  return {tessel::Linear(in.at(0), Param("weight"), bias)};
}

void Linear::set_fused_gelu(const std::string& approximate) {
  TESSEL_CHECK(approximate.empty() || approximate == "tanh" || approximate == "none",
               "Linear.set_fused_gelu: approximate must be 'tanh', 'none' or '' (off), got '", approximate, "'");
  fused_gelu_ = approximate;
}

Embedding::Embedding(int64_t num_embeddings, int64_t dim, Generator& gen, double init_std, DType dtype,
                     std::optional<int64_t> padding_idx, std::optional<double> max_norm, double norm_type)
    : Module("Embedding"), max_norm_(max_norm), norm_type_(norm_type) {
  Tensor weight = Random(std::vector<int64_t>{num_embeddings, dim}, gen, Distribution::Normal(0, init_std), dtype);
  if (padding_idx) {
    padding_idx_ = NormalizePaddingIdx(*padding_idx, num_embeddings);
    Tensor row = Select(weight, 0, *padding_idx_);
    CopyInto(row, Zeros({dim}, dtype));
  }
  RegisterParameter("weight", weight);
}

void Embedding::set_padding_idx(std::optional<int64_t> padding_idx) {
  padding_idx_ = padding_idx ? std::optional<int64_t>(NormalizePaddingIdx(*padding_idx, Param("weight").size(0)))
                             : std::nullopt;
}

TensorList Embedding::Forward(const TensorList& in) {
  if (max_norm_) EmbeddingRenorm_(Param("weight"), in.at(0), *max_norm_, norm_type_);
  return {tessel::Embedding(Param("weight"), in.at(0), padding_idx_, scale_grad_by_freq_)};
}

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool affine, DType dtype, bool bias)
    : Module("LayerNorm"), shape_(std::move(normalized_shape)), eps_(eps) {
  TESSEL_CHECK(!shape_.empty(), "LayerNorm: normalized_shape must name at least one dim");
  if (affine) RegisterParameter("weight", Ones(shape_, dtype));
  if (affine && bias) RegisterParameter("bias", Zeros(shape_, dtype));
}

TensorList LayerNorm::Forward(const TensorList& in) {
  return {LayerNormOver(in.at(0), shape_, OptionalParam("weight"), OptionalParam("bias"), eps_)};
}

RMSNorm::RMSNorm(Shape normalized_shape, std::optional<double> eps, DType dtype, bool affine)
    : Module("RMSNorm"), shape_(std::move(normalized_shape)), eps_(eps) {
  TESSEL_CHECK(!shape_.empty(), "RMSNorm: normalized_shape must name at least one dim");
  if (affine) RegisterParameter("weight", Ones(shape_, dtype));
}

TensorList RMSNorm::Forward(const TensorList& in) {
  const Tensor& x = in.at(0);
  const double eps = eps_ ? *eps_
                          : x.dtype() == DType::kFloat64 ? std::numeric_limits<double>::epsilon()
                                                         : static_cast<double>(std::numeric_limits<float>::epsilon());
  return {RmsNormOver(x, shape_, OptionalParam("weight"), eps)};  // a weight of another dtype: norm.h
}

Dropout::Dropout(double p, Generator& gen) : Module("Dropout"), p_(p), gen_(&gen) {
  TESSEL_CHECK(p >= 0.0 && p <= 1.0, "Dropout: dropout probability has to be between 0 and 1, but got ", p);
}

TensorList Dropout::Forward(const TensorList& in) { return {tessel::Dropout(in.at(0), p_, *gen_, training())}; }

}  // namespace tessel::nn
