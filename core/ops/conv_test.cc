// core/ops/conv_test.cc — the oneDNN convolutions (conv.h) against naive float64 loops: forward, both
// backward products and the bias gradient over 1-D / 2-D / 3-D geometries (stride, asymmetric padding,
// dilation, groups, depthwise, 1×1, batches that split unevenly over threads); gradients of gradients
// (create_graph) against central differences of the composed function; torch's argument errors; the
// same loops in bfloat16.
#include "core/ops/conv.h"

#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <random>
#include <vector>

#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/base/parallel.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/ops/testing/gradcheck.h"
#include "core/ops/unary.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

using testing::ExpectAllClose;
using testing::ExpectErrorContains;

Tensor Random(const Shape& shape, uint32_t seed, bool requires_grad = false) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(gen);
  Tensor t = FromVector(v, shape);
  t.set_requires_grad(requires_grad);
  return t;
}

// The geometry with missing spatial dims as size-1 dims (kernel 1, stride 1, no padding).
struct Ref {
  int64_t n, c, oc, groups;
  std::array<int64_t, 3> in{1, 1, 1}, k{1, 1, 1}, s{1, 1, 1}, pl{0, 0, 0}, pr{0, 0, 0}, d{1, 1, 1}, out{1, 1, 1};
  Shape out_shape;
};

Ref MakeRef(const Shape& x, const Shape& w, const ConvOptions& o) {
  Ref r{x[0], x[1], w[0], o.groups};
  const size_t nd = x.size() - 2;
  auto pick = [&](const std::vector<int64_t>& v, size_t i, int64_t dflt) {
    return v.empty() ? dflt : (v.size() == 1 ? v[0] : v[i]);
  };
  r.out_shape = {r.n, r.oc};
  for (size_t i = 0; i < nd; ++i) {
    const size_t j = 3 - nd + i;
    r.in[j] = x[2 + i], r.k[j] = w[2 + i];
    r.s[j] = pick(o.stride, i, 1), r.d[j] = pick(o.dilation, i, 1), r.pl[j] = pick(o.padding, i, 0);
    r.pr[j] = o.padding_r.empty() ? r.pl[j] : pick(o.padding_r, i, 0);
    r.out[j] = (r.in[j] + r.pl[j] + r.pr[j] - r.d[j] * (r.k[j] - 1) - 1) / r.s[j] + 1;
    r.out_shape.push_back(r.out[j]);
  }
  return r;
}

// fn(x index, w index, y index) for every multiply of the convolution (padding taps skipped).
void ForEachTap(const Ref& r, const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  const int64_t cg = r.c / r.groups, og = r.oc / r.groups;
  for (int64_t n = 0; n < r.n; ++n)
    for (int64_t o = 0; o < r.oc; ++o)
      for (int64_t p0 = 0; p0 < r.out[0]; ++p0)
        for (int64_t p1 = 0; p1 < r.out[1]; ++p1)
          for (int64_t p2 = 0; p2 < r.out[2]; ++p2)
            for (int64_t ci = 0; ci < cg; ++ci)
              for (int64_t k0 = 0; k0 < r.k[0]; ++k0)
                for (int64_t k1 = 0; k1 < r.k[1]; ++k1)
                  for (int64_t k2 = 0; k2 < r.k[2]; ++k2) {
                    const int64_t i0 = p0 * r.s[0] - r.pl[0] + k0 * r.d[0], i1 = p1 * r.s[1] - r.pl[1] + k1 * r.d[1],
                                  i2 = p2 * r.s[2] - r.pl[2] + k2 * r.d[2];
                    if (i0 < 0 || i0 >= r.in[0] || i1 < 0 || i1 >= r.in[1] || i2 < 0 || i2 >= r.in[2]) continue;
                    const int64_t cin = o / og * cg + ci;
                    const int64_t xi = (((n * r.c + cin) * r.in[0] + i0) * r.in[1] + i1) * r.in[2] + i2;
                    const int64_t wi = (((o * cg + ci) * r.k[0] + k0) * r.k[1] + k1) * r.k[2] + k2;
                    const int64_t yi = (((n * r.oc + o) * r.out[0] + p0) * r.out[1] + p1) * r.out[2] + p2;
                    fn(xi, wi, yi);
                  }
}

