// core/ops/pool.cc — ops "window_max", "gather_last_dim" and "scatter_add_last_dim" (pool.h): CPU kernels
// (rows split over the thread pool; each output computed by one thread in one order), backward formulas.
//
// Why: the composed max pool (gather the windows with the embedding op, then max over a middle dim)
// cost 42 ms of a small CNN's 184 ms training step on one MaxPool2d of [64, 32, 32, 32] (Xeon family 6
// model 167, 2 threads); this reads each window tap once, in place.
#include "core/ops/pool.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/autograd/call.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/dispatch/op.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

constexpr int64_t kGrain = 1 << 14;  // elements of work per thread slice, at least

void CheckIndex(const char* op, const Tensor& idx, int64_t length) {
  TESSEL_CHECK(idx.dtype() == DType::kInt64, op, ": index must be int64, got ", idx.dtype());
  const int64_t* p = idx.data_ptr<int64_t>();
  const int64_t n = idx.numel();  // (an out-of-line call: in the loop condition it cost as much as the check)
  bool ok = true;  // one vectorized pass; the error's position is looked for only on failure
  for (int64_t i = 0; i < n; ++i) ok &= static_cast<uint64_t>(p[i]) < static_cast<uint64_t>(length);
  if (ok) return;
  for (int64_t i = 0; i < n; ++i) {
    TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, p[i] >= 0 && p[i] < length, op, ": index ", p[i], " at flat position ",
                      i, " of index ", ShapeStr(idx.sizes()), " is outside [0, ", length, ")");
  }
}

// in: x [P, L], index [K, O] -> values [P, O], arg [P, O]
TensorList WindowMaxKernel(std::span<const Tensor> in, const Attrs&) {
  const Tensor x = DenseOrCopy(in[0]), index = DenseOrCopy(in[1]);
  TESSEL_CHECK(x.dim() == 2 && index.dim() == 2 && index.size(0) >= 1, "window_max: expected x [P, L] and index [K, O] ",
               "with K >= 1, got ", ShapeStr(x.sizes()), " and ", ShapeStr(index.sizes()));
  const int64_t planes = x.size(0), length = x.size(1), taps = index.size(0), outs = index.size(1);
  CheckIndex("window_max", index, length);
  Tensor values = Empty({planes, outs}, x.dtype(), x.device());
  Tensor arg = Empty({planes, outs}, DType::kInt64, x.device());
  const int64_t* pi = index.data_ptr<int64_t>();
  TESSEL_DISPATCH_FLOATING_TYPES(x.dtype(), "window_max", [&] {
    using T = scalar_t;
    using C = ComputeT<T>;
    const T* px = static_cast<const T*>(x.raw_data());
    T* pv = static_cast<T*>(values.raw_data());
    int64_t* pa = arg.data_ptr<int64_t>();
    const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(1, taps * outs));
    ParallelFor(0, planes, grain, [&](int64_t p0, int64_t p1) {
      std::vector<C> best(static_cast<size_t>(outs));
      for (int64_t p = p0; p < p1; ++p) {
        const T* row = px + p * length;
        int64_t* a = pa + p * outs;
        for (int64_t o = 0; o < outs; ++o) best[o] = ToCompute(row[pi[o]]), a[o] = pi[o];
        for (int64_t k = 1; k < taps; ++k) {
          const int64_t* ik = pi + k * outs;
          for (int64_t o = 0; o < outs; ++o) {  // selects, not branches: v > best is a coin flip on data
            const C v = ToCompute(row[ik[o]]);
            const bool take = v > best[o] || v != v;  // (v != v: NaN)
            best[o] = take ? v : best[o];
            a[o] = take ? ik[o] : a[o];
          }
        }
        for (int64_t o = 0; o < outs; ++o) pv[p * outs + o] = FromCompute<T>(best[o]);
      }
    });
  });
  return {values, arg};
}

void CheckRows(const char* op, const Tensor& a, const Tensor& idx) {
  TESSEL_CHECK(a.dim() == 2 && idx.dim() == 2 && idx.size(0) == a.size(0), op, ": expected [P, *] operands with ",
               "the same rows, got ", ShapeStr(a.sizes()), " and index ", ShapeStr(idx.sizes()));
}

// in: x [P, L], idx [P, O] -> [P, O]
TensorList GatherKernel(std::span<const Tensor> in, const Attrs&) {
  const Tensor x = DenseOrCopy(in[0]), idx = DenseOrCopy(in[1]);
  CheckRows("gather_last_dim", x, idx);
  const int64_t planes = x.size(0), length = x.size(1), outs = idx.size(1);
  CheckIndex("gather_last_dim", idx, length);
  Tensor out = Empty({planes, outs}, x.dtype(), x.device());
  const int64_t* pi = idx.data_ptr<int64_t>();
  TESSEL_DISPATCH_ALL_TYPES(x.dtype(), "gather_last_dim", [&] {  // any dtype, as torch.gather
    using T = scalar_t;
    const T* px = static_cast<const T*>(x.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    ParallelFor(0, planes, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, outs)), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        for (int64_t o = 0; o < outs; ++o) po[p * outs + o] = px[p * length + pi[p * outs + o]];
      }
    });
  });
  return {out};
}

