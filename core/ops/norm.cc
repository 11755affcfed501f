// core/ops/norm.cc — layer_norm / rms_norm over the last dim: CPU kernels (forward and fused backward)
// and the backward formulas.
//
// Ops registered (inputs → outputs; undefined inputs are optional arguments):
//   layer_norm(x, weight?, bias?) {eps}           → y, mean, rstd       (mean/rstd: non-differentiable)
//   layer_norm_backward(grad_y, x, weight?, mean, rstd) {output_mask[3]} → grad_x, grad_weight, grad_bias
//   rms_norm(x, weight?) {eps}                    → y, rstd             (rstd: non-differentiable)
//   rms_norm_backward(grad_y, x, weight?, rstd) {output_mask[2]}       → grad_x, grad_weight
// Statistics have x's shape with the last dim set to 1 (PyTorch's native_layer_norm layout, so a
// sharding rule maps Shard(d) of x to Shard(d) of the stats) and dtype float32 (float64 for float64 x).
// Backward outputs whose output_mask entry is 0 come back undefined.
//
// Invariant: all arithmetic runs in fp32 (fp64 for float64 inputs); rows are independent and run in
// parallel; grad_weight / grad_bias are reduced over a fixed number of row blocks (kReduceBlocks) in a
// fixed order, so they are bitwise identical whatever the thread count.
//
// NOTE: the forward op saves its statistics (rather than recomputing them in backward, one pass over x
// saved) but not y (OpDef::saved_outputs), like PyTorch's native_layer_norm: y is kept only by the op
// that consumes it. Under sequence parallelism that op is an all-gather whose backward needs nothing,
// so saving y would keep one [B, T/tp, C] per norm alive until backward for nothing.
//
// Example:
//   Tensor y_BTC = LayerNorm(x_BTC, w_C, b_C, 1e-5);
//   Backward(y_BTC, g_BTC);   // runs layer_norm_backward once: x.grad, w.grad, b.grad
#include "core/ops/norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/autograd/call.h"
#include "core/autograd/engine.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/dispatch/dispatcher.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

constexpr int64_t kRowGrainElements = 1 << 14;  // elements per parallel task, at least
constexpr int64_t kReduceBlocks = 64;           // row blocks for the grad_weight/grad_bias reduction

// Rows (or blocks) per parallel task when each costs `work` elements.
int64_t Grain(int64_t work) { return std::max<int64_t>(1, kRowGrainElements / std::max<int64_t>(work, 1)); }

DType StatsDType(DType x) { return x == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32; }

// A row of compute-type values: the row itself when T is its own compute type, else a converted copy.
template <typename T>
const ComputeT<T>* LoadRow(const T* src, int64_t n, std::vector<ComputeT<T>>& buf) {
  if constexpr (std::is_same_v<T, ComputeT<T>>) {
    return src;
  } else {
    buf.resize(n);
    for (int64_t i = 0; i < n; ++i) buf[i] = ToCompute(src[i]);
    return buf.data();
  }
}

// Σ f(i) over [0, n) with kLanes independent accumulators, so the compiler vectorizes the reduction
// without -ffast-math. The summation order depends only on n (never on threads).
template <typename C, typename F>
inline C LaneSum(int64_t n, F f) {
  constexpr int kLanes = 16;
  // Rows longer than kChunk sum chunk by chunk, each chunk's total joining a double: 16 lanes alone ran n / 16
  // additions deep (a 1e6-column row with mean 1e3: its layer_norm 1.7e-4 off, torch's 4.8e-6). Rows up to
  // kChunk keep the one pass (the same bits as before).
  constexpr int64_t kChunk = 1024;
  auto lanes = [&](int64_t begin, int64_t end) {
    C acc[kLanes] = {};
    int64_t i = begin;
    for (; i + kLanes <= end; i += kLanes) {
      for (int k = 0; k < kLanes; ++k) acc[k] += f(i + k);
    }
    C s = 0;
    for (; i < end; ++i) s += f(i);
    for (int k = 0; k < kLanes; ++k) s += acc[k];
    return s;
  };
  if (n <= kChunk) return lanes(0, n);
  double total = 0;
  for (int64_t c = 0; c < n; c += kChunk) total += static_cast<double>(lanes(c, std::min(n, c + kChunk)));
  return static_cast<C>(total);
}

