// Rules of dtensor/rules/pool.cc: window_max and the last-dim gather / scatter-add on row-sharded and
// replicated operands (forward and gradient) against the dense ops.
#include "core/ops/pool.h"

#include <gtest/gtest.h>

#include "dtensor/testing/rules_testing.h"

namespace tessel::dtensor {
namespace {

using testing::CommOf;
using testing::EvenAndUneven;
using testing::ExpectMatchesDense;
using testing::OnMesh1D;
using testing::Values;

TEST(PoolRulesTest, RowShardedAndReplicatedMatchDense) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    const Tensor windows = FromVector(std::vector<int64_t>{0, 2, 4, 1, 3, 5, 2, 2, 6}, {3, 3});
    for (int64_t rows : EvenAndUneven(4)) {
      const Tensor x = Values({rows, 7});
      std::vector<int64_t> iv;
      for (int64_t i = 0; i < rows * 4; ++i) iv.push_back((i * 3 + 1) % 7);
      const Tensor idx = FromVector(iv, {rows, 4});
      for (const char* px : {"S(0)", "R", "S(1)"}) {
        SCOPED_TRACE(Str(px, " rows ", rows));
        ExpectMatchesDense(mesh, {x, windows}, {px, "R"}, [](const TensorList& in) { return WindowMax(in[0], in[1]).first; });
        ExpectMatchesDense(mesh, {x, idx}, {px, std::string(px) == "S(1)" ? "R" : px},
                           [](const TensorList& in) { return GatherLastDim(in[0], in[1]); });
        ExpectMatchesDense(mesh, {Values({rows, 4}, DType::kFloat64, 1), idx}, {px, std::string(px) == "S(1)" ? "R" : px},
                           [](const TensorList& in) { return ScatterAddLastDim(in[0], in[1], 7); });
      }
    }
  });
}

TEST(PoolRulesTest, RowShardedWindowMaxCommunicatesNothing) {
  OnMesh1D(2, [](const DeviceMesh& mesh) {
    DTensor x = DistributeTensor(Values({6, 4}), mesh, ParsePlacements("S(0)"));
    DTensor w = DistributeTensor(FromVector(std::vector<int64_t>{0, 2, 1, 3}, {2, 2}), mesh, ParsePlacements("R"));
    std::pair<Tensor, Tensor> out;
    EXPECT_EQ(CommOf([&] { out = WindowMax(x, w); }), "");
    EXPECT_EQ(DTensor(out.first).placements(), ParsePlacements("S(0)"));
    EXPECT_EQ(DTensor(out.second).placements(), ParsePlacements("S(0)"));
  });
}

}  // namespace
}  // namespace tessel::dtensor
