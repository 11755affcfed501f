// core/ops/attention_cuda.cc — the CUDA kernel of "scaled_dot_product_attention" (flash-style forward,
// core/ops/attention.cu) behind attention.cc's schema: q [..., T, D], k [..., S, D], v [..., S, Dv]
// {is_causal, scale} → out [..., T, Dv] (q's dtype), lse [..., T] (float32). Linked only with a CUDA
// toolkit (//core/ops:attention_cuda). "scaled_dot_product_attention_backward"(grad_out, q, k, v, out,
// lse) runs the matching flash-style backward (dq, dk, dv in q's dtype; P recomputed from lse).
//
// Invariant: for contiguous float32 / bfloat16 CUDA tensors with equal leading dims, D, Dv <= 128 and at
// most 65535 heads, out and lse equal the CPU op's to fp32 rounding; anything else fails with
// kUnimplemented / kInvalidArgument naming the op, shapes, dtype and device.
// Run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include "core/dispatch/dispatcher.h"
#include "core/dispatch/op.h"
#include "core/memory/stream.h"
#include "core/ops/cuda/kernel_checks.h"
#include "core/ops/cuda/row_kernels_launch.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

struct Heads {
  Shape lead;
  int64_t bh, t, s, d, dv;
  cuda::ElemType type;
};

// q [..., T, D], k [..., S, D], v [..., S, Dv] at in[first..first+2]: shapes, dtypes, devices, limits.
Heads CheckQkv(const char* op, std::span<const Tensor> in, size_t first) {
  const Tensor& q = in[first];
  const Tensor& k = in[first + 1];
  const Tensor& v = in[first + 2];
  TESSEL_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), op, ": q, k, v need the same rank >= 2, got ",
               DescribeInputs(in));
  const int64_t nd = q.dim();
  Heads h{Shape(q.sizes().begin(), q.sizes().end() - 2),
          0,
          q.size(nd - 2),
          k.size(nd - 2),
          q.size(nd - 1),
          v.size(nd - 1),
          cuda::ElemType::kFloat32};
  TESSEL_CHECK(Shape(k.sizes().begin(), k.sizes().end() - 2) == h.lead &&
                   Shape(v.sizes().begin(), v.sizes().end() - 2) == h.lead && k.size(nd - 1) == h.d &&
                   v.size(nd - 2) == h.s && k.dtype() == q.dtype() && v.dtype() == q.dtype(),
               op, ": expected q [..., T, D], k [..., S, D], v [..., S, Dv] with equal leading dims and dtype, got ",
               DescribeInputs(in));
  h.type = cuda::CudaRowType(q, q.device(), op, "q");
  cuda::CudaRowType(k, q.device(), op, "k");
  cuda::CudaRowType(v, q.device(), op, "v");
  h.bh = NumElements(h.lead);
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, h.d <= cuda::kMaxHeadDim && h.dv <= cuda::kMaxHeadDim && h.bh <= 65535,
                    op, ": the CUDA kernel takes head dims up to ", cuda::kMaxHeadDim, " and up to 65535 heads, got ",
                    DescribeInputs(in), " on ", q.device());
  return h;
}

Shape WithLast(Shape s, std::initializer_list<int64_t> tail) {
  s.insert(s.end(), tail.begin(), tail.end());
  return s;
}

TensorList AttentionCudaKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const char* op = "scaled_dot_product_attention";
  const Heads h = CheckQkv(op, in, 0);
  const Tensor& q = in[0];
  Tensor out = Empty(WithLast(h.lead, {h.t, h.dv}), q.dtype(), q.device());
  Tensor lse = Empty(WithLast(h.lead, {h.t}), DType::kFloat32, q.device());
  cuda::CheckLaunch(cuda::LaunchFlashForward(h.type, q.raw_data(), in[1].raw_data(), in[2].raw_data(), out.raw_data(),
                                             static_cast<float*>(lse.raw_data()), h.bh, h.t, h.s, h.d, h.dv,
                                             static_cast<float>(attrs.GetDouble("scale")), attrs.GetBool("is_causal"),
                                             memory::CurrentStream(q.device())),
                    op, q.device());
  return {out, lse};
}

// in: grad_out, q, k, v, out, lse.
TensorList AttentionBackwardCudaKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const char* op = "scaled_dot_product_attention_backward";
  const Heads h = CheckQkv(op, in, 1);
  const Tensor& q = in[1];
  const Shape out_shape = WithLast(h.lead, {h.t, h.dv});
  for (int i : {0, 4}) {
    TESSEL_CHECK(in[i].sizes() == out_shape && in[i].dtype() == q.dtype(), op, ": input ", i, " must have shape ",
                 ShapeStr(out_shape), " and q's dtype, got ", DescribeInputs(in));
    cuda::CudaRowType(in[i], q.device(), op, i == 0 ? "grad_out" : "out");
  }
  TESSEL_CHECK(in[5].sizes() == WithLast(h.lead, {h.t}) && in[5].dtype() == DType::kFloat32 &&
                   in[5].device() == q.device() && in[5].is_contiguous(),
               op, ": lse must be a contiguous float32 ", ShapeStr(WithLast(h.lead, {h.t})), " on ", q.device(),
               ", got ", DescribeInputs(in));
  Tensor dq = Empty(q.sizes(), q.dtype(), q.device());
  Tensor dk = Empty(in[2].sizes(), q.dtype(), q.device());
  Tensor dv = Empty(in[3].sizes(), q.dtype(), q.device());
  Tensor dd = Empty({h.bh * h.t}, DType::kFloat32, q.device());
  cuda::CheckLaunch(
      cuda::LaunchFlashBackward(h.type, in[0].raw_data(), q.raw_data(), in[2].raw_data(), in[3].raw_data(),
                                in[4].raw_data(), static_cast<const float*>(in[5].raw_data()), dq.raw_data(),
                                dk.raw_data(), dv.raw_data(), static_cast<float*>(dd.raw_data()), h.bh, h.t, h.s, h.d,
                                h.dv, static_cast<float>(attrs.GetDouble("scale")), attrs.GetBool("is_causal"),
                                memory::CurrentStream(q.device())),
      op, q.device());
  return {dq, dk, dv};
}

const bool kRegistered = [] {
  SetCudaKernel("scaled_dot_product_attention", cuda::ContiguousInputs(AttentionCudaKernel));
  SetCudaKernel("scaled_dot_product_attention_backward", cuda::ContiguousInputs(AttentionBackwardCudaKernel));
  return true;
}();

}  // namespace
}  // namespace tessel
