// core/ops/autocast_test.cc — AutocastGuard (core/autograd/autocast.h) on the real ops: the products run
// on bf16 casts of their float32 inputs and equal the same graph written with explicit casts, bit for
// bit, forward and backward; losses go up to float32; cat takes the widest dtype; float64 stays; the
// backward and an activation-checkpointing rerun see the forward's state.
#include "core/autograd/autocast.h"

#include <gtest/gtest.h>

#include "core/autograd/checkpoint.h"
#include "core/autograd/engine.h"
#include "core/base/testing/expect_error.h"
#include "core/ops/concat.h"
#include "core/ops/elementwise.h"
#include "core/ops/loss.h"
#include "core/ops/matmul.h"
#include "core/ops/norm.h"
#include "core/ops/reduction.h"
#include "core/ops/unary.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"

namespace tessel {
namespace {

struct Net {
  Tensor w1, b1, w2;
  TensorList Params() const { return {w1, b1, w2}; }
};

Net MakeNet() {
  Generator gen(11);
  Net n{Randn({16, 8}, gen), Randn({16}, gen), Randn({5, 16}, gen)};
  for (Tensor* t : {&n.w1, &n.b1, &n.w2}) t->set_requires_grad(true);
  return n;
}

// The loss with the products on explicit bf16 casts and cross-entropy on float32 logits.
Tensor ExplicitLoss(const Net& n, const Tensor& x, const Tensor& y) {
  const DType bf = DType::kBFloat16;
  const Tensor h = Tanh(Linear(Cast(x, bf), Cast(n.w1, bf), Cast(n.b1, bf)));
  return CrossEntropy(Cast(Linear(h, Cast(n.w2, bf)), DType::kFloat32), y);
}
Tensor PlainLoss(const Net& n, const Tensor& x, const Tensor& y) {
  return CrossEntropy(Linear(Tanh(Linear(x, n.w1, n.b1)), n.w2), y);
}

TEST(AutocastTest, ProductsRunInBf16AndEqualExplicitCastsForwardAndBackward) {
  Generator gen(3);
  const Tensor x = Randn({4, 8}, gen);
  const Tensor y = FromVector<int64_t>({0, 4, 2, 1});
  Net a = MakeNet(), b = MakeNet();
  Tensor loss;
  {
    AutocastGuard bf16(true, DType::kBFloat16);
    const Tensor h = Tanh(Linear(x, a.w1, a.b1));
    EXPECT_EQ(h.dtype(), DType::kBFloat16);
    const Tensor logits = Linear(h, a.w2);
    EXPECT_EQ(logits.dtype(), DType::kBFloat16);
    loss = CrossEntropy(logits, y);
    EXPECT_EQ(loss.dtype(), DType::kFloat32);  // the loss's policy: float32
  }
  const Tensor want = ExplicitLoss(b, x, y);
  EXPECT_EQ(loss.item<double>(), want.item<double>());
  EXPECT_NE(loss.item<double>(), PlainLoss(b, x, y).item<double>());  // bf16 did change the value
  Backward(loss);
  Backward(want);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(a.Params()[i].grad().dtype(), DType::kFloat32);
    EXPECT_EQ(a.Params()[i].grad().ToDoubleVector(), b.Params()[i].grad().ToDoubleVector()) << "param " << i;
  }
}

TEST(AutocastTest, BackwardInsideTheRegionRunsAsOutsideIt) {
  Generator gen(4);
  const Tensor x = Randn({4, 8}, gen);
  const Tensor y = FromVector<int64_t>({1, 1, 3, 0});
  Net a = MakeNet(), b = MakeNet();
  {
    AutocastGuard bf16(true, DType::kBFloat16);
    Backward(CrossEntropy(Linear(Tanh(Linear(x, a.w1, a.b1)), a.w2), y));  // backward in the region
  }
  Backward(ExplicitLoss(b, x, y));
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(a.Params()[i].grad().ToDoubleVector(), b.Params()[i].grad().ToDoubleVector()) << "param " << i;
  }
}

