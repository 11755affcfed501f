// core/ops/elementwise_scalar_cuda.cc — the CUDA kernels of the elementwise family's scalar and in-place
// ops behind elementwise.cc's schemas: add_scalar {value}, mul_scalar {value} (fresh contiguous output),
// mul_ {value} and add_ {alpha} (in place, any strides; add_'s source broadcasts to the destination),
// all one affine launch (core/ops/elementwise_scalar.cu, cuda/affine_math.h). Used by gradient clipping
// (mul_), fully_shard's gradient division (mul_) and accumulation (add_). Linked only with a CUDA toolkit
// (//core/ops:elementwise_scalar_cuda).
//
// Invariant: float32 / bfloat16 results equal the CPU kernels' bit for bit (same formula and rounding
// order); the in-place ops bump the destination's version like the CPU kernels; other dtypes fail with
// kUnimplemented naming the op, dtype and device; add_'s checks and messages are the CPU kernel's.
// Run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/dispatch/op.h"
#include "core/memory/stream.h"
#include "core/ops/cuda/affine_launch.h"
#include "core/ops/cuda/kernel_checks.h"
#include "core/tensor/factory.h"
#include "core/tensor/shape.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

// out = Affine(a, b) over out's shape; b may be undefined (then p.has_b is false).
void Run(const Tensor& out, const Tensor& a, const Tensor& b, const cuda::AffineParams& p, const char* op) {
  const cuda::ElemType type = cuda::CudaFloatType(a, op);
  const std::vector<int64_t> sa = cuda::BroadcastStrides(a.sizes(), a.strides(), out.sizes());
  const std::vector<int64_t> sb = b.defined() ? cuda::BroadcastStrides(b.sizes(), b.strides(), out.sizes())
                                              : std::vector<int64_t>(out.dim(), 0);
  const auto calc = cuda::OffsetCalculator<3>::Make(
      out.sizes(),
      {std::span<const int64_t>(out.strides()), std::span<const int64_t>(sa), std::span<const int64_t>(sb)});
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, calc.ndim >= 0, op, ": ", ShapeStr(out.sizes()), " has more than ",
                    cuda::kMaxDims, " non-mergeable dims for the CUDA kernel on ", out.device());
  cuda::CheckLaunch(cuda::LaunchAffine(type, out.raw_data(), a.raw_data(), b.defined() ? b.raw_data() : a.raw_data(),
                                       calc, out.numel(), p, memory::CurrentStream(out.device())),
                    op, out.device());
}

Kernel ScalarKernel(const char* op, bool scale) {
  return [op, scale](std::span<const Tensor> in, const Attrs& a) -> TensorList {
    const float v = static_cast<float>(a.GetDouble("value"));
    Tensor out = Empty(in[0].sizes(), in[0].dtype(), in[0].device());
    Run(out, in[0], Tensor(), {scale ? v : 1.0f, 0.0f, scale ? 0.0f : v, false, !scale}, op);
    return {out};
  };
}

TensorList MulInPlaceCudaKernel(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& dst = in[0];
  cuda::CudaFloatType(dst, "mul_");
  dst.impl()->storage().BumpVersion();
  Run(dst, dst, Tensor(), {static_cast<float>(a.GetDouble("value")), 0.0f, 0.0f, false, false}, "mul_");
  return {dst};
}

TensorList AddScalarInPlaceCudaKernel(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& dst = in[0];
  cuda::CudaFloatType(dst, "add_");
  dst.impl()->storage().BumpVersion();
  const float shift = static_cast<float>(a.GetDouble("value")) * static_cast<float>(a.GetDouble("alpha", 1.0));
  Run(dst, dst, Tensor(), {1.0f, 0.0f, shift, false, true}, "add_");
  return {dst};
}

TensorList AddInPlaceCudaKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor& dst = in[0];
  const Tensor& src = in[1];
  TESSEL_CHECK(dst.dtype() == src.dtype(), "add_: dtype mismatch ", dst.dtype(), " vs ", src.dtype());
  TESSEL_CHECK(dst.device() == src.device(), "add_: destination on ", dst.device(), ", source on ", src.device());
  const Shape b = BroadcastShapes(dst.sizes(), src.sizes(), "add_");
  TESSEL_CHECK(b == dst.sizes(), "add_: source shape ", ShapeStr(src.sizes()), " does not broadcast to ",
               ShapeStr(dst.sizes()));
  cuda::CudaFloatType(dst, "add_");
  dst.impl()->storage().BumpVersion();
  Run(dst, dst, src, {1.0f, static_cast<float>(attrs.GetDouble("alpha", 1.0)), 0.0f, true, false}, "add_");
  return {dst};
}

const bool kRegistered = [] {
  SetCudaKernel("add_scalar", ScalarKernel("add_scalar", /*scale=*/false));
  SetCudaKernel("mul_scalar", ScalarKernel("mul_scalar", /*scale=*/true));
  SetCudaKernel("mul_", MulInPlaceCudaKernel);
  SetCudaKernel("add_", AddInPlaceCudaKernel);
  SetCudaKernel("add_scalar_", AddScalarInPlaceCudaKernel);
  return true;
}();

}  // namespace
}  // namespace tessel
