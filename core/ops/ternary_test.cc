#include "core/ops/ternary.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/autograd/engine.h"
#include "core/base/error.h"
#include "core/ops/elementwise.h"
#include "core/ops/testing/gradcheck.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

using testing::ExpectErrorContains;

using testing::ExpectAllClose;
using testing::ExpectGradcheck;
using testing::RandDouble;

Tensor Bools(const std::vector<int>& v, std::vector<int64_t> shape) {
  std::vector<double> d(v.begin(), v.end());
  return FromDoubles(d, shape, DType::kBool);
}

TEST(TernaryTest, WhereBroadcastsAllThreeOperands) {
  Tensor cond = Bools({1, 0, 1}, {3, 1});
  for (DType dt : {DType::kFloat64, DType::kBFloat16, DType::kInt64}) {
    SCOPED_TRACE(::testing::Message() << dt);
    Tensor a = FromDoubles({1, 2, 3, 4}, std::vector<int64_t>{1, 4}, dt);
    Tensor b = FromDoubles({-1, -2, -3, -4}, std::vector<int64_t>{4}, dt);
    Tensor y = Where(cond, a, b);
    ASSERT_EQ(y.sizes(), (Shape{3, 4}));
    EXPECT_EQ(y.dtype(), dt);
    std::vector<double> want;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) want.push_back(i != 1 ? j + 1 : -(j + 1));
    EXPECT_EQ(y.ToDoubleVector(), want);
  }
}

TEST(TernaryTest, WhereOnTransposedViewsMatchesNaiveLoops) {
  Tensor a = RandDouble({3, 4}, 1);
  Tensor b = RandDouble({4, 3}, 2);
  Tensor at = MakeView(a, {4, 3}, {1, 4}, 0);
  Tensor cond = Gt(at, b);  // strided comparison, too
  Tensor y = Where(cond, at, b);
  const auto av = a.ToDoubleVector(), bv = b.ToDoubleVector(), cv = cond.ToDoubleVector();
  std::vector<double> want, want_cond;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) {
      const double x = av[j * 4 + i], z = bv[i * 3 + j];
      want_cond.push_back(x > z);
      want.push_back(x > z ? x : z);
    }
  EXPECT_EQ(cv, want_cond);
  EXPECT_EQ(y.ToDoubleVector(), want);
}

TEST(TernaryTest, MaskedFillBroadcastsMaskAndInput) {
  Tensor x = RandDouble({2, 3, 4}, 3);
  Tensor mask = Bools({0, 1, 0}, {3, 1});
  const auto xv = x.ToDoubleVector();
  std::vector<double> want = xv;
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) want[(i * 3 + 1) * 4 + k] = -INFINITY;
  ExpectAllClose(MaskedFill(x, mask, -INFINITY), want, 0, 0);
  // A mask larger than x broadcasts x (torch's out-of-place masked_fill).
  Tensor row = FromVector<float>({1, 2});
  Tensor y = MaskedFill(row, Bools({1, 0, 0, 1}, {2, 2}), 9.0);
  ASSERT_EQ(y.sizes(), (Shape{2, 2}));
  EXPECT_EQ(y.ToDoubleVector(), (std::vector<double>{9, 2, 1, 9}));
  Tensor bf = MaskedFill(FromDoubles({1, 2, 3}, std::vector<int64_t>{3}, DType::kBFloat16), Bools({0, 1, 0}, {3}), 0.1);
  EXPECT_EQ(bf.ToDoubleVector(), (std::vector<double>{1, 0.10009765625, 3}));  // 0.1 rounded to bf16
  EXPECT_EQ(MaskedFill(FromVector<int64_t>({4, 5}), Bools({1, 0}, {2}), -2.0).ToVector<int64_t>(),
            (std::vector<int64_t>{-2, 5}));
}

