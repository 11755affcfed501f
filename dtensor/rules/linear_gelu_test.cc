// Rules of dtensor/rules/linear_gelu.cc: colwise / batch sharding keep the layout with no
// communication; rowwise (contraction-sharded) and Partial inputs never reach gelu as a partial sum.
#include "core/ops/linear_gelu.h"

#include <gtest/gtest.h>

#include "core/autograd/call.h"
#include "core/dispatch/op.h"
#include "core/ops/matmul.h"
#include "core/ops/unary.h"
#include "dtensor/testing/rules_testing.h"

namespace tessel::dtensor {
namespace {

using testing::CommOf;
using testing::EvenAndUneven;
using testing::ExpectMatchesDense;
using testing::OnMesh1D;
using testing::OnMesh2D;
using testing::Values;

auto LinearGeluFn(const char* approx) {
  return [approx](const TensorList& in) { return LinearGelu(in[0], in[1], in.size() > 2 ? in[2] : Tensor(), approx); };
}

// Values() are of size ~1, so the products cover GELU's curved range around 0.
TEST(LinearGeluRulesTest, MatchesDenseForColwiseRowwiseBatchAndPartialInputs) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(4)) {
      const Tensor x = Values({2, 3, n}), w = Values({n + 1, n}, DType::kFloat64, 1),
                   b = Values({n + 1}, DType::kFloat64, 2);
      for (const char* approx : {"tanh", "none"}) {
        for (const auto& ps : std::vector<std::vector<std::string>>{{"R", "S(0)", "S(0)"},
                                                                    {"S(2)", "S(1)", "R"},
                                                                    {"S(0)", "R", "R"},
                                                                    {"S(1)", "R", "S(0)"},
                                                                    {"P(sum)", "R", "R"},
                                                                    {"R", "R", "R"}}) {
          SCOPED_TRACE(Str(ps[0], ", ", ps[1], ", ", ps[2], " n ", n, " ", approx));
          ExpectMatchesDense(mesh, {x, w, b}, ps, LinearGeluFn(approx));
          ExpectMatchesDense(mesh, {x, w}, {ps[0], ps[1]}, LinearGeluFn(approx));
        }
      }
      ExpectMatchesDense(mesh, {Values({n}), w, b}, {"S(0)", "S(1)", "R"}, LinearGeluFn("tanh"));
    }
  });
}

TEST(LinearGeluRulesTest, ColwiseKeepsBothOutputsShardedWithNoCommunication) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(4)) {
      DTensor x = DistributeTensor(Values({2, 3, 6}), mesh, ParsePlacements("R"));
      DTensor w = DistributeTensor(Values({n, 6}), mesh, ParsePlacements("S(0)"));
      DTensor b = DistributeTensor(Values({n}), mesh, ParsePlacements("S(0)"));
      TensorList r;
      const Attrs tanh = Attrs().Set("approximate", "tanh");
      EXPECT_EQ(CommOf([&] { r = autograd::CallOp(GetOp("linear_gelu"), {x, w, b}, tanh); }), "");
      EXPECT_EQ(DTensor(r[0]).placements(), ParsePlacements("S(2)"));
      EXPECT_EQ(DTensor(r[1]).placements(), ParsePlacements("S(2)"));
      const Tensor pre = Linear(Values({2, 3, 6}), Values({n, 6}), Values({n}));
      testing::ExpectClose(DTensor(r[1]).FullTensor().ToDoubleVector(), pre.ToDoubleVector(), 1e-12, "pre");
      testing::ExpectClose(DTensor(r[0]).FullTensor().ToDoubleVector(), Gelu(pre, "tanh").ToDoubleVector(), 1e-12,
                           "out");
    }
  });
}

// linear's rule would leave x S(-1) and w S(1) in place and return a Partial(sum); gelu of that would be
// wrong, so both inputs are all-gathered instead and the output is Replicate.
TEST(LinearGeluRulesTest, RowwiseGathersTheContractionInsteadOfAPartialOutput) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(4)) {
      DTensor x = DistributeTensor(Values({3, n}), mesh, ParsePlacements("S(1)"));
      DTensor w = DistributeTensor(Values({5, n}), mesh, ParsePlacements("S(1)"));
      DTensor y;
      EXPECT_EQ(CommOf([&] { y = DTensor(Linear(x, w)); }), "");
      EXPECT_EQ(y.placements(), ParsePlacements("P(sum)"));
      EXPECT_EQ(CommOf([&] { y = DTensor(LinearGelu(x, w, Tensor(), "tanh")); }), "all_gather(x) x2");
      EXPECT_EQ(y.placements(), ParsePlacements("R"));
      testing::ExpectClose(y.FullTensor().ToDoubleVector(),
                           Gelu(Linear(Values({3, n}), Values({5, n})), "tanh").ToDoubleVector(), 1e-12, "rowwise");
    }
  });
}

TEST(LinearGeluRulesTest, TwoDimMeshBatchAndColwiseShardingMatchDense) {
  OnMesh2D([](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(2)) {
      const Tensor x = Values({n, 3, 4}), w = Values({n + 1, 4}, DType::kFloat64, 1),
                   b = Values({n + 1}, DType::kFloat64, 2);
      for (const auto& ps : std::vector<std::vector<std::string>>{{"S(0), R", "R, S(0)", "R, S(0)"},
                                                                  {"S(0), S(2)", "R, S(1)", "R, R"},
                                                                  {"P(sum), R", "R, S(0)", "R, S(0)"}}) {
        SCOPED_TRACE(Str(ps[0], " | ", ps[1], " | ", ps[2], " n ", n));
        ExpectMatchesDense(mesh, {x, w, b}, ps, LinearGeluFn("tanh"));
      }
    }
  });
}

}  // namespace
}  // namespace tessel::dtensor
