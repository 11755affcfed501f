// core/ops/cuda/adamw_math_test.cc — the fused CUDA AdamW's element formula (adamw_math.h), run on the
// host, tracks the CPU kernel "adamw_step_" over several steps with weight decay (float32; relative
// 1e-6, since FMA contraction may differ between the two translation units).
#include "core/ops/cuda/adamw_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/ops/optimizer.h"
#include "core/tensor/factory.h"

namespace tessel::cuda {
namespace {

TEST(AdamWMathTest, HostFormulaTracksCpuKernelOverSteps) {
  const int64_t n = 257;
  std::vector<float> p(n), m(n, 0.0f), v(n, 0.0f);
  for (int64_t i = 0; i < n; ++i) p[i] = std::sin(0.1f * i);
  Tensor tp = FromVector(p), tm = FromVector(m), tv = FromVector(v);
  AdamWHyper h{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  for (int64_t step = 1; step <= 4; ++step) {
    std::vector<float> g(n);
    for (int64_t i = 0; i < n; ++i) g[i] = std::cos(0.37f * i * step) * (i % 3 == 0 ? 1e-3f : 1.0f);
    h.step = step;
    AdamWStepInPlace(tp, FromVector(g), tm, tv, h);
    const AdamWScalars s = AdamWScalars::Make(h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, step);
    for (int64_t i = 0; i < n; ++i) AdamWUpdate(s, g[i], p[i], m[i], v[i]);
  }
  const std::vector<float> cp = tp.ToVector<float>(), cm = tm.ToVector<float>(), cv = tv.ToVector<float>();
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_NEAR(p[i], cp[i], 1e-6 * std::max(1.0f, std::abs(cp[i]))) << i;
    ASSERT_NEAR(m[i], cm[i], 1e-6 * std::max(1e-3f, std::abs(cm[i]))) << i;
    ASSERT_NEAR(v[i], cv[i], 1e-6 * std::max(1e-6f, std::abs(cv[i]))) << i;
  }
  EXPECT_NE(p[1], std::sin(0.1f));  // the update moved the parameter
}

}  // namespace
}  // namespace tessel::cuda
