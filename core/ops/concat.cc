// core/ops/concat.cc — cat and stack: CPU kernel and backward formulas.
//
// Invariant: the output is a fresh contiguous tensor; input i lands in the output slab
// [offset_i, offset_i + size_i) along `dim`, and its gradient is exactly that slab of the output gradient
// (a Narrow view for cat, a Select view for stack), so backward copies nothing.
// Kernel: a contiguous input is copied row by row with memcpy (one row = its slab within one index of the
// dims before `dim`), rows split across threads; a strided input goes through CopyInto.
//
// Example:
//   Tensor qkv_BT3C = Cat({q_BTC, k_BTC, v_BTC}, -1);
//   Tensor layers_LBC = Stack(per_layer_BC, 0);
#include "core/ops/concat.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/autograd/autocast.h"
#include "core/autograd/call.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/dispatch/dispatcher.h"
#include "core/ops/view.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

// Bytes one ParallelFor task should copy at least (below this, threading costs more than it saves).
constexpr int64_t kGrainBytes = 1 << 16;

// Checks that `in` can be concatenated along `dim` (normalized) and returns the output shape. Errors
// name `op` and list every input's shape and dtype.
Shape CatShape(std::span<const Tensor> in, int64_t dim, const char* op) {
  TESSEL_CHECK(!in.empty(), op, ": expected a non-empty list of tensors");
  for (size_t i = 0; i < in.size(); ++i) {
    TESSEL_CHECK(in[i].defined(), op, ": tensor ", i, " is undefined");
    TESSEL_CHECK(in[i].dim() > 0, op, ": zero-dimensional tensor (at position ", i, ") cannot be concatenated");
  }
  TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, dim >= 0 && dim < in[0].dim(), op, ": dim ", dim,
                    " out of range for tensors of ", in[0].dim(), " dims");
  Shape out = in[0].sizes();
  out[dim] = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const Tensor& t = in[i];
    bool ok = t.dtype() == in[0].dtype() && t.dim() == in[0].dim();
    for (int64_t d = 0; ok && d < t.dim(); ++d) ok = d == dim || t.size(d) == in[0].size(d);
    TESSEL_CHECK(ok, op, ": expected all tensors to have the same dtype and the same shape except in dim ", dim,
                 "; got ", DescribeInputs(in), " (tensor ", i, " differs from tensor 0)");
    out[dim] += t.size(dim);
  }
  return out;
}

// Copies rows [b, e) of `row` bytes each from packed `src` to `dst`, whose rows are `pitch` bytes apart.
// Short rows (cat/stack along a last dim) are copied word by word: a memcpy call per 4-byte row costs
// several times the copy itself.
template <typename W>
void CopyShortRows(char* dst, int64_t pitch, const char* src, int64_t row, int64_t b, int64_t e) {
  const int64_t words = row / static_cast<int64_t>(sizeof(W));
  for (int64_t r = b; r < e; ++r) {
    char* d = dst + r * pitch;
    const char* s = src + r * row;
    for (int64_t w = 0; w < words; ++w) std::memcpy(d + w * sizeof(W), s + w * sizeof(W), sizeof(W));
  }
}

void CopyRows(char* dst, int64_t pitch, const char* src, int64_t row, int64_t b, int64_t e) {
  if (row >= 128) {
    for (int64_t r = b; r < e; ++r) std::memcpy(dst + r * pitch, src + r * row, row);
  } else if (row % 8 == 0) {
    CopyShortRows<uint64_t>(dst, pitch, src, row, b, e);
  } else if (row % 4 == 0) {
    CopyShortRows<uint32_t>(dst, pitch, src, row, b, e);
  } else if (row % 2 == 0) {
    CopyShortRows<uint16_t>(dst, pitch, src, row, b, e);
  } else {
    CopyShortRows<uint8_t>(dst, pitch, src, row, b, e);
  }
}

// Copies `in` (validated by CatShape) into the contiguous `out` along `dim`.
void CatInto(const Tensor& out, std::span<const Tensor> in, int64_t dim) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= out.size(d);
  for (int64_t d = dim + 1; d < out.dim(); ++d) inner *= out.size(d);
  const int64_t esize = ElementSize(out.dtype());
  const int64_t out_row = out.size(dim) * inner * esize;
  char* base = static_cast<char*>(out.raw_data());
  int64_t offset = 0;  // along dim
  for (const Tensor& t : in) {
    const int64_t len = t.size(dim);
    // Device outputs take the CopyInto path for every input (a stream-ordered device copy per input;
    // core/ops/concat_cuda.cc): the memcpy rows below are host memory.
    if (t.numel() > 0 && t.is_contiguous() && out.device().is_cpu()) {
      const int64_t row = len * inner * esize;
      const char* src = static_cast<const char*>(t.raw_data());
      char* dst = base + offset * inner * esize;
      ParallelFor(0, outer, std::max<int64_t>(1, kGrainBytes / row), [&](int64_t b, int64_t e) {
        CopyRows(dst, out_row, src, row, b, e);
      });
    } else if (t.numel() > 0) {
      Shape sizes = out.sizes();
      sizes[dim] = len;
      CopyInto(MakeView(out, std::move(sizes), out.strides(), out.storage_offset() + offset * out.stride(dim)), t);
    }
    offset += len;
  }
}

