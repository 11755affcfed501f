// core/ops/embedding.cc — ops "embedding" (row gather) and "embedding_backward" (deterministic
// scatter-add into a [V, C] zero table): CPU kernels and backward formulas.
//
// NOTE: determinism. embedding_backward parallelizes over column blocks of the table: every thread
// visits all indices in order for its own columns, so each element's sum has one fixed order however
// many threads run, and no two threads write the same element (no atomics). 16-bit gradients
// accumulate in fp32 and round once.
#include "core/ops/embedding.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/autograd/call.h"
#include "core/base/error.h"
#include "core/autograd/grad_mode.h"
#include "core/base/parallel.h"
#include "core/dispatch/dispatcher.h"
#include "core/ops/elementwise.h"
#include "core/ops/unary.h"
#include "core/ops/ternary.h"
#include "core/ops/view.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

constexpr int64_t kGrain = 1 << 15;

Tensor EmbeddingBackward(const Tensor& grad, const Tensor& indices, int64_t num_weights);

Tensor ContiguousCopyIfNeeded(const Tensor& t, DType dtype) {
  if (t.is_contiguous() && t.dtype() == dtype) return t;
  Tensor c = Empty(t.sizes(), dtype, t.device());
  CopyInto(c, t);
  return c;
}

// Indices as a contiguous int64 vector-like tensor; every one checked against [0, num_rows).
Tensor CheckedIndices(const char* name, const Tensor& indices, int64_t num_rows, const Shape& weight_shape) {
  TESSEL_CHECK(indices.dtype() == DType::kInt64 || indices.dtype() == DType::kInt32, name,
               ": indices must be int64 or int32, got ", indices.dtype(), " of shape ", ShapeStr(indices.sizes()));
  Tensor idx = ContiguousCopyIfNeeded(indices, DType::kInt64);
  const int64_t* p = static_cast<const int64_t*>(idx.raw_data());
  const int64_t n = idx.numel();  // (out of line: not in the loop condition of a per-index check)
  for (int64_t i = 0; i < n; ++i) {
    TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, p[i] >= 0 && p[i] < num_rows, "index out of range in self (", name,
                      ": index ", p[i], " at flat position ", i, " of indices ", ShapeStr(indices.sizes()),
                      " is out of range for weight ", ShapeStr(weight_shape), " with ", num_rows,
                      " rows; valid: 0 <= index < ", num_rows, ")");
  }
  return idx;
}

TensorList EmbeddingKernel(std::span<const Tensor> in, const Attrs&) {
  const Tensor& weight = in[0];
  TESSEL_CHECK(weight.dim() == 2, "embedding: weight must be 2-D [num_embeddings, embedding_dim], got ",
               ShapeStr(weight.sizes()));
  const int64_t V = weight.size(0), C = weight.size(1);
  Tensor idx = CheckedIndices("embedding", in[1], V, weight.sizes());
  Shape out_shape = in[1].sizes();
  out_shape.push_back(C);
  Tensor out = Empty(out_shape, weight.dtype(), weight.device());
  const int64_t n = idx.numel();
  if (n == 0 || C == 0) return {out};
  const int64_t* pi = static_cast<const int64_t*>(idx.raw_data());
  const int64_t esz = ElementSize(weight.dtype());
  const char* pw = static_cast<const char*>(weight.raw_data());
  char* po = static_cast<char*>(out.raw_data());
  const int64_t rs = weight.stride(0) * esz, cs = weight.stride(1) * esz;
  ParallelFor(0, n, std::max<int64_t>(1, kGrain / C), [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) {
      const char* src = pw + pi[i] * rs;
      char* dst = po + i * C * esz;
      if (cs == esz) {
        std::memcpy(dst, src, C * esz);
      } else {
        for (int64_t j = 0; j < C; ++j) std::memcpy(dst + j * esz, src + j * cs, esz);
      }
    }
  });
  return {out};
}

// table[idx[i], c0:c1] += g[i, c0:c1] for every i in order, each add rounded to T: a 16-bit gradient accumulates
// in its own dtype, as torch's CPU embedding_dense_backward adds rows into a gradient of the weight's dtype.
template <typename T>
void ScatterAddColumns(const T* g, const int64_t* idx, int64_t n, int64_t C, T* table, int64_t c0, int64_t c1) {
  for (int64_t i = 0; i < n; ++i) {
    const T* src = g + i * C;
    T* dst = table + idx[i] * C;
    for (int64_t c = c0; c < c1; ++c) dst[c] = FromCompute<T>(ToCompute(dst[c]) + ToCompute(src[c]));
  }
}