TEST(TernaryTest, SameShapeOperandsSelectExactValues) {
  Generator gen(12);
  Tensor bits = Random(std::vector<int64_t>{4, 37}, gen, Distribution::Integer(0, 2), DType::kInt64);
  Tensor mask = Gt(bits, Zeros({1}, DType::kInt64));
  for (DType dt : {DType::kBFloat16, DType::kFloat32, DType::kInt32}) {
    SCOPED_TRACE(::testing::Message() << dt);
    Tensor a = Random(std::vector<int64_t>{4, 37}, gen, Distribution::Integer(-50, 50), dt);
    Tensor b = Random(std::vector<int64_t>{4, 37}, gen, Distribution::Integer(-50, 50), dt);
    const auto mv = mask.ToDoubleVector(), av = a.ToDoubleVector(), bv = b.ToDoubleVector();
    std::vector<double> where, filled;
    for (size_t i = 0; i < mv.size(); ++i) {
      where.push_back(mv[i] != 0 ? av[i] : bv[i]);
      filled.push_back(mv[i] != 0 ? 7 : av[i]);
    }
    EXPECT_EQ(Where(mask, a, b).ToDoubleVector(), where);
    EXPECT_EQ(MaskedFill(a, mask, 7.0).ToDoubleVector(), filled);
  }
}

TEST(TernaryTest, ComparisonsBroadcastAndGiveBools) {
  Tensor a = FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = FromVector<float>({2, 5, 3});
  EXPECT_EQ(Eq(a, b).dtype(), DType::kBool);
  EXPECT_EQ(Eq(a, b).ToVector<int>(), (std::vector<int>{0, 0, 1, 0, 1, 0}));
  EXPECT_EQ(Lt(a, b).ToVector<int>(), (std::vector<int>{1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(Gt(a, b).ToVector<int>(), (std::vector<int>{0, 0, 0, 1, 0, 1}));
  Tensor i = FromVector<int64_t>({-1, 7});
  EXPECT_EQ(Gt(i, FromVector<int64_t>({0})).ToVector<int>(), (std::vector<int>{0, 1}));
  Tensor h = FromDoubles({1, 2}, std::vector<int64_t>{2}, DType::kBFloat16);
  EXPECT_EQ(Lt(h, FromDoubles({1.5}, std::vector<int64_t>{1}, DType::kBFloat16)).ToVector<int>(),
            (std::vector<int>{1, 0}));
  const float nan = std::nanf("");
  EXPECT_EQ(Eq(FromVector<float>({nan}), FromVector<float>({nan})).ToVector<int>(), (std::vector<int>{0}));
  EXPECT_EQ(Eq(Bools({1, 0}, {2}), Bools({1, 1}, {2})).ToVector<int>(), (std::vector<int>{1, 0}));
}

// !=, <=, >= as their own ops against the C++ operators in double over every pair of a value set with ties, signed
// zeros, infinities and NaN (!= true for NaN, <= and >= false), broadcast [5, 1] against [1, 5], in three dtypes,
// and through a transposed view.
TEST(TernaryTest, NeLeGeMatchTheOperatorsOnEveryPairIncludingNaN) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  const std::vector<double> v = {-inf, -1.5, -0.0, 0.0, nan};
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat64}) {
    const Tensor a = FromDoubles(v, std::vector<int64_t>{5, 1}, dt), b = FromDoubles(v, std::vector<int64_t>{1, 5}, dt);
    const std::vector<int> ne = Ne(a, b).ToVector<int>(), le = Le(a, b).ToVector<int>(), ge = Ge(a, b).ToVector<int>();
    const std::vector<int> le_t = Le(Transpose(b, 0, 1), Transpose(a, 0, 1)).ToVector<int>();  // b[j] <= a[i]
    for (size_t i = 0; i < 5; ++i) {
      for (size_t j = 0; j < 5; ++j) {
        const size_t k = i * 5 + j;
        EXPECT_EQ(ne[k], v[i] != v[j]) << dt << " " << v[i] << " != " << v[j];
        EXPECT_EQ(le[k], v[i] <= v[j]) << dt << " " << v[i] << " <= " << v[j];
        EXPECT_EQ(ge[k], v[i] >= v[j]) << dt << " " << v[i] << " >= " << v[j];
        EXPECT_EQ(le_t[j * 5 + i], v[j] <= v[i]) << dt;
      }
    }
  }
  const Tensor i64 = FromVector<int64_t>({(int64_t{1} << 62) + 1, 3});  // int64 compared exactly
  EXPECT_EQ(Ne(i64, FromVector<int64_t>({int64_t{1} << 62, 3})).ToVector<int>(), (std::vector<int>{1, 0}));
  EXPECT_EQ(Ge(Bools({1, 0}, {2}), Bools({0, 0}, {2})).dtype(), DType::kBool);
}

