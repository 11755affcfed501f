// examples/gpt/pipeline.cc — the main job's --pp mode (see pipeline.h).
#include "examples/gpt/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <tuple>

#include "comm/backends/threads.h"
#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "core/memory/allocator.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/optim/optimizer.h"
#include "core/tensor/factory.h"
#include "examples/gpt/corpus.h"
#include "checkpoint/save.h"
#include "examples/gpt/parallel_gpt.h"
#include "examples/gpt/train_checkpoint.h"
#include "pipelining/pipeline_gpt.h"
#include "pipelining/simulator.h"
#include "planner/memory_plan.h"
#include "planner/planner.h"

namespace tessel::examples {
namespace {

struct PipelineFlags {
  ParallelDims dims;
  int microbatches = 4, stages_per_rank = 0;
  bool sp = false;  // --sp=1: sequence parallelism inside the stages (needs --tp > 1)
  std::string ac = "none";  // --ac: activation checkpointing per block (core/nn/checkpoint_wrapper.h)
  std::string schedule = "1F1B";
  int64_t steps = 300, batch = 16, seq = 64, log_every = 25;
  double lr = 3e-3;
  uint64_t seed = 1;
  nn::GPTConfig cfg;
  std::string data;          // --data=FILE (examples/gpt/corpus.h's LoadCorpus; default: the generated corpus)
  std::string save, resume;  // --save=DIR (final checkpoint in DIR/step_<steps>; default none), --resume=DIR
};

PipelineFlags Parse(const std::map<std::string, std::string>& f) {
  auto get = [&](const char* name, double dflt) { return f.count(name) ? std::stod(f.at(name)) : dflt; };
  PipelineFlags p;
  p.dims = {.pp = static_cast<int64_t>(get("pp", 1)), .dp_replicate = static_cast<int64_t>(get("dp_replicate", 1)),
            .dp_shard = static_cast<int64_t>(get("dp_shard", 1)), .tp = static_cast<int64_t>(get("tp", 1))};
  p.microbatches = static_cast<int>(get("microbatches", 4));
  p.sp = get("sp", 0) != 0;
  TESSEL_CHECK(!p.sp || p.dims.tp > 1, "train: --sp=1 needs --tp > 1");
  TESSEL_CHECK(get("loss_parallel", 0) == 0, "train: --loss_parallel=1 is not supported with --pp / --dp_replicate");
  p.stages_per_rank = static_cast<int>(get("stages_per_rank", 0));
  p.schedule = f.count("schedule") ? f.at("schedule") : "1F1B";
  p.ac = f.count("ac") ? f.at("ac") : "none";
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
  p.dims.Validate(p.dims.world_size());  // each axis >= 1, named
  // torchtitan infers dp_shard from the world size; here the axes set the world, so a different --nproc
  // would silently run on another number of ranks.
  TESSEL_CHECK(!f.count("nproc") || static_cast<int64_t>(get("nproc", 0)) == p.dims.world_size(), "train: --nproc=",
               f.count("nproc") ? f.at("nproc") : "", " but ", p.dims.ToString(), " needs ", p.dims.world_size(),
               " ranks (pp x dp_replicate x dp_shard x tp; set --dp_shard to fill the world)");
  p.save = f.count("save") && f.at("save") != "none" ? f.at("save") : "";
  p.resume = f.count("resume") ? f.at("resume") : "";
  p.data = f.count("data") ? f.at("data") : "";
  TESSEL_CHECK(!f.count("save_every"), "train: --save_every is not supported with --pp / --dp_replicate (the final "
               "checkpoint is: --save=DIR)");
  return p;
}

// torch's clip_grad_norm_ over the parameters of every pipeline rank: one all-reduce of the squares.
// (DTensor gradients sum over their mesh; plain ones are replicated across it.) `pp` is null when pp == 1.
void ClipGlobalGradNorm(const nn::StateDict& params, const comm::ProcessGroupPtr& pp, double max_norm) {
  NoGradGuard no_grad;
  double sq = 0;
  for (const auto& [fqn, p] : params) {
    if (p.grad().defined()) sq += Sum(Mul(p.grad(), p.grad())).item<double>();
  }
  Tensor total = Scalar(sq, DType::kFloat64);
  if (pp) pp->AllReduce(total, comm::ReduceOp::kSum)->Wait();
  const double coef = max_norm / (std::sqrt(total.item<double>()) + 1e-6);
  if (coef >= 1.0) return;
  for (const auto& [fqn, p] : params) {
    if (p.grad().defined()) MulScalarInPlace(p.grad(), coef);
  }
}

void PrintHeader(const PipelineFlags& f, const ParallelGpt& model) {
  if (!model.pipeline) {
    std::printf("tessel GPT: %lld params, layout %s (%lld ranks, threads backend), no pipeline\n",
                static_cast<long long>(f.cfg.NumParameters()), f.dims.ToString().c_str(),
                static_cast<long long>(f.dims.world_size()));
    return;
  }
  const pipelining::RankPipeline& pp = *model.pipeline;
  const pipelining::SimulationResult sim = pipelining::Simulate(pp.lowered, pp.stage_to_rank);
  std::printf("tessel GPT: %lld params (d_model %lld, %lld layers, seq %lld, batch %lld), layout %s (%lld ranks, "
              "threads backend), pipeline: %s on %lld ranks, %d stages, %d microbatches; simulated bubble (unit "
              "costs) %.3f, peak in-flight per stage:",
              static_cast<long long>(f.cfg.NumParameters()), static_cast<long long>(f.cfg.d_model),
              static_cast<long long>(f.cfg.n_layers), static_cast<long long>(f.seq), static_cast<long long>(f.batch),
              f.dims.ToString().c_str(), static_cast<long long>(f.dims.world_size()), f.schedule.c_str(),
              static_cast<long long>(f.dims.pp), pp.num_stages, f.microbatches, sim.bubble);
  for (int v : sim.peak_in_flight) std::printf(" %d", v);
  std::printf("\n");
  std::fflush(stdout);
}

// This rank's steady-state ledger peaks against planner/'s plan for the layout (GPipe and 1F1B only: the
// schedules the planner models).
std::string PlanVsMeasured(const PipelineFlags& f, int rank) {
  const pipelining::ScheduleKind kind = pipelining::ParseScheduleKind(f.schedule);
  if (kind != pipelining::ScheduleKind::k1F1B && kind != pipelining::ScheduleKind::kGPipe) {
    return Str("rank ", rank, ": no plan (planner/ models GPipe and 1F1B, not ", f.schedule, ")\n");
  }
  // Policies the planner does not model (--ac=gemm) mean "no plan", after the run, not an error that
  // threw away the finished run's summary (exit 2).
  planner::ActivationCheckpointing ac = planner::ActivationCheckpointing::kNone;
  try {
    if (f.ac != "none") ac = planner::ParseAc(f.ac);
  } catch (const Error& e) {
    return Str("rank ", rank, ": no plan (", e.what(), ")\n");
  }
  planner::Layout l{.pp = f.dims.pp, .schedule = kind == pipelining::ScheduleKind::kGPipe ? planner::Schedule::kGPipe
                                                                                          : planner::Schedule::k1F1B,
                    .num_microbatches = f.dims.pp > 1 ? f.microbatches : 1, .dp_replicate = f.dims.dp_replicate,
                    .dp_shard = f.dims.dp_shard, .zero_stage = f.dims.dp_shard > 1 ? 3 : 0, .tp = f.dims.tp,
                    .sequence_parallel = f.sp, .ac = ac, .param_dtype = DType::kFloat32,
                    .reduce_dtype = DType::kFloat32, .global_batch = f.batch, .seq_len = f.seq};
  return planner::RankPlanVsMeasured(planner::FromGptConfig(f.cfg), l, rank, memory::Stats(CurrentDevice()));
}

struct Losses {
  double first = 0, last = 0, final = 0, seconds = 0;
  int64_t avg_over = 1, start = 0;
  std::map<int, std::string> plans;  // by rank
  std::mutex mu;
};

// The main job's checkpoint identity (train_checkpoint.h): the same strings as the other modes, so a
// checkpoint moves between them.
std::string ConfigString(const PipelineFlags& f) {
  return Str("d_model=", f.cfg.d_model, " layers=", f.cfg.n_layers, " heads=", f.cfg.n_heads, " seq=", f.seq,
             " batch=", f.batch, " seed=", f.seed);
}

void SaveFinal(const PipelineFlags& f, const ParallelGpt& model, const std::vector<optim::Optimizer*>& opts,
               const std::string& schedule, const comm::ProcessGroupPtr& world) {
  const std::string dir = Str(f.save, "/step_", f.steps);
  const int nranks = world->size();
  const checkpoint::SaveResult saved = checkpoint::Save(
      CheckpointState(model.Modules(), opts, f.steps, ConfigString(f), schedule, nranks), dir, world);
  if (world->rank() == 0) {
    std::printf("checkpoint: step %lld saved to %s (%.2f MiB from %d ranks, layout %s); reload with --resume=%s "
                "and any layout\n",
                static_cast<long long>(f.steps), dir.c_str(), saved.total_bytes / 1048576.0, nranks,
                f.dims.ToString().c_str(), dir.c_str());
  }
}

void PrintProgress(const PipelineFlags& f, int64_t step, double loss, double lr, double tokens_per_s, int rank) {
  const memory::DeviceStats ms = memory::Stats(CurrentDevice());
  auto mib = [&](memory::Ledger l) { return ms[l].peak / 1048576.0; };
  std::printf("step %5lld/%lld | loss %.4f | lr %.2e | %8.0f tok/s | rank %d (last stage) peak MiB: params %.2f "
              "grads %.2f optim %.2f activations %.2f comm %.2f\n",
              static_cast<long long>(step + 1), static_cast<long long>(f.steps), loss, lr, tokens_per_s, rank,
              mib(memory::Ledger::kParams), mib(memory::Ledger::kGrads), mib(memory::Ledger::kOptimState),
              mib(memory::Ledger::kActivations), mib(memory::Ledger::kCommBuffers));
  std::fflush(stdout);
}

// One rank's training loop; the first rank of the last stage fills `out`'s losses.
void TrainRank(const PipelineFlags& f, const comm::ProcessGroupPtr& world, Losses* out) {
  const ParallelMesh mesh = ParallelMesh::Build(world, f.dims);
  ParallelGpt model = BuildParallelGpt(f.cfg, f.seed, mesh,
                                       {.tp = {.sequence_parallel = f.sp, .activation_checkpointing = f.ac},
                                        .schedule = pipelining::ParseScheduleKind(f.schedule),
                                        .num_microbatches = f.microbatches, .stages_per_rank = f.stages_per_rank});
  if (world->rank() == 0) PrintHeader(f, model);
  const nn::StateDict params = model.NamedParameters();
  std::vector<std::unique_ptr<optim::AdamW>> optimizers;  // one per model part (checkpoint accessors' rule)
  std::vector<optim::Optimizer*> opts;
  for (nn::GPT* part : model.parts) {
    optimizers.push_back(std::make_unique<optim::AdamW>(part->NamedParameters(),
                                                        optim::AdamWOptions{.lr = f.lr, .weight_decay = 0.1}));
    opts.push_back(optimizers.back().get());
  }
  const optim::WarmupCosineSchedule schedule{
      .max_lr = f.lr, .min_lr = f.lr / 10, .warmup_steps = std::max<int64_t>(1, f.steps / 10), .total_steps = f.steps};
  const std::string schedule_desc = Str("steps=", f.steps, " lr=", f.lr, " warmup=", schedule.warmup_steps);
  const int64_t start = f.resume.empty() ? 0
                        : Resume(f.resume, model.Modules(), opts, ConfigString(f), schedule_desc, world,
                                 world->size(), /*partial=*/true);
  const std::string text = LoadCorpus(f.data, f.seed);
  // The reporter is the first rank of the pp coordinate that holds the last stage: the last coordinate
  // for a looped schedule, coordinate 0 for a V schedule (ZBV), whose last stage comes back to rank 0.
  const bool holds_last_stage =
      !model.pipeline || std::any_of(model.pipeline->stages.begin(), model.pipeline->stages.end(),
                                     [](const auto& stage) { return stage->is_last(); });
  // pp == 1 (HSDP or FSDP through the 3-D path) has no pipeline group: the reporter is rank 0.
  const int pp_coordinate = mesh.pp_group() != nullptr ? mesh.pp_group()->rank() : 0;
  const bool reporter = holds_last_stage && world->rank() == pp_coordinate * (f.dims.world_size() / f.dims.pp);
  Losses& r = *out;
  const int64_t avg_over = std::max<int64_t>(1, std::min<int64_t>(10, (f.steps - start) / 4));
  double window = 0, seconds = 0, first = 0, last = 0, final_loss = 0;
  for (int64_t step = start; step < f.steps; ++step) {
    if (step == start + 2) memory::ResetPeaks(CurrentDevice());  // steady state: optimizer state exists
    const auto t0 = std::chrono::steady_clock::now();
    const Batch batch = SampleBatch(text, f.batch, f.seq, step, f.seed + 17);
    const std::optional<double> loss = model.ForwardBackward(batch.idx_BT, batch.targets_BT);
    ClipGlobalGradNorm(params, mesh.pp_group(), 1.0);
    for (auto& opt : optimizers) {
      opt->set_lr(schedule.LrAt(step));
      opt->Step();
      opt->ZeroGrad();
    }
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (step > start) seconds += dt;
    if (!reporter) continue;
    TESSEL_INTERNAL_ASSERT(loss.has_value(), "train: rank ", world->rank(), " holds the last stage but got no loss");
    const double lv = *loss;
    if (step - start < avg_over) first += lv / avg_over;
    if (step >= f.steps - avg_over) last += lv / avg_over;
    final_loss = lv;
    window += lv;
    if ((step + 1) % f.log_every == 0 || step + 1 == f.steps) {
      const int64_t n = (step + 1) % f.log_every == 0 ? f.log_every : (step + 1) % f.log_every;
      PrintProgress(f, step, window / n, opts[0]->lr(), f.batch * f.seq / dt, world->rank());
      window = 0;
    }
  }
  if (!f.save.empty() && f.steps > start) SaveFinal(f, model, opts, schedule_desc, world);
  std::lock_guard<std::mutex> lock(r.mu);
  r.start = start;
  if (f.steps - start > 2) r.plans[world->rank()] = PlanVsMeasured(f, world->rank());
  if (!reporter) return;
  std::tie(r.first, r.last, r.final, r.seconds, r.avg_over) = std::tie(first, last, final_loss, seconds, avg_over);
}

}  // namespace

bool PipelineRequested(const std::map<std::string, std::string>& flags) {
  return flags.count("pp") > 0 || flags.count("dp_replicate") > 0;
}

int TrainPipelined(const std::map<std::string, std::string>& flags) {
  const PipelineFlags f = Parse(flags);
  Losses r;
  comm::RunRanks(static_cast<int>(f.dims.world_size()), [&](comm::ProcessGroupPtr world) { TrainRank(f, world, &r); });
  if (r.start >= f.steps) return 0;  // --resume at or past --steps: loaded and checked only
  const double tokens_per_s = f.steps - r.start > 1 ? f.batch * f.seq * (f.steps - r.start - 1) / r.seconds : 0.0;
  std::printf("summary: loss %.4f -> %.4f (mean of first/last %lld steps) | final loss %.17g | %.0f tokens/s | "
              "%.1f s\n",
              r.first, r.last, static_cast<long long>(r.avg_over), r.final, tokens_per_s, r.seconds);
  std::printf("%s", memory::Report().c_str());  // every rank's ledger (cpu:r is rank r)
  for (const auto& [rank, text] : r.plans) std::printf("%s", text.c_str());
  return r.start > 0 || r.last < r.first ? 0 : 1;  // a resumed run may be too short to show learning
}

}  // namespace tessel::examples
