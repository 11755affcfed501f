// core/ops/matmul_test.cc — matmul/linear values against naive double loops, in-place reads of
// transposed views, 16-bit rounding, finite-difference backward for every shape case and flag, errors.
#include "core/ops/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/autograd/call.h"
#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "core/dispatch/op.h"
#include "core/memory/allocator.h"
#include "core/ops/elementwise.h"
#include "core/ops/gemm.h"
#include "core/ops/testing/gradcheck.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"
#include "core/tensor/tensor_impl.h"
#include "core/base/testing/expect_error.h"

namespace tessel {
namespace {

using testing::ExpectAllClose;
using testing::ExpectGradcheck;

Tensor Rnd(const Shape& shape, uint64_t seed, DType dtype = DType::kFloat64) {
  Generator gen(seed);
  return Random(shape, gen, Distribution::Uniform(-1, 1), dtype);
}

struct Ref {
  std::vector<double> values;
  Shape shape;
};

// torch.matmul(op(a), op(b)) in double loops, where op swaps the last two dims of a >= 2-D operand.
Ref NaiveMatmul(const Tensor& a, const Tensor& b, bool ta = false, bool tb = false) {
  const std::vector<double> av = a.ToDoubleVector(), bv = b.ToDoubleVector();
  Shape as = a.sizes(), bs = b.sizes();
  Shape sa = ContiguousStrides(as), sb = ContiguousStrides(bs);
  auto swap_last = [](Shape& s) { std::swap(s[s.size() - 1], s[s.size() - 2]); };
  if (ta && as.size() >= 2) swap_last(as), swap_last(sa);
  if (tb && bs.size() >= 2) swap_last(bs), swap_last(sb);
  const bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as = {1, as[0]}, sa = {0, sa[0]};
  if (b1) bs = {bs[0], 1}, sb = {sb[0], 0};
  const size_t ra = as.size(), rb = bs.size();
  const int64_t M = as[ra - 2], K = as[ra - 1], N = bs[rb - 1];
  const Shape batch = BroadcastShapes(Shape(as.begin(), as.end() - 2), Shape(bs.begin(), bs.end() - 2), "ref");
  Ref r;
  for (int64_t flat = 0; flat < NumElements(batch); ++flat) {
    int64_t oa = 0, ob = 0, rem = flat;
    for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
      const int64_t i = rem % batch[d];
      rem /= batch[d];
      const int64_t da = d - static_cast<int64_t>(batch.size()) + static_cast<int64_t>(ra) - 2;
      const int64_t db = d - static_cast<int64_t>(batch.size()) + static_cast<int64_t>(rb) - 2;
      if (da >= 0 && as[da] != 1) oa += i * sa[da];
      if (db >= 0 && bs[db] != 1) ob += i * sb[db];
    }
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += av[oa + m * sa[ra - 2] + k * sa[ra - 1]] * bv[ob + k * sb[rb - 2] + n * sb[rb - 1]];
        r.values.push_back(s);
      }
    }
  }
  r.shape = batch;
  if (!a1) r.shape.push_back(M);
  if (!b1) r.shape.push_back(N);
  return r;
}

// 1-D·1-D, 2-D·2-D, 1-D promoted on either side, batched, broadcast batch dims, folded rows.
const std::vector<std::pair<Shape, Shape>> kShapeCases = {
    {{3}, {3}},          {{2, 3}, {3, 4}},       {{3}, {3, 4}},
    {{2, 3}, {3}},       {{2, 2, 3}, {2, 3, 4}}, {{2, 1, 3, 4}, {5, 4, 2}},
    {{4, 2, 3}, {3}},    {{3}, {4, 3, 2}},       {{5, 3, 4}, {4, 2}},
    {{3, 4}, {5, 4, 2}}, {{1, 3}, {3, 1}},       {{2, 0}, {0, 3}},
};

Tensor MatmulWithFlags(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  return autograd::CallOp1(GetOp("matmul"), {a, b}, Attrs().Set("transpose_a", ta).Set("transpose_b", tb));
}

