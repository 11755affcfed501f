#include "core/optim/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd/call.h"
#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/ops/matmul.h"
#include "core/ops/reduction.h"
#include "core/ops/view.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/base/testing/expect_error.h"
#include "core/dispatch/op.h"
#include "core/nn/layers.h"
#include "core/ops/elementwise.h"
#include "core/ops/optimizer.h"
#include "core/ops/unary.h"
#include "core/tensor/random.h"
#include "core/tensor/tensor_impl.h"
#include "core/tensor/factory.h"

namespace tessel::optim {
namespace {

nn::StateDict OneParam(std::vector<double> values, std::vector<double> grad) {
  Tensor p = FromVector<double>(values).set_requires_grad(true);
  p.set_grad(FromVector<double>(grad));
  return {{"w", p}};
}

TEST(OptimizerTest, SgdMomentumNesterovAndWeightDecayFollowPyTorch) {
  for (bool nesterov : {false, true}) {
    SCOPED_TRACE(nesterov);
    auto params = OneParam({1.0, -2.0}, {0.5, 0.25});
    SGD opt(params, {.lr = 0.1, .momentum = 0.9, .dampening = 0.0, .weight_decay = 0.01, .nesterov = nesterov});
    std::vector<double> p{1.0, -2.0}, buf{0, 0};
    const std::vector<double> g{0.5, 0.25};
    for (int step = 0; step < 3; ++step) {
      opt.Step();
      for (int i = 0; i < 2; ++i) {
        double d = g[i] + 0.01 * p[i];
        buf[i] = step == 0 ? d : 0.9 * buf[i] + d;
        p[i] -= 0.1 * (nesterov ? d + 0.9 * buf[i] : buf[i]);
      }
      const auto got = params[0].second.ToDoubleVector();
      EXPECT_NEAR(got[0], p[0], 1e-14);
      EXPECT_NEAR(got[1], p[1], 1e-14);
    }
  }
}

TEST(OptimizerTest, AdamWMatchesTheReferenceUpdate) {
  auto params = OneParam({1.0, -2.0, 0.5}, {0.5, -0.25, 0.0});
  AdamW opt(params, {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1});
  std::vector<double> p{1.0, -2.0, 0.5}, m(3, 0), v(3, 0);
  const std::vector<double> g{0.5, -0.25, 0.0};
  for (int t = 1; t <= 3; ++t) {
    opt.Step();
    for (int i = 0; i < 3; ++i) {
      p[i] *= 1 - 0.01 * 0.1;
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.99 * v[i] + 0.01 * g[i] * g[i];
      const double mhat = m[i] / (1 - std::pow(0.9, t));
      const double vhat = v[i] / (1 - std::pow(0.99, t));
      p[i] -= 0.01 * mhat / (std::sqrt(vhat) + 1e-8);
    }
    const auto got = params[0].second.ToDoubleVector();
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], p[i], 1e-12) << "step " << t << " element " << i;
  }
}

