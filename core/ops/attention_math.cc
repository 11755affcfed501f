// core/ops/attention_math.cc — scaled_dot_product_attention with an attention mask or dropout: torch's
// math backend as a composition of differentiable ops (matmul, where, softmax, dropout), so autograd
// and DTensor dispatch come from those ops. The fused kernels (attention.cc) take every call without a
// mask and dropout.
//
// DTensor inputs (tensor parallel heads) work with is_causal, whose mask this file builds (it enters as
// Replicate); a user's attn_mask must be a DTensor itself, as in torch.
//
// Invariant: softmax(q·kᵀ·scale + mask)·v with masked scores -inf; a row with no finite score is 0 in
// the output and in every gradient (its scores are replaced by 0 before the softmax, so no NaN reaches
// the backward, and its weights are set to 0 after it). NaN inputs stay NaN.
//
// Example: see attention.h.
#include <cmath>
#include <limits>
#include <string_view>
#include <vector>

#include "core/autograd/autocast.h"
#include "core/base/error.h"
#include "core/dispatch/dispatcher.h"
#include "core/ops/attention.h"
#include "core/ops/dropout.h"
#include "core/ops/elementwise.h"
#include "core/ops/matmul.h"
#include "core/ops/reduction.h"
#include "core/ops/softmax.h"
#include "core/ops/ternary.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

// The C++ type names torch's messages print for a dtype.
std::string_view TorchTypeName(DType d) {
  switch (d) {
    case DType::kFloat32: return "float";
    case DType::kFloat64: return "double";
    case DType::kBFloat16: return "c10::BFloat16";
    case DType::kFloat16: return "c10::Half";
    case DType::kInt64: return "long int";
    case DType::kInt32: return "int";
    case DType::kInt16: return "short int";
    case DType::kInt8: return "signed char";
    case DType::kUInt8: return "unsigned char";
    default: return DTypeName(d);
  }
}

}  // namespace

namespace {

// torch's is_causal mask: ones(T, S).tril(0) (key j visible to query i when j <= i).
Tensor CausalKeep(int64_t t, int64_t s, Device device) {
  std::vector<uint8_t> keep(static_cast<size_t>(t * s));
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t j = 0; j < s; ++j) keep[static_cast<size_t>(i * s + j)] = j <= i;
  }
  Tensor m = Empty({t, s}, DType::kBool, Device::Cpu(0));
  std::copy(keep.begin(), keep.end(), static_cast<uint8_t*>(m.raw_data()));
  return device.is_cpu() ? m : m.To(device);
}

// float32, float16, bfloat16: what torch's autocast casts (float64 is not eligible).
bool Eligible(DType d) { return d == DType::kFloat32 || d == DType::kBFloat16 || d == DType::kFloat16; }
Tensor CastIfEligible(const Tensor& t, DType d) { return Eligible(t.dtype()) && t.dtype() != d ? Cast(t, d) : t; }

}  // namespace

Tensor attention_internal::ScaledScores(const Tensor& q, const Tensor& k, double scale, bool causal) {
  const Tensor scores = MulScalar(Matmul(q, Transpose(k, -2, -1)), scale);
  if (!causal) return scores;
  const ImplicitReplicationGuard replicated;  // the mask is the op's own constant: Replicate beside DTensors
  return Where(CausalKeep(q.size(-2), k.size(-2), scores.device()), scores,
               Scalar(-std::numeric_limits<double>::infinity(), scores.dtype(), scores.device()));
}