// A product's operand is read only by the other operand's gradient (torch saves it only then): a weight updated
// in place between forward and backward (an optimizer step, an EMA, weight clipping) is no error while the
// activation it multiplies needs no gradient, and the weight's gradient is read from the activation. Once the
// activation needs a gradient, the weight's values are read and the write is caught, as in torch.
TEST(MatmulTest, AnOperandWrittenAfterTheForwardIsAnErrorOnlyWhenAGradientReadsIt) {
  const Tensor data = FromVector<double>({1, 2, 3, 4}, {2, 2});
  auto weight = [] { return FromVector<double>({1, -1, 2, 0.5}, {2, 2}).set_requires_grad(true); };
  const Tensor bias_values = FromVector<double>({0.25, -0.5});
  for (int op = 0; op < 3; ++op) {
    SCOPED_TRACE(op);
    Tensor w = weight(), b = Detach(bias_values).set_requires_grad(true);
    Tensor y = op == 0 ? Matmul(data, w) : op == 1 ? Mul(w, data) : Linear(data, w, b);
    {
      NoGradGuard no_grad;
      MulScalarInPlace(w, 0.5);
      if (op == 2) MulScalarInPlace(b, 2.0);  // linear's bias is read by no gradient
    }
    Backward(y, OnesLike(y));
    // matmul: dW = dataᵀ·1; mul: dW = data; linear: dW = 1ᵀ·data, db = column sums of 1
    const std::vector<double> expected = op == 0 ? std::vector<double>{4, 4, 6, 6}
                                         : op == 1 ? std::vector<double>{1, 2, 3, 4}
                                                   : std::vector<double>{4, 6, 4, 6};
    EXPECT_EQ(w.grad().ToVector<double>(), expected);
    if (op == 2) {
      EXPECT_EQ(b.grad().ToVector<double>(), (std::vector<double>{2, 2}));
    }
  }
  for (int op = 0; op < 3; ++op) {
    SCOPED_TRACE(op);
    Tensor w = weight();
    const Tensor x = Detach(data).set_requires_grad(true);
    Tensor y = op == 0 ? Matmul(x, w) : op == 1 ? Mul(w, x) : Linear(x, w, Tensor());
    {
      NoGradGuard no_grad;
      MulScalarInPlace(w, 0.5);
    }
    testing::ExpectErrorContains([&] { Backward(y, OnesLike(y)); }, ErrorCode::kFailedPrecondition,
                                 {"modified by an inplace operation", "is at version 1; expected version 0 instead",
                                  "Hint: enable anomaly detection", "torch.autograd.set_detect_anomaly(True)"});
  }
}

TEST(MatmulTest, MatchesNaiveLoopsForEveryShapeCase) {
  for (const auto& [as, bs] : kShapeCases) {
    SCOPED_TRACE(ShapeStr(as) + " @ " + ShapeStr(bs));
    for (DType dt : {DType::kFloat64, DType::kFloat32}) {
      Tensor a = Rnd(as, 1, dt), b = Rnd(bs, 2, dt);
      const Ref ref = NaiveMatmul(a, b);
      Tensor y = Matmul(a, b);
      EXPECT_EQ(y.sizes(), ref.shape);
      EXPECT_EQ(y.dtype(), dt);
      ExpectAllClose(y, ref.values, dt == DType::kFloat64 ? 1e-12 : 1e-5, 1e-5);
    }
  }
}

TEST(MatmulTest, LargeBatchedProductsMatchNaiveLoopsOnEveryKernelPath) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{4, 50, 40}, {40, 30}},         // batch folded into the rows of one GEMM
      {{64, 8, 8}, {64, 8, 8}},        // many small GEMMs, parallel over the batch
      {{2, 150, 150}, {2, 150, 150}},  // few large GEMMs, each split over threads by Gemm
      {{3, 1, 20, 30}, {4, 30, 10}},   // broadcast batch dims
  };
  for (const auto& [as, bs] : cases) {
    SCOPED_TRACE(ShapeStr(as) + " @ " + ShapeStr(bs));
    Tensor a = Rnd(as, 3, DType::kFloat32), b = Rnd(bs, 4, DType::kFloat32);
    ExpectAllClose(Matmul(a, b), NaiveMatmul(a, b).values, 1e-4, 1e-4);
  }
}

TEST(MatmulTest, TransposeFlagsMatchNaiveLoopsOnTransposedData) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "transpose_a=" << ta << " transpose_b=" << tb);
      Tensor a = Rnd(ta ? Shape{2, 1, 4, 3} : Shape{2, 1, 3, 4}, 5);
      Tensor b = Rnd(tb ? Shape{5, 2, 4} : Shape{5, 4, 2}, 6);
      const Ref ref = NaiveMatmul(a, b, ta, tb);
      Tensor y = MatmulWithFlags(a, b, ta, tb);
      EXPECT_EQ(y.sizes(), (Shape{2, 5, 3, 2}));
      ExpectAllClose(y, ref.values, 1e-12, 1e-12);
      ExpectGradcheck([&](const TensorList& in) { return MatmulWithFlags(in[0], in[1], ta, tb); }, {a, b});
    }
  }
}

