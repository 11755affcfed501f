// tests/pp_schedules_test.cc — every pipeline schedule, on 2 and 4 ranks of the threads backend, trains a
// tiny GPT 10 steps to the same losses and final parameters as one rank (fp32, 1e-5 relative), and the
// in-flight microbatch peaks it measures equal the simulator's.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/backends/threads.h"
#include "core/base/error.h"
#include "core/ops/view.h"
#include "core/tensor/factory.h"
#include "pipelining/pipeline_gpt.h"
#include "pipelining/simulator.h"
#include "tests/pp_testing.h"

namespace tessel::pipelining {
namespace {

using pp_testing::Batch;
using pp_testing::Config;
using pp_testing::kLr;
using pp_testing::kSeed;
using pp_testing::kSteps;
using pp_testing::Trained;

struct Row {
  const char* name;
  ScheduleKind kind;
  int num_ranks;
  int num_microbatches;
  int stages_per_rank;  // 0: PipelineGPT's default
};

class PipelineScheduleTest : public ::testing::TestWithParam<Row> {};

TEST_P(PipelineScheduleTest, TrainsTenStepsToTheOneRankLossesAndParameters) {
  const Row row = GetParam();
  Trained got;
  std::mutex mu;
  comm::RunRanks(row.num_ranks, [&](comm::ProcessGroupPtr pg) {
    RankPipeline pp = PipelineGPT(Config(), kSeed, pg,
                                  {.kind = row.kind, .num_microbatches = row.num_microbatches,
                                   .stages_per_rank = row.stages_per_rank});
    const SimulationResult sim = Simulate(pp.lowered, pp.stage_to_rank);
    optim::SGD opt(pp.NamedParameters(), {.lr = kLr});
    for (int step = 0; step < kSteps; ++step) {
      auto [idx, tgt] = Batch(step);
      const StepStats st = pp.executor->Step(idx, tgt);
      opt.Step();
      opt.ZeroGrad();
      for (size_t i = 0; i < pp.stages.size(); ++i) {
        const int s = pp.stages[i]->stage_index();
        EXPECT_EQ(st.peak_in_flight[i], sim.peak_in_flight[s]) << "stage " << s << " step " << step;
      }
      // Every local stage ran m F and m backwards, each a B or an I then a W; the zero-bubble family splits
      // (all of them but DualPipeV's, which mixes both), the others never do.
      const int per_kind = row.num_microbatches * static_cast<int>(pp.stages.size());
      auto count = [&](ActionKind k) { return st.compute_seconds.count(k) ? st.compute_seconds.at(k).second : 0; };
      EXPECT_EQ(count(ActionKind::kForward), per_kind);
      EXPECT_EQ(count(ActionKind::kFullBackward) + count(ActionKind::kBackwardInput), per_kind);
      EXPECT_EQ(count(ActionKind::kBackwardWeight), count(ActionKind::kBackwardInput));
      if (!UsesSplitBackward(row.kind)) EXPECT_EQ(count(ActionKind::kBackwardInput), 0);
      if (row.kind == ScheduleKind::kInterleavedZeroBubble || row.kind == ScheduleKind::kZBVZeroBubble) {
        EXPECT_EQ(count(ActionKind::kBackwardInput), per_kind);
      }
      if (row.kind == ScheduleKind::kDualPipeV) EXPECT_GT(count(ActionKind::kBackwardInput), 0);
      std::lock_guard<std::mutex> lock(mu);
      if (st.loss) got.losses.push_back(*st.loss);
    }
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [fqn, p] : pp.NamedParameters()) {
      EXPECT_TRUE(got.params.emplace(fqn, p.ToVector<float>()).second) << fqn << " on two ranks";
    }
  });
  pp_testing::ExpectMatchesReference(got.losses, got.params, /*complete=*/true);
}

// Masked targets (cross-entropy's ignore_index -100, as in padded data) spread unevenly over microbatches,
// one microbatch wholly masked: the step's loss and gradients equal the full batch's. With row weights the
// loss differed (a mean of microbatch means) and the wholly masked microbatch's 0/0 mean made every
// gradient NaN.
TEST(PipelineMaskedTargetsTest, UnevenlyMaskedMicrobatchesMatchTheFullBatch) {
  auto [idx, tgt] = Batch(0);
  std::vector<int64_t> t = tgt.ToVector<int64_t>();  // [8, 4]: rows 0-1 are microbatch 0 of 4
  for (int i = 0; i < 8; ++i) t[static_cast<size_t>(i)] = -100;        // microbatch 0: every target masked
  for (int i = 8; i < 11; ++i) t[static_cast<size_t>(i)] = -100;       // microbatch 1: 3 of its 8
  const Tensor masked = Reshape(FromVector<int64_t>(t), {pp_testing::kBatch, 4});
  Generator gen(kSeed);
  nn::GPT ref(Config(), gen);
  Tensor ref_loss = ref.Loss(idx, masked);
  Backward(ref_loss);
  std::map<std::string, std::vector<double>> ref_grads;
  for (const auto& [fqn, p] : ref.NamedParameters()) ref_grads[fqn] = p.grad().ToDoubleVector();
  std::mutex mu;
  std::map<std::string, std::vector<double>> grads;
  double loss = 0;
  comm::RunRanks(2, [&](comm::ProcessGroupPtr pg) {
    RankPipeline pp = PipelineGPT(Config(), kSeed, pg, {.kind = ScheduleKind::k1F1B, .num_microbatches = 4});
    const StepStats st = pp.executor->Step(idx, masked);
    std::lock_guard<std::mutex> lock(mu);
    if (st.loss) loss = *st.loss;
    for (auto& [fqn, p] : pp.NamedParameters()) grads[fqn] = p.grad().ToDoubleVector();
  });
  EXPECT_NEAR(loss, ref_loss.item<double>(), 1e-6 * ref_loss.item<double>());
  ASSERT_EQ(grads.size(), ref_grads.size());
  for (const auto& [fqn, want] : ref_grads) {
    double scale = 0, err = 0;
    const std::vector<double>& have = grads.at(fqn);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_TRUE(std::isfinite(have[i])) << fqn;
      scale = std::max(scale, std::abs(want[i]));
      err = std::max(err, std::abs(have[i] - want[i]));
    }
    EXPECT_LE(err, 1e-5 * scale + 1e-9) << fqn;
  }
}

