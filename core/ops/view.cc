// core/ops/view.cc — view, narrow, select, slice, transpose, permute, expand, contiguous, (un)squeeze,
// copy_: CPU kernels, backward formulas, and the composites Reshape / Chunk / Split / Flatten.
//
// Invariant: every view op is a registered single-output OpDef with is_view = true whose kernel returns
// MakeView(...) over the input's storage (no data is copied); Chunk/Split are built from Narrow calls, so
// every piece is its own "narrow" node and no multi-output view node exists.
//
// [Note: public function vs kernel in view ops]
// The public function validates the call against x's shape (the global shape for a DTensor) and records
// normalized attrs — non-negative dims, resolved -1, clamped slice bounds — plus `input_shape` where the
// backward needs it. Kernels, backward formulas and sharding rules therefore read one canonical form, and
// each *_backward op takes exactly the attrs of its forward op. View ops save no inputs: their backward
// needs only shapes, and saving would make a legal in-place write to the base fail autograd's version
// check for nothing.
//
// Example:
//   Tensor q_BHTD = Transpose(View(q_BTC, {B, T, H, D}), 1, 2);   // aliases q_BTC, no copy
//   TensorList pieces = Chunk(x_BTC, 3, -1);                        // three "narrow" views
//   // backward of pieces[1]: narrow_backward(grad) = zeros of x's shape with grad in pieces[1]'s slab
#include "core/ops/view.h"

#include <algorithm>
#include <numeric>

#include "core/autograd/call.h"
#include "core/base/error.h"
#include "core/ops/elementwise.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

using autograd::CallOp1;

// ---- argument normalization (public functions and kernels share it; idempotent) ----------------------

void CheckHasDims(std::span<const int64_t> sizes, const char* op) {
  TESSEL_CHECK(!sizes.empty(), op, ": cannot be applied to a 0-dim tensor");
}

// A position for a new dim in a tensor of `ndim` dims: [-(ndim + 1), ndim].
int64_t NormalizeNewDim(int64_t dim, int64_t ndim, const char* op) {
  TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, dim >= -(ndim + 1) && dim <= ndim, op, ": dim ", dim,
                    " out of range for inserting a dim into a tensor of ", ndim, " dims (expected [", -(ndim + 1),
                    ", ", ndim, "])");
  return dim < 0 ? dim + ndim + 1 : dim;
}

struct NarrowArgs {
  int64_t dim, start, length;
};

NarrowArgs NormalizeNarrow(const Shape& sizes, int64_t dim, int64_t start, int64_t length) {
  CheckHasDims(sizes, "narrow");
  dim = NormalizeDim(dim, static_cast<int64_t>(sizes.size()), "narrow");
  const int64_t n = sizes[dim];
  TESSEL_CHECK(length >= 0, "narrow: length must be non-negative, got ", length);
  TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, start >= -n && start <= n, "narrow: start ", start,
                    " out of range for dim ", dim, " of size ", n, " (shape ", ShapeStr(sizes), ")");
  if (start < 0) start += n;
  TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, start <= n - length, "narrow: start (", start, ") + length (", length,
                    ") exceeds the size (", n, ") of dim ", dim, " (shape ", ShapeStr(sizes), ")");
  return {dim, start, length};
}

std::pair<int64_t, int64_t> NormalizeSelect(const Shape& sizes, int64_t dim, int64_t index) {
  CheckHasDims(sizes, "select");
  dim = NormalizeDim(dim, static_cast<int64_t>(sizes.size()), "select");
  const int64_t n = sizes[dim];
  TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, index >= -n && index < n, "select: index ", index,
                    " out of range for dim ", dim, " of size ", n, " (shape ", ShapeStr(sizes), ")");
  return {dim, index < 0 ? index + n : index};
}

struct SliceArgs {
  int64_t dim, start, end, step;
};

// Python slicing: negative bounds count from the end, then both clamp to [0, n] with end >= start.
SliceArgs NormalizeSlice(const Shape& sizes, int64_t dim, int64_t start, int64_t end, int64_t step) {
  CheckHasDims(sizes, "slice");
  dim = NormalizeDim(dim, static_cast<int64_t>(sizes.size()), "slice");
  TESSEL_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = sizes[dim];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  return {dim, start, end, step};
}

