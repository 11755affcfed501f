// benchmarks/pp_workload.cc — the pipeline-parallel headline figures (issue 11):
//   pp_1f1b_step_vs_unsharded   one 1F1B training step on W = 2 pipeline ranks of the threads backend
//                               (1 intra-op thread per rank, 4 microbatches), tokens/s of the global batch,
//                               against the unsharded one-rank step of the same model and batch on 2
//                               threads. The note gives the simulator's prediction beside it: the bubble with
//                               unit costs, and the executor step's tokens/s from the measured F/B costs.
//   pp_simulated_vs_measured    the simulated makespan of the lowered 1F1B program (simulator.h) with
//                               costs measured from the run's own F and B times (per kind, the slowest
//                               rank's mean; B split evenly into I and W, transfer 0) divided by the
//                               measured executor step time. Target 0.85–1.15.
// Both are computed figures (Figure::precomputed): the pipeline world is started once, warms up for 2
// steps, then times kReps rounds of kStepsPerRound steps between barriers and takes the median round, so
// thread start-up, model splitting and the shape handshake are not timed. The baseline is timed the
// same way (median of kReps rounds), right after, on the calling thread.
//
// Config: vocab 256, d_model 64, 4 layers (2 per stage), 4 heads, seq 32, global batch 8, fp32.
//
// Invariant: both sides train identical models (same seed) on the same global batch.
//
// Example:
//   bazel run //benchmarks:report -- --filter=pp_
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

#include "benchmarks/figure.h"
#include "comm/backends/threads.h"
#include "core/autograd/engine.h"
#include "core/base/parallel.h"
#include "core/nn/transformer.h"
#include "core/optim/optimizer.h"
#include "core/tensor/random.h"
#include "pipelining/pipeline_gpt.h"
#include "pipelining/simulator.h"