struct Case {
  Shape x, w;
  ConvOptions o;
  bool bias;
};

std::vector<Case> Cases() {
  return {
      {{3, 4, 7, 6}, {5, 4, 3, 3}, {.padding = {1}}, true},
      {{2, 6, 9, 8}, {4, 3, 3, 2}, {.stride = {2}, .padding = {1, 0}, .padding_r = {2, 1}, .dilation = {2}, .groups = 2}, true},
      {{3, 4, 5, 5}, {8, 1, 3, 3}, {.padding = {2}, .groups = 4}, false},  // depthwise, multiplier 2
      {{2, 3, 10}, {4, 3, 4}, {.stride = {3}, .padding = {2}, .padding_r = {1}}, true},
      {{2, 2, 4, 5, 3}, {3, 2, 2, 3, 2}, {.stride = {1, 2, 1}, .padding = {1}, .dilation = {2, 1, 1}}, true},
      {{3, 8, 4, 4}, {16, 8, 1, 1}, {}, false},
      {{5, 3, 8, 8}, {6, 3, 5, 5}, {.stride = {2}, .padding = {2}}, true},  // a stem: 3 input channels
  };
}

// Random values in dtype (bf16: rounded from float32) as a leaf.
Tensor RandomIn(DType dt, const Shape& shape, uint32_t seed, bool requires_grad) {
  Tensor t = Random(shape, seed);
  if (dt != DType::kFloat32) t = Cast(t, dt);
  t.set_requires_grad(requires_grad);
  return t;
}

// Every case's output and gradients against float64 loops over the operands' own values (bf16 values are
// exact in double; the kernels' products are exact and their sums fp32, rounded once to the dtype).
void ExpectCasesMatchLoops(DType dt, double atol, double rtol) {
  uint32_t seed = 1;
  for (const Case& cs : Cases()) {
    SCOPED_TRACE(ShapeStr(cs.x) + " * " + ShapeStr(cs.w));
    const Ref r = MakeRef(cs.x, cs.w, cs.o);
    Tensor x = RandomIn(dt, cs.x, seed++, true), w = RandomIn(dt, cs.w, seed++, true);
    Tensor b = cs.bias ? RandomIn(dt, {r.oc}, seed++, true) : Tensor();
    const Tensor y = Convolution(x, w, b, cs.o);
    ASSERT_EQ(y.sizes(), r.out_shape);
    ASSERT_EQ(y.dtype(), dt);
    const Tensor g = RandomIn(dt, r.out_shape, seed++, false);
    const std::vector<double> xv = x.ToDoubleVector(), wv = w.ToDoubleVector(), gv = g.ToDoubleVector();
    std::vector<double> yv(static_cast<size_t>(y.numel()), 0.0), dx(xv.size(), 0.0), dw(wv.size(), 0.0);
    ForEachTap(r, [&](int64_t xi, int64_t wi, int64_t yi) {
      yv[yi] += xv[xi] * wv[wi];
      dx[xi] += gv[yi] * wv[wi];
      dw[wi] += gv[yi] * xv[xi];
    });
    std::vector<double> db(static_cast<size_t>(r.oc), 0.0);
    const int64_t per = y.numel() / (r.n * r.oc);
    if (cs.bias) {
      const std::vector<double> bv = b.ToDoubleVector();
      for (size_t i = 0; i < yv.size(); ++i) {
        yv[i] += bv[(i / per) % r.oc];
        db[(i / per) % r.oc] += gv[i];
      }
    }
    ExpectAllClose(y, yv, atol, rtol);
    Backward(y, g);
    ASSERT_EQ(x.grad().dtype(), dt);
    ASSERT_EQ(w.grad().dtype(), dt);
    ExpectAllClose(x.grad(), dx, atol, rtol);
    ExpectAllClose(w.grad(), dw, atol, rtol);
    if (cs.bias) ExpectAllClose(b.grad(), db, atol, rtol);
  }
}

