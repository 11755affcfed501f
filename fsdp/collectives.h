// fsdp/collectives.h — the two collectives of a parameter group: one all-gather of the group's flat
// shards (copy-in, issue, copy-out) and one reduce-scatter of the group's flat gradients (copy-in,
// issue, optional HSDP all-reduce, view-out into the sharded .grad). PyTorch's _fsdp_collectives.py.
//
// Invariant: a group issues exactly one all-gather per unshard and one reduce-scatter (plus one
// all-reduce on the replicate axis under HSDP) per gradient reduction, whatever its parameter count;
// buffer layouts follow [Note: FSDP layout] in fsdp_param.h. Staging buffers are allocated under the
// comm ledger and freed as soon as the copy-out / view-out is done.
//
// Example:
//   FlatLayout layout = FlatLayout::Of(params);
//   AllGatherResult ag = IssueAllGather(params, layout, group);   // async
//   ... compute ...
//   FinishAllGather(ag, params, layout);                          // wait, copy-out, free
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "comm/process_group.h"
#include "core/tensor/tensor.h"
#include "fsdp/comm_streams.h"
#include "fsdp/fsdp_param.h"

namespace tessel::fsdp {

// Where each parameter's padded shard sits inside one rank's block of the group's flat buffers.
struct FlatLayout {
  std::vector<int64_t> offsets;  // per parameter, in elements
  int64_t shard_numel = 0;       // one rank's block: sum of padded_shard_numel()
  static FlatLayout Of(std::span<FsdpParam* const> params);
};

struct AllGatherResult {
  comm::WorkPtr work;  // null when the shard axis has one rank (no collective)
  Tensor input;        // [shard_numel], param dtype: a view of this rank's block of `output`
  Tensor output;       // [world * shard_numel], param dtype
  EventPtr gathered;   // device tensors (CommStreams): the all-gather stream's event behind the collective
  // IssueAllGatherOfPiece: the piece its copy-in reads, held until the compute stream waited for
  // `gathered` (device tensors: the copy-in stream may still read it after the issuing call returns).
  Tensor source;
};

// Copy-in of this rank's padded shards (cast to `dtype`) into its block of the output, and one async
// in-place all-gather on `group`. With `streams` (CUDA tensors) the copy-in and the collective run on
// its copy-in and all-gather streams (comm_streams.h); null: host tensors, today's path.
AllGatherResult IssueAllGather(std::span<FsdpParam* const> params, const FlatLayout& layout, DType dtype,
                               const comm::ProcessGroupPtr& group, CommStreams* streams = nullptr);
// reshard_after_forward=<int> (ParamGroup): the all-gather that rebuilds the group's full flat buffer
// from post-forward pieces. `piece` is this rank's slice of that [W · shard_numel] rank-major buffer (its
// blocks [j·W/r, (j+1)·W/r), j = its rank in `group`, the r consecutive shard ranks it was resharded
// over); the output is the buffer IssueAllGather would have produced, so FinishAllGather copies it out
// unchanged. The piece is copied in and may be freed once this returns.
AllGatherResult IssueAllGatherOfPiece(const Tensor& piece, const comm::ProcessGroupPtr& group,
                                      CommStreams* streams = nullptr);
// Waits, allocates the unsharded parameters (params ledger) and copies every rank's rows out; frees the
// staging buffers. Does not switch the module to the unsharded parameters. With `streams`: the compute
// stream waits for the all-gather event (no host wait), the copy-out runs on it, and the output is
// released behind the copy-out event, deferred to the next group's call when `defer_release` (forward).
void FinishAllGather(AllGatherResult& result, std::span<FsdpParam* const> params, const FlatLayout& layout,
                     CommStreams* streams = nullptr, bool defer_release = false);
// Drops an issued all-gather nobody copies out: host: waits for it; device: releases its buffer after
// the all-gather streams wait for its event.
void DropAllGather(AllGatherResult& result, CommStreams* streams);

// [Note: FSDP gradient flags] Ranks may disagree on which of a group's parameters got a gradient in a
// backward (control flow inside a module that depends on the data: a branch one rank's batch takes and
// another's does not). One-rank training on the global batch gives such a parameter a gradient (the
// samples that skipped it contribute zeros), so every rank must give it one, or the ranks' optimizers
// step different parameter sets and the shards drift apart silently (torch's FSDP2 decides from the
// local .grad alone and does exactly that). When the reduction crosses ranks, each rank's block of the
// reduce-scatter input therefore ends with GradFlagNumel(params) flags: 1 where this rank has a
// gradient for parameter i (0 where its rows are zeros). Reduced with the gradients, flag i is nonzero
// iff some rank on the shard or replicate axis had one, and every rank gives .grad to exactly those
// parameters; one no rank touched keeps no .grad, as in torch. Cost: 64 B per rank block per 16
// parameters of a float32 reduction, in the same collective.
//
// Flag elements per rank block for a group of `num_params` (a multiple of 16: rank blocks stay 64-byte
// aligned in float32).
int64_t GradFlagNumel(int64_t num_params);

// Which parameters a reduction may give a .grad, and where their rows and flags sit in a rank block.
struct ReduceTargets {
  std::vector<FsdpParam*> params;
  std::vector<int64_t> offsets;  // each parameter's rows in one rank's block
  int64_t block_numel = 0;       // one rank's block: the group's shard_numel, plus the flags if any
  // >= 0: element flag_offset + i of the reduced block is parameter i's flag; only parameters whose
  // flag is nonzero get a .grad. -1 (no flags, a reduction within one rank): every parameter gets one.
  int64_t flag_offset = -1;
};

struct ReduceScatterResult {
  comm::WorkPtr work;                // null when the shard axis has one rank
  Tensor input;                      // [world * block_numel], reduce dtype
  Tensor output;                     // [block_numel], reduce dtype
  ReduceTargets targets;
  EventPtr reduced;                  // device tensors: the reduce-scatter stream's event behind it
};

// How the group's gradients are combined across ranks: an average over every rank that holds a copy of
// the shard (shard axis x replicate axis), or a sum divided by `divide_factor` when set.
struct ReduceSpec {
  DType dtype = DType::kFloat32;
  std::optional<double> divide_factor;
  comm::ProcessGroupPtr shard_group;
  comm::ProcessGroupPtr replicate_group;  // HSDP only
  // HSDP (FSDPModule::SetRequiresAllReduce): with all_reduce false the reduce-scatter output is added to
  // *partial_output (set to it the first time) and no .grad changes; with true an existing
  // *partial_output is added to the output before the all-reduce and then dropped.
  bool all_reduce = true;
  Tensor* partial_output = nullptr;
  // ParamGroup::force_sum_reduction: kSum collectives, divided after the reduction (and after the hook)
  // by the divide factor or, without one, by the shard size times the replicate size.
  bool force_sum = false;
  // ParamGroup::all_reduce_hook (null: none); called with the gradient rows of the reduced block.
  const std::function<void(const Tensor&)>* hook = nullptr;
  // The label of the reduce-scatter and the HSDP all-reduce (ParamGroup::CollectiveName), set around those two
  // calls only: the hooks run after them, and a collective a hook issues is the user's, unlabelled.
  std::string label;
};

// Issues one async reduce-scatter of `flat_input` (already in the layout with its flags, reduce dtype;
// divided by the divide factor here when one is set).
// With `streams` the division and the collective run on its reduce-scatter stream after it waited for
// the compute stream (which folded the gradients into `flat_input`).
ReduceScatterResult IssueReduceScatter(Tensor flat_input, ReduceTargets targets, const ReduceSpec& spec,
                                       CommStreams* streams = nullptr);
// A device reduction's flags, read once the compute stream waited for it (ResolveGradFlags) instead of on
// the host inside the reduce-scatter stream's work, which would wait for every group's reduction in turn.
struct DeferredGradFlags {
  // The reduced flags, one per target (device), of every reduction since the last resolve (a module
  // run twice in one forward reduces its group twice in one backward).
  std::vector<Tensor> flags;
  std::vector<FsdpParam*> params;  // the targets, each given a .grad (zeros where no rank had one)
  std::vector<bool> had_grad;      // whether each had a .grad before the first of those reductions
};

// Waits for the reduce-scatter, runs the HSDP all-reduce over the replicate axis (or only accumulates the
// output, see ReduceSpec::all_reduce), and makes this rank's rows the sharded .grad of every target
// parameter whose flag is set (added to an existing .grad).
// Frees the staging buffers. Host tensors: the flags are read here. Device tensors with `deferred`:
// every target gets its rows (zeros where no rank had a gradient) and `deferred` the flags, for
// ResolveGradFlags; without `deferred` they are read here (a host wait on the stream).
// With `streams` nothing waits on the host: the input is released after the compute stream waits for
// the reduce-scatter event, the all-reduce and view-out run on the reduce-scatter stream, and the
// returned post-reduce event is what the compute stream must wait for before reading .grad (null on
// the host path).
EventPtr FinishReduceScatter(ReduceScatterResult& result, const ReduceSpec& spec, CommStreams* streams = nullptr,
                             std::optional<DeferredGradFlags>* deferred = nullptr);
// Drops an issued reduce-scatter nobody views out (FsdpState::ResetIterState): host: waits for it; device:
// the compute stream waits for its event before the buffers go. No .grad changes; no HSDP all-reduce.
void DropReduceScatter(ReduceScatterResult& result, CommStreams* streams);
// Drops the .grad FinishReduceScatter gave to parameters no rank had a gradient for (and that had none).
// REQUIRES: the compute stream waited for that reduction's post-reduce event (the read syncs it).
void ResolveGradFlags(DeferredGradFlags& deferred);

}  // namespace tessel::fsdp