TensorList CatKernel(std::span<const Tensor> in, const Attrs& a) {
  const int64_t dim = a.GetInt("dim");
  const Shape shape = CatShape(in, dim, "cat");
  Tensor out = Empty(shape, in[0].dtype(), in[0].device());
  if (out.numel() > 0) CatInto(out, in, dim);
  return {out};
}

// Checks that `in` can be stacked along `dim` (normalized against the output rank).
void CheckStackInputs(std::span<const Tensor> in, int64_t dim) {
  TESSEL_CHECK(!in.empty(), "stack: expected a non-empty list of tensors");
  for (size_t i = 0; i < in.size(); ++i) {
    TESSEL_CHECK(in[i].defined(), "stack: tensor ", i, " is undefined");
    TESSEL_CHECK(in[i].sizes() == in[0].sizes() && in[i].dtype() == in[0].dtype(),
                 "stack: expected all tensors to have the same shape and dtype; got ", DescribeInputs(in),
                 " (tensor ", i, " differs from tensor 0)");
  }
  TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, dim >= 0 && dim <= in[0].dim(), "stack: dim ", dim,
                    " out of range for tensors of ", in[0].dim(), " dims");
}

// Stack = cat of the inputs each viewed with a size-1 dim inserted at `dim`.
TensorList StackKernel(std::span<const Tensor> in, const Attrs& a) {
  const int64_t dim = a.GetInt("dim");
  CheckStackInputs(in, dim);
  TensorList views;
  views.reserve(in.size());
  for (const Tensor& t : in) {
    Shape sizes = t.sizes(), strides = t.strides();
    sizes.insert(sizes.begin() + dim, 1);
    strides.insert(strides.begin() + dim, dim < t.dim() ? t.size(dim) * t.stride(dim) : 1);
    views.push_back(MakeView(t, std::move(sizes), std::move(strides), t.storage_offset()));
  }
  Shape shape = in[0].sizes();
  shape.insert(shape.begin() + dim, static_cast<int64_t>(in.size()));
  Tensor out = Empty(shape, in[0].dtype(), in[0].device());
  if (out.numel() > 0) CatInto(out, views, dim);
  return {out};
}

TensorList CatBackward(const BackwardContext& c) {
  const int64_t dim = c.attrs.GetInt("dim");
  const std::vector<int64_t>& sizes = c.attrs.GetInts("sizes");
  TensorList grads(sizes.size());
  int64_t start = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (c.needs_input_grad[i]) grads[i] = Narrow(c.grad_outputs[0], dim, start, sizes[i]);
    start += sizes[i];
  }
  return grads;
}

TensorList StackBackward(const BackwardContext& c) {
  const int64_t dim = c.attrs.GetInt("dim");
  TensorList grads(c.needs_input_grad.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    if (c.needs_input_grad[i]) grads[i] = Select(c.grad_outputs[0], dim, static_cast<int64_t>(i));
  }
  return grads;
}

const OpDef& kCat = RegisterOp({.name = "cat", .cpu = CatKernel, .backward = CatBackward, .save_inputs = false});
const OpDef& kStack =
    RegisterOp({.name = "stack", .cpu = StackKernel, .backward = StackBackward, .save_inputs = false});

}  // namespace

// attrs: dim (normalized) and sizes (each input's size along dim, for backward).
Tensor Cat(const TensorList& given, int64_t dim) {
  // An autocast region's widest-type cast comes first: the checks below compare dtypes.
  const TensorList tensors = AutocastEnabled() ? autograd::internal::AutocastInputs(kCat, given) : given;
  TESSEL_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  TESSEL_CHECK(tensors[0].defined(), "cat: tensor 0 is undefined");
  TESSEL_CHECK(tensors[0].dim() > 0, "cat: zero-dimensional tensor (at position 0) cannot be concatenated");
  const int64_t d = NormalizeDim(dim, tensors[0].dim(), "cat");
  CatShape(tensors, d, "cat");  // errors before dispatch, on global shapes for DTensors
  std::vector<int64_t> sizes;
  sizes.reserve(tensors.size());
  for (const Tensor& t : tensors) sizes.push_back(t.size(d));
  return autograd::CallOp1(kCat, tensors, Attrs().Set("dim", d).Set("sizes", std::move(sizes)));
}

// attrs: dim, normalized against the output's rank (input rank + 1).
Tensor Stack(const TensorList& given, int64_t dim) {
  const TensorList tensors = AutocastEnabled() ? autograd::internal::AutocastInputs(kStack, given) : given;
  TESSEL_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  TESSEL_CHECK(tensors[0].defined(), "stack: tensor 0 is undefined");
  const int64_t ndim = tensors[0].dim();
  TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, dim >= -(ndim + 1) && dim <= ndim, "stack: dim ", dim,
                    " out of range for stacking tensors of ", ndim, " dims (expected [", -(ndim + 1), ", ", ndim, "])");
  const int64_t d = dim < 0 ? dim + ndim + 1 : dim;
  CheckStackInputs(tensors, d);
  return autograd::CallOp1(kStack, tensors, Attrs().Set("dim", d));
}

}  // namespace tessel
