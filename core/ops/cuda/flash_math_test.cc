// core/ops/cuda/flash_math_test.cc — the flash-style CUDA attention forward's per-row online softmax
// (cuda/flash_math.h), run on the host in the kernel's key order, equals the CPU op
// "scaled_dot_product_attention" (out and lse) causal and not, for T < S, T > S and S = 0, float32
// (1e-5 relative) and bfloat16 (one bf16 ulp of the output scale); the backward's recomputation from lse
// (dq per query row, dk / dv per key row) equals "scaled_dot_product_attention_backward" likewise (bf16: within one
// ulp of each gradient's largest magnitude; the CPU op rounds P and dS to bf16 as torch's CPU kernel does).
#include "core/ops/cuda/flash_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dispatch/dispatcher.h"
#include "core/ops/attention.h"
#include "core/ops/cuda/testing/wave.h"
#include "core/tensor/factory.h"

namespace tessel::cuda {
namespace {

// out [BH, T, Dv] and lse [BH, T] as the kernel computes them (one thread per query row).
template <typename T>
std::pair<std::vector<double>, std::vector<double>> Emulate(const Tensor& q, const Tensor& k, const Tensor& v,
                                                            bool causal, float scale) {
  const int64_t bh = q.size(0), t = q.size(1), d = q.size(2), s = k.size(1), dv = v.size(2);
  const T* pq = static_cast<const T*>(q.raw_data());
  const T* pk = static_cast<const T*>(k.raw_data());
  const T* pv = static_cast<const T*>(v.raw_data());
  std::vector<T> out(bh * t * dv);
  std::vector<float> lse(bh * t), kf(d), vf(dv), acc(dv);
  for (int64_t h = 0; h < bh; ++h) {
    for (int64_t i = 0; i < t; ++i) {
      FlashState st = FlashState::Start();
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < FlashKeyEnd(i, s, causal); ++j) {
        for (int64_t c = 0; c < d; ++c) kf[c] = LoadF(pk, (h * s + j) * d + c);  // the shared-memory tile
        for (int64_t c = 0; c < dv; ++c) vf[c] = LoadF(pv, (h * s + j) * dv + c);
        FlashUpdate(st, acc.data(), FlashScore(pq + (h * t + i) * d, kf.data(), d, scale), vf.data(), dv);
      }
      FlashFinish(st, acc.data(), dv, out.data() + (h * t + i) * dv, &lse[h * t + i]);
    }
  }
  std::vector<double> o(out.size()), l(lse.begin(), lse.end());
  for (size_t i = 0; i < out.size(); ++i) o[i] = LoadF(out.data(), static_cast<int64_t>(i));
  return {o, l};
}

template <typename T>
void Check(DType dtype, int64_t t, int64_t s, bool causal) {
  SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " T " << t << " S " << s << (causal ? " causal" : ""));
  const Tensor q = testing::Wave({3, t, 16}, dtype, 1, 1.0), k = testing::Wave({3, s, 16}, dtype, 2, 1.0);
  const Tensor v = testing::Wave({3, s, 8}, dtype, 3, 1.0);
  const double scale = 0.25;
  const TensorList want = Dispatch(GetOp("scaled_dot_product_attention"), std::vector<Tensor>{q, k, v},
                                   Attrs().Set("is_causal", causal).Set("scale", scale));
  const auto [out, lse] = Emulate<T>(q, k, v, causal, static_cast<float>(scale));
  const std::vector<double> wo = want[0].ToDoubleVector(), wl = want[1].ToDoubleVector();
  const double rel = dtype == DType::kBFloat16 ? 1.0 / 128 : 1e-5;
  ASSERT_EQ(out.size(), wo.size());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], wo[i], rel * (1 + std::abs(wo[i]))) << i;
  ASSERT_EQ(lse.size(), wl.size());
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(wl[i])) {
      EXPECT_EQ(lse[i], wl[i]) << i;
    } else {
      ASSERT_NEAR(lse[i], wl[i], 1e-5 * (1 + std::abs(wl[i]))) << i;
    }
  }
}

TEST(FlashMathTest, OnlineSoftmaxRowsEqualCpuAttentionCausalAndNot) {
  for (bool causal : {false, true}) {
    Check<float>(DType::kFloat32, 37, 37, causal);
    Check<float>(DType::kFloat32, 5, 40, causal);  // T < S: top-left causal mask
    Check<float>(DType::kFloat32, 40, 5, causal);  // T > S
    Check<uint16_t>(DType::kBFloat16, 37, 37, causal);
  }
}

TEST(FlashMathTest, RowWithoutKeysGivesZeroOutputAndMinusInfLse) {
  Check<float>(DType::kFloat32, 4, 0, false);
  EXPECT_EQ(FlashKeyEnd(3, 10, true), 4);
  EXPECT_EQ(FlashKeyEnd(30, 10, true), 10);
}