// An optional [C] parameter as compute-type values (empty when undefined).
template <typename T>
std::vector<ComputeT<T>> LoadParam(const Tensor& p) {
  std::vector<ComputeT<T>> v;
  if (!p.defined()) return v;
  Tensor c = DenseOrCopy(p);
  const T* src = static_cast<const T*>(c.raw_data());
  const int64_t n = c.numel();
  v.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = ToCompute(src[i]);
  return v;
}

Shape StatsShape(const Tensor& x) {
  Shape s = x.sizes();
  s.back() = 1;
  return s;
}

// Checks shared by forward and backward: x floating with dim >= 1; params [C] of x's dtype.
void CheckNormArgs(const char* op, std::span<const Tensor> in, const Tensor& x, std::initializer_list<int> params) {
  TESSEL_CHECK(x.defined() && x.dim() >= 1, op, ": expected x with at least 1 dim, got ", DescribeInputs(in));
  TESSEL_CHECK(IsFloating(x.dtype()), op, ": expected a floating dtype, got ", DescribeInputs(in));
  for (int i : params) {
    const Tensor& p = in[i];
    if (!p.defined()) continue;
    TESSEL_CHECK(p.dim() == 1 && p.size(0) == x.size(-1), op, ": input ", i, " must have shape [", x.size(-1),
                 "] (the last dim of x ", ShapeStr(x.sizes()), "), got ", ShapeStr(p.sizes()));
    TESSEL_CHECK(p.dtype() == x.dtype(), op, ": input ", i, " has dtype ", p.dtype(), " but x has ", x.dtype());
  }
}

// ---- forward --------------------------------------------------------------------------------------

template <bool kCentered, typename T>
void NormForwardRows(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                     const Tensor& mean, const Tensor& rstd) {
  using C = ComputeT<T>;
  const int64_t cols = x.size(-1);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  const std::vector<C> w = LoadParam<T>(weight);
  const std::vector<C> b = LoadParam<T>(bias);
  const C* pw = w.empty() ? nullptr : w.data();
  const C* pb = b.empty() ? nullptr : b.data();
  const T* px = static_cast<const T*>(x.raw_data());
  T* py = static_cast<T*>(y.raw_data());
  C* pmean = kCentered ? static_cast<C*>(mean.raw_data()) : nullptr;
  C* prstd = static_cast<C*>(rstd.raw_data());
  const C inv_n = C(1) / static_cast<C>(cols);
  ParallelFor(0, rows, Grain(cols), [&](int64_t r0, int64_t r1) {
    std::vector<C> buf;
    for (int64_t r = r0; r < r1; ++r) {
      const C* xr = LoadRow(px + r * cols, cols, buf);
      C mu = 0;
      if constexpr (kCentered) {
        mu = LaneSum<C>(cols, [&](int64_t i) { return xr[i]; }) * inv_n;
        pmean[r] = mu;
      }
      const C ss = LaneSum<C>(cols, [&](int64_t i) { return (xr[i] - mu) * (xr[i] - mu); });
      const C rs = C(1) / std::sqrt(ss * inv_n + static_cast<C>(eps));
      prstd[r] = rs;
      T* yr = py + r * cols;
      if (pw != nullptr && pb != nullptr) {
        for (int64_t i = 0; i < cols; ++i) yr[i] = FromCompute<T>((xr[i] - mu) * rs * pw[i] + pb[i]);
      } else {
        for (int64_t i = 0; i < cols; ++i) {
          C v = (xr[i] - mu) * rs;
          if (pw != nullptr) v *= pw[i];
          if (pb != nullptr) v += pb[i];
          yr[i] = FromCompute<T>(v);
        }
      }
    }
  });
}