Tensor ScaledDotProductAttention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  const char* op = "scaled_dot_product_attention";
  const Tensor& mask = o.attn_mask;
  TESSEL_CHECK(o.dropout_p >= 0.0 && o.dropout_p <= 1.0, op, ": dropout_p has to be between 0 and 1, but got ",
               o.dropout_p);
  TESSEL_CHECK(!(o.is_causal && mask.defined()), op,
               ": an explicit attn_mask must not be set together with is_causal=True (got a mask of shape ",
               ShapeStr(mask.defined() ? mask.sizes() : Shape{}), ")");
  if (!mask.defined() && o.dropout_p == 0.0) return ScaledDotProductAttention(q, k, v, o.is_causal, o.scale);
  TESSEL_CHECK(o.dropout_p == 0.0 || o.generator != nullptr, op, ": dropout_p=", o.dropout_p,
               " needs a Generator (AttentionOptions::generator)");
  TESSEL_CHECK(q.defined() && k.defined() && v.defined() && q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2 &&
                   k.size(-1) == q.size(-1) && v.size(-2) == k.size(-2),
               op, ": expected q [..., T, D], k [..., S, D], v [..., S, Dv], got q ",
               ShapeStr(q.defined() ? q.sizes() : Shape{}), ", k ", ShapeStr(k.defined() ? k.sizes() : Shape{}),
               ", v ", ShapeStr(v.defined() ? v.sizes() : Shape{}));
  if (AutocastEnabled() && mask.defined() && Eligible(mask.dtype()) && Eligible(q.dtype())) {
    // torch's autocast casts the float mask with q, k and v (the lower-precision list)
    const DType r = AutocastDType();
    if (mask.dtype() != r || q.dtype() != r || k.dtype() != r || v.dtype() != r) {
      AttentionOptions lowered = o;
      lowered.attn_mask = CastIfEligible(mask, r);
      return ScaledDotProductAttention(CastIfEligible(q, r), CastIfEligible(k, r), CastIfEligible(v, r), lowered);
    }
  }
  if (mask.defined() && mask.dtype() == DType::kFloat32 && Eligible(q.dtype()) && q.dtype() != DType::kFloat32) {
    // torch's CPU kernel adds a float32 mask to float32 scores of bfloat16 / float16 q, k, v
    const Tensor out = ScaledDotProductAttention(Cast(q, DType::kFloat32), Cast(k, DType::kFloat32),
                                                 Cast(v, DType::kFloat32), o);
    return Cast(out, q.dtype());
  }
  // torch's mask rules: bool, float32 or q's dtype (a float64 or bf16 mask with float32 q raised there); at least
  // two dims (its IndexError for a [S] mask); broadcasting to the scores' shape, never beyond it.
  TESSEL_CHECK(!mask.defined() || mask.dtype() == DType::kBool || mask.dtype() == DType::kFloat32 ||
                   mask.dtype() == q.dtype(),
               "Expected attn_mask dtype to be bool or float or to match query dtype, but got attn_mask.dtype: ",
               TorchTypeName(mask.dtype()), " and  query.dtype: ",
               TorchTypeName(q.dtype()), " instead.");
  if (mask.defined()) {
    TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, mask.dim() >= 2, "Dimension out of range (expected to be in range of "
                      "[-1, 0], but got -2)");
    Shape scores_shape(q.sizes().begin(), q.sizes().end() - 1);
    scores_shape.push_back(k.size(-2));
    const Shape wide = BroadcastShapes(scores_shape, mask.sizes(), "scaled_dot_product_attention");
    TESSEL_CHECK(wide == scores_shape, "output with shape ", ShapeStr(scores_shape),
                 " doesn't match the broadcast shape ", ShapeStr(wide));
  }
  if (mask.defined() && IsFloating(mask.dtype()) && mask.dtype() != q.dtype()) {  // a float32 mask joins q's
    AttentionOptions cast = o;                                                   // scores (float64 q)
    cast.attn_mask = Cast(mask, q.dtype());
    return ScaledDotProductAttention(q, k, v, cast);
  }
  const double scale = o.scale ? *o.scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor scores = attention_internal::ScaledScores(q, k, scale, o.is_causal);  // [..., T, S]
  const Tensor neg_inf = Scalar(-std::numeric_limits<double>::infinity(), scores.dtype(), scores.device());
  const Tensor zero = Scalar(0.0, scores.dtype(), scores.device());
  if (mask.defined() && mask.dtype() == DType::kBool) {
    scores = Where(mask, scores, neg_inf);
  } else if (mask.defined()) {
    scores = Add(scores, mask);
  }
  const Tensor dead = Eq(Amax(scores, {-1}, /*keepdim=*/true), neg_inf);  // [..., T, 1]: no key left
  Tensor weights = Where(dead, zero, Softmax(Where(dead, zero, scores), -1));
  if (o.dropout_p > 0.0) weights = Dropout(weights, o.dropout_p, *o.generator);
  return Matmul(weights, v);
}

}  // namespace tessel
