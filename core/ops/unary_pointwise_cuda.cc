// core/ops/unary_pointwise_cuda.cc — the CUDA kernels of unary.cc's pointwise ops other than gelu and cast
// (neg, exp, log, sqrt, rsqrt, pow, tanh, sigmoid, relu, silu, abs, clamp) and of its fused backward ops
// (tanh_backward, sigmoid_backward, threshold_backward, silu_backward, abs_backward, clamp_backward), in
// new files beside unary.cc (core/ops/unary_pointwise.cu, cuda/pointwise_math.h). The backward formulas
// stay unary.cc's. Linked only with a CUDA toolkit (//core/ops:unary_pointwise_cuda).
//
// Invariant: float32 / bfloat16 CUDA tensors of any strides (strided inputs are made contiguous on the
// device first, as the CPU kernels do on the host) give a contiguous output equal to the CPU kernel's up
// to the last bits of exp / log / tanh / powf (cuda/pointwise_math.h); integer dtypes fail with
// kUnimplemented naming the op, shape, dtype and device; attribute checks and messages are the CPU
// kernels'. Run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <cmath>
#include <limits>
#include <string>

#include "core/dispatch/dispatcher.h"
#include "core/dispatch/op.h"
#include "core/memory/stream.h"
#include "core/ops/cuda/bf16.h"
#include "core/ops/cuda/kernel_checks.h"
#include "core/ops/cuda/pointwise_launch.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

// exponent (pow), min / max (clamp, clamp_backward) with the CPU kernels' defaults.
cuda::PointwiseParams ParamsFrom(const Attrs& a) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  return {static_cast<float>(a.GetDouble("exponent", 1.0)), static_cast<float>(a.GetDouble("min", -kInf)),
          static_cast<float>(a.GetDouble("max", kInf))};
}

Kernel PointwiseCuda(cuda::PointwiseOp op, const char* name) {
  return [op, name](std::span<const Tensor> in, const Attrs& a) -> TensorList {
    if (op == cuda::PointwiseOp::kClamp) {
      TESSEL_CHECK(a.Has("min") || a.Has("max"), "clamp: at least one of min or max must be given (input shape ",
                   ShapeStr(in[0].sizes()), ")");
    }
    const cuda::ElemType type = cuda::CudaFloatType(in[0], name);
    const Tensor x = DenseOrCopy(in[0]);
    Tensor y = Empty(x.sizes(), x.dtype(), x.device());
    cuda::PointwiseParams p = ParamsFrom(a);
    if (op == cuda::PointwiseOp::kPow && x.dtype() == DType::kBFloat16) {
      p.exponent = cuda::Bf16ToFloat(cuda::FloatToBf16(p.exponent));  // torch's: the exponent in the tensor's dtype
    }
    cuda::CheckLaunch(cuda::LaunchPointwise(op, type, x.raw_data(), y.raw_data(), x.numel(), p,
                                            memory::CurrentStream(x.device())),
                      name, x.device());
    return {y};
  };
}

Kernel PointwiseGradCuda(cuda::PointwiseGradOp op, const char* name) {
  return [op, name](std::span<const Tensor> in, const Attrs& a) -> TensorList {
    TESSEL_CHECK(in[0].sizes() == in[1].sizes() && in[0].dtype() == in[1].dtype(), name,
                 ": grad and saved tensor must match, got ", DescribeInputs(in));
    TESSEL_CHECK(in[0].device() == in[1].device(), name, ": grad on ", in[0].device(), ", saved tensor on ",
                 in[1].device());
    const cuda::ElemType type = cuda::CudaFloatType(in[1], name);
    const Tensor g = DenseOrCopy(in[0]), t = DenseOrCopy(in[1]);
    Tensor d = Empty(t.sizes(), t.dtype(), t.device());
    cuda::PointwiseParams p = ParamsFrom(a);
    if (op == cuda::PointwiseGradOp::kThreshold) p.lo = static_cast<float>(a.GetDouble("threshold", 0.0));
    cuda::CheckLaunch(cuda::LaunchPointwiseGrad(op, type, g.raw_data(), t.raw_data(), d.raw_data(), t.numel(), p,
                                                memory::CurrentStream(t.device())),
                      name, t.device());
    return {d};
  };
}

const bool kRegistered = [] {
  using P = cuda::PointwiseOp;
  using G = cuda::PointwiseGradOp;
  for (auto [op, name] : {std::pair{P::kNeg, "neg"}, {P::kExp, "exp"}, {P::kLog, "log"}, {P::kSqrt, "sqrt"},
                          {P::kRsqrt, "rsqrt"}, {P::kPow, "pow"}, {P::kTanh, "tanh"}, {P::kSigmoid, "sigmoid"},
                          {P::kRelu, "relu"}, {P::kSilu, "silu"}, {P::kAbs, "abs"}, {P::kClamp, "clamp"},
                          {P::kSin, "sin"}, {P::kCos, "cos"}, {P::kErf, "erf"}, {P::kLog1p, "log1p"},
                          {P::kExpm1, "expm1"}, {P::kExp2, "exp2"}, {P::kFloor, "floor"}, {P::kCeil, "ceil"},
                          {P::kRound, "round"}}) {
    SetCudaKernel(name, PointwiseCuda(op, name));
  }
  for (auto [op, name] : {std::pair{G::kTanh, "tanh_backward"}, {G::kSigmoid, "sigmoid_backward"},
                          {G::kThreshold, "threshold_backward"}, {G::kSilu, "silu_backward"},
                          {G::kAbs, "abs_backward"}, {G::kClamp, "clamp_backward"}}) {
    SetCudaKernel(name, PointwiseGradCuda(op, name));
  }
  return true;
}();

}  // namespace
}  // namespace tessel
