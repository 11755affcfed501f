// core/ops/optimizer_cuda.cc — the CUDA kernels of "adamw_step_" (fused AdamW, core/ops/optimizer.cu)
// and "adamw_step_foreach_" (the same, group by group):
// the CPU kernel's checks, then one launch on the parameter's current stream. Linked only with a CUDA
// toolkit (//core/ops:optimizer_cuda). Run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
//
// Invariant: float32 or bfloat16 parameters whose gradient and state have the parameter's shape, dtype,
// device and a contiguous layout; anything else fails with kUnimplemented / kInvalidArgument naming the
// op, dtype and device.
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/dispatch/op.h"
#include "core/memory/stream.h"
#include "core/ops/cuda/optimizer_launch.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

TensorList AdamWCudaKernel(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& p = in[0];
  for (size_t i = 1; i < 4; ++i) {
    TESSEL_CHECK(in[i].sizes() == p.sizes() && in[i].dtype() == p.dtype() && in[i].device() == p.device() &&
                     in[i].is_contiguous(),
                 "adamw_step_: tensor ", i, " is ", ShapeStr(in[i].sizes()), " ", in[i].dtype(), " on ",
                 in[i].device(), " but the parameter is ", ShapeStr(p.sizes()), " ", p.dtype(), " on ", p.device(),
                 " (contiguous tensors of one shape, dtype and device required)");
  }
  TESSEL_CHECK(p.is_contiguous(), "adamw_step_: parameter must be contiguous");
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, p.dtype() == DType::kFloat32 || p.dtype() == DType::kBFloat16,
                    "adamw_step_: the CUDA kernel supports float32 and bfloat16, got ", p.dtype(), " on ", p.device());
  const int64_t step = a.GetInt("step");
  TESSEL_CHECK(step >= 1, "adamw_step_: step must be >= 1, got ", step);
  const auto s = cuda::AdamWScalars::Make(a.GetDouble("lr"), a.GetDouble("beta1"), a.GetDouble("beta2"),
                                          a.GetDouble("eps"), a.GetDouble("weight_decay"), step);
  for (size_t i : {0, 2, 3}) in[i].impl()->storage().BumpVersion();
  const auto type = p.dtype() == DType::kFloat32 ? cuda::AdamWType::kFloat32 : cuda::AdamWType::kBFloat16;
  const std::string err = cuda::LaunchAdamW(type, p.raw_data(), in[1].raw_data(), in[2].raw_data(),
                                            in[3].raw_data(), p.numel(), s, memory::CurrentStream(p.device()));
  TESSEL_CHECK_CODE(ErrorCode::kInternal, err.empty(), "adamw_step_: CUDA launch failed on ", p.device(), ": ", err);
  return {p};
}

// "adamw_step_foreach_" (core/ops/optimizer.cc's layout: params, grads, exp_avgs, exp_avg_sqs, attr
// "steps"): one launch per group on its parameter's stream (a multi-tensor launch is not written yet).
TensorList AdamWForeachCudaKernel(std::span<const Tensor> in, const Attrs& a) {
  const std::vector<int64_t>& steps = a.GetInts("steps");
  const size_t n = steps.size();
  TESSEL_CHECK(in.size() == 4 * n, "adamw_step_foreach_: expected 4 x ", n, " tensors, got ", in.size());
  TensorList out;
  Attrs one = a;  // copied once: Set overwrites "step" per group
  for (size_t i = 0; i < n; ++i) {
    const Tensor group[] = {in[i], in[n + i], in[2 * n + i], in[3 * n + i]};
    one.Set("step", steps[i]);
    out.push_back(AdamWCudaKernel(group, one).at(0));
  }
  return out;
}

const bool kRegistered = (SetCudaKernel("adamw_step_", AdamWCudaKernel),
                          SetCudaKernel("adamw_step_foreach_", AdamWForeachCudaKernel), true);

}  // namespace
}  // namespace tessel
