// core/ops/unary_cuda.cc — the CUDA kernels of "gelu" and "gelu_backward" (core/ops/unary.cu) behind
// unary.cc's schema {approximate: "none" | "tanh"}; gelu's backward formula stays unary.cc's (it calls
// gelu_backward, which dispatches here for CUDA tensors). The other unary ops and their backward ops are in
// unary_pointwise_cuda.cc.
// Linked only with a CUDA toolkit (//core/ops:unary_cuda).
//
// Invariant: for contiguous float32 / bfloat16 CUDA tensors the result equals the CPU kernel's to fp32
// rounding; other dtypes and strided inputs fail with kUnimplemented naming the op, shape, dtype and
// device. Run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <string>

#include "core/dispatch/dispatcher.h"
#include "core/dispatch/op.h"
#include "core/memory/stream.h"
#include "core/ops/cuda/kernel_checks.h"
#include "core/ops/cuda/unary_launch.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

bool TanhApprox(const Attrs& a, const char* op) {
  const std::string& approximate = a.GetString("approximate");
  TESSEL_CHECK(approximate == "none" || approximate == "tanh", op, ": approximate must be 'none' or 'tanh', got '",
               approximate, "'");
  return approximate == "tanh";
}

TensorList GeluCudaKernel(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  const bool th = TanhApprox(a, "gelu");
  const cuda::ElemType type = cuda::CudaRowType(x, x.device(), "gelu", "input");
  Tensor y = Empty(x.sizes(), x.dtype(), x.device());
  cuda::CheckLaunch(
      cuda::LaunchGelu(type, x.raw_data(), y.raw_data(), x.numel(), th, memory::CurrentStream(x.device())), "gelu",
      x.device());
  return {y};
}

TensorList GeluBackwardCudaKernel(std::span<const Tensor> in, const Attrs& a) {
  const char* op = "gelu_backward";
  const Tensor& g = in[0];
  const Tensor& x = in[1];
  const bool th = TanhApprox(a, op);
  TESSEL_CHECK(g.sizes() == x.sizes() && g.dtype() == x.dtype(), op, ": grad and input must match, got ",
               DescribeInputs(in));
  const cuda::ElemType type = cuda::CudaRowType(x, x.device(), op, "input");
  cuda::CudaRowType(g, x.device(), op, "grad");
  Tensor dx = Empty(x.sizes(), x.dtype(), x.device());
  cuda::CheckLaunch(cuda::LaunchGeluBackward(type, g.raw_data(), x.raw_data(), dx.raw_data(), x.numel(), th,
                                             memory::CurrentStream(x.device())),
                    op, x.device());
  return {dx};
}

const bool kRegistered = [] {
  SetCudaKernel("gelu", cuda::ContiguousInputs(GeluCudaKernel));
  SetCudaKernel("gelu_backward", cuda::ContiguousInputs(GeluBackwardCudaKernel));
  return true;
}();

}  // namespace
}  // namespace tessel
