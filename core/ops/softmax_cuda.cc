// core/ops/softmax_cuda.cc — the CUDA kernels of "softmax", "log_softmax", "softmax_backward" and
// "log_softmax_backward" (core/ops/softmax.cu) behind the same ops as softmax.cc: checks, output
// allocation on the input's device (caching allocator, current stream), the [A, N, K] lane view and
// the launch. The backward formulas stay softmax.cc's (they call the backward ops, which dispatch here
// for CUDA tensors). Linked only with a CUDA toolkit (//core/ops:softmax_cuda).
//
// Invariant: for contiguous float32 / bfloat16 CUDA tensors the result equals the CPU kernel's to
// rounding (fp32 math, one rounding per stored bf16); other dtypes and strided inputs fail with
// kUnimplemented naming the op, shape, dtype and device. Run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include "core/dispatch/dispatcher.h"
#include "core/dispatch/op.h"
#include "core/memory/stream.h"
#include "core/ops/cuda/kernel_checks.h"
#include "core/ops/cuda/row_kernels_launch.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

template <bool kLog>
TensorList SoftmaxCudaKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const char* name = kLog ? "log_softmax" : "softmax";
  const Tensor& x = in[0];
  const int64_t dim = NormalizeDim(attrs.GetInt("dim"), x.dim(), name);
  const cuda::ElemType type = cuda::CudaRowType(x, x.device(), name, "input");
  Tensor y = Empty(x.sizes(), x.dtype(), x.device());
  cuda::CheckLaunch(cuda::LaunchSoftmax(kLog, type, x.raw_data(), y.raw_data(), cuda::Lanes::Of(x.sizes(), dim),
                                        memory::CurrentStream(x.device())),
                    name, x.device());
  return {y};
}

template <bool kLog>
TensorList SoftmaxBackwardCudaKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const char* name = kLog ? "log_softmax_backward" : "softmax_backward";
  const Tensor& g = in[0];
  const Tensor& y = in[1];
  TESSEL_CHECK(g.sizes() == y.sizes() && g.dtype() == y.dtype(), name, ": grad and output must match, got ",
               DescribeInputs(in));
  const int64_t dim = NormalizeDim(attrs.GetInt("dim"), y.dim(), name);
  const cuda::ElemType type = cuda::CudaRowType(y, y.device(), name, "output");
  cuda::CudaRowType(g, y.device(), name, "grad");
  Tensor dx = Empty(y.sizes(), y.dtype(), y.device());
  cuda::CheckLaunch(cuda::LaunchSoftmaxBackward(kLog, type, g.raw_data(), y.raw_data(), dx.raw_data(),
                                                cuda::Lanes::Of(y.sizes(), dim), memory::CurrentStream(y.device())),
                    name, y.device());
  return {dx};
}

const bool kRegistered = [] {
  SetCudaKernel("softmax", cuda::ContiguousInputs(SoftmaxCudaKernel<false>));
  SetCudaKernel("log_softmax", cuda::ContiguousInputs(SoftmaxCudaKernel<true>));
  SetCudaKernel("softmax_backward", cuda::ContiguousInputs(SoftmaxBackwardCudaKernel<false>));
  SetCudaKernel("log_softmax_backward", cuda::ContiguousInputs(SoftmaxBackwardCudaKernel<true>));
  return true;
}();

}  // namespace
}  // namespace tessel
