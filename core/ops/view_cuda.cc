// core/ops/view_cuda.cc — CUDA tensors for the view family: installs the CUDA strided copy
// (core/ops/view.cu) as CopyInto's device kernel (SetDeviceStridedCopy, core/tensor/device_copy.h), and
// fills the cuda slots of the view ops with their CPU kernels, which only build views and call CopyInto
// (device-aware): view, narrow, select, slice, transpose, permute, expand, unsqueeze, squeeze,
// contiguous, copy_ and the narrow / select / slice backward scatters; likewise ones_like / zeros_like
// (device factories), and cast / clone (an output plus CopyInto; the copy converts between float32,
// bfloat16 and bool on the device). "cat" / "stack" are filled by core/ops/concat_cuda.cc (their CPU kernels copy
// through CopyInto on devices). Linked only with a CUDA toolkit (//core/ops:view_cuda).
//
// Invariant: a strided device copy is one kernel launch on dst's current stream, converting between
// float32, bfloat16 and bool on the device when the dtypes differ. Run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <optional>
#include <string>
#include <vector>

#include "core/dispatch/op.h"
#include "core/memory/stream.h"
#include "core/ops/cuda/copy_launch.h"
#include "core/ops/cuda/kernel_checks.h"
#include "core/tensor/device_copy.h"

namespace tessel {
namespace {

// The dtypes the device conversion handles, or nullopt.
std::optional<cuda::ConvertType> ConvertTypeOf(DType t) {
  if (t == DType::kFloat32) return cuda::ConvertType::kFloat32;
  if (t == DType::kBFloat16) return cuda::ConvertType::kBFloat16;
  if (t == DType::kBool) return cuda::ConvertType::kBool;
  return std::nullopt;
}

void CudaStridedCopy(const Tensor& dst, const Tensor& src) {
  const std::vector<int64_t> ss = cuda::BroadcastStrides(src.sizes(), src.strides(), dst.sizes());
  const auto calc = cuda::OffsetCalculator<2>::Make(
      dst.sizes(), {std::span<const int64_t>(dst.strides()), std::span<const int64_t>(ss)});
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, calc.ndim >= 0, "copy_: ", ShapeStr(dst.sizes()), " has more than ",
                    cuda::kMaxDims, " non-mergeable dims for the CUDA copy kernel on ", dst.device());
  void* stream = memory::CurrentStream(dst.device());
  if (dst.dtype() == src.dtype()) {
    const cuda::WideCopy wide = cuda::WidenCopy(ElementSize(dst.dtype()), dst.raw_data(), src.raw_data(), calc,
                                                dst.numel());
    cuda::CheckLaunch(
        cuda::LaunchStridedCopy(wide.element_bytes, dst.raw_data(), src.raw_data(), wide.calc, wide.n, stream),
        "copy_", dst.device());
    return;
  }
  const auto dt = ConvertTypeOf(dst.dtype()), st = ConvertTypeOf(src.dtype());
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, dt && st,
                    "copy_: the CUDA copy kernel converts between float32, bfloat16 and bool only, got ", src.dtype(),
                    " to ", dst.dtype(), " (shape ", ShapeStr(dst.sizes()), ") on ", dst.device());
  cuda::CheckLaunch(
      cuda::LaunchConvertCopy(*dt, *st, dst.raw_data(), src.raw_data(), calc, dst.numel(), stream), "copy_",
      dst.device());
}

const bool kRegistered = [] {
  SetDeviceStridedCopy(CudaStridedCopy);
  for (const char* name :
       {"view", "narrow", "select", "slice", "transpose", "permute", "expand", "unsqueeze", "squeeze", "contiguous",
        "copy_", "narrow_backward", "select_backward", "slice_backward", "ones_like", "zeros_like", "cast", "clone"}) {
    const std::string op = name;  // the CPU kernel, looked up at call time (registration order is free)
    SetCudaKernel(op, [op](std::span<const Tensor> in, const Attrs& a) { return GetOp(op).cpu(in, a); });
  }
  return true;
}();

}  // namespace
}  // namespace tessel
