// core/ops/view_test.cc — view ops: aliasing, torch's shapes/strides/offsets, chunk/split size tables,
// values against naive loops (contiguous and strided inputs), copy_, errors, and finite-difference backward.
#include "core/ops/view.h"

#include <gtest/gtest.h>

#include <climits>
#include <functional>

#include "core/autograd/call.h"
#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/autograd/node.h"
#include "core/base/error.h"
#include "core/dispatch/op.h"
#include "core/ops/elementwise.h"
#include "core/ops/testing/gradcheck.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"
#include "core/base/testing/expect_error.h"

namespace tessel {
namespace {

using testing::ExpectAllClose;
using testing::ExpectGradcheck;
using testing::RandDouble;

// 0, 1, 2, ... in float64, contiguous, of `shape`.
Tensor Iota(std::vector<int64_t> shape) {
  const int64_t n = NumElements(shape);
  Tensor flat = Arange(0, static_cast<double>(n), 1, DType::kFloat64);
  return FromDoubles(flat.ToVector<double>(), shape, DType::kFloat64);
}

using ::tessel::testing::ExpectErrorContains;

void ExpectGeometry(const Tensor& t, const Shape& sizes, const Shape& strides, int64_t offset) {
  EXPECT_EQ(t.sizes(), sizes);
  EXPECT_EQ(t.strides(), strides);
  EXPECT_EQ(t.storage_offset(), offset);
}

bool SharesStorage(const Tensor& a, const Tensor& b) { return a.impl()->storage().is_same(b.impl()->storage()); }

TEST(ViewTest, ViewAliasesStorageAndWritesThroughItAreVisibleInTheBase) {
  Tensor x = Iota({6});
  Tensor v = View(x, {2, 3});
  ExpectGeometry(v, {2, 3}, {3, 1}, 0);
  EXPECT_FALSE(v.is_same(x));
  EXPECT_TRUE(SharesStorage(v, x));
  EXPECT_EQ(v.raw_data(), x.raw_data());
  FillInPlace(Select(v, 0, 1), -1);
  EXPECT_EQ(x.ToVector<double>(), (std::vector<double>{0, 1, 2, -1, -1, -1}));
  CopyInPlace(Narrow(View(x, {3, 2}), 1, 1, 1), FromVector<double>({7, 8, 9}, {3, 1}));
  EXPECT_EQ(x.ToVector<double>(), (std::vector<double>{0, 7, 2, 8, -1, 9}));
  EXPECT_EQ(x.impl()->version(), v.impl()->version());  // one version counter per storage
}

TEST(ViewTest, ViewInfersMinusOneAndRejectsSizesThatDoNotMatch) {
  Tensor x = Iota({2, 3, 4});
  EXPECT_EQ(View(x, {-1, 4}).sizes(), (Shape{6, 4}));
  EXPECT_EQ(View(x, {-1}).sizes(), (Shape{24}));
  EXPECT_EQ(View(x, {2, 1, -1, 3}).sizes(), (Shape{2, 1, 4, 3}));
  ExpectErrorContains([&] { View(x, {5, -1}); }, ErrorCode::kInvalidArgument,
              "shape '[5, -1]' is invalid for input of size 24 (view)");  // torch's words, then the op
  ExpectErrorContains([&] { View(x, {-1, -1}); }, ErrorCode::kInvalidArgument, "only one dimension can be inferred");
  ExpectErrorContains([&] { View(x, {25}); }, ErrorCode::kInvalidArgument, "invalid for input of size 24");
}

TEST(ViewTest, TransposeOfTwoByThreeHasStridesOneThreeAndOnlyReshapeCanFlattenIt) {
  Tensor x = Iota({2, 3});
  Tensor t = Transpose(x, 0, 1);
  ExpectGeometry(t, {3, 2}, {1, 3}, 0);
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.raw_data(), x.raw_data());
  EXPECT_EQ(t.ToVector<double>(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  ExpectErrorContains([&] { View(t, {6}); }, ErrorCode::kInvalidArgument,
              "view size is not compatible with input tensor's size and stride");
  ExpectErrorContains([&] { View(t, {6}); }, ErrorCode::kInvalidArgument, "use Reshape");
  Tensor r = Reshape(t, {6});
  EXPECT_FALSE(SharesStorage(r, x));  // copied
  EXPECT_TRUE(r.is_contiguous());
  EXPECT_EQ(r.ToVector<double>(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  // Splitting a dim or adding size-1 dims needs no copy, even on the transposed strides (torch: (1, 6, 3)).
  Tensor s = Reshape(t, {3, 1, 2});
  EXPECT_TRUE(SharesStorage(s, x));
  ExpectGeometry(s, {3, 1, 2}, {1, 6, 3}, 0);
  Tensor c = Reshape(x, {3, 2});
  EXPECT_TRUE(SharesStorage(c, x));
  ExpectGeometry(c, {3, 2}, {2, 1}, 0);
}

TEST(ViewTest, NarrowSelectSliceMatchTorchGeometryAndNaiveLoops) {
  Tensor x = Iota({2, 3, 4});  // x[i][j][k] = 12i + 4j + k
  Tensor n = Narrow(x, 2, 1, 2);
  ExpectGeometry(n, {2, 3, 2}, {12, 4, 1}, 1);
  ExpectGeometry(Narrow(x, -1, -3, 2), {2, 3, 2}, {12, 4, 1}, 1);
  Tensor s = Select(x, 1, -1);
  ExpectGeometry(s, {2, 4}, {12, 1}, 8);
  Tensor sl = Slice(x, 2, 0, 4, 2);
  ExpectGeometry(sl, {2, 3, 2}, {12, 4, 2}, 0);
  std::vector<double> want_n, want_s, want_sl;
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int k = 1; k < 3; ++k) want_n.push_back(12 * i + 4 * j + k);
      for (int k = 0; k < 4; k += 2) want_sl.push_back(12 * i + 4 * j + k);
    }
    for (int k = 0; k < 4; ++k) want_s.push_back(12 * i + 8 + k);
  }
  EXPECT_EQ(n.ToVector<double>(), want_n);
  EXPECT_EQ(s.ToVector<double>(), want_s);
  EXPECT_EQ(sl.ToVector<double>(), want_sl);
}

TEST(ViewTest, SliceClampsBoundsLikePython) {
  Tensor x = Iota({2, 3, 4});
  ExpectGeometry(Slice(x, 2, 1, LLONG_MAX, 2), {2, 3, 2}, {12, 4, 2}, 1);  // x[..., 1::2]
  ExpectGeometry(Slice(x, 1, -2, LLONG_MAX), {2, 2, 4}, {12, 4, 1}, 4);    // x[:, -2:]
  ExpectGeometry(Slice(x, 2, -100, 100), {2, 3, 4}, {12, 4, 1}, 0);        // x[..., -100:100]
  ExpectGeometry(Slice(x, 2, 3, 1), {2, 3, 0}, {12, 4, 1}, 3);             // x[..., 3:1] is empty
  ExpectGeometry(Slice(x, 2, 0, 4, 3), {2, 3, 2}, {12, 4, 3}, 0);          // x[..., ::3] → k = 0, 3
  ExpectGeometry(Slice(x, 2, 1, 4, 3), {2, 3, 1}, {12, 4, 3}, 1);          // x[..., 1:4:3] → k = 1
  ExpectGeometry(Slice(x, 0, 5, 9), {0, 3, 4}, {12, 4, 1}, 24);            // x[5:9] is empty
  EXPECT_EQ(Slice(x, 2, 0, 4, 3).ToVector<double>(), (std::vector<double>{0, 3, 4, 7, 8, 11, 12, 15, 16, 19, 20, 23}));
}

TEST(ViewTest, ViewsOfStridedInputsMatchNaiveLoops) {
  Tensor base = Iota({3, 4});
  Tensor t = Transpose(base, 0, 1);  // t[i][j] = base[j][i] = 4j + i, shape [4, 3]
  auto tv = [](int i, int j) { return 4.0 * j + i; };
  std::vector<double> narrow, select, slice, expand, permute;
  for (int i = 1; i < 3; ++i)
    for (int j = 0; j < 3; ++j) narrow.push_back(tv(i, j));
  for (int i = 0; i < 4; ++i) select.push_back(tv(i, 2));
  for (int i = 0; i < 4; i += 2)
    for (int j = 0; j < 3; ++j) slice.push_back(tv(i, j));
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 4; ++i) expand.push_back(tv(i, 0));
  for (int j = 0; j < 3; ++j)
    for (int i = 0; i < 4; ++i) permute.push_back(tv(i, j));
  EXPECT_EQ(Narrow(t, 0, 1, 2).ToVector<double>(), narrow);
  EXPECT_EQ(Select(t, 1, 2).ToVector<double>(), select);
  EXPECT_EQ(Slice(t, 0, 0, 4, 2).ToVector<double>(), slice);
  EXPECT_EQ(Expand(Unsqueeze(Select(t, 1, 0), 0), {2, -1}).ToVector<double>(), expand);
  EXPECT_EQ(Permute(t, {1, 0}).ToVector<double>(), permute);
  EXPECT_TRUE(Permute(t, {1, 0}).is_contiguous());  // transposing twice restores base's layout
  EXPECT_EQ(Flatten(t).ToVector<double>(), t.ToVector<double>());
}

struct SizesCase {
  int64_t n;
  int64_t arg;  // chunks or split_size
  std::vector<int64_t> sizes;
};

std::vector<int64_t> SizesAlongDim0(const TensorList& pieces) {
  std::vector<int64_t> out;
  for (const Tensor& p : pieces) out.push_back(p.size(0));
  return out;
}

TEST(ViewTest, ChunkReturnsTorchChunkSizesIncludingFewerPiecesThanRequested) {
  // torch.chunk(torch.arange(n), chunks) sizes. NOTE: fewer than `chunks` pieces when trailing ones would
  // be empty (n=5, 4 → 3 pieces); n == 0 gives `chunks` empty pieces.
  const std::vector<SizesCase> table = {{5, 4, {2, 2, 1}},       {6, 4, {2, 2, 2}}, {0, 4, {0, 0, 0, 0}},
                                        {4, 4, {1, 1, 1, 1}},    {3, 5, {1, 1, 1}}, {7, 3, {3, 3, 1}},
                                        {10, 3, {4, 4, 2}},      {1, 1, {1}},       {8, 1, {8}}};
  for (const SizesCase& c : table) {
    SCOPED_TRACE(::testing::Message() << "n=" << c.n << " chunks=" << c.arg);
    Tensor x = Iota({c.n});
    TensorList pieces = Chunk(x, c.arg);
    EXPECT_EQ(SizesAlongDim0(pieces), c.sizes);
    int64_t start = 0;
    for (size_t i = 0; i < pieces.size(); ++i) {
      EXPECT_TRUE(SharesStorage(pieces[i], x));
      if (pieces[i].numel() > 0) {
        EXPECT_EQ(pieces[i].storage_offset(), start);
      }
      start += pieces[i].size(0);
    }
  }
  Tensor m = Iota({2, 5});
  TensorList cols = Chunk(m, 2, -1);
  ASSERT_EQ(cols.size(), 2u);
  EXPECT_EQ(cols[1].ToVector<double>(), (std::vector<double>{3, 4, 8, 9}));
  ExpectGeometry(cols[1], {2, 2}, {5, 1}, 3);
}

TEST(ViewTest, SplitReturnsTorchSplitSizes) {
  const std::vector<SizesCase> table = {{5, 2, {2, 2, 1}}, {5, 5, {5}}, {5, 10, {5}}, {6, 3, {3, 3}},
                                        {0, 2, {0}},       {0, 0, {0}}, {1, 1, {1}}};
  for (const SizesCase& c : table) {
    SCOPED_TRACE(::testing::Message() << "n=" << c.n << " split_size=" << c.arg);
    EXPECT_EQ(SizesAlongDim0(Split(Iota({c.n}), c.arg)), c.sizes);
  }
  TensorList parts = SplitWithSizes(Iota({5}), {2, 0, 3});
  EXPECT_EQ(SizesAlongDim0(parts), (std::vector<int64_t>{2, 0, 3}));
  EXPECT_EQ(parts[2].ToVector<double>(), (std::vector<double>{2, 3, 4}));
  EXPECT_EQ(SizesAlongDim0(SplitWithSizes(Iota({0}), {0, 0})), (std::vector<int64_t>{0, 0}));
  ExpectErrorContains([] { SplitWithSizes(Iota({5}), {2, 2}); }, ErrorCode::kInvalidArgument, "sum exactly to 5");
  ExpectErrorContains([] { SplitWithSizes(Iota({5}), {6, -1}); }, ErrorCode::kInvalidArgument, "non-negative");
  ExpectErrorContains([] { Split(Iota({5}), 0); }, ErrorCode::kInvalidArgument, "split_size must be positive");
  ExpectErrorContains([] { Chunk(Iota({5}), 0); }, ErrorCode::kInvalidArgument, "chunks must be positive");
  ExpectErrorContains([] { Chunk(Scalar(1.0), 2); }, ErrorCode::kInvalidArgument, "0-dim tensor");
}

TEST(ViewTest, ChunkPiecesAreSeparateSingleOutputNarrowNodes) {
  Tensor x = RandDouble({6, 2}, 7).set_requires_grad(true);
  TensorList pieces = Chunk(x, 3);
  ASSERT_EQ(pieces.size(), 3u);
  for (const Tensor& p : pieces) {
    ASSERT_TRUE(p.grad_fn() != nullptr);
    EXPECT_EQ(p.grad_fn()->name(), "narrow");
    EXPECT_EQ(p.grad_fn()->output_meta.size(), 1u);
  }
  EXPECT_NE(pieces[0].grad_fn(), pieces[1].grad_fn());
}

TEST(ViewTest, PermuteAndTransposeMatchTorchStrides) {
  Tensor x = Iota({2, 3, 4});
  Tensor p = Permute(x, {2, 0, 1});
  ExpectGeometry(p, {4, 2, 3}, {1, 12, 4}, 0);
  ExpectGeometry(Permute(x, {-1, 0, 1}), {4, 2, 3}, {1, 12, 4}, 0);
  ExpectGeometry(Transpose(x, 0, 2), {4, 3, 2}, {1, 4, 12}, 0);
  ExpectGeometry(Transpose(x, -1, -1), {2, 3, 4}, {12, 4, 1}, 0);
  std::vector<double> want;
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) want.push_back(12 * i + 4 * j + k);
  EXPECT_EQ(p.ToVector<double>(), want);
  EXPECT_EQ(Transpose(Scalar(3.0), 0, -1).dim(), 0);
  ExpectErrorContains([&] { Permute(x, {0, 0, 1}); }, ErrorCode::kInvalidArgument, "is not a permutation");
  ExpectErrorContains([&] { Permute(x, {0, 1}); }, ErrorCode::kInvalidArgument, "permute: got 2 dims [0, 1]");
}

