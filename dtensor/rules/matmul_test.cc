// Rules of dtensor/rules/matmul.cc: matmul (all attr forms, via forward and backward) and linear.
#include "core/ops/matmul.h"

#include <gtest/gtest.h>

#include "core/ops/elementwise.h"
#include "core/ops/unary.h"
#include "dtensor/testing/rules_testing.h"

namespace tessel::dtensor {
namespace {

using testing::CommOf;
using testing::EvenAndUneven;
using testing::ExpectMatchesDense;
using testing::OnMesh1D;
using testing::OnMesh2D;
using testing::Values;

auto MatmulFn = [](const TensorList& in) { return Matmul(in[0], in[1]); };
auto LinearFn = [](const TensorList& in) { return Linear(in[0], in[1], in.size() > 2 ? in[2] : Tensor()); };

// The backward of every case runs matmul with transpose flags, sum_batch and squeeze_dims.
TEST(MatmulRulesTest, MatmulMatchesDenseForEveryLabelSharded) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(4)) {
      const Tensor a = Values({n, 5}), b = Values({5, n + 1}, DType::kFloat64, 1);
      for (const auto& [pa, pb] : std::vector<std::pair<const char*, const char*>>{{"S(0)", "R"},
                                                                                   {"R", "S(1)"},
                                                                                   {"S(1)", "S(0)"},
                                                                                   {"R", "R"},
                                                                                   {"P(sum)", "R"},
                                                                                   {"S(0)", "S(1)"},
                                                                                   {"S(1)", "R"},
                                                                                   {"R", "P(sum)"}}) {
        SCOPED_TRACE(Str(pa, " @ ", pb, " n ", n));
        ExpectMatchesDense(mesh, {a, b}, {pa, pb}, MatmulFn);
      }
      // Batched [2, n, 5] @ [2, 5, 3] and broadcast [n, 2, 5] @ [5, 3]; 1-D operands.
      const Tensor ba = Values({2, n, 5}), bb = Values({2, 5, 3}, DType::kFloat64, 1);
      for (const auto& [pa, pb] : std::vector<std::pair<const char*, const char*>>{
               {"S(0)", "S(0)"}, {"S(1)", "R"}, {"S(2)", "S(1)"}, {"R", "S(2)"}}) {
        SCOPED_TRACE(Str("batched ", pa, " @ ", pb, " n ", n));
        ExpectMatchesDense(mesh, {ba, bb}, {pa, pb}, MatmulFn);
      }
      ExpectMatchesDense(mesh, {Values({n, 2, 5}), Values({5, 3})}, {"S(0)", "S(0)"}, MatmulFn);
      ExpectMatchesDense(mesh, {Values({5}), Values({5, n})}, {"S(0)", "S(1)"}, MatmulFn);
      ExpectMatchesDense(mesh, {Values({n, 5}), Values({5})}, {"S(0)", "R"}, MatmulFn);
      ExpectMatchesDense(mesh, {Values({n}), Values({n})}, {"S(0)", "S(0)"}, MatmulFn);
    }
  });
}

TEST(MatmulRulesTest, LinearMatchesDenseForColwiseRowwiseAndBatchSharding) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(4)) {
      const Tensor x = Values({2, 3, n}), w = Values({n + 1, n}, DType::kFloat64, 1),
                   b = Values({n + 1}, DType::kFloat64, 2);
      for (const auto& ps : std::vector<std::vector<std::string>>{{"R", "S(0)", "S(0)"},
                                                                  {"S(2)", "S(1)", "R"},
                                                                  {"S(0)", "R", "R"},
                                                                  {"S(1)", "R", "S(0)"},
                                                                  {"P(sum)", "R", "R"},
                                                                  {"R", "R", "R"}}) {
        SCOPED_TRACE(Str(ps[0], ", ", ps[1], ", ", ps[2], " n ", n));
        ExpectMatchesDense(mesh, {x, w, b}, ps, LinearFn);
        ExpectMatchesDense(mesh, {x, w}, {ps[0], ps[1]}, LinearFn);
      }
      ExpectMatchesDense(mesh, {Values({n}), w, b}, {"S(0)", "S(1)", "R"}, LinearFn);
    }
  });
}

