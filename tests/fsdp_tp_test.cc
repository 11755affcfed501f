// tests/fsdp_tp_test.cc — FullyShard on top of tensor-parallel DTensor parameters on a (dp, tp) = (2, 2)
// mesh, with the TP layout distributed by hand (the TP primitive comes later): colwise fc (weight and
// bias Shard(0) on "tp"), rowwise proj (weight Shard(1), bias Replicate). Checks the sharded layout
// ("TP shard, then FSDP shard of that": dim 0's shard order [tp, dp]), that unsharding restores the TP
// DTensors, the collective counts on each axis, and training parity with one rank; with a
// shard_placement_fn, the same on the TP-local piece's dim 1.
#include <gtest/gtest.h>

#include <cmath>

#include "absl/strings/str_join.h"

#include "comm/tracer.h"
#include "core/base/testing/expect_error.h"
#include "core/nn/layers.h"
#include "core/ops/reduction.h"
#include "core/ops/unary.h"
#include "dtensor/layout.h"
#include "fsdp/clip_grad_norm.h"
#include "tests/fsdp_testing.h"

namespace tessel::fsdp::testing {
namespace {

using comm::CollectiveKind;

constexpr int64_t kIn = 6, kHidden = 8, kOut = 5, kBatch = 4;

// x [B, 6] -> fc [8, 6] -> relu -> proj [5, 8]; `scale` [3, 2] is a plain (non-TP) parameter that the
// forward does not use, to check the placement FSDP gives it next to TP parameters.
class TpMlp final : public nn::Module {
 public:
  explicit TpMlp(Generator& gen, bool with_plain = false) : Module("TpMlp") {
    RegisterModule("fc", std::make_unique<nn::Linear>(kIn, kHidden, true, gen, 0.3));
    RegisterModule("proj", std::make_unique<nn::Linear>(kHidden, kOut, true, gen, 0.3));
    if (with_plain) RegisterParameter("scale", Randn({3, 2}, gen));
  }
  TensorList Forward(const TensorList& in) override {
    return {(*Submodule("proj"))(Relu((*Submodule("fc"))(in.at(0))))};
  }
};

// Row-major values of the box `intervals` of a 1-D or 2-D tensor of `shape` (plain index loops).
std::vector<double> BoxOf(const std::vector<double>& full, const Shape& shape,
                          const std::vector<dtensor::DimInterval>& intervals) {
  std::vector<double> out;
  const int64_t cols = shape.size() == 2 ? shape[1] : 1;
  const dtensor::DimInterval col = shape.size() == 2 ? intervals[1] : dtensor::DimInterval{0, 1};
  for (int64_t i = intervals[0].offset; i < intervals[0].offset + intervals[0].length; ++i) {
    for (int64_t j = col.offset; j < col.offset + col.length; ++j) out.push_back(full[static_cast<size_t>(i * cols + j)]);
  }
  return out;
}

// Colwise fc, rowwise proj on `tp` (every rank passes the same full values: same seed).
void ParallelizeByHand(TpMlp& m, const dtensor::DeviceMesh& tp) {
  auto distribute = [&](const std::string& fqn, dtensor::Placement p) {
    for (auto& [name, t] : m.NamedParameters()) {
      if (name == fqn) m.SetParameter(fqn, dtensor::DistributeTensor(t, tp, {p}));
    }
  };
  distribute("fc.weight", dtensor::Shard{0});
  distribute("fc.bias", dtensor::Shard{0});
  distribute("proj.weight", dtensor::Shard{1});
  distribute("proj.bias", dtensor::Replicate{});
}

std::map<std::string, std::vector<double>> FullValuesOf(TpMlp& m) {
  std::map<std::string, std::vector<double>> out;
  for (auto& [fqn, p] : m.NamedParameters()) out[fqn] = FullValues(p);
  return out;
}

// Every parameter of `m` has the `want` mesh axes, placements and shard order ("(dp, tp) [S(0), R] {0: [0]}"),
// its local values are the box of the full values its spec assigns this rank, and it gathers back to them.
void ExpectShardedLayout(nn::Module& m, const std::map<std::string, std::string>& want,
                         const std::map<std::string, std::vector<double>>& full) {
  for (auto& [fqn, p] : m.NamedParameters()) {
    SCOPED_TRACE(fqn);
    const dtensor::DTensorSpec& spec = dtensor::DTensor(p).spec();
    const dtensor::DeviceMesh& mesh = dtensor::DTensor(p).mesh();
    EXPECT_EQ("(" + absl::StrJoin(mesh.axis_names(), ", ") + ") " + dtensor::PlacementsToString(spec.placements()) +
                  " " + dtensor::ShardOrderToString(spec.shard_order()),
              want.at(fqn));
    const std::vector<double> box =
        BoxOf(full.at(fqn), spec.shape(), dtensor::GlobalIntervals(spec, mesh.coordinate()));
    EXPECT_EQ(dtensor::DTensor(p).ToLocal().ToDoubleVector(), box);
    EXPECT_EQ(dtensor::DTensor(p).FullTensor().ToDoubleVector(), full.at(fqn));
  }
}

TEST(FsdpOnTpTest, ShardsTheTpLocalPieceInTpThenDpOrder) {
  Generator gen(3);
  TpMlp ref(gen, /*with_plain=*/true);
  const auto full = FullValuesOf(ref);
  comm::RunRanks(4, [&](comm::ProcessGroupPtr world) {
    dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2, 2}, {"dp", "tp"});
    Generator g(3);
    TpMlp m(g, true);
    ParallelizeByHand(m, mesh["tp"]);
    std::map<std::string, dtensor::DTensorSpec> tp_specs;
    std::map<std::string, std::vector<double>> tp_locals;
    for (auto& [fqn, p] : m.NamedParameters()) {
      if (!p.is_distributed()) continue;
      tp_specs.emplace(fqn, dtensor::DTensor(p).spec());
      tp_locals[fqn] = dtensor::DTensor(p).ToLocal().ToDoubleVector();
    }
    FSDPModule fsdp = FullyShard(m, mesh);
    // passed the whole mesh, FSDP replicates the plain parameter over "tp" (torch's dp_mesh_dims form)
    const std::map<std::string, std::string> want = {{"fc.weight", "(dp, tp) [S(0), S(0)] {0: [1, 0]}"},
                                                     {"fc.bias", "(dp, tp) [S(0), S(0)] {0: [1, 0]}"},
                                                     {"proj.weight", "(dp, tp) [S(0), S(1)] {0: [0], 1: [1]}"},
                                                     {"proj.bias", "(dp, tp) [S(0), R] {0: [0]}"},
                                                     {"scale", "(dp, tp) [S(0), R] {0: [0]}"}};
    ExpectShardedLayout(m, want, full);
    fsdp.Unshard();
    for (auto& [fqn, p] : m.NamedParameters()) {
      SCOPED_TRACE(fqn);
      if (fqn == "scale") {
        EXPECT_FALSE(p.is_distributed());
        EXPECT_EQ(p.ToDoubleVector(), full.at("scale"));
        continue;
      }
      ASSERT_TRUE(p.is_distributed());
      EXPECT_EQ(dtensor::DTensor(p).spec(), tp_specs.at(fqn));
      EXPECT_EQ(dtensor::DTensor(p).ToLocal().ToDoubleVector(), tp_locals.at(fqn));
    }
  }, FastRanks());
}

