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

// torch 2.15's layer_norm strategies (the placement sweep at x [4, 8], w and b [8]): a Partial x next to a sharded
// weight is reduce-scattered onto its rows and the weight gathered, out [S(0)] (tessel all-reduced x: [R]).
TEST(NormRulesTest, APartialInputIsReduceScatteredOntoItsRowsAsTorchs) {
  OnMesh1D(2, [](const DeviceMesh& mesh) {
    const Tensor x_full = Values({4, 8}), w_full = Values({8}, DType::kFloat64, 1),
                 b_full = Values({8}, DType::kFloat64, 2);
    DTensor x = testing::MakeInput(x_full, mesh, ParsePlacements("P(sum)"), false).dt;
    DTensor w = DistributeTensor(w_full, mesh, ParsePlacements("S(0)"));
    DTensor b = DistributeTensor(b_full, mesh, ParsePlacements("R"));
    Tensor out;
    EXPECT_EQ(CommOf([&] { out = LayerNorm(x, w, b, 1e-5); }), "reduce_scatter(x) x1, all_gather(x) x1");
    EXPECT_EQ(DTensor(out).placements(), ParsePlacements("S(0)"));
    testing::ExpectClose(DTensor(out).FullTensor().ToDoubleVector(),
                         LayerNorm(x_full, w_full, b_full, 1e-5).ToDoubleVector(), 1e-12, "layer_norm");
  });
}

}  // namespace
}  // namespace tessel::dtensor