TEST(MatmulTest, ProductsThatBackwardCallsMatchLoopsAndAreDifferentiable) {
  // sum_batch: Σ_b a[b] @ b, and g^T @ x summed over the batch (grad_w of a 3-D linear).
  Tensor a = Rnd({3, 2, 4}, 30), b = Rnd({4, 5}, 31);
  const Attrs sum = Attrs().Set("sum_batch", true);
  auto summed = [](const Tensor& x, const Tensor& y, const Attrs& at) {
    return autograd::CallOp1(GetOp("matmul"), {x, y}, at);
  };
  std::vector<double> expected(2 * 5, 0.0);
  const std::vector<double> full = NaiveMatmul(a, b).values;
  for (size_t i = 0; i < full.size(); ++i) expected[i % expected.size()] += full[i];
  Tensor y = summed(a, b, sum);
  EXPECT_EQ(y.sizes(), (Shape{2, 5}));
  ExpectAllClose(y, expected, 1e-12, 1e-12);
  ExpectGradcheck([&](const TensorList& in) { return summed(in[0], in[1], sum); }, {a, b});
  const Attrs gw = Attrs().Set("transpose_a", true).Set("sum_batch", true);
  ExpectGradcheck([&](const TensorList& in) { return summed(in[0], in[1], gw); },
                  {Rnd({2, 3, 4}, 32), Rnd({2, 3, 5}, 33)});
  // Inserted dims: the outer product [4, 1] @ [1, 5] of two vectors.
  const Attrs outer = Attrs().Set("a_new_dims", std::vector<int64_t>{-1}).Set("b_new_dims", std::vector<int64_t>{-2});
  Tensor u = Rnd({4}, 34), v = Rnd({5}, 35);
  EXPECT_EQ(summed(u, v, outer).sizes(), (Shape{4, 5}));
  ExpectGradcheck([&](const TensorList& in) { return summed(in[0], in[1], outer); }, {u, v});
}

TEST(MatmulTest, TransposedViewIsReadInPlaceWithoutACopy) {
  const Device cpu = CurrentDevice();
  Tensor x = Rnd({64, 512}, 7, DType::kFloat32);
  Tensor w = Rnd({256, 512}, 8, DType::kFloat32);
  Tensor wt = MakeView(w, {512, 256}, {1, 512}, 0);  // Transpose(w, 0, 1)
  const int64_t out_bytes = 64 * 256 * 4;
  memory::ResetPeaks(cpu);
  const int64_t live = memory::Stats(cpu).total.live;
  Tensor y = Matmul(x, wt);
  EXPECT_EQ(memory::Stats(cpu).total.peak - live, out_bytes) << "the transposed operand was copied";
  ExpectAllClose(y, NaiveMatmul(x, wt).values, 1e-4, 1e-4);

  // Batched K^T of attention: [B, T, D] viewed as [B, D, T].
  Tensor q = Rnd({2, 6, 4}, 9), k = Rnd({2, 6, 4}, 10);
  Tensor kt = MakeView(k, {2, 4, 6}, {24, 1, 4}, 0);
  ExpectAllClose(Matmul(q, kt), NaiveMatmul(q, kt).values, 1e-12, 1e-12);

  // Neither of the last two strides is 1 (every other row and column): copied, still exact.
  Tensor big = Rnd({8, 12}, 11);
  Tensor strided = MakeView(big, {4, 6}, {24, 2}, 1);
  Tensor v = Rnd({6, 3}, 12);
  ExpectAllClose(Matmul(strided, v), NaiveMatmul(strided, v).values, 1e-12, 1e-12);
}

TEST(MatmulTest, BFloat16ComputesInFloatAndRoundsOnce) {
  for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
    Tensor a = Rnd({2, 7, 33}, 13, dt), b = Rnd({33, 5}, 14, dt);
    Tensor y = Matmul(a, b);
    EXPECT_EQ(y.dtype(), dt);
    // Reference on the exact 16-bit inputs; one final rounding: relative error <= 2^-8 (bf16).
    ExpectAllClose(y, NaiveMatmul(a, b).values, 1e-3, dt == DType::kBFloat16 ? 1.0 / 256 : 1.0 / 2048);
  }
}