// Loss of `m` on `rows` of the global batch: mean of y^2 (a DTensor scalar under TP).
Tensor MlpLoss(nn::Module& m, const Tensor& x_rows, const std::optional<dtensor::DeviceMesh>& tp) {
  Tensor x = tp ? Tensor(dtensor::DistributeTensor(x_rows, *tp, {dtensor::Replicate{}})) : x_rows;
  Tensor y = m(x);
  return Mean(Mul(y, y));
}

Tensor GlobalInput(int step) {
  Generator gen(99, static_cast<uint64_t>(step) * 100);
  return Randn({kBatch, kIn}, gen);
}

// 3 SGD steps of FSDP (with `opts`) over the hand-made TP layout on a (dp, tp) = (2, 2) mesh: every loss and
// final parameter within fp32 rounding of one rank, 2 all-gathers and 2 reduce-scatters on "dp" per pass.
void ExpectTrainingMatchesOneRank(const FullyShardOptions& opts) {
  constexpr int kSteps = 3;
  Generator gen(3);
  TpMlp ref(gen);
  optim::SGD ref_opt(ref.NamedParameters(), {.lr = 0.1, .momentum = 0.9});
  std::vector<double> ref_losses;
  for (int s = 0; s < kSteps; ++s) {
    Tensor loss = MlpLoss(ref, GlobalInput(s), std::nullopt);
    Backward(loss);
    ref_opt.Step();
    ref_opt.ZeroGrad();
    ref_losses.push_back(loss.item<double>());
  }
  const auto want = FullValuesOf(ref);
  comm::RunRanks(4, [&](comm::ProcessGroupPtr world) {
    dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2, 2}, {"dp", "tp"});
    const dtensor::DeviceMesh tp = mesh["tp"];
    Generator g(3);
    TpMlp m(g);
    ParallelizeByHand(m, tp);
    FullyShard(*m.Submodule("fc"), mesh, opts);
    FullyShard(*m.Submodule("proj"), mesh, opts);
    FullyShard(m, mesh, opts);  // the root owns no parameters of its own
    optim::SGD opt(m.NamedParameters(), {.lr = 0.1, .momentum = 0.9});
    const int64_t dp_rank = mesh.local_rank("dp");
    for (int s = 0; s < kSteps; ++s) {
      comm::CommTracer fwd;
      Tensor loss = MlpLoss(m, RowsFor(GlobalInput(s), dp_rank, 2), tp);
      EXPECT_EQ(fwd.Count(CollectiveKind::kAllGather, "dp"), 2) << fwd.Summary();
      comm::CommTracer bwd;
      Backward(loss);
      EXPECT_EQ(bwd.Count(CollectiveKind::kReduceScatter, "dp"), 2) << bwd.Summary();
      EXPECT_EQ(bwd.Count(CollectiveKind::kAllGather, "dp"), 2) << bwd.Summary();
      opt.Step();
      opt.ZeroGrad();
      Tensor l = Full({1}, dtensor::DTensor(loss).FullTensor().item<double>(), DType::kFloat64);
      mesh.axis_group("dp")->AllReduce(l, comm::ReduceOp::kAvg)->Wait();
      EXPECT_NEAR(l.item<double>(), ref_losses[static_cast<size_t>(s)], 1e-5 * ref_losses[static_cast<size_t>(s)]);
    }
    const auto got = FullValuesOf(m);
    for (const auto& [fqn, values] : want) EXPECT_LE(RelErr(got.at(fqn), values), 1e-5) << fqn;
  }, FastRanks());
}

