// core/ops/index_dim.cc — GatherDim / ScatterAddDim over [outer, n, inner] views, parallel over (outer, block of
// inner lanes): every output element is written by one task, so the scatter needs no atomics and adds in j order.
#include "core/ops/index_dim.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/autograd/call.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/dispatch/op.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/shape.h"

namespace tessel {
namespace {

constexpr int64_t kGrain = 1 << 14;  // elements of work per thread slice, at least
constexpr int64_t kLaneBlock = 256;  // inner lanes one task covers

struct Geometry {
  int64_t outer = 1, inner = 1;
};

// The [outer, n, inner] extents of `t` around `dim`.
Geometry Around(const Tensor& t, int64_t dim) {
  Geometry g;
  for (int64_t d = 0; d < dim; ++d) g.outer *= t.size(d);
  for (int64_t d = dim + 1; d < t.dim(); ++d) g.inner *= t.size(d);
  return g;
}

// Checks that `index` (and `other`) match `x` on every dim but `dim`; returns the outer / inner extents.
Geometry CheckGeometry(const char* op, const Tensor& x, int64_t dim, const Tensor& index) {
  TESSEL_CHECK(index.dtype() == DType::kInt64, op, ": index must be int64, got ", DTypeName(index.dtype()));
  TESSEL_CHECK(index.dim() == x.dim(), op, ": index ", ShapeStr(index.sizes()), " and input ", ShapeStr(x.sizes()),
               " must have the same number of dims");
  for (int64_t d = 0; d < x.dim(); ++d) {
    TESSEL_CHECK(d == dim || index.size(d) == x.size(d), op, ": index ", ShapeStr(index.sizes()), " and input ",
                 ShapeStr(x.sizes()), " differ on dim ", d, " (only dim ", dim, " may differ)");
  }
  return Around(x, dim);
}

void CheckRange(const char* op, const Tensor& idx, int64_t length, int64_t dim) {
  const int64_t* p = idx.data_ptr<int64_t>();
  const int64_t n = idx.numel();
  bool ok = true;  // one vectorized pass; the offender is looked for only on failure
  for (int64_t i = 0; i < n; ++i) ok &= static_cast<uint64_t>(p[i]) < static_cast<uint64_t>(length);
  if (ok) return;
  for (int64_t i = 0; i < n; ++i) {
    TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, p[i] >= 0 && p[i] < length, op, ": index ", p[i],
                      " is out of bounds for dimension ", dim, " with size ", length);
  }
}

// Calls fn(o, i0, w) for every (outer, block of w inner lanes) task, split across threads. With fewer tasks than
// threads (a scatter along dim 0) the blocks shrink, down to 64 lanes (narrower blocks read every row of index
// and src in short pieces: [1000, 256] <- [8192, 256] ran slower on 2 threads with 32-lane blocks than on one).
template <typename Fn>
void ForLaneBlocks(const Geometry& g, int64_t per_lane, const Fn& fn) {
  int64_t lane = kLaneBlock;
  while (lane > 64 && g.outer * ((g.inner + lane - 1) / lane) < NumThreads()) lane /= 2;
  const int64_t blocks = (g.inner + lane - 1) / lane;
  const int64_t per_task = per_lane * std::min(g.inner, lane);
  ParallelFor(0, g.outer * blocks, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, per_task)),
              [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i0 = (t % blocks) * lane;
      fn(t / blocks, i0, std::min(lane, g.inner - i0));
    }
  });
}

// in: x, index; attr dim -> index's shape, x's dtype
TensorList GatherDimKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor x = DenseOrCopy(in[0]), idx = DenseOrCopy(in[1]);
  const int64_t dim = attrs.GetInt("dim");
  const Geometry g = CheckGeometry("gather", x, dim, idx);
  const int64_t n = x.size(dim), m = idx.size(dim);
  CheckRange("gather", idx, n, dim);
  Tensor out = Empty(idx.sizes(), x.dtype(), x.device());
  if (out.numel() == 0) return {out};
  const int64_t* pi = idx.data_ptr<int64_t>();
  TESSEL_DISPATCH_ALL_TYPES(x.dtype(), "gather", [&] {
    using T = scalar_t;
    const T* px = static_cast<const T*>(x.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    ForLaneBlocks(g, m, [&](int64_t o, int64_t i0, int64_t w) {
      for (int64_t j = 0; j < m; ++j) {
        const int64_t at = (o * m + j) * g.inner + i0;
        const T* row = px + o * n * g.inner + i0;
        for (int64_t i = 0; i < w; ++i) po[at + i] = row[pi[at + i] * g.inner + i];
      }
    });
  });
  return {out};
}