TEST(ViewTest, ExpandUsesStrideZeroOnlyForExpandedDims) {
  Tensor x = Iota({3, 1});
  Tensor e = Expand(x, {2, 3, 4});
  ExpectGeometry(e, {2, 3, 4}, {0, 1, 0}, 0);
  EXPECT_EQ(e.raw_data(), x.raw_data());
  ExpectGeometry(Expand(x, {-1, 5}), {3, 5}, {1, 0}, 0);
  ExpectGeometry(Expand(x, {3, 0}), {3, 0}, {1, 0}, 0);
  ExpectGeometry(Expand(Iota({3}), {1, 3}), {1, 3}, {3, 1}, 0);  // new size-1 leading dim keeps a real stride
  ExpectGeometry(Expand(Iota({3}), {2, 3}), {2, 3}, {0, 1}, 0);
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) want.push_back(j);
  EXPECT_EQ(e.ToVector<double>(), want);
  ExpectErrorContains([] { Expand(Iota({3}), {4}); }, ErrorCode::kInvalidArgument,
              "expanded size (4) must match the existing size (3) at non-singleton dim 0");
  ExpectErrorContains([] { Expand(Iota({2, 3}), {3}); }, ErrorCode::kInvalidArgument, "the number of sizes provided (1)");
  ExpectErrorContains([] { Expand(Iota({3}), {-1, 3}); }, ErrorCode::kInvalidArgument, "not allowed in a new leading dim");
}