// AMSGrad: the gradients shrink, so exp_avg_sq falls below its running maximum, which the denominator keeps.
TEST(OptimizerTest, AdamWAmsgradKeepsTheLargestSecondMoment) {
  auto params = OneParam({1.0, -2.0, 0.5}, {0, 0, 0});
  AdamW opt(params, {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.9, .eps = 1e-8, .weight_decay = 0.1, .amsgrad = true});
  EXPECT_EQ(opt.StateNames(), (std::vector<std::string>{"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}));
  std::vector<double> p{1.0, -2.0, 0.5}, m(3, 0), v(3, 0), v_max(3, 0);
  bool fell = false;
  for (int t = 1; t <= 4; ++t) {
    const std::vector<double> g{2.0 / t, -1.0 / (t * t), 0.25};
    params[0].second.set_grad(FromVector<double>(g));
    opt.Step();
    for (int i = 0; i < 3; ++i) {
      p[i] *= 1 - 0.01 * 0.1;
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.9 * v[i] + 0.1 * g[i] * g[i];
      fell = fell || v[i] < v_max[i];
      v_max[i] = std::max(v_max[i], v[i]);
      p[i] -= 0.01 / (1 - std::pow(0.9, t)) * m[i] / (std::sqrt(v_max[i]) / std::sqrt(1 - std::pow(0.9, t)) + 1e-8);
    }
    const auto got = params[0].second.ToDoubleVector();
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], p[i], 1e-12) << "step " << t << " element " << i;
  }
  EXPECT_TRUE(fell);  // the maximum mattered
  const OptimizerStateDict sd = opt.GetStateDict();
  EXPECT_EQ(sd.state.at("w").count("max_exp_avg_sq"), 1u);
  EXPECT_EQ(sd.hyper.at("amsgrad"), 1.0);
}

// The multi-tensor update is element for element the per-parameter one: groups of sizes that cut
// ParallelFor's chunks mid-tensor, each at its own step, in both float dtypes.
TEST(OptimizerTest, ForeachAdamWEqualsThePerParameterUpdateBitwise) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    Generator gen(5);
    const NumThreadsGuard two(2);  // chunks then start inside tensors and span several
    const std::vector<int64_t> sizes{1, 17, 40000, 0, 3, 20000};
    const std::vector<int64_t> steps{1, 4, 2, 1, 7, 3};
    TensorList p1, p2, g, m1, m2, v1, v2;
    for (int64_t n : sizes) {
      p1.push_back(Randn({n}, gen, dtype));
      p2.push_back(Clone(p1.back()));
      g.push_back(Randn({n}, gen, dtype));
      m1.push_back(Randn({n}, gen, dtype));
      m2.push_back(Clone(m1.back()));
      v1.push_back(Abs(Randn({n}, gen, dtype)));
      v2.push_back(Clone(v1.back()));
    }
    const AdamWHyper h{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1};
    const std::vector<double> before = p1[2].ToDoubleVector();
    AdamWStepForeachInPlace(p1, g, m1, v1, steps, h);
    for (size_t i = 0; i < sizes.size(); ++i) {
      AdamWHyper hi = h;
      hi.step = steps[i];
      AdamWStepInPlace(p2[i], g[i], m2[i], v2[i], hi);
      EXPECT_EQ(p1[i].ToDoubleVector(), p2[i].ToDoubleVector()) << "group " << i;
      EXPECT_EQ(m1[i].ToDoubleVector(), m2[i].ToDoubleVector()) << "group " << i;
      EXPECT_EQ(v1[i].ToDoubleVector(), v2[i].ToDoubleVector()) << "group " << i;
    }
    EXPECT_NE(p1[2].ToDoubleVector(), before);  // the update happened
  }
}

TEST(OptimizerTest, ForeachAdamWRejectsRaggedListsAndAMismatchedGradient) {
  Generator gen(1);
  const Tensor p = Randn({4}, gen), g = Randn({4}, gen), m = Zeros({4}), v = Zeros({4});
  const std::vector<int64_t> one{1};
  const TensorList ps{p}, gs{g}, none{};
  testing::ExpectErrorContains([&] { AdamWStepForeachInPlace(ps, gs, none, none, one, AdamWHyper{}); },
                               ErrorCode::kInvalidArgument, "1 params but 1 grads, 0 exp_avgs");
  const TensorList g64{Randn({4}, gen, DType::kFloat64)}, ms{m}, vs{v};
  testing::ExpectErrorContains([&] { AdamWStepForeachInPlace(ps, g64, ms, vs, one, AdamWHyper{}); },
                               ErrorCode::kInvalidArgument, "gradient dtype float64 must match the parameter dtype float32");
}