// in: src [P, O], idx [P, O]; attr length -> [P, length]
TensorList ScatterAddKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor src = DenseOrCopy(in[0]), idx = DenseOrCopy(in[1]);
  CheckRows("scatter_add_last_dim", src, idx);
  TESSEL_CHECK(src.sizes() == idx.sizes(), "scatter_add_last_dim: source ", ShapeStr(src.sizes()), " and index ",
               ShapeStr(idx.sizes()), " must have the same shape");
  const int64_t planes = src.size(0), outs = src.size(1), length = attrs.GetInt("length");
  CheckIndex("scatter_add_last_dim", idx, length);
  const DType acc_type = src.dtype() == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  Tensor acc = Empty({planes, length}, acc_type, src.device());  // each thread zeroes its own rows
  const int64_t* pi = idx.data_ptr<int64_t>();
  TESSEL_DISPATCH_FLOATING_TYPES(src.dtype(), "scatter_add_last_dim", [&] {
    using T = scalar_t;
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const T* ps = static_cast<const T*>(src.raw_data());
    A* pa = static_cast<A*>(acc.raw_data());
    ParallelFor(0, planes, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, outs)), [&](int64_t p0, int64_t p1) {
      std::fill(pa + p0 * length, pa + p1 * length, A{0});
      for (int64_t p = p0; p < p1; ++p) {
        for (int64_t o = 0; o < outs; ++o) pa[p * length + pi[p * outs + o]] += static_cast<A>(ToCompute(ps[p * outs + o]));
      }
    });
  });
  if (acc_type == src.dtype()) return {acc};
  Tensor out = Empty(acc.sizes(), src.dtype(), src.device());
  CopyInto(out, acc);
  return {out};
}

const OpDef& ScatterAddOp();

Tensor ScatterAdd(const Tensor& src, const Tensor& idx, int64_t length) {
  return autograd::CallOp1(ScatterAddOp(), {src, idx}, Attrs().Set("length", length));
}

// window_max and gather_last_dim carry x's row length as attr "length" (set by their functions below),
// so their backward needs only the positions, not x.
TensorList WindowMaxBackward(const BackwardContext& c) {
  return {ScatterAdd(c.grad_outputs[0], c.outputs[1], c.attrs.GetInt("length")), Tensor()};
}
TensorList GatherBackward(const BackwardContext& c) {
  return {ScatterAdd(c.grad_outputs[0], c.inputs[1], c.attrs.GetInt("length")), Tensor()};
}
TensorList ScatterAddBackward(const BackwardContext& c) {
  return {GatherLastDim(c.grad_outputs[0], c.inputs[1]), Tensor()};
}

const OpDef& WindowMaxOp() {
  static const OpDef& op = RegisterOp({.name = "window_max",
                                       .cpu = WindowMaxKernel,
                                       .backward = WindowMaxBackward,
                                       .save_inputs = false,
                                       .save_outputs = true,
                                       .saved_outputs = {1},
                                       .non_differentiable_outputs = {1}});
  return op;
}
const OpDef& GatherOp() {
  static const OpDef& op =
      RegisterOp({.name = "gather_last_dim", .cpu = GatherKernel, .backward = GatherBackward, .saved_inputs = {1}});
  return op;
}
const OpDef& ScatterAddOp() {
  static const OpDef& op = RegisterOp({.name = "scatter_add_last_dim", .cpu = ScatterAddKernel,
                                       .backward = ScatterAddBackward, .saved_inputs = {1}});
  return op;
}
const bool kRegistered = (WindowMaxOp(), GatherOp(), ScatterAddOp(), true);

}  // namespace

std::pair<Tensor, Tensor> WindowMax(const Tensor& x, const Tensor& index) {
  TESSEL_CHECK(x.dim() == 2, "window_max: expected x [P, L], got ", ShapeStr(x.sizes()));
  const TensorList out = autograd::CallOp(WindowMaxOp(), {x, index}, Attrs().Set("length", x.size(1)));
  return {out[0], out[1]};
}

Tensor GatherLastDim(const Tensor& x, const Tensor& idx) {
  TESSEL_CHECK(x.dim() == 2, "gather_last_dim: expected x [P, L], got ", ShapeStr(x.sizes()));
  return autograd::CallOp1(GatherOp(), {x, idx}, Attrs().Set("length", x.size(1)));
}

Tensor ScatterAddLastDim(const Tensor& src, const Tensor& idx, int64_t length) { return ScatterAdd(src, idx, length); }

}  // namespace tessel