// torch's middle ranks call step() with no arguments. Ranks 1 and 2 of a 4-rank 1F1B hold neither the
// first nor the last stage and pass no batch: with 4 even microbatches from the first step on (sizes from
// the shape handshake), and with 3 uneven ones (3, 3, 2 rows) once a first step gave them the batch (the
// last step's sizes). Both train to the one-rank losses and parameters.
TEST(PipelineMiddleRanksTest, StepWithoutTheBatchOnMiddleRanksMatchesOneRank) {
  for (const int m : {4, 3}) {
    SCOPED_TRACE(m);
    Trained got;
    std::mutex mu;
    comm::RunRanks(4, [&](comm::ProcessGroupPtr pg) {
      RankPipeline pp = PipelineGPT(Config(), kSeed, pg, {.kind = ScheduleKind::k1F1B, .num_microbatches = m});
      const bool middle = pg->rank() == 1 || pg->rank() == 2;
      optim::SGD opt(pp.NamedParameters(), {.lr = kLr});
      for (int step = 0; step < kSteps; ++step) {
        auto [idx, tgt] = Batch(step);
        const bool bare = middle && (m == 4 || step > 0);
        const StepStats st = bare ? pp.executor->Step(Tensor(), Tensor()) : pp.executor->Step(idx, tgt);
        opt.Step();
        opt.ZeroGrad();
        std::lock_guard<std::mutex> lock(mu);
        if (st.loss) got.losses.push_back(*st.loss);
      }
      std::lock_guard<std::mutex> lock(mu);
      for (auto& [fqn, p] : pp.NamedParameters()) got.params.emplace(fqn, p.ToVector<float>());
    });
    pp_testing::ExpectMatchesReference(got.losses, got.params, /*complete=*/true);
  }
}

