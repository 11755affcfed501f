// tests/fsdp_fully_shard_test.cc — FullyShard mechanics on the threads backend: sharded layout, exact
// collective counts forward and backward (FSDP and HSDP), prefetch order, Unshard/Reshard, gradient
// placement and values, gradient accumulation, the divide factor, mixed precision dtypes and clipping.
#include <gtest/gtest.h>

#include <set>

#include "comm/tracer.h"
#include "core/base/testing/expect_error.h"
#include "core/optim/optimizer.h"
#include "dtensor/layout.h"
#include "fsdp/clip_grad_norm.h"
#include "fsdp/state.h"
#include "tests/fsdp_testing.h"

namespace tessel::fsdp::testing {
namespace {

using comm::CollectiveKind;

// Three blocks: PyTorch's documented prefetch example uses layers.0 .. layers.2.
nn::GPTConfig ThreeBlocks() {
  nn::GPTConfig cfg = TinyGpt();
  cfg.n_layers = 3;
  return cfg;
}

void RunMesh(int world_size, std::vector<int64_t> shape, std::vector<std::string> names,
             const std::function<void(comm::ProcessGroupPtr, const dtensor::DeviceMesh&)>& fn) {
  comm::RunRanks(world_size, [&](comm::ProcessGroupPtr world) {
    dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, shape, names);
    fn(world, mesh);
  }, FastRanks());
}

Tensor LocalLoss(nn::GPT& gpt, const nn::GPTConfig& cfg, int step, int64_t rank, int64_t world) {
  auto [idx, tgt] = GlobalBatch(cfg, step, 12);
  return gpt.Loss(RowsFor(idx, rank, world), RowsFor(tgt, rank, world));
}

// Reference gradients of one-rank training after `micro_steps` backward passes (accumulated), on the
// whole global batch or on rank `rank` of `world`'s rows of it.
std::map<std::string, std::vector<double>> ReferenceGrads(const nn::GPTConfig& cfg, int micro_steps, int64_t rank = 0,
                                                          int64_t world = 1) {
  Generator gen(7);
  nn::GPT gpt(cfg, gen);
  for (int s = 0; s < micro_steps; ++s) {
    auto [idx, tgt] = GlobalBatch(cfg, s, 12);
    Backward(gpt.Loss(RowsFor(idx, rank, world), RowsFor(tgt, rank, world)));
  }
  std::map<std::string, std::vector<double>> out;
  for (auto& [fqn, p] : gpt.NamedParameters()) out[fqn] = p.grad().ToDoubleVector();
  return out;
}

// Every sharded .grad is a DTensor with its parameter's placements and the reference's values.
void ExpectShardedGradsEqual(nn::GPT& gpt, const std::map<std::string, std::vector<double>>& want, double rtol) {
  for (auto& [fqn, p] : gpt.NamedParameters()) {
    SCOPED_TRACE(fqn);
    ASSERT_TRUE(p.is_distributed());
    const Tensor g = p.grad();
    ASSERT_TRUE(g.defined() && g.is_distributed());
    EXPECT_EQ(dtensor::DTensor(g).placements(), dtensor::DTensor(p).placements());
    EXPECT_LE(RelErr(FullValues(g), want.at(fqn)), rtol);
  }
}

TEST(FullyShardTest, ParametersBecomeShardZeroDTensorsWithOriginalGlobalShapes) {
  Generator gen(7);
  nn::GPT ref(TinyGpt(), gen);
  RunMesh(4, {4}, {"dp"}, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator g(7);
    nn::GPT gpt(TinyGpt(), g);
    WrapGpt(gpt, mesh);
    for (auto& [fqn, p] : gpt.NamedParameters()) {
      SCOPED_TRACE(fqn);
      ASSERT_TRUE(p.is_distributed());
      dtensor::DTensor d(p);
      EXPECT_EQ(dtensor::PlacementsToString(d.placements()), "[S(0)]");
      EXPECT_TRUE(p.requires_grad() && p.is_leaf());
      Tensor full;
      for (auto& [rfqn, rp] : ref.NamedParameters()) {
        if (rfqn == fqn) full = rp;
      }
      EXPECT_EQ(p.sizes(), full.sizes());
      // torch.chunk rows: vocab 37 -> 10, 10, 10, 7; wpe 3 -> 1, 1, 1, 0.
      const dtensor::ChunkPiece piece = dtensor::ChunkPieceOf(full.size(0), 4, world->rank());
      EXPECT_EQ(d.local_shape()[0], piece.size);
      const std::vector<double> all = full.ToDoubleVector();
      const int64_t row = full.numel() / full.size(0);
      const std::vector<double> want_local(all.begin() + piece.offset * row,
                                           all.begin() + (piece.offset + piece.size) * row);
      EXPECT_EQ(d.ToLocal().ToDoubleVector(), want_local);
    }
  });
}

struct CountCase {
  std::string name;
  std::optional<bool> block_reshard;  // unset: default
  std::optional<bool> root_reshard;
  int backward_all_gathers;
};

class CollectiveCountTest : public ::testing::TestWithParam<CountCase> {};

