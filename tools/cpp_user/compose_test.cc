// tools/cpp_user/compose_test.cc — what a C++ user outside tessel writes, built against //:tessel alone: their own
// model (pre-LN residual MLP blocks whose widths divide by no mesh size) on a 2 x 2 mesh of rank threads, (1) under
// Megatron tensor parallelism with sequence parallelism on "tp", then fully_shard over "dp" (blocks, then the root);
// (2) split into two pipeline stages (PipelineModel, 1F1B, 2 microbatches) on "pp", each stage under fully_shard
// over "dp", and into four interleaved stages with one gathered at a time, two stages under Replicate, and blocks
// under fully_shard below a replicated stage: the executor gathers each group once per step and reduces it once
// (comm tracer). Losses and every full parameter
// after three SGD-with-momentum steps equal one-rank training on the global batch (to 1e-5 relative: only the
// order of float32 sums differs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "comm/backends/threads.h"
#include "comm/tracer.h"
#include "core/autograd/engine.h"
#include "core/nn/layers.h"
#include "core/nn/module.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"
#include "core/optim/optimizer.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"
#include "dtensor/device_mesh.h"
#include "dtensor/dtensor.h"
#include "fsdp/fully_shard.h"
#include "fsdp/replicate.h"
#include "fsdp/state.h"
#include "pipelining/pipeline_gpt.h"
#include "tools/cpp_user/user_model.h"
#include "tp/parallelize_module.h"

namespace {

using namespace tessel;
using namespace tessel_user;

constexpr int64_t kBatch = 8;
constexpr int kLayers = 3, kSteps = 3;


class Net : public nn::Module {
 public:
  explicit Net(Generator& gen) : nn::Module("Net") {
    auto list = std::make_shared<nn::ModuleList>();
    for (int i = 0; i < kLayers; ++i) list->Append(std::make_shared<Block>(gen));
    layers_ = RegisterModule("layers", list);
    RegisterModule("norm", std::make_shared<nn::LayerNorm>(kC));
    RegisterModule("head", std::make_shared<nn::Linear>(kC, kOut, true, gen, 0.2));
  }
  // A pipeline stage (PipelineModuleSplit) keeps only its own children: run those there are.
  TensorList Forward(const TensorList& in) override {
    Tensor x = in.at(0);
    if (HasChild("layers")) {
      for (auto& [name, block] : Submodule("layers")->NamedChildren()) x = (*block)(x);
    }
    if (HasChild("norm")) x = (*Submodule("norm"))(x);
    if (HasChild("head")) x = (*Submodule("head"))(x);
    return {x};
  }
  nn::ModuleList* layers_;
};

std::pair<Tensor, Tensor> Batch(int step) {  // [B, T, C] inputs, [B, T, O] targets
  Generator g(1000 + step);
  Tensor x = Randn(std::vector<int64_t>{kBatch, kSeq, kC}, g);
  return {x, Randn(std::vector<int64_t>{kBatch, kSeq, kOut}, g)};
}

struct Trained {
  std::vector<double> losses;
  std::map<std::string, std::vector<double>> params;  // full values
  std::map<std::string, std::vector<double>> initial;
};

std::unique_ptr<optim::Optimizer> Sgd(const nn::StateDict& params) {
  return std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
}

Trained OneRank() {
  Generator gen(5);
  Net net(gen);
  auto opt = Sgd(net.NamedParameters());
  Trained r;
  r.initial = FullParams(net);
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = Batch(s);
    Tensor loss = Mse(net(x), y);
    Backward(loss);
    opt->Step();
    opt->ZeroGrad();
    r.losses.push_back(loss.item<double>());
  }
  r.params = FullParams(net);
  return r;
}

