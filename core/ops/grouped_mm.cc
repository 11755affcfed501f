// core/ops/grouped_mm.cc — op "grouped_mm" (grouped_mm.h): one Gemm (gemm.h) per group writing its block
// of the output in place, attr "ends" (the groups' end offsets; absent for 3-D x 3-D).
//
// Threads: groups whose products are small (a Mixture-of-Experts layer's experts each see a few dozen
// tokens), or many groups, run in parallel, one thread per group at a time (Gemm runs single-threaded inside
// a parallel region); a few large groups run in turn, each Gemm using the thread budget. The per-group loop
// in C++ is what torch's CPU fallback does too; composed in Python from slices, products and a cat it cost
// ~5 µs of interpreter per group (1.4-1.7x torch's time at 64 experts).
//
// [Note: grouped_mm backward] With T the transpose of the last two dims (a view), dA = GroupedMm(G, T(B))
// and dB = GroupedMm(T(A), G), with the same ends, in every layout: 2-D x 3-D's dA is 2-D x 3-D and its
// dB 2-D x 2-D (aᵀ [K, M] by G [M, N], split along M); 2-D x 2-D's dA is 3-D x 2-D and its dB 2-D x 3-D;
// 3-D x 2-D's dA is 2-D x 2-D and its dB 3-D x 2-D; 3-D x 3-D's are 3-D x 3-D. Parts of an operand no
// group reads (past ends.back()) get zero gradients, as the output has zeros there.
#include "core/ops/grouped_mm.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/autograd/call.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/dispatch/dispatcher.h"
#include "core/ops/gemm.h"
#include "core/ops/gemm_operand.h"
#include "core/ops/view.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

std::string Describe(const Tensor& a, const Tensor& b, const std::vector<int64_t>& ends) {
  std::string text = "grouped_mm: " + ShapeStr(a.sizes()) + " x " + ShapeStr(b.sizes());
  if (!ends.empty()) text += " with offsets " + ShapeStr(ends);
  return text;
}

// The output shape, after torch's checks (and the offsets' range, which torch does not check).
Shape CheckedOutputShape(const Tensor& a, const Tensor& b, const std::vector<int64_t>& ends) {
  const std::string call = Describe(a, b, ends);
  TESSEL_CHECK_CODE(ErrorCode::kInvalidArgument, IsFloating(a.dtype()) && a.dtype() == b.dtype(), call,
                    ": operands must share one floating dtype, got ", DTypeName(a.dtype()), " and ",
                    DTypeName(b.dtype()));
  TESSEL_CHECK_CODE(ErrorCode::kInvalidArgument, (a.dim() == 2 || a.dim() == 3) && (b.dim() == 2 || b.dim() == 3),
                    call, ": operands must be 2-D or 3-D");
  const bool a2 = a.dim() == 2, b2 = b.dim() == 2;
  TESSEL_CHECK_CODE(ErrorCode::kInvalidArgument, (a2 || b2) == !ends.empty(), call,
                    ": offsets are needed with a 2-D operand and refused for 3-D x 3-D");
  TESSEL_CHECK_CODE(ErrorCode::kInvalidArgument, a.size(-1) == b.size(-2), call,
                    ": contraction dimension of mat_a and mat_b must match");
  const int64_t groups = a2 && b2 ? static_cast<int64_t>(ends.size()) : (a2 ? b.size(0) : a.size(0));
  TESSEL_CHECK_CODE(ErrorCode::kInvalidArgument,
                    (a2 && b2) || ends.empty() || groups == static_cast<int64_t>(ends.size()), call, ": ",
                    ends.size(), " offsets for ", groups, " groups");
  TESSEL_CHECK_CODE(ErrorCode::kInvalidArgument, a2 || b2 || a.size(0) == b.size(0), call,
                    ": batched dimension has to match");
  const int64_t jagged = a2 && !b2 ? a.size(0) : (a2 ? a.size(1) : b.size(1));
  int64_t start = 0;
  for (int64_t e : ends) {
    TESSEL_CHECK_CODE(ErrorCode::kInvalidArgument, start <= e && e <= jagged, call,
                      ": offsets must be non-decreasing and at most ", jagged,
                      " (the size of the dimension they split)");
    start = e;
  }
  if (a2 && !b2) return {a.size(0), b.size(2)};
  if (a2) return {groups, a.size(0), b.size(1)};
  if (b2) return {a.size(1), b.size(1)};
  return {a.size(0), a.size(1), b.size(2)};
}

// Rows [s, e) or columns [s, e) of a 2-D tensor as a MatRef.
MatRef Rows(const Tensor& t, int64_t s, int64_t e) {
  MatRef m = MatOf(t, s * t.stride(0));
  m.rows = e - s;
  return m;
}
MatRef Cols(const Tensor& t, int64_t s, int64_t e) {
  MatRef m = MatOf(t, s * t.stride(1));
  m.cols = e - s;
  return m;
}

