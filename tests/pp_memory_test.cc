// tests/pp_memory_test.cc — the activations ledger measured while a schedule runs agrees with the
// simulator's peak in-flight count: peak growth ≈ peak_in_flight × (bytes one microbatch holds).
#include <gtest/gtest.h>

#include <mutex>

#include "comm/backends/threads.h"
#include "core/base/error.h"
#include "core/tensor/random.h"
#include "pipelining/pipeline_gpt.h"
#include "pipelining/simulator.h"

namespace tessel::pipelining {
namespace {

struct RankMemory {
  int stage = 0;
  int simulated_peak = 0;
  int measured_peak = 0;
  int64_t per_microbatch = 0;
  int64_t peak_growth = 0;
};

std::vector<RankMemory> Measure(ScheduleKind kind, int num_ranks, int num_microbatches) {
  const nn::GPTConfig cfg{.vocab_size = 32, .d_model = 32, .n_layers = 4, .n_heads = 2, .seq_len = 16};
  std::vector<RankMemory> out(num_ranks);
  std::mutex mu;
  comm::RunRanks(num_ranks, [&](comm::ProcessGroupPtr pg) {
    RankPipeline pp = PipelineGPT(cfg, 3, pg, {.kind = kind, .num_microbatches = num_microbatches});
    const SimulationResult sim = Simulate(pp.lowered, pp.stage_to_rank);
    Generator g(9);
    Tensor idx = Randint(0, 32, std::vector<int64_t>{2 * num_microbatches, 16}, g);
    StepStats st;
    for (int step = 0; step < 2; ++step) st = pp.executor->Step(idx, idx);  // step 2: buffers exist already
    std::lock_guard<std::mutex> lock(mu);
    const int s = pp.stages[0]->stage_index();
    out[pg->rank()] = {s, sim.peak_in_flight[s], st.peak_in_flight[0], st.activation_bytes_per_microbatch[0],
                       st.peak_activation_bytes - st.activation_bytes_at_start};
  });
  return out;
}

TEST(PipelineMemoryTest, ActivationLedgerPeakFollowsTheSimulatedInFlightCount) {
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B}) {
    for (const RankMemory& r : Measure(kind, 4, 8)) {
      SCOPED_TRACE(Str(ScheduleName(kind), " stage ", r.stage));
      EXPECT_EQ(r.measured_peak, r.simulated_peak);
      const double ratio = static_cast<double>(r.peak_growth) / (r.simulated_peak * r.per_microbatch);
      std::printf("%s stage %d: sim peak %d, per-mb %lld B, ledger peak growth %lld B, ratio %.3f\n",
                  std::string(ScheduleName(kind)).c_str(), r.stage, r.simulated_peak,
                  static_cast<long long>(r.per_microbatch), static_cast<long long>(r.peak_growth), ratio);
      EXPECT_GE(ratio, 1.0);
      EXPECT_LE(ratio, 1.0 + 1.0 / r.simulated_peak);
    }
  }
}

}  // namespace
}  // namespace tessel::pipelining