// Eval (PyTorch's schedule.eval, a forward-only step) before every training step: its loss equals the
// step's that follows on the same batch and parameters, it leaves every gradient as it was (none), and
// training still reaches the one-rank losses and parameters, so it disturbs no state of the schedule.
TEST(PipelineEvalTest, ForwardOnlyStepsBetweenTrainingStepsChangeNothing) {
  for (const ScheduleKind kind : {ScheduleKind::k1F1B, ScheduleKind::kZBVZeroBubble}) {
    SCOPED_TRACE(ScheduleName(kind));
    Trained got;
    std::mutex mu;
    comm::RunRanks(2, [&](comm::ProcessGroupPtr pg) {
      RankPipeline pp = PipelineGPT(Config(), kSeed, pg, {.kind = kind, .num_microbatches = 4});
      optim::SGD opt(pp.NamedParameters(), {.lr = kLr});
      for (int step = 0; step < kSteps; ++step) {
        auto [idx, tgt] = Batch(step);
        const StepStats ev = pp.executor->Eval(idx, tgt);
        for (auto& [fqn, p] : pp.NamedParameters()) EXPECT_FALSE(p.grad().defined()) << fqn << " after Eval";
        EXPECT_EQ(ev.compute_seconds.count(ActionKind::kFullBackward) +
                      ev.compute_seconds.count(ActionKind::kBackwardInput), 0u);
        const StepStats st = pp.executor->Step(idx, tgt);
        EXPECT_EQ(ev.loss.has_value(), st.loss.has_value());
        if (st.loss) {
          EXPECT_DOUBLE_EQ(*ev.loss, *st.loss) << "step " << step;
          EXPECT_EQ(ev.microbatch_losses, st.microbatch_losses);
        }
        opt.Step();
        for (auto& [fqn, p] : pp.NamedParameters()) p.set_grad(Tensor());
        std::lock_guard<std::mutex> lock(mu);
        if (st.loss) got.losses.push_back(*st.loss);
      }
      std::lock_guard<std::mutex> lock(mu);
      for (auto& [fqn, p] : pp.NamedParameters()) got.params.emplace(fqn, p.ToVector<float>());
    });
    pp_testing::ExpectMatchesReference(got.losses, got.params, /*complete=*/true);
  }
}

// A sharding state that records what the executor asks of it (what fully_shard's FsdpState does for real:
// tools/cpp_user/compose_test.cc, tests/comp3d_equivalence_test.cc).
class RecordingSharding final : public nn::ScheduledShardingState {
 public:
  explicit RecordingSharding(std::vector<std::string>* log) : log_(log) {}
  void HoldForSchedule() override { log_->push_back("hold"); }
  void ReleaseFromSchedule() override { log_->push_back("release"); }
  void UnshardForSchedule() override { log_->push_back("unshard"); }
  void ReshardForSchedule() override { log_->push_back("reshard"); }
  void ReduceGradForSchedule() override { log_->push_back("reduce_grad"); }

 private:
  std::vector<std::string>* log_;
};

// Sharding states attached to the stage modules after the pipeline was built (torchtitan's order) are driven by
// the program: held for each Step or Eval and released after it unless it only accumulated, gathered and resharded
// once per Step or Eval, reduced once per finalizing Step; a state
// below another in the stage's tree is left to it; callbacks of the caller's own, or drive_stage_sharding = false,
// replace all of this.
TEST(PipelineStageShardingTest, TheExecutorDrivesTheTopmostShardingStateOfEachStage) {
  std::mutex mu;
  std::map<int, std::vector<std::string>> top_logs, nested_logs, wired_logs;
  std::map<int, std::string> programs;
  comm::RunRanks(2, [&](comm::ProcessGroupPtr pg) {
    std::vector<std::string> top, nested, wired;
    RankPipeline pp = PipelineGPT(Config(), kSeed, pg, {.kind = ScheduleKind::k1F1B, .num_microbatches = 2});
    nn::Module& stage = *pp.modules.at(0);
    stage.SetComposableState("recording", std::make_unique<RecordingSharding>(&top));
    nn::Module* child = stage.NamedModules().at(1).second;
    child->SetComposableState("recording", std::make_unique<RecordingSharding>(&nested));
    auto [idx, tgt] = Batch(0);
    pp.executor->Step(idx, tgt);
    pp.executor->Eval(idx, tgt);
    pp.executor->set_finalize_gradients(false);
    pp.executor->Step(idx, tgt);
    // The same stage under an executor given callbacks: only they run.
    auto record = [&wired](const char* what) { return [&wired, what](int) { wired.push_back(what); }; };
    PipelineExecutor own({pp.stages.at(0).get()}, pp.lowered.at(pg->rank()), 2,
                         {.unshard = record("unshard"), .reshard = record("reshard"), .reduce_grad = record("reduce")});
    top.push_back("--");
    own.Step(idx, tgt);
    // ... and under one told to leave the stages' sharding alone (the Python face's), nothing runs.
    PipelineExecutor passive({pp.stages.at(0).get()}, pp.lowered.at(pg->rank()), 2, {.drive_stage_sharding = false});
    passive.Step(idx, tgt);
    passive.Eval(idx, tgt);
    std::lock_guard<std::mutex> lock(mu);
    top_logs[pg->rank()] = top;
    nested_logs[pg->rank()] = nested;
    wired_logs[pg->rank()] = wired;
    programs[pg->rank()] = ToString(pp.executor->program());
  });
  for (int rank : {0, 1}) {
    SCOPED_TRACE(rank);
    // Step: held, gathered, reduced, freed, released; Eval: no reduction; Step with finalize off: kept held.
    EXPECT_EQ(top_logs[rank], (std::vector<std::string>{"hold", "unshard", "reduce_grad", "reshard", "release",
                                                        "hold", "unshard", "reshard", "release",
                                                        "hold", "unshard", "reshard", "--"}));
    EXPECT_TRUE(nested_logs[rank].empty());
    // PipelineGPT lowered without FSDP actions: the caller's callbacks see only the REDUCE_GRAD it has.
    EXPECT_EQ(wired_logs[rank], (std::vector<std::string>{"reduce"}));
  }
  EXPECT_EQ(programs[0], "0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1,0REDUCE_GRAD,0RESHARD");
  EXPECT_EQ(programs[1], "1RECV_F0,1UNSHARD,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1,1REDUCE_GRAD,1RESHARD");
}

