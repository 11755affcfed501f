// core/ops/strided_view_test.cc — as_strided against naive storage loops and finite differences, and in-place
// writes recorded through views and bases (RecordInPlace): gradients by finite differences of the whole
// computation, torch's histories (CopySlices, regenerated views), its errors, and view tracking across threads.
#include "core/ops/strided_view.h"

#include <gtest/gtest.h>

#include <thread>

#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/autograd/node.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/ops/testing/gradcheck.h"
#include "core/ops/view.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

using testing::ExpectAllClose;
using testing::ExpectErrorContains;
using testing::ExpectGradcheck;
using testing::RandDouble;

Tensor Leaf(std::initializer_list<int64_t> shape, uint64_t seed) {
  Tensor t = RandDouble(shape, seed);
  t.set_requires_grad(true);
  return t;
}

TEST(AsStridedTest, ReadsTheStoragePositionsItsGeometryNamesAndAliasesThem) {
  Tensor x = RandDouble({4, 5}, 1);
  const std::vector<double> flat = x.ToDoubleVector();
  // Overlapping windows: [3, 4] with strides (5, 2) from offset 1.
  Tensor v = AsStrided(x, {3, 4}, {5, 2}, 1);
  const std::vector<double> got = v.ToDoubleVector();
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(got[i * 4 + j], flat[1 + i * 5 + j * 2]) << i << "," << j;
  }
  EXPECT_TRUE(v.impl()->storage().is_same(x.impl()->storage()));
  EXPECT_EQ(v.impl()->view_base().get(), x.impl());
  // The default offset is the input's own: a diagonal of a narrowed tensor.
  Tensor n = Narrow(x, 1, 1, 4);
  Tensor d = AsStrided(n, {4}, {6});
  EXPECT_EQ(d.storage_offset(), 1);
  EXPECT_EQ(d.ToDoubleVector(), (std::vector<double>{flat[1], flat[7], flat[13], flat[19]}));
  EXPECT_EQ(d.impl()->view_base().get(), x.impl());  // the root base, not the narrow view
}

TEST(AsStridedTest, GradientScattersIntoTheInputAndAddsOverlaps) {
  // Non-overlapping (a diagonal of a transposed input) and overlapping (sliding windows) views.
  ExpectGradcheck([](const TensorList& in) { return AsStrided(Transpose(in[0], 0, 1), {3}, {4}, 0); },
                  {RandDouble({3, 3}, 2)});
  ExpectGradcheck([](const TensorList& in) { return Mul(AsStrided(in[0], {3, 3}, {2, 1}, 1), in[1]); },
                  {RandDouble({9}, 3), RandDouble({3, 3}, 4)});
  // Overlaps sum: windows start at 1, 3, 5, so x[3] and x[5] are read twice, x[0] and x[8] never.
  Tensor x = Leaf({9}, 5);
  Backward(Sum(AsStrided(x, {3, 3}, {2, 1}, 1)));
  EXPECT_EQ(x.grad().ToDoubleVector(), (std::vector<double>{0, 1, 1, 2, 1, 2, 1, 1, 0}));
}

TEST(AsStridedTest, RejectsGeometryOutsideTheStorageOrTheInputUnderAutograd) {
  Tensor x = RandDouble({2, 3}, 6);
  ExpectErrorContains([&] { AsStrided(x, {4}, {2}, 0); }, ErrorCode::kInvalidArgument, "outside a storage of 48 bytes");
  ExpectErrorContains([&] { AsStrided(x, {2}, {1, 1}); }, ErrorCode::kInvalidArgument, "one stride per dim");
  // Under autograd every element must be one of the input's: a narrow view cannot reach its base's rest.
  Tensor leaf = Leaf({2, 3}, 7);
  Tensor col = Narrow(Mul(leaf, leaf), 1, 0, 1);
  ExpectErrorContains([&] { AsStrided(col, {2}, {1}); }, ErrorCode::kUnimplemented,
                      {"element 1 of the view", "storage position 1", "not an element of the base"});
  NoGradGuard off;
  EXPECT_EQ(AsStrided(col, {2}, {1}).numel(), 2);  // outside autograd the storage is the only limit
}

// f(x, w): h = x ∘ x, a view of h written in place by `write`, then the base (and views) read.
TEST(RecordInPlaceTest, WriteThroughAViewMatchesFiniteDifferences) {
  ExpectGradcheck(
      [](const TensorList& in) {
        Tensor h = Mul(in[0], in[0]);
        Tensor v = Slice(h, 1, 1, 4, 2);  // columns 1 and 3: a strided view
        RecordInPlace(v, Mul(Clone(v), in[1]));
        return Mul(h, AddScalar(h, 1.0));
      },
      {RandDouble({3, 4}, 8), RandDouble({3, 2}, 9)});
}

