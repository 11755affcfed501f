// planner/layout.h — Layout: one parallel training layout as a value (the mesh (pp, dp_replicate,
// dp_shard, tp), the pipeline schedule, ZeRO stage, sequence parallelism, activation checkpointing,
// dtypes, batch and sequence), with Verify(), and torch.chunk's piece sizes.
//
// Invariant: a Layout that passed Verify(layout, model, world) is plannable: the mesh covers the world
// exactly, every split the planner makes is exact (heads, MLP width and sequence over tp, layers over
// pp, the global batch over dp × microbatches), and every failure is a kInvalidArgument that names the
// field and shows declared vs required.
//
// ZeRO stages act on the dp_shard axis (DeepSpeed's stages, torch's fully_shard at stage 3); the
// dp_replicate axis always replicates (DDP; with dp_shard > 1 and stage 3 it is HSDP):
//   0: nothing sharded (DDP)             — needs dp_shard == 1
//   1: optimizer state sharded           2: + gradients sharded           3: + parameters sharded
// Dtypes: parameters (the working copy, also the activations' dtype), gradients and their reduction
// (reduce), optimizer moments (optim); master_weights adds an fp32 copy of the parameters to the
// optimizer state (the ZeRO paper's mixed-precision Adam: 2 + 2 + 12 = 16 bytes per parameter).
//
// Example:
//   Layout l{.dp_shard = 8, .zero_stage = 1, .global_batch = 8, .seq_len = 4096};
//   Verify(l, ModelPreset("llama-7b"), /*world=*/8);   // ZeRO-1 on 8 ranks
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/tensor/dtype.h"
#include "planner/model_spec.h"

namespace tessel::planner {

enum class Schedule { kGPipe, k1F1B };
// kSelective is Korthikanti et al.'s selective recompute: the attention core (softmax, its dropout,
// attention over V) is recomputed, every other saved tensor is kept. kFull keeps only each block's input.
enum class ActivationCheckpointing { kNone, kSelective, kFull };

struct Layout {
  int64_t pp = 1;
  Schedule schedule = Schedule::k1F1B;
  int64_t num_microbatches = 1;  // per step per dp rank; with pp == 1, gradient accumulation
  int64_t dp_replicate = 1;
  int64_t dp_shard = 1;
  int zero_stage = 0;
  int64_t tp = 1;
  bool sequence_parallel = false;
  bool loss_parallel = false;  // vocab-sharded logits into the loss (tp::LossParallel); else all-gathered
  ActivationCheckpointing ac = ActivationCheckpointing::kNone;
  DType param_dtype = DType::kBFloat16;
  DType reduce_dtype = DType::kBFloat16;
  DType optim_dtype = DType::kFloat32;
  bool master_weights = false;
  int64_t global_batch = 8;  // sequences per step over all dp ranks
  int64_t seq_len = 4096;
  // ZeRO stages 0-2 (fsdp/replicate.h): the gradient bucket cap, ReplicateOptions::bucket_cap_bytes (torch
  // DDP's bucket_cap_mb = 25 by default).
  int64_t grad_bucket_bytes = 25 * 1024 * 1024;

  int64_t WorldSize() const { return pp * dp_replicate * dp_shard * tp; }
  int64_t Dp() const { return dp_replicate * dp_shard; }
  int64_t MicroBatchSize() const { return global_batch / Dp() / num_microbatches; }
  std::string ToString() const;  // "pp2(1f1b,m4) dp_replicate1 dp_shard2 zero3 tp2+sp ac=none"
};

// Checks, each a kInvalidArgument naming the field:
//   pp, dp_replicate, dp_shard, tp, num_microbatches, global_batch, seq_len >= 1; zero_stage in 0..3;
//   pp·dp_replicate·dp_shard·tp == world; zero_stage 0 needs dp_shard == 1;
//   model.n_heads % tp == 0, model.ffn_hidden % tp == 0, pp <= model.n_layers (stages may hold unequal layer counts);
//   sequence_parallel needs tp > 1 and seq_len % tp == 0;
//   global_batch % (dp_replicate·dp_shard·num_microbatches) == 0;
//   seq_len <= model.max_seq_len when the model has learned positions; dtypes floating.
void Verify(const Layout& layout, const ModelSpec& model, int64_t world);

// torch.chunk's piece `index` of `n` rows over `num_chunks`: ceil(n / num_chunks) rows each, trailing
// pieces smaller or empty.
int64_t ChunkSize(int64_t n, int64_t num_chunks, int64_t index);

std::string_view ScheduleName(Schedule schedule);          // "gpipe", "1f1b"
std::string_view AcName(ActivationCheckpointing ac);       // "none", "selective", "full"
Schedule ParseSchedule(const std::string& name);           // kInvalidArgument on others
ActivationCheckpointing ParseAc(const std::string& name);  // kInvalidArgument on others
DType ParseFloatDType(const std::string& name);            // "float32" | "bfloat16" | "float16" (or fp32/bf16/fp16)

}  // namespace tessel::planner