// One pass writes every group at once: a parameter listed twice would race, so it is refused and nothing
// is written; a parameter that requires grad is refused outside NoGradGuard, whichever position it has.
TEST(OptimizerTest, ForeachAdamWRefusesAParameterListedTwiceAndGradRequiringParameters) {
  Generator gen(2);
  const Tensor p = Randn({4}, gen), g = Randn({4}, gen);
  const TensorList ps{p, p}, gs{g, g}, ms{Zeros({4}), Zeros({4})}, vs{Zeros({4}), Zeros({4})};
  const std::vector<double> before = p.ToDoubleVector();
  const std::vector<int64_t> steps{1, 1};
  testing::ExpectErrorContains([&] { AdamWStepForeachInPlace(ps, gs, ms, vs, steps, AdamWHyper{}); },
                               ErrorCode::kInvalidArgument, "groups 0 and 1 write overlapping memory");
  EXPECT_EQ(p.ToDoubleVector(), before);
  // Two overlapping views of one buffer ([0, 4) and [2, 6)) are refused as well.
  const Tensor buffer = Randn({6}, gen);
  const TensorList views{MakeView(buffer, {4}, {1}, 0), MakeView(buffer, {4}, {1}, 2)};
  testing::ExpectErrorContains([&] { AdamWStepForeachInPlace(views, gs, ms, vs, steps, AdamWHyper{}); },
                               ErrorCode::kInvalidArgument, "groups 0 and 1 write overlapping memory");
  // A bad later group writes nothing in the earlier ones either (every check runs before any write).
  const Tensor p0 = Randn({4}, gen);
  const std::vector<double> p0_before = p0.ToDoubleVector();
  const TensorList bad_second{p0, Randn({5}, gen)}, g_bad{g, Randn({4}, gen)};
  const TensorList m_bad{Zeros({4}), Zeros({5})}, v_bad{Zeros({4}), Zeros({5})};
  testing::ExpectErrorContains([&] { AdamWStepForeachInPlace(bad_second, g_bad, m_bad, v_bad, steps, AdamWHyper{}); },
                               ErrorCode::kInvalidArgument, "adamw_step_: tensor 1 has shape [4]");
  EXPECT_EQ(p0.ToDoubleVector(), p0_before);
  Tensor leaf = Randn({4}, gen);
  leaf.set_requires_grad(true);
  const TensorList second_requires{Randn({4}, gen), leaf};
  testing::ExpectErrorContains(
      [&] { AdamWStepForeachInPlace(second_requires, gs, ms, vs, steps, AdamWHyper{}); },
      ErrorCode::kFailedPrecondition, "adamw_step_foreach_: in-place update of a parameter of shape [4] that requires grad");
}

