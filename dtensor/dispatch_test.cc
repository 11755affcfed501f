#include "dtensor/dispatch.h"

#include <gtest/gtest.h>

#include "core/autograd/call.h"
#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/dispatch/dispatcher.h"
#include "core/ops/elementwise.h"
#include "core/ops/matmul.h"
#include "core/ops/optimizer.h"
#include "core/ops/reduction.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"
#include "core/tensor/factory.h"
#include "dtensor/testing/rules_testing.h"

namespace tessel::dtensor {
namespace {

using testing::ExpectError;
using testing::OnMesh1D;
using testing::Values;

// ---- registry ----------------------------------------------------------------------------------------

// The ops whose DTensor path gathers everything to Replicate. Adding one must be a deliberate act: put
// it here with the reason (and prefer writing a rule).
const std::vector<std::string> kReplicateOnly = {};

TEST(ShardingRuleRegistryTest, EveryRegisteredOpHasARuleOrAnExplicitReplicateOnlyMark) {
  std::vector<std::string> missing;
  for (const OpDef* op : AllOps()) {
    if (op->name.rfind("test_", 0) == 0) continue;  // ops registered by tests
    if (FindShardingRule(op->name) == nullptr) missing.push_back(op->name);
  }
  EXPECT_TRUE(missing.empty()) << "ops without a sharding rule or replicate-only mark: "
                               << ::testing::PrintToString(missing);
  std::vector<std::string> replicate_only;
  for (const auto& [name, reason] : ReplicateOnlyOps()) {
    if (name.rfind("test_", 0) != 0) replicate_only.push_back(name);
  }
  EXPECT_EQ(replicate_only, kReplicateOnly);
  EXPECT_GE(AllOps().size(), 79u + 2u);  // every family of core/ops is linked (+ 2 test ops)
}

TensorList DoubleKernel(std::span<const Tensor> in, const Attrs&) {
  Tensor out = Empty(in[0].sizes(), in[0].dtype());
  const std::vector<double> v = in[0].ToDoubleVector();
  std::vector<double> d;
  for (double x : v) d.push_back(2 * x);
  return {FromDoubles(d, in[0].sizes(), in[0].dtype())};
}
const OpDef& kTestReplicateOnly = RegisterOp({.name = "test_replicate_only_double", .cpu = DoubleKernel});
const bool kTestMarked = RegisterReplicateOnly("test_replicate_only_double", "test op: the mechanism itself");
const OpDef& kTestNoRule = RegisterOp({.name = "test_no_rule", .cpu = DoubleKernel});

TEST(DispatchTest, ReplicateOnlyOpGathersRunsDenseAndReturnsReplicate) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    const Tensor full = Values({9, 2});
    DTensor x = DistributeTensor(full, mesh, ParsePlacements("S(0)"));
    comm::CommTracer tracer;
    DTensor y(autograd::CallOp1(kTestReplicateOnly, {x}));
    EXPECT_EQ(tracer.Summary(), "all_gather(x) x1");
    EXPECT_EQ(y.placements(), ParsePlacements("R"));
    std::vector<double> want;
    for (double v : full.ToDoubleVector()) want.push_back(2 * v);
    EXPECT_EQ(y.ToLocal().ToDoubleVector(), want);
    EXPECT_TRUE(PropagateSharding(kTestReplicateOnly, TensorList{x}, Attrs()).replicate_only);
  });
}

TEST(DispatchTest, OpWithoutRuleRaisesUnimplementedNamingTheCall) {
  OnMesh1D(2, [](const DeviceMesh& mesh) {
    DTensor x = DistributeTensor(Values({4}), mesh, ParsePlacements("S(0)"));
    ExpectError(ErrorCode::kUnimplemented, {"test_no_rule", "no sharding rule", "[4] float64 [S(0)]", "rank"},
                [&] { autograd::CallOp1(kTestNoRule, {x}); });
  });
}

// ---- handler semantics -----------------------------------------------------------------------------

TEST(DispatchTest, OperandsInTheSameLayoutNeedNoCommunication) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    DTensor a = DistributeTensor(Values({13, 3}), mesh, ParsePlacements("S(0)"));
    DTensor b = DistributeTensor(Values({13, 3}, DType::kFloat64, 1), mesh, ParsePlacements("S(0)"));
    comm::CommTracer tracer;
    DTensor c(Relu(Add(a, b)));
    EXPECT_EQ(tracer.Total(), 0);
    EXPECT_EQ(c.placements(), ParsePlacements("S(0)"));
    EXPECT_EQ(c.local_shape(), a.local_shape());
  });
}

