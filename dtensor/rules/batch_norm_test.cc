// Rules of dtensor/rules/batch_norm.cc: channel-sharded, batch-sharded (gathered) and replicated batch norm
// against the dense op, forward and every gradient.
#include "core/ops/batch_norm.h"

#include <gtest/gtest.h>

#include "dtensor/testing/rules_testing.h"

namespace tessel::dtensor {
namespace {

using testing::CommOf;
using testing::EvenAndUneven;
using testing::ExpectMatchesDense;
using testing::OnMesh1D;
using testing::Values;

TEST(BatchNormRulesTest, ChannelBatchAndReplicatedLayoutsMatchDense) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    for (int64_t c : EvenAndUneven(4)) {
      const Tensor x = Values({5, c, 3}), w = Values({c}, DType::kFloat64, 1), b = Values({c}, DType::kFloat64, 2);
      for (const auto& [px, pc] : std::vector<std::pair<const char*, const char*>>{
               {"S(1)", "S(0)"}, {"S(0)", "R"}, {"R", "R"}, {"S(2)", "R"}}) {
        SCOPED_TRACE(Str(px, ", ", pc, " channels ", c));
        ExpectMatchesDense(mesh, {x, w, b}, {px, pc, pc},
                           [](const TensorList& in) { return BatchNormTraining(in[0], in[1], in[2], 1e-5).y; });
      }
    }
  });
}

TEST(BatchNormRulesTest, ChannelShardedBatchNormCommunicatesNothing) {
  OnMesh1D(2, [](const DeviceMesh& mesh) {
    DTensor x = DistributeTensor(Values({4, 6, 3}), mesh, ParsePlacements("S(1)"));
    DTensor w = DistributeTensor(Values({6}, DType::kFloat64, 1), mesh, ParsePlacements("S(0)"));
    BatchNormResult r;
    EXPECT_EQ(CommOf([&] { r = BatchNormTraining(x, w, Tensor(), 1e-5); }), "");
    EXPECT_EQ(DTensor(r.y).placements(), ParsePlacements("S(1)"));
    EXPECT_EQ(DTensor(r.mean).placements(), ParsePlacements("S(0)"));
  });
}

}  // namespace
}  // namespace tessel::dtensor