// in: layer_norm (x, weight, bias) or rms_norm (x, weight).
template <bool kCentered>
TensorList NormForwardKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const char* op = kCentered ? "layer_norm" : "rms_norm";
  if (kCentered) {
    CheckNormArgs(op, in, in[0], {1, 2});
  } else {
    CheckNormArgs(op, in, in[0], {1});
  }
  const Tensor x = DenseOrCopy(in[0]);
  const Tensor bias = kCentered ? in[2] : Tensor();
  Tensor y = Empty(x.sizes(), x.dtype(), x.device());
  Tensor mean = kCentered ? Empty(StatsShape(x), StatsDType(x.dtype()), x.device()) : Tensor();
  Tensor rstd = Empty(StatsShape(x), StatsDType(x.dtype()), x.device());
  const double eps = attrs.GetDouble("eps");
  TESSEL_DISPATCH_FLOATING_TYPES(x.dtype(), op,
                                 [&] { NormForwardRows<kCentered, scalar_t>(x, in[1], bias, eps, y, mean, rstd); });
  if (kCentered) return {y, mean, rstd};
  return {y, rstd};
}

// ---- fused backward -------------------------------------------------------------------------------

// Per-row gradients; grad_weight/grad_bias partial sums go to one row of `partial` per row block
// (partial: [kReduceBlocks, 2 * cols], weight part then bias part).
template <bool kCentered, typename T>
void NormBackwardRows(const Tensor& dy, const Tensor& x, const std::vector<ComputeT<T>>& w, const Tensor& mean,
                      const Tensor& rstd, const Tensor& dx, std::vector<ComputeT<T>>& partial, int64_t num_blocks) {
  using C = ComputeT<T>;
  const int64_t cols = x.size(-1);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  const int64_t per_block = (rows + num_blocks - 1) / std::max<int64_t>(num_blocks, 1);
  const T* px = static_cast<const T*>(x.raw_data());
  const T* pdy = static_cast<const T*>(dy.raw_data());
  const C* pmean = kCentered ? static_cast<const C*>(mean.raw_data()) : nullptr;
  const C* prstd = static_cast<const C*>(rstd.raw_data());
  T* pdx = dx.defined() ? static_cast<T*>(dx.raw_data()) : nullptr;
  const bool want_params = !partial.empty();
  const C* pweight = w.empty() ? nullptr : w.data();
  const C inv_n = C(1) / static_cast<C>(cols);
  ParallelFor(0, num_blocks, Grain(per_block * cols), [&](int64_t b0, int64_t b1) {
    std::vector<C> xbuf, gbuf;
    for (int64_t blk = b0; blk < b1; ++blk) {
      C* pacc = want_params ? partial.data() + blk * 2 * cols : nullptr;
      for (int64_t r = blk * per_block; r < std::min(rows, (blk + 1) * per_block); ++r) {
        const C* xr = LoadRow(px + r * cols, cols, xbuf);
        const C* dyr = LoadRow(pdy + r * cols, cols, gbuf);
        const C mu = kCentered ? pmean[r] : C(0);
        const C rs = prstd[r];
        // Σ g and Σ g·x̂ with g = dy·w, x̂ = (x - mean)·rstd.
        auto g_at = [&](int64_t i) { return pweight == nullptr ? dyr[i] : dyr[i] * pweight[i]; };
        const C sum_g = kCentered ? LaneSum<C>(cols, g_at) : C(0);
        const C sum_gx = LaneSum<C>(cols, [&](int64_t i) { return g_at(i) * (xr[i] - mu); }) * rs;
        if (pdx != nullptr) {
          const C mg = kCentered ? sum_g * inv_n : C(0);
          const C mgx = sum_gx * inv_n;
          T* dxr = pdx + r * cols;
          for (int64_t i = 0; i < cols; ++i) dxr[i] = FromCompute<T>(rs * (g_at(i) - mg - (xr[i] - mu) * rs * mgx));
        }
        if (pacc != nullptr) {
          for (int64_t i = 0; i < cols; ++i) {
            pacc[i] += dyr[i] * (xr[i] - mu) * rs;
            pacc[cols + i] += dyr[i];
          }
        }
      }
    }
  });
}