TEST(OptimizerTest, StateDictRoundTripContinuesIdentically) {
  auto pa = OneParam({1.0, 2.0}, {0.3, -0.7});
  AdamW a(pa, {.lr = 0.05});
  a.Step();
  a.Step();
  auto pb = OneParam(pa[0].second.ToDoubleVector(), {0.3, -0.7});
  AdamW b(pb, {.lr = 0.5});
  b.LoadStateDict(a.GetStateDict());
  EXPECT_EQ(b.lr(), 0.05);
  a.Step();
  b.Step();
  EXPECT_EQ(pa[0].second.ToDoubleVector(), pb[0].second.ToDoubleVector());
  OptimizerStateDict bad = a.GetStateDict();
  bad.state["nope"] = bad.state["w"];
  try {
    b.LoadStateDict(bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown parameter 'nope'"), std::string::npos) << e.what();
  }
}

// One parameter's state replaced alone (torch's `optimizer.state[p] = entry`): its next step continues from the
// written moments and count, as a whole state dict loaded with that entry would; an empty entry starts it over;
// the other parameter's buffers keep their identity; a wrong shape or name changes nothing.
TEST(OptimizerTest, LoadParamStateReplacesOneParametersStateAlone) {
  auto two = [] {
    auto ps = OneParam({1.0, 2.0}, {0.3, -0.7});
    auto q = OneParam({-1.0}, {0.5});
    ps.emplace_back("v", q[0].second);
    return ps;
  };
  auto pa = two(), pb = two();
  AdamW a(pa, {.lr = 0.05}), b(pb, {.lr = 0.05});
  a.Step();
  b.Step();
  OptimizerStateDict written = b.GetStateDict();
  written.state["w"]["exp_avg"] = FromVector<double>({0.5, -0.25});
  written.steps["w"] = 7;
  const Tensor v_buffer = a.ParamState("v").first.at("exp_avg");
  const Tensor w_sq_buffer = a.ParamState("w").first.at("exp_avg_sq");  // written below: in place
  a.LoadParamState("w", {{"exp_avg", FromVector<double>({0.5, -0.25})},
                         {"exp_avg_sq", written.state["w"]["exp_avg_sq"]}}, 7);
  b.LoadStateDict(written);
  EXPECT_EQ(a.ParamState("w").second, 7);
  EXPECT_TRUE(a.ParamState("v").first.at("exp_avg").is_same(v_buffer));
  EXPECT_TRUE(a.ParamState("w").first.at("exp_avg_sq").is_same(w_sq_buffer));
  a.Step();
  b.Step();
  EXPECT_EQ(pa[0].second.ToDoubleVector(), pb[0].second.ToDoubleVector());
  EXPECT_EQ(pa[1].second.ToDoubleVector(), pb[1].second.ToDoubleVector());
  a.LoadParamState("w", {}, 0);
  EXPECT_TRUE(a.ParamState("w").first.empty());
  EXPECT_EQ(a.ParamState("w").second, 0);
  a.Step();
  EXPECT_EQ(a.ParamState("w").second, 1);
  testing::ExpectErrorContains([&] { a.LoadParamState("w", {{"exp_avg", FromVector<double>({1.0})}}, 3); },
                               ErrorCode::kInvalidArgument,
                               "state 'exp_avg' of 'w' has shape [1] but the parameter has shape [2]");
  EXPECT_EQ(a.ParamState("w").second, 1);
  testing::ExpectErrorContains([&] { a.LoadParamState("nope", {}, 0); }, ErrorCode::kInvalidArgument,
                               "optimizer state write: state for unknown parameter 'nope'");
}

TEST(OptimizerTest, ClipGradNormScalesToTheGlobalNorm) {
  auto p1 = OneParam({0, 0}, {3, 0});
  auto p2 = OneParam({0}, {4});
  const double norm = ClipGradNorm({p1[0].second, p2[0].second}, 1.0);
  EXPECT_DOUBLE_EQ(norm, 5.0);
  EXPECT_NEAR(p1[0].second.grad().ToDoubleVector()[0], 0.6, 1e-6);
  EXPECT_NEAR(p2[0].second.grad().ToDoubleVector()[0], 0.8, 1e-6);
  // Below max_norm nothing changes: the norm of the already-clipped [0.8] is returned, grads kept.
  EXPECT_NEAR(ClipGradNorm({p2[0].second}, 10.0), 0.8, 1e-6);
  EXPECT_NEAR(p2[0].second.grad().ToDoubleVector()[0], 0.8, 1e-6);
}

// float16 gradients: the sum of squares is taken in float32 (4096 gradients of 300 overflowed float16 to
// inf and every gradient was zeroed; torch gives 19200). A NaN gradient makes every gradient NaN, as torch's
// clamp(coef, max=1) does, instead of leaving the finite ones unclipped.
TEST(OptimizerTest, ClipGradNormOfHalfGradientsAndNaNFollowTorch) {
  Tensor p = Zeros({4096}, DType::kFloat16).set_requires_grad(true);
  p.set_grad(Full({4096}, 300.0, DType::kFloat16));
  EXPECT_NEAR(ClipGradNorm({p}, 1.0), 19200.0, 1e-3);
  EXPECT_NEAR(p.grad().ToDoubleVector()[0], 300.0 / 19200.0, 1e-5);
  auto a = OneParam({0, 0}, {NAN, 5});
  auto b = OneParam({0, 0}, {3, 4});
  EXPECT_TRUE(std::isnan(ClipGradNorm({a[0].second, b[0].second}, 1.0)));
  for (double g : b[0].second.grad().ToDoubleVector()) EXPECT_TRUE(std::isnan(g));
}

// .grad carries the parameter's dtype: assigning another is an error (torch's), a backward seed or an
// incoming gradient of another dtype is cast, and SGD checks the dtypes it reads (a float64 .grad stepped a
// float32 parameter with garbage, a float16 one read past its end).
TEST(OptimizerTest, GradientsOfAnotherDtypeAreCastOrSteppedAsTorchNeverMisread) {
  Tensor p = Zeros({4}).set_requires_grad(true);
  ::tessel::testing::ExpectErrorContains([&] { p.set_grad(Full({4}, 0.5, DType::kFloat64)); },
                                         ErrorCode::kInvalidArgument,
                                         "set_grad: gradient dtype float64 does not match the tensor's float32");
  Backward(MulScalar(p, 2.0), Ones({4}, DType::kBFloat16));
  EXPECT_EQ(p.grad().dtype(), DType::kFloat32);
  SGD sgd({{"p", p}}, {.lr = 1.0});
  sgd.Step();
  EXPECT_EQ(p.ToDoubleVector(), std::vector<double>(4, -2.0));
  NoGradGuard no_grad;
  // torch's param.add_(grad, alpha=-lr) with a float64 grad: computed in float64, rounded once to float32 (the
  // fused kernel read every operand as the parameter's dtype: it refuses, SgdStepInPlace steps it as torch).
  SgdStepInPlace(p, Full({4}, 1.0 / 3.0, DType::kFloat64), Tensor(), 1.0, 0.0, 0.0, 0.0, false, true);
  EXPECT_EQ(p.ToDoubleVector(), std::vector<double>(4, static_cast<float>(-2.0 - 1.0 / 3.0)));
  // A float64 parameter whose momentum buffer stayed float32 (a model cast with .double() after a step):
  // buf = f32(f32(buf · 0.9) + 0.8 · g) with the add in float64; p -= 0.5 · buf in float64.
  Tensor q = Full({3}, 1.0, DType::kFloat64);
  Tensor buf = Full({3}, 0.7, DType::kFloat32);
  SgdStepInPlace(q, Full({3}, 0.1, DType::kFloat64), buf, 0.5, 0.9, 0.2, 0.0, false, false);
  const double scaled = static_cast<float>(static_cast<float>(0.7) * static_cast<float>(0.9));
  const double want_buf = static_cast<float>(std::fma(0.8, 0.1, scaled));
  EXPECT_EQ(buf.ToDoubleVector(), std::vector<double>(3, want_buf));
  EXPECT_EQ(q.ToDoubleVector(), std::vector<double>(3, std::fma(-0.5, want_buf, 1.0)));
  // The kernel itself still refuses operands it would misread.
  ::tessel::testing::ExpectErrorContains(
      [&] {
        autograd::CallOp(*FindOp("sgd_step_"), {p, Full({4}, 1.0, DType::kFloat64), Tensor()},
                         Attrs().Set("lr", 1.0).Set("momentum", 0.0).Set("dampening", 0.0).Set("weight_decay", 0.0)
                             .Set("nesterov", false).Set("first_step", true));
      },
      ErrorCode::kInvalidArgument, "sgd_step_: gradient dtype float64 differs from the parameter's float32");
}

// A gradient that arrives non-contiguous (through w.t()) is stored contiguous, as torch's layout contract
// does, so the optimizers (which need contiguous gradients) step it.
TEST(OptimizerTest, AGradientThroughATransposeIsStoredContiguousAndSteps) {
  Generator gen(4);
  Tensor w = Randn({3, 4}, gen).set_requires_grad(true);
  const Tensor x = Randn({2, 4}, gen);
  Backward(Sum(Matmul(x, Transpose(w, 0, 1))));
  EXPECT_TRUE(w.grad().is_contiguous());
  AdamW opt({{"w", w}}, {.lr = 0.1});
  opt.Step();  // used to raise "tensor 1 must be contiguous"
  EXPECT_EQ(w.ToDoubleVector().size(), 12u);
}

TEST(OptimizerTest, WarmupCosineScheduleHitsItsLandmarks) {
  WarmupCosineSchedule s{.max_lr = 1.0, .min_lr = 0.1, .warmup_steps = 10, .total_steps = 110};
  EXPECT_DOUBLE_EQ(s.LrAt(0), 0.1);
  EXPECT_DOUBLE_EQ(s.LrAt(9), 1.0);
  EXPECT_DOUBLE_EQ(s.LrAt(10), 1.0);
  EXPECT_NEAR(s.LrAt(60), 0.55, 1e-12);
  EXPECT_DOUBLE_EQ(s.LrAt(110), 0.1);
  EXPECT_DOUBLE_EQ(s.LrAt(500), 0.1);
}

using testing::ExpectErrorContains;

// torch.optim.RMSprop's update written out per element (torch/optim/rmsprop.py's single-tensor path).
TEST(OptimizerTest, RmspropPlainCenteredAndMomentumFollowPyTorch) {
  for (const auto& [centered, momentum] : {std::pair{false, 0.0}, std::pair{true, 0.0}, std::pair{false, 0.9},
                                           std::pair{true, 0.5}}) {
    SCOPED_TRACE(Str("centered ", centered, " momentum ", momentum));
    auto params = OneParam({1.0, -2.0, 0.5}, {0.5, -0.25, 0.0});
    RMSprop opt(params, {.lr = 0.01, .alpha = 0.9, .eps = 1e-6, .weight_decay = 0.1, .momentum = momentum,
                         .centered = centered});
    std::vector<double> p{1.0, -2.0, 0.5}, sq(3, 0), ga(3, 0), buf(3, 0);
    const std::vector<double> grad{0.5, -0.25, 0.0};
    for (int t = 1; t <= 3; ++t) {
      opt.Step();
      for (int i = 0; i < 3; ++i) {
        const double g = grad[i] + 0.1 * p[i];
        sq[i] = 0.9 * sq[i] + 0.1 * g * g;
        double avg = sq[i];
        if (centered) {
          ga[i] = 0.9 * ga[i] + 0.1 * g;
          avg -= ga[i] * ga[i];
        }
        const double step = g / (std::sqrt(avg) + 1e-6);
        buf[i] = momentum * buf[i] + step;
        p[i] -= 0.01 * (momentum > 0 ? buf[i] : step);
      }
      const auto got = params[0].second.ToDoubleVector();
      for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], p[i], 1e-14) << "step " << t << " element " << i;
    }
    std::vector<std::string> want{"square_avg"};
    if (momentum > 0) want.push_back("momentum_buffer");
    if (centered) want.push_back("grad_avg");
    EXPECT_EQ(opt.StateNames(), want);
    EXPECT_EQ(opt.GetStateDict().state.at("w").size(), want.size());
  }
}

