// core/ops/cuda/ternary_launch.h — plain C++ entry points of core/ops/ternary.cu (where, masked_fill,
// eq / lt / gt on CUDA; cuda/ternary_math.h is the per-element step). Enqueued on `stream`; each returns
// the launch error, "" on success. Compiled for sm_90a + compute_90 PTX;
// run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
//
// Example:
//   cuda::LaunchWhere(4, out, cond, a, b, calc4, n, stream);
#pragma once

#include <cstdint>

#include "core/ops/cuda/offset_calculator.h"
#include "core/ops/cuda/ternary_math.h"

namespace tessel::cuda {

enum class CompareType : uint8_t { kFloat32, kBFloat16, kInt64 };

const char* LaunchCompare(CompareOp op, CompareType type, uint8_t* out, const void* a, const void* b,
                          const OffsetCalculator<3>& calc, int64_t n, void* stream);
// element_bytes: 1, 2, 4 or 8.
const char* LaunchWhere(int64_t element_bytes, void* out, const uint8_t* cond, const void* a, const void* b,
                        const OffsetCalculator<4>& calc, int64_t n, void* stream);
// value_bits: the fill value's bits in the low element_bytes bytes.
const char* LaunchMaskedFill(int64_t element_bytes, void* out, const void* x, const uint8_t* mask, uint64_t value_bits,
                             const OffsetCalculator<3>& calc, int64_t n, void* stream);

}  // namespace tessel::cuda
