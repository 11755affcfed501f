// examples/gpt/plan_vs_measured.cc — CheckLayout (see plan_vs_measured.h).
#include "examples/gpt/plan_vs_measured.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>

#include "comm/backends/threads.h"
#include "comm/tracer.h"
#include "core/autograd/engine.h"
#include "core/base/error.h"
#include "core/memory/allocator.h"
#include "core/ops/view.h"
#include "core/optim/optimizer.h"
#include "core/tensor/random.h"
#include "dtensor/device_mesh.h"
#include "examples/gpt/corpus.h"
#include "examples/gpt/parallel_gpt.h"
#include "fsdp/replicate.h"
#include "planner/planner.h"

namespace tessel::examples {
namespace {

constexpr uint64_t kSeed = 5;

bool UsesReplicate(const CheckedLayout& l) { return l.zero_stage < 3 && l.dims.dp_size() > 1; }

struct Measurement {
  planner::LedgerPlan ledgers;
  std::array<int64_t, planner::kNumMeshAxes> axis_bytes{};
};

// The ledger peaks, and the ring bytes per mesh axis of the traced step (the groups are named after
// their axis; Replicate's one-axis mesh "dp" is DDP's dp_replicate, ZeRO-1/2's dp_shard).
Measurement Measured(const comm::CommTracer& tracer, const CheckedLayout& l) {
  const memory::DeviceStats s = memory::Stats(CurrentDevice());
  Measurement m;
  m.ledgers = {.params = s[memory::Ledger::kParams].peak,
               .grads = s[memory::Ledger::kGrads].peak,
               .optim = s[memory::Ledger::kOptimState].peak,
               .comm = s[memory::Ledger::kCommBuffers].peak,
               .activations = s[memory::Ledger::kActivations].peak,
               .total = s.total.peak};
  auto axis = [&](planner::MeshAxis a, const std::string& group, int64_t size) {
    m.axis_bytes[static_cast<int>(a)] += static_cast<int64_t>(std::llround(tracer.RingBytes(size, group)));
  };
  axis(planner::MeshAxis::kPp, "pp", l.dims.pp);
  axis(planner::MeshAxis::kDpReplicate, "dp_replicate", l.dims.dp_replicate);
  axis(planner::MeshAxis::kDpShard, "dp_shard", l.dims.dp_shard);
  axis(planner::MeshAxis::kTp, "tp", l.dims.tp);
  if (UsesReplicate(l)) {
    axis(l.zero_stage == 0 ? planner::MeshAxis::kDpReplicate : planner::MeshAxis::kDpShard, "dp", l.dims.dp_size());
  }
  return m;
}

std::unique_ptr<optim::Optimizer> AdamW(nn::StateDict params) {
  return std::make_unique<optim::AdamW>(std::move(params), optim::AdamWOptions{.lr = 1e-3, .weight_decay = 0.1});
}

// The recipe (parallel_gpt.h): fully_shard over dp_shard, TP, pipeline; two steps, peaks of the second.
Measurement TrainRecipe(const nn::GPTConfig& cfg, const CheckedLayout& l, const std::string& text,
                                int64_t global_batch, const comm::ProcessGroupPtr& world) {
  const ParallelMesh mesh = ParallelMesh::Build(world, l.dims);
  ParallelGpt model = BuildParallelGpt(cfg, kSeed, mesh,
                                       {.tp = {.sequence_parallel = l.sequence_parallel,
                                               .activation_checkpointing = l.ac},
                                        .schedule = l.schedule, .num_microbatches = l.microbatches});
  std::vector<std::unique_ptr<optim::Optimizer>> optimizers;
  for (nn::GPT* part : model.parts) optimizers.push_back(AdamW(part->NamedParameters()));
  std::optional<comm::CommTracer> tracer;
  for (int64_t step = 0; step < 2; ++step) {
    if (step == 1) memory::ResetPeaks(CurrentDevice());
    if (step == 1) tracer.emplace();
    const Batch batch = SampleBatch(text, global_batch, cfg.seq_len, step, kSeed);
    model.ForwardBackward(batch.idx_BT, batch.targets_BT);
    for (auto& opt : optimizers) {
      opt->Step();
      opt->ZeroGrad();
    }
  }
  return Measured(*tracer, l);
}

// DDP / ZeRO-1 / ZeRO-2 (fsdp/replicate.h) over every rank; two steps, peaks of the second.
Measurement TrainReplicate(const nn::GPTConfig& cfg, const CheckedLayout& l, const std::string& text,
                                   int64_t global_batch, const comm::ProcessGroupPtr& world) {
  const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {world->size()}, {"dp"});
  Generator gen(kSeed);
  nn::GPT gpt(cfg, gen);
  const fsdp::ReplicateModule ddp = fsdp::Replicate(gpt, mesh, {.zero_stage = l.zero_stage});
  std::unique_ptr<optim::Optimizer> plain;
  std::unique_ptr<fsdp::ZeroOptimizer> zero;
  if (l.zero_stage == 0) {
    plain = AdamW(gpt.NamedParameters());
  } else {
    zero = std::make_unique<fsdp::ZeroOptimizer>(ddp, AdamW);
  }
  const int64_t rows = global_batch / world->size(), start = world->rank() * rows;
  std::optional<comm::CommTracer> tracer;
  for (int64_t step = 0; step < 2; ++step) {
    if (step == 1) memory::ResetPeaks(CurrentDevice());
    if (step == 1) tracer.emplace();
    const Batch batch = SampleBatch(text, global_batch, cfg.seq_len, step, kSeed);
    Backward(gpt.Loss(Contiguous(Narrow(batch.idx_BT, 0, start, rows)),
                      Contiguous(Narrow(batch.targets_BT, 0, start, rows))));
    if (zero) {
      zero->Step();
      zero->ZeroGrad();
    } else {
      plain->Step();
      plain->ZeroGrad();
    }
  }
  return Measured(*tracer, l);
}

}  // namespace

