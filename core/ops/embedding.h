// core/ops/embedding.h — embedding lookup (rows of a table by int64 index).
//
// Example:
//   Tensor x_BTC = Embedding(wte_VC, idx_BT);     // idx in [0, V); out-of-range → kOutOfRange
#pragma once

#include "core/tensor/tensor.h"

namespace tessel {

Tensor Embedding(const Tensor& weight, const Tensor& indices);

}  // namespace tessel
