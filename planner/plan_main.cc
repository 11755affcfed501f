// planner/plan_main.cc — `bazel run //planner:plan`: the ledger planner from the command line.
// For a model (a preset or a GPT config) and a world size it prints the per-rank, per-ledger peak
// bytes of one layout (the rank with the largest total), says which ledger exceeds the budget when
// the layout does not fit, and lists the layouts of that world that fit, fastest first by the
// roofline estimate of planner/roofline.h (assumed FLOP/s and bandwidths are flags, printed).
//
// Example:
//   bazel run //planner:plan -- --model=llama-7b --world=8 --memory_per_rank=80GiB --zero=1
//   bazel run //planner:plan -- --model=gpt --d_model=64 --layers=2 --world=2 --measure_activations
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "core/base/error.h"
#include "planner/memory_plan.h"
#include "planner/planner.h"
#include "planner/roofline.h"

ABSL_FLAG(std::string, model, "llama-7b",
          "preset (gpt2-small, llama-7b, llama-13b, tessel-gpt) or 'gpt' (flags below)");
ABSL_FLAG(int64_t, vocab, 256, "--model=gpt: vocabulary size");
ABSL_FLAG(int64_t, d_model, 128, "--model=gpt: hidden size");
ABSL_FLAG(int64_t, layers, 4, "--model=gpt: transformer blocks");
ABSL_FLAG(int64_t, heads, 4, "--model=gpt: attention heads");
ABSL_FLAG(std::string, mlp, "gelu", "--model=gpt: gelu or swiglu");
ABSL_FLAG(std::string, norm, "layernorm", "--model=gpt: layernorm or rmsnorm");
ABSL_FLAG(int64_t, world, 8, "ranks");
ABSL_FLAG(std::string, memory_per_rank, "80GiB",
          "budget per rank: a number with B, KiB, MiB, GiB, TiB, KB, MB, GB or TB");
ABSL_FLAG(int64_t, pp, 1, "pipeline stages");
ABSL_FLAG(std::string, schedule, "1f1b", "pipeline schedule: gpipe or 1f1b");
ABSL_FLAG(int64_t, microbatches, 0, "microbatches per step (0: global_batch / (dp * micro_batch))");
ABSL_FLAG(int64_t, dp_replicate, 1, "replicating data-parallel ranks (DDP / HSDP's outer axis)");
ABSL_FLAG(int64_t, dp_shard, 0, "sharding data-parallel ranks (0: world / (pp * dp_replicate * tp))");
ABSL_FLAG(int32_t, zero, -1, "ZeRO stage over dp_shard, 0-3 (-1: 3 when dp_shard > 1, else 0)");
ABSL_FLAG(int64_t, tp, 1, "tensor-parallel ranks");
ABSL_FLAG(bool, sp, false, "sequence parallelism (needs tp > 1)");
ABSL_FLAG(bool, loss_parallel, false, "vocab-sharded logits into the loss (else the head's output is all-gathered)");
ABSL_FLAG(std::string, ac, "none", "activation checkpointing: none, selective or full");
ABSL_FLAG(std::string, param_dtype, "bf16", "parameter (and activation) dtype");
ABSL_FLAG(std::string, reduce_dtype, "bf16", "gradient and gradient-reduction dtype");
ABSL_FLAG(std::string, optim_dtype, "fp32", "optimizer moment dtype");
ABSL_FLAG(bool, master_weights, false, "an fp32 master copy of the parameters in the optimizer state");
ABSL_FLAG(int64_t, global_batch, 0, "sequences per step over all dp ranks (0: world / (pp * tp) * micro_batch)");
ABSL_FLAG(int64_t, micro_batch, 1, "sequences per microbatch");
ABSL_FLAG(int64_t, seq, 0, "sequence length (0: the model's, 4096 for LLaMA presets)");
ABSL_FLAG(bool, measure_activations, false,
          "--model=gpt/tessel-gpt: measure activations with one unsharded step (exact fully_shard plan)");
