// benchmarks/ac_workload.cc — ac_memory_vs_plan: the activations ledger's measured peak of one forward +
// backward of a GPT with full activation checkpointing on every block (core/nn/checkpoint_wrapper.h),
// against planner/'s prediction for the same config and layout (ac=full). A memory ratio: 1.0 is a
// perfect plan; the target band is 0.95-1.05. The note gives the selective policy's ratio and how much
// each policy saves against no checkpointing.
#include <cstdio>
#include <memory>
#include <string>

#include "benchmarks/figure.h"
#include "core/nn/transformer.h"
#include "planner/activations.h"
#include "planner/memory_plan.h"
#include "planner/model_spec.h"

namespace tessel::bench {
namespace {

constexpr int64_t kBatch = 4;

nn::GPTConfig AcGpt() { return {.vocab_size = 256, .d_model = 128, .n_layers = 6, .n_heads = 4, .seq_len = 64}; }

int64_t MeasuredPeak(const std::string& ac) { return planner::MeasureGptActivations(AcGpt(), kBatch, ac); }

int64_t PlannedPeak(planner::ActivationCheckpointing ac) {
  const planner::Layout l{.ac = ac,
                          .param_dtype = DType::kFloat32,
                          .reduce_dtype = DType::kFloat32,
                          .global_batch = kBatch,
                          .seq_len = AcGpt().seq_len};
  return planner::ActivationsBytes(planner::FromGptConfig(AcGpt()), l, 0);
}

const bool kRegistered = RegisterFigure("ac_memory_vs_plan", [] {
  auto note = std::make_shared<std::string>();
  Figure f{"ac_memory_vs_plan",
           {"ac_full_activations_peak", "MiB", 0, nullptr},
           Throughput{"planner_ac_full", "MiB", 0, nullptr}};
  f.precomputed = [note] {
    const double mib = 1024.0 * 1024.0;
    const int64_t full = MeasuredPeak("full"), selective = MeasuredPeak("selective"), none = MeasuredPeak("none");
    const int64_t planned_selective = PlannedPeak(planner::ActivationCheckpointing::kSelective);
    char line[256];
    std::snprintf(line, sizeof(line),
                  "GPT d%lld L%lld s%lld b%lld fp32: none %.2f MiB; selective %.2f MiB (plan %.2f, ratio %.3f); "
                  "full %.2f MiB",
                  static_cast<long long>(AcGpt().d_model), static_cast<long long>(AcGpt().n_layers),
                  static_cast<long long>(AcGpt().seq_len), static_cast<long long>(kBatch), none / mib, selective / mib,
                  planned_selective / mib, static_cast<double>(selective) / planned_selective, full / mib);
    *note = line;
    return std::pair<double, double>{full / mib, PlannedPeak(planner::ActivationCheckpointing::kFull) / mib};
  };
  f.note = [note] { return *note; };
  return f;
});

}  // namespace
}  // namespace tessel::bench
