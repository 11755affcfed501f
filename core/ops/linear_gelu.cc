// core/ops/linear_gelu.cc — ops "linear_gelu" and "gelu_precomputed" (linear_gelu.h): CPU kernels,
// backward formulas.
//
// Why fused: in the GPT MLP, linear's output [B, T, 4C] was written by the GEMM, then read and written
// again by a separate gelu pass (another hand-off to the thread pool). Here each thread applies GELU to
// the rows of its own GEMM panel right after computing them (core/ops/gemm.h, [Note: GEMM epilogue]),
// a few rows at a time right after the bias (core/ops/matmul.cc BiasEpilogue), so both stay in L1.
// float32 only: float64 and 16-bit inputs run linear's kernel and then gelu's (the same values; those
// dtypes are not where the step spends its time).
//
// [Note: linear_gelu's two nodes] LinearGelu records two autograd nodes, as linear + gelu did, though
// one kernel computes both values: linear_gelu(x, w, b) → [out, pre] (backward: linear's formulas from
// the gradient of pre; out non-differentiable) and gelu_precomputed(out, pre) → out (no computation;
// backward: gelu_backward(grad, pre)). One node with the whole backward would evaluate gelu_backward
// twice under a split backward (core/autograd/split_backward.h: the I half needs grad_pre for grad_x,
// the W half again for grad_w); with two nodes the gelu node runs once, in I, and linear_gelu's node
// splits like linear's. Memory is the unfused pair's: pre is saved once (by gelu_precomputed, which
// does not save out), x and w by linear_gelu.
//
// NOTE: the bias gradient is linear's (a sum_to_size of grad_pre), not fused into the gelu_backward
// pass: a fused (grad_pre, grad_bias) op would need its own sharding rule for the Partial bias gradient,
// and the sum is one cheap read of grad_pre.
#include "core/ops/linear_gelu.h"

#include "core/autograd/call.h"
#include "core/base/error.h"
#include "core/dispatch/dispatcher.h"
#include "core/ops/linear_forward.h"
#include "core/ops/matmul.h"
#include "core/ops/pointwise_kernels.h"
#include "core/ops/unary.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

constexpr char kOp[] = "linear_gelu";
constexpr char kPrecomputed[] = "gelu_precomputed";

bool TanhForm(const Attrs& attrs, const char* op) {
  const std::string& approximate = attrs.GetString("approximate");
  TESSEL_CHECK(approximate == "none" || approximate == "tanh", op, ": approximate must be 'none' or 'tanh', got '",
               approximate, "'");
  return approximate == "tanh";
}

// in: x, weight, bias?; returns out = gelu(pre), pre.
TensorList LinearGeluKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  const Tensor bias = in.size() > 2 ? in[2] : Tensor();
  const bool tanh_form = TanhForm(attrs, kOp);
  CheckLinearArgs(kOp, x, w, bias);
  if (x.dtype() != DType::kFloat32) {
    Tensor pre = LinearForward(kOp, x, w, bias);
    static const OpDef& gelu = GetOp("gelu");
    return {gelu.cpu(std::vector<Tensor>{pre}, attrs)[0], pre};
  }
  Shape out_shape(x.sizes().begin(), x.sizes().end() - 1);
  out_shape.push_back(w.size(0));
  Tensor out = Empty(out_shape, DType::kFloat32, x.device());
  const PointwiseKernels& k = ActivePointwiseKernels();
  float* po = static_cast<float*>(out.raw_data());
  Tensor pre = LinearForward(kOp, x, w, bias, [&](const Tensor& acc, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    const float* pa = static_cast<const float*>(acc.raw_data());
    const int64_t n = acc.size(acc.dim() - 1);
    if (c0 == 0 && c1 == n) return k.gelu(pa + r0 * n, po + r0 * n, (r1 - r0) * n, tanh_form);  // contiguous rows
    for (int64_t r = r0; r < r1; ++r) k.gelu(pa + r * n + c0, po + r * n + c0, c1 - c0, tanh_form);
  });
  return {out, pre};
}

// linear_gelu's own node: the gradient reaching pre (from gelu_precomputed's node) through linear's
// formulas. out is non-differentiable here: its gradient enters through gelu_precomputed.
TensorList LinearGeluBackward(const BackwardContext& c) {
  return LinearInputGrads(c.inputs[0], c.inputs[1], c.grad_outputs[1], c.needs_input_grad);
}

// gelu_precomputed(out, pre) → out: gelu whose value linear_gelu already computed; backward is gelu's
// (grad_pre = gelu_backward(grad, pre)), a node of its own (see the file comment).
TensorList GeluPrecomputedKernel(std::span<const Tensor> in, const Attrs& attrs) {
  TanhForm(attrs, kPrecomputed);
  TESSEL_CHECK(in[0].sizes() == in[1].sizes() && in[0].dtype() == in[1].dtype(), kPrecomputed,
               ": activation and pre-activation must match, got ", ShapeStr(in[0].sizes()), " ", in[0].dtype(),
               " and ", ShapeStr(in[1].sizes()), " ", in[1].dtype());
  return {in[0]};
}

TensorList GeluPrecomputedBackward(const BackwardContext& c) {
  static const OpDef& gelu_backward = GetOp("gelu_backward");
  return {Tensor(), autograd::CallOp1(gelu_backward, {c.grad_outputs[0], c.inputs[1]}, c.attrs)};
}

const OpDef& kLinearGelu = RegisterOp({.name = kOp,
                                       .cpu = LinearGeluKernel,
                                       .backward = LinearGeluBackward,
                                       .non_differentiable_outputs = {0}});
// Saves pre only: out is also proj's saved input, and holding it here too would keep it alive past
// proj's backward (a higher peak than linear + gelu, which the ledger tests measure).
const OpDef& kGeluPrecomputed = RegisterOp(
    {.name = kPrecomputed, .cpu = GeluPrecomputedKernel, .backward = GeluPrecomputedBackward, .saved_inputs = {1}});

thread_local int unfused_scopes = 0;

}  // namespace

UnfusedLinearGeluScope::UnfusedLinearGeluScope() { ++unfused_scopes; }
UnfusedLinearGeluScope::~UnfusedLinearGeluScope() { --unfused_scopes; }

Tensor LinearGelu(const Tensor& x, const Tensor& weight, const Tensor& bias, const std::string& approximate) {
  if (unfused_scopes > 0) return Gelu(Linear(x, weight, bias), approximate);
  const Attrs attrs = Attrs().Set("approximate", approximate);
  const TensorList out_pre = autograd::CallOp(kLinearGelu, {x, weight, bias}, attrs);
  return autograd::CallOp1(kGeluPrecomputed, {out_pre[0], out_pre[1]}, attrs);
}

}  // namespace tessel