TEST_P(CollectiveCountTest, ForwardAndBackwardIssueTheDocumentedCounts) {
  const CountCase c = GetParam();
  const nn::GPTConfig cfg = ThreeBlocks();  // N = 3
  RunMesh(2, {2}, {"dp"}, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(cfg, gen);
    FullyShardOptions block, root;
    block.reshard_after_forward = c.block_reshard;
    root.reshard_after_forward = c.root_reshard;
    WrapGpt(gpt, mesh, block, root);
    for (int step = 0; step < 2; ++step) {  // the second step starts from resharded parameters
      SCOPED_TRACE(step);
      comm::CommTracer fwd;
      Tensor loss = LocalLoss(gpt, cfg, step, world->rank(), 2);
      EXPECT_EQ(fwd.Count(CollectiveKind::kAllGather, "dp"), 4) << fwd.Summary();
      EXPECT_EQ(fwd.Total(), 4) << fwd.Summary();
      comm::CommTracer bwd;
      Backward(loss);
      EXPECT_EQ(bwd.Count(CollectiveKind::kReduceScatter, "dp"), 4) << bwd.Summary();
      EXPECT_EQ(bwd.Count(CollectiveKind::kAllGather, "dp"), c.backward_all_gathers) << bwd.Summary();
      EXPECT_EQ(bwd.Total(), 4 + c.backward_all_gathers) << bwd.Summary();
      gpt.ZeroGrad();
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Options, CollectiveCountTest,
    ::testing::Values(CountCase{"DefaultRootKeepsItsParameters", std::nullopt, std::nullopt, 3},
                      CountCase{"RootReshardsToo", std::nullopt, true, 4},
                      CountCase{"NothingReshardsAfterForward", false, false, 0}),
    [](const ::testing::TestParamInfo<CountCase>& info) { return info.param.name; });

nn::Module* Child(nn::Module& m, const std::string& name) {
  for (auto& [n, c] : m.NamedChildren()) {
    if (n == name) return c;
  }
  ADD_FAILURE() << "no child " << name;
  return nullptr;
}

TEST(FullyShardTest, AListOfModulesIsOneGroupWithOneAllGatherAndOneReduceScatter) {
  // torchtitan's grouping: fully_shard([norm, output]). ln_f and lm_head become one group beside the two
  // blocks and the root (wte, wpe): 4 groups, so 4 all-gathers forward and 4 reduce-scatters; in backward
  // the list's group, resharded after forward, is gathered again with the blocks (3).
  const auto want = ReferenceGrads(TinyGpt(), 2);
  RunMesh(2, {2}, {"dp"}, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(TinyGpt(), gen);
    for (size_t i = 0; i < gpt.layers().size(); ++i) FullyShard(*gpt.layers().at(i), mesh);
    nn::Module *ln_f = Child(gpt, "ln_f"), *lm_head = Child(gpt, "lm_head");
    const FSDPModule head = FullyShard({ln_f, lm_head}, mesh);
    FullyShard(gpt, mesh);
    ASSERT_TRUE(AsFSDPModule(*lm_head).has_value());
    EXPECT_EQ(&AsFSDPModule(*lm_head)->state(), &head.state());  // one state, reached from either module
    EXPECT_EQ(head.state().group()->params().size(), ln_f->NamedParameters().size() + lm_head->NamedParameters().size());
    for (int step = 0; step < 2; ++step) {
      SCOPED_TRACE(step);
      comm::CommTracer fwd;
      Tensor loss = LocalLoss(gpt, TinyGpt(), step, world->rank(), 2);
      EXPECT_EQ(fwd.Count(CollectiveKind::kAllGather, "dp"), 4) << fwd.Summary();
      EXPECT_FALSE(head.is_unsharded());  // resharded once both modules finished
      comm::CommTracer bwd;
      Backward(loss);
      EXPECT_EQ(bwd.Count(CollectiveKind::kReduceScatter, "dp"), 4) << bwd.Summary();
      EXPECT_EQ(bwd.Count(CollectiveKind::kAllGather, "dp"), 3) << bwd.Summary();
    }
    ExpectShardedGradsEqual(gpt, want, 1e-5);  // two steps accumulated, as the reference
    // The parameters' names in messages are their paths from the root.
    EXPECT_EQ(head.state().group()->fqn(), "ln_f, lm_head");
    EXPECT_EQ(head.state().group()->params().back()->fqn(), "lm_head.weight");
  });
}

TEST(FullyShardTest, AListMustHoldDistinctUnnestedModulesAndRunUnderARoot) {
  RunMesh(2, {2}, {"dp"}, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(TinyGpt(), gen);
    nn::Module* block = gpt.layers().at(0);
    nn::Module *ln_f = Child(gpt, "ln_f"), *lm_head = Child(gpt, "lm_head");
    tessel::testing::ExpectErrorContains([&] { FullyShard({ln_f, ln_f}, mesh); }, ErrorCode::kInvalidArgument,
                                 "is listed twice");
    nn::Module* inner = block->NamedChildren().at(0).second;
    tessel::testing::ExpectErrorContains([&] { FullyShard({block, inner}, mesh); }, ErrorCode::kInvalidArgument,
                                 {"inside module 0", "list modules that do not contain each other"});
    tessel::testing::ExpectErrorContains([&] { FullyShard(std::vector<nn::Module*>{}, mesh); }, ErrorCode::kInvalidArgument,
                                 "an empty list");
    FullyShard({ln_f, lm_head}, mesh);
    tessel::testing::ExpectErrorContains([&] { FullyShard(*lm_head, mesh); }, ErrorCode::kInvalidArgument,
                                 "already wrapped by fully_shard");
    // No root above the list: its forward is the first FSDP forward.
    tessel::testing::ExpectErrorContains([&] { LocalLoss(gpt, TinyGpt(), 0, world->rank(), 2); },
                                 ErrorCode::kFailedPrecondition, "ran forward before any root");
  });
}