TEST(MatmulRulesTest, ColwiseThenRowwiseCostsExactlyOneAllReduce) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(4)) {
      DTensor x = DistributeTensor(Values({3, 6}), mesh, ParsePlacements("R"));
      DTensor w1 = DistributeTensor(Values({n, 6}), mesh, ParsePlacements("S(0)"));
      DTensor b1 = DistributeTensor(Values({n}), mesh, ParsePlacements("S(0)"));
      DTensor w2 = DistributeTensor(Values({5, n}), mesh, ParsePlacements("S(1)"));
      DTensor b2 = DistributeTensor(Values({5}), mesh, ParsePlacements("R"));
      DTensor h, y;
      EXPECT_EQ(CommOf([&] { h = DTensor(Gelu(Linear(x, w1, b1))); }), "");
      EXPECT_EQ(h.placements(), ParsePlacements("S(1)"));
      EXPECT_EQ(CommOf([&] { y = DTensor(Linear(h, w2, b2)); }), "");
      EXPECT_EQ(y.placements(), ParsePlacements("P(sum)"));  // the bias is partitioned: added exactly once
      Tensor full;
      EXPECT_EQ(CommOf([&] { full = y.FullTensor(); }), "all_reduce(x) x1");
      const Tensor want =
          Linear(Gelu(Linear(Values({3, 6}), Values({n, 6}), Values({n}))), Values({5, n}), Values({5}));
      testing::ExpectClose(full.ToDoubleVector(), want.ToDoubleVector(), 1e-12, "mlp");
    }
  });
}

TEST(MatmulRulesTest, ShardedRowsTimesReplicateNeedNoCommunication) {
  OnMesh2D([](const DeviceMesh& mesh) {
    DTensor x = DistributeTensor(Values({9, 4}), mesh, ParsePlacements("S(0), R"));
    DTensor w = DistributeTensor(Values({4, 6}), mesh, ParsePlacements("R, S(1)"));
    DTensor y;
    EXPECT_EQ(CommOf([&] { y = DTensor(Matmul(x, w)); }), "");
    EXPECT_EQ(y.placements(), ParsePlacements("S(0), S(1)"));
    DTensor k1 = DistributeTensor(Values({9, 4}), mesh, ParsePlacements("S(1), S(1)"));
    DTensor k2 = DistributeTensor(Values({4, 6}), mesh, ParsePlacements("S(0), S(0)"));
    EXPECT_EQ(CommOf([&] { y = DTensor(Matmul(k1, k2)); }), "");  // K sharded on both axes: nested
    EXPECT_EQ(y.placements(), ParsePlacements("P(sum), P(sum)"));
    testing::ExpectClose(y.FullTensor().ToDoubleVector(), Matmul(Values({9, 4}), Values({4, 6})).ToDoubleVector(),
                         1e-12, "nested K");
  });
}

TEST(MatmulRulesTest, TwoDimMeshMatmulMatchesDense) {
  OnMesh2D([](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(4)) {
      const Tensor a = Values({n, 6}), b = Values({6, 5}, DType::kFloat64, 1);
      for (const auto& [pa, pb] : std::vector<std::pair<const char*, const char*>>{{"S(0), S(1)", "R, S(0)"},
                                                                                   {"S(1), R", "S(0), S(1)"},
                                                                                   {"P(sum), S(0)", "R, R"},
                                                                                   {"R, S(1)", "S(1), S(0)"}}) {
        SCOPED_TRACE(Str(pa, " @ ", pb, " n ", n));
        ExpectMatchesDense(mesh, {a, b}, {pa, pb}, MatmulFn);
      }
    }
  });
}