TEST(MatmulTest, BackwardMatchesFiniteDifferencesForEveryShapeCase) {
  for (const auto& [as, bs] : kShapeCases) {
    SCOPED_TRACE(ShapeStr(as) + " @ " + ShapeStr(bs));
    ExpectGradcheck([](const TensorList& in) { return Matmul(in[0], in[1]); }, {Rnd(as, 15), Rnd(bs, 16)});
  }
}

TEST(MatmulTest, GradientsOfLargeFloatProductsMatchNaiveLoops) {
  // x [3, 20, 16] @ w^T: grad_w takes the folded sum-over-batch GEMM, grad_x the folded-rows GEMM.
  Tensor x = Rnd({3, 20, 16}, 17, DType::kFloat32).set_requires_grad(true);
  Tensor w = Rnd({8, 16}, 18, DType::kFloat32).set_requires_grad(true);
  Tensor g = Rnd({3, 20, 8}, 19, DType::kFloat32);
  Backward(Linear(x, w), g);
  const Tensor g2 = MakeView(g, {60, 8}, {8, 1}, 0), x2 = MakeView(x, {60, 16}, {16, 1}, 0);
  ExpectAllClose(w.grad(), NaiveMatmul(g2, x2, /*ta=*/true).values, 1e-4, 1e-4);
  ExpectAllClose(x.grad(), NaiveMatmul(g, w).values, 1e-4, 1e-4);
}

std::vector<double> NaiveLinear(const Tensor& x, const Tensor& w, const Tensor& b) {
  std::vector<double> y = NaiveMatmul(x, w, false, true).values;
  if (!b.defined()) return y;
  const std::vector<double> bv = b.ToDoubleVector();
  for (size_t i = 0; i < y.size(); ++i) y[i] += bv[i % bv.size()];
  return y;
}

// bf16 on both GEMM paths (native oneDNN where the CPU has AMX-BF16 or AMD's AVX512-BF16, and the forced
// fp32 fallback), against double loops on the same bf16 values. Products are exact in fp32 and summed in fp32, then
// rounded once to bf16: |y - ref| <= 2^-8 |ref| (output rounding) + 2 (K + 1) 2^-24 K (fp32 sums of
// K products of magnitude <= 1).
void ExpectBf16Matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const Ref ref = NaiveMatmul(a, b, ta, tb);
  const int64_t k = ta ? a.size(a.dim() - 2) : a.size(a.dim() - 1);
  Tensor y = MatmulWithFlags(a, b, ta, tb);
  EXPECT_EQ(y.dtype(), DType::kBFloat16);
  EXPECT_EQ(y.sizes(), ref.shape);
  ExpectAllClose(y, ref.values, 2.0 * (k + 1) * k / (1 << 24), 1.0 / 256);
}

TEST(MatmulTest, BFloat16MatchesDoubleLoopsOnNativeAndFallbackPaths) {
  for (bool fallback : {false, true}) {
    SetBf16GemmFallbackForTesting(fallback);
    SCOPED_TRACE(Bf16GemmBackend());
    for (const auto& [as, bs] : kShapeCases) {
      SCOPED_TRACE(ShapeStr(as) + " @ " + ShapeStr(bs));
      ExpectBf16Matmul(Rnd(as, 40, DType::kBFloat16), Rnd(bs, 41, DType::kBFloat16), false, false);
    }
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "transpose_a=" << ta << " transpose_b=" << tb);
        // Odd sizes, large enough that Gemm splits the product over threads.
        Tensor a = Rnd(ta ? Shape{2, 97, 131} : Shape{2, 131, 97}, 42, DType::kBFloat16);
        Tensor b = Rnd(tb ? Shape{2, 67, 97} : Shape{2, 97, 67}, 43, DType::kBFloat16);
        ExpectBf16Matmul(a, b, ta, tb);
      }
    }
    // A linear with bias and its weight gradient (g^T @ x summed over the batch: bf16 read transposed).
    Tensor x = Rnd({3, 40, 72}, 44, DType::kBFloat16).set_requires_grad(true);
    Tensor w = Rnd({56, 72}, 45, DType::kBFloat16).set_requires_grad(true);
    Tensor bias = Rnd({56}, 46, DType::kBFloat16);
    ExpectAllClose(Linear(x, w, bias), NaiveLinear(x, w, bias), 2.0 * 73 * 73 / (1 << 24), 1.0 / 256);
    Tensor g = Rnd({3, 40, 56}, 47, DType::kBFloat16);
    Backward(Linear(x, w), g);
    const Tensor g2 = MakeView(g, {120, 56}, {56, 1}, 0), x2 = MakeView(x, {120, 72}, {72, 1}, 0);
    ExpectAllClose(w.grad(), NaiveMatmul(g2, x2, /*ta=*/true).values, 2.0 * 121 * 120 / (1 << 24), 1.0 / 256);
    ExpectAllClose(x.grad(), NaiveMatmul(g, w).values, 2.0 * 57 * 56 / (1 << 24), 1.0 / 256);
  }
  SetBf16GemmFallbackForTesting(false);
}