TEST(FullyShardTest, OneAllGatherMovesTheGroupsPaddedShards) {
  const nn::GPTConfig cfg = TinyGpt();
  RunMesh(4, {4}, {"dp"}, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(cfg, gen);
    FSDPModule root = WrapGpt(gpt, mesh);
    comm::CommTracer t;
    root.Unshard();
    ASSERT_EQ(t.Count(CollectiveKind::kAllGather), 1);
    // Root group: wte [37, 16], wpe [3, 16], ln_f weight/bias [16], lm_head [37, 16]; ceil(n / 4) rows each.
    const int64_t padded = (10 + 1 + 10) * 16 + 4 + 4;
    EXPECT_EQ(t.records()[0].bytes, padded * 4);
    EXPECT_TRUE(root.is_unsharded());
    for (auto& [fqn, p] : gpt.NamedParameters()) {
      EXPECT_EQ(p.is_distributed(), fqn.rfind("layers.", 0) == 0) << fqn;
    }
    Generator g2(7);
    nn::GPT ref(cfg, g2);
    EXPECT_EQ(gpt.Submodule("wte")->Param("weight").ToDoubleVector(), ref.Submodule("wte")->Param("weight").ToDoubleVector());
    root.Reshard();
    EXPECT_FALSE(root.is_unsharded());
    EXPECT_TRUE(gpt.Submodule("wte")->Param("weight").is_distributed());
    root.Unshard(/*async_op=*/true);
    root.WaitForUnshard();
    EXPECT_EQ(gpt.Submodule("lm_head")->Param("weight").ToDoubleVector(),
              ref.Submodule("lm_head")->Param("weight").ToDoubleVector());
    EXPECT_EQ(t.Count(CollectiveKind::kAllGather), 2);
  });
}

// PyTorch's ignored_params, passed (as users do) to every call: the two parameters stay plain tensors
// with their initial values, leave the root group's all-gather and each rank's gradient unreduced.
TEST(FullyShardTest, IgnoredParamsStayPlainOutsideTheCollectivesWithLocalGradients) {
  const nn::GPTConfig cfg = TinyGpt();
  const std::set<std::string> ignored_fqns = {"ln_f.weight", "layers.0.ln1.weight"};
  const std::map<std::string, std::vector<double>> global = ReferenceGrads(cfg, 1);
  const std::map<std::string, std::vector<double>> local[2] = {ReferenceGrads(cfg, 1, 0, 2),
                                                               ReferenceGrads(cfg, 1, 1, 2)};
  Generator g2(7);
  nn::GPT init_gpt(cfg, g2);
  const std::map<std::string, std::vector<double>> init = FullParams(init_gpt);
  RunMesh(2, {2}, {"dp"}, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(cfg, gen);
    FullyShardOptions opts;
    for (auto& [fqn, p] : gpt.NamedParameters()) {
      if (ignored_fqns.contains(fqn)) opts.ignored_params.push_back(p);
    }
    ASSERT_EQ(opts.ignored_params.size(), 2u);
    FSDPModule root = WrapGpt(gpt, mesh, opts, opts);
    for (auto& [fqn, p] : gpt.NamedParameters()) {
      SCOPED_TRACE(fqn);
      EXPECT_EQ(p.is_distributed(), !ignored_fqns.contains(fqn));
      if (ignored_fqns.contains(fqn)) {
        EXPECT_TRUE(p.requires_grad() && p.is_leaf());
        EXPECT_EQ(p.ToDoubleVector(), init.at(fqn));
      }
    }
    comm::CommTracer gather;
    root.Unshard();
    ASSERT_EQ(gather.Count(CollectiveKind::kAllGather), 1);
    // Root group without ln_f.weight: wte [37, 16], wpe [3, 16], ln_f.bias [16], lm_head [37, 16]; ceil(n / 2) rows.
    EXPECT_EQ(gather.records()[0].bytes, ((19 + 2 + 19) * 16 + 8) * 4);
    root.Reshard();

    comm::CommTracer t;
    auto [idx, tgt] = GlobalBatch(cfg, 0, 12);
    Backward(gpt.Loss(RowsFor(idx, world->rank(), 2), RowsFor(tgt, world->rank(), 2)));
    EXPECT_EQ(t.Count(CollectiveKind::kReduceScatter), 3) << t.Summary();  // one per group, as without
    EXPECT_EQ(t.Count(CollectiveKind::kAllReduce), 0) << t.Summary();
    for (auto& [fqn, p] : gpt.NamedParameters()) {
      SCOPED_TRACE(fqn);
      const Tensor g = p.grad();
      ASSERT_TRUE(g.defined());
      if (ignored_fqns.contains(fqn)) {
        ASSERT_FALSE(g.is_distributed());
        EXPECT_LE(RelErr(g.ToDoubleVector(), local[world->rank()].at(fqn)), 1e-5);
        EXPECT_GT(RelErr(g.ToDoubleVector(), global.at(fqn)), 1e-3);  // the ranks' rows differ: not the mean
      } else {
        ASSERT_TRUE(g.is_distributed());
        EXPECT_LE(RelErr(FullValues(g), global.at(fqn)), 1e-5);
      }
    }
  });
}

TEST(FullyShardTest, HsdpReduceScattersOnShardAxisThenAllReducesOnReplicateAxis) {
  const nn::GPTConfig cfg = ThreeBlocks();
  RunMesh(4, {2, 2}, {"replicate", "shard"}, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(cfg, gen);
    WrapGpt(gpt, mesh);
    EXPECT_EQ(dtensor::PlacementsToString(dtensor::DTensor(gpt.NamedParameters()[0].second).placements()), "[R, S(0)]");
    comm::CommTracer fwd;
    Tensor loss = LocalLoss(gpt, cfg, 0, world->rank(), 4);
    EXPECT_EQ(fwd.Count(CollectiveKind::kAllGather, "shard"), 4) << fwd.Summary();
    EXPECT_EQ(fwd.Total(), 4) << fwd.Summary();
    comm::CommTracer bwd;
    Backward(loss);
    EXPECT_EQ(bwd.Count(CollectiveKind::kReduceScatter, "shard"), 4) << bwd.Summary();
    EXPECT_EQ(bwd.Count(CollectiveKind::kAllReduce, "replicate"), 4) << bwd.Summary();
    EXPECT_EQ(bwd.Count(CollectiveKind::kAllGather, "shard"), 3) << bwd.Summary();
    EXPECT_EQ(bwd.Total(), 11) << bwd.Summary();
  });
  // Values: averaged over all four ranks' rows.
  const auto want = ReferenceGrads(cfg, 1);
  RunMesh(4, {2, 2}, {"replicate", "shard"}, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(cfg, gen);
    WrapGpt(gpt, mesh);
    Backward(LocalLoss(gpt, cfg, 0, world->rank(), 4));
    ExpectShardedGradsEqual(gpt, want, 1e-5);
  });
}

