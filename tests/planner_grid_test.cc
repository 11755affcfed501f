// tests/planner_grid_test.cc — the ledger planner against measurement over a grid of layouts: for each
// layout (pp, schedule, microbatches, dp_replicate, dp_shard, ZeRO stage, activation checkpointing) a
// small GPT trains two steps on the threads backend (examples/gpt/plan_vs_measured.h) and every ledger's measured peak on every rank is within 5% of
// planner/'s plan — here params, grads, optimizer state and comm buffers to the byte and activations
// within 0.2%. Tensor-parallel layouts are not in the grid yet (their ledgers are being fixed on the tp2
// branch; examples/gpt/plan_vs_measured.h measures them the same way).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "core/base/error.h"
#include "examples/gpt/plan_vs_measured.h"

namespace tessel::examples {
namespace {

using pipelining::ScheduleKind;

nn::GPTConfig SmallGpt() {
  return nn::GPTConfig{.vocab_size = 256, .d_model = 16, .n_layers = 4, .n_heads = 2, .seq_len = 16};
}
constexpr int64_t kGlobalBatch = 8;

struct GridCase {
  const char* name;
  CheckedLayout layout;
};

// The bar is 5% for every ledger; the state ledgers and comm are exact on every layout here, and
// activations within 0.2% (measured: the loss's 4-byte scalar, selective recompute's 256 B).
void ExpectLedgersMatchThePlan(const GridCase& c) {
  const LayoutCheck check = CheckLayout(SmallGpt(), c.layout, kGlobalBatch);
  std::printf("%s: %s", c.name, FormatLayoutCheck(check).c_str());
  for (const RankLedgers& r : check.ranks) {
    SCOPED_TRACE(Str(c.name, " rank ", r.rank));
    EXPECT_EQ(r.measured.params, r.planned.params);
    EXPECT_EQ(r.measured.grads, r.planned.grads);
    EXPECT_EQ(r.measured.optim, r.planned.optim);
    EXPECT_EQ(r.measured.comm, r.planned.comm);
    EXPECT_NEAR(LedgerRatio(r.planned.activations, r.measured.activations), 1.0, 0.002);
  }
  EXPECT_NEAR(check.worst_ratio, 1.0, 0.05);
}

const GridCase kPipelined[] = {
    {"pp2_1f1b_m2", {.dims = {.pp = 2}, .microbatches = 2}},
    {"pp2_gpipe_m4", {.dims = {.pp = 2}, .schedule = ScheduleKind::kGPipe, .microbatches = 4}},
    {"pp4_1f1b_m4", {.dims = {.pp = 4}, .microbatches = 4}},
    {"pp2_ac_full", {.dims = {.pp = 2}, .microbatches = 2, .ac = "full"}},
    {"pp2_dp_shard2", {.dims = {.pp = 2, .dp_shard = 2}, .microbatches = 2}},
    {"pp2_dp_shard2_gpipe_selective", {.dims = {.pp = 2, .dp_shard = 2}, .schedule = ScheduleKind::kGPipe,
                                       .microbatches = 2, .ac = "selective"}},
    {"pp2_hsdp2x2", {.dims = {.pp = 2, .dp_replicate = 2, .dp_shard = 2}, .microbatches = 2}},
};
const GridCase kDataParallel[] = {
    {"fsdp4", {.dims = {.dp_shard = 4}}},
    {"hsdp2x2_ac_full", {.dims = {.dp_replicate = 2, .dp_shard = 2}, .ac = "full"}},
    {"ddp2", {.dims = {.dp_shard = 2}, .zero_stage = 0}},
    {"zero1_2", {.dims = {.dp_shard = 2}, .zero_stage = 1}},
    {"zero2_2", {.dims = {.dp_shard = 2}, .zero_stage = 2}},
};

TEST(PlannerGrid, PipelinedLayoutsEveryLedgerWithinFivePercentOfThePlan) {
  for (const GridCase& c : kPipelined) ExpectLedgersMatchThePlan(c);
}

TEST(PlannerGrid, DataParallelLayoutsEveryLedgerWithinFivePercentOfThePlan) {
  for (const GridCase& c : kDataParallel) ExpectLedgersMatchThePlan(c);
}

}  // namespace
}  // namespace tessel::examples
