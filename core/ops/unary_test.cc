#include "core/ops/unary.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "core/autograd/call.h"
#include "core/autograd/engine.h"
#include "core/base/error.h"
#include "core/dispatch/op.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/ops/testing/gradcheck.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

using testing::ExpectAllClose;
using testing::ExpectGradcheck;
using testing::RandDouble;

Tensor RandOf(std::vector<int64_t> shape, uint64_t seed, DType dtype, double lo = -3, double hi = 3) {
  Generator gen(seed);
  return Random(shape, gen, Distribution::Uniform(lo, hi), dtype);
}

std::vector<double> MapRef(const Tensor& x, const std::function<double(double)>& f) {
  std::vector<double> v = x.ToDoubleVector();
  for (double& e : v) e = f(e);
  return v;
}

double GeluRef(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double GeluTanhRef(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
double Sigm(double x) { return 1 / (1 + std::exp(-x)); }

struct Case {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double lo, hi;  // input range
};

std::vector<Case> Cases() {
  return {
      {"neg", [](const Tensor& x) { return Neg(x); }, [](double x) { return -x; }, -3, 3},
      {"exp", [](const Tensor& x) { return Exp(x); }, [](double x) { return std::exp(x); }, -3, 3},
      {"log", [](const Tensor& x) { return Log(x); }, [](double x) { return std::log(x); }, 0.1, 5},
      {"sqrt", [](const Tensor& x) { return Sqrt(x); }, [](double x) { return std::sqrt(x); }, 0.1, 5},
      {"rsqrt", [](const Tensor& x) { return Rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, 0.1, 5},
      {"pow2.5", [](const Tensor& x) { return Pow(x, 2.5); }, [](double x) { return std::pow(x, 2.5); }, 0.1, 3},
      {"pow2", [](const Tensor& x) { return Pow(x, 2); }, [](double x) { return x * x; }, -3, 3},
      {"pow3", [](const Tensor& x) { return Pow(x, 3); }, [](double x) { return x * x * x; }, -3, 3},
      {"pow-1", [](const Tensor& x) { return Pow(x, -1); }, [](double x) { return 1 / x; }, 0.2, 3},
      {"tanh", [](const Tensor& x) { return Tanh(x); }, [](double x) { return std::tanh(x); }, -3, 3},
      {"sigmoid", [](const Tensor& x) { return Sigmoid(x); }, Sigm, -6, 6},
      {"relu", [](const Tensor& x) { return Relu(x); }, [](double x) { return x < 0 ? 0 : x; }, -3, 3},
      {"gelu", [](const Tensor& x) { return Gelu(x); }, GeluRef, -4, 4},
      {"gelu_tanh", [](const Tensor& x) { return Gelu(x, "tanh"); }, GeluTanhRef, -4, 4},
      {"silu", [](const Tensor& x) { return Silu(x); }, [](double x) { return x * Sigm(x); }, -6, 6},
      {"abs", [](const Tensor& x) { return Abs(x); }, [](double x) { return std::abs(x); }, -3, 3},
      {"clamp", [](const Tensor& x) { return Clamp(x, -0.5, 1.0); },
       [](double x) { return std::min(std::max(x, -0.5), 1.0); }, -3, 3},
      {"clamp_min", [](const Tensor& x) { return Clamp(x, 0.2, std::nullopt); },
       [](double x) { return std::max(x, 0.2); }, -3, 3},
      {"clamp_max", [](const Tensor& x) { return Clamp(x, std::nullopt, 0.2); },
       [](double x) { return std::min(x, 0.2); }, -3, 3},
      {"sin", [](const Tensor& x) { return Sin(x); }, [](double x) { return std::sin(x); }, -4, 4},
      {"cos", [](const Tensor& x) { return Cos(x); }, [](double x) { return std::cos(x); }, -4, 4},
      {"erf", [](const Tensor& x) { return Erf(x); }, [](double x) { return std::erf(x); }, -3, 3},
      {"log1p", [](const Tensor& x) { return Log1p(x); }, [](double x) { return std::log1p(x); }, 0.01, 3},
      {"expm1", [](const Tensor& x) { return Expm1(x); }, [](double x) { return std::expm1(x); }, -3, 3},
      {"exp2", [](const Tensor& x) { return Exp2(x); }, [](double x) { return std::exp2(x); }, -3, 3},
      {"floor", [](const Tensor& x) { return Floor(x); }, [](double x) { return std::floor(x); }, -3, 3},
      {"ceil", [](const Tensor& x) { return Ceil(x); }, [](double x) { return std::ceil(x); }, -3, 3},
      {"round", [](const Tensor& x) { return Round(x); }, [](double x) { return std::nearbyint(x); }, -3, 3},
  };
}

TEST(UnaryTest, EveryOpMatchesDoubleReferenceInEveryFloatDtype) {
  struct Tol {
    DType dtype;
    double atol, rtol;
  };
  // 16-bit results round once: relative error ≤ 2^-9 (bf16) / 2^-12 (fp16) plus fp32 compute error.
  for (Tol t : {Tol{DType::kFloat64, 1e-14, 1e-13}, Tol{DType::kFloat32, 1e-6, 2e-6},
                Tol{DType::kBFloat16, 1e-3, 8e-3}, Tol{DType::kFloat16, 1e-3, 1e-3}}) {
    for (const Case& c : Cases()) {
      SCOPED_TRACE(::testing::Message() << c.name << " " << t.dtype);
      Tensor x = RandOf({5, 67}, 7, t.dtype, c.lo, c.hi);  // 335 elements: a full block and a tail
      Tensor y = c.op(x);
      EXPECT_EQ(y.dtype(), t.dtype);
      EXPECT_EQ(y.sizes(), x.sizes());
      ExpectAllClose(y, MapRef(x, c.ref), t.atol, t.rtol);
    }
  }
}

TEST(UnaryTest, TransposedViewInputMatchesReference) {
  Tensor base = RandOf({3, 4}, 11, DType::kFloat32);
  Tensor xt = MakeView(base, {4, 3}, {1, 4}, 0);  // transpose: not contiguous
  ASSERT_FALSE(xt.is_contiguous());
  for (const Case& c : Cases()) {
    if (c.lo <= 0) {
      SCOPED_TRACE(c.name);
      ExpectAllClose(c.op(xt), MapRef(xt, c.ref), 1e-6, 2e-6);
    }
  }
}

// The erf GELU's gradient for |x| > 13.2 is the cdf, exactly 1 or 0 in float32 (torch gives 0 at -1e36):
// the vector exp clamps at -87 and x·e^-87 grew with |x| (-6.6e-3 at x = -1e36). A whole vector of them,
// so the vector kernel (not the scalar tail) runs.
TEST(UnaryTest, GeluGradientOfHugeInputsIsTheCdf) {
  std::vector<double> xs(32, -1e36);
  xs[1] = -3e38, xs[2] = -1e35, xs[3] = -20.0, xs[4] = 1e36, xs[5] = 20.0;
  Tensor x = FromDoubles(xs, std::vector<int64_t>{32}, DType::kFloat32).set_requires_grad(true);
  Backward(Gelu(x), Ones(std::vector<int64_t>{32}));
  const std::vector<double> g = x.grad().ToDoubleVector();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], i == 4 || i == 5 ? 1.0 : 0.0) << i;
}

TEST(UnaryTest, GeluMatchesPyTorchConstants) {
  // torch.nn.functional.gelu(torch.tensor([1., -2.], dtype=torch.float64)) and approximate='tanh'.
  Tensor x = FromVector<double>({1.0, -2.0});
  ExpectAllClose(Gelu(x), std::vector<double>{0.8413447460685429, -0.04550026389635842}, 1e-15, 1e-14);
  ExpectAllClose(Gelu(x, "tanh"), std::vector<double>{0.8411919906082768, -0.04540230591222494}, 1e-15, 1e-14);
}

TEST(UnaryTest, IntegerOpsAreExactAndFloatOnlyOpsReject) {
  Tensor x = FromVector<int64_t>({-3, -1, 0, 2, 5});
  EXPECT_EQ(Neg(x).ToVector<int64_t>(), (std::vector<int64_t>{3, 1, 0, -2, -5}));
  EXPECT_EQ(Abs(x).ToVector<int64_t>(), (std::vector<int64_t>{3, 1, 0, 2, 5}));
  EXPECT_EQ(Relu(x).ToVector<int64_t>(), (std::vector<int64_t>{0, 0, 0, 2, 5}));
  EXPECT_EQ(Clamp(x, -1.0, 3.0).ToVector<int64_t>(), (std::vector<int64_t>{-1, -1, 0, 2, 3}));
  EXPECT_EQ(Clamp(x, std::nullopt, 1.0).ToVector<int64_t>(), (std::vector<int64_t>{-3, -1, 0, 1, 1}));
  EXPECT_EQ(Neg(x).dtype(), DType::kInt64);
  for (auto* round : {&Floor, &Ceil, &Round}) EXPECT_EQ(round(x).ToVector<int64_t>(), x.ToVector<int64_t>());
  Tensor i32 = FromVector<int32_t>({-7, 7});
  EXPECT_EQ(Abs(i32).ToVector<int32_t>(), (std::vector<int32_t>{7, 7}));
  try {
    Exp(x);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("exp: expected a floating dtype, got int64"), std::string::npos) << e.what();
  }
  try {
    Neg(Full({2}, 1.0, DType::kBool));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("neg: not supported for bool tensors"), std::string::npos) << e.what();
  }
}