TEST(RecordInPlaceTest, TheBaseGetsCopySlicesAndTheViewsReadTheNewValues) {
  Tensor x = Leaf({2, 3}, 10);
  Tensor h = MulScalar(x, 2.0);
  Tensor row0 = Select(h, 0, 0);  // a view taken before the write
  Tensor v = Narrow(h, 1, 0, 2);
  RecordInPlace(v, MulScalar(Clone(v), 3.0));
  EXPECT_EQ(h.grad_fn()->name(), "CopySlices");
  EXPECT_EQ(v.grad_fn()->name(), "as_strided");
  EXPECT_EQ(row0.grad_fn()->name(), "as_strided");  // regenerated from the new history
  const std::vector<double> xs = x.ToDoubleVector();
  ExpectAllClose(h, {6 * xs[0], 6 * xs[1], 2 * xs[2], 6 * xs[3], 6 * xs[4], 2 * xs[5]});
  // d/dx of sum(h²) + sum(row0): h = 6x inside the view, 2x outside.
  Backward(Add(Sum(Mul(h, h)), Sum(row0)));
  ExpectAllClose(x.grad(), {72 * xs[0] + 6, 72 * xs[1] + 6, 8 * xs[2] + 2, 72 * xs[3], 72 * xs[4], 8 * xs[5]});
}

TEST(RecordInPlaceTest, WriteToABaseRegeneratesItsEarlierViews) {
  ExpectGradcheck(
      [](const TensorList& in) {
        Tensor h = Mul(in[0], in[0]);
        Tensor col = Select(h, 1, 2);
        RecordInPlace(h, Mul(Clone(h), in[1]));
        return Mul(col, col);  // reads h's new values and history through the old view
      },
      {RandDouble({3, 4}, 11), RandDouble({3, 4}, 12)});
}

TEST(RecordInPlaceTest, FillsABufferThatRequiresNoGradColumnByColumn) {
  // torch's `out = zeros(T, B); out[:, t] = f(x[:, t])` loop: the buffer starts as a leaf without grad.
  ExpectGradcheck(
      [](const TensorList& in) {
        Tensor out = Zeros({2, 3}, DType::kFloat64);
        for (int64_t t = 0; t < 3; ++t) {
          RecordInPlace(Select(out, 1, t), MulScalar(Mul(Select(in[0], 1, t), Select(in[0], 1, t)), t + 1.0));
        }
        return out;
      },
      {RandDouble({2, 3}, 13)});
  Tensor out = Zeros({2}, DType::kFloat64);
  Tensor x = Leaf({2}, 14);
  RecordInPlace(Select(out, 0, 1), Sum(x));
  EXPECT_TRUE(out.requires_grad());
  Backward(Sum(out));
  EXPECT_EQ(x.grad().ToDoubleVector(), (std::vector<double>{1, 1}));
}

TEST(RecordInPlaceTest, ErrorsAsTorchBeforeWritingAnything) {
  Tensor leaf = Leaf({2, 3}, 15);
  ExpectErrorContains([&] { RecordInPlace(leaf, MulScalar(leaf, 2.0)); }, ErrorCode::kFailedPrecondition,
                      "a leaf Variable that requires grad is being used in an in-place operation");
  Tensor row = Select(leaf, 0, 0);
  ExpectErrorContains([&] { RecordInPlace(row, MulScalar(row, 2.0)); }, ErrorCode::kFailedPrecondition,
                      "a view of a leaf Variable that requires grad");
  Tensor h = MulScalar(leaf, 1.0);
  const std::vector<double> before = h.ToDoubleVector();
  Tensor wide = Expand(Unsqueeze(Select(h, 0, 0), 0), {2, 3});
  ExpectErrorContains([&] { RecordInPlace(wide, MulScalar(Clone(wide), 2.0)); }, ErrorCode::kFailedPrecondition,
                      "more than one element of the written-to tensor");
  ExpectErrorContains([&] { RecordInPlace(h, Sum(h)); }, ErrorCode::kInvalidArgument, "shape and dtype");
  EXPECT_EQ(h.ToDoubleVector(), before);
  EXPECT_EQ(h.grad_fn()->name(), "mul_scalar");
}

TEST(RecordInPlaceTest, ASavedTensorItOverwritesFailsAtBackwardAsInTorch) {
  Tensor x = Leaf({2, 2}, 16);
  Tensor h = MulScalar(x, 2.0);
  Tensor y = Mul(h, h);  // saves h
  RecordInPlace(Select(h, 0, 0), AddScalar(Clone(Select(h, 0, 0)), 1.0));
  ExpectErrorContains([&] { Backward(Sum(y)); }, ErrorCode::kFailedPrecondition,
                      "modified by an inplace operation");
}

TEST(ViewTrackingTest, ThreadsViewingOneTensorAtOnceAreAllRecorded) {
  Tensor base = Zeros({64});
  std::vector<Tensor> kept[2];
  auto work = [&](int k) {
    for (int i = 0; i < 500; ++i) {
      Tensor v = Narrow(base, 0, i % 64, 1);
      if (i % 5 == 0) kept[k].push_back(v);  // the rest die at once (pruned later)
    }
  };
  std::thread a(work, 0), b(work, 1);
  a.join();
  b.join();
  EXPECT_EQ(base.impl()->LiveViews().size(), 200u);
  kept[0].clear();
  EXPECT_EQ(base.impl()->LiveViews().size(), 100u);
  // Detach makes no view; a view of a view records the root.
  EXPECT_EQ(Detach(base).impl()->view_base(), nullptr);
  EXPECT_EQ(Select(kept[1][0], 0, 0).impl()->view_base().get(), base.impl());
}

}  // namespace
}  // namespace tessel
