// core/ops/strided_view.cc — as_strided (a view op with its gradient) and RecordInPlace with its CopySlices
// node. See strided_view.h for the contract.
//
// [Note: element indices]
// Both gradients here move values between a strided view and its base through the row-major index, in the
// base, of each of the view's elements (ElementIndex): the view's storage positions decomposed along the
// base's dims in decreasing stride order. That decomposition is unique exactly when the base's elements do
// not overlap (each stride exceeds the reach of the smaller ones), and it also proves every element of the
// view is one of the base's. The gradients are then a gather (Embedding of the flattened gradient as a
// one-column table) and a scatter-add (IndexAddRows): ordinary differentiable ops, so create_graph works.
#include "core/ops/strided_view.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "core/autograd/call.h"
#include "core/autograd/grad_mode.h"
#include "core/autograd/node.h"
#include "core/base/error.h"
#include "core/ops/elementwise.h"
#include "core/ops/embedding.h"
#include "core/ops/view.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

struct Geometry {
  Shape sizes, strides;
  int64_t offset = 0;
  static Geometry Of(const TensorImpl& t) { return {t.sizes(), t.strides(), t.storage_offset()}; }
  std::string ToString() const {
    return "shape " + ShapeStr(sizes) + " strides " + ShapeStr(strides) + " offset " + std::to_string(offset);
  }
};

// [Note: element indices]. `what` names the caller in errors.
Tensor ElementIndex(const Geometry& base, const Geometry& view, const std::string& what) {
  struct Dim {
    int64_t size, stride, row_major;
  };
  std::vector<Dim> dims;
  int64_t row_major = 1;
  for (int64_t d = static_cast<int64_t>(base.sizes.size()) - 1; d >= 0; --d) {
    if (base.sizes[d] > 1) dims.push_back({base.sizes[d], base.strides[d], row_major});
    row_major *= base.sizes[d];
  }
  std::sort(dims.begin(), dims.end(), [](const Dim& a, const Dim& b) { return a.stride > b.stride; });
  int64_t reach = 0;  // the largest offset the smaller-stride dims reach
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
    TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, it->stride > reach, what, ": the base tensor (", base.ToString(),
                      ") has elements that share memory (an expanded tensor); its gradient cannot be scattered. "
                      "Clone it first");
    reach += (it->size - 1) * it->stride;
  }
  const int64_t n = NumElements(view.sizes);
  Tensor idx = Empty({n}, DType::kInt64);
  int64_t* out = idx.data_ptr<int64_t>();
  const int64_t nd = static_cast<int64_t>(view.sizes.size());
  std::vector<int64_t> at(nd, 0);
  for (int64_t e = 0; e < n; ++e) {
    int64_t rel = view.offset - base.offset;
    for (int64_t d = 0; d < nd; ++d) rel += at[d] * view.strides[d];
    int64_t index = 0, left = rel;
    for (const Dim& dim : dims) {
      const int64_t j = left >= 0 ? left / dim.stride : -1;
      if (j < 0 || j >= dim.size) break;
      left -= j * dim.stride;
      index += j * dim.row_major;
    }
    TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, left == 0, what, ": element ", e, " of the view (", view.ToString(),
                      ") lies at storage position ", base.offset + rel,
                      ", which is not an element of the base (", base.ToString(), ")");
    out[e] = index;
    for (int64_t d = nd - 1; d >= 0 && ++at[d] == view.sizes[d]; --d) at[d] = 0;
  }
  return idx;
}

// The gradient of a view of `base` (the view's elements at `idx`) as a gradient of base: a scatter-add.
Tensor ScatterToBase(const Tensor& grad_view, const Tensor& idx, const Shape& base_sizes) {
  const int64_t n = idx.numel();
  return Reshape(IndexAddRows(Reshape(grad_view, {n, 1}), idx, NumElements(base_sizes)), base_sizes);
}

