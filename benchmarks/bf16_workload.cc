// benchmarks/bf16_workload.cc — the `bf16_step_vs_fp32` headline figure (issue 16): one training step
// (forward, backward, AdamW) of the reference GPT (vocab 256, d_model 256, 4 layers, 8 heads, seq 128,
// batch 16) with bf16 mixed precision, in tokens/s, against the same step in fp32, in the same run.
//
// Both sides are FullyShard on a 1-rank mesh (each block, then the root) on all of the report's
// threads, so the only difference is the MixedPrecisionPolicy: bf16 parameters and activations for
// compute, fp32 master weights and AdamW, fp32 gradient reduction, fp32 logits for the loss. The line
// reads "skipped" where bf16 GEMMs have no native kernels (neither AMX-BF16 nor AMD's AVX512-BF16: they
// would widen to fp32 and the figure would measure conversions); the note names the oneDNN ISA and kernel
// that ran.
//
// Example:
//   bazel run //benchmarks:report -- --filter=bf16
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "benchmarks/figure.h"
#include "benchmarks/rank_world.h"
#include "core/autograd/engine.h"
#include "core/base/parallel.h"
#include "core/nn/transformer.h"
#include "core/ops/gemm.h"
#include "core/optim/optimizer.h"
#include "core/tensor/random.h"
#include "dtensor/device_mesh.h"
#include "fsdp/fully_shard.h"

namespace tessel::bench {
namespace {

constexpr int64_t kBatch = 16;

nn::GPTConfig ReferenceGpt() {
  return nn::GPTConfig{.vocab_size = 256, .d_model = 256, .n_layers = 4, .n_heads = 8, .seq_len = 128};
}

// One rank's model, wrapped with or without bf16 mixed precision, its AdamW and a fixed batch.
struct Step {
  std::unique_ptr<nn::GPT> gpt;
  std::unique_ptr<optim::AdamW> opt;
  Tensor idx, tgt;

  Step(const comm::ProcessGroupPtr& world, bool bf16) {
    const nn::GPTConfig cfg = ReferenceGpt();
    dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {1}, {"dp"});
    Generator gen(0);
    gpt = std::make_unique<nn::GPT>(cfg, gen);
    fsdp::FullyShardOptions block, root;
    if (bf16) {
      block.mp_policy = {.param_dtype = DType::kBFloat16, .reduce_dtype = DType::kFloat32};
      root.mp_policy = block.mp_policy;
      root.mp_policy.output_dtype = DType::kFloat32;
    }
    for (size_t i = 0; i < gpt->layers().size(); ++i) fsdp::FullyShard(*gpt->layers().at(i), mesh, block);
    fsdp::FullyShard(*gpt, mesh, root);
    opt = std::make_unique<optim::AdamW>(gpt->NamedParameters(), optim::AdamWOptions{.lr = 1e-4});
    idx = Randint(0, cfg.vocab_size, std::vector<int64_t>{kBatch, cfg.seq_len}, gen);
    tgt = Randint(0, cfg.vocab_size, std::vector<int64_t>{kBatch, cfg.seq_len}, gen);
  }
  void Run() {
    Backward(gpt->Loss(idx, tgt));
    opt->Step();
    opt->ZeroGrad();
  }
};

std::shared_ptr<RankWorld> World(bool bf16) {
  return std::make_shared<RankWorld>(1, [bf16](const comm::ProcessGroupPtr& pg) {
    auto step = std::make_shared<Step>(pg, bf16);
    return [step] { step->Run(); };
  }, /*threads_per_rank=*/NumThreads());
}

const bool kRegistered = RegisterFigure("bf16_step_vs_fp32", [] {
  const double tokens = static_cast<double>(kBatch * ReferenceGpt().seq_len);
  Figure f{"bf16_step_vs_fp32", {"bf16_mixed_step", "tokens/s", tokens, nullptr},
           Throughput{"fp32_step", "tokens/s", tokens, nullptr}};
  f.unavailable = [] {
    return Bf16GemmIsNative() ? std::string() : "bf16 GEMMs are not native here: " + Bf16GemmBackend();
  };
  if (!Bf16GemmIsNative()) return f;
  auto bf16 = World(true), fp32 = World(false);
  f.value.run = [bf16] { bf16->Run(1); };
  f.baseline->run = [fp32] { fp32->Run(1); };
  f.note = [] { return "bf16 GEMMs: " + Bf16GemmBackend() + "; both sides fully_shard on a 1-rank mesh"; };
  return f;
});

}  // namespace
}  // namespace tessel::bench
