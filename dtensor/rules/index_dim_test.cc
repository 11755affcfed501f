// Rules of dtensor/rules/index_dim.cc: gather_dim and scatter_add_dim on sharded and replicated operands
// (forward and gradient) against the dense ops.
#include "core/ops/index_dim.h"

#include <gtest/gtest.h>

#include "dtensor/testing/rules_testing.h"

namespace tessel::dtensor {
namespace {

using testing::CommOf;
using testing::EvenAndUneven;
using testing::ExpectMatchesDense;
using testing::OnMesh1D;
using testing::Values;

TEST(IndexDimRulesTest, GatherAndScatterAddOnEveryLayoutMatchDense) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    for (int64_t rows : EvenAndUneven(4)) {
      std::vector<int64_t> iv;
      for (int64_t i = 0; i < rows * 3; ++i) iv.push_back((i * 5 + 1) % 6);
      const Tensor idx = FromVector(iv, {rows, 3});
      for (const char* p : {"S(0)", "S(1)", "R"}) {
        SCOPED_TRACE(Str(p, " rows ", rows));
        ExpectMatchesDense(mesh, {Values({rows, 6}, DType::kFloat64), idx}, {p, p},
                           [](const TensorList& in) { return GatherDim(in[0], 1, in[1]); });
        ExpectMatchesDense(mesh, {Values({rows, 6}, DType::kFloat64), idx, Values({rows, 3}, DType::kFloat64, 1)},
                           {p, "R", p}, [](const TensorList& in) { return ScatterAddDim(in[0], 1, in[1], in[2]); });
      }
    }
  });
}

TEST(IndexDimRulesTest, IndexSelectOnEveryLayoutMatchesDense) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    const Tensor idx = FromVector(std::vector<int64_t>{3, 0, 3, 5, 1}, {5});
    for (int64_t rows : EvenAndUneven(4)) {
      for (const char* p : {"S(0)", "S(1)", "R"}) {
        for (int64_t dim : {1}) {
          SCOPED_TRACE(Str(p, " rows ", rows));
          ExpectMatchesDense(mesh, {Values({rows, 6}, DType::kFloat64), idx}, {p, "R"},
                             [&](const TensorList& in) { return IndexSelectDim(in[0], dim, in[1]); });
        }
      }
    }
  });
}

TEST(IndexDimRulesTest, RowShardedGatherCommunicatesNothing) {
  OnMesh1D(2, [](const DeviceMesh& mesh) {
    DTensor x = DistributeTensor(Values({6, 4}), mesh, ParsePlacements("S(0)"));
    DTensor i = DistributeTensor(FromVector(std::vector<int64_t>{0, 3, 1, 2, 2, 0}, {6, 1}), mesh, ParsePlacements("S(0)"));
    Tensor out;
    EXPECT_EQ(CommOf([&] { out = GatherDim(x, 1, i); }), "");
    EXPECT_EQ(DTensor(out).placements(), ParsePlacements("S(0)"));
  });
}

}  // namespace
}  // namespace tessel::dtensor
