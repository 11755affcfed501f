// core/ops/dropout_cuda.cc — the CUDA kernel of the dropout op (dropout.cc's schema), launching
// core/ops/dropout.cu. Linked only with a CUDA toolkit (//core/ops:dropout_cuda).
//
// Invariant: float32 / bfloat16 results equal the CPU kernel's bit for bit (the same mask words from
// cuda/dropout_math.h, one rounded float32 product); other dtypes fail with kUnimplemented naming the
// op, dtype and device. Run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include "core/base/error.h"
#include "core/dispatch/op.h"
#include "core/memory/stream.h"
#include "core/ops/cuda/dropout_launch.h"
#include "core/ops/cuda/dropout_math.h"
#include "core/ops/cuda/kernel_checks.h"
#include "core/ops/dropout.h"
#include "core/tensor/factory.h"
#include "core/tensor/shape.h"

namespace tessel {
namespace {

TensorList DropoutCudaKernel(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  const cuda::ElemType type = cuda::CudaFloatType(x, "dropout");
  const double p = DropoutProbability(a);
  const DropoutBlock block = DropoutBlockOf(x, a);
  Tensor out = Empty(x.sizes(), x.dtype(), x.device());
  const Shape full_strides = ContiguousStrides(block.full);
  const auto calc = cuda::OffsetCalculator<3>::Make(
      out.sizes(), {std::span<const int64_t>(out.strides()), std::span<const int64_t>(x.strides()),
                    std::span<const int64_t>(full_strides)});
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, calc.ndim >= 0, "dropout: ", ShapeStr(x.sizes()), " has more than ",
                    cuda::kMaxDims, " non-mergeable dims for the CUDA kernel on ", x.device());
  const cuda::DropoutParams params{
      static_cast<uint64_t>(a.GetInt("seed")),
      static_cast<uint64_t>(a.GetInt("offset")) + static_cast<uint64_t>(block.first), cuda::DropoutThreshold(p),
      p < 1.0 ? static_cast<float>(1.0 / (1.0 - p)) : 0.0f};
  cuda::CheckLaunch(cuda::LaunchDropout(type, out.raw_data(), x.raw_data(), calc, out.numel(), params,
                                        memory::CurrentStream(x.device())),
                    "dropout", x.device());
  return {out};
}

const bool kRegistered = [] {
  SetCudaKernel("dropout", DropoutCudaKernel);
  return true;
}();

}  // namespace
}  // namespace tessel