TEST(OptimizerTest, AdagradWithLrDecayAndInitialAccumulatorFollowsPyTorch) {
  auto params = OneParam({1.0, -2.0}, {0.5, -0.25});
  Adagrad opt(params, {.lr = 0.1, .lr_decay = 0.5, .weight_decay = 0.01, .initial_accumulator_value = 0.2,
                       .eps = 1e-10});
  std::vector<double> p{1.0, -2.0}, sum(2, 0.2);
  const std::vector<double> grad{0.5, -0.25};
  for (int t = 1; t <= 3; ++t) {
    opt.Step();
    const double clr = 0.1 / (1 + (t - 1) * 0.5);
    for (int i = 0; i < 2; ++i) {
      const double g = grad[i] + 0.01 * p[i];
      sum[i] += g * g;
      p[i] -= clr * g / (std::sqrt(sum[i]) + 1e-10);
    }
    const auto got = params[0].second.ToDoubleVector();
    for (int i = 0; i < 2; ++i) EXPECT_NEAR(got[i], p[i], 1e-14) << "step " << t << " element " << i;
  }
  EXPECT_EQ(opt.GetStateDict().steps.at("w"), 3);
  const auto sd = opt.GetStateDict();
  const auto got_sum = sd.state.at("w").at("sum").ToDoubleVector();
  EXPECT_NEAR(got_sum[0], sum[0], 1e-14);
  // A fresh Adagrad loaded from that state dict continues exactly (the accumulator is not re-initialized).
  auto fresh_params = OneParam(params[0].second.ToDoubleVector(), {0.5, -0.25});
  Adagrad fresh(fresh_params, {.lr = 1.0, .initial_accumulator_value = 0.2});
  fresh.LoadStateDict(sd);
  fresh.Step();
  opt.Step();
  EXPECT_EQ(fresh_params[0].second.ToDoubleVector(), params[0].second.ToDoubleVector());
}