// torch's replicate_with_fsdp (DDPMeshInfo): replicate_axis without shard_axis keeps whole parameters with
// Replicate placements; nothing is communicated in forward (the all-gather is a local copy) and the backward
// all-reduces each group's gradients once on the replicate axis, to the mean over the ranks.
TEST(FullyShardTest, ReplicateOnlyAllReducesEachGroupOnceOnTheReplicateAxis) {
  const nn::GPTConfig cfg = ThreeBlocks();
  const auto want = ReferenceGrads(cfg, 1);
  const FullyShardOptions replicate{.replicate_axis = "replicate"};
  RunMesh(2, {2}, {"replicate"}, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(cfg, gen);
    WrapGpt(gpt, mesh, replicate, replicate);
    for (auto& [fqn, p] : gpt.NamedParameters()) {
      SCOPED_TRACE(fqn);
      const dtensor::DTensor d(p);
      EXPECT_EQ(dtensor::PlacementsToString(d.placements()), "[R]");
      EXPECT_EQ(d.local_shape(), p.sizes());
    }
    comm::CommTracer fwd;
    Tensor loss = LocalLoss(gpt, cfg, 0, world->rank(), 2);
    EXPECT_EQ(fwd.Total(), 0) << fwd.Summary();
    comm::CommTracer bwd;
    Backward(loss);
    EXPECT_EQ(bwd.Count(CollectiveKind::kAllReduce, "replicate"), 4) << bwd.Summary();
    EXPECT_EQ(bwd.Total(), 4) << bwd.Summary();
    ExpectShardedGradsEqual(gpt, want, 1e-5);
  });
}

// PyTorch's set_requires_all_reduce(False) for HSDP gradient accumulation: the first micro-batch only
// reduce-scatters (no all-reduce, no .grad), the second reduce-scatters, adds the first's reduced shards and
// all-reduces once: .grad is the two micro-batches' summed gradient of one rank on the whole batches.
TEST(FullyShardTest, HsdpWithoutAllReduceSumsReduceScattersUntilTheBackwardThatAllReduces) {
  const nn::GPTConfig cfg = TinyGpt();
  const auto want = ReferenceGrads(cfg, 2);
  RunMesh(4, {2, 2}, {"replicate", "shard"}, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(cfg, gen);
    FSDPModule root = WrapGpt(gpt, mesh);
    root.SetRequiresAllReduce(false);
    comm::CommTracer first;
    Backward(LocalLoss(gpt, cfg, 0, world->rank(), 4));
    EXPECT_EQ(first.Count(CollectiveKind::kReduceScatter, "shard"), 3) << first.Summary();
    EXPECT_EQ(first.Count(CollectiveKind::kAllReduce), 0) << first.Summary();
    for (auto& [fqn, p] : gpt.NamedParameters()) EXPECT_FALSE(p.grad().defined()) << fqn;
    root.SetRequiresAllReduce(true);
    comm::CommTracer second;
    Backward(LocalLoss(gpt, cfg, 1, world->rank(), 4));
    EXPECT_EQ(second.Count(CollectiveKind::kReduceScatter, "shard"), 3) << second.Summary();
    EXPECT_EQ(second.Count(CollectiveKind::kAllReduce, "replicate"), 3) << second.Summary();
    ExpectShardedGradsEqual(gpt, want, 1e-5);
  });
}

// Events of one training step, with "compute layers.i" marking when block i starts computing.
std::vector<std::vector<std::string>> RecordTwoSteps(const std::function<void(nn::GPT&, FSDPModule&)>& setup) {
  const nn::GPTConfig cfg = ThreeBlocks();
  std::vector<std::vector<std::string>> out;
  RunMesh(2, {2}, {"dp"}, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(cfg, gen);
    FSDPModule root = WrapGpt(gpt, mesh);
    if (setup) setup(gpt, root);
    std::vector<std::string> log;
    root.RecordEventsInto(&log);
    for (int i = 0; i < 3; ++i) {
      gpt.layers().at(static_cast<size_t>(i))->Submodule("ln1")->RegisterForwardPreHook(
          [&log, i](nn::Module&, TensorList&) { log.push_back("compute layers." + std::to_string(i)); });
    }
    std::vector<std::vector<std::string>> mine;
    for (int step = 0; step < 2; ++step) {
      Tensor loss = LocalLoss(gpt, cfg, step, world->rank(), 2);
      mine.push_back(log);
      log.clear();
      Backward(loss);
      mine.push_back(log);
      log.clear();
      gpt.ZeroGrad();
    }
    if (world->rank() == 0) out = mine;
  });
  return out;
}

TEST(FullyShardTest, BackwardPrefetchFollowsPyTorchsDocumentedOrder) {
  const auto events = RecordTwoSteps(nullptr);
  const std::vector<std::string> backward = {
      "unshard layers.2", "unshard layers.1", "post_backward layers.2", "reshard layers.2",
      "unshard layers.0", "post_backward layers.1", "reshard layers.1", "post_backward layers.0",
      "reshard layers.0", "post_backward <root>", "reshard <root>"};
  EXPECT_EQ(events.at(1), backward);
  EXPECT_EQ(events.at(3), backward);
}