TEST(UnaryTest, BadArgumentsRaiseNamedErrors) {
  try {
    Gelu(Zeros({2}), "erf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("gelu: approximate must be 'none' or 'tanh', got 'erf'"), std::string::npos);
  }
  try {
    Clamp(Zeros({2}), std::nullopt, std::nullopt);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("clamp: at least one of min or max"), std::string::npos);
  }
  try {
    autograd::CallOp1(GetOp("gelu_backward"), {Zeros({2}), Zeros({3})}, Attrs().Set("approximate", "none"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("gelu_backward: grad and saved tensor must match"), std::string::npos);
  }
}

// torch 2.15's clamp with scalar bounds passes the gradient strictly inside them: 0 at a bound.
TEST(UnaryTest, ClampGradientIsZeroAtItsBounds) {
  Tensor x = FromVector<float>({-1.0f, 0.0f, 1.0f, 2.0f, -3.0f});
  x.set_requires_grad(true);
  Backward(Sum(Clamp(x, -1.0, 1.0)));
  EXPECT_EQ(x.grad().ToVector<float>(), (std::vector<float>{0, 1, 0, 0, 0}));
  Tensor y = FromVector<float>({-1.0f, 0.0f, 1.0f, 2.0f, -INFINITY});
  y.set_requires_grad(true);
  Backward(Sum(Clamp(y, 0.0, std::nullopt)));  // no max: everything above 0 passes, 0 itself does not
  EXPECT_EQ(y.grad().ToVector<float>(), (std::vector<float>{0, 0, 1, 1, 0}));
}

TEST(UnaryTest, SpecialValuesFollowTorch) {
  const double nan = std::nan(""), inf = INFINITY;
  Tensor x = FromVector<float>({static_cast<float>(nan), 0.0f, -0.0f, static_cast<float>(-inf)});
  ExpectAllClose(Relu(x), std::vector<double>{nan, 0, 0, 0}, 0, 0);
  ExpectAllClose(Clamp(x, -1.0, 1.0), std::vector<double>{nan, 0, 0, -1}, 0, 0);
  ExpectAllClose(Rsqrt(x), std::vector<double>{nan, inf, -inf, nan}, 0, 0);
  ExpectAllClose(Exp(x), std::vector<double>{nan, 1, 1, 0}, 0, 0);
  ExpectAllClose(Sigmoid(FromVector<float>({-200.0f, 200.0f})), std::vector<double>{0, 1}, 0, 0);
  ExpectAllClose(Silu(FromVector<float>({-200.0f, 200.0f})), std::vector<double>{0, 200}, 0, 0);
  // min > max gives max everywhere, like torch.clamp.
  ExpectAllClose(Clamp(FromVector<double>({-5, 0, 5}), 2.0, 1.0), std::vector<double>{1, 1, 1}, 0, 0);
}

TEST(UnaryTest, SpecialValuesFollowTorchInVectorizedBlocks) {
  // 64 elements run Eigen's vector code (the 4-element cases above hit its scalar tail). Its packet exp
  // clamps the argument, so exp(-inf) read 2.9e-39 (5.6e-309 in float64) and exp(-100) 2.9e-39, and its
  // fast float sqrt gave NaN at +inf; one special element among ordinary ones must not disturb them.
  const double inf = INFINITY;
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    // The reference in the dtype's compute type (float for float32 and bf16), rounded to the dtype.
    auto ref = [&](double (*f)(double), double x) {
      const double v = dtype == DType::kFloat64 ? f(x) : static_cast<double>(static_cast<float>(f(static_cast<float>(x))));
      return FromDoubles({v}, std::vector<int64_t>{1}, dtype).ToDoubleVector()[0];
    };
    auto exp = [](double x) { return std::exp(x); };
    auto sqrt = [](double x) { return std::sqrt(x); };
    for (double special : {-inf, -100.0, -800.0}) {
      std::vector<double> x(64), want(64);
      for (int i = 0; i < 64; ++i) x[i] = i == 21 ? special : -2.0 + i / 16.0;
      for (int i = 0; i < 64; ++i) want[i] = ref(exp, x[i]);
      // float64's exp(-100) is a normal number, computed by Eigen's vector code within an ulp or two.
      const double tol = dtype == DType::kFloat64 ? 1e-14 * want[21] : 0.0;
      EXPECT_NEAR(Exp(FromDoubles(x, std::vector<int64_t>{64}, dtype)).ToDoubleVector()[21], want[21], tol)
          << "exp(" << special << ")";
      ExpectAllClose(Exp(FromDoubles(x, std::vector<int64_t>{64}, dtype)), want, 0, dtype == DType::kBFloat16 ? 8e-3 : 1e-6);
      for (double v : Exp(FromDoubles(std::vector<double>(64, special), std::vector<int64_t>{64}, dtype)).ToDoubleVector()) {
        ASSERT_NEAR(v, want[21], tol) << "exp(" << special << ") in a block of 64";
      }
    }
    std::vector<double> x(64);
    for (int i = 0; i < 64; ++i) x[i] = i == 25 ? inf : 0.25 + i;
    const Tensor t = FromDoubles(x, std::vector<int64_t>{64}, dtype);
    EXPECT_EQ(Sqrt(t).ToDoubleVector()[25], inf);
    EXPECT_EQ(Rsqrt(t).ToDoubleVector()[25], 0.0);
    EXPECT_EQ(Pow(t, 0.5).ToDoubleVector()[25], inf);
    EXPECT_NEAR(Sqrt(t).ToDoubleVector()[26], ref(sqrt, x[26]), 4e-3 * ref(sqrt, x[26]));
    // Subnormals and -0 (the fast float sqrt flushed them to +0, so rsqrt read +inf; log raised a
    // subnormal argument to the smallest normal): torch's sqrt(-0) = -0 and rsqrt(-0) = -inf.
    const double tiny = dtype == DType::kFloat64 ? 1e-310 : 1e-40;
    std::vector<double> small(64, 2.0);
    small[30] = tiny, small[31] = -0.0;
    const Tensor ts = FromDoubles(small, std::vector<int64_t>{64}, dtype);
    const double tiny_stored = FromDoubles({tiny}, std::vector<int64_t>{1}, dtype).ToDoubleVector()[0];
    auto log_ref = [](double v) { return std::log(v); };
    EXPECT_NEAR(Sqrt(ts).ToDoubleVector()[30], ref(sqrt, tiny_stored), 4e-3 * ref(sqrt, tiny_stored));
    EXPECT_NEAR(Rsqrt(ts).ToDoubleVector()[30], 1.0 / ref(sqrt, tiny_stored), 4e-3 / ref(sqrt, tiny_stored));
    EXPECT_NEAR(Log(ts).ToDoubleVector()[30], ref(log_ref, tiny_stored), 4e-3 * std::abs(ref(log_ref, tiny_stored)));
    EXPECT_TRUE(std::signbit(Sqrt(ts).ToDoubleVector()[31]));
    EXPECT_EQ(Sqrt(ts).ToDoubleVector()[31], 0.0);
    EXPECT_EQ(Rsqrt(ts).ToDoubleVector()[31], -inf);
    // A negative subnormal is a negative number: NaN (the fast float sqrt read it as -0: inf / 0).
    if (dtype != DType::kBFloat16) {
      std::vector<double> neg(64, 2.0);
      neg[33] = -tiny;
      const Tensor tn = FromDoubles(neg, std::vector<int64_t>{64}, dtype);
      EXPECT_TRUE(std::isnan(Sqrt(tn).ToDoubleVector()[33]));
      EXPECT_TRUE(std::isnan(Rsqrt(tn).ToDoubleVector()[33]));
      EXPECT_TRUE(std::isnan(Pow(tn, 0.5).ToDoubleVector()[33]));
    }
    const Tensor all_inf = FromDoubles(std::vector<double>(64, inf), std::vector<int64_t>{64}, dtype);
    EXPECT_EQ(Sqrt(all_inf).ToDoubleVector(), std::vector<double>(64, inf));
    EXPECT_EQ(Rsqrt(all_inf).ToDoubleVector(), std::vector<double>(64, 0.0));
  }
}

