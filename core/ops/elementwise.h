// core/ops/elementwise.h — binary arithmetic with broadcasting, scalar forms, in-place add, clone/like.
//
// Invariant: binary ops broadcast numpy-style and require equal dtypes (cast explicitly with Cast());
// 16-bit floats compute in fp32 and round to nearest even on store. Backward of a broadcast input is
// the gradient summed back to the input's shape (SumToSize).
//
// Example:
//   Tensor y = Add(Mul(x_BTC, w_C), b_C);        // or: x_BTC * w_C + b_C
//   Tensor g = SumToSize(grad_BTC, {C});          // adjoint of broadcasting [C] → [B, T, C]
#pragma once

#include <span>

#include "core/tensor/tensor.h"

namespace tessel {

Tensor Add(const Tensor& a, const Tensor& b);
Tensor Sub(const Tensor& a, const Tensor& b);
Tensor Mul(const Tensor& a, const Tensor& b);
Tensor Div(const Tensor& a, const Tensor& b);
Tensor AddScalar(const Tensor& a, double value);
Tensor MulScalar(const Tensor& a, double value);
// dst += alpha * src (src broadcasts to dst). Not recorded by autograd; bumps dst's version.
void AddInPlace(const Tensor& dst, const Tensor& src, double alpha = 1.0);
// dst *= value, in place.
void MulScalarInPlace(const Tensor& dst, double value);
// dst += value · alpha, in place, for a floating dst: torch's fmadd(value, alpha, x) with both rounded to the
// compute type (alpha 1: AddScalar's values). Not recorded by autograd; bumps dst's version.
void AddScalarInPlace(const Tensor& dst, double value, double alpha = 1.0);
// dst *= src and dst /= src (src of dst's floating dtype, broadcasting to it), and dst /= value: Mul's, Div's and
// a division by a number's values in one pass. Not recorded by autograd; bump dst's version.
void MulInPlace(const Tensor& dst, const Tensor& src);
void DivInPlace(const Tensor& dst, const Tensor& src);
void DivScalarInPlace(const Tensor& dst, double value);
// torch's refusal to write in place into a tensor whose elements share memory (a stride-0 dim of size > 1, as
// expand gives): kFailedPrecondition naming `op`, the shape and the strides.
void CheckNoInternalOverlap(const Tensor& dst, const char* op);
// torch's refusal to read an operand that partly overlaps the tensor written in place (dst[1:] += dst[:-1]
// would read values already written): kInvalidArgument naming `op`, unless the two are the same elements.
void CheckNoPartialOverlap(const Tensor& dst, const Tensor& src, const char* op);
// A contiguous copy with its own storage (differentiable).
Tensor Clone(const Tensor& x);
Tensor OnesLike(const Tensor& x);
Tensor ZerosLike(const Tensor& x);
// Sums `x` over the dims that broadcasting expanded so the result has `shape` (differentiable).
Tensor SumToSize(const Tensor& x, std::span<const int64_t> shape);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return Add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return Sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return Mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return Div(a, b); }
inline Tensor operator+(const Tensor& a, double s) { return AddScalar(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return AddScalar(a, -s); }
inline Tensor operator*(const Tensor& a, double s) { return MulScalar(a, s); }
inline Tensor operator*(double s, const Tensor& a) { return MulScalar(a, s); }
inline Tensor operator/(const Tensor& a, double s) { return MulScalar(a, 1.0 / s); }

}  // namespace tessel