TEST(ViewTest, UnsqueezeAndSqueezeMatchTorchStrides) {
  Tensor x = Iota({2, 3});
  ExpectGeometry(Unsqueeze(x, 0), {1, 2, 3}, {6, 3, 1}, 0);
  ExpectGeometry(Unsqueeze(x, 1), {2, 1, 3}, {3, 3, 1}, 0);
  ExpectGeometry(Unsqueeze(x, -1), {2, 3, 1}, {3, 1, 1}, 0);
  ExpectGeometry(Unsqueeze(Scalar(1.0), 0), {1}, {1}, 0);
  Tensor y = Iota({1, 3, 1, 2});
  EXPECT_EQ(Squeeze(y).sizes(), (Shape{3, 2}));
  EXPECT_EQ(Squeeze(y, 0).sizes(), (Shape{3, 1, 2}));
  EXPECT_EQ(Squeeze(y, -2).sizes(), (Shape{1, 3, 2}));
  Tensor same = Squeeze(y, 1);  // size 3: a no-op, but still a new alias as in torch
  EXPECT_EQ(same.sizes(), y.sizes());
  EXPECT_FALSE(same.is_same(y));
  EXPECT_EQ(same.raw_data(), y.raw_data());
  EXPECT_EQ(Squeeze(Scalar(2.0)).dim(), 0);
  EXPECT_EQ(Squeeze(Unsqueeze(Transpose(x, 0, 1), 1), 1).ToVector<double>(), Transpose(x, 0, 1).ToVector<double>());
}