TEST(FullyShardTest, ForwardPrefetchIssuesTheNextAllGatherBeforeTheCurrentGroupComputes) {
  const auto events = RecordTwoSteps(nullptr);
  // First forward: the order is not known yet, so no prefetch.
  EXPECT_EQ(events.at(0), (std::vector<std::string>{"unshard <root>", "unshard layers.0", "compute layers.0",
                                                    "reshard layers.0", "unshard layers.1", "compute layers.1",
                                                    "reshard layers.1", "unshard layers.2", "compute layers.2",
                                                    "reshard layers.2"}));
  // Later forwards: block i+1's all-gather is in flight while block i computes.
  EXPECT_EQ(events.at(2), (std::vector<std::string>{"unshard <root>", "unshard layers.0", "unshard layers.1",
                                                    "compute layers.0", "reshard layers.0", "unshard layers.2",
                                                    "compute layers.1", "reshard layers.1", "compute layers.2",
                                                    "reshard layers.2"}));
}

TEST(FullyShardTest, ExplicitPrefetchListsReplaceTheImplicitOnes) {
  const auto events = RecordTwoSteps([](nn::GPT& gpt, FSDPModule& root) {
    FSDPModule l0 = *AsFSDPModule(*gpt.layers().at(0));
    FSDPModule l1 = *AsFSDPModule(*gpt.layers().at(1));
    FSDPModule l2 = *AsFSDPModule(*gpt.layers().at(2));
    l0.SetModulesToForwardPrefetch({l1, l2});
    l2.SetModulesToBackwardPrefetch({l1, l0});
    (void)root;
  });
  EXPECT_EQ(events.at(0), (std::vector<std::string>{"unshard <root>", "unshard layers.0", "unshard layers.1",
                                                    "unshard layers.2", "compute layers.0", "reshard layers.0",
                                                    "compute layers.1", "reshard layers.1", "compute layers.2",
                                                    "reshard layers.2"}));
  EXPECT_EQ(events.at(1), (std::vector<std::string>{"unshard layers.2", "unshard layers.1", "unshard layers.0",
                                                    "post_backward layers.2", "reshard layers.2",
                                                    "post_backward layers.1", "reshard layers.1",
                                                    "post_backward layers.0", "reshard layers.0",
                                                    "post_backward <root>", "reshard <root>"}));
}

TEST(FullyShardTest, NoGradForwardGathersEachGroupOnceAndLeavesNoBackwardState) {
  const nn::GPTConfig cfg = ThreeBlocks();
  const auto want = ReferenceGrads(cfg, 1);
  RunMesh(2, {2}, {"dp"}, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(cfg, gen);
    FSDPModule root = WrapGpt(gpt, mesh);
    {
      NoGradGuard no_grad;
      comm::CommTracer t;
      Tensor loss = LocalLoss(gpt, cfg, 0, world->rank(), 2);
      EXPECT_FALSE(loss.requires_grad());
      EXPECT_EQ(t.Count(CollectiveKind::kAllGather), 4) << t.Summary();
      EXPECT_EQ(t.Total(), 4) << t.Summary();
    }
    EXPECT_TRUE(root.is_unsharded());  // the root keeps its parameters after forward, as in training
    for (size_t i = 0; i < 3; ++i) EXPECT_FALSE(AsFSDPModule(*gpt.layers().at(i))->is_unsharded());
    // A training step afterwards is unaffected (the root's group is already unsharded: 3 all-gathers).
    comm::CommTracer t;
    Backward(LocalLoss(gpt, cfg, 0, world->rank(), 2));
    EXPECT_EQ(t.Count(CollectiveKind::kAllGather), 3 + 3) << t.Summary();
    ExpectShardedGradsEqual(gpt, want, 1e-5);
  });
}

class GradientWorldTest : public ::testing::TestWithParam<int> {};

TEST_P(GradientWorldTest, GradientsAreShardedDTensorsEqualToOneRankGradients) {
  const int w = GetParam();
  const auto want = ReferenceGrads(TinyGpt(), 1);
  RunMesh(w, {w}, {"dp"}, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(TinyGpt(), gen);
    WrapGpt(gpt, mesh);
    Backward(LocalLoss(gpt, TinyGpt(), 0, world->rank(), w));
    ExpectShardedGradsEqual(gpt, want, 1e-5);
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GradientWorldTest, ::testing::Values(1, 2, 3, 4));

TEST(FullyShardTest, GradientSyncOffAccumulatesLocallyAndTheNextSyncedStepIsExact) {
  const auto want = ReferenceGrads(TinyGpt(), 3);
  RunMesh(2, {2}, {"dp"}, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(TinyGpt(), gen);
    FSDPModule root = WrapGpt(gpt, mesh);
    root.SetRequiresGradientSync(false);
    for (int s = 0; s < 2; ++s) {
      Tensor loss = LocalLoss(gpt, TinyGpt(), s, world->rank(), 2);
      comm::CommTracer bwd;
      Backward(loss);
      EXPECT_EQ(bwd.Count(CollectiveKind::kReduceScatter), 0) << bwd.Summary();
      for (auto& [fqn, p] : gpt.NamedParameters()) EXPECT_FALSE(p.grad().defined()) << fqn;
    }
    root.SetRequiresGradientSync(true);
    Tensor loss = LocalLoss(gpt, TinyGpt(), 2, world->rank(), 2);
    comm::CommTracer bwd;
    Backward(loss);
    EXPECT_EQ(bwd.Count(CollectiveKind::kReduceScatter), 3) << bwd.Summary();
    ExpectShardedGradsEqual(gpt, want, 1e-5);
  });
}

