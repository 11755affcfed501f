// tests/fsdp_partial_reshard_test.cc — fully_shard's reshard_after_forward=<int> (PyTorch's post-forward
// mesh) on the threads backend: which group each backward all-gather runs on, that training is bit for bit
// the training with reshard_after_forward=true (the pieces rebuild the same all-gather buffer), the bytes
// each rank keeps between forward and backward, PyTorch's validation, and the cases where no piece is kept.
#include <gtest/gtest.h>

#include "comm/tracer.h"
#include "core/base/testing/expect_error.h"
#include "fsdp/param_group.h"
#include "fsdp/state.h"
#include "tests/fsdp_testing.h"

namespace tessel::fsdp::testing {
namespace {

using comm::CollectiveKind;
using ::tessel::testing::ExpectErrorContains;

constexpr int kWorld = 4;
constexpr int64_t kBatch = 8;

FullyShardOptions SizeOptions(int64_t size) {
  FullyShardOptions o;
  o.reshard_after_forward_size = size;
  return o;
}

void RunDp(int world, const std::function<void(comm::ProcessGroupPtr, const dtensor::DeviceMesh&)>& fn) {
  comm::RunRanks(world, [&](comm::ProcessGroupPtr pg) { fn(pg, dtensor::InitDeviceMesh(pg, {world}, {"dp"})); },
                 FastRanks());
}

Tensor RankLoss(nn::GPT& gpt, int step, int rank, int world) {
  auto [idx, tgt] = GlobalBatch(TinyGpt(), step, kBatch);
  return gpt.Loss(RowsFor(idx, rank, world), RowsFor(tgt, rank, world));
}

ParamGroup* GroupOf(const nn::Module& m) { return FsdpState::Of(m)->group(); }

// Runs backward from `loss` and expects its all-gathers: `on_dp` on the shard axis "dp", `post_forward` on
// its post-forward subgroups.
void ExpectBackwardAllGathers(const Tensor& loss, int on_dp, int post_forward) {
  comm::CommTracer bwd;
  Backward(loss);
  EXPECT_EQ(bwd.Count(CollectiveKind::kAllGather, "dp"), on_dp) << bwd.Summary();
  EXPECT_EQ(bwd.Count(CollectiveKind::kAllGather, "dp.post_forward"), post_forward) << bwd.Summary();
}

std::vector<nn::Module*> Blocks(nn::GPT& gpt) {
  std::vector<nn::Module*> out;
  for (size_t i = 0; i < gpt.layers().size(); ++i) out.push_back(&*gpt.layers().at(i));
  return out;
}

TEST(PartialReshardTest, BackwardAllGathersRunWithinGroupsOfConsecutiveRanks) {
  RunDp(kWorld, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(TinyGpt(), gen);
    WrapGpt(gpt, mesh, SizeOptions(2));  // blocks: size 2; root: default (keeps its parameters)
    for (nn::Module* block : Blocks(gpt)) {
      const comm::ProcessGroupPtr& g = GroupOf(*block)->post_forward_group();
      ASSERT_NE(g, nullptr);
      const int first = world->rank() / 2 * 2;  // PyTorch's mesh.view(-1, 2): [[0, 1], [2, 3]]
      EXPECT_EQ(g->global_ranks(), (std::vector<int>{first, first + 1}));
      EXPECT_EQ(g->rank(), world->rank() % 2);
      EXPECT_EQ(g->name(), "dp.post_forward");
    }
    // Both blocks share one set of subgroups (one NewGroup round, not one per fully_shard call).
    EXPECT_EQ(GroupOf(*Blocks(gpt)[0])->post_forward_group(), GroupOf(*Blocks(gpt)[1])->post_forward_group());
    EXPECT_EQ(GroupOf(gpt)->post_forward_group(), nullptr);
    for (int step = 0; step < 2; ++step) {
      SCOPED_TRACE(step);
      comm::CommTracer fwd;
      Tensor loss = RankLoss(gpt, step, world->rank(), kWorld);
      EXPECT_EQ(fwd.Count(CollectiveKind::kAllGather, "dp"), 3) << fwd.Summary();
      EXPECT_EQ(fwd.Total(), 3) << fwd.Summary();
      for (nn::Module* block : Blocks(gpt)) EXPECT_TRUE(GroupOf(*block)->is_sharded_post_forward());
      comm::CommTracer bwd;
      Backward(loss);
      EXPECT_EQ(bwd.Count(CollectiveKind::kAllGather, "dp.post_forward"), 2) << bwd.Summary();
      EXPECT_EQ(bwd.Count(CollectiveKind::kReduceScatter, "dp"), 3) << bwd.Summary();
      EXPECT_EQ(bwd.Total(), 5) << bwd.Summary();
      for (nn::Module* block : Blocks(gpt)) EXPECT_FALSE(GroupOf(*block)->is_sharded_post_forward());
      gpt.ZeroGrad();
    }
  });
}

TEST(PartialReshardTest, ARootWithASizeReshardsToo) {
  RunDp(kWorld, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(TinyGpt(), gen);
    WrapGpt(gpt, mesh, SizeOptions(2), SizeOptions(2));
    ExpectBackwardAllGathers(RankLoss(gpt, 0, world->rank(), kWorld), /*on_dp=*/0, /*post_forward=*/3);
  });
}