TEST(DispatchTest, ADenseZeroDimTensorIsAReplicatedScalar) {
  OnMesh1D(2, [](const DeviceMesh& mesh) {
    const Tensor full = Values({5, 2});
    DTensor a = DistributeTensor(full, mesh, ParsePlacements("S(0)"));
    DTensor c(Mul(a, Scalar(3.0, DType::kFloat64)));
    EXPECT_EQ(c.placements(), ParsePlacements("S(0)"));
    testing::ExpectClose(c.FullTensor().ToDoubleVector(), Mul(full, Scalar(3.0, DType::kFloat64)).ToDoubleVector(), 0,
                         "scaled");
  });
}

TEST(DispatchTest, MixingDTensorAndDenseTensorRaisesNamingBothKinds) {
  OnMesh1D(2, [](const DeviceMesh& mesh) {
    DTensor a = DistributeTensor(Values({4, 2}), mesh, ParsePlacements("S(0)"));
    ExpectError(ErrorCode::kInvalidArgument,
                {"add: got mixed DTensor and dense tensor inputs", "input 0 is a DTensor of shape [4, 2]",
                 "input 1 is a dense tensor of shape [2]", "DistributeTensor", "rank"},
                [&] { Add(a, Values({2})); });
  });
}

// A one-element dense tensor of any rank is a replicated scalar, as torch's (numel() == 1): DTensor *
// torch.ones(1) raised "mixed DTensor and dense tensor inputs"; its gradient is the full sum on every rank.
TEST(DispatchTest, OneElementDenseTensorsAreReplicatedScalars) {
  OnMesh1D(2, [](const DeviceMesh& mesh) {
    const Tensor full = Values({4, 2});
    DTensor a = DistributeTensor(full, mesh, ParsePlacements("S(0)"));
    Tensor s = Full({1, 1}, 3.0, DType::kFloat64);
    s.set_requires_grad(true);
    DTensor c(Mul(a.tensor(), s));
    EXPECT_EQ(c.placements(), ParsePlacements("S(0)"));
    testing::ExpectClose(c.FullTensor().ToDoubleVector(), Mul(full, Scalar(3.0, DType::kFloat64)).ToDoubleVector(), 0,
                         "scaled");
    Backward(Sum(c.tensor()));
    double total = 0;
    for (double v : full.ToDoubleVector()) total += v;
    ASSERT_TRUE(s.grad().defined());  // (a Replicate DTensor, as the 0-d operands' gradients)
    const Tensor g = s.grad().is_distributed() ? DTensor(s.grad()).FullTensor() : s.grad();
    testing::ExpectClose(g.ToDoubleVector(), {total}, 1e-12, "one-element operand's grad");
    ExpectError(ErrorCode::kInvalidArgument, {"mul: got mixed DTensor and dense tensor inputs"},
                [&] { Mul(a.tensor(), Values({2})); });  // two elements: still refused
  });
}

// Under implicit replication a dense constant becomes a Replicate DTensor before autograd records the op
// (core/dispatch/dispatcher.h ReplicateImplicitly), so the backward formula, run later outside the guard,
// divides a DTensor gradient by a DTensor; it raised "mixed DTensor and dense tensor inputs" there.
TEST(DispatchAutogradTest, ImplicitlyReplicatedConstantsStayDTensorsInBackward) {
  OnMesh1D(2, [](const DeviceMesh& mesh) {
    const Tensor full = Values({4, 2}), divisor = Values({2});  // divisor: -1.375, -0.5
    DTensor a = DistributeTensor(full, mesh, ParsePlacements("S(0)"));
    a.set_requires_grad(true);
    Tensor y;
    {
      ImplicitReplicationGuard on;
      y = Div(a.tensor(), divisor);
    }
    EXPECT_EQ(DTensor(y).placements(), ParsePlacements("S(0)"));
    Backward(Sum(y));
    ASSERT_TRUE(a.grad().defined());
    std::vector<double> want;
    for (int64_t i = 0; i < 8; ++i) want.push_back(1.0 / divisor.ToDoubleVector()[static_cast<size_t>(i % 2)]);
    testing::ExpectClose(a.grad().FullTensor().ToDoubleVector(), want, 1e-15, "grad");
    // Without the guard the dense operand is refused, in forward as before.
    ExpectError(ErrorCode::kInvalidArgument, {"div: got mixed DTensor and dense tensor inputs"},
                [&] { Div(a.tensor(), divisor); });
  });
}

