// tests/comp3d_equivalence_test.cc — the GPT under 3-D layouts (examples/gpt/parallel_gpt.h) trains like one
// rank: 8 threads-backend ranks as (pp 2, dp_shard 2, tp 2), (pp 2, dp_shard 4), (dp_replicate 2, dp_shard 2,
// tp 2), (pp 2, dp_replicate 2, dp_shard 2) and 4 ranks as (pp 2, tp 2), for 1F1B and Interleaved1F1B, and
// (pp 2, dp_shard 2, tp 2) with sequence parallelism inside the stages; 10 SGD steps give the one-rank losses
// (1e-5 relative per step) and final parameters; pipelined stages under fully_shard reduce-scatter once
// per FSDP group per step (not per microbatch) and all-gather once per group per step (comm tracer), and
// every group is resharded when the step ends.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "comm/backends/threads.h"
#include "comm/tracer.h"
#include "core/base/testing/expect_error.h"
#include "dtensor/dtensor.h"
#include "examples/gpt/parallel_gpt.h"
#include "core/tensor/factory.h"
#include "tests/pp_testing.h"

namespace tessel::examples {
namespace {

namespace ppt = pipelining::pp_testing;
using comm::CollectiveKind;
using testing::ExpectErrorContains;
using pipelining::ScheduleKind;

struct Layout {
  ParallelDims dims;
  ScheduleKind schedule;
  // Expected collectives of one step on every rank: reduce-scatters and all-gathers on "dp_shard",
  // all-reduces on "dp_replicate" (HSDP).
  int reduce_scatters, all_gathers, replicate_all_reduces;
  bool sequence_parallel = false;
};

struct Result {
  std::mutex mu;
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> params;
  std::vector<std::string> failures;
};

void TrainRank(const Layout& layout, const comm::ProcessGroupPtr& world, Result& result) {
  const ParallelMesh mesh = ParallelMesh::Build(world, layout.dims);
  ParallelGpt model = BuildParallelGpt(ppt::Config(), ppt::kSeed, mesh,
                                       {.tp = {.sequence_parallel = layout.sequence_parallel},
                                        .schedule = layout.schedule, .num_microbatches = 2});
  optim::SGD opt(model.NamedParameters(), {.lr = ppt::kLr});
  std::vector<double> losses;
  for (int step = 0; step < ppt::kSteps; ++step) {
    auto [idx, tgt] = ppt::Batch(step);
    comm::CommTracer tracer;
    const std::optional<double> loss = model.ForwardBackward(idx, tgt);
    const int rs = tracer.Count(CollectiveKind::kReduceScatter, "dp_shard");
    const int ag = tracer.Count(CollectiveKind::kAllGather, "dp_shard");
    const int ar = tracer.Count(CollectiveKind::kAllReduce, "dp_replicate");
    if (rs != layout.reduce_scatters || ag != layout.all_gathers || ar != layout.replicate_all_reduces) {
      std::lock_guard<std::mutex> lock(result.mu);
      result.failures.push_back("rank " + std::to_string(world->rank()) + " step " + std::to_string(step) + ": " +
                                tracer.Summary());
    }
    for (const auto& part : model.fsdp) {
      for (const fsdp::FSDPModule& g : part) {
        if (!g.is_unsharded()) continue;
        std::lock_guard<std::mutex> lock(result.mu);
        result.failures.push_back("rank " + std::to_string(world->rank()) + ": a group is still unsharded after step " +
                                  std::to_string(step));
      }
    }
    if (loss) losses.push_back(*loss);
    opt.Step();
    opt.ZeroGrad();
  }
  std::map<std::string, std::vector<float>> params;
  for (auto& [fqn, p] : model.NamedParameters()) {
    params[fqn] = (p.is_distributed() ? dtensor::DTensor(p).FullTensor() : p).ToVector<float>();
  }
  std::lock_guard<std::mutex> lock(result.mu);
  if (!losses.empty()) {
    if (!result.losses.empty() && result.losses != losses) result.failures.push_back("ranks disagree on the loss");
    result.losses = losses;
  }
  for (auto& [fqn, v] : params) {
    if (result.params.count(fqn) && result.params[fqn] != v) result.failures.push_back("replicas differ: " + fqn);
    result.params[fqn] = std::move(v);
  }
}

class Comp3dEquivalenceTest : public ::testing::TestWithParam<Layout> {};

TEST_P(Comp3dEquivalenceTest, TenStepsMatchOneRankWithOneReductionPerGroupPerStep) {
  const Layout& layout = GetParam();
  Result result;
  comm::RunRanks(static_cast<int>(layout.dims.world_size()),
                 [&](comm::ProcessGroupPtr world) { TrainRank(layout, world, result); });
  for (const std::string& f : result.failures) ADD_FAILURE() << f;
  ASSERT_EQ(result.losses.size(), static_cast<size_t>(ppt::kSteps));
  ppt::ExpectMatchesReference(result.losses, result.params, /*complete=*/true);
}

// 8 layers. One stage per rank (1F1B): 4 blocks + a root holding wte/wpe or ln_f/lm_head = 5 groups per
// rank. Interleaved1F1B (2 stages per rank, 2 blocks each): stages {0, 2} or {1, 3}, one root with
// parameters among them = 5 groups. No pipeline (HSDP): 8 blocks + the root = 9 groups, all-gathered
// in forward and again in backward except the root (which keeps its parameters): 17. HSDP adds one
// all-reduce on "dp_replicate" per reduce-scatter.
INSTANTIATE_TEST_SUITE_P(
    Layouts, Comp3dEquivalenceTest,
    ::testing::Values(Layout{{.pp = 2, .dp_shard = 2, .tp = 2}, ScheduleKind::k1F1B, 5, 5, 0},
                      Layout{{.pp = 2, .dp_shard = 2, .tp = 2}, ScheduleKind::kInterleaved1F1B, 5, 5, 0},
                      Layout{{.pp = 2, .dp_shard = 4}, ScheduleKind::k1F1B, 5, 5, 0},
                      Layout{{.pp = 2, .dp_shard = 4}, ScheduleKind::kInterleaved1F1B, 5, 5, 0},
                      Layout{{.dp_replicate = 2, .dp_shard = 2, .tp = 2}, ScheduleKind::k1F1B, 9, 17, 9},
                      Layout{{.pp = 2, .dp_replicate = 2, .dp_shard = 2}, ScheduleKind::k1F1B, 5, 5, 5},
                      Layout{{.pp = 2, .tp = 2}, ScheduleKind::k1F1B, 0, 0, 0},
                      Layout{{.pp = 2, .tp = 2}, ScheduleKind::kInterleaved1F1B, 0, 0, 0},
                      Layout{{.pp = 2, .dp_shard = 2, .tp = 2}, ScheduleKind::k1F1B, 5, 5, 0, /*sp=*/true}));

TEST(ParallelDimsTest, ProductDifferentFromWorldNamesTheLayout) {
  ExpectErrorContains([] { ParallelDims{.pp = 2, .dp_shard = 2, .tp = 2}.Validate(4); }, ErrorCode::kInvalidArgument,
                      {"pp 2 x dp_replicate 1 x dp_shard 2 x tp 2 = 8 ranks", "world has 4 ranks"});
}

TEST(ParallelDimsTest, NonPositiveAxisIsNamed) {
  ExpectErrorContains([] { ParallelDims{.tp = 0}.Validate(1); }, ErrorCode::kInvalidArgument,
                      "mesh axis 'tp' has size 0");
}

TEST(ParallelDimsTest, ReplicateWithoutShardIsRefused) {
  ExpectErrorContains([] { ParallelDims{.dp_replicate = 2}.Validate(2); }, ErrorCode::kInvalidArgument,
                      "'dp_replicate' of size 2 needs 'dp_shard' > 1");
}

TEST(ParallelMeshTest, DropsSizeOneAxesAndHandsEachPrimitiveItsSubMesh) {
  comm::RunRanks(8, [](comm::ProcessGroupPtr world) {
    const ParallelMesh pm = ParallelMesh::Build(world, {.pp = 2, .dp_shard = 2, .tp = 2});
    EXPECT_EQ(pm.mesh()->axis_names(), (std::vector<std::string>{"pp", "dp_shard", "tp"}));
    EXPECT_EQ(pm.spmd_mesh()->axis_names(), (std::vector<std::string>{"dp_shard", "tp"}));
    EXPECT_EQ(pm.pp_group()->size(), 2);
    EXPECT_EQ(pm.pp_group()->rank(), world->rank() / 4);  // row-major: pp is the outermost axis
    EXPECT_EQ(pm.dp_rank(), (world->rank() / 2) % 2);
  });
  comm::RunRanks(8, [](comm::ProcessGroupPtr world) {
    const ParallelMesh pm = ParallelMesh::Build(world, {.dp_replicate = 2, .dp_shard = 2, .tp = 2});
    EXPECT_EQ(pm.pp_group(), nullptr);
    EXPECT_EQ(pm.dp_group()->size(), 4);
    EXPECT_EQ(pm.dp_rank(), world->rank() / 2);  // (dp_replicate, dp_shard) flattened row-major
  });
}

TEST(ParallelGptTest, BatchNotDivisibleByDataParallelSizeIsRefused) {
  comm::RunRanks(4, [](comm::ProcessGroupPtr world) {
    const ParallelMesh pm = ParallelMesh::Build(world, {.pp = 2, .dp_shard = 2});
    ParallelGpt model = BuildParallelGpt(ppt::Config(), 0, pm, {.num_microbatches = 1});
    const Tensor idx = Zeros({3, 4}, DType::kInt64);
    ExpectErrorContains([&] { model.ForwardBackward(idx, idx); }, ErrorCode::kInvalidArgument,
                        {"3 rows of idx [3, 4]", "not divisible by the data-parallel size 2", "pp 2 x dp_replicate 1"});
  });
}

TEST(ParallelGptTest, OneOptimizerPerPartIsRequired) {
  comm::RunRanks(2, [](comm::ProcessGroupPtr world) {
    const ParallelMesh pm = ParallelMesh::Build(world, {.pp = 2});
    ParallelGpt model = BuildParallelGpt(ppt::Config(), 0, pm, {.schedule = ScheduleKind::kInterleaved1F1B});
    ASSERT_EQ(model.parts.size(), 2u);  // 4 stages on 2 ranks
    optim::SGD opt(model.NamedParameters(), {.lr = 0.1});
    ExpectErrorContains([&] { model.GetStateDict({&opt}); }, ErrorCode::kInvalidArgument,
                        "1 optimizers for 2 model parts (one per part)");
  });
}

TEST(ParallelGptTest, LossParallelWithPipelineIsRefused) {
  comm::RunRanks(2, [](comm::ProcessGroupPtr world) {
    const ParallelMesh pm = ParallelMesh::Build(world, {.pp = 2});
    ExpectErrorContains([&] { BuildParallelGpt(ppt::Config(), 0, pm, {.tp = {.loss_parallel = true}}); },
                        ErrorCode::kInvalidArgument, "loss_parallel needs pp == 1");
  });
}

}  // namespace
}  // namespace tessel::examples
