// core/ops/elementwise_cuda.cc — the CUDA kernels of the elementwise family behind the same ops as
// elementwise.cc: checks, output allocation on the inputs' device (caching allocator, current stream),
// the shared OffsetCalculator, and the launch in elementwise.cu. Linked only with a CUDA toolkit
// (//core/ops:elementwise_cuda); the backward formulas are elementwise.cc's, unchanged, because they
// are ordinary op calls that dispatch to these kernels for CUDA tensors.
//
// Invariant: for float32 and bfloat16 inputs of one CUDA device, the result equals the CPU kernel's
// (fp32 math, one rounding to bf16); other dtypes fail with kUnimplemented naming op, dtype and device.
// Run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <string>

#include "core/base/error.h"
#include "core/dispatch/op.h"
#include "core/memory/stream.h"
#include "core/ops/cuda/elementwise_launch.h"
#include "core/tensor/factory.h"
#include "core/tensor/shape.h"

namespace tessel {
namespace {

Shape BroadcastStridesTo(const Tensor& t, const Shape& shape) {
  Shape out(shape.size(), 0);
  const int64_t lead = static_cast<int64_t>(shape.size()) - t.dim();
  for (int64_t i = 0; i < t.dim(); ++i) out[lead + i] = t.size(i) == 1 ? 0 : t.stride(i);
  return out;
}

Kernel BinaryCudaKernel(cuda::BinaryOp op, const char* name) {
  return [op, name](std::span<const Tensor> in, const Attrs&) -> TensorList {
    const Tensor& a = in[0];
    const Tensor& b = in[1];
    TESSEL_CHECK(a.dtype() == b.dtype(), name, ": dtype mismatch ", a.dtype(), " vs ", b.dtype(), " (shapes ",
                 ShapeStr(a.sizes()), ", ", ShapeStr(b.sizes()), "); cast one side explicitly");
    TESSEL_CHECK(a.device() == b.device(), name, ": inputs on ", a.device(), " and ", b.device());
    TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, a.dtype() == DType::kFloat32 || a.dtype() == DType::kBFloat16,
                      name, ": the CUDA kernel supports float32 and bfloat16, got ", a.dtype(), " on ", a.device());
    const Shape shape = BroadcastShapes(a.sizes(), b.sizes(), name);
    Tensor out = Empty(shape, a.dtype(), a.device());
    const int64_t n = out.numel();
    if (n == 0) return {out};
    const Shape sa = BroadcastStridesTo(a, shape), sb = BroadcastStridesTo(b, shape);
    const auto calc = cuda::OffsetCalculator<3>::Make(shape, {std::span<const int64_t>(out.strides()),
                                                              std::span<const int64_t>(sa),
                                                              std::span<const int64_t>(sb)});
    TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, calc.ndim >= 0, name, ": ", shape.size(),
                      " non-mergeable dims exceed the CUDA kernel's ", cuda::kMaxDims);
    const auto type = a.dtype() == DType::kFloat32 ? cuda::ElemType::kFloat32 : cuda::ElemType::kBFloat16;
    const std::string err = cuda::LaunchBinary(op, type, out.raw_data(), a.raw_data(), b.raw_data(), calc, n,
                                               memory::CurrentStream(a.device()));
    TESSEL_CHECK_CODE(ErrorCode::kInternal, err.empty(), name, ": CUDA launch failed on ", a.device(), ": ", err);
    return {out};
  };
}

const bool kRegistered = [] {
  SetCudaKernel("add", BinaryCudaKernel(cuda::BinaryOp::kAdd, "add"));
  SetCudaKernel("sub", BinaryCudaKernel(cuda::BinaryOp::kSub, "sub"));
  SetCudaKernel("mul", BinaryCudaKernel(cuda::BinaryOp::kMul, "mul"));
  SetCudaKernel("div", BinaryCudaKernel(cuda::BinaryOp::kDiv, "div"));
  return true;
}();

}  // namespace
}  // namespace tessel