TEST(DispatchTest, OperandsOnDifferentMeshesRaiseNamingBothMeshes) {
  comm::RunRanks(
      2,
      [](comm::ProcessGroupPtr pg) {
        DeviceMesh m1 = InitDeviceMesh(pg, {2}, {"x"});
        DeviceMesh m2 = InitDeviceMesh(pg, {2}, {"y"});
        DTensor a = DistributeTensor(Values({4}), m1, ParsePlacements("S(0)"));
        DTensor b = DistributeTensor(Values({4}), m2, ParsePlacements("S(0)"));
        ExpectError(ErrorCode::kInvalidArgument, {"add: input 1 lives on", "axes=[y]", "axes=[x]", "share a mesh"},
                    [&] { Add(a, b); });
      },
      testing::FastRanks());
}

TEST(DispatchTest, InPlaceOpThatCannotKeepItsLayoutRaisesNamingOpPlacementsMeshAndRank) {
  OnMesh1D(2, [](const DeviceMesh& mesh) {
    Tensor local = Values({3});
    DTensor m = DTensor::FromLocal(local, mesh, ParsePlacements("P(max)"));
    ExpectError(
        ErrorCode::kInvalidArgument,
        {"mul_: in-place op cannot keep the layout", "[P(max)]", "[3] float64", "DeviceMesh(shape=[2]", "at rank"},
        [&] { MulScalarInPlace(m, 2.0); });
  });
}

TEST(DispatchTest, InPlaceAddMovesTheSourceAndWritesTheLocalShard) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    const Tensor a_full = Values({7, 2}), b_full = Values({7, 2}, DType::kFloat64, 2);
    DTensor a = DistributeTensor(a_full, mesh, ParsePlacements("S(0)"));
    DTensor b = DistributeTensor(b_full, mesh, ParsePlacements("R"));
    const uint32_t v0 = a.tensor().impl()->version();
    comm::CommTracer tracer;
    AddInPlace(a, b, 0.5);
    EXPECT_EQ(tracer.Total(), 0);  // R -> S(0) is a local chunk
    EXPECT_GT(a.tensor().impl()->version(), v0);
    const Tensor want = Add(a_full, MulScalar(b_full, 0.5));
    testing::ExpectClose(a.FullTensor().ToDoubleVector(), want.ToDoubleVector(), 0, "a");
  });
}

// Candidates are priced as PyTorch prices them (a fixed latency per ring collective, a 1 µs penalty on
// Shard -> Shard, bytes at 87.7 GB/s), so x[S(0)] @ w[S(0)] gathers a small w (torch: S(0) output) and re-shards
// a small x to the contraction dim when w is large (1 MiB here: its all_gather would cost ~8 µs more).
TEST(DispatchTest, StrategiesArePricedAsPyTorchPricesThem) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    DTensor x = DistributeTensor(Values({8, 64}), mesh, ParsePlacements("S(0)"));
    DTensor small_w = DistributeTensor(Values({64, 8}), mesh, ParsePlacements("S(0)"));
    DTensor large_w = DistributeTensor(Values({64, 2048}), mesh, ParsePlacements("S(0)"));
    const std::string small = PropagateSharding(GetOp("matmul"), TensorList{x, small_w}, Attrs()).ToString();
    EXPECT_EQ(small.substr(0, small.find(',', small.find("outputs"))),
              "shard: inputs [S(0)], [R] -> outputs [S(0)]") << small;
    const std::string large = PropagateSharding(GetOp("matmul"), TensorList{x, large_w}, Attrs()).ToString();
    EXPECT_EQ(large.substr(0, large.find(',', large.find("outputs"))),
              "contract: inputs [S(1)], [S(0)] -> outputs [P(sum)]") << large;
  });
}