// torch's inferExpandGeometry: -1 keeps a dim, only size-1 dims expand (stride 0), new leading dims.
std::pair<Shape, Shape> ExpandGeometry(const Shape& sizes, const Shape& strides, const std::vector<int64_t>& shape) {
  const int64_t ndim = static_cast<int64_t>(shape.size());
  const int64_t xdim = static_cast<int64_t>(sizes.size());
  TESSEL_CHECK(ndim >= xdim, "expand: the number of sizes provided (", ndim,
               ") must be greater or equal to the number of dims of the tensor (", xdim, "); target ",
               ShapeStr(shape), ", tensor ", ShapeStr(sizes));
  Shape out_sizes(ndim), out_strides(ndim);
  for (int64_t i = ndim - 1; i >= 0; --i) {
    const int64_t d = i - (ndim - xdim);
    int64_t size = d >= 0 ? sizes[d] : 1;
    int64_t stride = d >= 0 ? strides[d] : (i + 1 < ndim ? out_sizes[i + 1] * out_strides[i + 1] : 1);
    int64_t target = shape[i];
    if (target == -1) {
      TESSEL_CHECK(d >= 0, "expand: size -1 is not allowed in a new leading dim ", i, "; target ", ShapeStr(shape),
                   ", tensor ", ShapeStr(sizes));
      target = size;
    }
    TESSEL_CHECK(target >= 0, "expand: invalid size ", target, " in target ", ShapeStr(shape));
    if (size != target) {
      TESSEL_CHECK(size == 1, "expand: the expanded size (", target, ") must match the existing size (", size,
                   ") at non-singleton dim ", i, "; target ", ShapeStr(shape), ", tensor ", ShapeStr(sizes));
      size = target;
      stride = 0;
    }
    out_sizes[i] = size;
    out_strides[i] = stride;
  }
  return {out_sizes, out_strides};
}

std::vector<int64_t> NormalizePermutation(const Shape& sizes, const std::vector<int64_t>& dims) {
  const int64_t ndim = static_cast<int64_t>(sizes.size());
  TESSEL_CHECK(static_cast<int64_t>(dims.size()) == ndim, "permute: got ", dims.size(), " dims ", ShapeStr(dims),
               " for a tensor of shape ", ShapeStr(sizes));
  std::vector<int64_t> out(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    out[i] = NormalizeDim(dims[i], ndim, "permute");
    TESSEL_CHECK(!seen[out[i]], "permute: dims ", ShapeStr(dims), " is not a permutation (dim ", out[i],
                 " repeats) for a tensor of shape ", ShapeStr(sizes));
    seen[out[i]] = true;
  }
  return out;
}

template <typename T>
std::vector<T> Erase(std::vector<T> v, int64_t i) {
  v.erase(v.begin() + i);
  return v;
}

// ---- kernels (metadata only: every view kernel returns an alias of input 0) --------------------------

TensorList ViewKernel(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  const std::vector<int64_t>& shape = a.GetInts("shape");
  TESSEL_CHECK(NumElements(shape) == x.numel(), "view: shape ", ShapeStr(shape), " is invalid for input of shape ",
               ShapeStr(x.sizes()));
  Shape strides;
  TESSEL_CHECK(ComputeViewStrides(x.sizes(), x.strides(), shape, &strides),
               "view: view size is not compatible with input tensor's size and stride (at least one dimension "
               "spans across two contiguous subspaces): input ", ShapeStr(x.sizes()), " with strides ",
               ShapeStr(x.strides()), ", requested ", ShapeStr(shape), "; use Reshape(...) instead");
  return {MakeView(x, shape, std::move(strides), x.storage_offset())};
}

TensorList NarrowKernel(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  const NarrowArgs r = NormalizeNarrow(x.sizes(), a.GetInt("dim"), a.GetInt("start"), a.GetInt("length"));
  Shape sizes = x.sizes();
  sizes[r.dim] = r.length;
  return {MakeView(x, std::move(sizes), x.strides(), x.storage_offset() + r.start * x.stride(r.dim))};
}