// Sums the per-block partials in block order into grad_weight (and grad_bias).
template <typename T>
void ReduceParamGrads(const std::vector<ComputeT<T>>& partial, int64_t num_blocks, int64_t cols, const Tensor& dw,
                      const Tensor& db) {
  using C = ComputeT<T>;
  T* pdw = dw.defined() ? static_cast<T*>(dw.raw_data()) : nullptr;
  T* pdb = db.defined() ? static_cast<T*>(db.raw_data()) : nullptr;
  ParallelFor(0, cols, Grain(num_blocks), [&](int64_t c0, int64_t c1) {
    for (int64_t i = c0; i < c1; ++i) {
      C sw = 0, sb = 0;
      for (int64_t blk = 0; blk < num_blocks; ++blk) {
        sw += partial[blk * 2 * cols + i];
        sb += partial[blk * 2 * cols + cols + i];
      }
      if (pdw != nullptr) pdw[i] = FromCompute<T>(sw);
      if (pdb != nullptr) pdb[i] = FromCompute<T>(sb);
    }
  });
}

// in: layer_norm_backward (grad, x, weight, mean, rstd) or rms_norm_backward (grad, x, weight, rstd).
template <bool kCentered>
TensorList NormBackwardKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const char* op = kCentered ? "layer_norm_backward" : "rms_norm_backward";
  CheckNormArgs(op, in, in[1], {2});
  TESSEL_CHECK(in[0].defined() && in[0].sizes() == in[1].sizes() && in[0].dtype() == in[1].dtype(), op,
               ": grad must match x in shape and dtype, got ", DescribeInputs(in));
  const Tensor& mean = kCentered ? in[3] : Tensor();
  const Tensor& rstd = kCentered ? in[4] : in[3];
  const Shape stats = StatsShape(in[1]);
  TESSEL_CHECK(rstd.defined() && rstd.sizes() == stats && rstd.dtype() == StatsDType(in[1].dtype()) &&
                   (!kCentered || (mean.defined() && mean.sizes() == stats && mean.dtype() == rstd.dtype())),
               op, ": statistics must have shape ", ShapeStr(stats), " and dtype ", StatsDType(in[1].dtype()), ", got ",
               DescribeInputs(in));
  const std::vector<int64_t>& mask = attrs.GetInts("output_mask");
  TESSEL_INTERNAL_ASSERT(mask.size() == (kCentered ? 3u : 2u), op, ": output_mask needs one entry per output");
  const Tensor dy = DenseOrCopy(in[0]);
  const Tensor x = DenseOrCopy(in[1]);
  const Tensor& weight = in[2];
  const int64_t cols = x.size(-1);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  Tensor dx = mask[0] ? Empty(x.sizes(), x.dtype(), x.device()) : Tensor();
  Tensor dw = mask[1] ? Empty({cols}, x.dtype(), x.device()) : Tensor();
  Tensor db = kCentered && mask[2] ? Empty({cols}, x.dtype(), x.device()) : Tensor();
  const int64_t num_blocks = std::min(rows, kReduceBlocks);
  TESSEL_DISPATCH_FLOATING_TYPES(x.dtype(), op, [&] {
    using C = ComputeT<scalar_t>;
    const std::vector<C> w = LoadParam<scalar_t>(weight);
    std::vector<C> partial(dw.defined() || db.defined() ? num_blocks * 2 * cols : 0, C(0));
    NormBackwardRows<kCentered, scalar_t>(dy, x, w, DenseOrCopy(mean), DenseOrCopy(rstd), dx, partial, num_blocks);
    if (dw.defined() || db.defined()) ReduceParamGrads<scalar_t>(partial, num_blocks, cols, dw, db);
  });
  if (kCentered) return {dx, dw, db};
  return {dx, dw};
}

