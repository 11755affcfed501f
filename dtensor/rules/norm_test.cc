// Rules of dtensor/rules/norm.cc: layer_norm, rms_norm and their backward ops.
#include "core/ops/norm.h"

#include <gtest/gtest.h>

#include "dtensor/testing/rules_testing.h"

namespace tessel::dtensor {
namespace {

using testing::CommOf;
using testing::EvenAndUneven;
using testing::ExpectMatchesDense;
using testing::OnMesh1D;
using testing::Values;

TEST(NormRulesTest, LayerNormAndRmsNormMatchDenseWithRowsSharded) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(4)) {
      const Tensor x = Values({2, n, 6}), w = Values({6}, DType::kFloat64, 1), b = Values({6}, DType::kFloat64, 2);
      for (const char* p : {"S(0)", "S(1)", "S(2)", "R", "P(sum)"}) {
        for (const char* pw : {"R", "S(0)"}) {
          SCOPED_TRACE(Str(p, " weight ", pw, " n ", n));
          ExpectMatchesDense(
              mesh, {x, w, b}, {p, pw, "R"}, [](const TensorList& in) { return LayerNorm(in[0], in[1], in[2]); }, true,
              1e-9);
          ExpectMatchesDense(
              mesh, {x, w}, {p, pw}, [](const TensorList& in) { return RmsNorm(in[0], in[1]); }, true, 1e-9);
          ExpectMatchesDense(
              mesh, {x}, {p}, [](const TensorList& in) { return LayerNorm(in[0], Tensor(), Tensor()); }, true, 1e-9);
        }
      }
    }
  });
}

TEST(NormRulesTest, SequenceParallelNormNeedsNoCommunicationAndGivesPartialWeightGrads) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    DTensor x = DistributeTensor(Values({2, 13, 6}), mesh, ParsePlacements("S(1)"));
    DTensor w = DistributeTensor(Values({6}, DType::kFloat64, 1), mesh, ParsePlacements("R"));
    DTensor b = DistributeTensor(Values({6}, DType::kFloat64, 2), mesh, ParsePlacements("R"));
    w.set_requires_grad(true);
    b.set_requires_grad(true);
    DTensor y;
    EXPECT_EQ(CommOf([&] { y = DTensor(LayerNorm(x, w, b)); }), "");
    EXPECT_EQ(y.placements(), ParsePlacements("S(1)"));
    DTensor g = DistributeTensor(Values({2, 13, 6}, DType::kFloat64, 3), mesh, ParsePlacements("S(1)"));
    EXPECT_EQ(CommOf([&] { Backward(y, g); }), "");
    EXPECT_EQ(w.grad().placements(), ParsePlacements("P(sum)"));
    EXPECT_EQ(b.grad().placements(), ParsePlacements("P(sum)"));
  });
}

}  // namespace
}  // namespace tessel::dtensor
