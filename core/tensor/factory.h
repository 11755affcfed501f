// core/tensor/factory.h — tensor factories: empty, zeros, ones, full, arange, from a buffer.
//
// Invariant: factories allocate under the thread's current memory ledger on `device` (default: the
// thread's CurrentDevice()) and return contiguous tensors with no autograd history.
//
// Example:
//   Tensor a = Zeros({2, 3});                                   // float32 on CurrentDevice()
//   Tensor b = FromVector<float>({1, 2, 3, 4}, {2, 2});
//   Tensor c = Arange(0, 10, 2, DType::kInt64);                 // [0, 2, 4, 6, 8]
#pragma once

#include <cstring>
#include <span>
#include <vector>

#include "core/tensor/tensor.h"

namespace tessel {

Tensor Empty(std::span<const int64_t> shape, DType dtype = DType::kFloat32, Device device = CurrentDevice());
inline Tensor Empty(std::initializer_list<int64_t> shape, DType dtype = DType::kFloat32,
                    Device device = CurrentDevice()) {
  return Empty(std::span<const int64_t>(shape.begin(), shape.size()), dtype, device);
}
Tensor Full(std::span<const int64_t> shape, double value, DType dtype = DType::kFloat32,
            Device device = CurrentDevice());
Tensor Zeros(std::span<const int64_t> shape, DType dtype = DType::kFloat32, Device device = CurrentDevice());
Tensor Ones(std::span<const int64_t> shape, DType dtype = DType::kFloat32, Device device = CurrentDevice());
inline Tensor Zeros(std::initializer_list<int64_t> shape, DType dtype = DType::kFloat32,
                    Device device = CurrentDevice()) {
  return Zeros(std::span<const int64_t>(shape.begin(), shape.size()), dtype, device);
}
inline Tensor Ones(std::initializer_list<int64_t> shape, DType dtype = DType::kFloat32,
                   Device device = CurrentDevice()) {
  return Ones(std::span<const int64_t>(shape.begin(), shape.size()), dtype, device);
}
inline Tensor Full(std::initializer_list<int64_t> shape, double value, DType dtype = DType::kFloat32,
                   Device device = CurrentDevice()) {
  return Full(std::span<const int64_t>(shape.begin(), shape.size()), value, dtype, device);
}
Tensor Scalar(double value, DType dtype = DType::kFloat32, Device device = CurrentDevice());
// [start, end) step `step`, like torch.arange.
Tensor Arange(double start, double end, double step = 1, DType dtype = DType::kInt64,
              Device device = CurrentDevice());
inline Tensor Arange(int64_t end, DType dtype = DType::kInt64) { return Arange(0, static_cast<double>(end), 1, dtype); }
// Copies `nbytes` of raw `data` (interpreted as `dtype`, row-major) into a new tensor of `shape`; bool
// bytes other than 0 become 1. kInvalidArgument when nbytes does not match or the size overflows.
Tensor FromBuffer(const void* data, int64_t nbytes, std::span<const int64_t> shape, DType dtype,
                  Device device = CurrentDevice());
template <typename T>
Tensor FromVector(const std::vector<T>& values, std::span<const int64_t> shape) {
  return FromBuffer(values.data(), static_cast<int64_t>(values.size() * sizeof(T)), shape, DTypeOf<T>::value);
}
template <typename T>
Tensor FromVector(const std::vector<T>& values, std::initializer_list<int64_t> shape) {
  return FromVector(values, std::span<const int64_t>(shape.begin(), shape.size()));
}
template <typename T>
Tensor FromVector(const std::vector<T>& values) {
  const int64_t n = static_cast<int64_t>(values.size());
  return FromVector(values, {n});
}
// Values given as doubles, stored converted to `dtype`.
Tensor FromDoubles(const std::vector<double>& values, std::span<const int64_t> shape,
                   DType dtype = DType::kFloat32);

// In-place fill (bumps the version counter). REQUIRES: dense.
void FillInPlace(const Tensor& t, double value);

}  // namespace tessel