// ---- registration and backward formulas -----------------------------------------------------------

const OpDef& kLayerNormBackward =
    RegisterOp({.name = "layer_norm_backward", .cpu = NormBackwardKernel<true>, .save_inputs = false});
const OpDef& kRmsNormBackward =
    RegisterOp({.name = "rms_norm_backward", .cpu = NormBackwardKernel<false>, .save_inputs = false});

int64_t Needs(const BackwardContext& c, int i) { return c.inputs[i].defined() && c.needs_input_grad[i] ? 1 : 0; }

// create_graph: the same gradients from differentiable ops, with the statistics recomputed from x (the
// saved mean and rstd carry no graph), so they can be differentiated again. xhat = (x - mean) rstd (no
// centering for RMSNorm), gw = g * weight:
//   dx = rstd (gw - mean(gw) - xhat mean(gw xhat))   (RMSNorm: without mean(gw)),  dweight = sum(g xhat),
//   dbias = sum(g), the sums over every dim but the last.
TensorList ComposedNormBackward(const BackwardContext& c, bool centered) {
  const Tensor &g = c.grad_outputs[0], &x = c.inputs[0], &w = c.inputs[1];
  const double eps = c.attrs.GetDouble("eps");
  const std::vector<int64_t> last = {-1};
  const Tensor xc = centered ? Sub(x, Mean(x, last, true)) : x;
  const Tensor rstd = Rsqrt(AddScalar(Mean(Mul(xc, xc), last, true), eps));
  const Tensor xhat = Mul(xc, rstd);
  const Tensor gw = w.defined() ? Mul(g, w) : g;
  TensorList out(c.inputs.size());
  if (c.needs_input_grad[0]) {
    Tensor inner = Sub(gw, Mul(xhat, Mean(Mul(gw, xhat), last, true)));
    if (centered) inner = Sub(inner, Mean(gw, last, true));
    out[0] = Mul(rstd, inner);
  }
  if (w.defined() && c.needs_input_grad[1]) out[1] = SumToSize(Mul(g, xhat), w.sizes());
  if (centered && c.inputs[2].defined() && c.needs_input_grad[2]) out[2] = SumToSize(g, c.inputs[2].sizes());
  return out;
}

TensorList LayerNormBackward(const BackwardContext& c) {
  const Tensor& g = c.grad_outputs[0];
  if (!g.defined()) return {Tensor(), Tensor(), Tensor()};
  if (CreatingGraph()) return ComposedNormBackward(c, /*centered=*/true);
  const std::vector<int64_t> mask = {Needs(c, 0), Needs(c, 1), Needs(c, 2)};
  return autograd::CallOp(kLayerNormBackward, {g, c.inputs[0], c.inputs[1], c.outputs[1], c.outputs[2]},
                          Attrs().Set("output_mask", mask));
}

TensorList RmsNormBackward(const BackwardContext& c) {
  const Tensor& g = c.grad_outputs[0];
  if (!g.defined()) return {Tensor(), Tensor()};
  if (CreatingGraph()) return ComposedNormBackward(c, /*centered=*/false);
  const std::vector<int64_t> mask = {Needs(c, 0), Needs(c, 1)};
  return autograd::CallOp(kRmsNormBackward, {g, c.inputs[0], c.inputs[1], c.outputs[1]},
                          Attrs().Set("output_mask", mask));
}

const OpDef& kLayerNorm = RegisterOp({.name = "layer_norm",
                                      .cpu = NormForwardKernel<true>,
                                      .backward = LayerNormBackward,
                                      .save_outputs = true,
                                      .saved_outputs = {1, 2},
                                      .non_differentiable_outputs = {1, 2}});
const OpDef& kRmsNorm = RegisterOp({.name = "rms_norm",
                                    .cpu = NormForwardKernel<false>,
                                    .backward = RmsNormBackward,
                                    .save_outputs = true,
                                    .saved_outputs = {1},
                                    .non_differentiable_outputs = {1}});

}  // namespace