ABSL_FLAG(double, peak_tflops, 989, "assumed dense TFLOP/s per rank");
ABSL_FLAG(double, intra_node_GBps, 450, "assumed per-rank bandwidth inside a node, GB/s");
ABSL_FLAG(double, inter_node_GBps, 50, "assumed per-rank bandwidth across nodes, GB/s");
ABSL_FLAG(int64_t, ranks_per_node, 8, "ranks per node");
ABSL_FLAG(int32_t, top, 10, "how many fitting layouts to list (0: none)");

namespace tessel::planner {
namespace {

ModelSpec ModelFromFlags() {
  const std::string name = absl::GetFlag(FLAGS_model);
  if (name != "gpt") return ModelPreset(name);
  nn::GPTConfig cfg{.vocab_size = absl::GetFlag(FLAGS_vocab), .d_model = absl::GetFlag(FLAGS_d_model),
                    .n_layers = absl::GetFlag(FLAGS_layers), .n_heads = absl::GetFlag(FLAGS_heads),
                    .seq_len = absl::GetFlag(FLAGS_seq) > 0 ? absl::GetFlag(FLAGS_seq) : 64};
  cfg.mlp = absl::GetFlag(FLAGS_mlp);
  cfg.norm = absl::GetFlag(FLAGS_norm);
  return FromGptConfig(cfg);
}

Layout LayoutFromFlags(const ModelSpec& m, int64_t world) {
  Layout l;
  l.pp = absl::GetFlag(FLAGS_pp);
  l.schedule = ParseSchedule(absl::GetFlag(FLAGS_schedule));
  l.dp_replicate = absl::GetFlag(FLAGS_dp_replicate);
  l.tp = absl::GetFlag(FLAGS_tp);
  TESSEL_CHECK(l.pp >= 1 && l.dp_replicate >= 1 && l.tp >= 1, "plan: --pp, --dp_replicate and --tp must be >= 1");
  l.dp_shard = absl::GetFlag(FLAGS_dp_shard) > 0 ? absl::GetFlag(FLAGS_dp_shard)
                                                   : std::max<int64_t>(1, world / (l.pp * l.dp_replicate * l.tp));
  l.zero_stage = absl::GetFlag(FLAGS_zero) >= 0 ? absl::GetFlag(FLAGS_zero) : (l.dp_shard > 1 ? 3 : 0);
  l.sequence_parallel = absl::GetFlag(FLAGS_sp);
  l.loss_parallel = absl::GetFlag(FLAGS_loss_parallel);
  l.ac = ParseAc(absl::GetFlag(FLAGS_ac));
  l.param_dtype = ParseFloatDType(absl::GetFlag(FLAGS_param_dtype));
  l.reduce_dtype = ParseFloatDType(absl::GetFlag(FLAGS_reduce_dtype));
  l.optim_dtype = ParseFloatDType(absl::GetFlag(FLAGS_optim_dtype));
  l.master_weights = absl::GetFlag(FLAGS_master_weights);
  const int64_t micro = absl::GetFlag(FLAGS_micro_batch);
  TESSEL_CHECK(micro >= 1, "plan: --micro_batch must be >= 1, got ", micro);
  l.global_batch = absl::GetFlag(FLAGS_global_batch) > 0 ? absl::GetFlag(FLAGS_global_batch) : l.Dp() * micro;
  l.num_microbatches = absl::GetFlag(FLAGS_microbatches) > 0 ? absl::GetFlag(FLAGS_microbatches)
                                                             : std::max<int64_t>(1, l.global_batch / (l.Dp() * micro));
  l.seq_len = absl::GetFlag(FLAGS_seq) > 0 ? absl::GetFlag(FLAGS_seq) : m.max_seq_len;
  return l;
}

void PrintRanked(const ModelSpec& m, int64_t world, const Layout& base, int64_t budget, const Hardware& hw) {
  const int top = absl::GetFlag(FLAGS_top);
  if (top <= 0) return;
  const std::vector<Candidate> fit = RankLayouts(m, world, base, absl::GetFlag(FLAGS_micro_batch), hw, budget);
  std::printf("\nlayouts of %lld ranks that fit (%zu), fastest first. Roofline: step = (compute + tp) * bubble + pp"
              " + max(0, dp - compute); %.0f TFLOP/s per rank, %.0f GB/s within a node of %lld ranks, %.0f GB/s"
              " across nodes:\n",
              static_cast<long long>(world), fit.size(), hw.peak_flops / 1e12, hw.intra_node_bytes_per_s / 1e9,
              static_cast<long long>(hw.ranks_per_node), hw.inter_node_bytes_per_s / 1e9);
  std::printf("  %-4s %-60s %9s %9s %9s %9s %9s %9s %7s\n", "#", "layout", "peak GiB", "step s", "compute", "tp",
              "pp", "dp", "bubble");
  for (size_t i = 0; i < fit.size() && i < static_cast<size_t>(top); ++i) {
    const Candidate& c = fit[i];
    std::printf("  %-4zu %-60s %9.2f %9.4f %9.4f %9.4f %9.4f %9.4f %7.3f\n", i + 1, c.layout.ToString().c_str(),
                static_cast<double>(c.peak.ledgers.total) / 1073741824.0, c.step.step_s, c.step.compute_s, c.step.tp_s,
                c.step.pp_s, c.step.dp_s, c.step.bubble);
  }
  if (fit.empty()) std::printf("  none: no layout of %lld ranks fits the budget\n", static_cast<long long>(world));
}

int Main() {
  const ModelSpec m = ModelFromFlags();
  const int64_t world = absl::GetFlag(FLAGS_world);
  TESSEL_CHECK(world >= 1, "plan: --world must be >= 1, got ", world);
  const int64_t budget = ParseBytes(absl::GetFlag(FLAGS_memory_per_rank), "plan: --memory_per_rank");
  const Layout layout = LayoutFromFlags(m, world);
  Verify(layout, m, world);
  int64_t activations = -1;
  if (absl::GetFlag(FLAGS_measure_activations)) {
    TESSEL_CHECK(m.gpt.has_value(), "plan: --measure_activations needs a GPT model (--model=gpt or tessel-gpt)");
    activations = MeasureGptActivations(*m.gpt, layout.global_batch / layout.Dp() / layout.num_microbatches);
  }
  std::printf("plan: %s, %lld parameters, %lld ranks, layout %s, global batch %lld x seq %lld (micro-batch %lld), "
              "params %s, reduce %s, optim %s%s; budget %lld B per rank\n",
              m.name.c_str(), static_cast<long long>(m.NumParameters()), static_cast<long long>(world),
              layout.ToString().c_str(), static_cast<long long>(layout.global_batch),
              static_cast<long long>(layout.seq_len), static_cast<long long>(layout.MicroBatchSize()),
              std::string(DTypeName(layout.param_dtype)).c_str(), std::string(DTypeName(layout.reduce_dtype)).c_str(),
              std::string(DTypeName(layout.optim_dtype)).c_str(), layout.master_weights ? " + fp32 master" : "",
              static_cast<long long>(budget));
  const RankPlan peak = PlanPeakRank(m, layout, activations);
  std::printf("%s", FormatRankPlan(peak, budget).c_str());
  if (world <= 16) {
    std::printf("total per rank:");
    for (int64_t r = 0; r < world; ++r) {
      std::printf(" %lld", static_cast<long long>(PlanRank(m, layout, r, activations).ledgers.total));
    }
    std::printf("\n");
  }
  Layout base = layout;
  base.global_batch = absl::GetFlag(FLAGS_global_batch) > 0 ? layout.global_batch
                                                            : world * absl::GetFlag(FLAGS_micro_batch);
  const Hardware hw{.peak_flops = absl::GetFlag(FLAGS_peak_tflops) * 1e12,
                    .intra_node_bytes_per_s = absl::GetFlag(FLAGS_intra_node_GBps) * 1e9,
                    .inter_node_bytes_per_s = absl::GetFlag(FLAGS_inter_node_GBps) * 1e9,
                    .ranks_per_node = absl::GetFlag(FLAGS_ranks_per_node)};
  PrintRanked(m, world, base, budget, hw);
  return 0;
}

}  // namespace
}  // namespace tessel::planner

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "the ledger planner: per-rank, per-ledger peak bytes of a layout, and the layouts that fit");
  const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "plan: unexpected argument '%s' (flags are --name=value)\n", rest[1]);
    return 2;
  }
  try {
    return tessel::planner::Main();
  } catch (const tessel::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