TEST(FsdpOnTpTest, TrainingMatchesOneRankAndCountsCollectivesPerAxis) { ExpectTrainingMatchesOneRank({}); }

// The plain parameter's gradient lives on mesh["dp"]: every "tp" coordinate holds a copy of it, and the root's
// global norm (reduced over the whole (dp, tp) mesh) counts it once, next to the TP gradients on (dp, tp).
TEST(FsdpOnTpTest, ClipGradNormCountsAPlainGradientOnTheDpMeshOnce) {
  Generator gen(3);
  TpMlp ref(gen, /*with_plain=*/true);
  Backward(MlpLoss(ref, GlobalInput(0), std::nullopt));
  // the plain parameter's gradient below: 2 in each of its 6 elements
  const double want = std::sqrt(std::pow(optim::ClipGradNorm(ref.Parameters(), 1e9), 2) + 6 * 4.0);
  comm::RunRanks(4, [&](comm::ProcessGroupPtr world) {
    dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2, 2}, {"dp", "tp"});
    Generator g(3);
    TpMlp m(g, true);
    ParallelizeByHand(m, mesh["tp"]);
    FSDPModule root = FullyShard(m, mesh["dp"]);  // torch's 2-D form: the plain parameter on mesh["dp"]
    ASSERT_EQ(dtensor::DTensor(m.Param("scale")).mesh(), mesh["dp"]);
    Backward(MlpLoss(m, RowsFor(GlobalInput(0), mesh.local_rank("dp"), 2), mesh["tp"]));
    Tensor(m.Param("scale")).set_grad(dtensor::DistributeTensor(Full({3, 2}, 2.0), mesh["dp"], {dtensor::Shard{0}}));
    EXPECT_NEAR(ClipGradNorm(root, 1e9), want, 1e-5 * want);
  }, FastRanks());
}

// shard_placement_fn over TP parameters picks a dim of the TP-local piece: fc.weight [8, 6] (S(0) on tp,
// local [4, 6]) has its 6 columns split 3 per dp rank; proj.weight [5, 8] (S(1) on tp, local [5, 4]) has
// its 4 local columns split again, 2 per dp rank, so dim 1's shard order is [tp, dp]. Biases keep dim 0.
FullyShardOptions TpColumns() {
  FullyShardOptions o;
  o.shard_placement_fn = [](const Tensor& p) -> std::optional<dtensor::Shard> {
    EXPECT_TRUE(p.is_distributed());  // as the module holds it: the TP DTensor
    if (p.dim() == 2) return dtensor::Shard{1};
    return std::nullopt;
  };
  return o;
}