namespace tessel::bench {
namespace {

constexpr int kRanks = 2;
constexpr int kMicrobatches = 4;
constexpr int64_t kGlobalBatch = 8;
constexpr int kReps = 5;
constexpr int kStepsPerRound = 8;

nn::GPTConfig PpGpt() {
  return nn::GPTConfig{.vocab_size = 256, .d_model = 64, .n_layers = 4, .n_heads = 4, .seq_len = 32};
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct PipelineMeasurement {
  double step_seconds = 0;       // median over rounds, per training step (executor + optimizer)
  double executor_seconds = 0;   // median over rounds, per executor Step
  double simulated_seconds = 0;  // makespan with the measured costs
  double bubble_unit_costs = 0;  // simulated bubble with unit costs
};

// Median per-step seconds of `rounds` of `steps` calls of `step` (after 2 warmup calls).
template <typename StepFn>
double TimeRounds(StepFn step, const std::function<void()>& sync) {
  for (int i = 0; i < 2; ++i) step();
  std::vector<double> rounds;
  for (int r = 0; r < kReps; ++r) {
    sync();
    const auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < kStepsPerRound; ++s) step();
    sync();
    rounds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / kStepsPerRound);
  }
  return Median(rounds);
}

PipelineMeasurement MeasurePipeline() {
  const nn::GPTConfig cfg = PpGpt();
  Generator data(1234);
  const Tensor idx = Randint(0, cfg.vocab_size, std::vector<int64_t>{kGlobalBatch, cfg.seq_len}, data);
  const Tensor tgt = Randint(0, cfg.vocab_size, std::vector<int64_t>{kGlobalBatch, cfg.seq_len}, data);
  PipelineMeasurement m;
  std::mutex mu;
  std::vector<std::map<pipelining::ActionKind, std::pair<double, int>>> costs(kRanks);
  comm::RunRanksOptions options{.threads_per_rank = 1};
  comm::RunRanks(
      kRanks,
      [&](comm::ProcessGroupPtr pg) {
        pipelining::RankPipeline pp = pipelining::PipelineGPT(
            cfg, 7, pg, {.kind = pipelining::ScheduleKind::k1F1B, .num_microbatches = kMicrobatches});
        optim::AdamW opt(pp.NamedParameters(), {.lr = 1e-4});
        auto barrier = [&] { pg->Barrier()->Wait(); };
        const double step = TimeRounds([&] {
          pp.executor->Step(idx, tgt);
          opt.Step();
          opt.ZeroGrad();
        }, barrier);
        // The executor alone, with the compute costs of these same steps for the simulation.
        std::map<pipelining::ActionKind, std::pair<double, int>> mine;
        const double exec = TimeRounds([&] {
          const pipelining::StepStats st = pp.executor->Step(idx, tgt);
          for (const auto& [kind, sc] : st.compute_seconds) {
            mine[kind].first += sc.first;
            mine[kind].second += sc.second;
          }
        }, barrier);
        std::lock_guard<std::mutex> lock(mu);
        costs[pg->rank()] = mine;
        if (pg->rank() != 0) return;
        m.step_seconds = step;
        m.executor_seconds = exec;
        pipelining::ActionCosts unit;
        m.bubble_unit_costs = pipelining::Simulate(pp.lowered, pp.stage_to_rank, unit).bubble;
      },
      options);
  // Slowest rank's mean per kind (the simulator takes one cost per kind).
  auto mean = [&](pipelining::ActionKind kind) {
    double worst = 0;
    for (const auto& c : costs) {
      auto it = c.find(kind);
      if (it != c.end() && it->second.second > 0) worst = std::max(worst, it->second.first / it->second.second);
    }
    return worst;
  };
  pipelining::ActionCosts measured;
  measured.forward = mean(pipelining::ActionKind::kForward);
  measured.backward_input = measured.backward_weight = mean(pipelining::ActionKind::kFullBackward) / 2;
  measured.transfer = 0;
  const auto program = pipelining::LowerProgram(
      pipelining::GenerateSchedule(pipelining::ScheduleKind::k1F1B, kRanks, kRanks, kMicrobatches),
      pipelining::StageToRankMap(pipelining::ScheduleKind::k1F1B, kRanks, kRanks), kMicrobatches, {});
  m.simulated_seconds =
      pipelining::Simulate(program, pipelining::StageToRankMap(pipelining::ScheduleKind::k1F1B, kRanks, kRanks),
                           measured)
          .makespan;
  return m;
}

double MeasureUnsharded() {
  NumThreadsGuard threads(2);
  const nn::GPTConfig cfg = PpGpt();
  Generator gen(7), data(1234);
  nn::GPT gpt(cfg, gen);
  optim::AdamW opt(gpt.NamedParameters(), {.lr = 1e-4});
  const Tensor idx = Randint(0, cfg.vocab_size, std::vector<int64_t>{kGlobalBatch, cfg.seq_len}, data);
  const Tensor tgt = Randint(0, cfg.vocab_size, std::vector<int64_t>{kGlobalBatch, cfg.seq_len}, data);
  return TimeRounds(
      [&] {
        Backward(gpt.Loss(idx, tgt));
        opt.Step();
        opt.ZeroGrad();
      },
      [] {});
}

struct Shared {
  PipelineMeasurement pp;
  double unsharded_seconds = 0;
};

const bool kStep = RegisterFigure("pp_1f1b_step_vs_unsharded", [] {
  auto shared = std::make_shared<Shared>();
  const double tokens = static_cast<double>(kGlobalBatch * PpGpt().seq_len);
  Figure f{"pp_1f1b_step_vs_unsharded", {"pp_w2_1f1b_step", "tokens/s", tokens, nullptr},
           Throughput{"unsharded_step_2_threads", "tokens/s", tokens, nullptr}};
  f.precomputed = [shared, tokens] {
    shared->pp = MeasurePipeline();
    shared->unsharded_seconds = MeasureUnsharded();
    return std::pair<double, double>{tokens / shared->pp.step_seconds, tokens / shared->unsharded_seconds};
  };
  f.note = [shared, tokens] {
    char buf[320];
    std::snprintf(buf, sizeof(buf),
                  "pp: 1F1B, 2 ranks x 1 thread, %d microbatches; simulator: bubble %.3f (unit costs), executor step "
                  "%.0f tokens/s predicted from the run's own F/B costs vs %.0f tokens/s measured (optimizer excluded)",
                  kMicrobatches, shared->pp.bubble_unit_costs, tokens / shared->pp.simulated_seconds,
                  tokens / shared->pp.executor_seconds);
    return std::string(buf);
  };
  return f;
});

const bool kSimulated = RegisterFigure("pp_simulated_vs_measured", [] {
  auto shared = std::make_shared<Shared>();
  Figure f{"pp_simulated_vs_measured", {"simulated_1f1b_makespan", "ms", 0, nullptr},
           Throughput{"measured_executor_step", "ms", 0, nullptr}};
  f.precomputed = [shared] {
    shared->pp = MeasurePipeline();
    return std::pair<double, double>{shared->pp.simulated_seconds * 1e3, shared->pp.executor_seconds * 1e3};
  };
  f.note = [] { return std::string("target ratio 0.85-1.15 (costs: the run's own F and B times, slowest rank)"); };
  return f;
});

}  // namespace
}  // namespace tessel::bench
