// core/ops/linear_gelu_cuda.cc — the CUDA kernel of "linear_gelu" (core/ops/linear_gelu.h): linear's
// CUDA kernel (one cuBLASLt matmul with the bias epilogue, matmul_cuda.cc) and then gelu's (unary_cuda.cc),
// returning {gelu(pre), pre}; and of "gelu_precomputed" (returns its input). Linked only with a CUDA toolkit (//core/ops:linear_gelu_cuda).
//
// Invariant: the outputs equal the unfused Gelu(Linear(x, w, b)) on the device bit for bit (the same two
// kernels run); errors are those kernels' (kUnimplemented naming the op, shapes, dtype and device).
// NOTE: cuBLASLt's GELU_AUX_BIAS epilogue could write both outputs in the GEMM itself, but it implements
// only the tanh form and has not been run on a GPU here; the composition keeps both forms exact.
// Run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/dispatch/op.h"

namespace tessel {
namespace {

TensorList LinearGeluCudaKernel(std::span<const Tensor> in, const Attrs& attrs) {
  static const OpDef& linear = GetOp("linear");
  static const OpDef& gelu = GetOp("gelu");
  TESSEL_INTERNAL_ASSERT(linear.cuda && gelu.cuda, "linear_gelu: linear's or gelu's CUDA kernel is not linked");
  Tensor pre = linear.cuda(in, Attrs())[0];
  Tensor out = gelu.cuda(std::vector<Tensor>{pre}, attrs)[0];
  return {out, pre};
}

// gelu_precomputed(out, pre) → out: nothing to compute on any device (linear_gelu.cc).
TensorList GeluPrecomputedCudaKernel(std::span<const Tensor> in, const Attrs&) {
  TESSEL_CHECK(in[0].sizes() == in[1].sizes() && in[0].dtype() == in[1].dtype() && in[0].device() == in[1].device(),
               "gelu_precomputed: activation and pre-activation must match, got ", ShapeStr(in[0].sizes()), " ",
               in[0].dtype(), " on ", in[0].device(), " and ", ShapeStr(in[1].sizes()), " ", in[1].dtype(), " on ",
               in[1].device());
  return {in[0]};
}

const bool kRegistered = [] {
  SetCudaKernel("linear_gelu", LinearGeluCudaKernel);
  SetCudaKernel("gelu_precomputed", GeluPrecomputedCudaKernel);
  return true;
}();

}  // namespace
}  // namespace tessel