// The per-axis options torch lists, priced and tied as torch's: an option every operand reaches for free on an
// axis is offered too, candidates run mesh axis 0 outermost, and equal times go to that order. Expected
// placements are torch 2.15's (tools/dev/dtensor_placements); before, x @ w gave [S(0), R] and bmm [S(0), S(0)].
TEST(MatmulRulesTest, OptionsOrderAndTiesAreTorchs) {
  OnMesh2D([](const DeviceMesh& mesh) {
    const Tensor x_full = Values({4, 8}), w_full = Values({8, 4}, DType::kFloat64, 1);
    DTensor x = DistributeTensor(x_full, mesh, ParsePlacements("S(0), R"));
    DTensor w = DistributeTensor(w_full, mesh, ParsePlacements("S(0), R"));
    DTensor out;
    // w: a local chunk on tp (dim 1, free) first, then the gather of dim 0 over dp sends half the bytes
    EXPECT_EQ(CommOf([&] { out = DTensor(Matmul(x, w)); }), "all_gather(dp) x1");
    EXPECT_EQ(out.placements(), ParsePlacements("S(0), S(1)"));
    testing::ExpectClose(out.FullTensor().ToDoubleVector(), Matmul(x_full, w_full).ToDoubleVector(), 1e-12, "x @ w");
    const Tensor a_full = Values({4, 4, 8}), b_full = Values({4, 8, 4}, DType::kFloat64, 1);
    DTensor a = DistributeTensor(a_full, mesh, ParsePlacements("S(0), R"));
    DTensor b = DistributeTensor(b_full, mesh, ParsePlacements("S(1), S(0)"));
    DTensor c(Matmul(a, b));
    EXPECT_EQ(c.placements(), ParsePlacements("P(sum), S(0)"));
    testing::ExpectClose(c.FullTensor().ToDoubleVector(), Matmul(a_full, b_full).ToDoubleVector(), 1e-12, "bmm");
  });
}

TEST(MatmulRulesTest, MismatchedShapesRaiseNamingGlobalShapesPlacementsMeshAndRank) {
  OnMesh1D(2, [](const DeviceMesh& mesh) {
    DTensor a = DistributeTensor(Values({4, 6}), mesh, ParsePlacements("S(1)"));
    DTensor b = DistributeTensor(Values({5, 3}), mesh, ParsePlacements("S(0)"));
    testing::ExpectError(ErrorCode::kInvalidArgument,
                         {"matmul: inner dimensions do not match (6 vs 5)", "input 0: [4, 6] float64 [S(1)]",
                          "input 1: [5, 3] float64 [S(0)]", "DeviceMesh(shape=[2]", "at rank"},
                         [&] { Matmul(a, b); });
    DTensor w = DistributeTensor(Values({3, 5}), mesh, ParsePlacements("S(0)"));
    testing::ExpectError(ErrorCode::kInvalidArgument, {"linear: input [4, 6] does not match weight [3, 5]", "[S(0)]"},
                         [&] { Linear(a, w); });
  });
}

// K sharded over both axes in different orders on the two operands ([S(1), S(1)] ordered tp before dp
// on a, the default dp before tp on b): neither was moved and each rank multiplied mismatched K blocks,
// so the Partial sum was wrong. Also a non-default order on a batch dim kept by the output.
TEST(MatmulRulesTest, OperandsInDifferentShardOrdersMatchDense) {
  OnMesh2D([](const DeviceMesh& mesh) {
    const Tensor a = Values({4, 8}), b = Values({8, 3});
    const DTensor da = DistributeTensor(a, mesh, ParsePlacements("S(1), S(1)"), {.shard_order = ShardOrder{{}, {1, 0}}});
    const DTensor db = DistributeTensor(b, mesh, ParsePlacements("S(0), S(0)"));
    const std::vector<double> got = DTensor(Matmul(da, db)).FullTensor().ToDoubleVector();
    const std::vector<double> want = Matmul(a, b).ToDoubleVector();
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-9) << k;
    const Tensor rows = Values({8, 4});
    const DTensor dr = DistributeTensor(rows, mesh, ParsePlacements("S(0), S(0)"), {.shard_order = ShardOrder{{1, 0}, {}}});
    const DTensor dw = DistributeTensor(Values({4, 3}), mesh, ParsePlacements("R, R"));
    const std::vector<double> got_rows = DTensor(Matmul(dr, dw)).FullTensor().ToDoubleVector();
    const std::vector<double> want_rows = Matmul(rows, Values({4, 3})).ToDoubleVector();
    for (size_t k = 0; k < want_rows.size(); ++k) EXPECT_NEAR(got_rows[k], want_rows[k], 1e-9) << k;
  });
}

}  // namespace
}  // namespace tessel::dtensor
