// benchmarks/tp_workload.cc — the tensor-parallel headline figures (issue 10):
//   tp_step_vs_unsharded       one GPT training step (AdamW) on W = 2 threads-backend ranks under the
//                              examples/gpt/parallelize recipe with TP + sequence parallel (1 intra-op
//                              thread per rank), tokens/s of the global batch, against the unsharded
//                              one-rank step of the same model and global batch on all cores of the
//                              calling thread, in the same run. Target >= 0.9.
//   tp_comm_bytes_vs_megatron  bytes each rank sends (ring algorithms, CommTracer::RingBytes) for one
//                              transformer block forward + backward under TP + SP, against Megatron's
//                              closed form: 4 all-reduces of B*T*C elements. Target 1.00. Computed, not
//                              timed; the note gives the plain-TP (all-reduce) number too.
//
// Config: vocab 256, d_model 64, 2 layers, 4 heads, seq 32, global batch 8, fp32 (as fsdp_workload.cc);
// a timed run does kStepsPerRun = 16 steps. Every TP rank trains on the whole global batch.
//
// Example:
//   bazel run //benchmarks:report -- --filter=tp_
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "benchmarks/figure.h"
#include "benchmarks/rank_world.h"
#include "comm/backends/threads.h"
#include "comm/tracer.h"
#include "core/autograd/engine.h"
#include "core/nn/transformer.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/optim/optimizer.h"
#include "core/tensor/random.h"
#include "dtensor/device_mesh.h"
#include "examples/gpt/parallelize.h"

namespace tessel::bench {
namespace {

constexpr int kWorld = 2;
constexpr int64_t kGlobalBatch = 8;
constexpr int kStepsPerRun = 16;
const examples::GptParallelism kTpSp{.sequence_parallel = true};

nn::GPTConfig BenchGpt() {
  return nn::GPTConfig{.vocab_size = 256, .d_model = 64, .n_layers = 2, .n_heads = 4, .seq_len = 32};
}

// A model, its optimizer and the global batch; `mesh` null: unsharded.
struct GptTrainer {
  std::unique_ptr<nn::GPT> gpt;
  std::unique_ptr<optim::AdamW> opt;
  Tensor idx, tgt;

  explicit GptTrainer(const std::optional<dtensor::DeviceMesh>& mesh) {
    const nn::GPTConfig cfg = BenchGpt();
    Generator gen(7);
    gpt = std::make_unique<nn::GPT>(cfg, gen);
    if (mesh) examples::ParallelizeGpt(*gpt, *mesh, kTpSp);
    opt = std::make_unique<optim::AdamW>(gpt->NamedParameters(), optim::AdamWOptions{.lr = 1e-4});
    Generator data(1234);
    idx = Randint(0, cfg.vocab_size, std::vector<int64_t>{kGlobalBatch, cfg.seq_len}, data);
    tgt = Randint(0, cfg.vocab_size, std::vector<int64_t>{kGlobalBatch, cfg.seq_len}, data);
  }
  void Step() {
    Backward(gpt->Loss(idx, tgt));
    opt->Step();
    opt->ZeroGrad();
  }
};

const bool kStep = RegisterFigure("tp_step_vs_unsharded", [] {
  auto world = std::make_shared<RankWorld>(
      kWorld,
      [](const comm::ProcessGroupPtr& pg) {
        auto trainer = std::make_shared<GptTrainer>(dtensor::InitDeviceMesh(pg, {kWorld}, {"tp"}));
        return [trainer] { trainer->Step(); };
      },
      /*threads_per_rank=*/1);
  auto single = std::make_shared<GptTrainer>(std::nullopt);
  const double tokens = static_cast<double>(kStepsPerRun * kGlobalBatch * BenchGpt().seq_len);
  return Figure{"tp_step_vs_unsharded",
                {"tp_sp_w2_step", "tokens/s", tokens, [world] { world->Run(kStepsPerRun); }},
                Throughput{"unsharded_step", "tokens/s", tokens, [single] {
                             for (int s = 0; s < kStepsPerRun; ++s) single->Step();
                           }}};
});

// Ring bytes one rank sends for one block forward + backward, x [B, T, C] (sequence-sharded under SP).
double BlockRingBytes(bool sequence_parallel) {
  const nn::GPTConfig cfg = BenchGpt();
  double bytes = 0;
  comm::RunRanks(kWorld, [&](comm::ProcessGroupPtr pg) {
    const dtensor::DeviceMesh tp = dtensor::InitDeviceMesh(pg, {kWorld}, {"tp"});
    Generator gen(3);
    nn::TransformerBlock block(cfg, gen);
    tp::ParallelizePlan plan;
    for (auto& [fqn, style] : examples::GptTensorParallelPlan(cfg, {.sequence_parallel = sequence_parallel})) {
      if (fqn.rfind("layers.*.", 0) == 0) plan.emplace_back(fqn.substr(9), style);
    }
    tp::ParallelizeModule(block, tp, plan);
    const int64_t t = sequence_parallel ? cfg.seq_len / kWorld : cfg.seq_len;
    Tensor x = Randn({kGlobalBatch, t, cfg.d_model}, gen);
    x.set_requires_grad(true);
    comm::CommTracer tracer;
    Tensor y = block(x);
    Backward(Sum(Mul(y, y)));
    if (pg->rank() == 0) bytes = tracer.RingBytes(kWorld);
  });
  return bytes;
}

const bool kBytes = RegisterFigure("tp_comm_bytes_vs_megatron", [] {
  auto plain_tp = std::make_shared<double>(0);
  Figure f{"tp_comm_bytes_vs_megatron",
           {"tp_sp_block_bytes", "KiB", 0, nullptr},
           Throughput{"megatron_closed_form", "KiB", 0, nullptr}};
  f.precomputed = [plain_tp] {
    const nn::GPTConfig cfg = BenchGpt();
    const double elements = static_cast<double>(kGlobalBatch * cfg.seq_len * cfg.d_model);
    const double megatron = 4 * 2.0 * (kWorld - 1) / kWorld * elements * 4;
    *plain_tp = BlockRingBytes(false) / 1024;
    return std::pair<double, double>{BlockRingBytes(true) / 1024, megatron / 1024};
  };
  f.note = [plain_tp] {
    char line[160];
    std::snprintf(line, sizeof(line),
                  "per block fwd+bwd, W=%d, B*T*C=%lld: plain TP (4 all-reduces) %.1f KiB; TP+SP moves the same in "
                  "all-gathers + reduce-scatters",
                  kWorld, static_cast<long long>(kGlobalBatch * BenchGpt().seq_len * BenchGpt().d_model), *plain_tp);
    return std::string(line);
  };
  return f;
});

}  // namespace
}  // namespace tessel::bench