TEST(ViewTest, FlattenMatchesTorch) {
  Tensor x = Iota({2, 3, 4});
  Tensor f = Flatten(x);
  EXPECT_EQ(f.sizes(), (Shape{24}));
  EXPECT_EQ(f.raw_data(), x.raw_data());
  EXPECT_EQ(Flatten(x, 1).sizes(), (Shape{2, 12}));
  EXPECT_EQ(Flatten(x, 0, 1).sizes(), (Shape{6, 4}));
  EXPECT_TRUE(Flatten(x, 1, 1).is_same(x));  // torch returns self when start == end
  EXPECT_EQ(Flatten(Scalar(5.0)).sizes(), (Shape{1}));
  Tensor t = Transpose(x, 0, 2);  // [4, 3, 2]
  Tensor ft = Flatten(t, 0, 1);
  EXPECT_EQ(ft.sizes(), (Shape{12, 2}));
  EXPECT_FALSE(SharesStorage(ft, x));
  EXPECT_EQ(ft.ToVector<double>(), t.ToVector<double>());
  ExpectErrorContains([&] { Flatten(x, 2, 1); }, ErrorCode::kInvalidArgument, "cannot come after end_dim");
}

TEST(ViewTest, ContiguousReturnsTheSameHandleOrACopy) {
  Tensor x = Iota({2, 3});
  EXPECT_TRUE(Contiguous(x).is_same(x));
  Tensor t = Transpose(x, 0, 1);
  Tensor c = Contiguous(t);
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_FALSE(SharesStorage(c, x));
  EXPECT_EQ(c.ToVector<double>(), t.ToVector<double>());
  // Through the dispatcher (the DTensor path) a contiguous input comes back as an alias.
  Tensor via_op = autograd::CallOp1(GetOp("contiguous"), {x});
  EXPECT_TRUE(SharesStorage(via_op, x));
  Tensor leaf = RandDouble({2, 3}, 3).set_requires_grad(true);
  Tensor recorded = autograd::CallOp1(GetOp("contiguous"), {leaf});
  EXPECT_FALSE(recorded.is_same(leaf));  // CallOp hands out a fresh handle when it records
  EXPECT_EQ(recorded.grad_fn()->name(), "contiguous");
}