// FSDPModule::ReduceGrad: pipelining's REDUCE_GRAD (examples/gpt/parallel_gpt.h wires it). HSDP on 2 x 2.
TEST(FullyShardTest, ReduceGradReducesWhatSyncOffAccumulatedWithoutAnotherBackward) {
  const auto want = ReferenceGrads(TinyGpt(), 2);
  RunMesh(4, {2, 2}, {"replicate", "shard"}, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(TinyGpt(), gen);
    FSDPModule root = WrapGpt(gpt, mesh);
    root.SetRequiresGradientSync(false);
    Backward(LocalLoss(gpt, TinyGpt(), 0, world->rank(), 4));
    Backward(LocalLoss(gpt, TinyGpt(), 1, world->rank(), 4));
    comm::CommTracer reduce;
    root.ReduceGrad();
    EXPECT_EQ(reduce.Count(CollectiveKind::kReduceScatter, "shard"), 3) << reduce.Summary();  // one per group
    EXPECT_EQ(reduce.Count(CollectiveKind::kAllReduce, "replicate"), 3) << reduce.Summary();
    EXPECT_EQ(reduce.Total(), 6) << reduce.Summary();
    ExpectShardedGradsEqual(gpt, want, 1e-5);
    comm::CommTracer again;
    // Nothing accumulated since on this rank, but another rank might have: every group joins the same
    // reductions ([Note: FSDP gradient flags]); no flag is set, so the grads stay as they are.
    root.ReduceGrad();
    EXPECT_EQ(again.Total(), 6) << again.Summary();
    ExpectShardedGradsEqual(gpt, want, 1e-5);
  });
}

TEST(FullyShardTest, SyncedMicroStepsAccumulateIntoTheShardedGrad) {
  const auto want = ReferenceGrads(TinyGpt(), 3);
  RunMesh(3, {3}, {"dp"}, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(TinyGpt(), gen);
    WrapGpt(gpt, mesh);
    comm::CommTracer t;
    for (int s = 0; s < 3; ++s) Backward(LocalLoss(gpt, TinyGpt(), s, world->rank(), 3));
    EXPECT_EQ(t.Count(CollectiveKind::kReduceScatter), 9) << t.Summary();
    ExpectShardedGradsEqual(gpt, want, 1e-5);
  });
}

TEST(FullyShardTest, NoReshardAfterBackwardKeepsParametersForTheNextForward) {
  const auto want = ReferenceGrads(TinyGpt(), 2);
  RunMesh(2, {2}, {"dp"}, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(TinyGpt(), gen);
    FSDPModule root = WrapGpt(gpt, mesh);
    root.SetRequiresGradientSync(false);
    root.SetReshardAfterBackward(false);
    Backward(LocalLoss(gpt, TinyGpt(), 0, world->rank(), 2));
    EXPECT_TRUE(root.is_unsharded());
    EXPECT_FALSE(gpt.Submodule("wte")->Param("weight").is_distributed());
    root.SetRequiresGradientSync(true);
    root.SetReshardAfterBackward(true);
    comm::CommTracer fwd;
    Tensor loss = LocalLoss(gpt, TinyGpt(), 1, world->rank(), 2);
    // Blocks reshard after forward (default) and were unsharded: no all-gather in this forward.
    EXPECT_EQ(fwd.Count(CollectiveKind::kAllGather), 0) << fwd.Summary();
    Backward(loss);
    EXPECT_FALSE(root.is_unsharded());
    ExpectShardedGradsEqual(gpt, want, 1e-5);
  });
}

TEST(FullyShardTest, GradientDivideFactorSumsOverRanksThenDivides) {
  auto want = ReferenceGrads(TinyGpt(), 1);
  for (auto& [fqn, v] : want) {
    for (double& x : v) x *= 4.0 / 2.0;  // sum over 4 ranks, divided by 2 (instead of averaged)
  }
  RunMesh(4, {4}, {"dp"}, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(TinyGpt(), gen);
    WrapGpt(gpt, mesh);
    for (auto& [fqn, m] : gpt.NamedModules()) {
      if (auto f = AsFSDPModule(*m)) f->SetGradientDivideFactor(2.0);
    }
    Backward(LocalLoss(gpt, TinyGpt(), 0, world->rank(), 4));
    ExpectShardedGradsEqual(gpt, want, 1e-5);
  });
}

// PyTorch's set_force_sum_reduction_for_comms: every reduction goes out as kSum instead of kAvg and the
// average is taken afterwards (same gradients); with a divide factor the sum is divided by it afterwards.
TEST(FullyShardTest, ForceSumReductionSendsSumsAndDividesAfterwards) {
  const nn::GPTConfig cfg = TinyGpt();
  const auto averaged = ReferenceGrads(cfg, 1);
  auto halved_sum = averaged;  // summed over 4 ranks, divided by 2
  for (auto& [fqn, v] : halved_sum) {
    for (double& x : v) x *= 4.0 / 2.0;
  }
  for (const int mode : {0, 1, 2}) {  // 0: default, 1: force sum, 2: force sum with divide factor 2
    SCOPED_TRACE(mode);
    RunMesh(4, {2, 2}, {"replicate", "shard"}, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
      Generator gen(7);
      nn::GPT gpt(cfg, gen);
      WrapGpt(gpt, mesh);
      for (auto& [fqn, m] : gpt.NamedModules()) {
        auto f = AsFSDPModule(*m);
        if (!f) continue;
        f->SetForceSumReductionForComms(mode > 0);
        if (mode == 2) f->SetGradientDivideFactor(2.0);
      }
      comm::CommTracer bwd;
      Backward(LocalLoss(gpt, cfg, 0, world->rank(), 4));
      const comm::ReduceOp op = mode == 0 ? comm::ReduceOp::kAvg : comm::ReduceOp::kSum;
      EXPECT_EQ(bwd.Count(CollectiveKind::kReduceScatter, op), 3) << bwd.Summary();
      EXPECT_EQ(bwd.Count(CollectiveKind::kAllReduce, op), 3) << bwd.Summary();
      ExpectShardedGradsEqual(gpt, mode == 2 ? halved_sum : averaged, 1e-5);
    });
  }
}

