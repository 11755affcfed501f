// examples/gpt/train_checkpoint.h — the main job's checkpoints, for any layout: the state a checkpoint
// holds (model + optimizer tensors of this rank's model parts, step, config, LR schedule, saved world size
// and an xxh3 fingerprint of every full tensor) and the resume that loads it and checks the fingerprints.
//
// Invariant: keys are full-model FQNs, so a checkpoint saved by the fully_shard / TP mode (one part per
// rank) or by the 3-D mode (the pipeline stages of the rank, examples/gpt/parallel_gpt.h) loads into the
// other at any world size, and Resume only returns after every full tensor it loaded matched its saved
// fingerprint bitwise (kDataLoss naming the first that did not).
//
// Example:
//   Save(CheckpointState({&model}, {&opt}, step, config, schedule, nranks), dir, world);
//   const int64_t start = Resume(dir, {&model}, {&opt}, config, schedule, world, nranks);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/state_dict.h"
#include "comm/process_group.h"
#include "core/nn/module.h"
#include "core/optim/optimizer.h"

namespace tessel::examples {

// `optimizers[i]` steps `parts[i]`. Collective over the ranks sharing each part's tensors (fingerprints
// gather one full tensor at a time).
checkpoint::StateDict CheckpointState(const std::vector<const nn::Module*>& parts,
                                      const std::vector<optim::Optimizer*>& optimizers, int64_t step,
                                      const std::string& config, const std::string& schedule, int nranks);

// Loads `dir` into the parts and optimizers (any saved world size and layout), checks every full tensor
// against its saved fingerprint and returns the step to continue from. `partial`: this rank holds only
// some of the checkpoint's FQNs (pipeline stages): keys of other stages are expected, missing ones are
// still an error (kNotFound). A checkpoint of another model config is kInvalidArgument.
int64_t Resume(const std::string& dir, const std::vector<const nn::Module*>& parts,
               const std::vector<optim::Optimizer*>& optimizers, const std::string& config,
               const std::string& schedule, const comm::ProcessGroupPtr& world, int nranks, bool partial = false);

}  // namespace tessel::examples
