// benchmarks/fsdp_workload.cc — the FullyShard headline figures (issue 5):
//   fsdp_step_vs_unsharded          one W = 2 threads-backend FSDP training step (FullyShard on each
//                                   block, then the root; AdamW on the DTensor shards), tokens/s of the
//                                   global batch, against the unsharded one-rank step of the same model
//                                   and global batch on all cores, in the same run. Target >= 0.9.
//   fsdp_peak_memory_vs_prediction  measured total ledger peak of a rank over a steady-state step (the
//                                   third) / planner/memory_plan.h's prediction (the rank with
//                                   the ratio farthest from 1 is reported). Target 0.9-1.1. A computed,
//                                   not timed, figure (Figure::precomputed, figure.h).
//
// Config: vocab 256, d_model 64, 2 layers, 4 heads, seq 32, global batch 8, fp32 — one step takes a
// few ms, so a timed run does kStepsPerRun = 16 steps (~0.15 s). The FSDP world is persistent (RankWorld,
// rank_world.h): two rank threads (1 core each on a 2-core machine) build and wrap the model once, then
// step on command, so a timed run measures steps, not world start-up or FullyShard.
//
// Invariant: both sides of the step figure train identical models (same seed) on the same global batch;
// rank r of the FSDP world takes rows [r*B/2, (r+1)*B/2).
//
// Example:
//   bazel run //benchmarks:report -- --filter=fsdp
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "benchmarks/figure.h"
#include "benchmarks/rank_world.h"
#include "comm/backends/threads.h"
#include "core/autograd/engine.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/memory/allocator.h"
#include "core/nn/transformer.h"
#include "core/ops/view.h"
#include "core/optim/optimizer.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"
#include "dtensor/device_mesh.h"
#include "dtensor/layout.h"
#include "fsdp/fully_shard.h"
#include "planner/memory_plan.h"

namespace tessel::bench {
namespace {

constexpr int kWorld = 2;
constexpr int64_t kGlobalBatch = 8;
constexpr int kStepsPerRun = 16;

nn::GPTConfig BenchGpt() {
  return nn::GPTConfig{.vocab_size = 256, .d_model = 64, .n_layers = 2, .n_heads = 4, .seq_len = 32};
}

std::pair<Tensor, Tensor> Batch(const nn::GPTConfig& cfg, int64_t batch) {
  Generator gen(1234);
  Tensor idx = Randint(0, cfg.vocab_size, std::vector<int64_t>{batch, cfg.seq_len}, gen);
  Tensor tgt = Randint(0, cfg.vocab_size, std::vector<int64_t>{batch, cfg.seq_len}, gen);
  return {idx, tgt};
}

Tensor RowsFor(const Tensor& global, int64_t rank, int64_t world) {
  const int64_t rows = global.size(0) / world;
  return Contiguous(Narrow(global, 0, rank * rows, rows));
}

std::unique_ptr<optim::AdamW> MakeAdamW(nn::GPT& gpt) {
  return std::make_unique<optim::AdamW>(gpt.NamedParameters(), optim::AdamWOptions{.lr = 1e-4});
}

// One rank's model, wrapped bottom-up, its optimizer and its rows of the global batch.
struct RankModel {
  std::unique_ptr<nn::GPT> gpt;
  std::unique_ptr<optim::AdamW> opt;
  Tensor idx, tgt;

  RankModel(const nn::GPTConfig& cfg, const comm::ProcessGroupPtr& world) {
    dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {world->size()}, {"dp"});
    Generator gen(7);
    gpt = std::make_unique<nn::GPT>(cfg, gen);
    for (size_t i = 0; i < gpt->layers().size(); ++i) fsdp::FullyShard(*gpt->layers().at(i), mesh);
    fsdp::FullyShard(*gpt, mesh);
    opt = MakeAdamW(*gpt);
    auto [gi, gt] = Batch(cfg, kGlobalBatch);
    idx = RowsFor(gi, world->rank(), world->size());
    tgt = RowsFor(gt, world->rank(), world->size());
  }
  void Step() {
    Backward(gpt->Loss(idx, tgt));
    opt->Step();
    opt->ZeroGrad();
  }
};

// The unsharded baseline: the same model and global batch, one rank, all cores of the calling thread.
struct UnshardedStep {
  std::unique_ptr<nn::GPT> gpt;
  std::unique_ptr<optim::AdamW> opt;
  Tensor idx, tgt;

