// core/ops/attention_test.cc — scaled_dot_product_attention against naive double loops (causal and
// full, T != S, several query and key blocks of the online softmax), the saved log-sum-exp, backward
// against finite differences and against the naive double-loop gradients, thread-count independence,
// bf16, empty shapes and error messages; the float32 kernels on each vector ISA this CPU runs (AVX2
// always, forced by ForceVectorIsaForTesting; AVX-512 where present) with head dims 8/32/64 and
// sequence lengths that are not multiples of the register tile, panel or key block.
#include "core/ops/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "core/autograd/call.h"
#include "core/autograd/engine.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/ops/attention_kernels.h"
#include "core/ops/vector_isa.h"
#include "core/ops/elementwise.h"
#include "core/ops/ternary.h"
#include "core/ops/softmax.h"
#include "core/ops/matmul.h"
#include "core/ops/dropout.h"
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

struct Naive {
  std::vector<double> out;  // [heads, T, Dv]
  std::vector<double> lse;  // [heads, T]
};

// softmax(q·kᵀ·scale + mask)·v per head with plain loops; mask: key j hidden from query i when j > i.
Naive NaiveAttention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  const int64_t t = q.size(-2), s = k.size(-2), d = q.size(-1), dv = v.size(-1);
  const int64_t heads = q.numel() / std::max<int64_t>(t * d, 1);
  const auto qv = q.ToDoubleVector(), kv = k.ToDoubleVector(), vv = v.ToDoubleVector();
  Naive r{std::vector<double>(heads * t * dv, 0.0), std::vector<double>(heads * t, 0.0)};
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < t; ++i) {
      std::vector<double> w(s, 0.0);
      double m = -INFINITY, sum = 0;
      for (int64_t j = 0; j < s; ++j) {
        if (causal && j > i) continue;
        for (int64_t c = 0; c < d; ++c) w[j] += qv[(h * t + i) * d + c] * kv[(h * s + j) * d + c] * scale;
        m = std::max(m, w[j]);
      }
      for (int64_t j = 0; j < s; ++j) {
        w[j] = causal && j > i ? 0.0 : std::exp(w[j] - m);
        sum += w[j];
      }
      r.lse[h * t + i] = m + std::log(sum);
      for (int64_t j = 0; j < s; ++j) {
        for (int64_t c = 0; c < dv; ++c) r.out[(h * t + i) * dv + c] += w[j] / sum * vv[(h * s + j) * dv + c];
      }
    }
  }
  return r;
}

// Gradients of Σ (out ∘ g) by the textbook formulas in double loops: P from NaiveAttention's lse,
// dV = Pᵀ g, dP = g Vᵀ, dS = P ∘ (dP - rowsum(P ∘ dP)), dQ = dS K·scale, dK = dSᵀ Q·scale.
struct NaiveGrads {
  std::vector<double> dq, dk, dv;
};
NaiveGrads NaiveAttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, bool causal,
                                  double scale) {
  const int64_t t = q.size(-2), s = k.size(-2), d = q.size(-1), dv = v.size(-1);
  const int64_t heads = q.numel() / (t * d);
  const auto qv = q.ToDoubleVector(), kv = k.ToDoubleVector(), vv = v.ToDoubleVector(), gv = g.ToDoubleVector();
  const Naive fwd = NaiveAttention(q, k, v, causal, scale);
  NaiveGrads r{std::vector<double>(qv.size()), std::vector<double>(kv.size()), std::vector<double>(vv.size())};
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < t; ++i) {
      std::vector<double> p(s, 0.0), dp(s, 0.0);
      double rowsum = 0;
      for (int64_t j = 0; j < s && !(causal && j > i); ++j) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += qv[(h * t + i) * d + c] * kv[(h * s + j) * d + c];
        p[j] = std::exp(dot * scale - fwd.lse[h * t + i]);
        for (int64_t c = 0; c < dv; ++c) dp[j] += gv[(h * t + i) * dv + c] * vv[(h * s + j) * dv + c];
        rowsum += p[j] * dp[j];
      }
      for (int64_t j = 0; j < s && !(causal && j > i); ++j) {
        const double ds = p[j] * (dp[j] - rowsum) * scale;
        for (int64_t c = 0; c < dv; ++c) r.dv[(h * s + j) * dv + c] += p[j] * gv[(h * t + i) * dv + c];
        for (int64_t c = 0; c < d; ++c) {
          r.dq[(h * t + i) * d + c] += ds * kv[(h * s + j) * d + c];
          r.dk[(h * s + j) * d + c] += ds * qv[(h * t + i) * d + c];
        }
      }
    }
  }
  return r;
}

Tensor CastTo(const Tensor& t, DType dtype) {
  Tensor c = Empty(t.sizes(), dtype);
  CopyInto(c, t);
  return c;
}

TEST(AttentionTest, FullAttentionMatchesNaiveLoops) {
  Tensor q = RandDouble({2, 3, 4, 5}, 1, -2, 2);
  Tensor k = RandDouble({2, 3, 6, 5}, 2, -2, 2);
  Tensor v = RandDouble({2, 3, 6, 7}, 3);
  Tensor y = ScaledDotProductAttention(q, k, v, /*is_causal=*/false);
  EXPECT_EQ(y.sizes(), (Shape{2, 3, 4, 7}));
  ExpectAllClose(y, NaiveAttention(q, k, v, false, 1 / std::sqrt(5.0)).out, 1e-13, 1e-12);
  ExpectAllClose(ScaledDotProductAttention(q, k, v, false, 0.3), NaiveAttention(q, k, v, false, 0.3).out, 1e-13, 1e-12);
}

