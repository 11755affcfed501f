// core/ops/norm_cuda.cc — the CUDA kernels of "layer_norm", "rms_norm", "layer_norm_backward" and
// "rms_norm_backward" (core/ops/norm.cu) behind the same schemas as norm.cc: inputs (x, weight?, bias?)
// / (grad, x, weight?, [mean,] rstd) {output_mask}, statistics float32 with x's shape and last dim 1.
// The backward formulas stay norm.cc's (they call the fused backward ops, which dispatch here for CUDA
// tensors). Linked only with a CUDA toolkit (//core/ops:norm_cuda).
//
// Invariant: for contiguous float32 / bfloat16 CUDA tensors the results equal the CPU kernel's to
// rounding (fp32 math, one rounding per stored bf16; grad_weight / grad_bias blocked as on the CPU);
// other dtypes (float64 included) and strided inputs fail with kUnimplemented naming the op, shape,
// dtype and device. grad_weight / grad_bias use a float32 scratch of min(rows, 64) x 2 x cols from the
// caching allocator on the current stream. Run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <vector>

#include "core/dispatch/dispatcher.h"
#include "core/dispatch/op.h"
#include "core/memory/stream.h"
#include "core/ops/cuda/kernel_checks.h"
#include "core/ops/cuda/row_kernels_launch.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

// x's ElemType after checking x and the optional [cols] parameters at in[i] for i in `params`.
cuda::ElemType CheckArgs(const char* op, std::span<const Tensor> in, const Tensor& x,
                         std::initializer_list<int> params) {
  TESSEL_CHECK(x.defined() && x.dim() >= 1, op, ": expected x with at least 1 dim, got ", DescribeInputs(in));
  const cuda::ElemType type = cuda::CudaRowType(x, x.device(), op, "x");
  for (int i : params) {
    const Tensor& p = in[i];
    if (!p.defined()) continue;
    TESSEL_CHECK(p.dim() == 1 && p.size(0) == x.size(-1) && p.dtype() == x.dtype(), op, ": input ", i, " must be [",
                 x.size(-1), "] ", x.dtype(), " (the last dim and dtype of x ", ShapeStr(x.sizes()), "), got ",
                 DescribeInputs(in));
    cuda::CudaRowType(p, x.device(), op, "parameter");
  }
  return type;
}

Shape StatsShape(const Tensor& x) {
  Shape s = x.sizes();
  s.back() = 1;
  return s;
}

const void* DataOrNull(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }
float* FloatsOrNull(const Tensor& t) { return t.defined() ? static_cast<float*>(t.raw_data()) : nullptr; }

template <bool kCentered>
TensorList NormForwardCudaKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const char* op = kCentered ? "layer_norm" : "rms_norm";
  const Tensor& x = in[0];
  const cuda::ElemType type = kCentered ? CheckArgs(op, in, x, {1, 2}) : CheckArgs(op, in, x, {1});
  const Tensor bias = kCentered ? in[2] : Tensor();
  Tensor y = Empty(x.sizes(), x.dtype(), x.device());
  Tensor mean = kCentered ? Empty(StatsShape(x), DType::kFloat32, x.device()) : Tensor();
  Tensor rstd = Empty(StatsShape(x), DType::kFloat32, x.device());
  const int64_t cols = x.size(-1);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  cuda::CheckLaunch(
      cuda::LaunchNormForward(type, x.raw_data(), DataOrNull(in[1]), DataOrNull(bias), y.raw_data(), FloatsOrNull(mean),
                              FloatsOrNull(rstd), rows, cols, static_cast<float>(attrs.GetDouble("eps")),
                              memory::CurrentStream(x.device())),
      op, x.device());
  if (kCentered) return {y, mean, rstd};
  return {y, rstd};
}

template <bool kCentered>
TensorList NormBackwardCudaKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const char* op = kCentered ? "layer_norm_backward" : "rms_norm_backward";
  const Tensor& dy = in[0];
  const Tensor& x = in[1];
  const cuda::ElemType type = CheckArgs(op, in, x, {2});
  TESSEL_CHECK(dy.defined() && dy.sizes() == x.sizes() && dy.dtype() == x.dtype(), op,
               ": grad must match x in shape and dtype, got ", DescribeInputs(in));
  cuda::CudaRowType(dy, x.device(), op, "grad");
  const Tensor mean = kCentered ? in[3] : Tensor();
  const Tensor& rstd = kCentered ? in[4] : in[3];
  for (const Tensor& s : {mean, rstd}) {
    if (!kCentered && !s.defined()) continue;  // rms_norm has no mean
    TESSEL_CHECK(s.defined() && s.sizes() == StatsShape(x) && s.dtype() == DType::kFloat32, op,
                 ": statistics must have shape ", ShapeStr(StatsShape(x)), " and dtype float32, got ",
                 DescribeInputs(in));
    cuda::CudaRowType(s, x.device(), op, "statistics");
  }
  const std::vector<int64_t>& mask = attrs.GetInts("output_mask");
  TESSEL_INTERNAL_ASSERT(mask.size() == (kCentered ? 3u : 2u), op, ": output_mask needs one entry per output");
  const int64_t cols = x.size(-1);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  Tensor dx = mask[0] ? Empty(x.sizes(), x.dtype(), x.device()) : Tensor();
  Tensor dw = mask[1] ? Empty({cols}, x.dtype(), x.device()) : Tensor();
  Tensor db = kCentered && mask[2] ? Empty({cols}, x.dtype(), x.device()) : Tensor();
  Tensor scratch;  // freed when this returns: stream-ordered reuse keeps it valid for the queued kernels
  if (dw.defined() || db.defined()) {
    scratch = Empty({cuda::NormParamScratchFloats(rows, cols)}, DType::kFloat32, x.device());
  }
  cuda::CheckLaunch(
      cuda::LaunchNormBackward(type, dy.raw_data(), x.raw_data(), DataOrNull(in[2]), FloatsOrNull(mean),
                               FloatsOrNull(rstd), dx.defined() ? dx.raw_data() : nullptr,
                               dw.defined() ? dw.raw_data() : nullptr, db.defined() ? db.raw_data() : nullptr,
                               FloatsOrNull(scratch), rows, cols, memory::CurrentStream(x.device())),
      op, x.device());
  if (kCentered) return {dx, dw, db};
  return {dx, dw};
}

const bool kRegistered = [] {
  SetCudaKernel("layer_norm", cuda::ContiguousInputs(NormForwardCudaKernel<true>));
  SetCudaKernel("rms_norm", cuda::ContiguousInputs(NormForwardCudaKernel<false>));
  SetCudaKernel("layer_norm_backward", cuda::ContiguousInputs(NormBackwardCudaKernel<true>));
  SetCudaKernel("rms_norm_backward", cuda::ContiguousInputs(NormBackwardCudaKernel<false>));
  return true;
}();

}  // namespace
}  // namespace tessel
