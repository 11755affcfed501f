// dtensor/internal/dense.h — small view/copy helpers on dense local tensors, built on core/tensor only
// (MakeView + CopyInto), so dtensor/ does not depend on the op families for data movement.
//
// Invariant: the *View functions alias their input's storage (no copy, no autograd); CopyOf returns a
// new contiguous tensor. Narrow with length 0 keeps the input's storage offset (never past the end).
//
// Example:
//   Tensor rows = internal::Narrow(local, 0, 2, 3);          // rows 2..4, a view
//   Tensor front = internal::MoveToFront(local, 1);           // dim 1 first, a view
#pragma once

#include <cstdint>

#include "core/tensor/tensor.h"

namespace tessel::dtensor::internal {

Tensor Narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length);
// A view of `t` with dim `dim` moved to the front.
Tensor MoveToFront(const Tensor& t, int64_t dim);
// A contiguous view of `shape` over `buffer`'s storage, starting `offset` elements after buffer's start.
Tensor ContiguousView(const Tensor& buffer, Shape shape, int64_t offset);
Tensor CopyOf(const Tensor& t);
Shape WithSize(Shape s, int64_t dim, int64_t size);

}  // namespace tessel::dtensor::internal