TEST(AttentionTest, CausalMasksKeysAfterTheQueryIndexTopLeftAligned) {
  for (auto [t, s] : {std::pair<int64_t, int64_t>{4, 4}, {4, 6}, {6, 3}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << t << " S=" << s);
    Tensor q = RandDouble({3, t, 4}, 4, -2, 2);
    Tensor k = RandDouble({3, s, 4}, 5, -2, 2);
    Tensor v = RandDouble({3, s, 2}, 6);
    ExpectAllClose(ScaledDotProductAttention(q, k, v, true), NaiveAttention(q, k, v, true, 0.5).out, 1e-13, 1e-12);
  }
  // Query 0 sees only key 0 whatever S is, so its output is v[0].
  Tensor q = RandDouble({1, 2, 3}, 7), k = RandDouble({1, 5, 3}, 8), v = RandDouble({1, 5, 2}, 9);
  const auto y = ScaledDotProductAttention(q, k, v, true).ToDoubleVector();
  const auto vv = v.ToDoubleVector();
  EXPECT_DOUBLE_EQ(y[0], vv[0]);
  EXPECT_DOUBLE_EQ(y[1], vv[1]);
}

TEST(AttentionTest, SequencesSpanningSeveralQueryBlocksMatchNaiveLoops) {
  Generator gen(10);
  Tensor q = Randn({2, 150, 8}, gen), k = Randn({2, 140, 8}, gen), v = Randn({2, 140, 6}, gen);
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    Tensor y = ScaledDotProductAttention(q, k, v, causal);
    EXPECT_EQ(y.dtype(), DType::kFloat32);
    ExpectAllClose(y, NaiveAttention(q, k, v, causal, 1 / std::sqrt(8.0)).out, 2e-6, 1e-5);
  }
}

TEST(AttentionTest, KeyBlocksOfTheOnlineSoftmaxMatchNaiveLoops) {
  // S = 300 streams through three key blocks; T = 200 spans four query blocks.
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    Tensor q = CastTo(RandDouble({2, 200, 8}, 40, -2, 2), dtype);
    Tensor k = CastTo(RandDouble({2, 300, 8}, 41, -2, 2), dtype);
    Tensor v = CastTo(RandDouble({2, 300, 6}, 42), dtype);
    for (bool causal : {false, true}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << (causal ? " causal" : " full"));
      const double tol = dtype == DType::kFloat32 ? 2e-6 : 1e-13;
      const Attrs attrs = Attrs().Set("is_causal", causal).Set("scale", 0.6);
      TensorList out = autograd::CallOp(GetOp("scaled_dot_product_attention"), {q, k, v}, attrs);
      const Naive want = NaiveAttention(q, k, v, causal, 0.6);
      ExpectAllClose(out[0], want.out, tol, 10 * tol);
      ExpectAllClose(out[1], want.lse, tol, 10 * tol);
    }
  }
}

TEST(AttentionTest, Float32BackwardAcrossBlocksMatchesNaiveDoubleGradients) {
  Generator gen(43);
  Tensor q = Randn({2, 150, 8}, gen), k = Randn({2, 270, 8}, gen), v = Randn({2, 270, 4}, gen);
  Tensor g = Randn({2, 150, 4}, gen);
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    TensorList grads = autograd::CallOp(
        GetOp("scaled_dot_product_attention_backward"),
        {g, q, k, v, ScaledDotProductAttention(q, k, v, causal, 0.4),
         autograd::CallOp(GetOp("scaled_dot_product_attention"), {q, k, v},
                          Attrs().Set("is_causal", causal).Set("scale", 0.4))[1]},
        Attrs().Set("is_causal", causal).Set("scale", 0.4));
    const NaiveGrads want = NaiveAttentionBackward(q, k, v, g, causal, 0.4);
    ExpectAllClose(grads[0], want.dq, 1e-5, 1e-4);
    ExpectAllClose(grads[1], want.dk, 1e-5, 1e-4);
    ExpectAllClose(grads[2], want.dv, 1e-5, 1e-4);
  }
}

TEST(AttentionTest, BackwardAcrossKeyBlocksMatchesFiniteDifferences) {
  Tensor q = RandDouble({1, 66, 2}, 44, -2, 2);
  Tensor k = RandDouble({1, 135, 2}, 45, -2, 2);  // two key blocks
  Tensor v = RandDouble({1, 135, 2}, 46);
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    ExpectGradcheck([&](const TensorList& in) { return ScaledDotProductAttention(in[0], in[1], in[2], causal); },
                    {q, k, v});
  }
}

TEST(AttentionTest, ResultsAreBitwiseIndependentOfThreadCount) {
  Generator gen(47);
  Tensor q = Randn({3, 2, 140, 16}, gen), k = Randn({3, 2, 140, 16}, gen), v = Randn({3, 2, 140, 16}, gen);
  auto run = [&](int threads) {
    NumThreadsGuard guard(threads);
    Tensor qq = Detach(q), kk = Detach(k), vv = Detach(v);
    for (Tensor* t : {&qq, &kk, &vv}) t->set_requires_grad(true);
    Tensor y = ScaledDotProductAttention(qq, kk, vv, true);
    Backward(y, OnesLike(y));
    return std::vector<Tensor>{y, qq.grad(), kk.grad(), vv.grad()};
  };
  const std::vector<Tensor> one = run(1), two = run(2);
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_EQ(std::memcmp(one[i].raw_data(), two[i].raw_data(), one[i].numel() * sizeof(float)), 0) << "tensor " << i;
  }
}

TEST(AttentionTest, TransposedViewsMatchContiguousCopies) {
  // [B, T, H, D] viewed as [B, H, T, D], as a transformer block produces them.
  Tensor base = RandDouble({2, 5, 3, 4}, 30);
  Tensor q = MakeView(base, {2, 3, 5, 4}, {60, 4, 12, 1}, 0);
  Tensor k = RandDouble({2, 3, 5, 4}, 31), v = RandDouble({2, 3, 5, 4}, 32);
  ExpectAllClose(ScaledDotProductAttention(q, k, v, true), ScaledDotProductAttention(CastTo(q, DType::kFloat64), k, v),
                 0, 0);
}

