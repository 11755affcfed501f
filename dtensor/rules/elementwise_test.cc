// Rules of dtensor/rules/elementwise.cc: sharded == dense, forward and backward, even and uneven sizes.
#include "core/ops/elementwise.h"

#include <gtest/gtest.h>

#include "core/ops/unary.h"
#include "dtensor/dispatch.h"
#include "dtensor/testing/rules_testing.h"

namespace tessel::dtensor {
namespace {

using testing::CommOf;
using testing::EvenAndUneven;
using testing::ExpectMatchesDense;
using testing::OnMesh1D;
using testing::OnMesh2D;
using testing::Values;

struct Pair {
  const char* a;
  const char* b;
};
const std::vector<Pair> kPairs = {{"S(0)", "S(0)"},     {"S(0)", "R"},        {"R", "S(1)"},        {"S(1)", "S(0)"},
                                  {"P(sum)", "R"},      {"R", "R"},           {"P(sum)", "P(sum)"}, {"P(avg)", "S(0)"},
                                  {"P(avg)", "P(sum)"}, {"P(sum)", "P(avg)"}, {"P(max)", "P(avg)"}};

TEST(ElementwiseRulesTest, BinaryOpsMatchDenseForEveryLayoutPair) {
  const std::vector<std::function<Tensor(const TensorList&)>> ops = {
      [](const TensorList& in) { return Add(in[0], in[1]); },
      [](const TensorList& in) { return Sub(in[0], in[1]); },
      [](const TensorList& in) { return Mul(in[0], in[1]); },
      [](const TensorList& in) { return Div(in[0], AddScalar(Abs(in[1]), 1.0)); },
  };
  OnMesh1D(4, [&](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(4)) {
      for (const Pair& p : kPairs) {
        for (size_t k = 0; k < ops.size(); ++k) {
          SCOPED_TRACE(Str("op ", k, " n ", n, " ", p.a, " with ", p.b));
          ExpectMatchesDense(mesh, {Values({n, 3}), Values({n, 3}, DType::kFloat64, 1)}, {p.a, p.b}, ops[k]);
        }
      }
    }
  });
}

TEST(ElementwiseRulesTest, BroadcastingMapsShardedDimsOfTheSmallerOperand) {
  OnMesh2D([](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(2)) {
      auto add = [](const TensorList& in) { return Add(in[0], in[1]); };
      // [n, 5] + [5]: the bias follows dim 1's sharding, is Replicate for dim 0.
      DTensor y =
          ExpectMatchesDense(mesh, {Values({n, 5}), Values({5}, DType::kFloat64, 2)}, {"S(0), S(1)", "R, S(0)"}, add);
      EXPECT_EQ(y.placements(), ParsePlacements("S(0), S(1)"));
      // [n, 1] + [1, 5] -> [n, 5]: each operand keeps its layout, dim 0 from the first and dim 1 from the second
      // (torch's expansion per mesh dim; following one operand whole gathered the other)
      y = ExpectMatchesDense(mesh, {Values({n, 1}), Values({1, 5}, DType::kFloat64, 3)}, {"S(0), R", "R, S(1)"}, add);
      EXPECT_EQ(y.placements(), ParsePlacements("S(0), S(1)"));
    }
  });
}

