// benchmarks/comp3d_workload.cc — the 3-D composition headline figure (issue 14):
//   step_3d_vs_unsharded   training steps (forward, backward, AdamW) of the GPT on 8 threads-backend ranks
//                          laid out (pp 2, dp_shard 2, tp 2) by examples/gpt/parallel_gpt.h (1F1B, 2
//                          microbatches per dp rank, 1 intra-op thread per rank), tokens/s of the global
//                          batch, against the unsharded one-rank step of the same model and global batch on
//                          1 intra-op thread (on the shared 2-core machine, under load from other processes,
//                          the 2-thread step measured several times slower than the 1-thread one, so 1 thread
//                          is the stronger baseline). On 2 cores the 8 ranks oversubscribe the cores 4x: the
//                          figure measures the composition's overhead (collectives, pipeline bubble, smaller
//                          GEMMs), not a speedup.
// The world is built once (RankWorld), so a timed run measures steps, not thread start-up, mesh creation,
// pipeline split or the shape handshake (the runner's warmup runs cover the handshake).
//
// Config: vocab 256, d_model 64, 4 layers, 4 heads, seq 32, global batch 8, fp32.
//
// Invariant: both sides train identical models (same seed) on the same global batch
// (tests/comp3d_equivalence_test.cc holds the layouts to the one-rank run).
//
// Example:
//   bazel run //benchmarks:report -- --filter=step_3d
#include <memory>
#include <vector>

#include "benchmarks/figure.h"
#include "benchmarks/rank_world.h"
#include "core/autograd/engine.h"
#include "core/base/parallel.h"
#include "core/nn/transformer.h"
#include "core/optim/optimizer.h"
#include "core/tensor/random.h"
#include "examples/gpt/parallel_gpt.h"

namespace tessel::bench {
namespace {

constexpr int64_t kGlobalBatch = 8;
constexpr int kStepsPerRun = 4;

nn::GPTConfig Gpt3d() {
  return nn::GPTConfig{.vocab_size = 256, .d_model = 64, .n_layers = 4, .n_heads = 4, .seq_len = 32};
}

// One rank's part of the 3-D model (or, with `world` null, the whole unsharded GPT), its optimizers and
// the global batch.
struct Trainer3d {
  std::unique_ptr<examples::ParallelMesh> mesh;
  examples::ParallelGpt model;
  std::vector<std::unique_ptr<optim::AdamW>> opts;
  Tensor idx, tgt;

  explicit Trainer3d(const comm::ProcessGroupPtr& world) {
    const nn::GPTConfig cfg = Gpt3d();
    const examples::ParallelDims dims = world ? examples::ParallelDims{.pp = 2, .dp_shard = 2, .tp = 2}
                                              : examples::ParallelDims{};
    // A 1-rank world builds no mesh: the unsharded GPT.
    mesh = std::make_unique<examples::ParallelMesh>(world ? examples::ParallelMesh::Build(world, dims)
                                                          : examples::ParallelMesh());
    model = examples::BuildParallelGpt(cfg, 7, *mesh,
                                       {.schedule = pipelining::ScheduleKind::k1F1B, .num_microbatches = 2});
    for (nn::GPT* part : model.parts) {
      opts.push_back(std::make_unique<optim::AdamW>(part->NamedParameters(), optim::AdamWOptions{.lr = 1e-4}));
    }
    Generator data(1234);
    idx = Randint(0, cfg.vocab_size, std::vector<int64_t>{kGlobalBatch, cfg.seq_len}, data);
    tgt = Randint(0, cfg.vocab_size, std::vector<int64_t>{kGlobalBatch, cfg.seq_len}, data);
  }
  void Step() {
    model.ForwardBackward(idx, tgt);
    for (auto& o : opts) {
      o->Step();
      o->ZeroGrad();
    }
  }
};

const bool kStep = RegisterFigure("step_3d_vs_unsharded", [] {
  auto world = std::make_shared<RankWorld>(
      8,
      [](const comm::ProcessGroupPtr& pg) {
        auto trainer = std::make_shared<Trainer3d>(pg);
        return [trainer] { trainer->Step(); };
      },
      /*threads_per_rank=*/1);
  auto single = std::make_shared<Trainer3d>(nullptr);
  const double tokens = static_cast<double>(kStepsPerRun * kGlobalBatch * Gpt3d().seq_len);
  Figure f{"step_3d_vs_unsharded",
           {"pp2_dpshard2_tp2_step", "tokens/s", tokens, [world] { world->Run(kStepsPerRun); }},
           Throughput{"unsharded_step_1_thread", "tokens/s", tokens, [single] {
                        NumThreadsGuard threads(1);
                        for (int s = 0; s < kStepsPerRun; ++s) single->Step();
                      }}};
  f.note = [] {
    return std::string("8 ranks x 1 thread (pp 2, dp_shard 2, tp 2; 1F1B, 2 microbatches) oversubscribe a 2-core "
                       "machine 4x; baseline: one rank on 1 thread, same global batch");
  };
  return f;
});

}  // namespace
}  // namespace tessel::bench