TEST(AttentionTest, Float32HeadViewsOfTokenMajorMemoryAreReadInPlaceAndGradientsKeepTheirLayout) {
  // q, k, v as a transformer block makes them: [B, T, H, D] memory viewed as [B, H, T, D].
  Generator gen(50);
  auto heads_view = [&](int64_t t) { return Transpose(Randn({2, t, 3, 32}, gen), 1, 2); };
  Tensor q = heads_view(19), k = heads_view(19), v = heads_view(19), g = heads_view(19);
  ASSERT_FALSE(q.is_contiguous());
  auto run = [&](const Tensor& qq, const Tensor& kk, const Tensor& vv, const Tensor& gg) {
    Tensor a = Detach(qq), b = Detach(kk), c = Detach(vv);
    for (Tensor* t : {&a, &b, &c}) t->set_requires_grad(true);
    Tensor y = ScaledDotProductAttention(a, b, c, true);
    Backward(y, gg);
    return std::vector<Tensor>{y, a.grad(), b.grad(), c.grad()};
  };
  const std::vector<Tensor> strided = run(q, k, v, g);
  const std::vector<Tensor> packed = run(Contiguous(q), Contiguous(k), Contiguous(v), Contiguous(g));
  for (size_t i = 0; i < strided.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "tensor " << i);
    // Same kernel, same arithmetic: bit-identical to the packed inputs' results.
    ExpectAllClose(strided[i], packed[i], 0, 0);
    // Gradients are written in the inputs' [B, T, H, D] memory order, so the block's transpose back is
    // free; the output stays contiguous [B, H, T, D].
    EXPECT_TRUE(i == 0 ? strided[i].is_contiguous() : Transpose(strided[i], 1, 2).is_contiguous());
  }
  ExpectAllClose(strided[0], NaiveAttention(q, k, v, true, 1 / std::sqrt(32.0)).out, 2e-6, 1e-5);
}

TEST(AttentionTest, ForwardSavesLogSumExpPerQueryRow) {
  Tensor q = RandDouble({2, 5, 3}, 11), k = RandDouble({2, 7, 3}, 12), v = RandDouble({2, 7, 3}, 13);
  const Attrs attrs = Attrs().Set("is_causal", true).Set("scale", 0.7);
  TensorList out = autograd::CallOp(GetOp("scaled_dot_product_attention"), {q, k, v}, attrs);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].sizes(), (Shape{2, 5}));
  ExpectAllClose(out[1], NaiveAttention(q, k, v, true, 0.7).lse, 1e-13, 1e-13);
  EXPECT_EQ(GetOp("scaled_dot_product_attention").non_differentiable_outputs, (std::vector<int>{1}));
  TensorList bf =
      autograd::CallOp(GetOp("scaled_dot_product_attention"),
                       {CastTo(q, DType::kBFloat16), CastTo(k, DType::kBFloat16), CastTo(v, DType::kBFloat16)}, attrs);
  EXPECT_EQ(bf[0].dtype(), DType::kBFloat16);
  EXPECT_EQ(bf[1].dtype(), DType::kFloat32);
}

TEST(AttentionTest, BackwardMatchesFiniteDifferences) {
  Tensor q = RandDouble({2, 4, 3}, 14, -2, 2);
  Tensor k = RandDouble({2, 5, 3}, 15, -2, 2);
  Tensor v = RandDouble({2, 5, 2}, 16);
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    ExpectGradcheck([&](const TensorList& in) { return ScaledDotProductAttention(in[0], in[1], in[2], causal); },
                    {q, k, v});
    // T > S.
    ExpectGradcheck([&](const TensorList& in) { return ScaledDotProductAttention(in[0], in[1], in[2], causal, 0.9); },
                    {RandDouble({1, 2, 5, 3}, 17), RandDouble({1, 2, 3, 3}, 18), RandDouble({1, 2, 3, 4}, 19)});
  }
}

TEST(AttentionTest, BackwardAcrossQueryBlocksMatchesFiniteDifferences) {
  Tensor q = RandDouble({1, 70, 2}, 20, -2, 2);
  Tensor k = RandDouble({1, 70, 2}, 21, -2, 2);
  Tensor v = RandDouble({1, 70, 2}, 22);
  ExpectGradcheck([](const TensorList& in) { return ScaledDotProductAttention(in[0], in[1], in[2], true); }, {q, k, v});
}

TEST(AttentionTest, BFloat16ForwardIsCloseToDoubleReference) {
  Tensor q = CastTo(RandDouble({2, 9, 16}, 23, -2, 2), DType::kBFloat16);
  Tensor k = CastTo(RandDouble({2, 11, 16}, 24, -2, 2), DType::kBFloat16);
  Tensor v = CastTo(RandDouble({2, 11, 8}, 25), DType::kBFloat16);
  Tensor y = ScaledDotProductAttention(q, k, v, true);
  EXPECT_EQ(y.dtype(), DType::kBFloat16);
  ExpectAllClose(y, NaiveAttention(q, k, v, true, 0.25).out, 1e-2, 1e-2);
}

TEST(AttentionTest, GradientsFlowToEveryInputInBFloat16) {
  Tensor q = CastTo(RandDouble({1, 3, 4}, 26), DType::kBFloat16).set_requires_grad(true);
  Tensor k = CastTo(RandDouble({1, 3, 4}, 27), DType::kBFloat16).set_requires_grad(true);
  Tensor v = CastTo(RandDouble({1, 3, 4}, 28), DType::kBFloat16).set_requires_grad(true);
  Tensor y = ScaledDotProductAttention(q, k, v, false);
  Backward(y, OnesLike(y));
  // d(sum y)/dv[j] = Σ_i P_ij, and Σ_j of that is T = 3 in every column.
  const auto gv = v.grad().ToDoubleVector();
  for (int c = 0; c < 4; ++c) EXPECT_NEAR(gv[c] + gv[4 + c] + gv[8 + c], 3.0, 2e-2);
  EXPECT_EQ(q.grad().dtype(), DType::kBFloat16);
  EXPECT_EQ(k.grad().sizes(), (Shape{1, 3, 4}));
}