TEST(PartialReshardTest, TrainingIsBitForBitTheFullReshardsAndMatchesOneRank) {
  const nn::GPTConfig cfg = TinyGpt();
  FsdpRun partial{.world = kWorld, .block_options = SizeOptions(2), .root_options = SizeOptions(2),
                  .optimizer = Opt::kAdamW};
  FsdpRun full{.world = kWorld, .optimizer = Opt::kAdamW};
  full.block_options.reshard_after_forward = true;
  full.root_options.reshard_after_forward = true;
  const RunResult got = TrainFsdp(cfg, 3, kBatch, partial);
  const RunResult want = TrainFsdp(cfg, 3, kBatch, full);
  EXPECT_EQ(got.losses, want.losses);
  EXPECT_EQ(got.params, want.params);
  ExpectRunsClose(got, TrainReference(cfg, 3, kBatch, Opt::kAdamW), 1e-5);
}

// Padded rows a rank holds of one parameter of `rows` x `row_numel` (torch.chunk over `world`).
int64_t PaddedShardNumel(const Tensor& p, int64_t world) {
  const int64_t rows = p.size(0), row_numel = p.numel() / std::max<int64_t>(rows, 1);
  return (rows + world - 1) / world * row_numel;
}

TEST(PartialReshardTest, EachRankKeepsOneRthOfTheBlocksUntilTheirBackward) {
  // One rank's params ledger across forward: the r = 2 run keeps W/r = 2 padded shards of every block
  // parameter more than the reshard-everything run (the root keeps its parameters in both).
  Generator ref_gen(7);
  nn::GPT ref(TinyGpt(), ref_gen);
  int64_t block_shard_numel = 0;  // one rank's padded shards of one block, from the full shapes
  for (auto& [fqn, p] : Blocks(ref)[0]->NamedParameters()) block_shard_numel += PaddedShardNumel(p, kWorld);
  RunDp(kWorld, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    const Device device = CurrentDevice();
    auto params_live = [&] { return memory::Stats(device)[memory::Ledger::kParams].live; };
    auto forward_growth = [&](const FullyShardOptions& blocks, int64_t* after_backward) {
      Generator gen(7);
      nn::GPT gpt(TinyGpt(), gen);
      WrapGpt(gpt, mesh, blocks);
      const int64_t before = params_live();
      Tensor loss = RankLoss(gpt, 0, world->rank(), kWorld);
      const int64_t grown = params_live() - before;
      Backward(loss);
      *after_backward = params_live() - before;
      return grown;
    };
    FullyShardOptions full;
    full.reshard_after_forward = true;
    int64_t partial_after = -1, full_after = -1;
    const int64_t partial = forward_growth(SizeOptions(2), &partial_after);
    const int64_t whole = forward_growth(full, &full_after);
    const int64_t blocks = 2, pieces_per_rank = kWorld / 2;
    EXPECT_EQ(partial - whole, blocks * pieces_per_rank * block_shard_numel * 4);
    EXPECT_EQ(partial_after, full_after);  // the pieces are gone once the blocks ran their backward
  });
}