TEST(ConvTest, ForwardAndGradientsEqualNaiveLoops) { ExpectCasesMatchLoops(DType::kFloat32, 1e-5, 1e-4); }

// bfloat16 (autocast's convolutions): bf16 primitives where oneDNN's are fast (DnnlHasFastBf16), else fp32
// primitives on the converted operands (conv_avx2_test runs this file with oneDNN capped at AVX2). One
// rounding to bf16: 2^-8 relative, plus the fp32 sums' few ulps where a result cancels to near 0.
TEST(ConvTest, Bfloat16ForwardAndGradientsEqualNaiveLoopsUpToOneRounding) {
  ExpectCasesMatchLoops(DType::kBFloat16, 1e-4, 1.01 / 256);
}

TEST(ConvTest, OutputAndInputGradientDoNotDependOnTheThreadCount) {
  const Tensor x = Random({5, 6, 9, 9}, 11), w = Random({7, 6, 3, 3}, 12), g = Random({5, 7, 5, 5}, 13);
  const ConvOptions o{.stride = {2}, .padding = {1}};
  std::vector<std::vector<double>> y, dx, dw;
  for (int threads : {1, 2, 3}) {
    NumThreadsGuard guard(threads);
    y.push_back(Convolution(x, w, {}, o).ToDoubleVector());
    dx.push_back(ConvolutionBackwardInput(g, w, x.sizes(), o).ToDoubleVector());
    dw.push_back(ConvolutionBackwardWeight(x, g, w.sizes(), o).ToDoubleVector());
  }
  for (size_t i = 1; i < y.size(); ++i) {
    EXPECT_EQ(y[i], y[0]);
    EXPECT_EQ(dx[i], dx[0]);
    for (size_t j = 0; j < dw[0].size(); ++j) EXPECT_NEAR(dw[i][j], dw[0][j], 1e-5 * (1 + std::abs(dw[0][j])));
  }
}

// Central differences of f (a float32 scalar function of t's entries) at a few entries of t.
std::vector<double> CentralDifferences(const std::function<double()>& f, const Tensor& t, std::vector<int64_t> at,
                                       float eps) {
  NoGradGuard no_grad;
  std::vector<double> out;
  float* p = static_cast<float*>(t.raw_data());
  for (int64_t i : at) {
    const float keep = p[i];
    p[i] = keep + eps;
    const double up = f();
    p[i] = keep - eps;
    const double down = f();
    p[i] = keep;
    out.push_back((up - down) / (2.0 * eps));
  }
  return out;
}

// Gradient penalties: P = |∂<conv(x, w), r>/∂x|² is quadratic in w and r, Q = |∂<conv(x, w), r>/∂w|²
// quadratic in x and r, so their central differences are exact up to rounding. Their gradients run
// every branch of the three ops' backward formulas.
TEST(ConvTest, GradientsOfGradientsMatchCentralDifferences) {
  const ConvOptions o{.stride = {2}, .padding = {1}, .padding_r = {0}, .groups = 2};
  Tensor x = Random({2, 4, 7, 7}, 21, true), w = Random({6, 2, 3, 3}, 22, true), r = Random({2, 6, 3, 3}, 23, true);
  auto inner = [&](bool wrt_x) {
    const Tensor s = Sum(Mul(Convolution(x, w, {}, o), r));
    return Grad({s}, {wrt_x ? x : w}, {}, /*retain_graph=*/false, /*allow_unused=*/false, /*create_graph=*/true)[0];
  };
  for (bool wrt_x : {true, false}) {
    SCOPED_TRACE(wrt_x ? "P = |dx|^2" : "Q = |dw|^2");
    for (Tensor t : {x, w, r}) t.set_grad(Tensor());
    const Tensor gi = inner(wrt_x);
    Backward(Sum(Mul(gi, gi)));
    auto penalty = [&] {
      const Tensor s = wrt_x ? ConvolutionBackwardInput(r, w, x.sizes(), o) : ConvolutionBackwardWeight(x, r, w.sizes(), o);
      return Sum(Mul(s, s)).item<double>();
    };
    // P depends on w and r (not x); Q on x and r (not w).
    for (Tensor t : wrt_x ? std::vector<Tensor>{w, r} : std::vector<Tensor>{x, r}) {
      ASSERT_TRUE(t.grad().defined());
      const std::vector<int64_t> at = {0, 5, t.numel() / 2, t.numel() - 1};
      const std::vector<double> fd = CentralDifferences(penalty, t, at, 1e-2f);
      const std::vector<double> an = t.grad().ToDoubleVector();
      for (size_t i = 0; i < at.size(); ++i) {
        EXPECT_NEAR(an[static_cast<size_t>(at[i])], fd[i], 2e-3 * (1 + std::abs(fd[i]))) << "entry " << at[i];
      }
    }
    const Tensor& unused = wrt_x ? x : w;
    if (unused.grad().defined()) {
      for (double v : unused.grad().ToDoubleVector()) EXPECT_EQ(v, 0.0);
    }
  }
}