TensorList SelectKernel(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  const auto [dim, index] = NormalizeSelect(x.sizes(), a.GetInt("dim"), a.GetInt("index"));
  return {MakeView(x, Erase(x.sizes(), dim), Erase(x.strides(), dim), x.storage_offset() + index * x.stride(dim))};
}

TensorList SliceKernel(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  const SliceArgs s =
      NormalizeSlice(x.sizes(), a.GetInt("dim"), a.GetInt("start"), a.GetInt("end"), a.GetInt("step"));
  Shape sizes = x.sizes(), strides = x.strides();
  sizes[s.dim] = (s.end - s.start + s.step - 1) / s.step;
  strides[s.dim] *= s.step;
  return {MakeView(x, std::move(sizes), std::move(strides), x.storage_offset() + s.start * x.stride(s.dim))};
}

TensorList TransposeKernel(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  const int64_t d0 = NormalizeDim(a.GetInt("dim0"), x.dim(), "transpose");
  const int64_t d1 = NormalizeDim(a.GetInt("dim1"), x.dim(), "transpose");
  Shape sizes = x.sizes(), strides = x.strides();
  if (x.dim() > 0) {
    std::swap(sizes[d0], sizes[d1]);
    std::swap(strides[d0], strides[d1]);
  }
  return {MakeView(x, std::move(sizes), std::move(strides), x.storage_offset())};
}

TensorList PermuteKernel(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  const std::vector<int64_t> dims = NormalizePermutation(x.sizes(), a.GetInts("dims"));
  Shape sizes(dims.size()), strides(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    sizes[i] = x.size(dims[i]);
    strides[i] = x.stride(dims[i]);
  }
  return {MakeView(x, std::move(sizes), std::move(strides), x.storage_offset())};
}

TensorList ExpandKernel(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  auto [sizes, strides] = ExpandGeometry(x.sizes(), x.strides(), a.GetInts("shape"));
  return {MakeView(x, std::move(sizes), std::move(strides), x.storage_offset())};
}

TensorList UnsqueezeKernel(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  const int64_t dim = NormalizeNewDim(a.GetInt("dim"), x.dim(), "unsqueeze");
  Shape sizes = x.sizes(), strides = x.strides();
  const int64_t stride = dim >= x.dim() ? 1 : sizes[dim] * strides[dim];  // torch's choice
  sizes.insert(sizes.begin() + dim, 1);
  strides.insert(strides.begin() + dim, stride);
  return {MakeView(x, std::move(sizes), std::move(strides), x.storage_offset())};
}

// attrs "dims": ascending dims of size 1 to remove (the public function picks them).
TensorList SqueezeKernel(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  const std::vector<int64_t>& dims = a.GetInts("dims");
  Shape sizes = x.sizes(), strides = x.strides();
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
    TESSEL_CHECK(*it >= 0 && *it < x.dim() && x.size(*it) == 1, "squeeze: dim ", *it,
                 " is not a size-1 dim of shape ", ShapeStr(x.sizes()));
    sizes.erase(sizes.begin() + *it);
    strides.erase(strides.begin() + *it);
  }
  return {MakeView(x, std::move(sizes), std::move(strides), x.storage_offset())};
}

TensorList ContiguousKernel(std::span<const Tensor> in, const Attrs&) {
  const Tensor& x = in[0];
  if (x.is_contiguous()) return {x};  // CallOp gives the caller a fresh handle when it records
  Tensor out = Empty(x.sizes(), x.dtype(), x.device());
  CopyInto(out, x);
  return {out};
}

TensorList CopyKernel(std::span<const Tensor> in, const Attrs&) {
  const Tensor& dst = in[0];
  Tensor src = in[1];
  for (int64_t i = 0; i < dst.dim(); ++i) {
    TESSEL_CHECK(dst.stride(i) != 0 || dst.size(i) <= 1, "copy_: unsupported operation: more than one element of "
                 "the written-to tensor (shape ", ShapeStr(dst.sizes()), ", strides ", ShapeStr(dst.strides()),
                 ") refers to a single memory location; call Contiguous() on it first");
  }
  if (src.numel() > 0 && dst.impl()->storage().is_same(src.impl()->storage())) {
    // CopyInto does not support overlapping memory: stage src (e.g. x.copy_(x.t())).
    Tensor staged = Empty(src.sizes(), src.dtype(), src.device());
    CopyInto(staged, src);
    src = staged;
  }
  CopyInto(dst, src);
  return {dst};
}