TEST(ElementwiseRulesTest, PartialLinearityKeepsPartialWithoutCommunication) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    const Tensor a_full = Values({6, 2}), b_full = Values({6, 2}, DType::kFloat64, 1);
    DTensor p = testing::MakeInput(a_full, mesh, ParsePlacements("P(sum)"), false).dt;
    DTensor q = testing::MakeInput(b_full, mesh, ParsePlacements("P(sum)"), false).dt;
    DTensor r = DistributeTensor(b_full, mesh, ParsePlacements("R"));
    DTensor out;
    EXPECT_EQ(CommOf([&] { out = DTensor(Add(p, q)); }), "");
    EXPECT_EQ(out.placements(), ParsePlacements("P(sum)"));
    EXPECT_EQ(CommOf([&] { out = DTensor(Add(p, r)); }), "");  // r partitioned: exact, no comm
    EXPECT_EQ(out.placements(), ParsePlacements("P(sum)"));
    testing::ExpectClose(out.FullTensor().ToDoubleVector(), Add(a_full, b_full).ToDoubleVector(), 0, "p + r");
    EXPECT_EQ(CommOf([&] { out = DTensor(Mul(p, r)); }), "");
    EXPECT_EQ(out.placements(), ParsePlacements("P(sum)"));
    EXPECT_EQ(CommOf([&] { out = DTensor(MulScalar(Neg(p), 3.0)); }), "");
    EXPECT_EQ(out.placements(), ParsePlacements("P(sum)"));
    EXPECT_EQ(CommOf([&] { out = DTensor(Mul(p, q)); }), "all_reduce(x) x1");          // P * P is not linear
    EXPECT_EQ(CommOf([&] { out = DTensor(AddScalar(p, 1.0)); }), "all_reduce(x) x1");  // affine: not for sum
    EXPECT_EQ(out.placements(), ParsePlacements("R"));
    DTensor m = testing::MakeInput(a_full, mesh, ParsePlacements("P(max)"), false).dt;
    EXPECT_EQ(CommOf([&] { out = DTensor(AddScalar(m, 1.0)); }), "");  // max(x_i) + 1 = max(x_i + 1)
    EXPECT_EQ(out.placements(), ParsePlacements("P(max)"));
    EXPECT_EQ(CommOf([&] { out = DTensor(Neg(m)); }), "");  // -max = min(-x)
    EXPECT_EQ(out.placements(), ParsePlacements("P(min)"));
    testing::ExpectClose(out.FullTensor().ToDoubleVector(), Neg(a_full).ToDoubleVector(), 0, "neg");
  });
}

// Partial operands of different ops (torch: P(avg) + P(sum) is P(avg)): the lead keeps its op, the other
// operand is all-reduced; this raised "no legal sharding strategy" (every row asked for one op).
TEST(ElementwiseRulesTest, PartialsOfDifferentOpsReplicateTheOtherOperand) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    const Tensor a_full = Values({6, 2}), b_full = Values({6, 2}, DType::kFloat64, 1);
    DTensor avg = testing::MakeInput(a_full, mesh, ParsePlacements("P(avg)"), false).dt;
    DTensor sum = testing::MakeInput(b_full, mesh, ParsePlacements("P(sum)"), false).dt;
    DTensor out;
    EXPECT_EQ(CommOf([&] { out = DTensor(Add(avg, sum)); }), "all_reduce(x) x1");
    EXPECT_EQ(out.placements(), ParsePlacements("P(avg)"));
    testing::ExpectClose(out.FullTensor().ToDoubleVector(), Add(a_full, b_full).ToDoubleVector(), 1e-6, "avg + sum");
    EXPECT_EQ(CommOf([&] { out = DTensor(Sub(sum, avg)); }), "all_reduce(x) x1");  // P(sum) has no "SSR" row
    EXPECT_EQ(out.placements(), ParsePlacements("P(avg)"));
    testing::ExpectClose(out.FullTensor().ToDoubleVector(), Sub(b_full, a_full).ToDoubleVector(), 1e-6, "sum - avg");
  });
}

TEST(ElementwiseRulesTest, ShardedOperandsOnDifferentDimsMoveOneOperand) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    DTensor a = DistributeTensor(Values({8, 8}), mesh, ParsePlacements("S(0)"));
    DTensor b = DistributeTensor(Values({8, 8}), mesh, ParsePlacements("S(1)"));
    DTensor c;
    EXPECT_EQ(CommOf([&] { c = DTensor(Add(a, b)); }), "all_to_all(x) x1");
    EXPECT_EQ(c.placements(), ParsePlacements("S(0)"));
  });
}