// PyTorch's set_separate_reduce_scatter_group: backward's reduce-scatters move to "dp.reduce_scatter" (one
// group for every module sharded over "dp"), the all-gathers stay on "dp", and the gradients are the default
// run's bit for bit; under HSDP the all-reduces stay on the replicate axis. Turning it off moves them back.
TEST(FullyShardTest, SeparateReduceScatterGroupTakesTheReduceScattersOnly) {
  const nn::GPTConfig cfg = TinyGpt();
  for (const bool hsdp : {false, true}) {
    SCOPED_TRACE(hsdp);
    std::vector<int64_t> shape = hsdp ? std::vector<int64_t>{2, 2} : std::vector<int64_t>{4};
    std::vector<std::string> names = hsdp ? std::vector<std::string>{"replicate", "shard"}
                                          : std::vector<std::string>{"dp"};
    RunMesh(4, shape, names, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
      std::map<std::string, std::vector<double>> grads[2];
      for (const bool separate : {false, true}) {
        Generator gen(7);
        nn::GPT gpt(cfg, gen);
        WrapGpt(gpt, mesh);
        FSDPModule root = *AsFSDPModule(gpt);
        if (separate) {
          root.SetSeparateReduceScatterGroup(true);
          root.SetSeparateReduceScatterGroup(true);  // again: the group is made once
        }
        const std::string shard = hsdp ? "shard" : "dp";
        comm::CommTracer fwd;
        Tensor loss = LocalLoss(gpt, cfg, 0, world->rank(), 4);
        EXPECT_EQ(fwd.Count(CollectiveKind::kAllGather, shard), 3) << fwd.Summary();
        comm::CommTracer bwd;
        Backward(loss);
        const std::string rs_group = separate ? shard + ".reduce_scatter" : shard;
        EXPECT_EQ(bwd.Count(CollectiveKind::kReduceScatter, rs_group), 3) << bwd.Summary();
        EXPECT_EQ(bwd.Count(CollectiveKind::kReduceScatter), 3) << bwd.Summary();
        EXPECT_EQ(bwd.Count(CollectiveKind::kAllGather, shard), 2) << bwd.Summary();
        EXPECT_EQ(bwd.Count(CollectiveKind::kAllReduce, "replicate"), hsdp ? 3 : 0) << bwd.Summary();
        for (auto& [fqn, p] : gpt.NamedParameters()) grads[separate][fqn] = FullValues(p.grad());
        if (separate) {
          root.SetSeparateReduceScatterGroup(false);
          comm::CommTracer again;
          Backward(LocalLoss(gpt, cfg, 1, world->rank(), 4));
          EXPECT_EQ(again.Count(CollectiveKind::kReduceScatter, shard), 3) << again.Summary();
        }
      }
      EXPECT_EQ(grads[1], grads[0]);
    });
  }
}

// PyTorch's set_all_reduce_hook under HSDP: each group's hook sees its reduced block after the replicate
// all-reduce (what it adds reaches .grad as is, not averaged over the replicas) and before the view-out;
// a backward that only accumulates (set_requires_all_reduce(false)) does not call it.
TEST(FullyShardTest, AllReduceHookRunsAfterTheHsdpAllReduceAndItsChangesReachGrad) {
  const nn::GPTConfig cfg = TinyGpt();
  const auto want = ReferenceGrads(cfg, 1);
  RunMesh(4, {2, 2}, {"replicate", "shard"}, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(cfg, gen);
    FSDPModule root = WrapGpt(gpt, mesh);
    const double bump = 0.25 * static_cast<double>(1 + world->rank() / 2);  // per replica: 0.25 or 0.5
    int calls = 0;
    int64_t numel = 0;
    for (auto& [fqn, m] : gpt.NamedModules()) {
      if (auto f = AsFSDPModule(*m)) {
        f->SetAllReduceHook([&](const Tensor& out) {
          ++calls;
          numel += out.numel();
          AddInPlace(out, OnesLike(out), bump);
        });
      }
    }
    Backward(LocalLoss(gpt, cfg, 0, world->rank(), 4));
    EXPECT_EQ(calls, 3);
    int64_t padded = 0;  // this rank's shard of every parameter, padding included
    for (auto& [fqn, m] : gpt.NamedModules()) {
      if (auto f = AsFSDPModule(*m)) {
        for (const auto& p : f->state().group()->params()) padded += p->padded_shard_numel();
      }
    }
    EXPECT_EQ(numel, padded);
    auto bumped = want;
    for (auto& [fqn, v] : bumped) {
      for (double& x : v) x += bump;
    }
    ExpectShardedGradsEqual(gpt, bumped, 1e-5);
    root.SetRequiresAllReduce(false);
    Backward(LocalLoss(gpt, cfg, 1, world->rank(), 4));
    EXPECT_EQ(calls, 3);
  });
}

// PyTorch's set_unshard_in_backward(False) for modules whose backward reads none of their parameters: the
// embeddings' weight gradients need only the indices, so their groups are not gathered again in backward
// (neither in their pre-backward nor as a block's prefetch target); their gradients are still reduced.
TEST(FullyShardTest, UnshardInBackwardOffSkipsTheEmbeddingsAllGathersInBackward) {
  const nn::GPTConfig cfg = TinyGpt();
  const auto want = ReferenceGrads(cfg, 1);
  for (const bool unshard : {true, false}) {
    SCOPED_TRACE(unshard);
    RunMesh(2, {2}, {"dp"}, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
      Generator gen(7);
      nn::GPT gpt(cfg, gen);
      const FSDPModule wte = FullyShard(*Child(gpt, "wte"), mesh), wpe = FullyShard(*Child(gpt, "wpe"), mesh);
      WrapGpt(gpt, mesh);
      wte.SetUnshardInBackward(unshard);
      wpe.SetUnshardInBackward(unshard);
      Tensor loss = LocalLoss(gpt, cfg, 0, world->rank(), 2);
      comm::CommTracer bwd;
      Backward(loss);
      // Resharded after forward: the two blocks and, unless skipped, the embeddings (not the root).
      EXPECT_EQ(bwd.Count(CollectiveKind::kAllGather, "dp"), unshard ? 4 : 2) << bwd.Summary();
      EXPECT_EQ(bwd.Count(CollectiveKind::kReduceScatter, "dp"), 5) << bwd.Summary();
      EXPECT_FALSE(wte.is_unsharded());
      ExpectShardedGradsEqual(gpt, want, 1e-5);
    });
  }
}