TEST(TernaryTest, ComparisonsAndMasksAreNotDifferentiable) {
  Tensor x = RandDouble({3}, 4).set_requires_grad(true);
  EXPECT_FALSE(Lt(x, ZerosLike(x)).requires_grad());
  Tensor y = Where(Gt(x, ZerosLike(x)), x, ZerosLike(x));
  EXPECT_TRUE(y.requires_grad());
}

TEST(TernaryTest, BackwardMatchesFiniteDifferences) {
  Tensor cond = Bools({1, 0, 0, 1, 1, 0, 1, 0, 0, 1, 1, 1}, {3, 4});
  ExpectGradcheck([](const TensorList& in) { return Where(in[0], in[1], in[2]); },
                  {cond, RandDouble({3, 4}, 5), RandDouble({4}, 6)});
  ExpectGradcheck([](const TensorList& in) { return Where(in[0], in[1], in[2]); },
                  {Bools({1, 0, 1}, {3, 1}), RandDouble({1, 4}, 7), RandDouble({3, 1}, 8)});
  ExpectGradcheck([](const TensorList& in) { return MaskedFill(in[0], in[1], -7.0); },
                  {RandDouble({2, 3, 4}, 9), Bools({0, 1, 1, 0}, {4})});
  ExpectGradcheck([](const TensorList& in) { return MaskedFill(in[0], in[1], 3.0); },
                  {RandDouble({4}, 10), Bools({0, 1, 1, 0, 1, 0, 0, 0}, {2, 4})});
}

TEST(TernaryTest, WhereSendsGradientOnlyToTheSelectedSide) {
  Tensor a = FromVector<double>({1, 2, 3}).set_requires_grad(true);
  Tensor b = FromVector<double>({4}).set_requires_grad(true);
  Tensor y = Where(Bools({1, 0, 0}, {3}), a, b);
  Backward(y, FromVector<double>({10, 20, 30}));
  EXPECT_EQ(a.grad().ToVector<double>(), (std::vector<double>{10, 0, 0}));
  EXPECT_EQ(b.grad().ToVector<double>(), (std::vector<double>{50}));
}

TEST(TernaryTest, MaximumAndMinimumMatchNaiveLoopsWithTiesNaNAndBroadcasting) {
  const double nan = std::nan("");
  const std::vector<double> a{1, -2, 3, 0, nan, 5, -0.5, 7}, b{2, -2, nan, -1};  // b broadcasts over a's rows
  Tensor ta = FromVector<double>(a, {2, 4}), tb = FromVector<double>(b, {4});
  for (DType dt : {DType::kFloat64, DType::kFloat32, DType::kBFloat16}) {
    const std::vector<double> mx = Maximum(Cast(ta, dt), Cast(tb, dt)).ToDoubleVector();
    const std::vector<double> mn = Minimum(Cast(ta, dt), Cast(tb, dt)).ToDoubleVector();
    for (int i = 0; i < 8; ++i) {
      const double x = a[i], y = b[i % 4];
      if (std::isnan(x) || std::isnan(y)) {
        EXPECT_TRUE(std::isnan(mx[i]) && std::isnan(mn[i])) << DTypeName(dt) << " element " << i;
        continue;
      }
      EXPECT_EQ(mx[i], x > y ? x : y) << DTypeName(dt) << " element " << i;
      EXPECT_EQ(mn[i], x < y ? x : y) << DTypeName(dt) << " element " << i;
    }
  }
  // Integers (and a strided operand: the transposed view takes the general path).
  Tensor ia = FromVector<int64_t>({5, -3, 9, 0, 2, 2}, {2, 3});
  Tensor ib = FromVector<int64_t>({4, 4, -8, 1, 2, 3}, {3, 2});
  Tensor ibt = MakeView(ib, Shape{2, 3}, Shape{1, 2}, 0);  // ib's transpose: {4, -8, 2}, {4, 1, 3}
  EXPECT_EQ(Maximum(ia, ibt).ToVector<int64_t>(), (std::vector<int64_t>{5, -3, 9, 4, 2, 3}));
  EXPECT_EQ(Minimum(ia, ibt).ToVector<int64_t>(), (std::vector<int64_t>{4, -8, 2, 0, 1, 2}));
}

