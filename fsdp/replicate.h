// fsdp/replicate.h — Replicate (PyTorch's composable DDP, torch.distributed._composable.replicate) and
// ZeroOptimizer (ZeRO-1 / ZeRO-2: the optimizer state, and at stage 2 the gradients, sharded over the
// data-parallel ranks while the parameters stay replicated). With fully_shard (ZeRO-3) beside them,
// every ZeRO stage exists.
//
// Why in fsdp/: this folder owns data-parallel state (DESIGN.md); Replicate and ZeRO-1/2 are the
// data-parallel modes that keep parameters whole, and they share fully_shard's torch.chunk piece math.
//
// Replicate(module, mesh): parameters stay plain replicated tensors (rank 0's values are broadcast at
// the call, one broadcast per bucket). Parameters are put in buckets of at most bucket_cap_bytes in
// reverse registration order (the order backward produces them, like torch's DDP Reducer); a
// post-accumulate-grad hook on each parameter marks it ready and, once a bucket is complete, copies its
// gradients into one flat buffer (comm ledger) and issues one async collective on the mesh's axis,
// overlapped with the rest of backward. Buckets are issued in bucket order; the end-of-backward callback
// waits for them, copies the averaged values back into .grad (in place) and frees the buffers, after
// finishing at most two buckets in flight (issuing bucket k first finishes bucket k-2, so the comm
// ledger holds at most two buckets). A parameter that got no gradient in a backward contributes zeros
// (every rank still issues every bucket: nothing hangs) and ends with the averaged .grad (with
// find_unused_parameters, one no rank had a gradient for stays undefined). Parameters that do not require
// grad are broadcast at the call but sit in no bucket (as torch's DDP). Parameters of submodules already under
// fully_shard (a weight tied inside such a submodule included; one tied to a parameter outside it was already
// untied by fully_shard, which swaps the block's handle only) are left to fully_shard, as torch's replicate leaves
// them: fully_shard the blocks, then Replicate the root, and the blocks reduce-scatter their own gradients while
// the root's buckets hold the rest;
// a pipeline executor drives both. The other order (fully_shard on a submodule after Replicate on its ancestor)
// swaps parameters the buckets hold: kFailedPrecondition at ZeroOptimizer's construction, at the module's first
// forward, or at the end of a backward that bypassed the module's Call, before any bucket of it is issued. The end of
// backward is detected from the first gradient: a backward in which no parameter of the module gets a
// gradient on some rank issues nothing there (the peers then fail with the comm timeout, no hang). A
// backward that raised midway (its end-of-backward never ran) is cleaned up by the next backward's first
// gradient: the buckets it issued are waited for and dropped, so the next iteration averages afresh.
//
// Collectives per backward (asserted with the comm tracer), B buckets, n ranks:
//   zero_stage 0, 1   B all-reduces (average)                    .grad: the full average on every rank
//                     (+1 all-reduce of flags with find_unused_parameters)
//   zero_stage 2      B reduce-scatters (average) of each bucket  .grad of the parameter: undefined;
//                     laid out as n blocks of torch.chunk rows    the rank's rows: ZeroOptimizer's piece
// ZeroOptimizer::Step: steps only this rank's torch.chunk rows of each parameter (dim 0, uneven pieces
// allowed; a view into the parameter's own storage, so no second copy of the parameters), then B
// all-gathers (one per bucket, pieces padded to ceil(rows / n) rows) put every rank's updated rows in
// every rank's parameters. Gradient sync off (SetRequiresGradientSync(false)): no collective; gradients
// accumulate locally in .grad and the next synced backward reduces the sum. As a pipeline stage
// (pipelining/executor.h drives its nn::ScheduledShardingState): sync off for the step's microbatches, then one
// reduction per bucket at the stage's REDUCE_GRAD, and the sync setting back after the step.
//
// Ledgers (held against planner/data_parallel.h in tests/zero_test.cc): params the full parameters;
// grads the full .grad (stage 0-1) or the rank's piece plus the not-yet-reduced full gradients of the
// buckets still in flight (stage 2); optim the state of the rank's pieces (stage 1-2) or of everything
// (stage 0, a plain optimizer); comm the flat bucket buffers.
//
// Invariant: after every synced backward, each rank's gradients of its pieces (stage 2) or of the whole
// model (stage 0-1) equal the average over ranks; after ZeroOptimizer::Step every rank holds bitwise the
// same parameters.
//
// Example (4 ranks of the threads backend):
//   DeviceMesh mesh = InitDeviceMesh(world, {4}, {"dp"});
//   ReplicateModule ddp = Replicate(gpt, mesh, {.zero_stage = 2});
//   ZeroOptimizer opt(ddp, [](nn::StateDict pieces) {
//     return std::make_unique<optim::AdamW>(std::move(pieces), optim::AdamWOptions{});
//   });
//   Backward(gpt.Loss(idx_BT, targets_BT));   // B reduce-scatters, overlapped with backward
//   opt.Step();                               // B all-gathers
//   opt.ZeroGrad();
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/nn/module.h"
#include "core/optim/optimizer.h"
#include "dtensor/device_mesh.h"