TEST(OptimizerOptionsTest, RmspropAndAdagradRejectWhatTorchRejectsWithTorchsWording) {
  auto rms = [](RMSpropOptions o) { return [o] { RMSprop opt(OneParam({1.0}, {1.0}), o); }; };
  ExpectErrorContains(rms({.lr = -1}), ErrorCode::kInvalidArgument, "Invalid learning rate: -1");
  ExpectErrorContains(rms({.alpha = -0.5}), ErrorCode::kInvalidArgument, "Invalid alpha value: -0.5");
  ExpectErrorContains(rms({.eps = -1}), ErrorCode::kInvalidArgument, "Invalid epsilon value: -1");
  ExpectErrorContains(rms({.momentum = -1}), ErrorCode::kInvalidArgument, "Invalid momentum value: -1");
  auto ada = [](AdagradOptions o) { return [o] { Adagrad opt(OneParam({1.0}, {1.0}), o); }; };
  ExpectErrorContains(ada({.lr_decay = -1}), ErrorCode::kInvalidArgument, "Invalid lr_decay value: -1");
  ExpectErrorContains(ada({.initial_accumulator_value = -1}), ErrorCode::kInvalidArgument,
                      "Invalid initial_accumulator_value value: -1");
  ExpectErrorContains(ada({.weight_decay = -1}), ErrorCode::kInvalidArgument, "Invalid weight_decay value: -1");
}