namespace {
// torch's mixed-type norms: a bfloat16 / float16 x with float32 parameters (a Linear's output under
// autocast, or a half activation into a float32 norm) is normalized in float32 and returned in x's dtype,
// as torch's CPU kernels accumulate in float and round once at the end. Other mismatches stay errors.
bool MixedNorm(const Tensor& x, std::initializer_list<const Tensor*> params) {
  if (!x.defined() || (x.dtype() != DType::kBFloat16 && x.dtype() != DType::kFloat16)) return false;
  bool any = false;
  for (const Tensor* p : params) {
    if (!p->defined()) continue;
    if (p->dtype() != DType::kFloat32) return false;
    any = true;
  }
  return any;
}
}  // namespace

Tensor LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  if (MixedNorm(x, {&weight, &bias})) return Cast(LayerNorm(Cast(x, DType::kFloat32), weight, bias, eps), x.dtype());
  return autograd::CallOp(kLayerNorm, {x, weight, bias}, Attrs().Set("eps", eps))[0];
}

Tensor RmsNorm(const Tensor& x, const Tensor& weight, double eps) {
  if (MixedNorm(x, {&weight})) return Cast(RmsNorm(Cast(x, DType::kFloat32), weight, eps), x.dtype());
  return autograd::CallOp(kRmsNorm, {x, weight}, Attrs().Set("eps", eps))[0];
}

namespace {

// x viewed as [..., prod(shape)] after checking that its trailing dims are `shape`; the tensors stay as they
// are for a one-dim shape.
Tensor FlattenTrailing(const char* op, const Tensor& x, const Shape& shape) {
  const int64_t k = static_cast<int64_t>(shape.size());
  TESSEL_CHECK(k >= 1, op, ": normalized_shape must name at least one dim");
  const bool fits = x.dim() >= k && Shape(x.sizes().end() - k, x.sizes().end()) == shape;
  TESSEL_CHECK(fits, op, ": Given normalized_shape=", ShapeStr(shape), ", expected input with shape [*, ",
               ShapeStr(shape).substr(1), ", but got input of size", ShapeStr(x.sizes()));
  if (k == 1) return x;
  Shape flat(x.sizes().begin(), x.sizes().end() - k);
  flat.push_back(NumElements(shape));
  return Reshape(x, flat);
}
Tensor FlatParam(const Tensor& p) { return p.defined() && p.dim() != 1 ? Reshape(p, {p.numel()}) : p; }

}  // namespace

Tensor LayerNormOver(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                     double eps) {
  const Tensor y = LayerNorm(FlattenTrailing("layer_norm", x, normalized_shape), FlatParam(weight), FlatParam(bias),
                             eps);
  return normalized_shape.size() == 1 ? y : Reshape(y, x.sizes());
}

Tensor RmsNormOver(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, double eps) {
  if (weight.defined() && weight.dtype() != x.dtype() && IsFloating(weight.dtype()) && IsFloating(x.dtype())) {
    // A weight of another dtype (a bf16 module on float32 input, or the reverse): torch's unfused path
    // normalizes in x's compute type (float32 for 16-bit x), multiplies by the weight in the dtype promoted with
    // it and rounds once to x's dtype (the fused op takes one dtype; bit for bit with torch 2.15 on the 16 dtype
    // pairs tested).
    const DType compute = x.dtype() == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
    const DType wide = compute == DType::kFloat64 || weight.dtype() == DType::kFloat64 ? DType::kFloat64
                                                                                       : DType::kFloat32;
    const Tensor y = RmsNormOver(Cast(x, compute), normalized_shape, Tensor(), eps);
    return Cast(Mul(Cast(y, wide), Cast(weight, wide)), x.dtype());
  }
  const Tensor y = RmsNorm(FlattenTrailing("rms_norm", x, normalized_shape), FlatParam(weight), eps);
  return normalized_shape.size() == 1 ? y : Reshape(y, x.sizes());
}

}  // namespace tessel