TEST(TernaryTest, MaximumGradientSplitsTiesAndGivesNaNsBothSidesAsTorch) {
  const double nan = std::nan("");
  Tensor a = FromVector<double>({1, 3, 2, nan, 5}).set_requires_grad(true);
  Tensor b = FromVector<double>({2, 1, 2, 0, nan}).set_requires_grad(true);
  Backward(Maximum(a, b), FromVector<double>({10, 20, 30, 40, 50}));
  // torch: where(a == b, g / 2, g) masked to 0 where this side loses; with a NaN neither side loses.
  EXPECT_EQ(a.grad().ToVector<double>(), (std::vector<double>{0, 20, 15, 40, 50}));
  EXPECT_EQ(b.grad().ToVector<double>(), (std::vector<double>{10, 0, 15, 40, 50}));
  a.set_grad(Tensor()), b.set_grad(Tensor());
  Backward(Minimum(a, b), FromVector<double>({10, 20, 30, 40, 50}));
  EXPECT_EQ(a.grad().ToVector<double>(), (std::vector<double>{10, 0, 15, 40, 50}));
  EXPECT_EQ(b.grad().ToVector<double>(), (std::vector<double>{0, 20, 15, 40, 50}));
  // Away from ties, finite differences, with a broadcast operand summed back.
  ExpectGradcheck([](const TensorList& in) { return Maximum(in[0], in[1]); },
                  {RandDouble({3, 4}, 11), RandDouble({4}, 12)});
  ExpectGradcheck([](const TensorList& in) { return Minimum(in[0], in[1]); },
                  {RandDouble({3, 1}, 13), RandDouble({1, 4}, 14)});
}

TEST(TernaryTest, MisuseRaisesNamedErrors) {
  ExpectErrorContains([] { Where(Zeros({2}), Zeros({2}), Zeros({2})); }, ErrorCode::kInvalidArgument,
                      "where: condition must be a bool tensor, got float32");
  ExpectErrorContains([] { Where(Bools({1, 0}, {2}), Zeros({2}), Zeros({2}, DType::kFloat64)); },
                      ErrorCode::kInvalidArgument, "where: dtype mismatch float32 vs float64");
  ExpectErrorContains([] { Where(Bools({1, 0}, {2}), Zeros({3}), Zeros({3})); }, ErrorCode::kInvalidArgument,
                      "where: shapes [2] and [3]");
  ExpectErrorContains([] { MaskedFill(Zeros({2}), Zeros({2}), 1.0); }, ErrorCode::kInvalidArgument,
                      "masked_fill: mask must be a bool tensor, got float32");
  ExpectErrorContains([] { MaskedFill(Zeros({2}, DType::kInt64), Bools({1, 0}, {2}), -INFINITY); },
                      ErrorCode::kInvalidArgument, "masked_fill: value -inf cannot be converted to int64");
  ExpectErrorContains([] { Lt(Zeros({2}), Zeros({2}, DType::kInt64)); }, ErrorCode::kInvalidArgument,
                      "lt: dtype mismatch float32 vs int64");
  ExpectErrorContains([] { Maximum(Zeros({2}), Zeros({3})); }, ErrorCode::kInvalidArgument,
                      "maximum: shapes [2] and [3]");
  ExpectErrorContains([] { Minimum(Zeros({2}), Zeros({2}, DType::kInt64)); }, ErrorCode::kInvalidArgument,
                      "minimum: dtype mismatch float32 vs int64");
}


