// Rules of dtensor/rules/softmax.cc: softmax, log_softmax and their backward ops.
#include "core/ops/softmax.h"

#include <gtest/gtest.h>

#include "dtensor/testing/rules_testing.h"

namespace tessel::dtensor {
namespace {

using testing::CommOf;
using testing::EvenAndUneven;
using testing::ExpectMatchesDense;
using testing::OnMesh1D;
using testing::Values;

TEST(SoftmaxRulesTest, SoftmaxOnAnUnshardedDimKeepsTheShardingAndMatchesDense) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(4)) {
      for (const char* p : {"S(0)", "S(1)", "S(2)", "R", "P(sum)"}) {
        for (int64_t dim : {-1, 1}) {
          SCOPED_TRACE(Str("n ", n, " ", p, " dim ", dim));
          ExpectMatchesDense(mesh, {Values({2, n, 5})}, {p},
                             [dim](const TensorList& in) { return Softmax(in[0], dim); });
          ExpectMatchesDense(mesh, {Values({2, n, 5})}, {p},
                             [dim](const TensorList& in) { return LogSoftmax(in[0], dim); });
        }
      }
    }
  });
}

TEST(SoftmaxRulesTest, ASoftmaxOverAShardedDimGathersOnlyThatDim) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    DTensor x = DistributeTensor(Values({4, 9}), mesh, ParsePlacements("S(0)"));
    DTensor y;
    EXPECT_EQ(CommOf([&] { y = DTensor(Softmax(x, -1)); }), "");
    EXPECT_EQ(y.placements(), ParsePlacements("S(0)"));
    EXPECT_EQ(CommOf([&] { y = DTensor(Softmax(x, 0)); }), "all_gather(x) x1");
    EXPECT_EQ(y.placements(), ParsePlacements("R"));
  });
}

// torch 2.15's softmax strategies (_shard_except_dim_strategy) expanded over a 2 x 2 mesh: x [S(1), R] softmaxed
// over dim 1 is chunked on tp first (dim 0, free), so the gather over dp sends half: [R, S(0)], as torch's sweep
// gives at [4, 8] (tessel gave [R, R]). A Partial input on a mesh where something is sharded is reduce-scattered
// onto a dim the softmax keeps whole per lane ([P(sum), S(1)] over dim 1: torch's [S(0), R]; tessel gave [R, R]).
TEST(SoftmaxRulesTest, TwoDimMeshCandidatesAreTorchs) {
  testing::OnMesh2D([](const DeviceMesh& mesh) {
    const Tensor full = Values({4, 8});
    DTensor x = DistributeTensor(full, mesh, ParsePlacements("S(1), R"));
    DTensor y;
    EXPECT_EQ(CommOf([&] { y = DTensor(Softmax(x, 1)); }), "all_gather(dp) x1");
    EXPECT_EQ(y.placements(), ParsePlacements("R, S(0)"));
    testing::ExpectClose(y.FullTensor().ToDoubleVector(), Softmax(full, 1).ToDoubleVector(), 1e-12, "softmax");
    DTensor p = testing::MakeInput(full, mesh, ParsePlacements("P(sum), S(1)"), false).dt;
    EXPECT_EQ(CommOf([&] { y = DTensor(LogSoftmax(p, 1)); }), "reduce_scatter(dp) x1, all_gather(tp) x1");
    EXPECT_EQ(y.placements(), ParsePlacements("S(0), R"));
    testing::ExpectClose(y.FullTensor().ToDoubleVector(), LogSoftmax(full, 1).ToDoubleVector(), 1e-12, "log");
  });
}

}  // namespace
}  // namespace tessel::dtensor
