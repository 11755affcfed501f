// tests/fsdp_shard_placement_test.cc — FullyShardOptions::shard_placement_fn (PyTorch FSDP2's): parameters
// sharded on the dim the function picks (here the columns of every matrix, dim 1, next to dim-0 vectors in
// the same groups). The sharded layout is checked against the initial values sliced by hand, the flat
// all-gather's bytes against the shapes, training against one rank (FSDP, HSDP, reshard_after_forward=<int>,
// bf16 parameters), the rejected placements against PyTorch's rules, and a checkpoint saved from the column
// layout on 2 ranks against the default row layout on 4 ranks and one dense rank.
//
// Tolerances as tests/fsdp_equivalence_test.cc: losses 1e-5 relative, AdamW parameters 1e-4; bf16 parameters
// with an fp32 reduction against the fp32 reference: losses 1e-2, parameters 5e-2.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/load.h"
#include "checkpoint/save.h"
#include "checkpoint/state_dict.h"
#include "comm/tracer.h"
#include "core/base/testing/expect_error.h"
#include "tests/fsdp_testing.h"

namespace tessel::fsdp::testing {
namespace {

using comm::CollectiveKind;

constexpr int64_t kBatch = 12;

// Matrices on their columns (dim -1 = 1 here), vectors on the default dim 0.
std::optional<dtensor::Shard> Columns(const Tensor& p) {
  if (p.dim() == 2) return dtensor::Shard{-1};
  return std::nullopt;
}

FullyShardOptions ColumnOptions() {
  FullyShardOptions o;
  o.shard_placement_fn = Columns;
  return o;
}

// Row-major values of columns [c0, c0 + n) of a [rows, cols] matrix (plain loops).
std::vector<double> ColumnsOf(const std::vector<double>& full, int64_t cols, int64_t c0, int64_t n) {
  std::vector<double> out;
  const int64_t rows = static_cast<int64_t>(full.size()) / cols;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = c0; j < c0 + n; ++j) out.push_back(full[static_cast<size_t>(i * cols + j)]);
  }
  return out;
}

TEST(ShardPlacementFnTest, MatricesShardTheirColumnsEvenlyAndTheAllGatherMovesTheSameBytesPerShard) {
  Generator gen(7);
  nn::GPT ref(TinyGpt(), gen);
  const auto init = FullParams(ref);
  comm::RunRanks(2, [&](comm::ProcessGroupPtr world) {
    const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2}, {"dp"});
    Generator g(7);
    nn::GPT gpt(TinyGpt(), g);
    int calls = 0;
    FullyShardOptions opts;
    opts.shard_placement_fn = [&](const Tensor& p) {
      ++calls;
      EXPECT_FALSE(p.is_distributed());  // called on the parameter as the module holds it, before sharding
      return Columns(p);
    };
    FSDPModule root = WrapGpt(gpt, mesh, opts, opts);
    EXPECT_EQ(calls, static_cast<int>(init.size()));  // once per managed parameter, over all the calls
    int matrices = 0;
    for (auto& [fqn, p] : gpt.NamedParameters()) {
      SCOPED_TRACE(fqn);
      ASSERT_TRUE(p.is_distributed());
      const dtensor::DTensor d(p);
      const Tensor local = d.ToLocal();
      EXPECT_TRUE(local.is_contiguous());
      if (p.dim() == 2) {
        ++matrices;
        const int64_t cols = p.size(1), n = cols / 2;
        EXPECT_EQ(dtensor::PlacementsToString(d.placements()), "[S(1)]");
        EXPECT_EQ(local.sizes(), (Shape{p.size(0), n}));
        EXPECT_EQ(local.ToDoubleVector(), ColumnsOf(init.at(fqn), cols, world->rank() * n, n));
      } else {
        EXPECT_EQ(dtensor::PlacementsToString(d.placements()), "[S(0)]");
      }
      EXPECT_EQ(d.FullTensor().ToDoubleVector(), init.at(fqn));
    }
    EXPECT_GE(matrices, 6);
    comm::CommTracer gather;
    root.Unshard();
    ASSERT_EQ(gather.Count(CollectiveKind::kAllGather), 1);
    // Root group: wte [37, 16], wpe [3, 16], lm_head [37, 16] by 8 columns each; ln_f.weight and .bias [16]
    // by 8 rows. (Dim 0 would pad wte and lm_head to 19 rows: ((19 + 2 + 19) * 16 + 16) * 4.)
    EXPECT_EQ(gather.records()[0].bytes, ((37 + 3 + 37) * 8 + 8 + 8) * 4);
    for (auto& [fqn, p] : gpt.NamedParameters()) {
      if (fqn != "wte.weight" && fqn != "lm_head.weight" && fqn != "wpe.weight") continue;
      SCOPED_TRACE(fqn);
      ASSERT_FALSE(p.is_distributed());
      EXPECT_EQ(p.ToDoubleVector(), init.at(fqn));  // the column blocks concatenated back along dim 1
    }
    root.Reshard();
  }, FastRanks());
}