planner::Layout CheckedLayout::ToPlannerLayout(const nn::GPTConfig& cfg, int64_t global_batch) const {
  TESSEL_CHECK(zero_stage >= 0 && zero_stage <= 3, "CheckLayout: zero_stage ", zero_stage, " is not 0-3");
  TESSEL_CHECK(zero_stage == 3 || (dims.pp == 1 && dims.tp == 1 && dims.dp_replicate == 1),
               "CheckLayout: ZeRO ", zero_stage, " (Replicate) runs on dp_shard alone, got ", dims.ToString());
  TESSEL_CHECK(schedule == pipelining::ScheduleKind::k1F1B || schedule == pipelining::ScheduleKind::kGPipe,
               "CheckLayout: the planner plans GPipe and 1F1B, not ", pipelining::ScheduleName(schedule));
  TESSEL_CHECK(dims.pp > 1 || microbatches == 1, "CheckLayout: microbatches ", microbatches, " need pp > 1");
  planner::Layout p{.pp = dims.pp,
                    .schedule = schedule == pipelining::ScheduleKind::kGPipe ? planner::Schedule::kGPipe
                                                                             : planner::Schedule::k1F1B,
                    .num_microbatches = microbatches,
                    .dp_replicate = dims.dp_replicate,
                    .dp_shard = dims.dp_shard,
                    .zero_stage = dims.dp_shard > 1 ? zero_stage : 0,
                    .tp = dims.tp,
                    .sequence_parallel = sequence_parallel,
                    .ac = planner::ParseAc(ac),
                    .param_dtype = DType::kFloat32,
                    .reduce_dtype = DType::kFloat32,
                    .optim_dtype = DType::kFloat32,
                    .global_batch = global_batch,
                    .seq_len = cfg.seq_len};
  if (zero_stage == 0 && dims.dp_shard > 1) std::swap(p.dp_replicate, p.dp_shard);  // DDP replicates
  return p;
}

std::string CheckedLayout::ToString() const {
  return ToPlannerLayout(nn::GPTConfig{}, dims.dp_size() * microbatches).ToString();
}

double LedgerRatio(int64_t planned, int64_t measured) {
  if (planned == 0) return measured == 0 ? 1.0 : std::numeric_limits<double>::infinity();
  return static_cast<double>(measured) / static_cast<double>(planned);
}

LayoutCheck CheckLayout(const nn::GPTConfig& cfg, const CheckedLayout& layout, int64_t global_batch) {
  const planner::Layout pl = layout.ToPlannerLayout(cfg, global_batch);
  const planner::ModelSpec model = planner::FromGptConfig(cfg);
  planner::Verify(pl, model, layout.dims.world_size());
  const std::string text = GenerateCorpus(kSeed, 1 << 16);
  LayoutCheck out{.layout = layout, .ranks = std::vector<RankLedgers>(layout.dims.world_size())};
  std::mutex mu;
  comm::RunRanks(static_cast<int>(layout.dims.world_size()), [&](comm::ProcessGroupPtr world) {
    const Measurement measured = UsesReplicate(layout) ? TrainReplicate(cfg, layout, text, global_batch, world)
                                                       : TrainRecipe(cfg, layout, text, global_batch, world);
    const planner::RankPlan plan = planner::PlanRank(model, pl, world->rank());
    std::lock_guard<std::mutex> lock(mu);
    out.ranks[world->rank()] = {world->rank(), plan.ledgers, measured.ledgers, plan.axis_bytes, measured.axis_bytes};
  });
  double worst_distance = 0;
  for (const RankLedgers& r : out.ranks) {
    const std::pair<const char*, std::pair<int64_t, int64_t>> ledgers[] = {
        {"params", {r.planned.params, r.measured.params}}, {"grads", {r.planned.grads, r.measured.grads}},
        {"optim", {r.planned.optim, r.measured.optim}},     {"activations", {r.planned.activations, r.measured.activations}},
        {"comm", {r.planned.comm, r.measured.comm}}};
    for (const auto& [name, pm] : ledgers) {
      const double ratio = LedgerRatio(pm.first, pm.second);
      if (std::abs(ratio - 1.0) > worst_distance) {
        worst_distance = std::abs(ratio - 1.0);
        out.worst_ratio = ratio;
        out.worst_at = Str("rank ", r.rank, " ", name);
      }
    }
  }
  return out;
}