TEST(PartialReshardTest, SizesFollowPyTorchsRules) {
  RunDp(kWorld, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    for (int64_t bad : {0, 3, 5, -2}) {
      SCOPED_TRACE(bad);
      Generator gen(7);
      nn::GPT gpt(TinyGpt(), gen);
      ExpectErrorContains([&] { FullyShard(*Blocks(gpt)[0], mesh, SizeOptions(bad)); }, ErrorCode::kInvalidArgument,
                          {"it should be a factor of 4", "'dp'", Str("not ", bad)});
    }
    Generator gen(7);
    nn::GPT both(TinyGpt(), gen);
    FullyShardOptions o = SizeOptions(2);
    o.reshard_after_forward = true;
    ExpectErrorContains([&] { FullyShard(*Blocks(both)[0], mesh, o); }, ErrorCode::kInvalidArgument,
                        {"both as a bool and as a size"});
    // 1 is false, the axis size is true: no subgroup either way.
    for (int64_t size : {1, 4}) {
      SCOPED_TRACE(size);
      Generator g(7);
      nn::GPT gpt(TinyGpt(), g);
      WrapGpt(gpt, mesh, SizeOptions(size));
      EXPECT_EQ(GroupOf(*Blocks(gpt)[0])->post_forward_group(), nullptr);
      ExpectBackwardAllGathers(RankLoss(gpt, 0, world->rank(), kWorld), size == 1 ? 0 : 2, /*post_forward=*/0);
    }
  });
}

TEST(PartialReshardTest, NoPieceOutlivesAForwardWithoutBackwardOrABoolSetting) {
  RunDp(kWorld, [&](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(TinyGpt(), gen);
    FSDPModule root = WrapGpt(gpt, mesh, SizeOptions(2));
    {
      NoGradGuard no_grad;  // no backward follows: a piece would outlive the next optimizer step
      RankLoss(gpt, 0, world->rank(), kWorld);
    }
    for (nn::Module* block : Blocks(gpt)) EXPECT_FALSE(GroupOf(*block)->is_sharded_post_forward());
    // The bool setter replaces the size (PyTorch's set_reshard_after_forward).
    root.SetReshardAfterForward(true);
    Tensor loss = RankLoss(gpt, 1, world->rank(), kWorld);
    for (nn::Module* block : Blocks(gpt)) EXPECT_FALSE(GroupOf(*block)->is_sharded_post_forward());
    ExpectBackwardAllGathers(loss, /*on_dp=*/3, /*post_forward=*/0);
  });
}

TEST(PartialReshardTest, HsdpPiecesStayWithinOneReplicasShardRanks) {
  // Mesh [2, 4] (dp_replicate, dp_shard), size 2: PyTorch views the whole mesh as [-1, 2], so each
  // subgroup is two consecutive shard ranks of one replica.
  const nn::GPTConfig cfg = TinyGpt();
  comm::RunRanks(8, [&](comm::ProcessGroupPtr world) {
    dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2, 4}, {"dp_replicate", "dp_shard"});
    Generator gen(7);
    nn::GPT gpt(cfg, gen);
    WrapGpt(gpt, mesh, SizeOptions(2));
    const int first = world->rank() / 2 * 2;
    EXPECT_EQ(GroupOf(*Blocks(gpt)[0])->post_forward_group()->global_ranks(), (std::vector<int>{first, first + 1}));
    Tensor loss = RankLoss(gpt, 0, world->rank(), 8);
    comm::CommTracer bwd;
    Backward(loss);
    EXPECT_EQ(bwd.Count(CollectiveKind::kAllGather, "dp_shard.post_forward"), 2) << bwd.Summary();
    EXPECT_EQ(bwd.Count(CollectiveKind::kAllReduce, "dp_replicate"), 3) << bwd.Summary();
  }, FastRanks());
  FsdpRun partial{.world = 8, .mesh_shape = {2, 4}, .axis_names = {"dp_replicate", "dp_shard"},
                  .block_options = SizeOptions(2)};
  FsdpRun full = partial;
  full.block_options = FullyShardOptions{};
  EXPECT_EQ(TrainFsdp(cfg, 2, kBatch, partial).params, TrainFsdp(cfg, 2, kBatch, full).params);
}

}  // namespace
}  // namespace tessel::fsdp::testing