TEST(ShardPlacementFnTest, TrainingMatchesOneRankOnFsdpAndHsdpMeshes) {
  const RunResult sgd = TrainReference(TinyGpt(), 3, kBatch);
  const RunResult adamw = TrainReference(TinyGpt(), 3, kBatch, Opt::kAdamW);
  const FullyShardOptions cols = ColumnOptions();
  ExpectRunsClose(TrainFsdp(TinyGpt(), 3, kBatch, {.world = 2, .block_options = cols, .root_options = cols}), sgd,
                  1e-5);
  ExpectRunsClose(TrainFsdp(TinyGpt(), 3, kBatch,
                            {.world = 4, .block_options = cols, .root_options = cols, .optimizer = Opt::kAdamW}),
                  adamw, 1e-5, 1e-4);
  ExpectRunsClose(TrainFsdp(TinyGpt(), 3, kBatch,
                            {.world = 4, .mesh_shape = {2, 2}, .axis_names = {"replicate", "shard"},
                             .block_options = cols, .root_options = cols}),
                  sgd, 1e-5);
}

TEST(ShardPlacementFnTest, PartialReshardAfterForwardIsBitForBitTheFullReshard) {
  FsdpRun partial{.world = 4, .block_options = ColumnOptions(), .root_options = ColumnOptions(),
                  .optimizer = Opt::kAdamW};
  partial.block_options.reshard_after_forward_size = 2;
  partial.root_options.reshard_after_forward_size = 2;
  FsdpRun full = partial;
  full.block_options.reshard_after_forward_size.reset();
  full.root_options.reshard_after_forward_size.reset();
  full.block_options.reshard_after_forward = true;
  full.root_options.reshard_after_forward = true;
  const RunResult got = TrainFsdp(TinyGpt(), 3, kBatch, partial);
  EXPECT_EQ(got.losses, TrainFsdp(TinyGpt(), 3, kBatch, full).losses);
  ExpectRunsClose(got, TrainReference(TinyGpt(), 3, kBatch, Opt::kAdamW), 1e-5, 1e-4);
}

TEST(ShardPlacementFnTest, Bf16ParametersWithAnFp32ReductionStayNearTheFp32Reference) {
  FullyShardOptions mp = ColumnOptions();
  mp.mp_policy = {.param_dtype = DType::kBFloat16, .reduce_dtype = DType::kFloat32};
  const RunResult got = TrainFsdp(TinyGpt(), 3, kBatch, {.world = 2, .block_options = mp, .root_options = mp});
  const double worst = ExpectRunsClose(got, TrainReference(TinyGpt(), 3, kBatch), 1e-2, 5e-2);
  EXPECT_GT(worst, 1e-6);  // the parameters did go through bf16
}

TEST(ShardPlacementFnTest, UnevenOrOutOfRangeDimsAreRejectedBeforeAnythingIsSharded) {
  comm::RunRanks(3, [&](comm::ProcessGroupPtr world) {
    const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {3}, {"dp"});
    Generator g(7);
    nn::GPT gpt(TinyGpt(), g);
    nn::Module& block = *gpt.layers().at(0);
    // d_model 16 over 3 ranks: PyTorch raises NotImplementedError for uneven dims other than 0.
    ::tessel::testing::ExpectErrorContains([&] { FullyShard(block, mesh, ColumnOptions()); }, ErrorCode::kUnimplemented,
                                           {"returned Shard(dim=-1) for parameter", "uneven sharding on dim 1",
                                            "size 16", "world size 3 of shard axis 'dp'"});
    FullyShardOptions bad;
    bad.shard_placement_fn = [](const Tensor&) { return dtensor::Shard{2}; };
    ::tessel::testing::ExpectErrorContains([&] { FullyShard(block, mesh, bad); }, ErrorCode::kInvalidArgument,
                                           {"returned Shard(dim=2)", "which has 1 dims"});
    bad.shard_placement_fn = [](const Tensor& p) { return dtensor::Shard{-p.dim() - 1}; };
    ::tessel::testing::ExpectErrorContains([&] { FullyShard(block, mesh, bad); }, ErrorCode::kInvalidArgument,
                                           "which has");
    for (auto& [fqn, p] : block.NamedParameters()) EXPECT_FALSE(p.is_distributed()) << fqn;
    // Nothing was half-applied: the block still shards (dim 0 is allowed to be uneven).
    FullyShard(block, mesh);
    for (auto& [fqn, p] : block.NamedParameters()) EXPECT_TRUE(p.is_distributed()) << fqn;
  }, FastRanks());
}

