// Rules of dtensor/rules/unary.cc: every unary op and its fused backward op, sharded == dense.
#include "core/ops/unary.h"

#include <gtest/gtest.h>

#include <tuple>

#include "core/ops/dropout.h"
#include "core/ops/elementwise.h"
#include "dtensor/testing/rules_testing.h"

namespace tessel::dtensor {
namespace {

using testing::CommOf;
using testing::EvenAndUneven;
using testing::ExpectMatchesDense;
using testing::OnMesh1D;
using testing::Values;

// Each op is applied to positive inputs where its domain needs it (x -> |x| + 0.5).
const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> kOps = {
    {"neg", [](const Tensor& x) { return Neg(x); }},
    {"exp", [](const Tensor& x) { return Exp(x); }},
    {"log", [](const Tensor& x) { return Log(AddScalar(Abs(x), 0.5)); }},
    {"sqrt", [](const Tensor& x) { return Sqrt(AddScalar(Abs(x), 0.5)); }},
    {"rsqrt", [](const Tensor& x) { return Rsqrt(AddScalar(Abs(x), 0.5)); }},
    {"pow", [](const Tensor& x) { return Pow(x, 3.0); }},
    {"tanh", [](const Tensor& x) { return Tanh(x); }},
    {"sigmoid", [](const Tensor& x) { return Sigmoid(x); }},
    {"relu", [](const Tensor& x) { return Relu(x); }},
    {"gelu", [](const Tensor& x) { return Gelu(x); }},
    {"gelu_tanh", [](const Tensor& x) { return Gelu(x, "tanh"); }},
    {"silu", [](const Tensor& x) { return Silu(x); }},
    {"clamp", [](const Tensor& x) { return Clamp(x, -0.5, 0.75); }},
    {"cast", [](const Tensor& x) { return Cast(Cast(x, DType::kFloat32), DType::kFloat64); }},
    {"sin", [](const Tensor& x) { return Sin(x); }},
    {"cos", [](const Tensor& x) { return Cos(x); }},
    {"erf", [](const Tensor& x) { return Erf(x); }},
    {"log1p", [](const Tensor& x) { return Log1p(AddScalar(Abs(x), 0.5)); }},
    {"expm1", [](const Tensor& x) { return Expm1(x); }},
    {"exp2", [](const Tensor& x) { return Exp2(x); }},
    {"floor", [](const Tensor& x) { return Floor(x); }},
    {"ceil", [](const Tensor& x) { return Ceil(x); }},
    {"round", [](const Tensor& x) { return Round(x); }},
};

TEST(UnaryRulesTest, EveryOpAndItsBackwardMatchDenseOnShardedAndPartialInputs) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(4)) {
      for (const char* p : {"S(0)", "S(1)", "R", "P(sum)"}) {
        for (const auto& [name, op] : kOps) {
          SCOPED_TRACE(Str(name, " n ", n, " ", p));
          ExpectMatchesDense(
              mesh, {Values({n, 3})}, {p}, [&op = op](const TensorList& in) { return op(in[0]); }, true,
              1e-7);  // the float32 cast round trip
        }
      }
    }
  });
}

TEST(UnaryRulesTest, ElementwiseOpsKeepShardsAndMonotoneOpsKeepPartialMax) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    DTensor s = DistributeTensor(Values({7, 3}), mesh, ParsePlacements("S(1)"));
    DTensor m = testing::MakeInput(Values({7, 3}), mesh, ParsePlacements("P(max)"), false).dt;
    DTensor p = testing::MakeInput(Values({7, 3}), mesh, ParsePlacements("P(sum)"), false).dt;
    DTensor y;
    EXPECT_EQ(CommOf([&] { y = DTensor(Gelu(Exp(s))); }), "");
    EXPECT_EQ(y.placements(), ParsePlacements("S(1)"));
    EXPECT_EQ(CommOf([&] { y = DTensor(Relu(Tanh(m))); }), "");
    EXPECT_EQ(y.placements(), ParsePlacements("P(max)"));
    testing::ExpectClose(y.FullTensor().ToDoubleVector(), Relu(Tanh(Values({7, 3}))).ToDoubleVector(), 1e-15, "m");
    EXPECT_EQ(CommOf([&] { y = DTensor(Exp(p)); }), "all_reduce(x) x1");
    EXPECT_EQ(CommOf([&] { y = DTensor(Cast(p, DType::kFloat32)); }), "");
    EXPECT_EQ(y.placements(), ParsePlacements("P(sum)"));
  });
}

