// core/ops/cuda/ternary_math.h — one element of the CUDA selection and comparison kernels
// (core/ops/ternary.cu): where, masked_fill, eq / lt / gt, shared with a host test (ternary_math_test.cc)
// that runs them in the kernel's order against the CPU ops (core/ops/ternary.cc).
//
// Invariant: selections move elements as raw bits of their size W (any dtype of 1, 2, 4 or 8 bytes, like
// the CPU's bit select of 16-bit floats), reading the bool mask as bytes (0 or 1); comparisons compare
// float32 and bfloat16 in float32 (bf16 widened exactly, so the CPU's ToCompute comparison) and int64 as
// int64, writing 0 / 1 bytes. Offsets come from an OffsetCalculator over {out, operands...} broadcast
// strides at linear index i of the output shape.
//
// Example:
//   for (int64_t i = 0; i < n; ++i) WhereAt(out, cond, a, b, calc4, i);
#pragma once

#include <cstdint>

#include "core/ops/cuda/bf16.h"
#include "core/ops/cuda/offset_calculator.h"

namespace tessel::cuda {

enum class CompareOp : uint8_t { kEq, kLt, kGt, kNe, kLe, kGe };

TESSEL_HOST_DEVICE inline float Widen(float v) { return v; }
TESSEL_HOST_DEVICE inline float Widen(uint16_t bf16) { return Bf16ToFloat(bf16); }
TESSEL_HOST_DEVICE inline int64_t Widen(int64_t v) { return v; }

template <typename T>
TESSEL_HOST_DEVICE inline void CompareAt(CompareOp op, uint8_t* out, const T* a, const T* b,
                                         const OffsetCalculator<3>& calc, int64_t i) {
  int64_t off[3];
  calc.Get(i, off);
  const auto x = Widen(a[off[1]]), y = Widen(b[off[2]]);
  switch (op) {  // (NaN: only != is true, as IEEE and torch say)
    case CompareOp::kEq: out[off[0]] = x == y; break;
    case CompareOp::kLt: out[off[0]] = x < y; break;
    case CompareOp::kGt: out[off[0]] = x > y; break;
    case CompareOp::kNe: out[off[0]] = x != y; break;
    case CompareOp::kLe: out[off[0]] = x <= y; break;
    case CompareOp::kGe: out[off[0]] = x >= y; break;
  }
}

template <typename W>
TESSEL_HOST_DEVICE inline void WhereAt(W* out, const uint8_t* cond, const W* a, const W* b,
                                       const OffsetCalculator<4>& calc, int64_t i) {
  int64_t off[4];
  calc.Get(i, off);
  out[off[0]] = cond[off[1]] != 0 ? a[off[2]] : b[off[3]];
}

// `value` holds the fill value's bits in x's dtype (converted on the host as the CPU kernel converts it).
template <typename W>
TESSEL_HOST_DEVICE inline void MaskedFillAt(W* out, const W* x, const uint8_t* mask, W value,
                                            const OffsetCalculator<3>& calc, int64_t i) {
  int64_t off[3];
  calc.Get(i, off);
  out[off[0]] = mask[off[2]] != 0 ? value : x[off[1]];
}

}  // namespace tessel::cuda