// Equal-cost candidates resolve in PyTorch's order (its pointwise strategies list the output's Shard(0),
// Shard(1), ... before the Partial-keeping ones): the lower sharded dim, whichever operand holds it, and a
// reduce-scattered Partial rather than a partitioned Shard. Before, the first operand's layout won both ties.
TEST(ElementwiseRulesTest, EqualCostChoicesFollowPyTorchsOrder) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    const Tensor a_full = Values({8, 8}), b_full = Values({8, 8}, DType::kFloat64, 1);
    DTensor s1 = DistributeTensor(a_full, mesh, ParsePlacements("S(1)"));
    DTensor s0 = DistributeTensor(b_full, mesh, ParsePlacements("S(0)"));
    DTensor p = testing::MakeInput(a_full, mesh, ParsePlacements("P(sum)"), false).dt;
    DTensor out;
    EXPECT_EQ(CommOf([&] { out = DTensor(Add(s1, s0)); }), "all_to_all(x) x1");
    EXPECT_EQ(out.placements(), ParsePlacements("S(0)"));
    testing::ExpectClose(out.FullTensor().ToDoubleVector(), Add(a_full, b_full).ToDoubleVector(), 0, "s1 + s0");
    EXPECT_EQ(CommOf([&] { out = DTensor(Sub(p, s0)); }), "reduce_scatter(x) x1");
    EXPECT_EQ(out.placements(), ParsePlacements("S(0)"));
    testing::ExpectClose(out.FullTensor().ToDoubleVector(), Sub(a_full, b_full).ToDoubleVector(), 1e-12, "p - s0");
  });
}

// The bytes tie-break counts each step's own piece (a second gather sends the grown piece, a second
// reduce-scatter the shrunk one): gathering an [S(0), S(1)] operand twice and reduce-scattering a [P, P] one
// twice cost the same in torch's model and now send the same bytes, so the sharded output comes first, as
// torch 2.15 picks it; counting the first step's piece for every step had the gathers send half as much.
TEST(ElementwiseRulesTest, TwoStepMovesCountEachStepsPieceAsTorchTies) {
  OnMesh2D([](const DeviceMesh& mesh) {
    const Tensor a_full = Values({4, 8}), b_full = Values({4, 8}, DType::kFloat64, 1);
    DTensor s = DistributeTensor(a_full, mesh, ParsePlacements("S(0), S(1)"));
    DTensor p = testing::MakeInput(b_full, mesh, ParsePlacements("P(sum), P(sum)"), false).dt;
    DTensor out;
    EXPECT_EQ(CommOf([&] { out = DTensor(Mul(s, p)); }), "reduce_scatter(dp) x1, reduce_scatter(tp) x1");
    EXPECT_EQ(out.placements(), ParsePlacements("S(0), S(1)"));
    testing::ExpectClose(out.FullTensor().ToDoubleVector(), Mul(a_full, b_full).ToDoubleVector(), 1e-12, "s * p");
  });
}

// Candidates are priced as torch's redistribute_cost prices them: over its greedy planner's steps, the mesh dims from
// last to first for a sharded source (generate_greedy_transform_infos), so a move that gathers on dim 0 after a
// local chunk on dim 1 sends half the bytes. Expected placements are torch 2.15's (the placement sweep,
// tools/dev/dtensor_placements); priced with the dims in mesh order, [S(0), S(1)] had won.
TEST(ElementwiseRulesTest, MovesArePricedInTorchsGreedyStepOrder) {
  OnMesh2D([](const DeviceMesh& mesh) {
    const Tensor a_full = Values({4, 8}), b_full = Values({4, 8}, DType::kFloat64, 1);
    DTensor p = testing::MakeInput(a_full, mesh, ParsePlacements("P(sum), S(0)"), false).dt;
    DTensor s = DistributeTensor(b_full, mesh, ParsePlacements("S(0), S(1)"));
    DTensor out;
    // s moves [S(0), S(1)] -> [R, S(0)]: dim 0 gathered over dp, then tp all-to-alls dim 1 into dim 0
    EXPECT_EQ(CommOf([&] { out = DTensor(Mul(p, s)); }), "all_gather(dp) x1, all_to_all(tp) x1");
    EXPECT_EQ(out.placements(), ParsePlacements("P(sum), S(0)"));  // was [S(0), S(1)]
    testing::ExpectClose(out.FullTensor().ToDoubleVector(), Mul(a_full, b_full).ToDoubleVector(), 1e-12, "p * s");
  });
}