TEST(UnaryTest, Float32SqrtIsCorrectlyRoundedInWholeVectors) {
  // Eigen's fast float sqrt (rsqrt and a Newton step) gave sqrt(ones(8)) = 0.99999994 and missed the correctly
  // rounded value in ~40% of elements once a tensor filled a packet.
  Tensor x = RandOf({4099}, 17, DType::kFloat32, 0, 100);
  const std::vector<float> xs = x.ToVector<float>();
  const std::vector<float> root = Sqrt(x).ToVector<float>(), inv = Rsqrt(x).ToVector<float>(),
                           half = Pow(x, 0.5).ToVector<float>(), minus_half = Pow(x, -0.5).ToVector<float>();
  for (size_t i = 0; i < xs.size(); ++i) {
    const float exact = static_cast<float>(std::sqrt(static_cast<double>(xs[i])));  // double rounding is exact here
    ASSERT_EQ(root[i], exact) << "x = " << xs[i];
    ASSERT_EQ(half[i], exact) << "x = " << xs[i];
    ASSERT_EQ(inv[i], 1.0f / exact) << "x = " << xs[i];  // torch's rsqrt: 1 / sqrt, each rounded
    ASSERT_EQ(minus_half[i], 1.0f / exact) << "x = " << xs[i];
  }
  EXPECT_EQ(Sqrt(Full({8}, 1.0, DType::kFloat32)).ToVector<float>(), std::vector<float>(8, 1.0f));
  EXPECT_EQ(Rsqrt(Full({8}, 4.0, DType::kFloat32)).ToVector<float>(), std::vector<float>(8, 0.5f));
}