TEST(AttentionTest, EmptyBatchQueriesAndKeysAreHandled) {
  EXPECT_EQ(ScaledDotProductAttention(Zeros({0, 3, 4}), Zeros({0, 5, 4}), Zeros({0, 5, 2})).sizes(), (Shape{0, 3, 2}));
  EXPECT_EQ(ScaledDotProductAttention(Zeros({2, 0, 4}), Zeros({2, 5, 4}), Zeros({2, 5, 2})).sizes(), (Shape{2, 0, 2}));
  ExpectAllClose(ScaledDotProductAttention(Ones({2, 3, 4}), Zeros({2, 0, 4}), Zeros({2, 0, 2}), false),
                 std::vector<double>(12, 0.0), 0, 0);
}

// Pins the float32 kernel variant for one scope (test-only switch of core/ops/attention_kernels.h).
class ScopedIsa {
 public:
  explicit ScopedIsa(VectorIsa isa) { ForceVectorIsaForTesting(isa); }
  ~ScopedIsa() { ForceVectorIsaForTesting(VectorIsa::kAuto); }
};

std::vector<VectorIsa> IsasOfThisCpu() {
  std::vector<VectorIsa> isas{VectorIsa::kAvx2};
  if (CpuHasAvx512()) isas.push_back(VectorIsa::kAvx512);
  return isas;
}

struct HeadShape {
  int64_t t, s, d, dv;
};

TEST(AttentionTest, Float32KernelsOfEachIsaMatchNaiveDoubleValuesAndGradients) {
  // Head dims 8/32/64 (and an odd 17/40); T, S off every tile (6/12 rows), panel and key-block size;
  // {300, 280}: three backward panels (128 rows, 48-row sub-panels) against three key blocks, so key rows
  // are first written by one panel and accumulated by the next, and sub-panels see no key of a block.
  const std::vector<HeadShape> shapes{
      {37, 37, 8, 8}, {131, 131, 32, 32}, {77, 200, 64, 40}, {150, 90, 32, 17}, {300, 280, 32, 32}};
  for (VectorIsa isa : IsasOfThisCpu()) {
    const ScopedIsa pin(isa);
    const std::string name = ActiveAttentionKernels().isa;
    EXPECT_EQ(name, isa == VectorIsa::kAvx2 ? "avx2" : "avx512");
    for (const HeadShape& hs : shapes) {
      for (bool causal : {true, false}) {
        SCOPED_TRACE(::testing::Message() << name << " T=" << hs.t << " S=" << hs.s << " D=" << hs.d << " Dv=" << hs.dv
                                          << (causal ? " causal" : " full"));
        Generator gen(hs.t + hs.d);
        Tensor q = Randn({2, hs.t, hs.d}, gen), k = Randn({2, hs.s, hs.d}, gen), v = Randn({2, hs.s, hs.dv}, gen);
        Tensor g = Randn({2, hs.t, hs.dv}, gen);
        const Attrs attrs = Attrs().Set("is_causal", causal).Set("scale", 0.3);
        TensorList out = autograd::CallOp(GetOp("scaled_dot_product_attention"), {q, k, v}, attrs);
        const Naive want = NaiveAttention(q, k, v, causal, 0.3);
        ExpectAllClose(out[0], want.out, 2e-6, 1e-5);
        ExpectAllClose(out[1], want.lse, 2e-6, 1e-5);
        TensorList grads =
            autograd::CallOp(GetOp("scaled_dot_product_attention_backward"), {g, q, k, v, out[0], out[1]}, attrs);
        const NaiveGrads wg = NaiveAttentionBackward(q, k, v, g, causal, 0.3);
        ExpectAllClose(grads[0], wg.dq, 1e-5, 1e-4);
        ExpectAllClose(grads[1], wg.dk, 1e-5, 1e-4);
        ExpectAllClose(grads[2], wg.dv, 1e-5, 1e-4);
      }
    }
  }
}

TEST(AttentionTest, Float32KernelsKeepWideScoreRangesAndNegativeScalesExact) {
  // scale 40 spreads the scores over hundreds of units: most exponents fall below 2^-127, where the
  // AVX2 Exp2 clamps to exactly 0 and the AVX-512 one underflows through vscalefps; neither may give
  // NaN or inf, and the dominant keys must carry the result. A negative scale makes the row maximum
  // of x·scale the minimum of x (GroupMax takes that branch; a wrong max would overflow 2^x here).
  // Two key blocks.
  for (VectorIsa isa : IsasOfThisCpu()) {
    const ScopedIsa pin(isa);
    for (double scale : {40.0, -40.0}) {
      for (bool causal : {true, false}) {
        SCOPED_TRACE(::testing::Message() << ActiveAttentionKernels().isa << " scale " << scale
                                          << (causal ? " causal" : " full"));
        Generator gen(70);
        Tensor q = Randn({2, 45, 8}, gen), k = Randn({2, 140, 8}, gen), v = Randn({2, 140, 5}, gen);
        Tensor g = Randn({2, 45, 5}, gen);
        const Attrs attrs = Attrs().Set("is_causal", causal).Set("scale", scale);
        TensorList out = autograd::CallOp(GetOp("scaled_dot_product_attention"), {q, k, v}, attrs);
        const Naive want = NaiveAttention(q, k, v, causal, scale);
        ExpectAllClose(out[0], want.out, 1e-5, 1e-4);
        ExpectAllClose(out[1], want.lse, 1e-5, 1e-5);
        TensorList grads =
            autograd::CallOp(GetOp("scaled_dot_product_attention_backward"), {g, q, k, v, out[0], out[1]}, attrs);
        const NaiveGrads wg = NaiveAttentionBackward(q, k, v, g, causal, scale);
        // dq, dk scale with |scale| = 40 and products of nearly one-hot rows: relative 1e-4 of that size.
        ExpectAllClose(grads[0], wg.dq, 2e-3, 1e-4);
        ExpectAllClose(grads[1], wg.dk, 2e-3, 1e-4);
        ExpectAllClose(grads[2], wg.dv, 1e-5, 1e-4);
      }
    }
  }
}

