// examples/gpt/train_checkpoint.h — the main job's checkpoints, for any layout: the state a checkpoint
// holds (model + optimizer tensors of this rank's model parts, step, config, LR schedule, saved world size
// and an xxh3 fingerprint of every full tensor) and the resume that loads it and checks the fingerprints.
//
// Invariant: keys are full-model FQNs, so a checkpoint saved by the fully_shard / TP mode (one part per
// rank) or by the 3-D mode (the pipeline stages of the rank, examples/gpt/parallel_gpt.h) loads into the
// other at any world size, and Resume only returns after every full tensor it loaded matched its saved
// fingerprint bitwise (kDataLoss naming the first that did not).
//
// The whole training asset (issue 15): with a RunState the checkpoint also holds the data cursor (the index
// of the next batch; batches are a function of it, and Resume checks it equals the step), the mesh/layout,
// and the RNG state (seed, offset) of every rank. Resume restores this rank's generator when the world size
// is the saved one (else it says so: per-rank streams of another world size do not map).
//
// Example:
//   RunState run{.gen = &gen, .layout = "fully_shard dp=4"};
//   Save(CheckpointState({&model}, {&opt}, step, config, schedule, nranks, world, &run), dir, world);
//   const std::optional<std::string> dir = NewestCompleteCheckpoint("/ckpt");   // torchtitan's auto-resume
//   const int64_t start = Resume(*dir, {&model}, {&opt}, config, schedule, world, nranks, false, &run);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <optional>

#include "checkpoint/state_dict.h"
#include "comm/process_group.h"
#include "core/nn/module.h"
#include "core/optim/optimizer.h"
#include "core/tensor/random.h"

namespace tessel::examples {

// What a run holds besides tensors. `gen`: this rank's generator (saved for every rank; restored on resume).
struct RunState {
  Generator* gen = nullptr;
  std::string layout;  // the mesh and placements, e.g. "fully_shard (dp=4)"
};

// `optimizers[i]` steps `parts[i]`. Collective over the ranks sharing each part's tensors (fingerprints
// gather one full tensor at a time).
checkpoint::StateDict CheckpointState(const std::vector<const nn::Module*>& parts,
                                      const std::vector<optim::Optimizer*>& optimizers, int64_t step,
                                      const std::string& config, const std::string& schedule, int nranks,
                                      const comm::ProcessGroupPtr& world = nullptr, const RunState* run = nullptr);

// Loads `dir` into the parts and optimizers (any saved world size and layout), checks every full tensor
// against its saved fingerprint and returns the step to continue from. `partial`: this rank holds only
// some of the checkpoint's FQNs (pipeline stages): keys of other stages are expected, missing ones are
// still an error (kNotFound). A checkpoint of another model config is kInvalidArgument.
int64_t Resume(const std::string& dir, const std::vector<const nn::Module*>& parts,
               const std::vector<optim::Optimizer*>& optimizers, const std::string& config,
               const std::string& schedule, const comm::ProcessGroupPtr& world, int nranks, bool partial = false,
               RunState* run = nullptr);

// The newest complete checkpoint under `root`: the step_<N> with the largest N whose metadata.json exists
// and parses (save.h's atomic commit: an interrupted save has none). Incomplete or unreadable ones are
// skipped with a note on stdout when `verbose`; nullopt when there is none (or no `root`).
std::optional<std::string> NewestCompleteCheckpoint(const std::string& root, bool verbose);

}  // namespace tessel::examples
