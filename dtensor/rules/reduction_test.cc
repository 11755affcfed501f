// Rules of dtensor/rules/reduction.cc: sum, mean, amax, max, norm and their backward ops.
#include "core/ops/reduction.h"

#include <gtest/gtest.h>

#include "core/ops/elementwise.h"
#include "dtensor/testing/rules_testing.h"

namespace tessel::dtensor {
namespace {

using testing::CommOf;
using testing::EvenAndUneven;
using testing::ExpectClose;
using testing::ExpectMatchesDense;
using testing::OnMesh1D;
using testing::OnMesh2D;
using testing::Values;

struct Red {
  const char* name;
  std::function<Tensor(const Tensor&)> fn;
};

const std::vector<Red> kReductions = {
    {"sum all", [](const Tensor& x) { return Sum(x); }},
    {"sum 0", [](const Tensor& x) { return Sum(x, {0}); }},
    {"sum 1 keepdim", [](const Tensor& x) { return Sum(x, {-1}, true); }},
    {"mean all", [](const Tensor& x) { return Mean(x); }},
    {"mean 0 keepdim", [](const Tensor& x) { return Mean(x, {0}, true); }},
    {"mean 1", [](const Tensor& x) { return Mean(x, {1}); }},
    {"amax 0", [](const Tensor& x) { return Amax(x, {0}); }},
    {"amax all", [](const Tensor& x) { return Amax(x); }},
    {"max 0", [](const Tensor& x) { return Max(x, 0).first; }},
    {"max 1 keepdim", [](const Tensor& x) { return Max(x, 1, true).first; }},
    {"norm2 all", [](const Tensor& x) { return Norm(x); }},
    {"norm3 0", [](const Tensor& x) { return Norm(x, 3.0, {0}); }},
    {"norm1 1", [](const Tensor& x) { return Norm(x, 1.0, {1}); }},
    {"norminf 0", [](const Tensor& x) { return Norm(x, INFINITY, {0}); }},
};

TEST(ReductionRulesTest, EveryReductionAndItsBackwardMatchDense) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(4)) {
      for (const char* p : {"S(0)", "S(1)", "R", "P(sum)"}) {
        for (const Red& r : kReductions) {
          SCOPED_TRACE(Str(r.name, " n ", n, " ", p));
          ExpectMatchesDense(mesh, {Values({n, n + 2})}, {p}, [&r](const TensorList& in) { return r.fn(in[0]); });
        }
      }
    }
  });
}

TEST(ReductionRulesTest, ReductionsOnTwoDimMeshesAndNestedShards) {
  OnMesh2D([](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(4)) {
      for (const char* p : {"S(0), S(1)", "S(0), S(0)", "S(1), P(sum)", "P(avg), S(0)"}) {
        for (const Red& r : kReductions) {
          SCOPED_TRACE(Str(r.name, " n ", n, " ", p));
          ExpectMatchesDense(mesh, {Values({n, 5})}, {p}, [&r](const TensorList& in) { return r.fn(in[0]); });
        }
      }
    }
  });
}

TEST(ReductionRulesTest, ShardedReducedDimBecomesPartialWithoutCommunication) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    DTensor x = DistributeTensor(Values({13, 3}), mesh, ParsePlacements("S(0)"));
    DTensor y;
    EXPECT_EQ(CommOf([&] { y = DTensor(Sum(x, {0})); }), "");
    EXPECT_EQ(y.placements(), ParsePlacements("P(sum)"));
    // Uneven (4 + 4 + 4 + 1 rows): local sums / 13 as Partial(sum), where torch would gather the rows.
    EXPECT_EQ(CommOf([&] { y = DTensor(Mean(x, {0})); }), "");
    EXPECT_EQ(y.placements(), ParsePlacements("P(sum)"));
    EXPECT_EQ(CommOf([&] { y = DTensor(Amax(x, {0})); }), "");
    EXPECT_EQ(y.placements(), ParsePlacements("P(max)"));
    EXPECT_EQ(CommOf([&] { y = DTensor(Mean(x, {1})); }), "");
    EXPECT_EQ(y.placements(), ParsePlacements("S(0)"));
    EXPECT_EQ(CommOf([&] { y = DTensor(Norm(x)); }), "all_reduce(x) x1");  // one scalar all_reduce
    EXPECT_EQ(y.placements(), ParsePlacements("R"));
    EXPECT_EQ(CommOf([&] { y = DTensor(Max(x, 0).first); }), "all_gather(x) x1");  // indices need the whole dim
  });
}

