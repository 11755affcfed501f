// Rules of dtensor/rules/view.cc: view/reshape/flatten, narrow, select, slice, transpose, permute, expand,
// (un)squeeze, contiguous, copy_ and the backward ops, sharded == dense.
#include "core/ops/view.h"

#include <gtest/gtest.h>

#include "core/autograd/grad_mode.h"
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

struct ViewCase {
  const char* name;
  std::function<Tensor(const Tensor&)> fn;
};

std::vector<ViewCase> Cases(int64_t n) {
  return {
      {"reshape merge",
       [n](const Tensor& x) {
         return Reshape(x, {n * 4, 3});
       }},
      {"reshape split",
       [n](const Tensor& x) {
         return Reshape(x, {n, 2, 2, 3});
       }},
      {"flatten", [](const Tensor& x) { return Flatten(x); }},
      {"view -1",
       [n](const Tensor& x) {
         return View(x, {n, -1});
       }},
      {"narrow", [](const Tensor& x) { return Narrow(x, 1, 1, 2); }},
      {"narrow sharded", [n](const Tensor& x) { return Narrow(x, 0, 1, n - 2); }},
      {"select", [](const Tensor& x) { return Select(x, 2, 1); }},
      {"slice", [n](const Tensor& x) { return Slice(x, 0, 1, n, 2); }},
      {"slice whole dim 0, then dim 1", [n](const Tensor& x) { return Slice(Slice(x, 0, 0, n, 1), 1, 1, 3, 1); }},
      {"narrow whole", [n](const Tensor& x) { return Narrow(x, 0, 0, n); }},
      {"slice whole, negative end", [](const Tensor& x) { return Slice(x, 2, -3, 100, 1); }},
      {"transpose", [](const Tensor& x) { return Transpose(x, 0, 2); }},
      {"permute",
       [](const Tensor& x) {
         return Permute(x, {2, 0, 1});
       }},
      {"expand",
       [n](const Tensor& x) {
         return Expand(Unsqueeze(x, 0), {2, n, 4, 3});
       }},
      {"squeeze", [](const Tensor& x) { return Squeeze(Unsqueeze(x, 1), 1); }},
      {"chunk", [](const Tensor& x) { return Chunk(x, 2, 1)[1]; }},
      {"transpose then reshape",
       [n](const Tensor& x) {
         return Reshape(Transpose(x, 1, 2), {n, 12});
       }},
      {"contiguous", [](const Tensor& x) { return Contiguous(Transpose(x, 0, 1)); }},
  };
}

TEST(ViewRulesTest, EveryViewOpAndItsBackwardMatchDense) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(4)) {
      for (const char* p : {"S(0)", "S(1)", "S(2)", "R", "P(sum)"}) {
        for (const ViewCase& c : Cases(n)) {
          SCOPED_TRACE(Str(c.name, " n ", n, " ", p));
          ExpectMatchesDense(mesh, {Values({n, 4, 3})}, {p}, [&c](const TensorList& in) { return c.fn(in[0]); });
        }
      }
    }
  });
}

TEST(ViewRulesTest, ViewsOnATwoDimMeshMatchDense) {
  OnMesh2D([](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(4)) {
      for (const char* p : {"S(0), S(1)", "S(0), S(0)", "S(2), P(sum)"}) {
        for (const ViewCase& c : Cases(n)) {
          SCOPED_TRACE(Str(c.name, " n ", n, " ", p));
          ExpectMatchesDense(mesh, {Values({n, 4, 3})}, {p}, [&c](const TensorList& in) { return c.fn(in[0]); });
        }
      }
    }
  });
}

TEST(ViewRulesTest, DimMappingKeepsShardsWithoutCommunicationWhenTheChunksAlign) {
  OnMesh1D(2, [](const DeviceMesh& mesh) {
    DTensor x = DistributeTensor(Values({8, 6}), mesh, ParsePlacements("S(0)"));
    DTensor y;
    EXPECT_EQ(CommOf([&] { y = DTensor(Reshape(x, {48})); }), "");  // 8 % 2 == 0, 48 % 2 == 0
    EXPECT_EQ(y.placements(), ParsePlacements("S(0)"));
    EXPECT_EQ(CommOf([&] { y = DTensor(Reshape(x, {2, 4, 6})); }), "");  // split: 2 % 2 == 0
    EXPECT_EQ(y.placements(), ParsePlacements("S(0)"));
    EXPECT_EQ(CommOf([&] { y = DTensor(Transpose(x, 0, 1)); }), "");
    EXPECT_EQ(y.placements(), ParsePlacements("S(1)"));
    EXPECT_FALSE(y.tensor().is_contiguous());  // global strides follow the dense op
    EXPECT_EQ(y.tensor().strides(), (Shape{1, 6}));
    DTensor z = DistributeTensor(Values({8, 6}), mesh, ParsePlacements("S(1)"));
    EXPECT_EQ(CommOf([&] { y = DTensor(Reshape(z, {48})); }), "all_gather(x) x1");  // not the major dim
    EXPECT_EQ(y.placements(), ParsePlacements("R"));
    DTensor u = DistributeTensor(Values({5, 6}), mesh, ParsePlacements("S(0)"));
    EXPECT_EQ(CommOf([&] { y = DTensor(Reshape(u, {30})); }), "all_gather(x) x1");  // 5 rows: uneven
    DTensor v = DistributeTensor(Values({2, 3, 5}), mesh, ParsePlacements("S(2)"));  // 5 columns: uneven
    EXPECT_EQ(CommOf([&] { y = DTensor(Reshape(v, {-1, 5})); }), "");  // the sharded dim maps onto itself
    EXPECT_EQ(y.placements(), ParsePlacements("S(1)"));
    EXPECT_EQ(y.ToLocal().ToDoubleVector(), Reshape(DTensor(v).ToLocal(), {-1, y.local_shape()[1]}).ToDoubleVector());
    EXPECT_EQ(CommOf([&] { y = DTensor(Narrow(x, 1, 2, 3)); }), "");
    EXPECT_EQ(y.placements(), ParsePlacements("S(0)"));
  });
}

