#include "core/ops/reduction.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "core/autograd/engine.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/ops/elementwise.h"
#include "core/ops/testing/gradcheck.h"
#include "core/ops/ternary.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

using testing::ExpectErrorContains;

using testing::ExpectAllClose;
using testing::ExpectGradcheck;
using testing::RandDouble;

Tensor RandOf(std::vector<int64_t> shape, uint64_t seed, DType dtype, double lo = -1, double hi = 1) {
  Generator gen(seed);
  return Random(shape, gen, Distribution::Uniform(lo, hi), dtype);
}

using Combine = std::function<double(double, double)>;
const Combine kAdd = [](double a, double v) { return a + v; };
const Combine kMaxOf = [](double a, double v) { return std::isnan(a) ? a : (v > a || std::isnan(v) ? v : a); };

// Row-major values of x reduced over `dims` (empty = all) by nested loops in double; `finish` gets the
// accumulator and the number of reduced elements.
std::vector<double> Naive(const Tensor& x, std::vector<int64_t> dims, double init, const Combine& combine,
                          const std::function<double(double, int64_t)>& finish = [](double a, int64_t) { return a; },
                          const std::function<double(double)>& map = [](double v) { return v; }) {
  const int64_t nd = x.dim();
  std::vector<bool> red(nd, dims.empty());
  for (int64_t d : dims) red[(d + nd) % nd] = true;
  int64_t outs = 1, inner = 1;
  for (int64_t d = 0; d < nd; ++d) (red[d] ? inner : outs) *= x.size(d);
  std::vector<double> acc(outs, init);
  const std::vector<double> v = x.ToDoubleVector();
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) {
    int64_t rem = i, o = 0, scale = 1;
    for (int64_t d = nd - 1; d >= 0; --d) {
      const int64_t idx = rem % x.size(d);
      rem /= x.size(d);
      if (!red[d]) o += idx * scale, scale *= x.size(d);
    }
    acc[o] = combine(acc[o], map(v[i]));
  }
  for (double& a : acc) a = finish(a, inner);
  return acc;
}

Shape OutShape(const Shape& s, std::vector<int64_t> dims, bool keepdim) {
  const int64_t nd = s.size();
  std::vector<bool> red(nd, dims.empty());
  for (int64_t d : dims) red[(d + nd) % nd] = true;
  Shape out;
  for (int64_t d = 0; d < nd; ++d) {
    if (!red[d]) out.push_back(s[d]);
    if (red[d] && keepdim) out.push_back(1);
  }
  return out;
}

const double kInf = std::numeric_limits<double>::infinity();
const auto kMeanFinish = [](double a, int64_t n) { return a / n; };

TEST(ReductionTest, SumMeanAmaxMatchNaiveLoopsForEveryDimSubset) {
  const std::vector<std::vector<int64_t>> subsets = {{}, {0}, {1}, {2}, {-1}, {0, 1}, {0, 2}, {1, 2}, {-3, -1}, {0, 1, 2}};
  for (DType dt : {DType::kFloat64, DType::kFloat32}) {
    const double tol = dt == DType::kFloat64 ? 1e-14 : 1e-6;
    Tensor x = RandOf({2, 3, 5}, 1, dt);
    for (const auto& dims : subsets) {
      for (bool keepdim : {false, true}) {
        SCOPED_TRACE(::testing::Message() << dt << " dims " << ShapeStr(dims) << " keepdim " << keepdim);
        const Shape want_shape = OutShape(x.sizes(), dims, keepdim);
        Tensor s = Sum(x, dims, keepdim), m = Mean(x, dims, keepdim), a = Amax(x, dims, keepdim);
        EXPECT_EQ(s.sizes(), want_shape);
        EXPECT_EQ(a.sizes(), want_shape);
        EXPECT_EQ(s.dtype(), dt);
        ExpectAllClose(s, Naive(x, dims, 0, kAdd), tol, tol);
        ExpectAllClose(m, Naive(x, dims, 0, kAdd, kMeanFinish), tol, tol);
        ExpectAllClose(a, Naive(x, dims, -kInf, kMaxOf), 0, 0);
      }
    }
  }
}

