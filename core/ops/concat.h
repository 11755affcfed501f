// core/ops/concat.h — cat and stack.
//
// Invariant: all inputs share dtype and every dim but `dim` (cat) / the whole shape (stack); empty
// tensors of matching rank take part normally.
//
// Example:
//   Tensor qkv_BT3C = Cat({q_BTC, k_BTC, v_BTC}, -1);
#pragma once

#include "core/tensor/tensor.h"

namespace tessel {

Tensor Cat(const TensorList& tensors, int64_t dim = 0);
Tensor Stack(const TensorList& tensors, int64_t dim = 0);

}  // namespace tessel