std::string FreshDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::filesystem::path p = std::filesystem::path(base ? base : "/tmp") / name;
  std::filesystem::remove_all(p);
  return p.string();
}

// Saved from the column layout on 2 ranks after two AdamW steps; loaded into the default row layout on 4
// ranks (and the column layout there) and into one dense rank: every parameter and optimizer state equal
// bit for bit.
TEST(ShardPlacementFnTest, ACheckpointOfTheColumnLayoutLoadsIntoRowsOnFourRanksAndIntoOneRank) {
  const std::string dir = FreshDir("ckpt_fsdp_columns");
  using State = std::map<std::string, std::vector<double>>;
  auto full_state = [](nn::GPT& gpt, optim::Optimizer& opt) {
    State out = FullParams(gpt);
    for (const auto& [fqn, s] : opt.GetStateDict().state) {
      for (const auto& [name, t] : s) out["optim." + fqn + "." + name] = FullValues(t);
    }
    return out;
  };
  auto training_state = [](nn::GPT& gpt, optim::Optimizer& opt) {
    checkpoint::StateDict sd = checkpoint::GetModelStateDict(gpt);
    sd.merge(checkpoint::GetOptimizerStateDict(gpt, opt));
    return sd;
  };
  auto step = [](nn::GPT& gpt, optim::Optimizer& opt, int s, int64_t rank, int64_t world) {
    auto [idx, tgt] = GlobalBatch(TinyGpt(), s, kBatch);
    Backward(gpt.Loss(RowsFor(idx, rank, world), RowsFor(tgt, rank, world)));
    opt.Step();
    opt.ZeroGrad();
  };
  State saved;
  comm::RunRanks(2, [&](comm::ProcessGroupPtr world) {
    const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2}, {"dp"});
    Generator g(7);
    nn::GPT gpt(TinyGpt(), g);
    WrapGpt(gpt, mesh, ColumnOptions(), ColumnOptions());
    auto opt = MakeOptimizer(Opt::kAdamW, gpt.NamedParameters());
    for (int s = 0; s < 2; ++s) step(gpt, *opt, s, world->rank(), 2);
    checkpoint::Save(training_state(gpt, *opt), dir, world, {.fsync = false});
    State mine = full_state(gpt, *opt);
    if (world->rank() == 0) saved = std::move(mine);
  }, FastRanks());
  ASSERT_FALSE(saved.empty());
  for (const bool columns : {false, true}) {
    SCOPED_TRACE(columns ? "columns on 4 ranks" : "rows on 4 ranks");
    comm::RunRanks(4, [&](comm::ProcessGroupPtr world) {
      const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {4}, {"dp"});
      Generator g(99);  // other initial values: everything must come from the checkpoint
      nn::GPT gpt(TinyGpt(), g);
      const FullyShardOptions opts = columns ? ColumnOptions() : FullyShardOptions{};
      WrapGpt(gpt, mesh, opts, opts);
      auto opt = MakeOptimizer(Opt::kAdamW, gpt.NamedParameters());
      step(gpt, *opt, 0, world->rank(), 4);  // creates the AdamW state in this layout
      checkpoint::StateDict sd = training_state(gpt, *opt);
      checkpoint::Load(sd, dir);
      checkpoint::SetOptimizerStateDict(gpt, *opt, sd);
      EXPECT_EQ(dtensor::PlacementsToString(dtensor::DTensor(gpt.NamedParameters()[0].second).placements()),
                columns ? "[S(1)]" : "[S(0)]");
      EXPECT_TRUE(full_state(gpt, *opt) == saved);
      step(gpt, *opt, 2, world->rank(), 4);  // and trains on from the loaded shards
      for (auto& [fqn, p] : gpt.NamedParameters()) EXPECT_NE(FullValues(p), saved.at(fqn)) << fqn;
    }, FastRanks());
  }
  Generator g(99);
  nn::GPT dense(TinyGpt(), g);
  auto opt = MakeOptimizer(Opt::kAdamW, dense.NamedParameters());
  step(dense, *opt, 0, 0, 1);
  checkpoint::StateDict sd = training_state(dense, *opt);
  checkpoint::Load(sd, dir);
  checkpoint::SetOptimizerStateDict(dense, *opt, sd);
  EXPECT_TRUE(full_state(dense, *opt) == saved);
}

}  // namespace
}  // namespace tessel::fsdp::testing