TEST(AutocastTest, CheckpointRerunRestoresTheForwardsRegion) {
  Generator gen(5);
  const Tensor x = Randn({4, 8}, gen);
  const Tensor y = FromVector<int64_t>({2, 0, 3, 4});
  Net a = MakeNet(), b = MakeNet();
  Tensor loss;
  {
    AutocastGuard bf16(true, DType::kBFloat16);
    const Tensor h = autograd::Checkpoint(
        [&](const TensorList& in) { return TensorList{Tanh(Linear(in[0], a.w1, a.b1))}; }, {x})[0];
    loss = CrossEntropy(Linear(h, a.w2), y);
  }
  Backward(loss);  // the rerun happens here, outside the region
  Backward(ExplicitLoss(b, x, y));
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(a.Params()[i].grad().ToDoubleVector(), b.Params()[i].grad().ToDoubleVector()) << "param " << i;
  }
}

TEST(AutocastTest, WidestTypeForCatFloat64StaysAndDisabledRegionsNest) {
  Generator gen(6);
  const Tensor f32 = Randn({2, 3}, gen), bf = Cast(Randn({2, 3}, gen), DType::kBFloat16);
  const Tensor f64 = Randn({3, 2}, gen, DType::kFloat64);
  AutocastGuard bf16(true, DType::kBFloat16);
  EXPECT_EQ(Cat({bf, f32}, 0).dtype(), DType::kFloat32);
  EXPECT_EQ(Cat({bf, f32}, 0).ToDoubleVector(), Cat({Cast(bf, DType::kFloat32), f32}, 0).ToDoubleVector());
  EXPECT_EQ(Matmul(Randn({2, 3}, gen, DType::kFloat64), f64).dtype(), DType::kFloat64);  // not eligible
  EXPECT_EQ(Add(f32, f32).dtype(), DType::kFloat32);  // no policy: the op's own dtypes
  {
    AutocastGuard off(false, DType::kBFloat16);
    EXPECT_EQ(Matmul(f32, Randn({3, 2}, gen)).dtype(), DType::kFloat32);
    EXPECT_FALSE(AutocastEnabled());
  }
  EXPECT_TRUE(AutocastEnabled());
  {
    AutocastGuard fp16(true, DType::kFloat16);
    EXPECT_EQ(Matmul(f32, Randn({3, 2}, gen)).dtype(), DType::kFloat16);
  }
  EXPECT_EQ(AutocastDType(), DType::kBFloat16);
}

// torch's mixed-type norms: bf16 activations into float32 LayerNorm / RMSNorm parameters (a Linear's
// output under autocast) normalize in float32 and come back bf16; the parameters' gradients are float32.
TEST(AutocastTest, Bf16ActivationsIntoFloat32NormsNormalizeInFloat32) {
  Generator gen(8);
  const Tensor x = Cast(Randn({3, 8}, gen), DType::kBFloat16);
  Tensor w = Randn({8}, gen), b = Randn({8}, gen);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  const Tensor ln = LayerNorm(x, w, b, 1e-5);
  EXPECT_EQ(ln.dtype(), DType::kBFloat16);
  EXPECT_EQ(ln.ToDoubleVector(),
            Cast(LayerNorm(Cast(x, DType::kFloat32), w, b, 1e-5), DType::kBFloat16).ToDoubleVector());
  const Tensor rms = RmsNorm(x, w, 1e-6);
  EXPECT_EQ(rms.dtype(), DType::kBFloat16);
  EXPECT_EQ(rms.ToDoubleVector(), Cast(RmsNorm(Cast(x, DType::kFloat32), w, 1e-6), DType::kBFloat16).ToDoubleVector());
  Backward(Sum(Cast(Add(ln, rms), DType::kFloat32)));
  EXPECT_EQ(w.grad().dtype(), DType::kFloat32);
  EXPECT_EQ(b.grad().dtype(), DType::kFloat32);
  // A float32 x with bf16 parameters is not torch's mixed case: still an error naming the dtypes.
  testing::ExpectErrorContains([&] { LayerNorm(Randn({2, 8}, gen), Cast(w, DType::kBFloat16), Tensor(), 1e-5); },
                      ErrorCode::kInvalidArgument, "has dtype bfloat16 but x has float32");
}

}  // namespace
}  // namespace tessel
