// core/ops/cuda/flash_math_test.cc — the flash-style CUDA attention forward's per-row online softmax
// (cuda/flash_math.h), run on the host in the kernel's key order, equals the CPU op
// "scaled_dot_product_attention" (out and lse) causal and not, for T < S, T > S and S = 0, float32
// (1e-5 relative) and bfloat16 (one bf16 ulp of the output scale).
#include "core/ops/cuda/flash_math.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tessel::cuda