// x[:, 2:5] on a Shard(0) DTensor slices dim 0 whole first: torch keeps S(0) without communication, and
// so does the backward (slice_backward over the whole dim). A partial range of the sharded dim gathers.
TEST(ViewRulesTest, AWholeRangeOfTheShardedDimKeepsItsSharding) {
  OnMesh1D(2, [](const DeviceMesh& mesh) {
    const Tensor full = Values({5, 6});  // 5 rows: uneven pieces (3, 2)
    DTensor x = DistributeTensor(full, mesh, ParsePlacements("S(0)"));
    x.set_requires_grad(true);
    DTensor y;
    EXPECT_EQ(CommOf([&] { y = DTensor(Slice(Slice(x, 0, 0, 5, 1), 1, 2, 5, 1)); }), "");
    EXPECT_EQ(y.placements(), ParsePlacements("S(0)"));
    EXPECT_EQ(y.shape(), (Shape{5, 3}));
    EXPECT_EQ(y.local_shape(), (Shape{mesh.coordinate()[0] == 0 ? 3 : 2, 3}));
    EXPECT_EQ(y.FullTensor().ToDoubleVector(), Slice(full, 1, 2, 5, 1).ToDoubleVector());
    DTensor g = DistributeTensor(Values({5, 3}, DType::kFloat64, 7), mesh, ParsePlacements("S(0)"));
    EXPECT_EQ(CommOf([&] { Backward(y, g); }), "");
    EXPECT_EQ(DTensor(x.grad()).placements(), ParsePlacements("S(0)"));
    std::vector<double> want(30, 0.0);
    const std::vector<double> gv = DTensor(g).FullTensor().ToDoubleVector();
    for (int r = 0; r < 5; ++r)
      for (int c = 0; c < 3; ++c) want[static_cast<size_t>(r * 6 + 2 + c)] = gv[static_cast<size_t>(r * 3 + c)];
    EXPECT_EQ(DTensor(x.grad()).FullTensor().ToDoubleVector(), want);
    EXPECT_EQ(CommOf([&] { y = DTensor(Narrow(x, 0, 0, 5)); }), "");
    EXPECT_EQ(y.placements(), ParsePlacements("S(0)"));
    EXPECT_EQ(CommOf([&] { y = DTensor(Slice(x, 0, 0, 5, 2)); }), "all_gather(x) x1");  // a step: not whole
    EXPECT_EQ(CommOf([&] { y = DTensor(Narrow(x, 0, 0, 4)); }), "all_gather(x) x1");
  });
}

TEST(ViewRulesTest, CopyInPlaceTakesTheDestinationLayout) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(4)) {
      const Tensor src_full = Values({n, 3}, DType::kFloat64, 1);
      for (const char* dst_p : {"S(0)", "S(1)", "R"}) {
        for (const char* src_p : {"S(0)", "R", "P(sum)"}) {
          SCOPED_TRACE(Str(dst_p, " <- ", src_p, " n ", n));
          DTensor dst = DistributeTensor(Values({n, 3}), mesh, ParsePlacements(dst_p));
          DTensor src = testing::MakeInput(src_full, mesh, ParsePlacements(src_p), false).dt;
          NoGradGuard no_grad;
          CopyInPlace(dst, src);
          EXPECT_EQ(dst.placements(), ParsePlacements(dst_p));
          testing::ExpectClose(dst.FullTensor().ToDoubleVector(), src_full.ToDoubleVector(), 0, "copy_");
        }
      }
    }
  });
}

TEST(ViewRulesTest, InvalidViewsRaiseWithGlobalShapes) {
  OnMesh1D(2, [](const DeviceMesh& mesh) {
    DTensor x = DistributeTensor(Values({8, 6}), mesh, ParsePlacements("S(0)"));
    testing::ExpectError(ErrorCode::kInvalidArgument, {"shape '[7, 7]' is invalid for input of size 48 (view)"}, [&] {
      View(x, {7, 7});
    });
    DTensor t(Transpose(x, 0, 1));
    testing::ExpectError(ErrorCode::kInvalidArgument, {"view size is not compatible", "input [6, 8]"},
                         [&] { View(t, {48}); });               // the dense rule, on global strides
    EXPECT_EQ(DTensor(Reshape(t, {48})).shape(), (Shape{48}));  // Reshape copies instead
  });
}

}  // namespace
}  // namespace tessel::dtensor