// dq, dk, dv as the kernels compute them: D_i per row, then one thread per query row (keys ascending)
// for dq and one thread per key row (queries ascending) for dk and dv, K / V / Q / dO rows widened to
// fp32 as the shared-memory tiles hold them.
template <typename T>
std::vector<std::vector<double>> EmulateBackward(const TensorList& in, bool causal, float scale) {
  const Tensor &dout = in[0], &q = in[1], &k = in[2], &v = in[3], &out = in[4], &lse_t = in[5];
  const int64_t bh = q.size(0), t = q.size(1), d = q.size(2), s = k.size(1), dv = v.size(2);
  auto raw = [](const Tensor& x) { return static_cast<const T*>(x.raw_data()); };
  const float* lse = static_cast<const float*>(lse_t.raw_data());
  std::vector<T> dq(bh * t * d), dk(bh * s * d), dvv(bh * s * dv);
  std::vector<float> dd(bh * t), qf(d), kf(d), vf(dv), gf(dv), acc(d), acc_v(dv);
  auto widen = [](const T* p, std::vector<float>& f) {
    for (size_t c = 0; c < f.size(); ++c) f[c] = LoadF(p, static_cast<int64_t>(c));
  };
  for (int64_t r = 0; r < bh * t; ++r) dd[r] = FlashDot(raw(dout) + r * dv, raw(out) + r * dv, dv);
  for (int64_t h = 0; h < bh; ++h) {
    for (int64_t i = 0; i < t; ++i) {  // dq kernel
      const T* qi = raw(q) + (h * t + i) * d;
      const T* gi = raw(dout) + (h * t + i) * dv;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < FlashKeyEnd(i, s, causal); ++j) {
        widen(raw(k) + (h * s + j) * d, kf);
        widen(raw(v) + (h * s + j) * dv, vf);
        const float p = FlashProb(FlashScore(qi, kf.data(), d, scale), lse[h * t + i]);
        const float ds = FlashDScore(p, FlashDot(gi, vf.data(), dv), dd[h * t + i]);
        for (int64_t c = 0; c < d; ++c) acc[c] += ds * kf[c];
      }
      for (int64_t c = 0; c < d; ++c) StoreF(dq.data(), (h * t + i) * d + c, acc[c] * scale);
    }
    for (int64_t j = 0; j < s; ++j) {  // dkv kernel
      const T* kj = raw(k) + (h * s + j) * d;
      const T* vj = raw(v) + (h * s + j) * dv;
      std::fill(acc.begin(), acc.end(), 0.0f);
      std::fill(acc_v.begin(), acc_v.end(), 0.0f);
      for (int64_t i = FlashQueryBegin(j, causal); i < t; ++i) {
        widen(raw(q) + (h * t + i) * d, qf);
        widen(raw(dout) + (h * t + i) * dv, gf);
        const float p = FlashProb(FlashScore(kj, qf.data(), d, scale), lse[h * t + i]);
        const float ds = FlashDScore(p, FlashDot(vj, gf.data(), dv), dd[h * t + i]);
        for (int64_t c = 0; c < dv; ++c) acc_v[c] += p * gf[c];
        for (int64_t c = 0; c < d; ++c) acc[c] += ds * qf[c];
      }
      for (int64_t c = 0; c < d; ++c) StoreF(dk.data(), (h * s + j) * d + c, acc[c] * scale);
      for (int64_t c = 0; c < dv; ++c) StoreF(dvv.data(), (h * s + j) * dv + c, acc_v[c]);
    }
  }
  auto wide = [](const std::vector<T>& x) {
    std::vector<double> o(x.size());
    for (size_t i = 0; i < x.size(); ++i) o[i] = LoadF(x.data(), static_cast<int64_t>(i));
    return o;
  };
  return {wide(dq), wide(dk), wide(dvv)};
}

template <typename T>
void CheckBackward(DType dtype, int64_t t, int64_t s, bool causal) {
  SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " T " << t << " S " << s << (causal ? " causal" : ""));
  const Tensor q = testing::Wave({2, t, 16}, dtype, 1, 1.0), k = testing::Wave({2, s, 16}, dtype, 2, 1.0);
  const Tensor v = testing::Wave({2, s, 8}, dtype, 3, 1.0), dout = testing::Wave({2, t, 8}, dtype, 4, 1.0);
  const Attrs attrs = Attrs().Set("is_causal", causal).Set("scale", 0.25);
  const TensorList fwd = Dispatch(GetOp("scaled_dot_product_attention"), std::vector<Tensor>{q, k, v}, attrs);
  const TensorList in = {dout, q, k, v, fwd[0], fwd[1]};
  const TensorList want = Dispatch(GetOp("scaled_dot_product_attention_backward"), in, attrs);
  const auto got = EmulateBackward<T>(in, causal, 0.25f);
  const double rel = dtype == DType::kBFloat16 ? 1.0 / 128 : 1e-5;
  for (int g = 0; g < 3; ++g) {
    const std::vector<double> w = want[g].ToDoubleVector();
    ASSERT_EQ(got[g].size(), w.size());
    // bfloat16: within one bf16 ulp of the gradient's scale (its largest magnitude), not of each element: the CPU
    // op rounds P and dS to bf16 before its products (as torch's CPU kernel), this kernel keeps them in float32,
    // and a small gradient element that sums terms of both signs moves by more than its own ulp
    double top = 0;
    for (double x : w) top = std::max(top, std::abs(x));
    for (size_t i = 0; i < w.size(); ++i) {
      const double tol = (dtype == DType::kBFloat16 ? rel * top : rel * std::abs(w[i])) + 1e-5;
      ASSERT_NEAR(got[g][i], w[i], tol) << g << " " << i;
    }
  }
}

TEST(FlashMathTest, BackwardFromLseEqualsCpuAttentionBackwardCausalAndNot) {
  for (bool causal : {false, true}) {
    CheckBackward<float>(DType::kFloat32, 37, 37, causal);
    CheckBackward<float>(DType::kFloat32, 5, 40, causal);
    CheckBackward<float>(DType::kFloat32, 40, 5, causal);
    CheckBackward<uint16_t>(DType::kBFloat16, 37, 37, causal);
  }
}

}  // namespace
}  // namespace tessel::cuda
