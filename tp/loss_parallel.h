// tp/loss_parallel.h — LossParallel: the scope in which cross-entropy runs on vocab-sharded logits
// without gathering them, as torch.distributed.tensor.parallel.loss_parallel().
//
// How it works: the model leaves its logits [B, T, V] Shard(-1) on the tensor-parallel mesh (the head is
// ColwiseParallel{.output_layouts = Shard(-1), .use_local_output = false}); dtensor's cross-entropy rule
// (dtensor/rules/loss.cc) then computes the loss on each rank's vocabulary slice with one all_reduce(max)
// of the row maxima and one all_reduce(sum) of 2 values per row, and the backward writes softmax - onehot
// on the local slice: no all_gather, no [B, T, V] tensor on any rank. The scope's own job is the targets:
// inside it, plain (dense) tensors that do not require grad are taken as Replicate next to DTensors
// (dtensor::ImplicitReplicationGuard), so `model.Loss(idx, targets)` works with plain targets.
//
// Invariant: like PyTorch, both the loss and its backward must run inside the scope (the backward of
// cross-entropy sees the plain targets again); outside it a plain target next to DTensor logits raises
// kInvalidArgument naming the op. Per thread (each rank of the threads backend opens its own).
//
// Example:
//   ParallelizeModule(gpt, mesh, {..., {"lm_head", ColwiseParallel{.output_layouts = dtensor::Shard{-1},
//                                                                  .use_local_output = false}}});
//   {
//     tp::LossParallel loss_parallel;
//     Tensor loss = gpt.Loss(idx_BT, targets_BT);   // a Replicate DTensor scalar
//     Backward(loss);
//   }
#pragma once

#include "dtensor/dispatch.h"

namespace tessel::tp {

class LossParallel {
 public:
  LossParallel() = default;
  LossParallel(const LossParallel&) = delete;
  LossParallel& operator=(const LossParallel&) = delete;

 private:
  dtensor::ImplicitReplicationGuard implicit_replication_;
};

}  // namespace tessel::tp
