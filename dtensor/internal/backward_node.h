// dtensor/internal/backward_node.h — records a one-input, one-output differentiable step whose backward
// is a C++ function (the role of torch.autograd.Function for Redistribute, FromLocal and ToLocal).
//
// Invariant: RecordBackward attaches a node iff grad mode is on, `input` requires grad and `output` is
// floating; then `output` requires grad, its grad_fn is the node, and the node's one edge leads to
// `input`. The backward function receives the gradient of `output` (never undefined) and returns the
// gradient of `input`, which must have `input`'s global shape.
//
// Example:
//   Tensor out = MakeDTensor(new_local, dst_spec, mesh);
//   internal::RecordBackward("redistribute", in, out, [=](const Tensor& g) { return Back(g); });
#pragma once

#include <functional>
#include <string>

#include "core/tensor/tensor.h"

namespace tessel::dtensor::internal {

void RecordBackward(std::string name, const Tensor& input, Tensor& output,
                    std::function<Tensor(const Tensor& grad_output)> backward);

}  // namespace tessel::dtensor::internal