// ---- addcmul, addcdiv, lerp ---------------------------------------------------------------------------

// torch's element formulas (ternary.cc), one scalar at a time in the compute type C: the reference the
// vectorized, broadcast and strided kernels must equal bit for bit.
template <typename C>
C RefAddcmul(C s, C x, C y, C v) { return std::fma(v * x, y, s); }
template <typename C>
C RefAddcdiv(C s, C x, C y, C v) { return s + v * x / y; }
template <typename C>
C RefLerp(C s, C e, C w) {
  return std::abs(w) < C(0.5) ? std::fma(w, e - s, s) : std::fma(w - C(1), e - s, e);
}

// Values of t as its compute type, element (i, j) of a [rows, cols] result that t broadcasts to.
template <typename C>
C At(const std::vector<double>& v, const Tensor& t, int64_t i, int64_t j) {
  const int64_t r = t.dim() == 2 && t.size(0) > 1 ? i : 0, c = t.size(t.dim() - 1) > 1 ? j : 0;
  return static_cast<C>(v[r * (t.dim() == 2 ? t.size(1) : 0) + c]);
}

template <typename C>
void ExpectFusedMatchesLoops(DType dt) {
  SCOPED_TRACE(::testing::Message() << dt);
  Generator gen(21);
  constexpr int64_t kR = 37, kC = 19;  // odd sizes: every vector tail
  const Tensor s = Cast(Randn({kR, kC}, gen), dt), x = Cast(Randn({kR, kC}, gen), dt);
  const Tensor y = Cast(Randn({kC}, gen), dt), w = Cast(Rand({kR, 1}, gen), dt);  // broadcast operands
  const auto sv = s.ToDoubleVector(), xv = x.ToDoubleVector(), yv = y.ToDoubleVector(), wv = w.ToDoubleVector();
  const double v = 0.37;  // rounded to C first, as torch's value.to<opmath_t>()
  auto check = [&](const Tensor& got, auto ref) {
    ASSERT_EQ(got.sizes(), (Shape{kR, kC}));
    ASSERT_EQ(got.dtype(), dt);
    const auto gv = got.ToDoubleVector();
    for (int64_t i = 0; i < kR; ++i) {
      for (int64_t j = 0; j < kC; ++j) {
        const C want = ref(At<C>(sv, s, i, j), At<C>(xv, x, i, j), At<C>(yv, y, i, j), At<C>(wv, w, i, j));
        // 16-bit floats: the compute-type value rounded once to the storage type
        const double stored =
            Cast(FromDoubles({static_cast<double>(want)}, std::vector<int64_t>{1}, DType::kFloat64), dt)
                .ToDoubleVector()[0];
        ASSERT_EQ(gv[i * kC + j], stored) << "at " << i << ", " << j;
      }
    }
  };
  const C cv = static_cast<C>(v);
  check(Addcmul(s, x, y, v), [&](C a, C b, C c, C) { return RefAddcmul<C>(a, b, c, cv); });
  check(Addcdiv(s, x, y, v), [&](C a, C b, C c, C) { return RefAddcdiv<C>(a, b, c, cv); });
  for (double wt : {0.3, 0.7, -0.6, 1.0}) {
    SCOPED_TRACE(wt);
    check(Lerp(s, x, wt), [&](C a, C b, C, C) { return RefLerp<C>(a, b, static_cast<C>(wt)); });
  }
  check(Lerp(s, x, w), [&](C a, C b, C, C d) { return RefLerp<C>(a, b, d); });
  // In place, into a transposed view of a [kC, kR] tensor (strided writes) with the same values.
  for (int op = 0; op < 3; ++op) {
    Tensor base = Empty({kC, kR}, dt);
    Tensor view = MakeView(base, {kR, kC}, {1, kR}, 0);
    CopyInto(view, s);
    if (op == 0) AddcmulInPlace(view, x, y, v);
    if (op == 1) AddcdivInPlace(view, x, y, v);
    if (op == 2) LerpInPlace(view, x, w);
    if (op == 0) check(view, [&](C a, C b, C c, C) { return RefAddcmul<C>(a, b, c, cv); });
    if (op == 1) check(view, [&](C a, C b, C c, C) { return RefAddcdiv<C>(a, b, c, cv); });
    if (op == 2) check(view, [&](C a, C b, C, C d) { return RefLerp<C>(a, b, d); });
  }
}

