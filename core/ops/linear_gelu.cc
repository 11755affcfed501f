// core/ops/linear_gelu.cc — op "linear_gelu" (linear_gelu.h): CPU kernel, backward formula.
//
// Why fused: in the GPT MLP, linear's output [B, T, 4C] was written by the GEMM, then read and written
// again by a separate gelu pass (another hand-off to the thread pool). Here each thread applies GELU to
// the rows of its own GEMM panel right after computing them (core/ops/gemm.h, [Note: GEMM epilogue]),
// a few rows at a time right after the bias (core/ops/matmul.cc BiasEpilogue), so both stay in L1.
// float32 only: float64 and 16-bit inputs run linear's kernel and then gelu's (the same values; those
// dtypes are not where the step spends its time).
//
// NOTE: the bias gradient is linear's (a sum_to_size of grad_pre), not fused into the gelu_backward
// pass: a fused (grad_pre, grad_bias) op would need its own sharding rule for the Partial bias gradient,
// and the sum is one cheap read of grad_pre.
#include "core/ops/linear_gelu.h"

#include "core/autograd/call.h"
#include "core/base/error.h"
#include "core/dispatch/dispatcher.h"
#include "core/ops/linear_forward.h"
#include "core/ops/pointwise_kernels.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

constexpr char kOp[] = "linear_gelu";

bool TanhForm(const Attrs& attrs) {
  const std::string& approximate = attrs.GetString("approximate");
  TESSEL_CHECK(approximate == "none" || approximate == "tanh", kOp, ": approximate must be 'none' or 'tanh', got '",
               approximate, "'");
  return approximate == "tanh";
}

// in: x, weight, bias?; returns out = gelu(pre), pre.
TensorList LinearGeluKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  const Tensor bias = in.size() > 2 ? in[2] : Tensor();
  const bool tanh_form = TanhForm(attrs);
  CheckLinearArgs(kOp, x, w, bias);
  if (x.dtype() != DType::kFloat32) {
    Tensor pre = LinearForward(kOp, x, w, bias);
    return {GetOp("gelu").cpu(std::vector<Tensor>{pre}, attrs)[0], pre};
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

TensorList LinearGeluBackward(const BackwardContext& c) {
  const Tensor& g = c.grad_outputs[0];
  if (!g.defined()) return {Tensor(), Tensor(), Tensor()};
  static const OpDef& gelu_backward = GetOp("gelu_backward");
  const Tensor grad_pre = autograd::CallOp1(gelu_backward, {g, c.outputs[1]}, c.attrs);
  return LinearInputGrads(c.inputs[0], c.inputs[1], c.inputs.size() > 2 && c.inputs[2].defined(), grad_pre,
                          c.needs_input_grad);
}

const OpDef& kLinearGelu = RegisterOp({.name = kOp,
                                       .cpu = LinearGeluKernel,
                                       .backward = LinearGeluBackward,
                                       .save_outputs = true,
                                       .saved_outputs = {1},
                                       .non_differentiable_outputs = {1}});

}  // namespace

Tensor LinearGelu(const Tensor& x, const Tensor& weight, const Tensor& bias, const std::string& approximate) {
  return autograd::CallOp(kLinearGelu, {x, weight, bias}, Attrs().Set("approximate", approximate))[0];
}

}  // namespace tessel