TEST(AttentionTest, Float32KeysNoQuerySeesGetZeroGradients) {
  // Causal with S > T leaves keys T..S-1 unseen; T == 0 leaves every key unseen. Their dK, dV rows get
  // no panel's write, so the kernels must zero them (the outputs start as uninitialized memory).
  for (VectorIsa isa : IsasOfThisCpu()) {
    const ScopedIsa pin(isa);
    for (int64_t t : {0, 5}) {
      SCOPED_TRACE(::testing::Message() << ActiveAttentionKernels().isa << " T=" << t);
      Generator gen(60 + t);
      Tensor q = Randn({3, t, 8}, gen), k = Randn({3, 40, 8}, gen), v = Randn({3, 40, 8}, gen), g = Randn({3, t, 8}, gen);
      const Attrs attrs = Attrs().Set("is_causal", true).Set("scale", 0.5);
      TensorList out = autograd::CallOp(GetOp("scaled_dot_product_attention"), {q, k, v}, attrs);
      TensorList grads =
          autograd::CallOp(GetOp("scaled_dot_product_attention_backward"), {g, q, k, v, out[0], out[1]}, attrs);
      if (t > 0) {  // (the naive loops need T > 0)
        const NaiveGrads want = NaiveAttentionBackward(q, k, v, g, true, 0.5);
        ExpectAllClose(grads[1], want.dk, 1e-5, 1e-4);
        ExpectAllClose(grads[2], want.dv, 1e-5, 1e-4);
      } else {
        ExpectAllClose(grads[1], std::vector<double>(3 * 40 * 8, 0.0), 0, 0);
      }
      const auto dv = grads[2].ToDoubleVector();
      for (int64_t h = 0; h < 3; ++h) {
        for (int64_t j = t; j < 40; ++j) EXPECT_EQ(dv[(h * 40 + j) * 8], 0.0) << "head " << h << " key " << j;
      }
    }
  }
}

TEST(AttentionTest, Float32RowsWithoutKeysGetZeroOutputAndMinusInfinityLse) {
  // S == 0: the online softmax folds no block, so l stays 0 and lse = (m + log2 l)·ln2 = -inf.
  for (VectorIsa isa : IsasOfThisCpu()) {
    const ScopedIsa pin(isa);
    SCOPED_TRACE(ActiveAttentionKernels().isa);
    const Attrs attrs = Attrs().Set("is_causal", false).Set("scale", 0.5);
    TensorList out = autograd::CallOp(GetOp("scaled_dot_product_attention"), {Ones({2, 19, 4}), Zeros({2, 0, 4}),
                                                                              Zeros({2, 0, 3})},
                                      attrs);
    ExpectAllClose(out[0], std::vector<double>(2 * 19 * 3, 0.0), 0, 0);
    for (double x : out[1].ToDoubleVector()) EXPECT_EQ(x, -std::numeric_limits<double>::infinity());
  }
}

struct PrefetchCase {
  int64_t t, s, d, dv, ld;  // rows ld floats apart
};

// Outputs, lse and gradients of `heads` heads run one after another through the active kernels, each
// head naming the next (AttentionHeadPtrs::next) when `prefetch`.
std::vector<float> RunHeadsInOrder(const PrefetchCase& c, int64_t heads, bool causal, bool prefetch,
                                   const std::vector<float>& q, const std::vector<float>& k,
                                   const std::vector<float>& v, const std::vector<float>& g) {
  const AttentionKernels& kern = ActiveAttentionKernels();
  const AttentionHeadDims dm{c.t, c.s, c.d, c.dv};
  std::vector<float> scratch(kern.scratch_floats(dm) + 16);
  float* s = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) & ~uintptr_t{63});
  std::vector<float> out(heads * (c.t + c.t + c.s + c.s) * c.ld, 0.0f), lse(heads * c.t);
  float *o = out.data(), *dq = o + heads * c.t * c.ld, *dk = dq + heads * c.t * c.ld, *dv = dk + heads * c.s * c.ld;
  std::vector<AttentionHeadPtrs> p(heads);
  for (int64_t h = 0; h < heads; ++h) {
    p[h].q = q.data() + h * c.t * c.ld, p[h].k = k.data() + h * c.s * c.ld, p[h].v = v.data() + h * c.s * c.ld;
    p[h].o = o + h * c.t * c.ld, p[h].lse = lse.data() + h * c.t, p[h].saved_o = p[h].o;
    p[h].saved_lse = p[h].lse, p[h].dout = g.data() + h * c.t * c.ld;
    p[h].dq = dq + h * c.t * c.ld, p[h].dk = dk + h * c.s * c.ld, p[h].dv = dv + h * c.s * c.ld;
    p[h].q_ld = p[h].k_ld = p[h].v_ld = p[h].o_ld = p[h].dout_ld = p[h].dq_ld = p[h].dk_ld = p[h].dv_ld = c.ld;
  }
  for (int64_t h = 0; h + 1 < heads && prefetch; ++h) p[h].next = &p[h + 1];
  for (int64_t h = 0; h < heads; ++h) kern.forward(p[h], dm, causal, 0.4f, s);
  for (int64_t h = 0; h < heads; ++h) kern.backward(p[h], dm, causal, 0.4f, s);
  out.insert(out.end(), lse.begin(), lse.end());
  return out;
}