TEST(ViewTest, CopyInPlaceBroadcastsConvertsAndHandlesOverlap) {
  Tensor dst = Zeros({2, 3});
  const uint32_t v0 = dst.impl()->version();
  CopyInPlace(dst, FromVector<int64_t>({1, 2, 3}));
  EXPECT_EQ(dst.ToVector<double>(), (std::vector<double>{1, 2, 3, 1, 2, 3}));
  EXPECT_GT(dst.impl()->version(), v0);
  Tensor ints = Zeros({2}, DType::kInt32);
  CopyInPlace(ints, FromVector<double>({2.7, -2.7}));
  EXPECT_EQ(ints.ToVector<double>(), (std::vector<double>{2, -2}));  // truncation toward zero
  Tensor out = Zeros({3, 2}, DType::kFloat64);
  CopyInPlace(Transpose(out, 0, 1), Iota({2, 3}));
  EXPECT_EQ(out.ToVector<double>(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  Tensor a = Iota({3, 3});
  CopyInPlace(a, Transpose(a, 0, 1));  // src overlaps dst: staged first
  EXPECT_EQ(a.ToVector<double>(), (std::vector<double>{0, 3, 6, 1, 4, 7, 2, 5, 8}));
  ExpectErrorContains([] { CopyInPlace(Expand(Zeros({1}), {3}), Ones({3})); }, ErrorCode::kInvalidArgument,
              "refers to a single memory location");
  ExpectErrorContains([] { CopyInPlace(Zeros({2, 3}), Ones({2})); }, ErrorCode::kInvalidArgument, "not broadcastable");
  ExpectErrorContains([] { CopyInPlace(Zeros({3}), Ones({2, 3})); }, ErrorCode::kInvalidArgument,
              "source shape [2, 3] cannot be broadcast to destination shape [3]");
  Tensor leaf = Zeros({2}, DType::kFloat64).set_requires_grad(true);
  ExpectErrorContains([&] { CopyInPlace(leaf, Ones({2}, DType::kFloat64)); }, ErrorCode::kFailedPrecondition,
              "copy_: in-place operation");
  NoGradGuard no_grad;
  CopyInPlace(leaf, Ones({2}, DType::kFloat64));
  EXPECT_EQ(leaf.ToVector<double>(), (std::vector<double>{1, 1}));
}

TEST(ViewTest, BadDimsAndIndicesAreOutOfRange) {
  Tensor x = Iota({2, 3});
  const ErrorCode kOor = ErrorCode::kOutOfRange;
  ExpectErrorContains([&] { Transpose(x, 0, 2); }, kOor, "transpose: dim 2 out of range");
  ExpectErrorContains([&] { Select(x, 0, 2); }, kOor, "select: index 2 out of range for dim 0 of size 2");
  ExpectErrorContains([&] { Select(x, 1, -4); }, kOor, "select: index -4 out of range");
  ExpectErrorContains([&] { Narrow(x, 1, 4, 0); }, kOor, "narrow: start 4 out of range");
  ExpectErrorContains([&] { Narrow(x, 1, 2, 2); }, kOor, "start (2) + length (2) exceeds the size (3)");
  ExpectErrorContains([&] { Narrow(x, -3, 0, 1); }, kOor, "narrow: dim -3 out of range");
  ExpectErrorContains([&] { Permute(x, {0, 2}); }, kOor, "permute: dim 2 out of range");
  ExpectErrorContains([&] { Unsqueeze(x, 3); }, kOor,
              "unsqueeze: dim 3 out of range for inserting a dim into a tensor of 2 dims (expected [-3, 2])");
  ExpectErrorContains([&] { Unsqueeze(x, -4); }, kOor, "unsqueeze: dim -4 out of range");
  ExpectErrorContains([&] { Squeeze(x, 2); }, kOor, "squeeze: dim 2 out of range");
  ExpectErrorContains([&] { Slice(x, 2, 0, 1); }, kOor, "slice: dim 2 out of range");
  ExpectErrorContains([&] { Chunk(x, 2, 2); }, kOor, "chunk: dim 2 out of range");
  ExpectErrorContains([&] { Flatten(x, 0, 2); }, kOor, "flatten: dim 2 out of range");
  ExpectErrorContains([&] { Slice(x, 0, 0, 1, 0); }, ErrorCode::kInvalidArgument, "slice: step must be positive");
  ExpectErrorContains([&] { Narrow(x, 0, 0, -1); }, ErrorCode::kInvalidArgument, "length must be non-negative");
  ExpectErrorContains([] { Select(Scalar(1.0), 0, 0); }, ErrorCode::kInvalidArgument, "select: cannot be applied to a 0-dim");
}

TEST(ViewTest, ViewOpsAreRegisteredAsAliasingOpsThatSaveNoInputs) {
  for (const char* name : {"view", "narrow", "select", "slice", "transpose", "permute", "expand", "unsqueeze",
                           "squeeze"}) {
    SCOPED_TRACE(name);
    const OpDef& op = GetOp(name);
    EXPECT_TRUE(op.is_view);
    EXPECT_FALSE(op.save_inputs);
    EXPECT_TRUE(static_cast<bool>(op.backward));
  }
  EXPECT_TRUE(GetOp("copy_").is_inplace);
  EXPECT_FALSE(GetOp("contiguous").is_view);
  for (const char* name : {"narrow_backward", "select_backward", "slice_backward"}) EXPECT_NE(FindOp(name), nullptr);
}

TEST(ViewTest, InPlaceWriteToTheBaseDoesNotInvalidateViewBackward) {
  Tensor x = RandDouble({2, 3}, 11).set_requires_grad(true);
  Tensor y = MulScalar(x, 3.0);      // saves nothing either
  Tensor v = Narrow(y, 1, 0, 2);     // saves nothing: backward needs only the input shape
  FillInPlace(y, 1.0);               // bumps the version of the storage v shares
  Backward(v, OnesLike(v));
  ExpectAllClose(x.grad(), {3, 3, 0, 3, 3, 0}, 0, 0);
}

TEST(ViewTest, BackwardMatchesFiniteDifferences) {
  const Tensor a = RandDouble({2, 3, 4}, 1);
  auto check = [&](const char* what, std::function<Tensor(const TensorList&)> f, TensorList in) {
    SCOPED_TRACE(what);
    ExpectGradcheck(f, in);
  };
  check("view", [](const TensorList& in) { return View(in[0], {4, -1}); }, {a});
  check("reshape (copy)", [](const TensorList& in) { return Reshape(Transpose(in[0], 0, 2), {-1}); }, {a});
  check("narrow", [](const TensorList& in) { return Narrow(in[0], 1, 1, 2); }, {a});
  check("select", [](const TensorList& in) { return Select(in[0], 2, -1); }, {a});
  check("slice", [](const TensorList& in) { return Slice(in[0], 2, 1, 4, 2); }, {a});
  check("chunk piece", [](const TensorList& in) { return Chunk(in[0], 3, 2)[1]; }, {a});
  check("chunk pieces summed", [](const TensorList& in) {
    TensorList p = Chunk(in[0], 2, 2);
    return Add(Mul(p[0], p[0]), p[1]);
  }, {a});
  check("split piece", [](const TensorList& in) { return Split(in[0], 2, 1)[1]; }, {a});
  check("split_with_sizes piece", [](const TensorList& in) { return SplitWithSizes(in[0], {1, 0, 3}, 2)[2]; }, {a});
  check("transpose", [](const TensorList& in) { return Transpose(in[0], 0, 2); }, {a});
  check("permute", [](const TensorList& in) { return Permute(in[0], {1, 2, 0}); }, {a});
  check("expand", [](const TensorList& in) { return Expand(in[0], {2, 3, 4}); }, {RandDouble({3, 1}, 2)});
  check("contiguous", [](const TensorList& in) { return Contiguous(Transpose(in[0], 1, 2)); }, {a});
  check("unsqueeze", [](const TensorList& in) { return Unsqueeze(in[0], 1); }, {a});
  check("squeeze all", [](const TensorList& in) { return Squeeze(in[0]); }, {RandDouble({1, 3, 1, 2}, 3)});
  check("squeeze dim", [](const TensorList& in) { return Squeeze(in[0], -2); }, {RandDouble({1, 3, 1, 2}, 4)});
  check("flatten", [](const TensorList& in) { return Flatten(Transpose(in[0], 0, 1), 1); }, {a});
  check("views of a strided input", [](const TensorList& in) {
    return Select(Slice(Permute(in[0], {2, 0, 1}), 0, 0, 4, 3), 1, 1);
  }, {a});
}

TEST(ViewTest, RegionBackwardOpsHaveFiniteDifferenceBackward) {
  const Tensor g = RandDouble({2, 2, 4}, 5);
  const Shape in_shape{2, 3, 4};
  auto call = [](const char* op, const Attrs& attrs) {
    return [op, attrs](const TensorList& in) { return autograd::CallOp1(GetOp(op), {in[0]}, attrs); };
  };
  ExpectGradcheck(call("narrow_backward",
                       Attrs().Set("dim", 1).Set("start", 1).Set("length", 2).Set("input_shape", in_shape)),
                  {g});
  ExpectGradcheck(call("slice_backward", Attrs().Set("dim", 1).Set("start", 0).Set("end", 3).Set("step", 2).Set(
                                             "input_shape", in_shape)),
                  {g});
  ExpectGradcheck(call("select_backward", Attrs().Set("dim", 1).Set("index", 2).Set("input_shape", in_shape)),
                  {RandDouble({2, 4}, 6)});
  Tensor z = autograd::CallOp1(GetOp("select_backward"), {Ones({2, 4}, DType::kFloat64)},
                               Attrs().Set("dim", 1).Set("index", 2).Set("input_shape", in_shape));
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) want.push_back(j == 2 ? 1.0 : 0.0);
  EXPECT_EQ(z.ToVector<double>(), want);
}

}  // namespace
}  // namespace tessel