TEST(FsdpOnTpTest, ShardPlacementFnShardsTheTpLocalPieceOnTheChosenDim) {
  Generator gen(3);
  TpMlp ref(gen);
  const auto full = FullValuesOf(ref);
  comm::RunRanks(4, [&](comm::ProcessGroupPtr world) {
    dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2, 2}, {"dp", "tp"});
    Generator g(3);
    TpMlp m(g);
    ParallelizeByHand(m, mesh["tp"]);
    std::map<std::string, dtensor::DTensorSpec> tp_specs;
    for (auto& [fqn, p] : m.NamedParameters()) tp_specs.emplace(fqn, dtensor::DTensor(p).spec());
    FSDPModule fsdp = FullyShard(m, mesh, TpColumns());
    const std::map<std::string, std::string> want = {{"fc.weight", "(dp, tp) [S(1), S(0)] {0: [1], 1: [0]}"},
                                                     {"fc.bias", "(dp, tp) [S(0), S(0)] {0: [1, 0]}"},
                                                     {"proj.weight", "(dp, tp) [S(1), S(1)] {1: [1, 0]}"},
                                                     {"proj.bias", "(dp, tp) [S(0), R] {0: [0]}"}};
    ExpectShardedLayout(m, want, full);
    fsdp.Unshard();
    for (auto& [fqn, p] : m.NamedParameters()) {
      SCOPED_TRACE(fqn);
      ASSERT_TRUE(p.is_distributed());
      EXPECT_EQ(dtensor::DTensor(p).spec(), tp_specs.at(fqn));
      EXPECT_EQ(dtensor::DTensor(p).FullTensor().ToDoubleVector(), full.at(fqn));
    }
  }, FastRanks());
  ExpectTrainingMatchesOneRank(TpColumns());
}

// PyTorch's 2-D form: fully_shard(module, mesh["dp"]) over parameters placed on mesh["tp"]. FSDP joins the two
// sub-meshes (DeviceMesh::Join) and lays parameters out exactly as FullyShard(module, mesh, {shard_axis: dp}).
TEST(FsdpOnTpTest, DpSubmeshOverTpParametersJoinsIntoTheWholeMeshLayout) {
  Generator gen(3);
  TpMlp ref(gen);
  Tensor ref_loss = MlpLoss(ref, GlobalInput(0), std::nullopt);
  comm::RunRanks(4, [&](comm::ProcessGroupPtr world) {
    dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2, 2}, {"dp", "tp"});
    EXPECT_EQ(mesh["dp"].Join(mesh["tp"]), mesh);
    EXPECT_EQ(mesh["tp"].Join(mesh["dp"]), mesh);  // root axis order, whatever the call order
    ::tessel::testing::ExpectErrorContains([&] { (void)mesh["tp"].Join(mesh); }, ErrorCode::kInvalidArgument,
                                           "axis 'tp' is in both");
    Generator g(3);
    TpMlp m(g, /*with_plain=*/true);
    ParallelizeByHand(m, mesh["tp"]);
    FullyShard(*m.Submodule("fc"), mesh["dp"]);
    FullyShard(*m.Submodule("proj"), mesh["dp"]);
    FullyShard(m, mesh["dp"]);
    // the root's plain parameter stays on mesh["dp"], as torch's fully_shard(m, mesh["dp"]) places it
    const std::map<std::string, std::string> want = {{"fc.weight", "[S(0), S(0)] {0: [1, 0]}"},
                                                     {"fc.bias", "[S(0), S(0)] {0: [1, 0]}"},
                                                     {"proj.weight", "[S(0), S(1)] {0: [0], 1: [1]}"},
                                                     {"proj.bias", "[S(0), R] {0: [0]}"},
                                                     {"scale", "[S(0)] {0: [0]}"}};
    for (auto& [fqn, p] : m.NamedParameters()) {
      SCOPED_TRACE(fqn);
      const dtensor::DTensorSpec& spec = dtensor::DTensor(p).spec();
      EXPECT_EQ(spec.mesh(), fqn == "scale" ? mesh["dp"].topology() : mesh.topology());
      EXPECT_EQ(dtensor::PlacementsToString(spec.placements()) + " " + dtensor::ShardOrderToString(spec.shard_order()),
                want.at(fqn));
    }
    comm::CommTracer tracer;
    Tensor loss = MlpLoss(m, RowsFor(GlobalInput(0), mesh.local_rank("dp"), 2), mesh["tp"]);
    Backward(loss);
    // fc's, proj's and the root's (its unused plain parameter still joins: [Note: FSDP gradient flags])
    EXPECT_EQ(tracer.Count(CollectiveKind::kReduceScatter, "dp"), 3) << tracer.Summary();
    Tensor l = Full({1}, dtensor::DTensor(loss).FullTensor().item<double>(), DType::kFloat64);
    mesh.axis_group("dp")->AllReduce(l, comm::ReduceOp::kAvg)->Wait();
    EXPECT_NEAR(l.item<double>(), ref_loss.item<double>(), 1e-6 * std::abs(ref_loss.item<double>()));
  }, FastRanks());
}

}  // namespace
}  // namespace tessel::fsdp::testing