TEST(AttentionTest, Float32KernelsGiveTheSameBitsWhetherOrNotTheyPrefetchTheNextHead) {
  // AttentionHeadPtrs::next only prefetches: with it set (strided rows, odd sizes, several panels and
  // key blocks; and heads too large to prefetch, over 256 KB of operands) every output keeps its bits.
  constexpr int64_t kHeads = 3;
  for (const PrefetchCase& c : {PrefetchCase{70, 150, 20, 12, 40}, PrefetchCase{300, 400, 64, 64, 64}}) {
    Generator gen(90);
    auto rows = [&](int64_t n) {
      Tensor t = Randn({kHeads * n * c.ld}, gen);
      const float* data = static_cast<const float*>(t.raw_data());
      return std::vector<float>(data, data + t.numel());
    };
    const std::vector<float> q = rows(c.t), k = rows(c.s), v = rows(c.s), g = rows(c.t);
    for (VectorIsa isa : IsasOfThisCpu()) {
      const ScopedIsa pin(isa);
      for (bool causal : {true, false}) {
        SCOPED_TRACE(::testing::Message() << ActiveAttentionKernels().isa << " T=" << c.t << " S=" << c.s
                                          << (causal ? " causal" : " full"));
        const std::vector<float> with = RunHeadsInOrder(c, kHeads, causal, true, q, k, v, g);
        const std::vector<float> without = RunHeadsInOrder(c, kHeads, causal, false, q, k, v, g);
        ASSERT_EQ(with.size(), without.size());
        EXPECT_EQ(std::memcmp(with.data(), without.data(), with.size() * sizeof(float)), 0);
        EXPECT_NE(std::count(with.begin(), with.end(), 0.0f), static_cast<std::ptrdiff_t>(with.size()));
      }
    }
  }
}

TEST(AttentionTest, Float32HeadsWithScratchBeyondTheThreadsKeptBufferMatchTheFloat64Path) {
  // T = S = 4096 needs ~5 MB of head scratch, more than a thread keeps between calls (4 MB): it is
  // allocated for the call. Checked against the float64 path (BLAS blocks) on the same inputs.
  Generator gen(91);
  Tensor q = Randn({1, 4096, 8}, gen), k = Randn({1, 4096, 8}, gen), v = Randn({1, 4096, 8}, gen);
  Tensor g = Randn({1, 4096, 8}, gen);
  const Attrs attrs = Attrs().Set("is_causal", true).Set("scale", 0.35);
  auto run = [&](DType dtype) {
    TensorList in{CastTo(q, dtype), CastTo(k, dtype), CastTo(v, dtype)};
    TensorList out = autograd::CallOp(GetOp("scaled_dot_product_attention"), in, attrs);
    TensorList grads = autograd::CallOp(GetOp("scaled_dot_product_attention_backward"),
                                        {CastTo(g, dtype), in[0], in[1], in[2], out[0], out[1]}, attrs);
    return TensorList{out[0], out[1], grads[0], grads[1], grads[2]};
  };
  const TensorList got = run(DType::kFloat32), want = run(DType::kFloat64);
  for (int i = 0; i < 5; ++i) {
    SCOPED_TRACE(i);
    ExpectAllClose(CastTo(got[i], DType::kFloat64), want[i], 2e-5, 1e-4);
  }
}

// Keys whose scores are all -inf filling the first 128-key block (the online softmax's first block): the
// running max was -inf and exp(-inf - -inf) = NaN poisoned the row for good; torch gives the softmax over
// the finite keys. A row whose keys are all -inf gives 0 and lse -inf, with zero gradients.
TEST(AttentionTest, AFirstKeyBlockOfMinusInfinityScoresIsSkippedNotNaN) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (VectorIsa isa : IsasOfThisCpu()) {
      const ScopedIsa pin(isa);
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ActiveAttentionKernels().isa);
      Generator gen(5);
      const int64_t masked = 128, live = 10;
      const Tensor q = Cast(Ones({1, 3, 4}), dtype);  // q > 0, so q·(-inf) keys score -inf
      Tensor k = Cast(Randn({1, masked + live, 4}, gen), dtype);
      CopyInto(Narrow(k, 1, 0, masked), Full({1, masked, 4}, -INFINITY, dtype));
      const Tensor v = Cast(Randn({1, masked + live, 8}, gen), dtype), g = Cast(Randn({1, 3, 8}, gen), dtype);
      const Attrs attrs = Attrs().Set("is_causal", false).Set("scale", 0.5);
      TensorList out = autograd::CallOp(GetOp("scaled_dot_product_attention"), {q, k, v}, attrs);
      const Tensor k_live = Contiguous(Narrow(k, 1, masked, live)), v_live = Contiguous(Narrow(v, 1, masked, live));
      const Naive want = NaiveAttention(q, k_live, v_live, false, 0.5);
      ExpectAllClose(out[0], want.out, 1e-6, 1e-5);
      TensorList grads =
          autograd::CallOp(GetOp("scaled_dot_product_attention_backward"), {g, q, k, v, out[0], out[1]}, attrs);
      // dv and the live keys' dk as over the finite keys alone (dq is NaN: dS·k meets 0·(-inf), as in torch).
      const NaiveGrads wg = NaiveAttentionBackward(q, k_live, v_live, g, false, 0.5);
      ExpectAllClose(Contiguous(Narrow(grads[1], 1, masked, live)), wg.dk, 1e-5, 1e-4);
      ExpectAllClose(Contiguous(Narrow(grads[2], 1, masked, live)), wg.dv, 1e-5, 1e-4);
      for (double x : Narrow(grads[2], 1, 0, masked).ToDoubleVector()) EXPECT_EQ(x, 0.0);
      // Every key -inf: output 0, lse -inf, zero dk and dv.
      const Tensor k_dead = Full({1, masked, 4}, -INFINITY, dtype), v_dead = Cast(Randn({1, masked, 8}, gen), dtype);
      TensorList dead = autograd::CallOp(GetOp("scaled_dot_product_attention"), {q, k_dead, v_dead}, attrs);
      for (double x : dead[0].ToDoubleVector()) EXPECT_EQ(x, 0.0);
      for (double x : dead[1].ToDoubleVector()) EXPECT_EQ(x, -INFINITY);
      TensorList dead_grads = autograd::CallOp(GetOp("scaled_dot_product_attention_backward"),
                                               {g, q, k_dead, v_dead, dead[0], dead[1]}, attrs);
      for (const Tensor& t : {dead_grads[1], dead_grads[2]}) {
        for (double x : t.ToDoubleVector()) EXPECT_EQ(x, 0.0);
      }
    }
  }
}