// A *_backward kernel: zeros of attrs["input_shape"] with `grad` written into the region that the
// forward view kernel `view` selects for the same attrs.
TensorList ScatterIntoZeros(std::span<const Tensor> in, const Attrs& a, TensorList (*view)(std::span<const Tensor>,
                                                                                          const Attrs&),
                            const char* op) {
  const Tensor& grad = in[0];
  Tensor z = Zeros(a.GetInts("input_shape"), grad.dtype(), grad.device());
  const Tensor region = view(std::span<const Tensor>(&z, 1), a)[0];
  TESSEL_CHECK(region.sizes() == grad.sizes(), op, ": gradient of shape ", ShapeStr(grad.sizes()),
               " does not match the selected region ", ShapeStr(region.sizes()), " of input shape ",
               ShapeStr(z.sizes()), " (", a.ToString(), ")");
  CopyInto(region, grad);
  return {z};
}

// ---- op definitions and backward formulas ------------------------------------------------------------

const OpDef& RegisterView(std::string name, Kernel cpu, BackwardFn backward) {
  return RegisterOp({.name = std::move(name), .cpu = std::move(cpu), .backward = std::move(backward),
                     .save_inputs = false, .is_view = true});
}

const Tensor& G(const BackwardContext& c) { return c.grad_outputs[0]; }

extern const OpDef& kNarrow;
extern const OpDef& kSelect;
extern const OpDef& kSlice;

const OpDef& kView = RegisterView("view", ViewKernel, [](const BackwardContext& c) -> TensorList {
  return {Reshape(G(c), c.attrs.GetInts("input_shape"))};
});
const OpDef& kNarrowBackward = RegisterOp(
    {.name = "narrow_backward",
     .cpu = [](auto in, auto& a) { return ScatterIntoZeros(in, a, NarrowKernel, "narrow_backward"); },
     .backward = [](const BackwardContext& c) -> TensorList { return {CallOp1(kNarrow, {G(c)}, c.attrs)}; },
     .save_inputs = false});
const OpDef& kSelectBackward = RegisterOp(
    {.name = "select_backward",
     .cpu = [](auto in, auto& a) { return ScatterIntoZeros(in, a, SelectKernel, "select_backward"); },
     .backward = [](const BackwardContext& c) -> TensorList { return {CallOp1(kSelect, {G(c)}, c.attrs)}; },
     .save_inputs = false});
const OpDef& kSliceBackward = RegisterOp(
    {.name = "slice_backward",
     .cpu = [](auto in, auto& a) { return ScatterIntoZeros(in, a, SliceKernel, "slice_backward"); },
     .backward = [](const BackwardContext& c) -> TensorList { return {CallOp1(kSlice, {G(c)}, c.attrs)}; },
     .save_inputs = false});
const OpDef& kNarrow = RegisterView("narrow", NarrowKernel, [](const BackwardContext& c) -> TensorList {
  return {CallOp1(kNarrowBackward, {G(c)}, c.attrs)};
});
const OpDef& kSelect = RegisterView("select", SelectKernel, [](const BackwardContext& c) -> TensorList {
  return {CallOp1(kSelectBackward, {G(c)}, c.attrs)};
});
const OpDef& kSlice = RegisterView("slice", SliceKernel, [](const BackwardContext& c) -> TensorList {
  return {CallOp1(kSliceBackward, {G(c)}, c.attrs)};
});
const OpDef& kTranspose = RegisterView("transpose", TransposeKernel, [](const BackwardContext& c) -> TensorList {
  return {Transpose(G(c), c.attrs.GetInt("dim0"), c.attrs.GetInt("dim1"))};
});
const OpDef& kPermute = RegisterView("permute", PermuteKernel, [](const BackwardContext& c) -> TensorList {
  const std::vector<int64_t>& dims = c.attrs.GetInts("dims");
  std::vector<int64_t> inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inverse[dims[i]] = static_cast<int64_t>(i);
  return {Permute(G(c), inverse)};
});
const OpDef& kExpand = RegisterView("expand", ExpandKernel, [](const BackwardContext& c) -> TensorList {
  return {SumToSize(G(c), c.attrs.GetInts("input_shape"))};
});
const OpDef& kUnsqueeze = RegisterView("unsqueeze", UnsqueezeKernel, [](const BackwardContext& c) -> TensorList {
  return {Squeeze(G(c), c.attrs.GetInt("dim"))};
});
const OpDef& kSqueeze = RegisterView("squeeze", SqueezeKernel, [](const BackwardContext& c) -> TensorList {
  Tensor g = G(c);
  for (int64_t d : c.attrs.GetInts("dims")) g = Unsqueeze(g, d);  // ascending: restores original positions
  return {g};
});
// Not is_view: it aliases only inputs that are already contiguous.
const OpDef& kContiguous = RegisterOp(
    {.name = "contiguous",
     .cpu = ContiguousKernel,
     .backward = [](const BackwardContext& c) -> TensorList { return {G(c)}; },
     .save_inputs = false});