TEST(TernaryTest, AddcmulAddcdivLerpEqualTorchsFusedElementFormulasBitwise) {
  ExpectFusedMatchesLoops<float>(DType::kFloat32);
  ExpectFusedMatchesLoops<double>(DType::kFloat64);
  ExpectFusedMatchesLoops<float>(DType::kBFloat16);
  ExpectFusedMatchesLoops<float>(DType::kFloat16);
}

TEST(TernaryTest, FusedFormulasAreTheFusedOnesAndCloseToExactValues) {
  // The multiply-add is one rounding: unfused float32 arithmetic differs in a fifth of these values (what the
  // Python face's composition gave), and every value is within one float32 ulp of the exact double result.
  Generator gen(5);
  const Tensor s = Randn({4096}, gen), x = Randn({4096}, gen), y = Randn({4096}, gen);
  const auto sv = s.ToVector<float>(), xv = x.ToVector<float>(), yv = y.ToVector<float>();
  const auto got = Addcmul(s, x, y, 0.37).ToVector<float>();
  const auto lerp = Lerp(s, x, 0.7).ToVector<float>();
  int64_t unfused_differs = 0, lerp_unfused_differs = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    volatile float product = 0.37f * xv[i] * yv[i];  // rounded (volatile: no contraction into an FMA here)
    unfused_differs += sv[i] + product != got[i];
    const double exact = static_cast<double>(sv[i]) + static_cast<double>(0.37f * xv[i]) * yv[i];
    const float mag = std::abs(static_cast<float>(exact));
    const double ulp = std::nextafter(mag, INFINITY) - mag;
    EXPECT_LE(std::abs(got[i] - exact), ulp);
    volatile float scaled = (xv[i] - sv[i]) * (1.0f - 0.7f);
    lerp_unfused_differs += xv[i] - scaled != lerp[i];
  }
  EXPECT_GT(unfused_differs, 400);
  EXPECT_GT(lerp_unfused_differs, 400);
  // w = 1 gives end exactly, w = 0 self exactly (torch's two-sided formula; 1e30 to 1 stays 1).
  const Tensor big = Full({3}, 1e30), one = Ones({3});
  EXPECT_EQ(Lerp(big, one, 1.0).ToVector<float>(), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(Lerp(big, one, 0.0).ToVector<float>(), (std::vector<float>{1e30f, 1e30f, 1e30f}));
  // -1 to -0 at w = 1: torch's vector body gives +0 ((w - 1)·(end - self) is +0, plus -0), not -0.
  const auto zero = Lerp(Full({20}, -1.0), Full({20}, -0.0), 1.0).ToVector<float>();
  const auto zero_t = Lerp(Full({20}, -1.0), Full({20}, -0.0), Ones({20})).ToVector<float>();
  for (size_t i = 0; i < zero.size(); ++i) {
    EXPECT_FALSE(std::signbit(zero[i])) << i;
    EXPECT_FALSE(std::signbit(zero_t[i])) << i;
  }
}

TEST(TernaryTest, AddcmulAddcdivLerpGradientsAsTorchsFormulas) {
  ExpectGradcheck([](const TensorList& in) { return Addcmul(in[0], in[1], in[2], 0.7); },
                  {RandDouble({3, 4}, 31), RandDouble({4}, 32), RandDouble({3, 1}, 33)});
  ExpectGradcheck([](const TensorList& in) { return Addcdiv(in[0], in[1], in[2], -1.3); },
                  {RandDouble({4}, 34), RandDouble({3, 4}, 35), RandDouble({3, 4}, 36, 0.5, 2.0)});
  for (double w : {0.25, 0.8}) {
    ExpectGradcheck([w](const TensorList& in) { return Lerp(in[0], in[1], w); },
                    {RandDouble({3, 4}, 37), RandDouble({1, 4}, 38)});
  }
  // A tensor weight on both sides of 0.5 (the formula switches; the gradient is the same expression).
  ExpectGradcheck([](const TensorList& in) { return Lerp(in[0], in[1], in[2]); },
                  {RandDouble({3, 4}, 39), RandDouble({3, 4}, 40), RandDouble({3, 1}, 41, 0.0, 1.0)});
}