TEST(OptimizerOptionsTest, AdamWRejectsWhatTorchRejectsWithTorchsWording) {
  const double nan = std::nan("");
  auto make = [](AdamWOptions o) { return [o] { AdamW opt(OneParam({1.0}, {1.0}), o); }; };
  ExpectErrorContains(make({.lr = -1}), ErrorCode::kInvalidArgument, "Invalid learning rate: -1");
  ExpectErrorContains(make({.lr = nan}), ErrorCode::kInvalidArgument, "Invalid learning rate: nan");
  ExpectErrorContains(make({.beta1 = 2}), ErrorCode::kInvalidArgument, "Invalid beta parameter at index 0: 2");
  ExpectErrorContains(make({.beta1 = nan}), ErrorCode::kInvalidArgument, "Invalid beta parameter at index 0: nan");
  ExpectErrorContains(make({.beta2 = 1.0}), ErrorCode::kInvalidArgument, "Invalid beta parameter at index 1: 1");
  ExpectErrorContains(make({.eps = -1e-8}), ErrorCode::kInvalidArgument, "Invalid epsilon value: -1e-08");
  ExpectErrorContains(make({.weight_decay = -0.1}), ErrorCode::kInvalidArgument, "Invalid weight_decay value: -0.1");
  // Boundary values torch accepts.
  AdamW ok(OneParam({1.0}, {1.0}), {.lr = 0, .beta1 = 0, .beta2 = 0, .eps = 0, .weight_decay = 0});
  // A learning rate set later is checked when it is used.
  ok.set_lr(nan);
  ExpectErrorContains([&] { ok.Step(); }, ErrorCode::kInvalidArgument, "Invalid learning rate: nan");
}