TEST(DispatchTest, CheapestStrategyWinsAndTiesFollowTheTable) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    DTensor a = DistributeTensor(Values({8, 8}), mesh, ParsePlacements("S(0)"));
    DTensor b = DistributeTensor(Values({8, 8}), mesh, ParsePlacements("S(1)"));
    DTensor r = DistributeTensor(Values({8, 8}), mesh, ParsePlacements("R"));
    // Either operand could move with one all_to_all; the tie goes to the lower sharded dim (PyTorch's order).
    // The third candidate replicates both (every pointwise op's way out when no operand's layout is legal).
    ShardingDecision d = PropagateSharding(GetOp("add"), TensorList{a, b}, Attrs());
    EXPECT_EQ(d.ToString(), "follow: inputs [S(0)], [S(0)] -> outputs [S(0)], 96 B, 1 moved, 3 candidates");
    d = PropagateSharding(GetOp("add"), TensorList{b, a}, Attrs());
    EXPECT_EQ(d.ToString(), "follow: inputs [S(0)], [S(0)] -> outputs [S(0)], 96 B, 1 moved, 3 candidates");
    // Replicate operands stay Replicate: chunking them is free but changes a layout (moved inputs count).
    d = PropagateSharding(GetOp("matmul"), TensorList{r, r}, Attrs());
    EXPECT_EQ(d.ToString(), "replicate: inputs [R], [R] -> outputs [R], 0 B, 0 moved, 1 candidates");
    // x [S(0)] @ w [R]: rows of x sharded, no communication.
    d = PropagateSharding(GetOp("matmul"), TensorList{a, r}, Attrs());
    EXPECT_EQ(d.ToString(), "shard: inputs [S(0)], [R] -> outputs [S(0)], 0 B, 0 moved, 2 candidates");
  });
}

TEST(DispatchTest, RedistributeBytesFollowsTheTransitionTable) {
  auto mesh = std::make_shared<const MeshTopology>(MeshTopology::Iota({4}, {"x"}));
  DTensorSpec s0(mesh, ParsePlacements("S(0)"), {8, 4}, DType::kFloat32);          // 128 B global, 32 B local
  EXPECT_EQ(RedistributeBytes(s0, DefaultState(ParsePlacements("R"), 2)), 96);     // all_gather
  EXPECT_EQ(RedistributeBytes(s0, DefaultState(ParsePlacements("S(1)"), 2)), 24);  // all_to_all
  DTensorSpec p(mesh, ParsePlacements("P(sum)"), {8, 4}, DType::kFloat32);
  EXPECT_EQ(RedistributeBytes(p, DefaultState(ParsePlacements("R"), 2)), 192);    // all_reduce
  EXPECT_EQ(RedistributeBytes(p, DefaultState(ParsePlacements("S(0)"), 2)), 96);  // reduce_scatter
  EXPECT_EQ(RedistributeBytes(p, DefaultState(ParsePlacements("P(max)"), 2)), std::nullopt);
  DTensorSpec r(mesh, ParsePlacements("R"), {8, 4}, DType::kFloat32);
  EXPECT_EQ(RedistributeBytes(r, DefaultState(ParsePlacements("S(0)"), 2)), 0);    // local chunk
  EXPECT_EQ(RedistributeBytes(r, DefaultState(ParsePlacements("P(sum)"), 2)), 0);  // partition
}

// ---- autograd through DTensor ops --------------------------------------------------------------------

TEST(DispatchAutogradTest, AccumulateGradOnDTensorLeavesTwice) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    const Tensor full = Values({5, 3});
    DTensor x = DistributeTensor(full, mesh, ParsePlacements("S(0)"));
    x.set_requires_grad(true);
    for (int step = 0; step < 2; ++step) Backward(Sum(Mul(x, x)));
    ASSERT_TRUE(x.grad().defined());
    EXPECT_EQ(x.grad().placements(), ParsePlacements("S(0)"));
    std::vector<double> want;
    for (double v : full.ToDoubleVector()) want.push_back(4 * v);  // 2x, accumulated twice
    testing::ExpectClose(x.grad().FullTensor().ToDoubleVector(), want, 0, "grad");
  });
}

struct Mlp {
  Tensor w1, b1, w2, b2;  // [H, I], [H], [O, H], [O]
};

Tensor MlpLoss(const Mlp& m, const Tensor& x, const Tensor& t) {
  return Mean(Pow(Sub(Linear(Relu(Linear(x, m.w1, m.b1)), m.w2, m.b2), t), 2.0));
}

void SgdStep(const Mlp& m, double lr) {
  NoGradGuard no_grad;
  for (const Tensor& p : {m.w1, m.b1, m.w2, m.b2}) SgdStepInPlace(p, p.grad(), Tensor(), lr, 0, 0, 0, false, false);
  for (const Tensor& p : {m.w1, m.b1, m.w2, m.b2}) p.set_grad(Tensor());
}