namespace tessel::fsdp {

struct ReplicateOptions {
  int64_t bucket_cap_bytes = 25 * 1024 * 1024;  // torch DDP's bucket_cap_mb = 25
  int zero_stage = 0;                           // 0 (DDP), 1 or 2 (then step with ZeroOptimizer)
  // torch DDP's find_unused_parameters=True: each synced backward also all-reduces one flag per parameter
  // (had a gradient on this rank), after the buckets; a parameter no rank had a gradient for keeps its
  // .grad untouched (undefined) instead of getting the zero average. Stages 0 and 1 only.
  bool find_unused_parameters = false;
  // torch DDP's init_sync: false keeps each rank's parameters as they are (no broadcast of rank 0's at the call;
  // the caller vouches for them, or wants them to differ).
  bool init_sync = true;
};

class ReplicateState;

// A cheap, non-owning handle to a module Replicate was applied to (the module owns the state).
class ReplicateModule {
 public:
  explicit ReplicateModule(ReplicateState* state) : state_(state) {}
  nn::Module& module() const;
  const ReplicateOptions& options() const;
  // Bucket b's parameter FQNs, in the order they sit in its flat buffer (reverse registration order).
  std::vector<std::vector<std::string>> BucketFqns() const;
  int64_t num_buckets() const;
  // With false, backward issues no collective and gradients accumulate locally (torch's no_sync()).
  // While a pipeline schedule holds the module, the setting is what the step's REDUCE_GRAD obeys (false: the step
  // only accumulates, as under torch's no_sync) and what the module gets back after the step.
  void SetRequiresGradientSync(bool requires_gradient_sync) const;
  // Whether a pipeline executor may drive this module (nn::ScheduledShardingState: accumulate over the microbatches,
  // reduce once at REDUCE_GRAD); true by default. The Python face turns it off once a communication hook is
  // registered: the hook, not the executor, then reduces.
  void SetPipelineDrivable(bool drivable) const;
  // FQNs of the bucketed parameters that had no gradient on this rank in the last synced backward (their
  // slot was reduced as zeros): what torch's DDP without find_unused_parameters reports as an error.
  const std::vector<std::string>& UnusedInLastBackward() const;
  // A rank that has run out of inputs (torch's Join) matches the others' synced backward: every bucket (and the
  // find_unused flags) reduced with zeros from this rank, the averages written to .grad as the others get them.
  void ShadowBackward() const;
  ReplicateState& state() const { return *state_; }

 private:
  ReplicateState* state_;
};

// Applies Replicate to `module` over the 1-D `mesh` (collective: every rank calls it in the same order;
// broadcasts rank 0's parameters). kInvalidArgument for a mesh of more than one axis, a zero_stage other
// than 0-2, bucket_cap_bytes < 1, find_unused_parameters with zero_stage 2, or a module without
// parameters outside its fully_shard'ed submodules; kFailedPrecondition when the module is already replicated or
// fully_shard'ed, or has a DTensor parameter outside its fully_shard'ed submodules.
ReplicateModule Replicate(nn::Module& module, const dtensor::DeviceMesh& mesh, const ReplicateOptions& options = {});
std::optional<ReplicateModule> AsReplicateModule(nn::Module& module);

// ZeRO-1 / ZeRO-2's optimizer: `make` builds the inner optimizer over this rank's pieces (FQN → a leaf
// view of the parameter's rows; uneven trailing pieces may be empty and are left out).
// kFailedPrecondition when the module's zero_stage is 0.
class ZeroOptimizer {
 public:
  using Factory = std::function<std::unique_ptr<optim::Optimizer>(nn::StateDict pieces)>;
  ZeroOptimizer(ReplicateModule replicated, const Factory& make);
  ~ZeroOptimizer();
  void Step();      // the inner step on the pieces, then one all-gather per bucket
  void ZeroGrad();  // parameters' and pieces' gradients to undefined
  optim::Optimizer& inner() { return *inner_; }

 private:
  ReplicateState* state_;
  nn::StateDict pieces_;  // FQN → leaf view of this rank's rows
  std::unique_ptr<optim::Optimizer> inner_;
};

}  // namespace tessel::fsdp