TEST(ConvTest, TorchArgumentErrors) {
  const Tensor x = Random({2, 3, 5, 5}, 31), w = Random({4, 3, 3, 3}, 32);
  ExpectErrorContains([&] { Convolution(x, Random({4, 2, 3, 3}, 33), {}); }, ErrorCode::kInvalidArgument,
                      {"convolution", "groups=1", "[4, 2, 3, 3]", "to have 2 channels, but it has 3"});
  ExpectErrorContains([&] { Convolution(x, w, {}, {.groups = 3}); }, ErrorCode::kInvalidArgument,
                      {"out_channels (4) must be divisible by groups (3)"});
  ExpectErrorContains([&] { Convolution(Random({1, 3, 2, 2}, 34), w, {}); }, ErrorCode::kInvalidArgument,
                      {"padded input (2 along spatial dim 0) is smaller than the dilated kernel (3)"});
  ExpectErrorContains([&] { Convolution(Random({3, 5}, 35), w, {}); }, ErrorCode::kInvalidArgument,
                      {"expected a 3-D, 4-D or 5-D input", "[3, 5]"});
  ExpectErrorContains([&] { Convolution(x, w, {}, {.stride = {0}}); }, ErrorCode::kInvalidArgument,
                      {"stride and dilation must be positive", "stride [0, 0]"});
  ExpectErrorContains([&] { Convolution(x, w, {}, {.padding = {1, 1, 1}}); }, ErrorCode::kInvalidArgument,
                      {"padding must have one value or one per spatial dim (2)"});
  ExpectErrorContains([&] { Convolution(x, w, Random({3}, 36)); }, ErrorCode::kInvalidArgument,
                      {"expected bias [4]", "got [3]"});
  ExpectErrorContains([&] { Convolution(Cast(x, DType::kFloat64), w, {}); }, ErrorCode::kInvalidArgument,
                      {"float32 or bfloat16 CPU tensors", "got float64"});
  ExpectErrorContains([&] { Convolution(Cast(x, DType::kBFloat16), w, {}); }, ErrorCode::kInvalidArgument,
                      {"all of one dtype", "got float32", "first operand of bfloat16"});
  ExpectErrorContains([&] { ConvolutionBackwardInput(Random({2, 4, 4, 4}, 37), w, x.sizes()); },
                      ErrorCode::kInvalidArgument, {"convolution_backward_input", "expected grad [2, 4, 3, 3]"});
}

TEST(ConvTest, EmptyBatchAndZeroInputChannels) {
  const Tensor y = Convolution(Random({0, 3, 5, 5}, 41), Random({4, 3, 3, 3}, 42), {});
  EXPECT_EQ(y.sizes(), (Shape{0, 4, 3, 3}));
  const Tensor b = Random({2}, 43);
  const Tensor z = Convolution(Zeros({1, 0, 4}), Zeros({2, 0, 3}), b);
  const std::vector<double> bv = b.ToDoubleVector();
  ExpectAllClose(z, {bv[0], bv[0], bv[1], bv[1]}, 0.0, 0.0);
}

}  // namespace
}  // namespace tessel
