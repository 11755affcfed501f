// core/ops/attention_cuda.cc — the CUDA kernel of "scaled_dot_product_attention" (flash-style forward,
// core/ops/attention.cu) behind attention.cc's schema: q [..., T, D], k [..., S, D], v [..., S, Dv]
// {is_causal, scale} → out [..., T, Dv] (q's dtype), lse [..., T] (float32). Linked only with a CUDA
// toolkit (//core/ops:attention_cuda). "scaled_dot_product_attention_backward" has no CUDA kernel yet,
// so backward through attention on CUDA tensors fails with the dispatcher's error naming that op.
//
// Invariant: for contiguous float32 / bfloat16 CUDA tensors with equal leading dims, D, Dv <= 128 and at
// most 65535 heads, out and lse equal the CPU op's to fp32 rounding; anything else fails with
// kUnimplemented / kInvalidArgument naming the op, shapes, dtype and device. Compiled here; NOT yet run
// on a GPU.
#include "core/dispatch/dispatcher.h"
#include "core/dispatch/op.h"
#include "core/memory/stream.h"
#include "core/ops/cuda/kernel_checks.h"
#include "core/ops/cuda/row_kernels_launch.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

TensorList AttentionCudaKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const char* op = "scaled_dot_product_attention";
  const Tensor& q = in[0];
  const Tensor& k = in[1];
  const Tensor& v = in[2];
  TESSEL_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), op, ": q, k, v need the same rank >= 2, got ",
               DescribeInputs(in));
  const int64_t nd = q.dim();
  const Shape lead(q.sizes().begin(), q.sizes().end() - 2);
  TESSEL_CHECK(Shape(k.sizes().begin(), k.sizes().end() - 2) == lead &&
                   Shape(v.sizes().begin(), v.sizes().end() - 2) == lead && k.size(nd - 1) == q.size(nd - 1) &&
                   v.size(nd - 2) == k.size(nd - 2) && k.dtype() == q.dtype() && v.dtype() == q.dtype(),
               op, ": expected q [..., T, D], k [..., S, D], v [..., S, Dv] with equal leading dims and dtype, got ",
               DescribeInputs(in));
  const cuda::ElemType type = cuda::CudaRowType(q, q.device(), op, "q");
  cuda::CudaRowType(k, q.device(), op, "k");
  cuda::CudaRowType(v, q.device(), op, "v");
  const int64_t t = q.size(nd - 2), d = q.size(nd - 1), s = k.size(nd - 2), dv = v.size(nd - 1);
  const int64_t bh = NumElements(lead);
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, d <= cuda::kMaxHeadDim && dv <= cuda::kMaxHeadDim && bh <= 65535, op,
                    ": the CUDA kernel takes head dims up to ", cuda::kMaxHeadDim, " and up to 65535 heads, got ",
                    DescribeInputs(in), " on ", q.device());
  Shape out_shape = lead, lse_shape = lead;
  out_shape.push_back(t);
  out_shape.push_back(dv);
  lse_shape.push_back(t);
  Tensor out = Empty(out_shape, q.dtype(), q.device());
  Tensor lse = Empty(lse_shape, DType::kFloat32, q.device());
  cuda::CheckLaunch(cuda::LaunchFlashForward(type, q.raw_data(), k.raw_data(), v.raw_data(), out.raw_data(),
                                             static_cast<float*>(lse.raw_data()), bh, t, s, d, dv,
                                             static_cast<float>(attrs.GetDouble("scale")), attrs.GetBool("is_causal"),
                                             memory::CurrentStream(q.device())),
                    op, q.device());
  return {out, lse};
}

const bool kRegistered = (SetCudaKernel("scaled_dot_product_attention", AttentionCudaKernel), true);

}  // namespace
}  // namespace tessel