TEST(OptimizerOptionsTest, SgdRejectsWhatTorchRejectsWithTorchsWording) {
  auto make = [](SGDOptions o) { return [o] { SGD opt(OneParam({1.0}, {1.0}), o); }; };
  ExpectErrorContains(make({.lr = -0.5}), ErrorCode::kInvalidArgument, "Invalid learning rate: -0.5");
  ExpectErrorContains(make({.momentum = -1}), ErrorCode::kInvalidArgument, "Invalid momentum value: -1");
  ExpectErrorContains(make({.weight_decay = std::nan("")}), ErrorCode::kInvalidArgument,
                      "Invalid weight_decay value: nan");
  ExpectErrorContains(make({.momentum = 0, .nesterov = true}), ErrorCode::kInvalidArgument,
                      "Nesterov momentum requires a momentum and zero dampening");
}

TEST(OptimizerSwapTest, StepRaisesNamingParametersTheModuleNoLongerHolds) {
  Generator gen(0);
  nn::Linear lin(3, 2, /*bias=*/true, gen);
  AdamW adam(lin.NamedParameters(), {});
  SGD sgd(lin.NamedParameters(), {.lr = 0.1});
  // What fully_shard / parallelize_module do: the module now holds a different handle for "weight".
  lin.SetParameter("weight", Detach(lin.Param("weight")).set_requires_grad(true));
  for (const auto& [fqn, p] : adam.params()) p.set_grad(OnesLike(p));
  ExpectErrorContains([&] { adam.Step(); }, ErrorCode::kFailedPrecondition,
                      {"AdamW.step: 1 of its 2 parameters are no longer the module's ('weight')", "afterwards"});
  ExpectErrorContains([&] { sgd.Step(); }, ErrorCode::kFailedPrecondition, "SGD.step: 1 of its 2");
  // An optimizer over the module's current parameters steps, and its update reaches the module.
  SGD fresh(lin.NamedParameters(), {.lr = 0.5});
  const double before = lin.Param("weight").ToDoubleVector()[0];
  lin.Param("weight").set_grad(OnesLike(lin.Param("weight")));
  fresh.Step();
  EXPECT_FLOAT_EQ(lin.Param("weight").ToDoubleVector()[0], static_cast<float>(before - 0.5));  // float32 step
  // Installing the original handle again makes it current again.
  lin.SetParameter("weight", adam.params()[0].second);
  adam.Step();
}

// torch's untying (out.weight = nn.Parameter(tok.weight.detach().clone())): the tied tensor replaced in one module
// is still the other's, so an optimizer over it steps; it is stale only once no module holds it.
TEST(OptimizerSwapTest, ATiedWeightReplacedInOneModuleIsStillTheOthers) {
  Generator gen(0);
  nn::Linear a(3, 3, /*bias=*/false, gen), b(3, 3, /*bias=*/false, gen);
  const Tensor tied = a.Param("weight");
  b.SetParameter("weight", tied);                                              // tie
  b.SetParameter("weight", Detach(Clone(tied)).set_requires_grad(true));       // untie
  nn::StateDict params = a.NamedParameters();
  params.emplace_back("b.weight", b.Param("weight"));
  SGD sgd(params, {.lr = 0.5});
  for (const auto& [fqn, p] : params) p.set_grad(OnesLike(p));
  const double before = tied.ToDoubleVector()[0];
  sgd.Step();  // raised "1 of its 2 parameters are no longer the module's ('weight')" before slots were counted
  EXPECT_FLOAT_EQ(a.Param("weight").ToDoubleVector()[0], static_cast<float>(before - 0.5));
  // Replaced in its last module too: now no module reads it.
  a.SetParameter("weight", Detach(Clone(tied)).set_requires_grad(true));
  ExpectErrorContains([&] { sgd.Step(); }, ErrorCode::kFailedPrecondition,
                      "SGD.step: 1 of its 2 parameters are no longer the module's ('weight')");
  // A module that is destroyed retires nothing: its parameters were not replaced (torch steps them).
  SGD kept({{"w", [&] {
              nn::Linear gone(2, 2, /*bias=*/false, gen);
              return gone.Param("weight");
            }()}},
           {.lr = 0.5});
  kept.params()[0].second.set_grad(OnesLike(kept.params()[0].second));
  kept.Step();
}

}  // namespace
}  // namespace tessel::optim