// The same setting on a block, whose backward reads its weights: a clear error instead of reading the
// bytes freed after forward.
TEST(FullyShardTest, UnshardInBackwardOffOnABlockFailsWhenItsBackwardReadsTheFreedWeights) {
  RunMesh(2, {2}, {"dp"}, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(TinyGpt(), gen);
    WrapGpt(gpt, mesh);
    AsFSDPModule(*gpt.layers().at(0))->SetUnshardInBackward(false);
    Tensor loss = LocalLoss(gpt, TinyGpt(), 0, world->rank(), 2);
    tessel::testing::ExpectErrorContains([&] { Backward(loss); }, ErrorCode::kFailedPrecondition,
                        {"reads a storage whose bytes were freed", "set_unshard_in_backward(false)"});
  });
}

class MixedPrecisionTest : public ::testing::TestWithParam<int> {};

TEST_P(MixedPrecisionTest, GathersInParamDtypeAndReducesInReduceDtype) {
  const int w = GetParam();
  RunMesh(w, {w}, {"dp"}, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(TinyGpt(), gen);
    FullyShardOptions mp;
    mp.mp_policy = {.param_dtype = DType::kBFloat16, .reduce_dtype = DType::kFloat32};
    FullyShardOptions root_mp = mp;
    root_mp.mp_policy.output_dtype = DType::kFloat32;
    WrapGpt(gpt, mesh, mp, root_mp);
    DType seen = DType::kFloat32;
    gpt.layers().at(0)->Submodule("attn.wq")->RegisterForwardPreHook(
        [&](nn::Module& m, TensorList&) { seen = m.Param("weight").dtype(); });
    comm::CommTracer t;
    Tensor loss = LocalLoss(gpt, TinyGpt(), 0, world->rank(), w);
    EXPECT_EQ(seen, DType::kBFloat16);
    EXPECT_EQ(loss.dtype(), DType::kFloat32);
    Backward(loss);
    EXPECT_EQ(t.Total(), w == 1 ? 0 : 3 + 3 + 2) << t.Summary();  // W = 1 needs no collective
    for (const auto& r : t.records()) {
      const DType want = r.kind == CollectiveKind::kAllGather ? DType::kBFloat16 : DType::kFloat32;
      EXPECT_EQ(r.dtype, want) << comm::CollectiveKindName(r.kind);
    }
    for (auto& [fqn, p] : gpt.NamedParameters()) {
      EXPECT_EQ(p.dtype(), DType::kFloat32) << fqn;
      EXPECT_EQ(p.grad().dtype(), DType::kFloat32) << fqn;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, MixedPrecisionTest, ::testing::Values(1, 2));

TEST(FullyShardTest, ClipGradNormUsesOneAllReduceAndMatchesOneRank) {
  Generator gen(7);
  nn::GPT ref(TinyGpt(), gen);
  auto [idx, tgt] = GlobalBatch(TinyGpt(), 0, 12);
  Backward(ref.Loss(idx, tgt));
  const double want_norm = optim::ClipGradNorm(ref.Parameters(), 0.05);
  ASSERT_GT(want_norm, 0.05);  // the clip is active
  std::map<std::string, std::vector<double>> want;
  for (auto& [fqn, p] : ref.NamedParameters()) want[fqn] = p.grad().ToDoubleVector();
  RunMesh(3, {3}, {"dp"}, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator g(7);
    nn::GPT gpt(TinyGpt(), g);
    FSDPModule root = WrapGpt(gpt, mesh);
    Backward(LocalLoss(gpt, TinyGpt(), 0, world->rank(), 3));
    comm::CommTracer t;
    const double norm = ClipGradNorm(root, 0.05);
    EXPECT_EQ(t.Total(), 1) << t.Summary();
    EXPECT_EQ(t.Count(CollectiveKind::kAllReduce), 1);
    EXPECT_NEAR(norm, want_norm, 1e-5 * want_norm);
    ExpectShardedGradsEqual(gpt, want, 1e-5);
  });
}

TEST(FullyShardTest, ClipGradNormCountsReplicatedShardsOnceUnderHsdp) {
  Generator gen(7);
  nn::GPT ref(TinyGpt(), gen);
  auto [idx, tgt] = GlobalBatch(TinyGpt(), 0, 12);
  Backward(ref.Loss(idx, tgt));
  const double want_norm = optim::ClipGradNorm(ref.Parameters(), 1e9);
  RunMesh(4, {2, 2}, {"replicate", "shard"}, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator g(7);
    nn::GPT gpt(TinyGpt(), g);
    FSDPModule root = WrapGpt(gpt, mesh);
    Backward(LocalLoss(gpt, TinyGpt(), 0, world->rank(), 4));
    EXPECT_NEAR(ClipGradNorm(root, 1e9), want_norm, 1e-5 * want_norm);
    comm::CommTracer t;  // the flattened group exists now: one all-reduce per call
    EXPECT_NEAR(ClipGradNorm(root, 1e9), want_norm, 1e-5 * want_norm);
    EXPECT_EQ(t.Total(), 1) << t.Summary();
  });
}

}  // namespace
}  // namespace tessel::fsdp::testing
