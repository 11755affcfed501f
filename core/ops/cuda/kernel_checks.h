// core/ops/cuda/kernel_checks.h — the checks every row-kernel CUDA op (softmax_cuda.cc, norm_cuda.cc)
// makes before a launch, and the launch-error check after it, so their errors read the same.
//
// Invariant: CudaRowType accepts a contiguous float32 or bfloat16 tensor on `device` and returns its
// ElemType; anything else raises kUnimplemented (dtype, layout) or kInvalidArgument (device) naming the
// op, the tensor's shape, dtype and device. CheckLaunch raises kInternal with the CUDA error string.
// The row kernels index rows of contiguous memory, so each registers through ContiguousInputs, which
// hands them contiguous copies of strided inputs (a transposed q, a sliced row): users see any layout work,
// as on the CPU (the H200 runs found the GPT's q = qkv.view(...).transpose(1, 2) refused without it).
//
// Example:
//   SetCudaKernel("softmax", cuda::ContiguousInputs(SoftmaxCudaKernel));
//   const cuda::ElemType type = cuda::CudaRowType(x, x.device(), "softmax", "input");
//   cuda::CheckLaunch(cuda::LaunchSoftmax(...), "softmax", x.device());
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/base/error.h"
#include "core/dispatch/op.h"
#include "core/ops/cuda/elementwise_launch.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/shape.h"
#include "core/tensor/tensor.h"

namespace tessel::cuda {

inline ElemType CudaRowType(const Tensor& t, Device device, const char* op, const char* what) {
  TESSEL_CHECK(t.device() == device, op, ": ", what, " is on ", t.device(), " but the op runs on ", device);
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, t.dtype() == DType::kFloat32 || t.dtype() == DType::kBFloat16, op,
                    ": the CUDA kernel supports float32 and bfloat16, got ", what, " ", ShapeStr(t.sizes()), " ",
                    t.dtype(), " on ", device);
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, t.is_contiguous(), op, ": the CUDA kernel needs a contiguous ", what,
                    ", got ", ShapeStr(t.sizes()), " with strides ", ShapeStr(t.strides()), " on ", device,
                    " (a tessel bug: its kernel must be registered through cuda::ContiguousInputs)");
  return t.dtype() == DType::kFloat32 ? ElemType::kFloat32 : ElemType::kBFloat16;
}

// A float32 / bfloat16 tensor of any layout (the pointwise and reduction kernels read strides); anything
// else raises kUnimplemented naming the op, shape, dtype and device.
inline ElemType CudaFloatType(const Tensor& t, const char* op) {
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, t.dtype() == DType::kFloat32 || t.dtype() == DType::kBFloat16, op,
                    ": the CUDA kernel supports float32 and bfloat16, got ", ShapeStr(t.sizes()), " ", t.dtype(),
                    " on ", t.device());
  return t.dtype() == DType::kFloat32 ? ElemType::kFloat32 : ElemType::kBFloat16;
}

// `kernel` with every strided input replaced by a contiguous copy on its device (CopyInto: the device's
// strided-copy kernel, which //core/ops:view_cuda installs; a library using this depends on it).
inline Kernel ContiguousInputs(Kernel kernel) {
  return [kernel = std::move(kernel)](std::span<const Tensor> in, const Attrs& attrs) -> TensorList {
    std::vector<Tensor> copies;  // filled with `in` at the first strided input
    for (size_t i = 0; i < in.size(); ++i) {
      if (!in[i].defined() || in[i].is_contiguous()) continue;
      if (copies.empty()) copies.assign(in.begin(), in.end());
      copies[i] = Empty(in[i].sizes(), in[i].dtype(), in[i].device());
      CopyInto(copies[i], in[i]);
    }
    return copies.empty() ? kernel(in, attrs) : kernel(copies, attrs);
  };
}

inline void CheckLaunch(const std::string& err, const char* op, Device device) {
  TESSEL_CHECK_CODE(ErrorCode::kInternal, err.empty(), op, ": CUDA launch failed on ", device, ": ", err);
}

}  // namespace tessel::cuda