// AnyAllLocal against nested loops in double: values drawn from {0, -0, 1, NaN} so every output sees zeros,
// nonzeros and NaN (nonzero, as v != 0 says), in every dtype (bfloat16's -0 is a zero too), over everything and
// each dim of a 3-d tensor and of its transposed view, with keepdim; uint8 gives uint8 (torch's), the rest bool.
TEST(ReductionTest, AnyAllLocalMatchNaiveLoopsInEveryDtype) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double pool[] = {0.0, -0.0, 1.0, nan, 0.0, 1.0};
  Generator gen(9);
  const Tensor picks = Random(Shape{3, 4, 5}, gen, Distribution::Integer(0, 6), DType::kInt64);
  std::vector<double> vals;
  for (int64_t i : picks.ToVector<int64_t>()) vals.push_back(pool[i]);
  const Tensor base = FromVector<double>(vals, {3, 4, 5});
  const Combine any = [](double a, double v) { return a != 0 || v != 0 ? 1.0 : 0.0; };
  const Combine all = [](double a, double v) { return a != 0 && v != 0 ? 1.0 : 0.0; };
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16, DType::kInt64, DType::kUInt8,
                   DType::kBool}) {
    const bool floating = IsFloating(dt);
    // NaN only where the dtype holds it (the integer casts of NaN are not defined): there, 1
    const Tensor x0 = floating ? Cast(base, dt) : Cast(Where(Eq(base, base), base, OnesLike(base)), dt);
    for (const Tensor& x : {x0, Transpose(x0, 0, 2)}) {
      for (const std::vector<int64_t>& dims : {std::vector<int64_t>{}, {0}, {1}, {-1}}) {
        for (bool keepdim : {false, true}) {
          for (bool every : {false, true}) {
            const Tensor got = AnyAllLocal(x, dims, keepdim, every);
            const std::string what = Str(dt, " dims ", ShapeStr(dims), " keepdim ", keepdim, every ? " all" : " any",
                                         x.is_contiguous() ? "" : " transposed");
            ASSERT_TRUE(got.defined()) << what;
            EXPECT_EQ(got.dtype(), dt == DType::kUInt8 ? DType::kUInt8 : DType::kBool) << what;
            EXPECT_EQ(got.sizes(), OutShape(x.sizes(), dims, keepdim)) << what;
            EXPECT_EQ(got.ToDoubleVector(), Naive(x, dims, every ? 1.0 : 0.0, every ? all : any)) << what;
          }
        }
      }
    }
  }
  // Empty reductions: any is false, all is true; several dims are not covered (undefined: the caller composes).
  EXPECT_EQ(AnyAllLocal(Zeros({2, 0}), {1}, false, false).ToDoubleVector(), (std::vector<double>{0, 0}));
  EXPECT_EQ(AnyAllLocal(Zeros({2, 0}), {1}, false, true).ToDoubleVector(), (std::vector<double>{1, 1}));
  EXPECT_EQ(AnyAllLocal(Zeros({0}), {}, false, true).ToDoubleVector(), (std::vector<double>{1}));
  EXPECT_FALSE(AnyAllLocal(Zeros({2, 3}), {0, 1}, false, false).defined());
}

TEST(ReductionTest, TransposedViewReducesLikeItsValues) {
  Tensor base = RandDouble({3, 4}, 2);
  Tensor xt = MakeView(base, {4, 3}, {1, 4}, 0);
  for (const std::vector<int64_t>& dims : {std::vector<int64_t>{0}, {1}, {}}) {
    SCOPED_TRACE(ShapeStr(dims));
    ExpectAllClose(Sum(xt, dims), Naive(xt, dims, 0, kAdd), 1e-14, 1e-14);
    ExpectAllClose(Amax(xt, dims, true), Naive(xt, dims, -kInf, kMaxOf), 0, 0);
    ExpectAllClose(Norm(xt, 2, dims), Naive(xt, dims, 0, kAdd, [](double a, int64_t) { return std::sqrt(a); },
                                            [](double v) { return v * v; }),
                   1e-14, 1e-14);
  }
}

TEST(ReductionTest, LargeReductionsStayAccurateOnEveryPath) {
  NumThreadsGuard threads(4);  // more threads than outputs: the split-R path runs too
  struct Case {
    std::vector<int64_t> shape, dims;
  };
  // Last dim (pairwise rows), leading dim with few columns (split over R), middle dim with K > 256
  // columns (column blocks), two non-adjacent dims (one copy, reduced dims last).
  for (const Case& c : {Case{{3, 50000}, {-1}}, Case{{40000, 3}, {0}}, Case{{7, 300, 260}, {1}},
                        Case{{30, 40, 50}, {0, 2}}}) {
    SCOPED_TRACE(ShapeStr(c.shape));
    Tensor x = RandOf(c.shape, 3, DType::kFloat32, 0, 1);
    ExpectAllClose(Sum(x, c.dims), Naive(x, c.dims, 0, kAdd), 0, 1e-5);
    ExpectAllClose(Mean(x, c.dims), Naive(x, c.dims, 0, kAdd, kMeanFinish), 0, 1e-5);
    ExpectAllClose(Amax(x, c.dims), Naive(x, c.dims, -kInf, kMaxOf), 0, 0);
  }
}

