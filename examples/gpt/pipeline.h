// examples/gpt/pipeline.h — the main job's 3-D mode: `--pp=P [--dp_replicate=R] [--dp_shard=D] [--tp=T]
// --schedule=NAME --microbatches=M` trains the example GPT on P·R·D·T ranks of the threads backend with
// examples/gpt/parallel_gpt.h's recipe (pipeline split -> TP -> fully_shard / HSDP per stage), with the same
// data, AdamW, LR schedule and global-norm clipping as the unpipelined run, so its losses follow the
// --nproc=1 run's. At the end it prints every rank's memory ledger and, for GPipe and 1F1B, each rank's
// steady-state peaks against planner/'s plan for the layout.
//
// Checkpoints (train_checkpoint.h): --save=DIR writes the final one to DIR/step_<steps> (no --save_every in
// this mode); --resume=DIR loads one saved by any mode and layout and checks every full tensor bitwise.
//
// --sp=1 adds sequence parallelism inside the stages (default off here); --loss_parallel=1 is refused (the
// last stage's loss takes plain logits).
//
// Example:
//   bazel run //examples/gpt:train -- --pp=2 --dp_shard=2 --tp=2 --schedule=1F1B --microbatches=4 --steps=100
#pragma once

#include <map>
#include <string>

namespace tessel::examples {

// True when the flags ask for this mode (--pp or --dp_replicate present).
bool PipelineRequested(const std::map<std::string, std::string>& flags);

// Runs the pipelined training and returns the process exit code (0: the loss fell; 1: it did not).
int TrainPipelined(const std::map<std::string, std::string>& flags);

}  // namespace tessel::examples