// The view's elements (`idx`) of a gradient of its base, in the view's shape: a gather.
Tensor GatherFromBase(const Tensor& grad_base, const Tensor& idx, const Shape& view_sizes) {
  return Reshape(Embedding(Reshape(grad_base, {NumElements(grad_base.sizes()), 1}), idx), view_sizes);
}

Geometry InputGeometry(const Attrs& a) {
  return {a.GetInts("input_shape"), a.GetInts("input_strides"), a.GetInt("input_offset")};
}
Geometry ViewGeometry(const Attrs& a) { return {a.GetInts("size"), a.GetInts("stride"), a.GetInt("storage_offset")}; }

TensorList AsStridedKernel(std::span<const Tensor> in, const Attrs& a) {
  const Geometry v = ViewGeometry(a);
  return {MakeView(in[0], v.sizes, v.strides, v.offset)};
}

const OpDef& kAsStrided = RegisterOp(
    {.name = "as_strided",
     .cpu = AsStridedKernel,
     .cuda = AsStridedKernel,  // metadata only: the same on every device
     .backward = [](const BackwardContext& c) -> TensorList {
       const Tensor idx = ElementIndex(InputGeometry(c.attrs), ViewGeometry(c.attrs), "as_strided backward");
       return {ScatterToBase(c.grad_outputs[0], idx, c.attrs.GetInts("input_shape"))};
     },
     .save_inputs = false,
     .is_view = true});

// torch's CopySlices: the grad_fn of a base written through one of its views. Gradient slot 0 is the base's
// history before the write (its gradient outside the view's elements), slot 1 the written value's (the
// gradient at the view's elements, in the view's shape).
class CopySlices final : public autograd::Node {
 public:
  CopySlices(Geometry base, Geometry view) : base_(std::move(base)), view_(std::move(view)) {}
  std::string name() const override { return "CopySlices"; }
  TensorList Apply(TensorList grads) override {
    const Tensor& g = grads[0];
    if (!g.defined()) return {Tensor(), Tensor()};
    const Tensor idx = ElementIndex(base_, view_, "CopySlices");
    const Tensor inside = GatherFromBase(g, idx, view_.sizes);
    Tensor outside;
    if (next_edges[0].valid()) outside = Sub(g, ScatterToBase(inside, idx, base_.sizes));
    return {outside, inside};
  }

 private:
  Geometry base_, view_;
};

void SetHistory(TensorImpl& t, std::shared_ptr<autograd::Node> fn, int output_nr, bool requires_grad) {
  AutogradMeta& m = t.EnsureAutogradMeta();
  m.grad_fn = std::move(fn);
  m.output_nr = output_nr;
  m.requires_grad = requires_grad;
}

// as_strided without the gradient's precondition check: for views of a root base, whose elements are the
// base's by construction (RecordInPlace has checked the written one).
Tensor AsStridedView(const Tensor& x, const Shape& sizes, const Shape& strides, int64_t offset) {
  return autograd::CallOp1(kAsStrided, {x}, Attrs()
                                                .Set("size", sizes)
                                                .Set("stride", strides)
                                                .Set("storage_offset", offset)
                                                .Set("input_shape", x.sizes())
                                                .Set("input_strides", x.strides())
                                                .Set("input_offset", x.storage_offset()));
}

// A live view of `root` reads its gradient from root's current history (torch regenerates a view's grad_fn
// when its base changed). A view made a leaf that requires grad (requires_grad_() on a view of a tensor that
// did not) keeps its own.
void Regenerate(const Tensor& root, TensorImpl& view) {
  const AutogradMeta* m = view.autograd_meta();
  if (m != nullptr && m->grad_fn == nullptr && m->requires_grad) return;
  if (view.dtype() != root.dtype() || !root.requires_grad()) return;
  Tensor fresh;
  {
    GradModeGuard on(true);
    fresh = AsStridedView(root, view.sizes(), view.strides(), view.storage_offset());
  }
  SetHistory(view, fresh.grad_fn(), 0, fresh.requires_grad());
}

}  // namespace

