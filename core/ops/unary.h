// core/ops/unary.h — pointwise functions of one tensor (activations, math, clamp, cast).
//
// Invariant: output has the input's shape and dtype (Cast: the requested dtype); 16-bit floats compute
// in fp32. Backward formulas are pointwise ops too (e.g. gelu_backward), so they shard like the input.
//
// Example:
//   Tensor h = Gelu(x, "tanh");         // approximate: "none" (exact erf) or "tanh"
//   Tensor p = Clamp(x, 0.0, 6.0);      // std::nullopt for an open side
#pragma once

#include <optional>
#include <string>

#include "core/tensor/tensor.h"

namespace tessel {

Tensor Neg(const Tensor& x);
Tensor Exp(const Tensor& x);
Tensor Log(const Tensor& x);
Tensor Sqrt(const Tensor& x);
Tensor Rsqrt(const Tensor& x);
Tensor Pow(const Tensor& x, double exponent);
Tensor Tanh(const Tensor& x);
Tensor Sigmoid(const Tensor& x);
Tensor Relu(const Tensor& x);
Tensor Gelu(const Tensor& x, const std::string& approximate = "none");
Tensor Silu(const Tensor& x);
Tensor Abs(const Tensor& x);
Tensor Sin(const Tensor& x);
Tensor Cos(const Tensor& x);
Tensor Erf(const Tensor& x);
Tensor Log1p(const Tensor& x);
Tensor Expm1(const Tensor& x);
Tensor Exp2(const Tensor& x);
// Rounding (zero gradient; an integer tensor gives a copy, as torch): round is half to even.
Tensor Floor(const Tensor& x);
Tensor Ceil(const Tensor& x);
Tensor Round(const Tensor& x);
Tensor Clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
// Converts dtype (differentiable between floating dtypes: the gradient is cast back).
Tensor Cast(const Tensor& x, DType dtype);

inline Tensor operator-(const Tensor& x) { return Neg(x); }

}  // namespace tessel
