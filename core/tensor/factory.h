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

// [Note: deferred init] torch's meta-device construction (`with torch.device("meta"): model = Model()`, then
// fully_shard, to_empty and init_weights: torchtitan's order). While a DeferredInitGuard lives on this
// thread, Full, Zeros, Ones and Random (random.h) return Empty tensors of their shape and dtype: no value is
// written and no random number drawn, so the generator is where it was (torch's meta construction draws
// none either). Fresh large blocks come from the system untouched (core/memory/host_pages.h), so they take
// address space but no resident memory until written: a model built so and then sharded by fully_shard
// (which copies each rank's piece) becomes resident only in the pages it writes. The values are undefined,
// as torch's to_empty leaves them, until an initializer writes them. Scalar, Arange and the other factories
// are unaffected (construction-time index and shape computations keep working).
class DeferredInitGuard {
 public:
  explicit DeferredInitGuard(bool enabled = true);
  ~DeferredInitGuard();
  DeferredInitGuard(const DeferredInitGuard&) = delete;
  DeferredInitGuard& operator=(const DeferredInitGuard&) = delete;

 private:
  bool previous_;
};
bool DeferredInitEnabled();
// Sets this thread's flag and returns its previous value (for bindings whose scopes are not C++ blocks).
bool SetDeferredInit(bool enabled);
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
