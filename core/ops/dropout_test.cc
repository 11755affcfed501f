// Dropout: the mask against the documented counter formula evaluated here through random.h's public
// Philox4x32 (not the kernel's code path), its rate, gradients, torch's special cases, views, dtypes,
// thread counts, full-tensor blocks and activation checkpointing.
#include "core/ops/dropout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/autograd/checkpoint.h"
#include "core/autograd/engine.h"
#include "core/base/parallel.h"
#include "core/base/testing/expect_error.h"
#include "core/dispatch/dispatcher.h"
#include "core/ops/elementwise.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

// Whether the element at counter c is kept, from the formula in cuda/dropout_math.h, in double.
bool Kept(uint64_t seed, uint64_t c, double p) {
  const auto w = Philox4x32({static_cast<uint32_t>(c >> 2), static_cast<uint32_t>(c >> 34), 0x64726f70u, 0u},
                            {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return static_cast<double>(w[c & 3] >> 8) / 16777216.0 < 1.0 - p;
}

Tensor Ramp(const Shape& shape, DType dtype = DType::kFloat32) {
  std::vector<double> v(static_cast<size_t>(NumElements(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25 + static_cast<double>(i % 13) / 4.0;
  return Cast(FromVector<double>(v, shape), dtype);
}

TEST(DropoutTest, MaskIsTheCounterFormulaAndTheGeneratorAdvancesByNumel) {
  const double p = 0.3;
  const Tensor x = Ramp({7, 9});
  Generator gen(0x123456789abcdefull, 5);
  const Tensor y = Dropout(x, p, gen);
  EXPECT_EQ(gen.offset(), 5u + 63u);
  const std::vector<double> xv = x.ToDoubleVector(), yv = y.ToDoubleVector();
  int kept = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    const bool keep = Kept(0x123456789abcdefull, 5 + i, p);
    kept += keep;
    EXPECT_EQ(yv[i], keep ? static_cast<double>(static_cast<float>(xv[i]) * static_cast<float>(1.0 / (1.0 - p))) : 0.0)
        << i;
  }
  EXPECT_GT(kept, 30);  // 63 · 0.7 ≈ 44 expected; both outcomes occur
  EXPECT_LT(kept, 60);
}

TEST(DropoutTest, DropsAFractionPAndKeepsTheMean) {
  Generator gen(7);
  const int64_t n = 200000;
  const Tensor y = Dropout(Ones({n}), 0.25, gen);
  int64_t zeros = 0;
  double sum = 0;
  for (double v : y.ToDoubleVector()) zeros += v == 0.0, sum += v;
  // Binomial(n, 0.25): standard deviation ~194; 6 sigma.
  EXPECT_NEAR(static_cast<double>(zeros), 0.25 * n, 1200.0);
  EXPECT_NEAR(sum / n, 1.0, 0.01);
}

TEST(DropoutTest, GradientIsTheSameMaskTimesTheScale) {
  const double p = 0.5;
  Tensor x = Ramp({5, 8}, DType::kFloat64);
  x.set_requires_grad(true);
  Generator gen(3, 100);
  const Tensor g = Ramp({5, 8}, DType::kFloat64) * 3.0;
  Backward(Dropout(x, p, gen), g);
  const std::vector<double> gv = g.ToDoubleVector(), dx = x.grad().ToDoubleVector();
  for (size_t i = 0; i < gv.size(); ++i) EXPECT_EQ(dx[i], Kept(3, 100 + i, p) ? gv[i] * 2.0 : 0.0) << i;
}

TEST(DropoutTest, TorchSpecialCases) {
  const Tensor x = Ramp({4, 4});
  Generator gen(1, 10);
  for (const Tensor& same : {Dropout(x, 0.5, gen, /*train=*/false), Dropout(x, 0.0, gen), Dropout(Empty({0, 4}), 0.5, gen)}) {
    EXPECT_TRUE(same.impl() == x.impl() || same.numel() == 0);
  }
  EXPECT_EQ(gen.offset(), 10u);  // nothing drawn
  const Tensor nan = FromVector<float>({1.0f, std::numeric_limits<float>::quiet_NaN()}, {2});
  const std::vector<double> all = Dropout(nan, 1.0, gen).ToDoubleVector();
  EXPECT_EQ(all[0], 0.0);
  EXPECT_TRUE(std::isnan(all[1]));  // x · 0, as torch
  EXPECT_EQ(gen.offset(), 10u);
  for (double bad : {1.5, -0.1}) {
    testing::ExpectErrorContains([&] { Dropout(x, bad, gen); }, ErrorCode::kInvalidArgument,
                                 {"dropout probability has to be between 0 and 1, but got"});
  }
}

TEST(DropoutTest, ViewsDtypesAndThreadCountsDrawTheSameMask) {
  const Tensor base = Ramp({6, 40});
  Generator g1(9), g2(9);
  const Tensor view = Transpose(base, 0, 1);  // [40, 6], strided
  EXPECT_EQ(Dropout(view, 0.4, g1).ToDoubleVector(), Dropout(Contiguous(view), 0.4, g2).ToDoubleVector());
  for (DType dt : {DType::kFloat64, DType::kBFloat16}) {
    Generator a(9), b(9);
    const std::vector<double> ref = Dropout(base, 0.4, a).ToDoubleVector();
    const std::vector<double> other = Dropout(Cast(base, dt), 0.4, b).ToDoubleVector();
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_EQ(ref[i] == 0.0, other[i] == 0.0) << DTypeName(dt) << " " << i;
  }
  const Tensor big = Ramp({64, 1000});
  Generator one(4), two(4);
  std::vector<double> serial, parallel;
  {
    NumThreadsGuard t(1);
    serial = Dropout(big, 0.2, one).ToDoubleVector();
  }
  {
    NumThreadsGuard t(2);
    parallel = Dropout(big, 0.2, two).ToDoubleVector();
  }
  EXPECT_EQ(serial, parallel);
}

TEST(DropoutTest, ABlockDrawsItsPartOfTheFullTensorsMask) {
  const Tensor full = Ramp({6, 10});
  const Attrs attrs = Attrs().Set("p", 0.5).Set("seed", 77).Set("offset", 3);
  const std::vector<double> whole = Dispatch(GetOp("dropout"), TensorList{full}, attrs)[0].ToDoubleVector();
  const Tensor block = Contiguous(Narrow(Narrow(full, 0, 2, 3), 1, 4, 5));  // rows 2..4, columns 4..8
  Attrs at = attrs;
  at.Set("full_shape", std::vector<int64_t>{6, 10}).Set("block_offset", std::vector<int64_t>{2, 4});
  const std::vector<double> part = Dispatch(GetOp("dropout"), TensorList{block}, at)[0].ToDoubleVector();
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t c = 0; c < 5; ++c) EXPECT_EQ(part[r * 5 + c], whole[(r + 2) * 10 + c + 4]) << r << "," << c;
  }
  at.Set("block_offset", std::vector<int64_t>{4, 4});
  testing::ExpectErrorContains([&] { Dispatch(GetOp("dropout"), TensorList{block}, at); }, ErrorCode::kInvalidArgument,
                               {"dropout: block [3, 5] at [4, 4] does not fit in the full shape [6, 10]"});
}

TEST(DropoutTest, CheckpointingReplaysTheMaskWhenTheGeneratorIsListed) {
  const Tensor w = Ramp({4, 6}, DType::kFloat64);
  auto run = [&](bool checkpoint) {
    Tensor x = Ramp({4, 6}, DType::kFloat64) * 0.5;
    x.set_requires_grad(true);
    Generator gen(21);
    // mul saves dropout's output: a recompute that drew a new mask would change x's gradient.
    auto fn = [&](const TensorList& in) -> TensorList { return {Mul(Dropout(in[0], 0.5, gen), Dropout(in[0], 0.5, gen))}; };
    Tensor y = checkpoint ? autograd::Checkpoint(fn, {x}, {.generators = {&gen}})[0] : fn({x})[0];
    Backward(y, w);
    return std::make_pair(x.grad().ToDoubleVector(), gen.offset());
  };
  const auto plain = run(false), checkpointed = run(true);
  EXPECT_EQ(checkpointed.first, plain.first);
  EXPECT_EQ(checkpointed.second, plain.second);  // the generator ends where the forward left it
  int nonzero = 0;
  for (double v : plain.first) nonzero += v != 0.0;
  EXPECT_GT(nonzero, 0);
  EXPECT_LT(nonzero, 24);
}

}  // namespace
}  // namespace tessel
