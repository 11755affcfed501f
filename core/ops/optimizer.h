// core/ops/optimizer.h — fused, in-place optimizer update kernels (pointwise over a parameter).
//
// Invariant: all tensors of one call have the parameter's shape; updates are in place and unrecorded
// (call under NoGradGuard). Pointwise, so on DTensors each rank updates its own shard.
//
// Example:
//   AdamWStepInPlace(p, g, m, v, {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
//                                  .weight_decay = 0.1, .step = 1});
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor/tensor.h"

namespace tessel {

struct AdamWHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  int64_t step = 1;  // 1-based, for bias correction
};
void AdamWStepInPlace(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                      const AdamWHyper& h);
// The same update for many parameters in one call: element for element what AdamWStepInPlace does on
// each (h.step is ignored: group i uses steps[i]), with every element of every group split over the
// thread budget at once, so a model's many small parameters (biases, norms) do not run one thread at
// a time. All spans have one entry per group. Plain tensors, or DTensors of one mesh (optim::AdamW
// groups them so).
void AdamWStepForeachInPlace(std::span<const Tensor> params, std::span<const Tensor> grads,
                             std::span<const Tensor> exp_avgs, std::span<const Tensor> exp_avg_sqs,
                             std::span<const int64_t> steps, const AdamWHyper& h);
// SGD with momentum (PyTorch semantics: buf = momentum*buf + (1-dampening)*g, and buf = g on the first
// step (`initialize_buffer`); p -= lr*buf, or lr*(g + momentum*buf) with nesterov). An undefined
// momentum_buffer means plain SGD.
void SgdStepInPlace(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, double lr,
                    double momentum, double dampening, double weight_decay, bool nesterov,
                    bool initialize_buffer);

}  // namespace tessel