// A Shard is never padded into a Partial to meet another operand (PyTorch prices that move infinite) while
// any other candidate exists: a bias sharded on its only dim joins a Partial matrix by reduce-scattering the
// matrix, although padding the small bias moves fewer bytes. An in-place op writing a Partial has no other
// candidate and still pads its source; operands crossed over two mesh axes reduce-scatter both Partials.
TEST(ElementwiseRulesTest, ShardsArePaddedToPartialsOnlyWhenNothingElseFits) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    const Tensor m_full = Values({8, 8}), bias_full = Values({8}, DType::kFloat64, 1);
    DTensor p = testing::MakeInput(m_full, mesh, ParsePlacements("P(sum)"), false).dt;
    DTensor bias = DistributeTensor(bias_full, mesh, ParsePlacements("S(0)"));
    DTensor out;
    EXPECT_EQ(CommOf([&] { out = DTensor(Add(p, bias)); }), "reduce_scatter(x) x1");
    EXPECT_EQ(out.placements(), ParsePlacements("S(1)"));
    testing::ExpectClose(out.FullTensor().ToDoubleVector(), Add(m_full, bias_full).ToDoubleVector(), 1e-12, "p + b");
    DTensor s0 = DistributeTensor(m_full, mesh, ParsePlacements("S(0)"));
    AddInPlace(p, s0, 1.0);
    EXPECT_EQ(p.placements(), ParsePlacements("P(sum)"));
    testing::ExpectClose(p.FullTensor().ToDoubleVector(), MulScalar(m_full, 2.0).ToDoubleVector(), 1e-12, "p += s0");
  });
  OnMesh2D([](const DeviceMesh& mesh) {
    const Tensor a_full = Values({4, 6}), b_full = Values({4, 6}, DType::kFloat64, 1);
    DTensor a = testing::MakeInput(a_full, mesh, ParsePlacements("P(sum), S(0)"), false).dt;
    DTensor b = testing::MakeInput(b_full, mesh, ParsePlacements("S(0), P(sum)"), false).dt;
    // Each operand's Partial is reduce-scattered onto dim 0 rather than padding the other's Shard: torch 2.15's
    // (S(0), S(0)) (the placement sweep, at [4, 8])
    DTensor out(Sub(a, b));
    EXPECT_EQ(out.placements(), ParsePlacements("S(0), S(0)"));
    testing::ExpectClose(out.FullTensor().ToDoubleVector(), Sub(a_full, b_full).ToDoubleVector(), 1e-12, "a - b");
  });
}

TEST(ElementwiseRulesTest, CloneKeepsPartialAndLikeOpsReplicateIt) {
  OnMesh1D(2, [](const DeviceMesh& mesh) {
    const Tensor full = Values({3, 2});
    DTensor p = testing::MakeInput(full, mesh, ParsePlacements("P(sum)"), false).dt;
    DTensor s = DistributeTensor(full, mesh, ParsePlacements("S(1)"));
    EXPECT_EQ(DTensor(Clone(p)).placements(), ParsePlacements("P(sum)"));
    testing::ExpectClose(DTensor(Clone(p)).FullTensor().ToDoubleVector(), full.ToDoubleVector(), 0, "clone");
    const DTensor ones(OnesLike(p)), zeros(ZerosLike(s));
    EXPECT_EQ(ones.placements(), ParsePlacements("R"));
    EXPECT_EQ(ones.FullTensor().ToDoubleVector(), std::vector<double>(6, 1.0));
    EXPECT_EQ(zeros.placements(), ParsePlacements("S(1)"));
    EXPECT_EQ(zeros.FullTensor().ToDoubleVector(), std::vector<double>(6, 0.0));
  });
}

TEST(ElementwiseRulesTest, SumToSizeMakesSummedShardedDimsPartial) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(4)) {
      auto to_row = [](const TensorList& in) { return SumToSize(in[0], std::vector<int64_t>{1, 5}); };
      auto to_vec = [](const TensorList& in) { return SumToSize(in[0], std::vector<int64_t>{5}); };
      auto to_col = [n](const TensorList& in) { return SumToSize(in[0], std::vector<int64_t>{2, n, 1}); };
      EXPECT_EQ(ExpectMatchesDense(mesh, {Values({n, 5})}, {"S(0)"}, to_row).placements(), ParsePlacements("P(sum)"));
      EXPECT_EQ(ExpectMatchesDense(mesh, {Values({n, 5})}, {"S(1)"}, to_vec).placements(), ParsePlacements("S(0)"));
      EXPECT_EQ(ExpectMatchesDense(mesh, {Values({2, n, 5})}, {"S(1)"}, to_col).placements(), ParsePlacements("S(1)"));
      ExpectMatchesDense(mesh, {Values({n, 5})}, {"P(sum)"}, to_vec);
    }
  });
}

}  // namespace
}  // namespace tessel::dtensor