TEST(LinearTest, MatchesNaiveLoopsWithAndWithoutBias) {
  Tensor x = Rnd({2, 3, 5}, 20), w = Rnd({4, 5}, 21), b = Rnd({4}, 22);
  Tensor y = Linear(x, w, b);
  EXPECT_EQ(y.sizes(), (Shape{2, 3, 4}));
  ExpectAllClose(y, NaiveLinear(x, w, b), 1e-12, 1e-12);
  ExpectAllClose(Linear(x, w), NaiveLinear(x, w, Tensor()), 1e-12, 1e-12);
  Tensor x1 = Rnd({5}, 23);
  EXPECT_EQ(Linear(x1, w, b).sizes(), (Shape{4}));
  ExpectAllClose(Linear(x1, w, b), NaiveLinear(x1, w, b), 1e-12, 1e-12);
  Tensor x16 = Rnd({3, 5}, 24, DType::kBFloat16), w16 = Rnd({4, 5}, 25, DType::kBFloat16);
  Tensor b16 = Rnd({4}, 26, DType::kBFloat16);
  ExpectAllClose(Linear(x16, w16, b16), NaiveLinear(x16, w16, b16), 1e-3, 1.0 / 256);
}

TEST(LinearTest, BackwardMatchesFiniteDifferences) {
  Tensor w = Rnd({4, 5}, 27), b = Rnd({4}, 28);
  for (const Shape& xs : {Shape{2, 3, 5}, Shape{3, 5}, Shape{5}}) {
    SCOPED_TRACE(ShapeStr(xs));
    Tensor x = Rnd(xs, 29);
    ExpectGradcheck([](const TensorList& in) { return Linear(in[0], in[1], in[2]); }, {x, w, b});
    ExpectGradcheck([](const TensorList& in) { return Linear(in[0], in[1]); }, {x, w});
  }
}

using ::tessel::testing::ExpectErrorContains;

// Small integers (|x| <= 3, or 0..5 unsigned) so the double loops of NaiveMatmul are exact.
Tensor RndInt(const Shape& shape, uint64_t seed, DType dtype) {
  Generator gen(seed);
  const bool is_unsigned = dtype == DType::kUInt8;
  Tensor u = Random(shape, gen, Distribution::Uniform(is_unsigned ? 0 : -3, is_unsigned ? 6 : 4), DType::kFloat64);
  std::vector<double> v = u.ToDoubleVector();
  for (double& x : v) x = std::floor(x);
  return FromDoubles(v, shape, dtype);
}

std::vector<int64_t> Rounded(const std::vector<double>& v) {
  std::vector<int64_t> out;
  for (double x : v) out.push_back(static_cast<int64_t>(x));
  return out;
}

TEST(MatmulTest, IntegerProductsAreExactForEveryShapeCaseDtypeAndFlag) {
  for (const auto& [as, bs] : kShapeCases) {
    for (DType dt : {DType::kInt64, DType::kInt32, DType::kInt16, DType::kInt8, DType::kUInt8}) {
      SCOPED_TRACE(ShapeStr(as) + " @ " + ShapeStr(bs) + " " + std::string(DTypeName(dt)));
      Tensor a = RndInt(as, 40, dt), b = RndInt(bs, 41, dt);
      const Ref ref = NaiveMatmul(a, b);
      Tensor y = Matmul(a, b);
      EXPECT_EQ(y.sizes(), ref.shape);
      EXPECT_EQ(y.dtype(), dt);
      EXPECT_EQ(y.ToInt64Vector(), Rounded(ref.values));
    }
  }
  // Transposed reads (strided views) and broadcast batches.
  Tensor a = RndInt({2, 1, 4, 3}, 42, DType::kInt64), b = RndInt({3, 5, 4}, 43, DType::kInt64);
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Tensor x = ta ? a : RndInt({2, 1, 3, 4}, 44, DType::kInt64);
      Tensor w = tb ? b : RndInt({3, 4, 5}, 45, DType::kInt64);
      EXPECT_EQ(MatmulWithFlags(x, w, ta, tb).ToInt64Vector(), Rounded(NaiveMatmul(x, w, ta, tb).values));
    }
  }
}