TensorList EmbeddingBackwardKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor& grad = in[0];
  const int64_t V = attrs.GetInt("num_weights");
  TESSEL_CHECK(grad.dim() >= 1, "embedding_backward: grad must have at least 1 dim, got ", ShapeStr(grad.sizes()));
  const int64_t C = grad.size(grad.dim() - 1);
  const Shape idx_shape(grad.sizes().begin(), grad.sizes().end() - 1);
  TESSEL_CHECK(idx_shape == in[1].sizes(), "embedding_backward: grad ", ShapeStr(grad.sizes()),
               " does not match indices ", ShapeStr(in[1].sizes()), " (expected indices shape + [C])");
  Tensor idx = CheckedIndices("embedding_backward", in[1], V, Shape{V, C});
  Tensor acc = Zeros({V, C}, grad.dtype(), grad.device());
  const int64_t n = idx.numel();
  if (n > 0 && C > 0) {
    Tensor g = ContiguousCopyIfNeeded(grad, grad.dtype());
    const int64_t* pi = static_cast<const int64_t*>(idx.raw_data());
    // At least 16 columns (a cache line of fp32) and ~kGrain element updates per task.
    const int64_t grain = std::max<int64_t>(16, kGrain / n);
    TESSEL_DISPATCH_FLOATING_TYPES(grad.dtype(), "embedding_backward", [&] {
      using T = scalar_t;
      const T* pg = static_cast<const T*>(g.raw_data());
      T* pa = static_cast<T*>(acc.raw_data());
      ParallelFor(0, C, grain, [&](int64_t c0, int64_t c1) { ScatterAddColumns<T>(pg, pi, n, C, pa, c0, c1); });
    });
  }
  return {acc};
}

// Saves only the indices (the weight's row count is an attr), as torch: a weight renormalized in place
// between two lookups (max_norm) must not invalidate the first lookup's backward.
const OpDef& kEmbedding =
    RegisterOp({.name = "embedding",
                .cpu = EmbeddingKernel,
                .backward = [](const BackwardContext& c) -> TensorList {
                  return {EmbeddingBackward(c.grad_outputs[0], c.inputs[1], c.attrs.GetInt("num_weights")), Tensor()};
                },
                .saved_inputs = {1}});

// Linear in grad, so its own backward is a gather of the incoming gradient.
const OpDef& kEmbeddingBackward = RegisterOp({.name = "embedding_backward",
                                              .cpu = EmbeddingBackwardKernel,
                                              .backward = [](const BackwardContext& c) -> TensorList {
                                                return {Embedding(c.grad_outputs[0], c.inputs[1]), Tensor()};
                                              }});

// The gradient of embedding w.r.t. its table (kept out of the public header; DTensor rules name the
// op "embedding_backward").
Tensor EmbeddingBackward(const Tensor& grad, const Tensor& indices, int64_t num_weights) {
  return autograd::CallOp1(kEmbeddingBackward, {grad, indices}, Attrs().Set("num_weights", num_weights));
}

}  // namespace

Tensor Embedding(const Tensor& weight, const Tensor& indices) {
  TESSEL_CHECK(weight.dim() >= 1, "embedding: weight must be 2-D [num_embeddings, embedding_dim], got ",
               ShapeStr(weight.sizes()));
  return autograd::CallOp1(kEmbedding, {weight, indices}, Attrs().Set("num_weights", weight.size(0)));
}

int64_t NormalizePaddingIdx(int64_t padding_idx, int64_t num_embeddings) {
  TESSEL_CHECK(padding_idx >= -num_embeddings && padding_idx < num_embeddings,
               "embedding: padding_idx must be within num_embeddings (", num_embeddings, " rows), got ", padding_idx);
  return padding_idx < 0 ? padding_idx + num_embeddings : padding_idx;
}

Tensor Embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx) {
  const int64_t row = padding_idx ? NormalizePaddingIdx(*padding_idx, weight.size(0)) : 0;
  const Tensor out = Embedding(weight, indices);
  if (!padding_idx || !out.requires_grad()) return out;
  const ImplicitReplicationGuard replicated;  // the position mask is dense beside a DTensor table
  const Tensor pad = Unsqueeze(Eq(indices, Scalar(static_cast<double>(row), indices.dtype(), indices.device())), -1);
  return Where(pad, Detach(out), out);
}