TEST(ReductionTest, IntegerAndBoolSumsGiveInt64) {
  Tensor i = FromVector<int32_t>({1, -2, 3, 2000000000, 2000000000, 5}, {2, 3});
  Tensor s = Sum(i, {1});
  EXPECT_EQ(s.dtype(), DType::kInt64);
  EXPECT_EQ(s.ToVector<int64_t>(), (std::vector<int64_t>{2, 4000000005}));
  EXPECT_EQ(Sum(FromDoubles({1, 0, 1, 1}, std::vector<int64_t>{4}, DType::kBool)).ToVector<int64_t>(),
            (std::vector<int64_t>{3}));
  EXPECT_EQ(Amax(i, {0}).ToVector<int64_t>(), (std::vector<int64_t>{2000000000, 2000000000, 5}));
  EXPECT_EQ(Amax(i, {0}).dtype(), DType::kInt32);
  auto [v, idx] = Max(FromVector<int64_t>({3, 9, 9, -1}), 0);
  EXPECT_EQ(v.ToVector<int64_t>(), (std::vector<int64_t>{9}));
  EXPECT_EQ(idx.ToVector<int64_t>(), (std::vector<int64_t>{1}));
}

TEST(ReductionTest, BFloat16SumsAccumulateInFloat) {
  Tensor x = RandOf({4, 300}, 4, DType::kBFloat16, 0, 1);
  Tensor s = Sum(x, {1});
  EXPECT_EQ(s.dtype(), DType::kBFloat16);
  // Reference: exact sum of the stored bf16 values, rounded once (relative error ≤ 2^-9).
  ExpectAllClose(s, Naive(x, {1}, 0, kAdd), 0, 4e-3);
  ExpectAllClose(Mean(x, {0}), Naive(x, {0}, 0, kAdd, kMeanFinish), 1e-3, 4e-3);
  ExpectAllClose(Norm(x, 2, {1}), Naive(x, {1}, 0, kAdd, [](double a, int64_t) { return std::sqrt(a); },
                                        [](double v) { return v * v; }),
                 0, 4e-3);
  // 256 + 1 + 1 + ... : a sequential bf16 accumulator would stay at 256 forever.
  std::vector<double> v(257, 1.0);
  v[0] = 256;
  EXPECT_EQ(Sum(FromDoubles(v, std::vector<int64_t>{257}, DType::kBFloat16)).ItemDouble(), 512.0);
}