Trained TpSpFsdp() {
  using dtensor::Replicate;
  using dtensor::Shard;
  const tp::ParallelizePlan plan = {
      {"layers.*.ln", tp::SequenceParallel{}},
      {"layers.*.up", tp::ColwiseParallel{.input_layouts = Shard{1}}},
      {"layers.*.down", tp::RowwiseParallel{.output_layouts = Shard{1}}},
      {"norm", tp::SequenceParallel{}},
      {"head", tp::PrepareModuleInput{.input_layouts = {Shard{1}}, .desired_input_layouts = {Replicate{}},
                                      .use_local_output = true}}};
  Trained rank0;
  std::mutex mu;
  comm::RunRanks(4, [&](comm::ProcessGroupPtr world) {
    dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2, 2}, {"dp", "tp"});
    Generator gen(5);
    Net net(gen);
    tp::ParallelizeModule(net, mesh["tp"], plan);
    for (size_t i = 0; i < net.layers_->size(); ++i) fsdp::FullyShard(*net.layers_->at(i), mesh["dp"]);
    fsdp::FullyShard(net, mesh["dp"]);
    auto opt = Sgd(net.NamedParameters());
    const int64_t dp = mesh.local_rank("dp"), tp = mesh.local_rank("tp");
    Trained mine;
    for (int s = 0; s < kSteps; ++s) {
      auto [x, y] = Batch(s);
      // this dp rank's rows; sequence parallel: this tp rank's half of the sequence going in
      x = Contiguous(Narrow(Narrow(x, 0, dp * kBatch / 2, kBatch / 2), 1, tp * kSeq / 2, kSeq / 2));
      y = Contiguous(Narrow(y, 0, dp * kBatch / 2, kBatch / 2));
      Tensor loss = Mse(net(x), y);
      Backward(loss);
      opt->Step();
      opt->ZeroGrad();
      Tensor global = Full(std::vector<int64_t>{1}, loss.item<double>(), DType::kFloat64);
      world->AllReduce(global, comm::ReduceOp::kAvg)->Wait();  // the mean over the dp ranks' halves
      mine.losses.push_back(global.item<double>());
    }
    mine.params = FullParams(net);
    if (world->rank() == 0) {
      std::lock_guard<std::mutex> lock(mu);
      rank0 = std::move(mine);
    }
  });
  return rank0;
}

// What one rank saw of a pipelined run: per step, its all-gathers and reduce-scatters over "dp" (all-reduces under
// Replicate); the program its executor ran; whether every fully_shard group of its stages was resharded when each
// step returned.
struct RankView {
  std::vector<std::pair<int, int>> gathers_and_reductions;
  std::vector<int> all_reduces;
  int eval_all_gathers = 0;  // of an Eval after the steps
  std::string program;
  bool always_resharded = true;
  bool settings_restored = true;  // every group's sync and reshard settings after the steps as before them
};

struct PipelineRun {
  Trained trained;
  std::map<int, RankView> ranks;  // by world rank (pp-major: ranks 0, 1 hold pipeline rank 0)
};

enum class DataParallel { kFullyShard, kReplicate, kShardedBlocksReplicatedRest };

// Each stage module's blocks, then the stage module itself, under fully_shard over "dp" after PipelineModel built
// the executor (torchtitan's order), or each stage module under Replicate, or the blocks under fully_shard and the
// stage module (where it has parameters of its own) under Replicate: nothing else wires the schedule to them.
PipelineRun PipelineDataParallel(pipelining::ScheduleKind kind, const pipelining::ModuleNamesPerStage& stages,
                                 int max_active_stages = 3, DataParallel dp_kind = DataParallel::kFullyShard) {
  PipelineRun out;
  std::mutex mu;
  comm::RunRanks(4, [&](comm::ProcessGroupPtr world) {
    dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2, 2}, {"pp", "dp"});
    pipelining::RankPipeline pp = pipelining::PipelineModel(
        [] {
          Generator gen(5);
          return std::make_unique<Net>(gen);
        },
        stages, mesh.axis_group("pp"),
        {.kind = kind, .num_microbatches = 2, .lower = {.max_active_stages = max_active_stages}}, Mse);
    std::vector<fsdp::FSDPModule> groups;
    for (auto& stage : pp.modules) {
      if (dp_kind == DataParallel::kReplicate) {
        fsdp::Replicate(*stage, mesh["dp"]);
        continue;
      }
      if (stage->HasChild("layers")) {
        for (auto& [name, block] : stage->Submodule("layers")->NamedChildren()) {
          groups.push_back(fsdp::FullyShard(*block, mesh["dp"]));
        }
      }
      if (dp_kind == DataParallel::kFullyShard) {
        groups.push_back(fsdp::FullyShard(*stage, mesh["dp"]));
      } else if (stage->HasChild("head")) {
        fsdp::Replicate(*stage, mesh["dp"]);  // norm and head; the blocks stay fully_shard's
      }
    }
    auto settings = [&groups] {
      std::vector<std::tuple<bool, bool, bool>> out;
      for (const fsdp::FSDPModule& g : groups) {
        if (const fsdp::ParamGroup* p = g.state().group()) {
          out.emplace_back(p->requires_gradient_sync, p->reshard_after_backward, p->reshard_after_forward);
        }
      }
      return out;
    };
    const auto before = settings();
    auto opt = Sgd(pp.NamedParameters());
    const int64_t dp = mesh.local_rank("dp");
    Trained mine;
    RankView view;
    for (int s = 0; s < kSteps; ++s) {
      auto [x, y] = Batch(s);
      comm::CommTracer tracer;
      pipelining::StepStats st = pp.executor->Step(Contiguous(Narrow(x, 0, dp * kBatch / 2, kBatch / 2)),
                                                   Contiguous(Narrow(y, 0, dp * kBatch / 2, kBatch / 2)));
      view.gathers_and_reductions.emplace_back(tracer.Count(comm::CollectiveKind::kAllGather, "dp"),
                                               tracer.Count(comm::CollectiveKind::kReduceScatter, "dp"));
      view.all_reduces.push_back(tracer.Count(comm::CollectiveKind::kAllReduce, "dp"));
      for (const fsdp::FSDPModule& g : groups) view.always_resharded = view.always_resharded && !g.is_unsharded();
      opt->Step();
      opt->ZeroGrad();
      Tensor global = Full(std::vector<int64_t>{1}, st.loss.value_or(0.0), DType::kFloat64);
      world->AllReduce(global, comm::ReduceOp::kSum)->Wait();  // the last stage's two dp ranks hold the losses
      mine.losses.push_back(global.item<double>() / 2);
    }
    {
      auto [x, y] = Batch(0);
      comm::CommTracer tracer;
      pp.executor->Eval(Contiguous(Narrow(x, 0, dp * kBatch / 2, kBatch / 2)),
                        Contiguous(Narrow(y, 0, dp * kBatch / 2, kBatch / 2)));
      view.eval_all_gathers = tracer.Count(comm::CollectiveKind::kAllGather, "dp");
    }
    view.program = pipelining::ToString(pp.executor->program());
    view.settings_restored = settings() == before;
    std::map<std::string, std::vector<double>> params;
    for (auto& stage : pp.modules) params.merge(FullParams(*stage));
    std::lock_guard<std::mutex> lock(mu);
    out.trained.params.merge(params);  // each stage's parameters from its ranks (equal across dp)
    if (world->rank() == 0) out.trained.losses = mine.losses;
    out.ranks[world->rank()] = std::move(view);
  });
  return out;
}

