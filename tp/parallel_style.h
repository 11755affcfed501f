// tp/parallel_style.h — the ParallelStyles of tensor parallelism, as small value types with PyTorch's
// options and defaults (torch.distributed.tensor.parallel.style): ColwiseParallel, RowwiseParallel,
// SequenceParallel, PrepareModuleInput, PrepareModuleOutput, PrepareModuleInputOutput, and the variant
// ParallelStyle that a plan maps module FQNs to (parallelize_module.h).
//
// Invariant: a style is plain data (copyable, comparable by its fields); applying it (tp/styles/) only
// swaps parameter handles for DTensors on the 1-D tensor-parallel mesh and registers forward hooks, so a
// module written for plain tensors runs unchanged. Layouts name one placement on that 1-D mesh; Shard(-1)
// (and any negative dim) counts from the end of the tensor it is applied to.
//
// What each style does (W = tp size; "local" = the rank's shard as a plain tensor):
//   ColwiseParallel    Linear: weight [O, I] Shard(0), bias Shard(0); Embedding: weight [V, C] Shard(1).
//                      input: annotated with input_layouts (default Replicate), moved to Replicate;
//                      output: Shard(-1), moved to output_layouts (default Shard(-1)).
//   RowwiseParallel    Linear: weight Shard(1), bias Replicate, input moved to Shard(-1);
//                      Embedding: weight Shard(0) (vocab parallel, masked lookup), input moved to Replicate;
//                      output: Partial(sum), reduced to output_layouts (default Replicate: all_reduce;
//                      Shard(d): reduce_scatter).
//   SequenceParallel   LayerNorm / RMSNorm: parameters Replicate; a plain input is this rank's shard on
//                      sequence_dim; no communication; the parameter gradients are Partial(sum) until the
//                      optimizer (or fully_shard) reduces them.
//   PrepareModule*     no parameters: per positional input/output, annotate (a plain tensor becomes a
//                      DTensor with the declared layout; a DTensor must already have it) and redistribute
//                      to the desired layout. std::nullopt entries are left untouched.
// use_local_output = true turns the (redistributed) DTensor back into its local shard.
//
// Example:
//   ParallelStyle s = ColwiseParallel{.output_layouts = dtensor::Replicate{}};   // all_gather after
//   ParallelStyle r = RowwiseParallel{.output_layouts = dtensor::Shard{1}};       // sequence parallel exit
//   ParallelStyle p = PrepareModuleInput{.input_layouts = {dtensor::Shard{1}},
//                                        .desired_input_layouts = {dtensor::Replicate{}}};
//   StyleName(s);   // "ColwiseParallel"
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "dtensor/placement.h"

namespace tessel::tp {

using dtensor::Placement;
// One layout per positional input or output; std::nullopt leaves that tensor alone.
using Layouts = std::vector<std::optional<Placement>>;

struct ColwiseParallel {
  Placement input_layouts = dtensor::Replicate{};
  Placement output_layouts = dtensor::Shard{-1};
  bool use_local_output = true;
  friend bool operator==(const ColwiseParallel&, const ColwiseParallel&) = default;
};

struct RowwiseParallel {
  Placement input_layouts = dtensor::Shard{-1};
  Placement output_layouts = dtensor::Replicate{};
  bool use_local_output = true;
  friend bool operator==(const RowwiseParallel&, const RowwiseParallel&) = default;
};

struct SequenceParallel {
  int64_t sequence_dim = 1;
  bool use_local_output = false;
  friend bool operator==(const SequenceParallel&, const SequenceParallel&) = default;
};

// REQUIRES: input_layouts.size() == desired_input_layouts.size(), and a desired layout only where an
// input layout is declared (checked when applied, kInvalidArgument naming the module). Empty layouts leave
// the positional inputs untouched (torch's input_layouts=None); otherwise one entry per tensor input.
struct PrepareModuleInput {
  Layouts input_layouts;
  Layouts desired_input_layouts;
  bool use_local_output = false;
  friend bool operator==(const PrepareModuleInput&, const PrepareModuleInput&) = default;
};

// REQUIRES: output_layouts.size() == desired_output_layouts.size() (as PrepareModuleInput).
struct PrepareModuleOutput {
  Layouts output_layouts;
  Layouts desired_output_layouts;
  bool use_local_output = true;
  friend bool operator==(const PrepareModuleOutput&, const PrepareModuleOutput&) = default;
};

struct PrepareModuleInputOutput {
  Layouts input_layouts;
  Layouts desired_input_layouts;
  bool use_local_input = false;
  Layouts output_layouts;
  Layouts desired_output_layouts;
  bool use_local_output = true;
  friend bool operator==(const PrepareModuleInputOutput&, const PrepareModuleInputOutput&) = default;
};

using ParallelStyle = std::variant<ColwiseParallel, RowwiseParallel, SequenceParallel, PrepareModuleInput,
                                   PrepareModuleOutput, PrepareModuleInputOutput>;

// "ColwiseParallel", "RowwiseParallel", ... (the PyTorch class name).
std::string StyleName(const ParallelStyle& style);
// "RowwiseParallel(input_layouts=S(-1), output_layouts=S(1), use_local_output=true)"
std::string ToString(const ParallelStyle& style);

}  // namespace tessel::tp
