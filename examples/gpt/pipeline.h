// examples/gpt/pipeline.h — the main job's pipeline-parallel mode: `--pp=P --schedule=NAME
// --microbatches=M` trains the example GPT split into pipeline stages on P ranks of the threads backend
// (pipelining/pipeline_gpt.h), with the same data, optimizer, LR schedule and global-norm clipping as the
// unpipelined run, so its losses follow the --nproc=1 run's.
//
// What it leaves out: checkpoints (--save/--resume are not supported with --pp and are refused), and
// stacking fully_shard inside the stages (the executor has the UNSHARD/RESHARD/REDUCE_GRAD hooks for it).
//
// Example:
//   bazel run //examples/gpt:train -- --pp=2 --schedule=1F1B --microbatches=4 --steps=100
#pragma once

#include <map>
#include <string>

namespace tessel::examples {

// True when the flags ask for pipeline parallelism (--pp present).
bool PipelineRequested(const std::map<std::string, std::string>& flags);

// Runs the pipelined training and returns the process exit code (0: the loss fell; 1: it did not).
int TrainPipelined(const std::map<std::string, std::string>& flags);

}  // namespace tessel::examples
