// fsdp/clip_grad_norm.h — ClipGradNorm over sharded (DTensor) gradients with one all-reduce for the norm.
//
// Invariant: the norm returned is the L2 norm of the *global* gradients (every element counted once,
// whatever its placements), identical on every rank, computed from the local shards in float64 with
// one all-reduce of one number. core's optim::ClipGradNorm computes the same value through DTensor ops
// but pays one all-reduce per parameter; this is the FSDP path (PyTorch: clip_grad_norm_ on DTensors).
//
// Example:
//   double norm = ClipGradNorm(root, /*max_norm=*/1.0);   // root: the FSDPModule of the whole model
//   opt.Step();
#pragma once

#include "comm/process_group.h"
#include "core/tensor/tensor.h"
#include "fsdp/fully_shard.h"

namespace tessel::fsdp {

// Scales every defined .grad of `params` in place so their global L2 norm is at most `max_norm` and
// returns the norm before clipping (torch.nn.utils.clip_grad_norm_, eps 1e-6). A DTensor gradient
// counts its local shard once per copy (divided by the sizes of the mesh axes it is not sharded over);
// a plain gradient is taken as replicated on every rank of `world`. Works for any DTensor gradients on
// one mesh (tensor parallel too: train.cc's TP mode calls it with the world group). A Partial gradient
// is first moved to its parameter's layout (Replicate where the parameter is Partial or not a DTensor of
// that mesh) and stored back as the .grad, on the grads ledger — the reduction the optimizer step would
// run on it; all-reduces share one flat bucket per (axis, op, dtype) — then one all-reduce of the sum of
// squares.
// REQUIRES: `world` spans exactly the ranks of the gradients' meshes; every rank calls it.
double ClipGradNorm(const TensorList& params, double max_norm, const comm::ProcessGroupPtr& world);

// Every sharded parameter of `root`'s tree (plus parameters no FullyShard manages); `world` is the root's mesh flattened into one group, created
// (collectively) on the first call and reused.
double ClipGradNorm(const FSDPModule& root, double max_norm);

}  // namespace tessel::fsdp