// torch 2.15's mean placements (mean_single_dim_strategy): evenly sharded reduced dims give Partial(avg) of
// local means; a Partial(sum) input is reduced first, all-reduced where nothing is sharded and
// reduce-scattered onto a kept dim where another axis shards (as torch's expansion, which lists Shard
// options only then).
TEST(ReductionRulesTest, MeanGivesTorchsPartialAvgAndReducesAPartialSumInput) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    const Tensor full = Values({12, 3});
    DTensor x = DistributeTensor(full, mesh, ParsePlacements("S(0)"));
    DTensor y;
    EXPECT_EQ(CommOf([&] { y = DTensor(Mean(x, {0})); }), "");
    EXPECT_EQ(y.placements(), ParsePlacements("P(avg)"));
    // This rank's value is the mean of its own 3 rows (torch's local), and the average of those is the mean.
    const std::vector<double> v = full.ToDoubleVector(), local = y.ToLocal().ToDoubleVector();
    const int64_t r = mesh.coordinate()[0];
    for (int64_t c = 0; c < 3; ++c) {
      const size_t row = static_cast<size_t>(3 * r * 3 + c);
      EXPECT_NEAR(local[static_cast<size_t>(c)], (v[row] + v[row + 3] + v[row + 6]) / 3, 1e-12);
    }
    ExpectClose(y.FullTensor().ToDoubleVector(), Mean(full, {0}).ToDoubleVector(), 1e-12, "mean");
    DTensor p = DistributeTensor(full, mesh, ParsePlacements("S(0)")).Redistribute(mesh, ParsePlacements("P(sum)"));
    EXPECT_EQ(CommOf([&] { y = DTensor(Mean(p, {0})); }), "all_reduce(x) x1");
    EXPECT_EQ(y.placements(), ParsePlacements("R"));
  });
  OnMesh2D([](const DeviceMesh& mesh) {
    const Tensor full = Values({4, 8});
    DTensor x =
        DistributeTensor(full, mesh, ParsePlacements("S(0), R")).Redistribute(mesh, ParsePlacements("P(sum), S(0)"));
    DTensor y;
    EXPECT_EQ(CommOf([&] { y = DTensor(Mean(x, {0})); }), "reduce_scatter(dp) x1");  // torch: the same one
    EXPECT_EQ(y.placements(), ParsePlacements("S(0), P(avg)"));
    ExpectClose(y.FullTensor().ToDoubleVector(), Mean(full, {0}).ToDoubleVector(), 1e-12, "mean [P, S(0)]");
  });
}

// sum, amax and max(dim) list torch 2.15's single-dim strategies (linear_reduction_single_dim_strategy,
// max_min_dim_single_dim_strategy). Expected placements are torch's (the placement sweep at [4, 8]): amax over
// dim 1 of [S(1), P(sum)] reduce-scatters the Partial onto dim 0 (tessel all-reduced it: [P(max), R]); max over
// dim 1 of [S(1), R] chunks dim 0 on tp before the gather over dp (tessel gave [R, R]).
TEST(ReductionRulesTest, TwoDimMeshReductionsAreTorchs) {
  OnMesh2D([](const DeviceMesh& mesh) {
    const Tensor full = Values({4, 8});
    DTensor p = testing::MakeInput(full, mesh, ParsePlacements("S(1), P(sum)"), false).dt;
    DTensor y;
    EXPECT_EQ(CommOf([&] { y = DTensor(Amax(p, {1})); }), "reduce_scatter(tp) x1");
    EXPECT_EQ(y.placements(), ParsePlacements("P(max), S(0)"));
    ExpectClose(y.FullTensor().ToDoubleVector(), Amax(full, {1}).ToDoubleVector(), 1e-12, "amax");
    DTensor x = DistributeTensor(full, mesh, ParsePlacements("S(1), R"));
    std::pair<Tensor, Tensor> m;
    EXPECT_EQ(CommOf([&] { m = Max(x, 1); }), "all_gather(dp) x1");
    EXPECT_EQ(DTensor(m.first).placements(), ParsePlacements("R, S(0)"));
    EXPECT_EQ(DTensor(m.second).placements(), ParsePlacements("R, S(0)"));
    const std::pair<Tensor, Tensor> want = Max(full, 1);
    ExpectClose(DTensor(m.first).FullTensor().ToDoubleVector(), want.first.ToDoubleVector(), 0, "max values");
    ExpectClose(DTensor(m.second).FullTensor().ToDoubleVector(), want.second.ToDoubleVector(), 0, "max indices");
  });
}

}  // namespace
}  // namespace tessel::dtensor
