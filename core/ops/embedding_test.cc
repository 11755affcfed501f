// core/ops/embedding_test.cc — embedding gather against naive indexing, deterministic scatter-add
// backward (finite differences and naive loops), out-of-range errors.
#include "core/ops/embedding.h"

#include <gtest/gtest.h>

#include <limits>

#include <cmath>
#include <vector>

#include "core/autograd/engine.h"
#include "core/base/error.h"
#include "core/base/testing/expect_error.h"
#include "core/base/parallel.h"
#include "core/ops/testing/gradcheck.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

using testing::ExpectAllClose;
using testing::ExpectGradcheck;
using testing::RandDouble;

// out[i, c] = w[idx[i], c] over flattened indices.
std::vector<double> NaiveGather(const Tensor& w, const std::vector<int64_t>& idx) {
  const std::vector<double> wv = w.ToDoubleVector();
  const int64_t C = w.size(1);
  std::vector<double> out;
  for (int64_t i : idx) {
    for (int64_t c = 0; c < C; ++c) out.push_back(wv[i * C + c]);
  }
  return out;
}

TEST(EmbeddingTest, GathersRowsForAnyIndexShape) {
  Tensor w = RandDouble({5, 3}, 1);
  const std::vector<int64_t> idx = {4, 0, 2, 2, 1, 4};
  Tensor y = Embedding(w, FromVector<int64_t>(idx, {2, 3}));
  EXPECT_EQ(y.sizes(), (Shape{2, 3, 3}));
  ExpectAllClose(y, NaiveGather(w, idx), 0, 0);
  // int32 indices, a 0-d index, and a transposed (strided) table.
  ExpectAllClose(Embedding(w, FromVector<int32_t>({3, 1})), NaiveGather(w, {3, 1}), 0, 0);
  Tensor one = Embedding(w, Scalar(2, DType::kInt64));
  EXPECT_EQ(one.sizes(), (Shape{3}));
  ExpectAllClose(one, NaiveGather(w, {2}), 0, 0);
  Tensor wt_base = RandDouble({3, 5}, 2);
  Tensor wt = MakeView(wt_base, {5, 3}, {1, 5}, 0);
  ExpectAllClose(Embedding(wt, FromVector<int64_t>({0, 4})), NaiveGather(wt, {0, 4}), 0, 0);
}

TEST(EmbeddingTest, BackwardMatchesFiniteDifferencesWithRepeatedIndices) {
  Tensor idx = FromVector<int64_t>({1, 3, 1, 0, 3, 3}, {2, 3});
  ExpectGradcheck([&](const TensorList& in) { return Embedding(in[0], idx); }, {RandDouble({4, 5}, 3)});
}

TEST(EmbeddingTest, PaddingIdxRowGetsNoGradientFromItsPositions) {
  const Tensor idx = FromVector<int64_t>({1, 3, 1, 0, 3, 2}, {2, 3});
  Tensor w = RandDouble({4, 2}, 5);
  w.set_requires_grad(true);
  const Tensor g = RandDouble({2, 3, 2}, 6);
  const Tensor y = Embedding(w, idx, -1);  // row 3
  ExpectAllClose(y, NaiveGather(w, {1, 3, 1, 0, 3, 2}), 0, 0);
  Backward(y, g);
  // Row r's gradient: the sum of g over the positions looking up r; row 3 none.
  const std::vector<double> gv = g.ToDoubleVector(), dw = w.grad().ToDoubleVector();
  const std::vector<int64_t> iv = {1, 3, 1, 0, 3, 2};
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t c = 0; c < 2; ++c) {
      double want = 0;
      for (size_t p = 0; p < iv.size(); ++p) want += iv[p] == r && r != 3 ? gv[p * 2 + c] : 0.0;
      EXPECT_EQ(dw[r * 2 + c], want) << r << "," << c;
    }
  }
  testing::ExpectErrorContains([&] { Embedding(w, idx, 4); }, ErrorCode::kInvalidArgument,
                               "padding_idx must be within num_embeddings (4 rows), got 4");
  testing::ExpectErrorContains([&] { Embedding(Detach(w), idx, -5); }, ErrorCode::kInvalidArgument,
                               "padding_idx must be within num_embeddings (4 rows), got -5");  // without grad too
}

TEST(EmbeddingTest, BackwardScatterAddsInIndexOrderWithAnyThreadCount) {
  const int64_t V = 7, C = 70, n = 300;
  Generator gen(4);
  Tensor idx = Randint(0, V, Shape{n}, gen);
  Tensor g = Randn({n, C}, gen, DType::kFloat32);
  const std::vector<int64_t> iv = idx.ToVector<int64_t>();
  const std::vector<float> gv = g.ToVector<float>();
  // Reference: float sums in index order (the order the kernel promises), so results match bitwise.
  std::vector<float> expected(V * C, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < C; ++c) expected[iv[i] * C + c] += gv[i * C + c];
  }
  for (int threads : {1, 2, 3}) {
    NumThreadsGuard guard(threads);
    Tensor w = Zeros({V, C}).set_requires_grad(true);
    Backward(Embedding(w, idx), g);
    EXPECT_EQ(w.grad().ToVector<float>(), expected) << threads << " threads";
  }
}

