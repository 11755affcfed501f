// core/ops/sgd_cuda.cc — the CUDA kernel of "sgd_step_" (weight decay, momentum with dampening, nesterov;
// core/ops/optimizer.cu, cuda/sgd_math.h): the CPU kernel's checks, then one launch on the parameter's
// current stream. Beside optimizer_cuda.cc (AdamW) in its own file. Linked only with a CUDA toolkit
// (//core/ops:sgd_cuda). Run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
//
// Invariant: float32 or bfloat16 parameters whose gradient (and momentum buffer, when given) have the
// parameter's shape, dtype, device and a contiguous layout; anything else fails with kUnimplemented /
// kInvalidArgument naming the op, dtype and device. The parameter's version is bumped like the CPU's.
#include <string>

#include "core/base/error.h"
#include "core/dispatch/op.h"
#include "core/memory/stream.h"
#include "core/ops/cuda/optimizer_launch.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

TensorList SgdCudaKernel(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& p = in[0];
  const bool has_buf = in[2].defined();
  for (size_t i = 1; i < (has_buf ? 3u : 2u); ++i) {
    TESSEL_CHECK(in[i].sizes() == p.sizes() && in[i].dtype() == p.dtype() && in[i].device() == p.device() &&
                     in[i].is_contiguous(),
                 "sgd_step_: tensor ", i, " is ", ShapeStr(in[i].sizes()), " ", in[i].dtype(), " on ", in[i].device(),
                 " but the parameter is ", ShapeStr(p.sizes()), " ", p.dtype(), " on ", p.device(),
                 " (contiguous tensors of one shape, dtype and device required)");
  }
  TESSEL_CHECK(p.is_contiguous(), "sgd_step_: parameter must be contiguous");
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, p.dtype() == DType::kFloat32 || p.dtype() == DType::kBFloat16,
                    "sgd_step_: the CUDA kernel supports float32 and bfloat16, got ", p.dtype(), " on ", p.device());
  const auto s = cuda::SgdScalars::Make(a.GetDouble("lr"), a.GetDouble("momentum"), a.GetDouble("dampening"),
                                        a.GetDouble("weight_decay"), a.GetBool("nesterov"), a.GetBool("first_step"));
  p.impl()->storage().BumpVersion();
  const auto type = p.dtype() == DType::kFloat32 ? cuda::AdamWType::kFloat32 : cuda::AdamWType::kBFloat16;
  const std::string err = cuda::LaunchSgd(type, p.raw_data(), in[1].raw_data(), has_buf ? in[2].raw_data() : nullptr,
                                          p.numel(), s, memory::CurrentStream(p.device()));
  TESSEL_CHECK_CODE(ErrorCode::kInternal, err.empty(), "sgd_step_: CUDA launch failed on ", p.device(), ": ", err);
  return {p};
}

const bool kRegistered = (SetCudaKernel("sgd_step_", SgdCudaKernel), true);

}  // namespace
}  // namespace tessel