TEST(UnaryTest, PowSpecialExponentsRoundAsTorch) {
  // torch computes x ** -1 as 1 / x and x ** -2 as 1 / (x·x) (std::pow differs in the last bit); its bf16
  // x ** 3 and x ** -2 round x·x to bf16 first. Expected values printed by torch 2.15.
  Tensor f =
      FromVector<float>({1.3401237726211548f, 3.9104714393615723f, 0.7f, 3.0f, 1e-3f, 7.5f, 2.5f, 9.0f, 11.0f});
  const std::vector<float> fs = f.ToVector<float>();
  const std::vector<float> m1 = Pow(f, -1).ToVector<float>(), m2 = Pow(f, -2).ToVector<float>();
  for (size_t i = 0; i < fs.size(); ++i) {
    EXPECT_EQ(m1[i], 1.0f / fs[i]);
    EXPECT_EQ(m2[i], 1.0f / (fs[i] * fs[i]));
  }
  EXPECT_EQ(m2[0], 0.55681407f);  // torch's; std::pow gave 0.55681401
  Tensor b = Cast(FromVector<float>({2.84375f, 0.376953125f}), DType::kBFloat16);
  EXPECT_EQ(Cast(Pow(b, 3), DType::kFloat32).ToVector<float>(), (std::vector<float>{22.875f, 0.0537109375f}));
  EXPECT_EQ(Cast(Pow(b, -2), DType::kFloat32).ToVector<float>(), (std::vector<float>{0.1240234375f, 7.0f}));
  Tensor h = Cast(FromVector<float>({2.84375f, 0.376953125f}), DType::kFloat16);  // float16: one rounding
  const float a = 2.84375f, c = 0.376953125f;
  EXPECT_EQ(Cast(Pow(h, 3), DType::kFloat32).ToVector<float>(),
            Cast(Cast(FromVector<float>({a * a * a, c * c * c}), DType::kFloat16), DType::kFloat32).ToVector<float>());
}