// An input expanded along its rows (stride 0, one stored row) was read at a row stride of the width,
// past its end: garbage, or a segfault for long sequences. It is copied first now.
TEST(AttentionTest, InputsExpandedAlongTheirRowsMatchTheirContiguousCopies) {
  Generator gen(9);
  const Tensor q = Randn({1, 2, 20, 16}, gen);
  const Tensor k1 = Randn({1, 2, 1, 16}, gen), v1 = Randn({1, 2, 1, 16}, gen), g1 = Randn({1, 2, 1, 16}, gen);
  const Tensor k = Expand(k1, {1, 2, 20, 16}), v = Expand(v1, {1, 2, 20, 16}), g = Expand(g1, {1, 2, 20, 16});
  ASSERT_EQ(k.stride(2), 0);
  const Attrs attrs = Attrs().Set("is_causal", true).Set("scale", 0.25);
  const TensorList got = autograd::CallOp(GetOp("scaled_dot_product_attention"), {q, k, v}, attrs);
  const TensorList want =
      autograd::CallOp(GetOp("scaled_dot_product_attention"), {q, Contiguous(k), Contiguous(v)}, attrs);
  EXPECT_EQ(got[0].ToDoubleVector(), want[0].ToDoubleVector());
  const TensorList gg = autograd::CallOp(GetOp("scaled_dot_product_attention_backward"), {g, q, k, v, got[0], got[1]},
                                         attrs);
  const TensorList gw = autograd::CallOp(GetOp("scaled_dot_product_attention_backward"),
                                         {Contiguous(g), q, Contiguous(k), Contiguous(v), want[0], want[1]}, attrs);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(gg[i].ToDoubleVector(), gw[i].ToDoubleVector()) << i;
}

TEST(AttentionTest, ForcingAvx512NeedsTheCpuToHaveIt) {
  if (CpuHasAvx512()) {
    const ScopedIsa pin(VectorIsa::kAvx512);
    EXPECT_STREQ(ActiveAttentionKernels().isa, "avx512");
  } else {
    ExpectErrorContains([] { ForceVectorIsaForTesting(VectorIsa::kAvx512); }, ErrorCode::kFailedPrecondition,
                        "this CPU has no AVX-512F");
    EXPECT_STREQ(ActiveAttentionKernels().isa, "avx2");
  }
}

TEST(AttentionTest, BadShapesAndDtypesRaiseErrorsNamingTheOp) {
  ExpectErrorContains([] { ScaledDotProductAttention(Zeros({4}), Zeros({4}), Zeros({4})); },
                      ErrorCode::kInvalidArgument,
                      "scaled_dot_product_attention: expected q [..., T, D], k [..., S, D], v [..., S, Dv] with "
                      "equal ranks >= 2, got q [4], k [4], v [4]");
  ExpectErrorContains(
      [] {
        ScaledDotProductAttention(Zeros({2, 3, 4}), Zeros({2, 5, 8}), Zeros({2, 5, 8}));
      },
      ErrorCode::kInvalidArgument,
      "scaled_dot_product_attention: q and k need the same last dim D, got q [2, 3, 4], k [2, 5, 8]");
  ExpectErrorContains(
      [] {
        ScaledDotProductAttention(Zeros({2, 3, 4}), Zeros({2, 5, 4}), Zeros({2, 6, 4}));
      },
      ErrorCode::kInvalidArgument, "k and v need the same sequence length S, got k [2, 5, 4], v [2, 6, 4]");
  ExpectErrorContains(
      [] {
        ScaledDotProductAttention(Zeros({2, 3, 4}), Zeros({3, 5, 4}), Zeros({3, 5, 4}));
      },
      ErrorCode::kInvalidArgument, "leading (batch/head) dims differ: q [2, 3, 4], k [3, 5, 4]");
  ExpectErrorContains(
      [] {
        ScaledDotProductAttention(Zeros({3, 4}), Zeros({5, 4}, DType::kFloat64), Zeros({5, 4}));
      },
      ErrorCode::kInvalidArgument, "q, k, v must share one floating dtype, got [3, 4] float32, [5, 4] float64");
}

// softmax(q·kᵀ·scale + mask)·v per head in double loops for the math path: keep[i][j] false hides key
// j (-inf), add[i][j] is added to the score; a row with no finite score gives 0 (torch >= 2.5).
std::vector<double> NaiveMasked(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                const std::function<double(int64_t, int64_t)>& mask) {
  const int64_t t = q.size(-2), s = k.size(-2), d = q.size(-1), dv = v.size(-1), heads = q.numel() / (t * d);
  const auto qv = q.ToDoubleVector(), kv = k.ToDoubleVector(), vv = v.ToDoubleVector();
  std::vector<double> out(static_cast<size_t>(heads * t * dv), 0.0);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < t; ++i) {
      std::vector<double> w(static_cast<size_t>(s));
      double m = -INFINITY, sum = 0;
      for (int64_t j = 0; j < s; ++j) {
        double x = 0;
        for (int64_t c = 0; c < d; ++c) x += qv[(h * t + i) * d + c] * kv[(h * s + j) * d + c];
        w[j] = x * scale + mask(i, j);
        m = std::max(m, w[j]);
      }
      if (m == -INFINITY) continue;
      for (int64_t j = 0; j < s; ++j) sum += (w[j] = std::exp(w[j] - m));
      for (int64_t j = 0; j < s; ++j) {
        for (int64_t c = 0; c < dv; ++c) out[(h * t + i) * dv + c] += w[j] / sum * vv[(h * s + j) * dv + c];
      }
    }
  }
  return out;
}

// A [t, s] bool mask with a fully masked row 1 and a pattern elsewhere.
Tensor KeepMask(int64_t t, int64_t s) {
  Tensor m = Empty({t, s}, DType::kBool);
  auto* p = static_cast<uint8_t*>(m.raw_data());
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t j = 0; j < s; ++j) p[i * s + j] = i != 1 && (i + 2 * j) % 3 != 0;
  }
  return m;
}

