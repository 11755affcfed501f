// core/tensor/tensor.h — `Tensor`, the cheap handle every API takes and returns.
//
// A Tensor is a shared handle to a TensorImpl: copying a Tensor is a shallow copy (both handles see the
// same data, shape and autograd state), like flashlight's Variable or torch.Tensor in Python. A dense
// local tensor and a distributed tensor (dtensor/) are two kinds of TensorImpl behind this one handle;
// `is_distributed()` tells them apart, and every op goes through one dispatcher (core/dispatch).
//
// Invariant: `defined()` is false only for a default-constructed handle; every accessor but `defined()`
// requires a defined tensor.
//
// Example:
//   Tensor x = Randn({4, 8}, gen);          // factories: core/tensor/factory.h, random.h
//   Tensor y = Matmul(x, Transpose(x, 0, 1));  // ops: core/ops/*.h
//   float v = y.item<float>();               // only for numel() == 1
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include "core/tensor/device.h"
#include "core/tensor/dtype.h"
#include "core/tensor/shape.h"

namespace tessel {

class TensorImpl;
namespace autograd {
class Node;
}

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  // impl(), or the "use of an undefined Tensor" error (kFailedPrecondition) where there is none: for callers
  // that may hold an undefined handle (a Python Tensor whose __init__ has not run: tensor_py.cc, [Note: bare
  // Tensor.__new__]).
  TensorImpl* checked_impl() const;
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // Metadata (for a distributed tensor these are the *global* shape and strides).
  const Shape& sizes() const;
  const Shape& strides() const;
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const;
  int64_t numel() const;
  int64_t storage_offset() const;
  DType dtype() const;
  Device device() const;
  bool is_contiguous() const;
  bool is_distributed() const;

  // Raw data of a dense tensor (REQUIRES: !is_distributed()). data_ptr<T> also checks the dtype.
  void* raw_data() const;
  template <typename T>
  T* data_ptr() const {
    CheckDataPtr(DTypeOf<T>::value);
    return static_cast<T*>(raw_data());
  }
  // The single value of a one-element tensor, converted to T.
  template <typename T>
  T item() const {
    return static_cast<T>(ItemDouble());
  }
  double ItemDouble() const;
  // All values in row-major order, converted to T (copies; works for any strides and dtype).
  template <typename T>
  std::vector<T> ToVector() const {
    if constexpr (std::is_integral_v<T>) {  // exact for every int64 (a double holds 53 bits)
      std::vector<int64_t> v = ToInt64Vector();
      return std::vector<T>(v.begin(), v.end());
    } else {
      std::vector<double> v = ToDoubleVector();
      return std::vector<T>(v.begin(), v.end());
    }
  }
  std::vector<double> ToDoubleVector() const;
  std::vector<int64_t> ToInt64Vector() const;

  // Autograd state (core/autograd gives it meaning).
  bool requires_grad() const;
  // REQUIRES: is_leaf() or !requires_grad; floating dtype to turn on.
  Tensor& set_requires_grad(bool requires_grad);
  bool is_leaf() const;
  Tensor grad() const;
  // Replaces .grad (undefined clears it).
  void set_grad(const Tensor& grad) const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;

  // A copy on `device` (this tensor itself when already there), contiguous, same dtype, counted under
  // the current ledger. Records no autograd history (core/tensor sits below autograd). For CUDA the
  // copy goes through core/tensor/device_copy.h.
  Tensor To(Device device) const;

  // "Tensor(float32, [2, 3], cpu:0)"; with values for small tensors.
  std::string ToString() const;

 private:
  void CheckDataPtr(DType want) const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

using TensorList = std::vector<Tensor>;

}  // namespace tessel
