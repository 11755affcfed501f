// core/ops/softmax.h — softmax and log_softmax along one dim (max-subtracted, stable).
//
// Example:
//   Tensor p_BTV = Softmax(logits_BTV, -1);
#pragma once

#include "core/tensor/tensor.h"

namespace tessel {

Tensor Softmax(const Tensor& x, int64_t dim);
Tensor LogSoftmax(const Tensor& x, int64_t dim);

}  // namespace tessel
