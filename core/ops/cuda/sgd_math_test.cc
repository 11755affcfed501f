// core/ops/cuda/sgd_math_test.cc — the CUDA SGD element update (cuda/sgd_math.h), run on the host over
// three steps, equals the CPU "sgd_step_" kernel bit for bit in float32 and bfloat16 (parameter and
// momentum buffer): plain SGD, weight decay, momentum with dampening (first step initializing the
// buffer), and nesterov.
#include "core/ops/cuda/sgd_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/ops/cuda/bf16.h"
#include "core/ops/optimizer.h"
#include "core/tensor/factory.h"

namespace tessel::cuda {
namespace {

float Round(float v, DType dtype) { return dtype == DType::kFloat32 ? v : Bf16ToFloat(FloatToBf16(v)); }

TEST(SgdMathTest, ThreeStepsMatchTheCpuKernelBitwise) {
  struct Config {
    double momentum, dampening, wd;
    bool nesterov;
  };
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (const Config& c : {Config{0, 0, 0, false}, Config{0, 0, 0.1, false}, Config{0.9, 0.2, 0.01, false},
                            Config{0.9, 0, 0, true}}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " momentum " + std::to_string(c.momentum) +
                   (c.nesterov ? " nesterov" : ""));
      std::vector<double> p0(37);
      for (size_t i = 0; i < p0.size(); ++i) p0[i] = std::sin(0.37 * i);
      Tensor p = FromDoubles(p0, std::vector<int64_t>{37}, dtype);
      Tensor buf = c.momentum != 0 ? Zeros({37}, dtype) : Tensor();
      std::vector<float> hp, hb(37, 0.0f);
      for (double v : p.ToDoubleVector()) hp.push_back(static_cast<float>(v));
      for (int step = 0; step < 3; ++step) {
        std::vector<double> gd(37);
        for (size_t i = 0; i < gd.size(); ++i) gd[i] = std::cos(0.3 * i * (step + 1));
        const Tensor g = FromDoubles(gd, std::vector<int64_t>{37}, dtype);
        SgdStepInPlace(p, g, buf, 0.05, c.momentum, c.dampening, c.wd, c.nesterov, step == 0);
        const SgdScalars s = SgdScalars::Make(0.05, c.momentum, c.dampening, c.wd, c.nesterov, step == 0);
        const std::vector<double> gs = g.ToDoubleVector();
        for (size_t i = 0; i < hp.size(); ++i) {
          float b = hb[i];
          if (dtype == DType::kFloat32) {
            SgdUpdate<float>(s, static_cast<float>(gs[i]), hp[i], c.momentum != 0 ? &b : nullptr);
          } else {
            SgdUpdate<uint16_t>(s, static_cast<float>(gs[i]), hp[i], c.momentum != 0 ? &b : nullptr);
          }
          hp[i] = Round(hp[i], dtype);
          hb[i] = Round(b, dtype);
        }
      }
      const std::vector<double> want = p.ToDoubleVector();
      for (size_t i = 0; i < hp.size(); ++i) EXPECT_EQ(static_cast<double>(hp[i]), want[i]) << i;
      if (buf.defined()) {
        const std::vector<double> wb = buf.ToDoubleVector();
        for (size_t i = 0; i < hb.size(); ++i) EXPECT_EQ(static_cast<double>(hb[i]), wb[i]) << "buffer " << i;
      }
    }
  }
}

}  // namespace
}  // namespace tessel::cuda