Tensor AsStrided(const Tensor& x, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                 std::optional<int64_t> storage_offset) {
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, !x.is_distributed(), "as_strided: a DTensor of shape ",
                    ShapeStr(x.sizes()), " has no strides in memory; call to_local() or full_tensor() first");
  TESSEL_CHECK(sizes.size() == strides.size(), "as_strided: ", sizes.size(), " sizes and ", strides.size(),
               " strides (one stride per dim expected)");
  for (size_t d = 0; d < sizes.size(); ++d) {
    TESSEL_CHECK(sizes[d] >= 0 && strides[d] >= 0, "as_strided: sizes and strides must be non-negative, got size ",
                 ShapeStr(sizes), " stride ", ShapeStr(strides));
  }
  const int64_t offset = storage_offset.value_or(x.storage_offset());
  TESSEL_CHECK(offset >= 0, "as_strided: storage_offset must be non-negative, got ", offset);
  if (GradModeEnabled() && x.requires_grad()) {
    ElementIndex(Geometry::Of(*x.impl()), {sizes, strides, offset}, "as_strided of a tensor that requires grad");
  }
  return AsStridedView(x, sizes, strides, offset);
}

void RecordInPlace(const Tensor& self, const Tensor& result) {
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, !self.is_distributed() && !result.is_distributed(),
                    "in-place write under autograd: DTensor of shape ", ShapeStr(self.sizes()),
                    " is not supported; write the out-of-place op (x = x.op(...))");
  TESSEL_CHECK(result.sizes() == self.sizes() && result.dtype() == self.dtype(), "in-place write: the result (",
               result.dtype(), " ", ShapeStr(result.sizes()), ") must have the written tensor's shape and dtype (",
               self.dtype(), " ", ShapeStr(self.sizes()), ")");
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !(self.is_leaf() && self.requires_grad()),
                    "a leaf Variable that requires grad is being used in an in-place operation (shape ",
                    ShapeStr(self.sizes()), ")");
  const std::shared_ptr<TensorImpl> base_impl = self.impl()->view_base();
  const Tensor base = base_impl != nullptr ? Tensor(base_impl) : Tensor();
  Geometry view_geometry, base_geometry;
  if (base.defined()) {
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !(base.is_leaf() && base.requires_grad()),
                      "a view of a leaf Variable that requires grad is being used in an in-place operation (view ",
                      ShapeStr(self.sizes()), " of a leaf of shape ", ShapeStr(base.sizes()), ")");
    base_geometry = Geometry::Of(*base_impl);
    view_geometry = Geometry::Of(*self.impl());
    const Tensor idx = ElementIndex(base_geometry, view_geometry, "in-place write through a view");
    std::vector<int64_t> seen = idx.ToInt64Vector();
    std::sort(seen.begin(), seen.end());
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, std::adjacent_find(seen.begin(), seen.end()) == seen.end(),
                      "unsupported operation: more than one element of the written-to tensor refers to a single "
                      "memory location (", view_geometry.ToString(), "). Please clone() the tensor before performing "
                      "the operation.");
  }
  {
    NoGradGuard no_grad;
    const bool aliased = result.impl()->storage().is_same(self.impl()->storage());
    CopyInto(self, aliased ? Clone(result) : result);
  }
  if (base.defined()) {
    auto node = std::make_shared<CopySlices>(base_geometry, view_geometry);
    node->next_edges = {autograd::GradientEdge(base), autograd::GradientEdge(result)};
    node->output_meta.push_back({base.sizes(), base.dtype(), base.device(), false, true});
    node->output_hooks.emplace_back();
    const bool any_grad = node->next_edges[0].valid() || node->next_edges[1].valid();
    if (any_grad) SetHistory(*base_impl, node, 0, true);
  } else {
    SetHistory(*self.impl(), result.grad_fn(), result.grad_fn() ? result.impl()->autograd_meta()->output_nr : 0,
               result.requires_grad());
  }
  const Tensor root = base.defined() ? base : self;
  for (const std::shared_ptr<TensorImpl>& view : root.impl()->LiveViews()) Regenerate(root, *view);
}

}  // namespace tessel