const OpDef& kCopy = RegisterOp({.name = "copy_", .cpu = CopyKernel, .is_inplace = true});

std::vector<Tensor> NarrowPieces(const Tensor& x, int64_t dim, const std::vector<int64_t>& sizes) {
  TensorList out;
  out.reserve(sizes.size());
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(Narrow(x, dim, start, s));
    start += s;
  }
  return out;
}

}  // namespace

Tensor View(const Tensor& x, const std::vector<int64_t>& shape) {
  const Shape s = InferShape(shape, x.numel(), "view");
  return CallOp1(kView, {x}, Attrs().Set("shape", s).Set("input_shape", x.sizes()));
}

Tensor Reshape(const Tensor& x, const std::vector<int64_t>& shape) {
  const Shape s = InferShape(shape, x.numel(), "reshape");
  Shape strides;
  if (ComputeViewStrides(x.sizes(), x.strides(), s, &strides)) return View(x, s);
  return View(Contiguous(x), s);
}

Tensor Narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  const NarrowArgs r = NormalizeNarrow(x.sizes(), dim, start, length);
  return CallOp1(kNarrow, {x},
                 Attrs().Set("dim", r.dim).Set("start", r.start).Set("length", r.length).Set("input_shape", x.sizes()));
}

Tensor Select(const Tensor& x, int64_t dim, int64_t index) {
  const auto [d, i] = NormalizeSelect(x.sizes(), dim, index);
  return CallOp1(kSelect, {x}, Attrs().Set("dim", d).Set("index", i).Set("input_shape", x.sizes()));
}

Tensor Slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  const SliceArgs s = NormalizeSlice(x.sizes(), dim, start, end, step);
  return CallOp1(kSlice, {x},
                 Attrs().Set("dim", s.dim).Set("start", s.start).Set("end", s.end).Set("step", s.step).Set(
                     "input_shape", x.sizes()));
}

// torch.chunk exactly: pieces of ceil(n / chunks) from Split, so trailing pieces that would be empty are
// not returned (n=5, chunks=4 → [2, 2, 1]; n=6, chunks=4 → [2, 2, 2]). The one exception is n == 0:
// then `chunks` empty pieces are returned. (ChunkSizes in shape.h always has `chunks` entries — that is
// DTensor's Shard layout, not this function.)
TensorList Chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  CheckHasDims(x.sizes(), "chunk");
  TESSEL_CHECK(chunks > 0, "chunk: chunks must be positive, got ", chunks);
  const int64_t d = NormalizeDim(dim, x.dim(), "chunk");
  const int64_t n = x.size(d);
  if (n == 0) return NarrowPieces(x, d, std::vector<int64_t>(chunks, 0));
  return Split(x, (n + chunks - 1) / chunks, d);
}