TEST(EmbeddingTest, BFloat16BackwardRoundsAfterEachAddedRowAsTorch) {
  // torch 2.15 adds each row into a bf16 gradient in index order: 300 additions of 1 stall at 256 (bf16's spacing
  // there is 2), which torch prints for this case; a float32 sum rounded once would give 300.
  Tensor w = Zeros({2, 1}, DType::kBFloat16).set_requires_grad(true);
  Tensor idx = Zeros({300}, DType::kInt64);
  Backward(Embedding(w, idx), Ones({300, 1}, DType::kBFloat16));
  EXPECT_EQ(w.grad().ToVector<double>(), (std::vector<double>{256, 0}));
  EXPECT_EQ(w.grad().dtype(), DType::kBFloat16);
}

TEST(EmbeddingTest, OutOfRangeIndexRaisesOutOfRangeNamingIndexAndRows) {
  Tensor w = Zeros({5, 3});
  for (int64_t bad : {5, -1}) {
    try {
      Embedding(w, FromVector<int64_t>({0, bad}));
      ADD_FAILURE() << "no error for index " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kOutOfRange);
      const std::string msg = e.what();
      EXPECT_NE(msg.find(Str("embedding: index ", bad, " ")), std::string::npos) << msg;
      EXPECT_NE(msg.find("weight [5, 3] with 5 rows"), std::string::npos) << msg;
    }
  }
  try {
    Embedding(w, FromVector<double>({0.0}));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("indices must be int64 or int32, got float64"), std::string::npos);
  }
}

TEST(EmbeddingTest, RenormScalesOnlyTheNamedRowsAboveMaxNormToIt) {
  // Rows (3, 4) norm 5, (0.6, 0.8) norm 1, (6, 8) norm 10 (not looked up), (-1, 2, ...) in L1 below.
  Tensor w = FromVector<float>({3, 4, 0.6f, 0.8f, 6, 8}, {3, 2});
  w.set_requires_grad(true);
  const uint32_t version = w.impl()->version();
  EmbeddingRenorm_(w, FromVector<int64_t>({0, 1, 0}, {3}), /*max_norm=*/2.0, /*norm_type=*/2.0);
  const double s = 2.0 / (5.0 + 1e-7);  // torch's factor
  ExpectAllClose(w, std::vector<double>{3 * s, 4 * s, 0.6, 0.8, 6, 8}, 1e-6, 0);
  EXPECT_GT(w.impl()->version(), version);  // an in-place write: saved copies of w are caught
  EXPECT_FALSE(w.grad().defined());
  // L1 norm: |(-1, 2)| = 3 > 1.5 scales by 1.5 / 3; norm_type 3: (2, 2) has 16^(1/3) = 2.52 > 2.
  Tensor v = FromVector<double>({-1, 2, 2, 2}, {2, 2});
  EmbeddingRenorm_(v, FromVector<int64_t>({0}, {1}), 1.5, 1.0);
  EmbeddingRenorm_(v, FromVector<int64_t>({1}, {1}), 2.0, 3.0);
  const double c = std::cbrt(16.0);
  ExpectAllClose(v, std::vector<double>{-1.5 / (3 + 1e-7), 3.0 / (3 + 1e-7), 4.0 / (c + 1e-7), 4.0 / (c + 1e-7)}, 1e-9, 0);
  // inf-norm: the largest magnitude; (0.5, -3) has 3 > 2 and scales, (1, 1.5) has 1.5 and stays (pow(a, inf)
  // once made every row's norm inf and scaled it by max_norm / inf)
  Tensor u = FromVector<double>({0.5, -3, 1, 1.5}, {2, 2});
  EmbeddingRenorm_(u, FromVector<int64_t>({0, 1}, {2}), 2.0, std::numeric_limits<double>::infinity());
  ExpectAllClose(u, std::vector<double>{0.5 * 2 / (3 + 1e-7), -3 * 2 / (3 + 1e-7), 1, 1.5}, 1e-12, 0);
  testing::ExpectErrorContains([&] { EmbeddingRenorm_(w, FromVector<int64_t>({3}, {1}), 1.0, 2.0); },
                               ErrorCode::kOutOfRange, "embedding: index 3 ");
  testing::ExpectErrorContains([&] { EmbeddingRenorm_(w, FromVector<int64_t>({0}, {1}), -1.0, 2.0); },
                               ErrorCode::kInvalidArgument, "max_norm must be >= 0");
}

}  // namespace
}  // namespace tessel