TEST(MatmulTest, IntegerProductsWrapInTheirDtypeAsTorch) {
  const int64_t big = int64_t{1} << 62;
  // 2^62·2 + 2^62·2 = 2^64 wraps to 0; + 1·3 gives 3.
  EXPECT_EQ(Matmul(FromVector<int64_t>({big, big, 1}, {1, 3}), FromVector<int64_t>({2, 2, 3}, {3, 1})).ToInt64Vector(),
            (std::vector<int64_t>{3}));
  // int32: (2^31 - 1) + 1 = -2^31; uint8: 200·2 = 400 = 144 mod 256; int8: 100 + 100 = -56.
  EXPECT_EQ(Matmul(FromDoubles({2147483647.0, 1.0}, std::vector<int64_t>{2}, DType::kInt32),
                   FromDoubles({1.0, 1.0}, std::vector<int64_t>{2}, DType::kInt32))
                .ToInt64Vector(),
            (std::vector<int64_t>{-2147483648LL}));
  EXPECT_EQ(Matmul(FromDoubles({200.0}, std::vector<int64_t>{1, 1}, DType::kUInt8),
                   FromDoubles({2.0}, std::vector<int64_t>{1, 1}, DType::kUInt8))
                .ToInt64Vector(),
            (std::vector<int64_t>{144}));
  EXPECT_EQ(Matmul(FromDoubles({100.0, 100.0}, std::vector<int64_t>{2}, DType::kInt8),
                   FromDoubles({1.0, 1.0}, std::vector<int64_t>{2}, DType::kInt8))
                .ToInt64Vector(),
            (std::vector<int64_t>{-56}));
}

TEST(LinearTest, IntegerInputsMatchNaiveLoopsWithBias) {
  Tensor x = RndInt({2, 3, 5}, 46, DType::kInt32), w = RndInt({4, 5}, 47, DType::kInt32);
  Tensor b = RndInt({4}, 48, DType::kInt32);
  Tensor y = Linear(x, w, b);
  EXPECT_EQ(y.dtype(), DType::kInt32);
  EXPECT_EQ(y.sizes(), (Shape{2, 3, 4}));
  EXPECT_EQ(y.ToInt64Vector(), Rounded(NaiveLinear(x, w, b)));
}

TEST(MatmulTest, BoolOperandsAreUnimplementedAsInTorch) {
  ExpectErrorContains([] { Matmul(Zeros({2, 3}, DType::kBool), Zeros({3, 2}, DType::kBool)); },
                      ErrorCode::kUnimplemented, {"matmul: not implemented for bool tensors", "[2, 3] @ [3, 2]"});
}

TEST(MatmulTest, MismatchedShapesRaiseErrorsNamingBothShapes) {
  ExpectErrorContains(
      [] {
        Matmul(Zeros({2, 3}), Zeros({4, 5}));
      },
      ErrorCode::kInvalidArgument, {"matmul: inner dimensions do not match", "[2, 3]", "[4, 5]"});
  ExpectErrorContains(
      [] {
        Matmul(Zeros({2, 2, 3}), Zeros({3, 3, 4}));
      },
      ErrorCode::kInvalidArgument, {"batch dims [2] and [3] do not broadcast", "[2, 2, 3] @ [3, 3, 4]"});
  ExpectErrorContains([] { Matmul(Scalar(1.0), Zeros({3})); }, ErrorCode::kInvalidArgument,
              {"need at least 1 dim", "[] @ [3]"});
  ExpectErrorContains(
      [] {
        Matmul(Zeros({2, 3}), Zeros({3, 4}, DType::kFloat64));
      },
      ErrorCode::kInvalidArgument, {"dtype mismatch float32 vs float64"});
  ExpectErrorContains(
      [] {
        Linear(Zeros({2, 3}), Zeros({4, 5}));
      },
      ErrorCode::kInvalidArgument, {"linear: input [2, 3] has in_features 3 but weight [4, 5] expects 5"});
  ExpectErrorContains(
      [] {
        Linear(Zeros({2, 5}), Zeros({4, 5}), Zeros({3}));
      },
      ErrorCode::kInvalidArgument, {"linear: bias [3] does not match weight [4, 5]"});
}

}  // namespace
}  // namespace tessel