void ExpectEqualTraining(const Trained& got, const Trained& want) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i) EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5 * want.losses[i]);
  ASSERT_EQ(got.params.size(), want.params.size());
  for (const auto& [fqn, w] : want.params) {
    SCOPED_TRACE(fqn);
    ASSERT_EQ(got.params.count(fqn), 1u);
    const std::vector<double>& g = got.params.at(fqn);
    ASSERT_EQ(g.size(), w.size());
    double scale = 0, err = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      scale = std::max(scale, std::abs(w[i]));
      err = std::max(err, std::abs(g[i] - w[i]));
    }
    EXPECT_LE(err, 1e-5 * scale);
  }
}

TEST(CppUser, TensorParallelSequenceParallelAndFullyShardOnATwoByTwoMeshEqualOneRank) {
  const Trained want = OneRank();
  ExpectEqualTraining(TpSpFsdp(), want);
  const std::vector<double>& before = want.initial.at("layers.0.up.weight");
  const std::vector<double>& after = want.params.at("layers.0.up.weight");
  double moved = 0;
  for (size_t i = 0; i < after.size(); ++i) moved = std::max(moved, std::abs(after[i] - before[i]));
  EXPECT_GT(moved, 1e-3);  // the steps changed the weights being compared
}

// 1F1B over two stages: each fully_shard group (stage 0: layers.0, layers.1 and a root without parameters; stage 1:
// layers.2 and the root's norm and head) is all-gathered once per step and reduce-scattered once per step, not once
// per microbatch's forward and backward (fully_shard per microbatch, as before the executor drove it: 9 all-gathers
// per step on stage 0's ranks, 6 on stage 1's, 4 reduce-scatters on each).
TEST(CppUser, TwoPipelineStagesEachFullyShardedEqualOneRankGatheringOncePerStep) {
  const PipelineRun run = PipelineDataParallel(pipelining::ScheduleKind::k1F1B, {{"layers.0", "layers.1"},
                                                                                {"layers.2", "norm", "head"}});
  ExpectEqualTraining(run.trained, OneRank());
  ASSERT_EQ(run.ranks.size(), 4u);
  for (const auto& [rank, view] : run.ranks) {
    SCOPED_TRACE(rank);
    EXPECT_EQ(view.gathers_and_reductions, (std::vector<std::pair<int, int>>(kSteps, {2, 2})));
    EXPECT_TRUE(view.always_resharded);
    EXPECT_TRUE(view.settings_restored);  // the stages train on their own again after the pipeline's steps
  }
  EXPECT_EQ(run.ranks.at(0).program,
            "0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1,0REDUCE_GRAD,0RESHARD");
  EXPECT_EQ(run.ranks.at(2).program,
            "1RECV_F0,1UNSHARD,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1,1REDUCE_GRAD,1RESHARD");
}

