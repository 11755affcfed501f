// core/tensor/copy.h — the strided, dtype-converting copy kernel under copy_, Contiguous() and Cast, and
// DenseOrCopy / DenseAs, the contiguous form (in a given dtype) kernels read.
//
// Invariant: CopyInto(dst, src) writes every element of dst exactly once with src's value converted to
// dst's dtype (floats → ints truncate toward zero; → bool is "!= 0"; → bf16/fp16 round to nearest even);
// src may broadcast to dst's shape (stride-0 dims). It does not record autograd history and bumps
// dst's version counter. Overlapping src/dst memory is not supported (copy src first).
//
// Example:
//   Tensor c = Empty(t.sizes(), DType::kFloat32);
//   CopyInto(c, Transpose(t, 0, 1));   // materializes a transposed view
#pragma once

#include "core/tensor/tensor.h"

namespace tessel {

// REQUIRES: both dense; src broadcastable to dst.sizes().
void CopyInto(const Tensor& dst, const Tensor& src);

// t itself when it is contiguous (or undefined), else a contiguous copy on t's device: how a kernel reads
// a strided input (not recorded by autograd, no dispatch).
Tensor DenseOrCopy(const Tensor& t);
// The same converted to `dtype`: t itself when it is already contiguous in dtype (or undefined).
Tensor DenseAs(const Tensor& t, DType dtype);

}  // namespace tessel