TEST(UnaryTest, RoundIsHalfToEvenAndRoundingHasAZeroGradient) {
  Tensor x = FromVector<float>({-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f, 0.49999997f, -0.7f});
  EXPECT_EQ(Round(x).ToVector<float>(), (std::vector<float>{-2, -2, -0.0f, 0, 2, 2, 0, -1}));
  EXPECT_TRUE(std::signbit(Round(x).ToVector<float>()[2]));  // -0.5 rounds to -0, as torch
  EXPECT_EQ(Floor(x).ToVector<float>(), (std::vector<float>{-3, -2, -1, 0, 1, 2, 0, -1}));
  EXPECT_EQ(Ceil(x).ToVector<float>(), (std::vector<float>{-2, -1, -0.0f, 1, 2, 3, 1, -0.0f}));
  for (auto* round : {&Floor, &Ceil, &Round}) {
    Tensor w = RandDouble({4}, 3, -2, 2);
    w.set_requires_grad(true);
    Backward(Sum(Mul(round(w), w)));  // d/dw (round(w) * w) = round(w): the rounding itself passes nothing
    ExpectAllClose(w.grad(), round(Detach(w)), 0, 0);
  }
}

TEST(UnaryTest, BackwardMatchesFiniteDifferences) {
  Tensor any = RandDouble({3, 5}, 21, -2, 2);
  Tensor pos = RandDouble({3, 5}, 22, 0.2, 3);
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    ExpectGradcheck([&](const TensorList& in) { return c.op(in[0]); }, {c.lo > 0 ? pos : any});
  }
  ExpectGradcheck([](const TensorList& in) { return Pow(in[0], 0.0); }, {any});
  ExpectGradcheck([](const TensorList& in) { return Pow(in[0], 1.0); }, {any});
  ExpectGradcheck([](const TensorList& in) { return Cast(in[0], DType::kFloat64); }, {any});
}