// Tensor parallel MLP on 2 ranks (hidden 7: uneven 4 + 3): w1/b1 Colwise [S(0)], w2 Rowwise [S(1)],
// b2 [R]. Two SGD steps equal the single-rank run within 1e-5 (float32).
TEST(DispatchAutogradTest, ColwiseRowwiseMlpTrainsLikeTheSingleRankModel) {
  OnMesh1D(2, [](const DeviceMesh& mesh) {
    const DType f = DType::kFloat32;
    const Tensor x = Values({4, 6}, f, 1), t = Values({4, 5}, f, 2);
    const Tensor w1 = Values({7, 6}, f, 3), b1 = Values({7}, f, 4), w2 = Values({5, 7}, f, 5), b2 = Values({5}, f, 6);
    auto leaf = [](const Tensor& v) { return Detach(Add(v, ZerosLike(v))).set_requires_grad(true); };
    Mlp dense{leaf(w1), leaf(b1), leaf(w2), leaf(b2)};
    auto dist = [&](const Tensor& v, const char* p) {
      return DistributeTensor(v, mesh, ParsePlacements(p)).set_requires_grad(true).tensor();
    };
    Mlp tp{dist(w1, "S(0)"), dist(b1, "S(0)"), dist(w2, "S(1)"), dist(b2, "R")};
    const DTensor xd = DistributeTensor(x, mesh, ParsePlacements("R"));
    const DTensor td = DistributeTensor(t, mesh, ParsePlacements("R"));
    for (int step = 0; step < 2; ++step) {
      const Tensor want = MlpLoss(dense, x, t);
      comm::CommTracer fwd;
      const DTensor got(MlpLoss(tp, xd, td));
      EXPECT_EQ(fwd.Summary(), "all_reduce(x) x1");  // the Rowwise partial sum, reduced once (before Pow)
      EXPECT_NEAR(got.FullTensor().item<double>(), want.item<double>(), 1e-5);
      Backward(want);
      comm::CommTracer bwd;
      Backward(got);
      // Pow's backward reads its saved input (the Partial y - t) through a non-linear op: one all_reduce.
      EXPECT_EQ(bwd.Summary(), "all_reduce(x) x1");
      EXPECT_EQ(DTensor(tp.w1.grad()).placements(), ParsePlacements("S(0)"));
      EXPECT_EQ(DTensor(tp.b1.grad()).placements(), ParsePlacements("S(0)"));
      EXPECT_EQ(DTensor(tp.w2.grad()).placements(), ParsePlacements("S(1)"));
      EXPECT_EQ(DTensor(tp.b2.grad()).placements(), ParsePlacements("R"));
      comm::CommTracer opt;
      SgdStep(dense, 0.1);
      SgdStep(tp, 0.1);
      EXPECT_EQ(opt.Total(), 0);
    }
    const std::vector<std::pair<Tensor, Tensor>> params = {
        {dense.w1, tp.w1}, {dense.b1, tp.b1}, {dense.w2, tp.w2}, {dense.b2, tp.b2}};
    for (const auto& [d, s] : params) {
      testing::ExpectClose(DTensor(s).FullTensor().ToDoubleVector(), d.ToDoubleVector(), 1e-5, "param");
    }
  });
}

TEST(DispatchAutogradTest, OptimizerStepReducesAPartialGradientAndRejectsMismatchedState) {
  OnMesh1D(2, [](const DeviceMesh& mesh) {
    DTensor p = DistributeTensor(Values({4}), mesh, ParsePlacements("R"));
    DTensor g = DTensor::FromLocal(Values({4}, DType::kFloat64, 1), mesh, ParsePlacements("P(sum)"));
    comm::CommTracer tracer;
    SgdStepInPlace(p, g, Tensor(), 0.5, 0, 0, 0, false, false);
    EXPECT_EQ(tracer.Summary(), "all_reduce(x) x1");  // DDP-style: the gradient is all-reduced
    const std::vector<double> p0 = Values({4}).ToDoubleVector(), g0 = Values({4}, DType::kFloat64, 1).ToDoubleVector();
    std::vector<double> want;
    for (size_t i = 0; i < p0.size(); ++i) want.push_back(p0[i] - 0.5 * 2 * g0[i]);
    testing::ExpectClose(p.ToLocal().ToDoubleVector(), want, 0, "param");
    DTensor buf = DistributeTensor(Values({4}), mesh, ParsePlacements("S(0)"));
    ExpectError(ErrorCode::kInvalidArgument,
                {"sgd_step_: optimizer state input 2 has placements [S(0)] but the parameter has [R]", "rank"},
                [&] { SgdStepInPlace(p, g, buf, 0.5, 0.9, 0, 0, false, true); });
  });
}

}  // namespace
}  // namespace tessel::dtensor