// One group's product: its operand blocks and where its block of the output starts (in elements; the output's
// rows are `n_out` apart).
struct GroupProduct {
  MatRef a, b;
  int64_t out_offset;
};

// The products of the groups that are not empty (grouped_mm.h's table; an empty group writes nothing, its block,
// if any, stays zero).
std::vector<GroupProduct> GroupProducts(const Tensor& A, const Tensor& B, const std::vector<int64_t>& ends,
                                        int64_t n_out) {
  const bool a2 = A.dim() == 2, b2 = B.dim() == 2;
  const int64_t groups = ends.empty() ? A.size(0) : static_cast<int64_t>(ends.size());
  std::vector<GroupProduct> out;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t s = ends.empty() || g == 0 ? 0 : ends[static_cast<size_t>(g - 1)];
    const int64_t e = ends.empty() ? 1 : ends[static_cast<size_t>(g)];
    if (e == s) continue;
    if (a2 && !b2) {
      out.push_back({Rows(A, s, e), MatOf(B, g * B.stride(0)), s * n_out});
    } else if (a2) {
      out.push_back({Cols(A, s, e), Rows(B, s, e), g * A.size(0) * n_out});
    } else if (b2) {
      out.push_back({MatOf(A, g * A.stride(0)), Cols(B, s, e), s});
    } else {
      out.push_back({MatOf(A, g * A.stride(0)), MatOf(B, g * B.stride(0)), g * A.size(1) * n_out});
    }
  }
  return out;
}

TensorList GroupedMmKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor& a = in[0];
  const Tensor& b = in[1];
  const std::vector<int64_t> ends = attrs.Has("ends") ? attrs.GetInts("ends") : std::vector<int64_t>{};
  const Shape out_shape = CheckedOutputShape(a, b, ends);
  const DType od = GemmOperandDType(a.dtype());
  const DType compute = a.dtype() == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  const Tensor A = GemmOperand(a, od), B = GemmOperand(b, od);
  const bool a2 = a.dim() == 2, b2 = b.dim() == 2;
  // Zeros where no group writes: past ends.back(), and (2-D x 2-D) an empty group's block.
  const bool covered = ends.empty() || (!(a2 && b2) && ends.back() == (a2 ? a.size(0) : b.size(1)));
  Tensor acc = covered ? Empty(out_shape, compute, a.device()) : Zeros(out_shape, compute, a.device());
  char* pc = static_cast<char*>(acc.raw_data());
  const int64_t esz = ElementSize(compute);
  const int64_t n_out = out_shape.back();
  const std::vector<GroupProduct> products = GroupProducts(A, B, ends, n_out);
  int64_t largest = 0;
  for (const GroupProduct& p : products) largest = std::max(largest, p.a.rows * p.a.cols * p.b.cols);
  auto run = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const GroupProduct& p = products[static_cast<size_t>(i)];
      Gemm(od, p.a, p.b, pc + p.out_offset * esz, n_out, false);
    }
  };
  // (32 experts of ~128 x 128 x 256 in parallel: moe_layer.py 45.0 against 42.4 steps/s one after another, means
  // of four alternated runs, within the VM's noise)
  const int64_t n = static_cast<int64_t>(products.size());
  if (GemmsInParallel(n, largest)) {
    ParallelFor(0, n, 1, run);
  } else {
    run(0, n);
  }
  if (acc.dtype() == a.dtype()) return {acc};
  Tensor out = Empty(out_shape, a.dtype(), a.device());
  CopyInto(out, acc);  // 16-bit: round once
  return {out};
}

const OpDef& GroupedMmOp();

Tensor CallGroupedMm(const Tensor& a, const Tensor& b, const Attrs& attrs) {
  return autograd::CallOp1(GroupedMmOp(), {a, b}, attrs);
}

// [Note: grouped_mm backward]
TensorList GroupedMmBackward(const BackwardContext& c) {
  const Tensor& g = c.grad_outputs[0];
  Tensor ga, gb;
  if (c.needs_input_grad[0]) ga = CallGroupedMm(g, Transpose(c.inputs[1], -2, -1), c.attrs);
  if (c.needs_input_grad[1]) gb = CallGroupedMm(Transpose(c.inputs[0], -2, -1), g, c.attrs);
  return {ga, gb};
}

const OpDef& kGroupedMm = RegisterOp({.name = "grouped_mm", .cpu = GroupedMmKernel, .backward = GroupedMmBackward,
                                      .saved_input_readers = {{1}, {0}}});

const OpDef& GroupedMmOp() { return kGroupedMm; }

}  // namespace

Tensor GroupedMm(const Tensor& a, const Tensor& b, const std::vector<int64_t>& ends) {
  Attrs attrs;
  if (!ends.empty()) attrs.Set("ends", ends);
  return CallGroupedMm(a, b, attrs);
}

}  // namespace tessel