TEST(UnaryTest, BackwardAtKinksFollowsTorch) {
  // relu'(0) = 0; clamp passes the gradient where min < x < max (torch 2.15: 0 at a bound, checked against
  // its CPU build); |x|'(0) = 0.
  Tensor x = FromVector<double>({-1, 0, 0.5, 1, 2}).set_requires_grad(true);
  Tensor y = Add(Add(Relu(x), Clamp(x, 0.0, 1.0)), Abs(x));
  Backward(y, OnesLike(y));
  EXPECT_EQ(x.grad().ToVector<double>(), (std::vector<double>{0 + 0 - 1, 0 + 0 + 0, 1 + 1 + 1, 1 + 0 + 1, 1 + 0 + 1}));
}

TEST(UnaryTest, CastBackwardReturnsGradientInInputDtype) {
  Tensor x = FromVector<double>({1.5, -2.25}).set_requires_grad(true);
  Tensor y = Cast(x, DType::kBFloat16);
  EXPECT_EQ(y.dtype(), DType::kBFloat16);
  EXPECT_TRUE(y.requires_grad());
  Backward(y, FromDoubles({0.5, 3.0}, std::vector<int64_t>{2}, DType::kBFloat16));
  EXPECT_EQ(x.grad().dtype(), DType::kFloat64);
  EXPECT_EQ(x.grad().ToVector<double>(), (std::vector<double>{0.5, 3.0}));
  Tensor i = Cast(x, DType::kInt64);
  EXPECT_FALSE(i.requires_grad());
  EXPECT_EQ(i.ToVector<int64_t>(), (std::vector<int64_t>{1, -2}));
  EXPECT_EQ(Cast(FromVector<float>({0.0f, 2.0f}), DType::kBool).ToVector<int>(), (std::vector<int>{0, 1}));
}

TEST(UnaryTest, BFloat16BackwardOpsMatchFloat64Formulas) {
  // The fused backward kernels run in fp32 for 16-bit inputs; compare with the float64 kernels.
  Tensor x64 = RandDouble({4, 70}, 31, -3, 3);
  Tensor g64 = RandDouble({4, 70}, 32, -1, 1);
  Tensor x16 = Cast(x64, DType::kBFloat16), g16 = Cast(g64, DType::kBFloat16);
  Tensor xr = Cast(x16, DType::kFloat64), gr = Cast(g16, DType::kFloat64);  // the rounded inputs
  for (const char* op : {"gelu_backward", "silu_backward", "threshold_backward", "abs_backward", "tanh_backward",
                         "sigmoid_backward"}) {
    SCOPED_TRACE(op);
    Attrs a = Attrs().Set("approximate", "tanh");
    Tensor want = autograd::CallOp1(GetOp(op), {gr, xr}, a);
    Tensor got = autograd::CallOp1(GetOp(op), {g16, x16}, a);
    EXPECT_EQ(got.dtype(), DType::kBFloat16);
    ExpectAllClose(got, want, 2e-2, 8e-3);
  }
}

}  // namespace
}  // namespace tessel