TEST(ReductionTest, MaxReturnsFirstIndexOnTiesAndPropagatesNan) {
  Tensor x = FromVector<float>({1, 5, 5, 2, 7, 7, 7, 0}, {2, 4});
  auto [v, i] = Max(x, 1);
  EXPECT_EQ(v.ToVector<double>(), (std::vector<double>{5, 7}));
  EXPECT_EQ(i.ToVector<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(i.dtype(), DType::kInt64);
  auto [v0, i0] = Max(x, -2, /*keepdim=*/true);  // over rows: the K > 1 column path
  EXPECT_EQ(v0.sizes(), (Shape{1, 4}));
  EXPECT_EQ(v0.ToVector<double>(), (std::vector<double>{7, 7, 7, 2}));
  EXPECT_EQ(i0.ToVector<int64_t>(), (std::vector<int64_t>{1, 1, 1, 0}));
  const float nan = std::nanf("");
  auto [vn, in] = Max(FromVector<float>({1, nan, 3, nan}), 0);
  EXPECT_TRUE(std::isnan(vn.ItemDouble()));
  EXPECT_EQ(in.ToVector<int64_t>(), (std::vector<int64_t>{1}));
  EXPECT_TRUE(std::isnan(Amax(FromVector<float>({1, nan, 3})).ItemDouble()));
  auto [vs, is] = Max(Scalar(4.0), 0);  // a 0-d tensor reduces over "dim 0"
  EXPECT_EQ(vs.dim(), 0);
  EXPECT_EQ(vs.ItemDouble(), 4.0);
  EXPECT_EQ(is.ItemDouble(), 0.0);
}

TEST(ReductionTest, MaxLanesKeepNanFirstIndexAndNegativeValues) {
  // Runs longer than the 8 lanes of the K == 1 paths, and a column (K > 1) path.
  std::vector<float> v(21);
  for (int i = 0; i < 21; ++i) v[i] = -100.0f - i;
  v[13] = v[5] = -1.0f;  // tie in different lanes: the first index wins
  Tensor row = FromVector<float>(v);
  EXPECT_EQ(Amax(row).ItemDouble(), -1.0);  // all negative: no 0 sneaks in
  auto [mv, mi] = Max(row, 0);
  EXPECT_EQ(mv.ItemDouble(), -1.0);
  EXPECT_EQ(mi.ItemDouble(), 5.0);
  v[17] = v[10] = std::nanf("");
  Tensor nan_row = FromVector<float>(v);
  EXPECT_TRUE(std::isnan(Amax(nan_row).ItemDouble()));
  EXPECT_TRUE(std::isnan(Norm(nan_row, kInf).ItemDouble()));
  auto [nv, ni] = Max(nan_row, 0);
  EXPECT_TRUE(std::isnan(nv.ItemDouble()));
  EXPECT_EQ(ni.ItemDouble(), 10.0);
  Tensor cols = FromVector<float>(v, {7, 3});  // column 1 holds index 10 (row 3), column 2 index 17 (row 5)
  ExpectAllClose(Amax(cols, {0}), Naive(cols, {0}, -kInf, kMaxOf), 0, 0);
  auto [cv, ci] = Max(cols, 0);
  EXPECT_EQ(ci.ToVector<int64_t>(), (std::vector<int64_t>{0, 3, 5}));
  EXPECT_EQ(cv.ToDoubleVector()[0], -100.0);
}

TEST(ReductionTest, NormMatchesNaiveForEveryOrder) {
  Tensor x = RandDouble({3, 4, 5}, 5);
  auto pmap = [](double p) { return [p](double v) { return std::pow(std::abs(v), p); }; };
  auto pfin = [](double p) { return [p](double a, int64_t) { return std::pow(a, 1 / p); }; };
  for (const std::vector<int64_t>& dims : {std::vector<int64_t>{1}, {0, 2}, {}}) {
    SCOPED_TRACE(ShapeStr(dims));
    ExpectAllClose(Norm(x, 1, dims), Naive(x, dims, 0, kAdd, pfin(1), pmap(1)), 1e-13, 1e-13);
    ExpectAllClose(Norm(x, 2, dims), Naive(x, dims, 0, kAdd, pfin(2), pmap(2)), 1e-13, 1e-13);
    ExpectAllClose(Norm(x, 3, dims), Naive(x, dims, 0, kAdd, pfin(3), pmap(3)), 1e-13, 1e-13);
    ExpectAllClose(Norm(x, kInf, dims, true), Naive(x, dims, 0, kMaxOf, [](double a, int64_t) { return a; }, pmap(1)),
                   0, 0);
  }
  EXPECT_DOUBLE_EQ(Norm(FromVector<double>({3, -4})).ItemDouble(), 5.0);
}

TEST(ReductionTest, BackwardMatchesFiniteDifferences) {
  Tensor x = RandDouble({3, 4, 5}, 6);
  using F = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<const char*, F>> fns = {
      {"sum1", [](const Tensor& t) { return Sum(t, {1}); }},
      {"sum_keep", [](const Tensor& t) { return Sum(t, {0, -1}, true); }},
      {"sum_all", [](const Tensor& t) { return Sum(t); }},
      {"mean02", [](const Tensor& t) { return Mean(t, {0, 2}); }},
      {"mean_all_keep", [](const Tensor& t) { return Mean(t, {}, true); }},
      {"amax1", [](const Tensor& t) { return Amax(t, {1}); }},
      {"amax_all", [](const Tensor& t) { return Amax(t); }},
      {"max2", [](const Tensor& t) { return Max(t, 2).first; }},
      {"max0_keep", [](const Tensor& t) { return Max(t, 0, true).first; }},
      {"norm1", [](const Tensor& t) { return Norm(t, 1, {1}); }},
      {"norm2", [](const Tensor& t) { return Norm(t, 2, {1, 2}); }},
      {"norm3", [](const Tensor& t) { return Norm(t, 3, {0}, true); }},
      {"norm1.5", [](const Tensor& t) { return Norm(t, 1.5); }},
      {"norminf", [](const Tensor& t) { return Norm(t, kInf, {2}); }},
  };
  for (const auto& [name, f] : fns) {
    SCOPED_TRACE(name);
    ExpectGradcheck([&f](const TensorList& in) { return f(in[0]); }, {x});
  }
}

TEST(ReductionTest, MaxLikeGradientsFollowTorchOnTies) {
  Tensor x = FromVector<double>({1, 3, 3, 2}).set_requires_grad(true);
  Tensor a = Amax(x);
  Backward(a);
  EXPECT_EQ(x.grad().ToVector<double>(), (std::vector<double>{0, 0.5, 0.5, 0}));  // split evenly
  Tensor y = FromVector<double>({1, 3, 3, 2}).set_requires_grad(true);
  auto [v, i] = Max(y, 0);
  EXPECT_TRUE(v.requires_grad());
  EXPECT_FALSE(i.requires_grad());
  Backward(v);
  EXPECT_EQ(y.grad().ToVector<double>(), (std::vector<double>{0, 1, 0, 0}));  // all to the index
  Tensor z = Zeros({3}, DType::kFloat64).set_requires_grad(true);
  Tensor n = Norm(z);
  Backward(n);
  EXPECT_EQ(z.grad().ToVector<double>(), (std::vector<double>{0, 0, 0}));  // not NaN at the kink
}

TEST(ReductionTest, EmptyReductionsFollowTorch) {
  Tensor e = Zeros({0, 3});
  EXPECT_EQ(Sum(e, {0}).ToVector<double>(), (std::vector<double>{0, 0, 0}));
  EXPECT_TRUE(std::isnan(Mean(e, {0}).ToDoubleVector()[0]));
  EXPECT_EQ(Amax(e, {1}).sizes(), (Shape{0}));  // nothing to reduce into: fine
  ExpectErrorContains([&] { Amax(e, {0}); }, ErrorCode::kInvalidArgument,
                      "amax: cannot reduce over a zero-size dim (input [0, 3], dims [0])");
  ExpectErrorContains([&] { Max(e, 0); }, ErrorCode::kInvalidArgument, "max: cannot reduce over a zero-size dim");
}

TEST(ReductionTest, MisuseRaisesNamedErrors) {
  Tensor x = Zeros({2, 3, 4});
  ExpectErrorContains([&] { Sum(x, {3}); }, ErrorCode::kOutOfRange, "sum: dim 3 out of range");
  ExpectErrorContains([&] { Mean(x, {-4}); }, ErrorCode::kOutOfRange, "mean: dim -4 out of range");
  ExpectErrorContains([&] { Max(x, 5); }, ErrorCode::kOutOfRange, "max: dim 5 out of range");
  ExpectErrorContains([&] { Sum(x, {1, -2}); }, ErrorCode::kInvalidArgument,
                      "sum: dim 1 appears multiple times in the list of dims [1, -2]");
  ExpectErrorContains([&] { Mean(Zeros({2}, DType::kInt64)); }, ErrorCode::kInvalidArgument,
                      "mean: expected a floating dtype, got int64");
  ExpectErrorContains([&] { Norm(Zeros({2}, DType::kInt32)); }, ErrorCode::kInvalidArgument,
                      "norm: expected a floating dtype, got int32");
  ExpectErrorContains([&] { Norm(x, 0.0); }, ErrorCode::kUnimplemented, "norm: p = 0 is not supported");
  ExpectErrorContains([&] { Norm(Zeros({2}, DType::kBool)); }, ErrorCode::kInvalidArgument,
                      "norm: expected a floating dtype, got bool");
}

// max / amax of bool tensors are bool (torch's: any true), the index the first true; they raised.
TEST(ReductionTest, BoolMaxIsAnyWithTheFirstIndex) {
  const Tensor b = FromDoubles({0, 1, 1, 0, 0, 0}, std::vector<int64_t>{2, 3}, DType::kBool);
  auto [v, i] = Max(b, 1);
  EXPECT_EQ(v.dtype(), DType::kBool);
  EXPECT_EQ(Cast(v, DType::kInt64).ToVector<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(i.ToVector<int64_t>(), (std::vector<int64_t>{1, 0}));
  const Tensor a = Amax(b, {0});
  EXPECT_EQ(a.dtype(), DType::kBool);
  EXPECT_EQ(Cast(a, DType::kInt64).ToVector<int64_t>(), (std::vector<int64_t>{0, 1, 1}));
}

}  // namespace
}  // namespace tessel