// torch.split: ceil(n / split_size) pieces of split_size, the last one smaller; at least one piece (the
// whole dim when split_size >= n, one empty piece when n == 0).
TensorList Split(const Tensor& x, int64_t split_size, int64_t dim) {
  CheckHasDims(x.sizes(), "split");
  const int64_t d = NormalizeDim(dim, x.dim(), "split");
  const int64_t n = x.size(d);
  TESSEL_CHECK(split_size > 0 || (split_size == 0 && n == 0), "split: split_size must be positive (0 only for an "
               "empty dim), got ", split_size, " for dim ", d, " of shape ", ShapeStr(x.sizes()));
  const int64_t pieces = split_size == 0 ? 1 : std::max<int64_t>((n + split_size - 1) / split_size, 1);
  std::vector<int64_t> sizes(pieces, split_size);
  sizes.back() = n - split_size * (pieces - 1);
  return NarrowPieces(x, d, sizes);
}

TensorList SplitWithSizes(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  CheckHasDims(x.sizes(), "split_with_sizes");
  const int64_t d = NormalizeDim(dim, x.dim(), "split_with_sizes");
  const bool non_negative = std::all_of(sizes.begin(), sizes.end(), [](int64_t s) { return s >= 0; });
  TESSEL_CHECK(non_negative && std::accumulate(sizes.begin(), sizes.end(), int64_t{0}) == x.size(d),
               "split_with_sizes: sizes ", ShapeStr(sizes), " must be non-negative and sum exactly to ", x.size(d),
               " (the size of dim ", d, " of shape ", ShapeStr(x.sizes()), ")");
  return NarrowPieces(x, d, sizes);
}

Tensor Transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  const int64_t d0 = NormalizeDim(dim0, x.dim(), "transpose");
  const int64_t d1 = NormalizeDim(dim1, x.dim(), "transpose");
  return CallOp1(kTranspose, {x}, Attrs().Set("dim0", d0).Set("dim1", d1));
}

Tensor Permute(const Tensor& x, const std::vector<int64_t>& dims) {
  return CallOp1(kPermute, {x}, Attrs().Set("dims", NormalizePermutation(x.sizes(), dims)));
}

Tensor Expand(const Tensor& x, const std::vector<int64_t>& shape) {
  Shape resolved = ExpandGeometry(x.sizes(), x.strides(), shape).first;
  return CallOp1(kExpand, {x}, Attrs().Set("shape", std::move(resolved)).Set("input_shape", x.sizes()));
}

// Like torch, a contiguous dense input is returned as is (x.contiguous() is x).
Tensor Contiguous(const Tensor& x) {
  if (!x.is_distributed() && x.is_contiguous()) return x;
  return CallOp1(kContiguous, {x});
}

Tensor Unsqueeze(const Tensor& x, int64_t dim) {
  return CallOp1(kUnsqueeze, {x}, Attrs().Set("dim", NormalizeNewDim(dim, x.dim(), "unsqueeze")));
}

Tensor Squeeze(const Tensor& x, int64_t dim) {
  const int64_t d = NormalizeDim(dim, x.dim(), "squeeze");
  std::vector<int64_t> dims;
  if (x.dim() > 0 && x.size(d) == 1) dims.push_back(d);
  return CallOp1(kSqueeze, {x}, Attrs().Set("dims", std::move(dims)));
}

Tensor Squeeze(const Tensor& x) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (x.size(d) == 1) dims.push_back(d);
  }
  return CallOp1(kSqueeze, {x}, Attrs().Set("dims", std::move(dims)));
}

// torch.flatten: a 0-dim tensor becomes [1]; start == end returns x itself; otherwise Reshape (a view
// when strides allow).
Tensor Flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  if (x.dim() == 0) return Reshape(x, {1});
  const int64_t s = NormalizeDim(start_dim, x.dim(), "flatten");
  const int64_t e = NormalizeDim(end_dim, x.dim(), "flatten");
  TESSEL_CHECK(s <= e, "flatten: start_dim ", start_dim, " cannot come after end_dim ", end_dim, " (shape ",
               ShapeStr(x.sizes()), ")");
  if (s == e) return x;
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().begin() + s);
  shape.push_back(NumElements(std::span<const int64_t>(x.sizes()).subspan(s, e - s + 1)));
  shape.insert(shape.end(), x.sizes().begin() + e + 1, x.sizes().end());
  return Reshape(x, shape);
}

void CopyInPlace(const Tensor& dst, const Tensor& src) { autograd::CallOp(kCopy, {dst, src}); }

}  // namespace tessel
