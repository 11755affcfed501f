// examples/gpt/pipeline.cc — the main job's --pp mode (see pipeline.h).
#include "examples/gpt/pipeline.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>

#include "comm/backends/threads.h"
#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "core/memory/allocator.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/optim/optimizer.h"
#include "core/tensor/factory.h"
#include "examples/gpt/corpus.h"
#include "pipelining/pipeline_gpt.h"
#include "pipelining/simulator.h"

namespace tessel::examples {
namespace {

struct PipelineFlags {
  int pp = 2, microbatches = 4, stages_per_rank = 0;
  std::string schedule = "1F1B";
  int64_t steps = 300, batch = 16, seq = 64, log_every = 25;
  double lr = 3e-3;
  uint64_t seed = 1;
  nn::GPTConfig cfg;
};

PipelineFlags Parse(const std::map<std::string, std::string>& f) {
  auto get = [&](const char* name, double dflt) { return f.count(name) ? std::stod(f.at(name)) : dflt; };
  PipelineFlags p;
  p.pp = static_cast<int>(get("pp", 2));
  p.microbatches = static_cast<int>(get("microbatches", 4));
  p.stages_per_rank = static_cast<int>(get("stages_per_rank", 0));
  p.schedule = f.count("schedule") ? f.at("schedule") : "1F1B";
  p.steps = static_cast<int64_t>(get("steps", 300));
  p.batch = static_cast<int64_t>(get("batch", 16));
  p.seq = static_cast<int64_t>(get("seq", 64));
  p.log_every = static_cast<int64_t>(get("log_every", 25));
  p.lr = get("lr", 3e-3);
  p.seed = static_cast<uint64_t>(get("seed", 1));
  p.cfg = nn::GPTConfig{.vocab_size = 256,
                        .d_model = static_cast<int64_t>(get("d_model", 128)),
                        .n_layers = static_cast<int64_t>(get("layers", 4)),
                        .n_heads = static_cast<int64_t>(get("heads", 4)),
                        .seq_len = p.seq};
  TESSEL_CHECK(p.pp >= 1, "train: --pp must be >= 1, got ", p.pp);
  TESSEL_CHECK(!f.count("resume") && (!f.count("save") || f.at("save") == "none"),
               "train: --save/--resume are not supported with --pp (pass --save=none)");
  return p;
}

// torch's clip_grad_norm_ over the parameters of every pipeline rank: one all-reduce of the squares.
void ClipGlobalGradNorm(const nn::StateDict& params, comm::ProcessGroup& pg, double max_norm) {
  NoGradGuard no_grad;
  double sq = 0;
  for (const auto& [fqn, p] : params) {
    if (p.grad().defined()) sq += Sum(Mul(p.grad(), p.grad())).item<double>();
  }
  Tensor total = Scalar(sq, DType::kFloat64);
  pg.AllReduce(total, comm::ReduceOp::kSum)->Wait();
  const double coef = max_norm / (std::sqrt(total.item<double>()) + 1e-6);
  if (coef >= 1.0) return;
  for (const auto& [fqn, p] : params) {
    if (p.grad().defined()) MulScalarInPlace(p.grad(), coef);
  }
}

void PrintPlan(const PipelineFlags& f, const pipelining::RankPipeline& pp) {
  const pipelining::SimulationResult sim = pipelining::Simulate(pp.lowered, pp.stage_to_rank);
  std::printf("tessel GPT: %lld params (d_model %lld, %lld layers, seq %lld, batch %lld), pipeline: %s on %d ranks, "
              "%d stages, %d microbatches; simulated bubble (unit costs) %.3f, peak in-flight per stage:",
              static_cast<long long>(f.cfg.NumParameters()), static_cast<long long>(f.cfg.d_model),
              static_cast<long long>(f.cfg.n_layers), static_cast<long long>(f.seq), static_cast<long long>(f.batch),
              f.schedule.c_str(), f.pp, pp.num_stages, f.microbatches, sim.bubble);
  for (int v : sim.peak_in_flight) std::printf(" %d", v);
  std::printf("\n");
  std::fflush(stdout);
}

struct Losses {
  double first = 0, last = 0, final = 0, seconds = 0;
  int64_t avg_over = 1;
};

// One pipeline rank's training loop; the rank holding the last stage fills `out`.
void TrainRank(const PipelineFlags& f, const comm::ProcessGroupPtr& pg, Losses* out) {
  pipelining::RankPipeline pp = pipelining::PipelineGPT(
      f.cfg, f.seed, pg,
      {.kind = pipelining::ParseScheduleKind(f.schedule), .num_microbatches = f.microbatches,
       .stages_per_rank = f.stages_per_rank});
  if (pg->rank() == 0) PrintPlan(f, pp);
  const nn::StateDict params = pp.NamedParameters();
  optim::AdamW opt(params, {.lr = f.lr, .weight_decay = 0.1});
  const optim::WarmupCosineSchedule schedule{
      .max_lr = f.lr, .min_lr = f.lr / 10, .warmup_steps = std::max<int64_t>(1, f.steps / 10), .total_steps = f.steps};
  const std::string text = GenerateCorpus(f.seed, 1 << 20);
  const bool has_last = pp.stages.back()->is_last();
  Losses r;
  r.avg_over = std::max<int64_t>(1, std::min<int64_t>(10, f.steps / 4));
  double window = 0;
  for (int64_t step = 0; step < f.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    const Batch batch = SampleBatch(text, f.batch, f.seq, step, f.seed + 17);
    const pipelining::StepStats st = pp.executor->Step(batch.idx_BT, batch.targets_BT);
    ClipGlobalGradNorm(params, *pg, 1.0);
    opt.set_lr(schedule.LrAt(step));
    opt.Step();
    opt.ZeroGrad();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (step > 0) r.seconds += dt;
    if (!has_last) continue;
    const double lv = *st.loss;
    if (step < r.avg_over) r.first += lv / r.avg_over;
    if (step >= f.steps - r.avg_over) r.last += lv / r.avg_over;
    r.final = lv;
    window += lv;
    if ((step + 1) % f.log_every == 0 || step + 1 == f.steps) {
      const int64_t n = (step + 1) % f.log_every == 0 ? f.log_every : (step + 1) % f.log_every;
      const memory::DeviceStats ms = memory::Stats(CurrentDevice());
      std::printf("step %5lld/%lld | loss %.4f | lr %.2e | %8.0f tok/s | last-stage rank %d peak MiB: params %.2f "
                  "activations %.2f comm %.2f | in-flight peak %d\n",
                  static_cast<long long>(step + 1), static_cast<long long>(f.steps), window / n, opt.lr(),
                  f.batch * f.seq / dt, pg->rank(), ms[memory::Ledger::kParams].peak / 1048576.0,
                  ms[memory::Ledger::kActivations].peak / 1048576.0, ms[memory::Ledger::kCommBuffers].peak / 1048576.0,
                  st.peak_in_flight.back());
      std::fflush(stdout);
      window = 0;
    }
  }
  if (has_last) *out = r;
}

}  // namespace

bool PipelineRequested(const std::map<std::string, std::string>& flags) { return flags.count("pp") > 0; }

int TrainPipelined(const std::map<std::string, std::string>& flags) {
  const PipelineFlags f = Parse(flags);
  Losses r;
  comm::RunRanks(f.pp, [&](comm::ProcessGroupPtr pg) { TrainRank(f, pg, &r); });
  const double tokens_per_s = f.steps > 1 ? f.batch * f.seq * (f.steps - 1) / r.seconds : 0.0;
  std::printf("summary: loss %.4f -> %.4f (mean of first/last %lld steps) | final loss %.17g | %.0f tokens/s | "
              "%.1f s\n",
              r.first, r.last, static_cast<long long>(r.avg_over), r.final, tokens_per_s, r.seconds);
  std::printf("%s", memory::Report().c_str());
  return r.last < r.first ? 0 : 1;
}

}  // namespace tessel::examples
