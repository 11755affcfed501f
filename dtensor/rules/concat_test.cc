// Rules of dtensor/rules/concat.cc: cat and stack, sharded == dense.
#include "core/ops/concat.h"

#include <gtest/gtest.h>

#include "dtensor/testing/rules_testing.h"

namespace tessel::dtensor {
namespace {

using testing::CommOf;
using testing::EvenAndUneven;
using testing::ExpectMatchesDense;
using testing::OnMesh1D;
using testing::Values;

TEST(ConcatRulesTest, CatAndStackMatchDenseInEveryLayout) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(4)) {
      const TensorList full = {Values({n, 3}), Values({n, 2}, DType::kFloat64, 1), Values({n, 3}, DType::kFloat64, 2)};
      for (const auto& ps : std::vector<std::vector<std::string>>{
               {"S(0)", "S(0)", "S(0)"}, {"S(0)", "R", "S(1)"}, {"R", "R", "R"}, {"P(sum)", "R", "P(sum)"}}) {
        SCOPED_TRACE(Str(ps[0], ps[1], ps[2], " n ", n));
        ExpectMatchesDense(mesh, full, ps, [](const TensorList& in) { return Cat(in, -1); });
        ExpectMatchesDense(mesh, {full[0], full[2]}, {ps[0], ps[2]}, [](const TensorList& in) { return Cat(in, 0); });
        ExpectMatchesDense(mesh, {full[0], full[2]}, {ps[0], ps[2]}, [](const TensorList& in) { return Stack(in, 1); });
      }
    }
  });
}

// PyTorch also offers everything replicated; tessel's candidates only followed an input's layout, and no layout
// that keeps a Partial joins P(avg) with P(sum): "no legal sharding strategy" where torch gives the values.
TEST(ConcatRulesTest, PartialsOfDifferentReduceOpsAreReducedAndJoinedReplicated) {
  OnMesh1D(3, [](const DeviceMesh& mesh) {
    const TensorList full = {Values({2, 3}, DType::kFloat64, 1), Values({2, 3}, DType::kFloat64, 2)};
    for (const auto& ps : std::vector<std::vector<std::string>>{
             {"P(avg)", "P(sum)"}, {"P(max)", "P(min)"}, {"P(sum)", "P(max)"}}) {
      SCOPED_TRACE(Str(ps[0], " ", ps[1]));
      ExpectMatchesDense(mesh, full, ps, [](const TensorList& in) { return Cat(in, 0); });
      ExpectMatchesDense(mesh, full, ps, [](const TensorList& in) { return Stack(in, 1); });
    }
  });
}

TEST(ConcatRulesTest, CatAlongAnUnshardedDimNeedsNoCommunication) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    DTensor q = DistributeTensor(Values({13, 2}), mesh, ParsePlacements("S(0)"));
    DTensor k = DistributeTensor(Values({13, 3}), mesh, ParsePlacements("S(0)"));
    DTensor y;
    EXPECT_EQ(CommOf([&] { y = DTensor(Cat({q, k}, 1)); }), "");
    EXPECT_EQ(y.placements(), ParsePlacements("S(0)"));
    EXPECT_EQ(CommOf([&] { y = DTensor(Stack({q, q}, 0)); }), "");
    EXPECT_EQ(y.placements(), ParsePlacements("S(1)"));
    EXPECT_EQ(CommOf([&] { y = DTensor(Cat({q, q}, 0)); }), "all_gather(x) x2");  // dim 0 must be whole
  });
}

// torch 2.15's choices (the placement sweep at [4, 8], old tessel in brackets): cat over dim 1 of [S(1)] and
// [P(sum)] on 4 ranks moves both to S(0) ([R]); stack of [S(0)] and [S(1)] merges two different Shards to
// Replicate ([S(1)]); on a 2 x 2 mesh stack of [R, S(0)] and [S(0), R] merges axis by axis to [S(0), S(0)],
// output [S(1), S(1)] ([S(1), R]).
TEST(ConcatRulesTest, CandidatesAreTorchs) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    const Tensor a_full = Values({4, 8}), b_full = Values({4, 8}, DType::kFloat64, 1);
    DTensor a = DistributeTensor(a_full, mesh, ParsePlacements("S(1)"));
    DTensor p = testing::MakeInput(b_full, mesh, ParsePlacements("P(sum)"), false).dt;
    DTensor c(Cat({a, p}, 1));
    EXPECT_EQ(c.placements(), ParsePlacements("S(0)"));
    testing::ExpectClose(c.FullTensor().ToDoubleVector(), Cat({a_full, b_full}, 1).ToDoubleVector(), 1e-12, "cat");
    DTensor s0 = DistributeTensor(a_full, mesh, ParsePlacements("S(0)"));
    DTensor s1 = DistributeTensor(b_full, mesh, ParsePlacements("S(1)"));
    DTensor st(Stack({s0, s1}, 0));
    EXPECT_EQ(st.placements(), ParsePlacements("R"));
    testing::ExpectClose(st.FullTensor().ToDoubleVector(), Stack({a_full, b_full}, 0).ToDoubleVector(), 0, "stack");
  });
  testing::OnMesh2D([](const DeviceMesh& mesh) {
    const Tensor a_full = Values({4, 8}), b_full = Values({4, 8}, DType::kFloat64, 1);
    DTensor a = DistributeTensor(a_full, mesh, ParsePlacements("R, S(0)"));
    DTensor b = DistributeTensor(b_full, mesh, ParsePlacements("S(0), R"));
    DTensor st(Stack({a, b}, 0));
    EXPECT_EQ(st.placements(), ParsePlacements("S(1), S(1)"));
    testing::ExpectClose(st.FullTensor().ToDoubleVector(), Stack({a_full, b_full}, 0).ToDoubleVector(), 0, "stack");
  });
}

// torch's cost model on CPU meshes is the inter-host one (MeshTopoInfo: torch.cpu.device_count() is 1): 2.7 µs per
// hop and 0.22 of the bandwidth on every mesh dim. Cat over dim 0 of [S(0)] and [P(sum)] on 2 ranks then costs
// less as an all-to-all plus a reduce-scatter ([S(1)], torch's) than as an all-gather plus an all-reduce ([R],
// which the intra-host constants chose).
TEST(ConcatRulesTest, CpuMeshesArePricedAsTorchsInterHostLinks) {
  OnMesh1D(2, [](const DeviceMesh& mesh) {
    const Tensor a_full = Values({4, 8}), b_full = Values({4, 8}, DType::kFloat64, 1);
    DTensor a = DistributeTensor(a_full, mesh, ParsePlacements("S(0)"));
    DTensor p = testing::MakeInput(b_full, mesh, ParsePlacements("P(sum)"), false).dt;
    DTensor c;
    EXPECT_EQ(CommOf([&] { c = DTensor(Cat({a, p}, 0)); }), "all_to_all(x) x1, reduce_scatter(x) x1");
    EXPECT_EQ(c.placements(), ParsePlacements("S(1)"));
    testing::ExpectClose(c.FullTensor().ToDoubleVector(), Cat({a_full, b_full}, 0).ToDoubleVector(), 1e-12, "cat");
  });
}

}  // namespace
}  // namespace tessel::dtensor