TEST(AttentionTest, BoolAndFloatMasksMatchDoubleLoopsAndAFullyMaskedRowIsZero) {
  const Tensor q = RandDouble({2, 3, 5, 4}, 1), k = RandDouble({2, 3, 6, 4}, 2), v = RandDouble({2, 3, 6, 3}, 3);
  const Tensor keep = KeepMask(5, 6);
  const auto kp = keep.ToDoubleVector();
  const std::vector<double> want =
      NaiveMasked(q, k, v, 0.5, [&](int64_t i, int64_t j) { return kp[i * 6 + j] != 0 ? 0.0 : -INFINITY; });
  const Tensor got = ScaledDotProductAttention(q, k, v, {.attn_mask = keep, .scale = 0.5});
  ExpectAllClose(got, want, 1e-12, 1e-12);
  for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(got.ToDoubleVector()[1 * 3 + c], 0.0);  // head 0, row 1
  const Tensor add = RandDouble({1, 1, 5, 6}, 4, -2.0, 2.0);  // broadcast over batch and heads
  const auto av = add.ToDoubleVector();
  ExpectAllClose(ScaledDotProductAttention(q, k, v, {.attn_mask = add}),
                 NaiveMasked(q, k, v, 0.5, [&](int64_t i, int64_t j) { return av[i * 6 + j]; }), 1e-12, 1e-12);
  // A causal bool mask through the math path equals the fused causal kernel.
  Tensor tril = Empty({5, 6}, DType::kBool);
  for (int64_t i = 0; i < 30; ++i) static_cast<uint8_t*>(tril.raw_data())[i] = i % 6 <= i / 6;
  ExpectAllClose(ScaledDotProductAttention(q, k, v, {.attn_mask = tril}), ScaledDotProductAttention(q, k, v, true),
                 1e-12, 1e-12);
}

TEST(AttentionTest, MaskedAttentionGradientsMatchFiniteDifferencesWithoutNaN) {
  const Tensor keep = KeepMask(4, 5);
  ExpectGradcheck(
      [&](const TensorList& in) { return ScaledDotProductAttention(in[0], in[1], in[2], {.attn_mask = keep}); },
      {RandDouble({2, 4, 3}, 5), RandDouble({2, 5, 3}, 6), RandDouble({2, 5, 2}, 7)});
  const Tensor add = RandDouble({4, 5}, 8);
  ExpectGradcheck(
      [&](const TensorList& in) { return ScaledDotProductAttention(in[0], in[1], in[2], {.attn_mask = in[3]}); },
      {RandDouble({2, 4, 3}, 5), RandDouble({2, 5, 3}, 6), RandDouble({2, 5, 2}, 7), add});
  // A float mask whose row 2 is all -inf: that output row is 0 and no NaN reaches any gradient.
  std::vector<double> rows = add.ToDoubleVector();
  for (int64_t j = 0; j < 5; ++j) rows[2 * 5 + j] = -INFINITY;
  TensorList in = {RandDouble({2, 4, 3}, 5), RandDouble({2, 5, 3}, 6), RandDouble({2, 5, 2}, 7)};
  for (Tensor& t : in) t.set_requires_grad(true);
  const Tensor y = ScaledDotProductAttention(in[0], in[1], in[2], {.attn_mask = FromVector<double>(rows, {4, 5})});
  EXPECT_EQ(y.ToDoubleVector()[2 * 2], 0.0);
  Backward(y, RandDouble({2, 4, 2}, 9));
  for (const Tensor& t : in) {
    for (double g : t.grad().ToDoubleVector()) ASSERT_TRUE(std::isfinite(g));
  }
}

TEST(AttentionTest, DropoutDropsTheSoftmaxWeightsWithTheGivenGenerator) {
  const Tensor q = RandDouble({2, 6, 4}, 11), k = RandDouble({2, 6, 4}, 12), v = RandDouble({2, 6, 3}, 13);
  Generator gen(17), ref(17);
  const Tensor got = ScaledDotProductAttention(q, k, v, {.dropout_p = 0.25, .is_causal = true, .generator = &gen});
  Tensor tril = Empty({6, 6}, DType::kBool);
  for (int64_t i = 0; i < 36; ++i) static_cast<uint8_t*>(tril.raw_data())[i] = i % 6 <= i / 6;
  const Tensor s = MulScalar(Matmul(q, Transpose(k, -2, -1)), 0.5);
  const Tensor w = Softmax(Where(tril, s, Scalar(-INFINITY, DType::kFloat64)), -1);
  ExpectAllClose(got, Matmul(Dropout(w, 0.25, ref), v), 1e-12, 1e-12);
  EXPECT_EQ(gen.offset(), 72u);  // the [2, 6, 6] weights
  int zeros = 0;
  for (double x : Dropout(w, 0.25, ref).ToDoubleVector()) zeros += x == 0.0;
  EXPECT_GT(zeros, 21);  // the 30 masked weights are 0 already; dropout zeroes some of the 42 others
}

TEST(AttentionTest, MaskAndDropoutArgumentsAreCheckedLikeTorch) {
  const Tensor q = RandDouble({3, 4}, 1);
  Generator gen(1);
  ExpectErrorContains([&] { ScaledDotProductAttention(q, q, q, {.attn_mask = KeepMask(3, 3), .is_causal = true}); },
                      ErrorCode::kInvalidArgument, "attn_mask must not be set together with is_causal=True");
  ExpectErrorContains([&] { ScaledDotProductAttention(q, q, q, {.dropout_p = 0.1}); }, ErrorCode::kInvalidArgument,
                      "dropout_p=0.1 needs a Generator");
  ExpectErrorContains([&] { ScaledDotProductAttention(q, q, q, {.dropout_p = 1.5, .generator = &gen}); },
                      ErrorCode::kInvalidArgument, "dropout_p has to be between 0 and 1, but got 1.5");
  ExpectErrorContains(
      [&] { ScaledDotProductAttention(q, q, q, {.attn_mask = Zeros({3, 3}, DType::kInt64)}); },
      ErrorCode::kInvalidArgument,
      "Expected attn_mask dtype to be bool or float or to match query dtype, but got attn_mask.dtype: long int and  "
      "query.dtype: double instead.");  // torch's message
}

}  // namespace
}  // namespace tessel