Tensor Embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx,
                 bool scale_grad_by_freq) {
  const Tensor out = Embedding(weight, indices, padding_idx);
  if (!scale_grad_by_freq || !out.requires_grad()) return out;
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, !indices.is_distributed() && !weight.is_distributed(),
                    "embedding: scale_grad_by_freq with a distributed (DTensor) table or index is not supported "
                    "(indices ", ShapeStr(indices.sizes()), ")");
  const Tensor idx = CheckedIndices("embedding", indices, weight.size(0), weight.sizes());
  const int64_t* p = static_cast<const int64_t*>(idx.raw_data());
  std::vector<int64_t> count(static_cast<size_t>(weight.size(0)), 0);
  const int64_t n = idx.numel();
  for (int64_t i = 0; i < n; ++i) ++count[static_cast<size_t>(p[i])];
  std::vector<double> scale_minus_one(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    scale_minus_one[static_cast<size_t>(i)] = 1.0 / static_cast<double>(count[static_cast<size_t>(p[i])]) - 1.0;
  }
  Shape shape = indices.sizes();
  shape.push_back(1);
  const Tensor s = Cast(FromVector(scale_minus_one, std::span<const int64_t>(shape)), out.dtype());
  return Add(out, Mul(Sub(out, Detach(out)), s));  // value out (the difference is 0), gradient g / count
}

Tensor IndexAddRows(const Tensor& source, const Tensor& index, int64_t num_rows) {
  TESSEL_CHECK(source.dim() == 2 && index.dim() == 1 && index.size(0) == source.size(0) && num_rows >= 0,
               "index_add: rows [M, C] and an index [M] into ", num_rows, " rows expected, got source ",
               ShapeStr(source.sizes()), " and index ", ShapeStr(index.sizes()));
  return EmbeddingBackward(source, index, num_rows);
}

void EmbeddingRenorm_(const Tensor& weight, const Tensor& indices, double max_norm, double norm_type) {
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, !weight.is_distributed() && !indices.is_distributed(),
                    "embedding: max_norm on a distributed (DTensor) table or index is not supported; renormalize ",
                    "the rows before sharding, or drop max_norm");
  TESSEL_CHECK(weight.dim() == 2 && IsFloating(weight.dtype()), "embedding: max_norm needs a floating 2-D weight ",
               "[num_embeddings, embedding_dim], got ", weight.dtype(), " ", ShapeStr(weight.sizes()));
  TESSEL_CHECK(max_norm >= 0 && norm_type > 0, "embedding: max_norm must be >= 0 and norm_type > 0, got max_norm ",
               max_norm, ", norm_type ", norm_type);
  NoGradGuard no_grad;
  const int64_t V = weight.size(0);
  const Tensor idx = CheckedIndices("embedding", indices.device().is_cpu() ? indices : indices.To(Device::Cpu(0)), V,
                                    weight.sizes());
  const int64_t* p = static_cast<const int64_t*>(idx.raw_data());
  std::vector<int64_t> rows(p, p + idx.numel());
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  // The named rows' values on the host in double (one gather; a few rows, not the table), then one
  // in-place scale per row over the limit, on the weight's own device.
  const Tensor picked = Embedding(weight, FromVector<int64_t>(rows, {static_cast<int64_t>(rows.size())}).To(weight.device()));
  const std::vector<double> values = picked.ToDoubleVector();
  const int64_t C = weight.size(1);
  for (size_t r = 0; r < rows.size(); ++r) {
    double norm = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double a = std::abs(values[r * C + c]);
      if (std::isinf(norm_type)) {  // the largest magnitude (torch's inf-norm; pow(a, inf) made every row inf)
        norm = std::max(norm, a);
      } else {
        norm += norm_type == 1 ? a : norm_type == 2 ? a * a : std::pow(a, norm_type);
      }
    }
    if (!std::isinf(norm_type)) {
      norm = norm_type == 1 ? norm : norm_type == 2 ? std::sqrt(norm) : std::pow(norm, 1.0 / norm_type);
    }
    if (norm > max_norm) MulScalarInPlace(Narrow(weight, 0, rows[r], 1), max_norm / (norm + 1e-7));
  }
}

}  // namespace tessel
