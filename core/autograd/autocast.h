// core/autograd/autocast.h — torch.autocast for tessel's ops: a thread-local region in which CallOp
// casts the floating inputs of the matrix products to a lower precision (bf16 by default, as torch's CPU
// autocast) and the inputs of the losses up to float32, recorded by autograd like any cast, so
// parameters and their gradients stay float32 while the GEMMs run in bf16.
//
// Invariant: the casts are ops on the autograd graph (each "cast" records its own backward, which casts
// the gradient back); the backward engine runs with autocast off (gradients flow in the dtypes the
// forward's casts recorded, as torch), and an activation-checkpointing rerun restores the state of
// its first forward. Policies by op name follow torch's CPU autocast lists:
//   lower precision: matmul, linear, linear_gelu, scaled_dot_product_attention (float32 / float16 /
//     bfloat16 inputs cast to the region's dtype; float64 inputs are not eligible and stay, as torch);
//   float32: cross_entropy (lower-precision floating inputs cast up);
//   widest type: cat, stack (floating inputs cast to the widest floating dtype among them).
// Every other op runs in the dtypes it is given.
//
// Example:
//   { AutocastGuard bf16(true, DType::kBFloat16); loss = CrossEntropy(model.Forward(x), y); }
//   Backward(loss);  // the parameters' .grad are float32
#pragma once

#include "core/dispatch/op.h"
#include "core/tensor/tensor.h"

namespace tessel {

bool AutocastEnabled();
DType AutocastDType();
// Sets this thread's region with no scope (the Python face's context manager restores it); prefer the guard.
void SetAutocastState(bool enabled, DType dtype);

class AutocastGuard {
 public:
  AutocastGuard(bool enabled, DType dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool previous_enabled_;
  DType previous_dtype_;
};

namespace autograd::internal {
// The inputs `op` runs on in the current autocast region (the inputs themselves outside one).
TensorList AutocastInputs(const OpDef& op, TensorList inputs);
}  // namespace autograd::internal

}  // namespace tessel
