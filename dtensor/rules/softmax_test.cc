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

}  // namespace
}  // namespace tessel::dtensor
