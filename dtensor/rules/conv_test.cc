// Rules of dtensor/rules/conv.cc: convolution and its two backward products on batch-, output-channel-
// and spatially sharded inputs, against the dense op (forward and every gradient).
#include "core/ops/conv.h"

#include <gtest/gtest.h>

#include "dtensor/testing/rules_testing.h"

namespace tessel::dtensor {
namespace {

using testing::CommOf;
using testing::EvenAndUneven;
using testing::ExpectMatchesDense;
using testing::OnMesh1D;
using testing::OnMesh2D;
using testing::Values;

const ConvOptions kStrided{.stride = {2}, .padding = {1}};

auto ConvFn = [](const TensorList& in) { return Convolution(in[0], in[1], in[2], kStrided); };

TEST(ConvRulesTest, BatchOutputChannelAndSpatialLayoutsMatchDenseForwardAndBackward) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(4)) {
      const Tensor x = Values({n, 3, 6, 5}, DType::kFloat32), w = Values({n, 3, 3, 3}, DType::kFloat32, 1);
      const Tensor b = Values({n}, DType::kFloat32, 2);
      for (const auto& [px, pw] : std::vector<std::pair<const char*, const char*>>{
               {"S(0)", "R"}, {"R", "S(0)"}, {"R", "R"}, {"S(2)", "R"}, {"S(1)", "S(1)"}}) {
        SCOPED_TRACE(Str(px, ", ", pw, " n ", n));
        ExpectMatchesDense(mesh, {x, w, b}, {px, pw, std::string(pw) == "S(0)" ? "S(0)" : "R"}, ConvFn,
                           /*grads=*/true, 1e-5);
      }
    }
  });
}

TEST(ConvRulesTest, DataParallelConvolutionCommunicatesOnlyTheWeightGradient) {
  OnMesh1D(2, [](const DeviceMesh& mesh) {
    DTensor x = DistributeTensor(Values({4, 2, 5, 5}, DType::kFloat32), mesh, ParsePlacements("S(0)"));
    DTensor w = DistributeTensor(Values({3, 2, 3, 3}, DType::kFloat32, 1), mesh, ParsePlacements("R"));
    w.set_requires_grad(true);
    DTensor y;
    EXPECT_EQ(CommOf([&] { y = DTensor(Convolution(x, w, {}, {.padding = {1}})); }), "");
    EXPECT_EQ(y.placements(), ParsePlacements("S(0)"));
    EXPECT_EQ(CommOf([&] { Backward(Sum(y)); }), "");
    const DTensor g(w.grad());
    EXPECT_EQ(g.placements(), ParsePlacements("P(sum)"));  // each rank's batch half: data parallelism's sum
    Tensor full;
    EXPECT_EQ(CommOf([&] { full = g.FullTensor(); }), "all_reduce(x) x1");
    const Tensor dense_w = Values({3, 2, 3, 3}, DType::kFloat32, 1);
    const Tensor y_dense = Convolution(Values({4, 2, 5, 5}, DType::kFloat32), dense_w, {}, {.padding = {1}});
    testing::ExpectClose(full.ToDoubleVector(),
                         ConvolutionBackwardWeight(Values({4, 2, 5, 5}, DType::kFloat32), Ones(y_dense.sizes()),
                                                   dense_w.sizes(), {.padding = {1}})
                             .ToDoubleVector(),
                         1e-5, "weight gradient");
  });
}

TEST(ConvRulesTest, TwoDimMeshGroupedAndDataParallelMatchDense) {
  OnMesh2D([](const DeviceMesh& mesh) {
    const Tensor x = Values({5, 4, 5, 6}, DType::kFloat32), w = Values({6, 2, 3, 2}, DType::kFloat32, 1);
    const Tensor b = Values({6}, DType::kFloat32, 2);
    auto grouped = [](const TensorList& in) { return Convolution(in[0], in[1], in[2], {.padding = {1}, .groups = 2}); };
    for (const auto& [px, pw] : std::vector<std::pair<const char*, const char*>>{
             {"S(0), R", "R, R"}, {"S(0), S(0)", "R, R"}, {"R, S(0)", "R, S(0)"}}) {
      SCOPED_TRACE(Str(px, " | ", pw));
      ExpectMatchesDense(mesh, {x, w, b}, {px, pw, pw}, grouped, /*grads=*/true, 1e-5);
    }
  });
}

}  // namespace
}  // namespace tessel::dtensor
