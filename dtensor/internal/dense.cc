// dtensor/internal/dense.cc — view and copy helpers for local tensors.
#include "dtensor/internal/dense.h"

#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::dtensor::internal {

Tensor Narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  Shape sizes = t.sizes();
  sizes[static_cast<size_t>(dim)] = length;
  const int64_t offset = length == 0 ? t.storage_offset() : t.storage_offset() + start * t.stride(dim);
  return MakeView(t, std::move(sizes), t.strides(), offset);
}

Tensor MoveToFront(const Tensor& t, int64_t dim) {
  if (dim == 0) return t;
  Shape sizes = t.sizes(), strides = t.strides();
  sizes.erase(sizes.begin() + dim);
  strides.erase(strides.begin() + dim);
  sizes.insert(sizes.begin(), t.size(dim));
  strides.insert(strides.begin(), t.stride(dim));
  return MakeView(t, std::move(sizes), std::move(strides), t.storage_offset());
}

Tensor ContiguousView(const Tensor& buffer, Shape shape, int64_t offset) {
  Shape strides = ContiguousStrides(shape);
  return MakeView(buffer, std::move(shape), std::move(strides), buffer.storage_offset() + offset);
}

Tensor CopyOf(const Tensor& t) {
  Tensor out = Empty(t.sizes(), t.dtype(), t.device());
  CopyInto(out, t);
  return out;
}

Shape WithSize(Shape s, int64_t dim, int64_t size) {
  s[static_cast<size_t>(dim)] = size;
  return s;
}

}  // namespace tessel::dtensor::internal