// Adds src at index along dim into out in index order: float32 and float64 rounded per add, 16-bit floats summed
// in float32 and rounded once (torch's CPU kernel: 256 + 1 + 1 is 258). src is [outer, m, inner] around dim;
// `index_of(at, j)` is the position along dim for src's flat element `at` at step j (a full index reads
// index[at], index_select's 1-D one index[j]).
template <typename IndexOf>
void ScatterAddInto(const Tensor& out, int64_t dim, int64_t m, const Tensor& src, const Geometry& g,
                    const IndexOf& index_of, bool rounded_adds = false) {
  if (m == 0 || out.numel() == 0) return;
  if ((out.dtype() == DType::kBFloat16 || out.dtype() == DType::kFloat16) && !rounded_adds) {
    const Tensor wide = DenseAs(out, DType::kFloat32);
    ScatterAddInto(wide, dim, m, DenseAs(src, DType::kFloat32), g, index_of);
    CopyInto(out, wide);
    return;
  }
  const int64_t n = out.size(dim);
  TESSEL_DISPATCH_FLOATING_TYPES(out.dtype(), "scatter_add", [&] {
    using T = scalar_t;
    const T* ps = static_cast<const T*>(src.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    ForLaneBlocks(g, m, [&](int64_t o, int64_t i0, int64_t w) {
      T* row = po + o * n * g.inner + i0;
      for (int64_t j = 0; j < m; ++j) {
        const int64_t at = (o * m + j) * g.inner + i0;
        for (int64_t i = 0; i < w; ++i) {
          T& dst = row[index_of(at + i, j) * g.inner + i];
          dst = FromCompute<T>(ToCompute(dst) + ToCompute(ps[at + i]));
        }
      }
    });
  });
}

// ScatterAddInto with a full index (index's shape is src's).
void ScatterAddInto(const Tensor& out, int64_t dim, const Tensor& idx, const Tensor& src, const Geometry& g) {
  const int64_t* pi = idx.data_ptr<int64_t>();
  ScatterAddInto(out, dim, idx.size(dim), src, g, [pi](int64_t at, int64_t) { return pi[at]; });
}

// gather_dim's gradient: in: grad, index; attrs dim, length -> grad's shape with `length` along dim
TensorList GatherDimBackwardKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor grad = DenseOrCopy(in[0]), idx = DenseOrCopy(in[1]);
  const int64_t dim = attrs.GetInt("dim"), length = attrs.GetInt("length");
  Shape shape = grad.sizes();
  shape[static_cast<size_t>(dim)] = length;
  Tensor out = Zeros(shape, grad.dtype(), grad.device());
  const Geometry g = CheckGeometry("gather backward", out, dim, idx);
  CheckRange("gather backward", idx, length, dim);
  ScatterAddInto(out, dim, idx, grad, g);
  return {out};
}

// in: self, index, src; attr dim -> self's shape and dtype
TensorList ScatterAddDimKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor self = in[0], idx = DenseOrCopy(in[1]), src = DenseOrCopy(in[2]);
  const int64_t dim = attrs.GetInt("dim");
  const Geometry g = CheckGeometry("scatter_add", self, dim, idx);
  TESSEL_CHECK(src.sizes() == idx.sizes() && src.dtype() == self.dtype(), "scatter_add: src ", ShapeStr(src.sizes()),
               " ", DTypeName(src.dtype()), " must have index's shape ", ShapeStr(idx.sizes()), " and input's dtype ",
               DTypeName(self.dtype()));
  CheckRange("scatter_add", idx, self.size(dim), dim);
  TESSEL_CHECK(IsFloating(self.dtype()), "scatter_add: expected a floating dtype, got ", DTypeName(self.dtype()));
  Tensor out = Empty(self.sizes(), self.dtype(), self.device());
  CopyInto(out, self);
  ScatterAddInto(out, dim, idx, src, g);
  return {out};
}