  explicit UnshardedStep(const nn::GPTConfig& cfg) {
    Generator gen(7);
    gpt = std::make_unique<nn::GPT>(cfg, gen);
    opt = MakeAdamW(*gpt);
    std::tie(idx, tgt) = Batch(cfg, kGlobalBatch);
  }
  void Run(int steps) {
    for (int s = 0; s < steps; ++s) {
      Backward(gpt->Loss(idx, tgt));
      opt->Step();
      opt->ZeroGrad();
    }
  }
};

const bool kStep = RegisterFigure("fsdp_step_vs_unsharded", [] {
  const nn::GPTConfig cfg = BenchGpt();
  auto world = std::make_shared<RankWorld>(kWorld, [cfg](const comm::ProcessGroupPtr& pg) {
    auto model = std::make_shared<RankModel>(cfg, pg);
    return [model] { model->Step(); };
  });
  auto single = std::make_shared<UnshardedStep>(cfg);
  const double tokens = static_cast<double>(kStepsPerRun * kGlobalBatch * cfg.seq_len);
  return Figure{"fsdp_step_vs_unsharded",
                {"fsdp_w2_step", "tokens/s", tokens, [world] { world->Run(kStepsPerRun); }},
                Throughput{"unsharded_step", "tokens/s", tokens, [single] { single->Run(kStepsPerRun); }}};
});

// ---- fsdp_peak_memory_vs_prediction ----

// Total ledger peak of each rank over the third FSDP step (optimizer state exists, gradients zeroed).
std::vector<int64_t> MeasuredTotalPeaks(const nn::GPTConfig& cfg) {
  std::vector<int64_t> out(kWorld);
  comm::RunRanks(kWorld, [&](comm::ProcessGroupPtr world) {
    RankModel model(cfg, world);
    for (int step = 0; step < 3; ++step) {
      if (step == 2) memory::ResetPeaks(CurrentDevice());
      model.Step();
    }
    out[static_cast<size_t>(world->rank())] = memory::Stats(CurrentDevice()).total.peak;
  });
  return out;
}

struct MemoryResult {
  std::vector<int64_t> measured, predicted;
  int worst = 0;  // the rank whose measured / predicted is farthest from 1
};

const bool kMemory = RegisterFigure("fsdp_peak_memory_vs_prediction", [] {
  auto result = std::make_shared<MemoryResult>();
  Figure f{"fsdp_peak_memory_vs_prediction", {"fsdp_w2_peak_per_rank", "MiB", 0, nullptr},
           Throughput{"predicted", "MiB", 0, nullptr}};
  f.precomputed = [result] {
    const nn::GPTConfig cfg = BenchGpt();
    const int64_t activations = planner::MeasureGptActivations(cfg, kGlobalBatch / kWorld);
    result->measured = MeasuredTotalPeaks(cfg);
    result->predicted.clear();
    double worst_dev = -1;
    for (int r = 0; r < kWorld; ++r) {
      result->predicted.push_back(planner::PlanGptFullyShard(cfg, kWorld, r, activations).total);
      const double dev = std::abs(static_cast<double>(result->measured[r]) / result->predicted[r] - 1.0);
      if (dev > worst_dev) worst_dev = dev, result->worst = r;
    }
    return std::pair<double, double>{result->measured[result->worst] / 1048576.0,
                                     result->predicted[result->worst] / 1048576.0};
  };
  f.note = [result] {
    std::string line = "fsdp peak total per rank (bytes, measured/predicted):";
    for (size_t r = 0; r < result->measured.size(); ++r) {
      char buf[128];
      std::snprintf(buf, sizeof(buf), " rank %zu %lld/%lld (%.3f)", r, static_cast<long long>(result->measured[r]),
                    static_cast<long long>(result->predicted[r]),
                    static_cast<double>(result->measured[r]) / static_cast<double>(result->predicted[r]));
      line += buf;
    }
    return line + "; reported: rank " + std::to_string(result->worst);
  };
  return f;
});

}  // namespace
}  // namespace tessel::bench