// The first step of an uneven split (8 rows in 3 microbatches: 3, 3, 2) with no batch on a middle rank:
// it assumes microbatch 0's 3 rows for all three, and the receive of the 2-row microbatch fails as a p2p
// mismatch naming both sides, on the middle rank and its sender, instead of training on wrong rows.
TEST(PipelineMiddleRanksTest, UnevenFirstStepWithoutTheBatchIsAP2PMismatch) {
  std::mutex mu;
  std::string middle_error;
  try {
    comm::RunRanks(4, [&](comm::ProcessGroupPtr pg) {
      RankPipeline pp = PipelineGPT(Config(), kSeed, pg, {.kind = ScheduleKind::kGPipe, .num_microbatches = 3});
      auto [idx, tgt] = Batch(0);
      if (pg->rank() != 1) {
        pp.executor->Step(idx, tgt);
        return;
      }
      try {
        pp.executor->Step(Tensor(), Tensor());
      } catch (const Error& e) {
        std::lock_guard<std::mutex> lock(mu);
        middle_error = e.what();
        throw;  // aborts the world: the other ranks fail at once
      }
    });
    ADD_FAILURE() << "the step succeeded";
  } catch (const Error&) {
  }
  EXPECT_NE(middle_error.find("p2p mismatch"), std::string::npos) << middle_error;
  EXPECT_NE(middle_error.find("pipeline rank 1, action"), std::string::npos) << middle_error;
  EXPECT_NE(middle_error.find("this rank got no batch at its first step"), std::string::npos) << middle_error;
  EXPECT_NE(middle_error.find("needs step(x) or step(target=...) with the batch on every rank"), std::string::npos)
      << middle_error;
}

std::vector<Row> Rows() {
  std::vector<Row> rows;
  for (int p : {2, 4}) {
    const int m = 2 * p;
    rows.push_back({"GPipe", ScheduleKind::kGPipe, p, m, 0});
    rows.push_back({"1F1B", ScheduleKind::k1F1B, p, m, 0});
    rows.push_back({"Interleaved1F1B", ScheduleKind::kInterleaved1F1B, p, m, 2});
    rows.push_back({"LoopedBFS", ScheduleKind::kLoopedBFS, p, m, 2});
    rows.push_back({"ZBH1", ScheduleKind::kInterleavedZeroBubble, p, m, 1});
    rows.push_back({"InterleavedZeroBubble", ScheduleKind::kInterleavedZeroBubble, p, m, 2});
    rows.push_back({"ZBVZeroBubble", ScheduleKind::kZBVZeroBubble, p, m, 2});
    rows.push_back({"DualPipeV", ScheduleKind::kDualPipeV, p, m, 2});
  }
  return rows;
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineScheduleTest, ::testing::ValuesIn(Rows()),
                         [](const ::testing::TestParamInfo<Row>& info) {
                           return std::string(info.param.name) + "On" + std::to_string(info.param.num_ranks) +
                                  "Ranks";
                         });

}  // namespace
}  // namespace tessel::pipelining
