// core/ops/cuda/dropout_launch.h — LaunchDropout: the CUDA dropout kernel (core/ops/dropout.cu) behind
// core/ops/dropout_cuda.cc.
//
// Invariant: out[i] = x[i] · (keep ? scale : 0) in float32 (bfloat16 widened on load, rounded once on
// store), keep from cuda/dropout_math.h at counter offset + base + full index; the CPU kernel's product.
//
// Example: see dropout_cuda.cc.
#pragma once

#include <cstdint>

#include "core/ops/cuda/elementwise_launch.h"
#include "core/ops/cuda/offset_calculator.h"

namespace tessel::cuda {

struct DropoutParams {
  uint64_t seed, first_counter;  // generator offset + full index of the block's first element
  uint32_t threshold;
  float scale;
};

// calc's operands: 0 out, 1 x, 2 the full tensor's row-major strides (element index within the full tensor
// relative to the block's first element). Returns the launch error, empty on success.
const char* LaunchDropout(ElemType type, void* out, const void* x, const OffsetCalculator<3>& calc, int64_t n,
                          const DropoutParams& p, void* stream);

}  // namespace tessel::cuda