// in: x, index (1-D); attr dim -> x's shape with index's length along dim
TensorList IndexSelectKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor x = DenseOrCopy(in[0]), idx = DenseOrCopy(in[1]);
  const int64_t dim = attrs.GetInt("dim");
  TESSEL_CHECK(idx.dim() == 1 && idx.dtype() == DType::kInt64, "index_select: index must be 1-D int64, got ",
               ShapeStr(idx.sizes()), " ", DTypeName(idx.dtype()));
  const int64_t n = x.size(dim), m = idx.size(0);
  CheckRange("index_select", idx, n, dim);
  Shape shape = x.sizes();
  shape[static_cast<size_t>(dim)] = m;
  Tensor out = Empty(shape, x.dtype(), x.device());
  if (out.numel() == 0) return {out};
  const auto [outer, inner] = Around(x, dim);
  const int64_t* pi = idx.data_ptr<int64_t>();
  const int64_t bytes = inner * ElementSize(x.dtype());
  const char* px = static_cast<const char*>(x.raw_data());
  char* po = static_cast<char*>(out.raw_data());
  if (inner == 1) {  // the last dim: element loads, not a memcpy call per element, split by output element
    auto rows = [&](auto* o_base, const auto* x_base) {
      ParallelFor(0, outer * m, kGrain, [&](int64_t t0, int64_t t1) {
        int64_t r = t0 / m, j = t0 % m;
        for (int64_t t = t0; t < t1; ++t) {
          o_base[t] = x_base[r * n + pi[j]];
          if (++j == m) j = 0, ++r;
        }
      });
    };
    switch (bytes) {
      case 1: rows(reinterpret_cast<uint8_t*>(po), reinterpret_cast<const uint8_t*>(px)); return {out};
      case 2: rows(reinterpret_cast<uint16_t*>(po), reinterpret_cast<const uint16_t*>(px)); return {out};
      case 4: rows(reinterpret_cast<uint32_t*>(po), reinterpret_cast<const uint32_t*>(px)); return {out};
      case 8: rows(reinterpret_cast<uint64_t*>(po), reinterpret_cast<const uint64_t*>(px)); return {out};
      default: break;
    }
  }
  ParallelFor(0, outer * m, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, inner)), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o = t / m, j = t % m;
      std::memcpy(po + t * bytes, px + (o * n + pi[j]) * bytes, static_cast<size_t>(bytes));
    }
  });
  return {out};
}

// index_select's gradient: in: grad, index; attrs dim, length -> grad's shape with `length` along dim
TensorList IndexSelectBackwardKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor grad = DenseOrCopy(in[0]), idx = DenseOrCopy(in[1]);
  const int64_t dim = attrs.GetInt("dim"), length = attrs.GetInt("length");
  Shape shape = grad.sizes();
  shape[static_cast<size_t>(dim)] = length;
  Tensor out = Zeros(shape, grad.dtype(), grad.device());
  const Geometry g = Around(grad, dim);
  TESSEL_CHECK(idx.dim() == 1 && idx.size(0) == grad.size(dim), "index_select backward: index ",
               ShapeStr(idx.sizes()), " for a gradient ", ShapeStr(grad.sizes()), " along dim ", dim);
  CheckRange("index_select backward", idx, length, dim);
  const int64_t* pi = idx.data_ptr<int64_t>();  // the 1-D index itself: nothing of the gradient's size
  // (index_dim.h, IndexSelectDim: torch's rounding of 16-bit sums)
  const bool rounded_adds = attrs.GetBool("rounded_adds", false) || shape.size() == 1;
  ScatterAddInto(out, dim, idx.size(0), grad, g, [pi](int64_t, int64_t j) { return pi[j]; }, rounded_adds);
  return {out};
}