TEST(UnaryRulesTest, DropoutDrawsEachShardsBlockOfTheFullTensorsMask) {
  // Generator(9, 4) on every rank: the DTensor's mask must equal the dense tensor's, element by element.
  auto dropout = [](const TensorList& in) {
    Generator gen(9, 4);
    return Dropout(in[0], 0.4, gen);
  };
  OnMesh1D(4, [&](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(4)) {
      for (const char* p : {"S(0)", "S(1)", "R", "P(sum)"}) {
        SCOPED_TRACE(Str("n ", n, " ", p));
        ExpectMatchesDense(mesh, {Values({n, 5})}, {p}, dropout, true, 1e-12);
      }
    }
    DTensor s = DistributeTensor(Values({7, 5}), mesh, ParsePlacements("S(1)"));
    DTensor p = testing::MakeInput(Values({7, 5}), mesh, ParsePlacements("P(sum)"), false).dt;
    Generator gen(5);
    DTensor y;
    EXPECT_EQ(CommOf([&] { y = DTensor(Dropout(s, 0.5, gen)); }), "");
    EXPECT_EQ(y.placements(), ParsePlacements("S(1)"));
    EXPECT_EQ(gen.offset(), 35u);  // the global numel, on every rank
    EXPECT_EQ(CommOf([&] { y = DTensor(Dropout(p, 0.5, gen)); }), "");
    EXPECT_EQ(y.placements(), ParsePlacements("P(sum)"));
  });
  testing::OnMesh2D([&](const DeviceMesh& mesh) {
    ExpectMatchesDense(mesh, {Values({6, 7})}, {"S(0), S(1)"}, dropout, true, 1e-12);
    ExpectMatchesDense(mesh, {Values({6, 7})}, {"S(1), S(1)"}, dropout, true, 1e-12);
  });
}

// torch 2.15 on a 2-D mesh: a Partial that a nonlinear op must reduce is reduce-scattered onto the lowest dim that
// no mesh dim to its right shards (its single-dim strategies offer Shard once some input is sharded), not
// all-reduced; on a mesh where nothing is sharded it is all-reduced.
TEST(UnaryRulesTest, NonlinearOpReduceScattersAPartialOnATwoDimMeshAsTorch) {
  testing::OnMesh2D([](const DeviceMesh& mesh) {
    const Tensor full = Values({4, 6});
    for (const auto& [in, comm, out] : std::vector<std::tuple<const char*, const char*, const char*>>{
             {"S(0), P(sum)", "reduce_scatter(tp) x1", "S(0), S(0)"},
             {"P(sum), S(0)", "reduce_scatter(dp) x1", "S(1), S(0)"},
             {"P(sum), S(1)", "reduce_scatter(dp) x1", "S(0), S(1)"},
             {"P(sum), R", "all_reduce(dp) x1", "R, R"}}) {
      SCOPED_TRACE(in);
      DTensor x = testing::MakeInput(full, mesh, ParsePlacements(in), false).dt;
      DTensor y;
      EXPECT_EQ(CommOf([&] { y = DTensor(Exp(x)); }), comm);
      EXPECT_EQ(y.placements(), ParsePlacements(out));
      testing::ExpectClose(y.FullTensor().ToDoubleVector(), Exp(full).ToDoubleVector(), 1e-12, "exp");
    }
  });
}

}  // namespace
}  // namespace tessel::dtensor