std::string FormatLayoutCheck(const LayoutCheck& c) {
  std::string s = Str(c.layout.ToString(), " on ", c.layout.dims.world_size(), " ranks",
                      UsesReplicate(c.layout) ? " (Replicate)" : "", ": worst ", c.worst_ratio, " at ",
                      c.worst_at.empty() ? "-" : c.worst_at, "\n");
  char line[200];
  for (const RankLedgers& r : c.ranks) {
    std::snprintf(line, sizeof line, "  rank %d  planned/measured B (ratio):", r.rank);
    s += line;
    const std::tuple<const char*, int64_t, int64_t> rows[] = {
        {"params", r.planned.params, r.measured.params}, {"grads", r.planned.grads, r.measured.grads},
        {"optim", r.planned.optim, r.measured.optim}, {"act", r.planned.activations, r.measured.activations},
        {"comm", r.planned.comm, r.measured.comm}};
    for (const auto& [name, planned, measured] : rows) {
      std::snprintf(line, sizeof line, " %s %lld/%lld (%.3f)", name, static_cast<long long>(planned),
                    static_cast<long long>(measured), LedgerRatio(planned, measured));
      s += line;
    }
    s += "\n    bytes sent planned/measured:";
    for (int a = 0; a < planner::kNumMeshAxes; ++a) {
      s += Str(" ", planner::MeshAxisName(static_cast<planner::MeshAxis>(a)), " ", r.planned_axis_bytes[a], "/",
               r.measured_axis_bytes[a]);
    }
    s += "\n";
  }
  return s;
}

nn::GPTConfig PlannerGridGpt() {
  return nn::GPTConfig{.vocab_size = 256, .d_model = 16, .n_layers = 4, .n_heads = 2, .seq_len = 16};
}

std::vector<GridLayout> PlannerGrid() {
  using pipelining::ScheduleKind;
  return {
      {"pp2_1f1b_m2", {.dims = {.pp = 2}, .microbatches = 2}},
      {"pp2_gpipe_m4", {.dims = {.pp = 2}, .schedule = ScheduleKind::kGPipe, .microbatches = 4}},
      {"pp4_1f1b_m4", {.dims = {.pp = 4}, .microbatches = 4}},
      {"pp2_ac_full", {.dims = {.pp = 2}, .microbatches = 2, .ac = "full"}},
      {"pp2_dp_shard2", {.dims = {.pp = 2, .dp_shard = 2}, .microbatches = 2}},
      {"pp2_dp_shard2_gpipe_selective",
       {.dims = {.pp = 2, .dp_shard = 2}, .schedule = ScheduleKind::kGPipe, .microbatches = 2, .ac = "selective"}},
      {"pp2_hsdp2x2", {.dims = {.pp = 2, .dp_replicate = 2, .dp_shard = 2}, .microbatches = 2}},
      {"fsdp4", {.dims = {.dp_shard = 4}}},
      {"hsdp2x2_ac_full", {.dims = {.dp_replicate = 2, .dp_shard = 2}, .ac = "full"}},
      {"ddp2", {.dims = {.dp_shard = 2}, .zero_stage = 0}},
      {"zero1_2", {.dims = {.dp_shard = 2}, .zero_stage = 1}},
      {"zero2_2", {.dims = {.dp_shard = 2}, .zero_stage = 2}},
      {"tp2", {.dims = {.tp = 2}}},
      {"tp2_sp", {.dims = {.tp = 2}, .sequence_parallel = true}},
      {"dp_shard2_tp2", {.dims = {.dp_shard = 2, .tp = 2}}},
      {"dp_shard2_tp2_sp", {.dims = {.dp_shard = 2, .tp = 2}, .sequence_parallel = true}},
      {"pp2_tp2", {.dims = {.pp = 2, .tp = 2}, .microbatches = 2}},
      {"pp2_dp_shard2_tp2", {.dims = {.pp = 2, .dp_shard = 2, .tp = 2}, .microbatches = 2}},
  };
}

}  // namespace tessel::examples
