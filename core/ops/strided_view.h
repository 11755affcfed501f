// core/ops/strided_view.h — as_strided views, and the in-place writes autograd records through views and
// bases (torch's CopySlices).
//
// Invariant: after RecordInPlace(self, result), self's memory holds result's values (so its base and every
// view of that base see them, as an in-place write) and the histories are torch's: a write through a view
// gives the base the grad_fn CopySlices (the base's old history outside the view's elements, result's inside)
// and a write to a base gives it result's grad_fn; either way every live view of the base then reads its
// gradient from the base through an as_strided node (AsStridedBackward0). Saved tensors of earlier ops that
// alias the written memory are caught at backward by the version counter, as in torch.
//
// Example (Tensor.mul_(3) on a view `v = h[:, :2]` under autograd; bindings' tessel/_inplace.py does this):
//   Tensor old = Clone(v);                  // the value before the write, connected to v's history
//   RecordInPlace(v, MulScalar(old, 3.0));  // h.grad_fn() is CopySlices; v.grad_fn() an as_strided node
#pragma once

#include <optional>
#include <vector>

#include "core/tensor/tensor.h"

namespace tessel {

// torch.as_strided: a view of x's storage with `sizes`, `strides` and `storage_offset` (default: x's own
// offset), in elements. kInvalidArgument when the elements leave the storage or the lengths differ. Its
// gradient scatters into x's elements, so when x requires grad (grad mode on) every element of the view must
// be one of x's and x's own elements must not overlap: kUnimplemented otherwise, at the call.
// Dense tensors only (kUnimplemented for a DTensor: its global strides name no local memory).
Tensor AsStrided(const Tensor& x, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                 std::optional<int64_t> storage_offset = std::nullopt);

// Records `self.op_(...)` under autograd, where `result` is the op's out-of-place value computed from self's
// current value (clone self first if the op saves its input: the write below changes self). REQUIRES: grad
// mode on. Errors (nothing written): kUnimplemented for a DTensor; kInvalidArgument when result's shape or
// dtype differs from self's; kFailedPrecondition for a leaf that requires grad, a view of one, or a view
// whose elements overlap (expand: several elements are one memory location), each with torch's wording.
void RecordInPlace(const Tensor& self, const Tensor& result);

}  // namespace tessel
