// Rules of dtensor/rules/ternary.cc: where, masked_fill, eq, lt, gt — sharded == dense.
#include "core/ops/ternary.h"

#include <gtest/gtest.h>

#include "core/ops/elementwise.h"
#include "dtensor/testing/rules_testing.h"

namespace tessel::dtensor {
namespace {

using testing::CommOf;
using testing::EvenAndUneven;
using testing::ExpectMatchesDense;
using testing::OnMesh1D;
using testing::OnMesh2D;
using testing::Values;

TEST(TernaryRulesTest, WhereAndMaskedFillMatchDenseWithMasksFollowingTheData) {
  OnMesh2D([](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(2)) {
      const Tensor a = Values({n, 4}), b = Values({n, 4}, DType::kFloat64, 1), c = Values({4}, DType::kFloat64, 2);
      auto where = [](const TensorList& in) { return Where(Gt(in[0], in[1]), in[0], in[1]); };
      auto fill = [](const TensorList& in) { return MaskedFill(in[0], Lt(in[1], in[0]), -2.5); };
      auto bcast = [](const TensorList& in) { return Where(Eq(in[1], in[1]), in[0], in[1]); };
      for (const auto& [pa, pb] : std::vector<std::pair<const char*, const char*>>{
               {"S(0), S(1)", "S(0), S(1)"}, {"S(0), R", "R, S(1)"}, {"R, R", "S(1), S(0)"}, {"P(sum), R", "R, R"}}) {
        SCOPED_TRACE(Str(pa, " | ", pb, " n ", n));
        ExpectMatchesDense(mesh, {a, b}, {pa, pb}, where);
        ExpectMatchesDense(mesh, {a, b}, {pa, pb}, fill);
      }
      ExpectMatchesDense(mesh, {a, c}, {"S(0), S(1)", "R, S(0)"}, bcast);
    }
  });
}

// torch 2.15 lists no Partial rule for where / masked_fill: a Partial operand is reduced first (all-reduced
// here; where another mesh dim shards, reduce-scattered), though a selection of partial sums would be exact.
TEST(TernaryRulesTest, SelectionReducesAPartialOperandFirstAsTorch) {
  OnMesh1D(2, [](const DeviceMesh& mesh) {
    const Tensor full = Values({5, 2});
    DTensor p = testing::MakeInput(full, mesh, ParsePlacements("P(sum)"), false).dt;
    DTensor r = DistributeTensor(Values({5, 2}, DType::kFloat64, 1), mesh, ParsePlacements("R"));
    DTensor mask(Gt(r, ZerosLike(r)));
    DTensor y;
    EXPECT_EQ(CommOf([&] { y = DTensor(MaskedFill(p, mask, 0.0)); }), "all_reduce(x) x1");
    EXPECT_EQ(y.placements(), ParsePlacements("R"));
    EXPECT_EQ(CommOf([&] { y = DTensor(Where(mask, p, r)); }), "all_reduce(x) x1");
    EXPECT_EQ(y.placements(), ParsePlacements("R"));
    testing::ExpectClose(
        y.FullTensor().ToDoubleVector(),
        Where(Gt(DTensor(r).ToLocal(), ZerosLike(DTensor(r).ToLocal())), full, DTensor(r).ToLocal()).ToDoubleVector(),
        0, "where");
    EXPECT_EQ(CommOf([&] { y = DTensor(Eq(p, r)); }), "all_reduce(x) x1");
  });
}

}  // namespace
}  // namespace tessel::dtensor