// Interleaved 1F1B, four stages on two pipeline ranks, at most one stage gathered at a time: each switch between a
// rank's two stages reshards one and gathers the other, outside the runs of sends and receives.
TEST(CppUser, InterleavedStagesUnderFullyShardWithAWindowOfOneEqualOneRank) {
  const PipelineRun run = PipelineDataParallel(pipelining::ScheduleKind::kInterleaved1F1B,
                                               {{"layers.0"}, {"layers.1"}, {"layers.2"}, {"norm", "head"}},
                                               /*max_active_stages=*/1);
  ExpectEqualTraining(run.trained, OneRank());
  ASSERT_EQ(run.ranks.size(), 4u);
  // Rank 0 computes 0F0 0F1 2F0 2F1 2B0 2B1 0B0 0B1: stage 0 (layers.0) is gathered twice, stage 2 (layers.2) once;
  // rank 2 computes stage 1 (layers.1) twice around stage 3 (norm, head) once. One reduce-scatter per group. Eval
  // computes 0F0 0F1 2F0 2F1: each stage gathered once (the full program's windows would gather stage 0 a second
  // time, for backwards Eval does not run).
  for (const auto& [rank, view] : run.ranks) {
    SCOPED_TRACE(rank);
    EXPECT_EQ(view.gathers_and_reductions, (std::vector<std::pair<int, int>>(kSteps, {3, 2})));
    EXPECT_EQ(view.eval_all_gathers, 2);
    EXPECT_TRUE(view.always_resharded);
  }
  EXPECT_EQ(run.ranks.at(0).program,
            "0UNSHARD,0F0,0SEND_F0,2RECV_F0,0F1,0SEND_F1,2RECV_F1,0RESHARD,2UNSHARD,2F0,2SEND_F0,2F1,2SEND_F1,2RECV_B0,"
            "2B0,2SEND_B0,2RECV_B1,2B1,2SEND_B1,2REDUCE_GRAD,0RECV_B0,2RESHARD,0UNSHARD,0B0,0RECV_B1,0B1,0REDUCE_GRAD,"
            "0RESHARD");
}

// Two 1F1B stages each under Replicate (DDP): the gradients accumulate over the microbatches and each stage's one
// bucket is all-reduced once per step (Replicate on its own all-reduced it after each microbatch's backward: 2).
TEST(CppUser, TwoPipelineStagesEachReplicatedEqualOneRankReducingOncePerStep) {
  const PipelineRun run = PipelineDataParallel(pipelining::ScheduleKind::k1F1B,
                                               {{"layers.0", "layers.1"}, {"layers.2", "norm", "head"}},
                                               /*max_active_stages=*/3, DataParallel::kReplicate);
  ExpectEqualTraining(run.trained, OneRank());
  ASSERT_EQ(run.ranks.size(), 4u);
  for (const auto& [rank, view] : run.ranks) {
    SCOPED_TRACE(rank);
    EXPECT_EQ(view.all_reduces, std::vector<int>(kSteps, 1));
    EXPECT_EQ(view.gathers_and_reductions, (std::vector<std::pair<int, int>>(kSteps, {0, 0})));
  }
}

// The blocks under fully_shard and the rest of stage 1 (norm, head) under Replicate, as torch's replicate over
// fully_shard'ed submodules: the executor drives the blocks below the Replicate too, so each block group is gathered
// and reduce-scattered once per step (the Replicate alone driven: layers.2 gathered and reduce-scattered per
// microbatch, 2 and 2 per step) and stage 1's bucket all-reduced once.
TEST(CppUser, ShardedBlocksUnderAReplicatedStageAreDrivenBelowTheReplicate) {
  const PipelineRun run = PipelineDataParallel(pipelining::ScheduleKind::k1F1B,
                                               {{"layers.0", "layers.1"}, {"layers.2", "norm", "head"}},
                                               /*max_active_stages=*/3, DataParallel::kShardedBlocksReplicatedRest);
  ExpectEqualTraining(run.trained, OneRank());
  ASSERT_EQ(run.ranks.size(), 4u);
  for (const auto& [rank, view] : run.ranks) {
    SCOPED_TRACE(rank);
    const bool last = rank >= 2;
    EXPECT_EQ(view.gathers_and_reductions, (std::vector<std::pair<int, int>>(kSteps, last ? std::pair{1, 1}
                                                                                         : std::pair{2, 2})));
    EXPECT_EQ(view.all_reduces, std::vector<int>(kSteps, last ? 1 : 0));
    EXPECT_TRUE(view.always_resharded);
    EXPECT_TRUE(view.settings_restored);
  }
}

}  // namespace
