// Rules of dtensor/rules/scan_sort.cc: cumsum on sharded, replicated and Partial inputs against the dense op,
// and what it communicates.
#include "core/ops/scan_sort.h"

#include <gtest/gtest.h>

#include "dtensor/testing/rules_testing.h"

namespace tessel::dtensor {
namespace {

using testing::CommOf;
using testing::EvenAndUneven;
using testing::ExpectMatchesDense;
using testing::OnMesh1D;
using testing::Values;

TEST(ScanSortRulesTest, CumSumOnEveryLayoutMatchesDense) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    for (int64_t rows : EvenAndUneven(4)) {
      const Tensor x = Values({rows, 6}, DType::kFloat64);
      for (const char* px : {"S(0)", "S(1)", "R", "P(sum)"}) {
        for (int64_t dim : {0, 1}) {
          for (bool reverse : {false, true}) {
            SCOPED_TRACE(Str(px, " rows ", rows, " dim ", dim, " reverse ", reverse));
            ExpectMatchesDense(mesh, {x}, {px}, [&](const TensorList& in) { return CumSum(in[0], dim, reverse); });
          }
        }
      }
    }
  });
}

TEST(ScanSortRulesTest, CumSumKeepsOtherDimsShardedAndPartialSumsPartial) {
  OnMesh1D(2, [](const DeviceMesh& mesh) {
    DTensor rows = DistributeTensor(Values({6, 4}), mesh, ParsePlacements("S(0)"));
    Tensor out;
    EXPECT_EQ(CommOf([&] { out = CumSum(rows, 1); }), "");
    EXPECT_EQ(DTensor(out).placements(), ParsePlacements("S(0)"));
    EXPECT_EQ(CommOf([&] { out = CumSum(rows, 0); }), "all_gather(x) x1");
    EXPECT_EQ(DTensor(out).placements(), ParsePlacements("R"));
    DTensor partial = DTensor::FromLocal(Values({6, 4}), mesh, ParsePlacements("P(sum)"));
    EXPECT_EQ(CommOf([&] { out = CumSum(partial, 0); }), "");
    EXPECT_EQ(DTensor(out).placements(), ParsePlacements("P(sum)"));
  });
}

}  // namespace
}  // namespace tessel::dtensor