TEST(TernaryTest, FusedOpsRefuseMixedOrIntegerDTypesAndWritesThatCannotHoldTheResult) {
  ExpectErrorContains([] { Addcmul(Zeros({2}), Zeros({2}), Zeros({2}, DType::kFloat64), 1.0); },
                      ErrorCode::kInvalidArgument, "addcmul: dtype mismatch float32 vs float64");
  ExpectErrorContains(
      [] { Addcdiv(Zeros({2}, DType::kInt64), Zeros({2}, DType::kInt64), Ones({2}, DType::kInt64), 1.0); },
      ErrorCode::kInvalidArgument, "addcdiv: expected floating tensors, got int64");
  ExpectErrorContains([] { Lerp(Zeros({2}), Zeros({3}), 0.5); }, ErrorCode::kInvalidArgument,
                      "lerp: shapes [2] and [3]");
  // In place, self must hold the broadcast shape (torch's message) and own every element it writes.
  ExpectErrorContains([] { AddcmulInPlace(Zeros({4}), Zeros({3, 4}), Zeros({4}), 1.0); }, ErrorCode::kInvalidArgument,
                      "addcmul_: output with shape [4] doesn't match the broadcast shape [3, 4]");
  ExpectErrorContains([] { LerpInPlace(Expand(Zeros({1, 4}), {3, 4}), Zeros({3, 4}), 0.5); },
                      ErrorCode::kFailedPrecondition, "lerp_: unsupported operation: more than one element");
  // An operand that partly overlaps the written tensor would read values already written: refused, as torch
  // (the same elements, x with x, are fine).
  const Tensor base = Arange(0, 8, 1, DType::kFloat32);
  ExpectErrorContains([&] { LerpInPlace(Narrow(base, 0, 1, 7), Narrow(base, 0, 0, 7), 0.5); },
                      ErrorCode::kInvalidArgument, "lerp_: unsupported operation: some elements of the input tensor");
  ExpectErrorContains([&] { AddInPlace(Narrow(base, 0, 1, 7), Narrow(base, 0, 0, 7)); }, ErrorCode::kInvalidArgument,
                      "add_: unsupported operation: some elements of the input tensor");
  // the same bytes at other strides (x with x.t(), both dense) overlap partly too
  const Tensor sq = Clone(View(Narrow(base, 0, 0, 4), {2, 2}));
  ExpectErrorContains([&] { AddInPlace(sq, Transpose(sq, 0, 1)); }, ErrorCode::kInvalidArgument,
                      "add_: unsupported operation");
  ExpectErrorContains([&] { AddcmulInPlace(Transpose(sq, 0, 1), sq, Ones({2, 2}), 1.0); },
                      ErrorCode::kInvalidArgument, "addcmul_: unsupported operation");
  EXPECT_EQ(base.ToVector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(sq.ToVector<float>(), (std::vector<float>{0, 1, 2, 3}));
  AddcmulInPlace(base, base, base, 1.0);  // x + x·x
  EXPECT_EQ(base.ToVector<float>(), (std::vector<float>{0, 2, 6, 12, 20, 30, 42, 56}));
  Tensor t = Full({2}, 3.0);
  ExpectErrorContains([&] { LerpInPlace(t, Zeros({2}, DType::kFloat64), Zeros({2})); }, ErrorCode::kInvalidArgument,
                      "lerp_: dtype mismatch float32 vs float64");
  EXPECT_EQ(t.ToVector<float>(), (std::vector<float>{3, 3}));  // refused before writing
}

}  // namespace
}  // namespace tessel