const OpDef& GatherDimOp();
const OpDef& GatherDimBackwardOp();
const OpDef& ScatterAddDimOp();
const OpDef& IndexSelectOp();
const OpDef& IndexSelectBackwardOp();

TensorList IndexSelectBackward(const BackwardContext& c) {
  return {autograd::CallOp1(IndexSelectBackwardOp(), {c.grad_outputs[0], c.inputs[1]}, c.attrs), Tensor()};
}
TensorList IndexSelectBackwardBackward(const BackwardContext& c) {
  return {IndexSelectDim(c.grad_outputs[0], c.attrs.GetInt("dim"), c.inputs[1]), Tensor()};
}

TensorList GatherDimBackward(const BackwardContext& c) {
  return {autograd::CallOp1(GatherDimBackwardOp(), {c.grad_outputs[0], c.inputs[1]}, c.attrs), Tensor()};
}
TensorList GatherDimBackwardBackward(const BackwardContext& c) {
  return {GatherDim(c.grad_outputs[0], c.attrs.GetInt("dim"), c.inputs[1]), Tensor()};
}
TensorList ScatterAddDimBackward(const BackwardContext& c) {
  const Tensor& g = c.grad_outputs[0];
  return {g, Tensor(), GatherDim(g, c.attrs.GetInt("dim"), c.inputs[1])};
}

const OpDef& GatherDimOp() {
  static const OpDef& op = RegisterOp({.name = "gather_dim", .cpu = GatherDimKernel, .backward = GatherDimBackward,
                                       .saved_inputs = {1}});
  return op;
}
const OpDef& GatherDimBackwardOp() {
  static const OpDef& op = RegisterOp({.name = "gather_dim_backward", .cpu = GatherDimBackwardKernel,
                                       .backward = GatherDimBackwardBackward, .saved_inputs = {1}});
  return op;
}
const OpDef& ScatterAddDimOp() {
  static const OpDef& op = RegisterOp({.name = "scatter_add_dim", .cpu = ScatterAddDimKernel,
                                       .backward = ScatterAddDimBackward, .saved_inputs = {1}});
  return op;
}
const OpDef& IndexSelectOp() {
  static const OpDef& op = RegisterOp({.name = "index_select_dim", .cpu = IndexSelectKernel,
                                       .backward = IndexSelectBackward, .saved_inputs = {1}});
  return op;
}
const OpDef& IndexSelectBackwardOp() {
  static const OpDef& op = RegisterOp({.name = "index_select_dim_backward", .cpu = IndexSelectBackwardKernel,
                                       .backward = IndexSelectBackwardBackward, .saved_inputs = {1}});
  return op;
}
const bool kRegistered =
    (GatherDimOp(), GatherDimBackwardOp(), ScatterAddDimOp(), IndexSelectOp(), IndexSelectBackwardOp(), true);

}  // namespace

Tensor GatherDim(const Tensor& x, int64_t dim, const Tensor& index) {
  const int64_t d = NormalizeDim(dim, std::max<int64_t>(x.dim(), 1), "gather");
  TESSEL_CHECK(x.dim() > 0, "gather: a 0-d input (gather its only element with index 0 instead)");
  return autograd::CallOp1(GatherDimOp(), {x, index}, Attrs().Set("dim", d).Set("length", x.size(d)));
}

Tensor IndexSelectDim(const Tensor& x, int64_t dim, const Tensor& index, bool rounded_adds) {
  TESSEL_CHECK(x.dim() > 0, "index_select: a 0-d input");
  const int64_t d = NormalizeDim(dim, x.dim(), "index_select");
  Attrs attrs = Attrs().Set("dim", d).Set("length", x.size(d));
  if (rounded_adds) attrs.Set("rounded_adds", true);
  return autograd::CallOp1(IndexSelectOp(), {x, index}, attrs);
}

Tensor ScatterAddDim(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  TESSEL_CHECK(self.dim() > 0, "scatter_add: a 0-d input");
  const int64_t d = NormalizeDim(dim, self.dim(), "scatter_add");
  return autograd::CallOp1(ScatterAddDimOp(), {self, index, src}, Attrs().Set("dim", d));
}

}  // namespace tessel
