// core/nn/checkpoint_test.cc — activation checkpointing: bitwise-equal gradients on GPT blocks (full,
// selective, GEMM-keeping), recompute counts, RNG replay, retained graphs, and its errors.
#include "core/autograd/checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/autograd/split_backward.h"
#include "core/base/testing/expect_error.h"
#include "core/dispatch/profiler.h"
#include "core/memory/allocator.h"
#include "core/nn/checkpoint_wrapper.h"
#include "core/nn/transformer.h"
#include "core/ops/elementwise.h"
#include "core/ops/matmul.h"
#include "core/ops/reduction.h"
#include "core/ops/ternary.h"
#include "core/ops/unary.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"

namespace tessel::nn {
namespace {

using testing::ExpectErrorContains;
using Grads = std::vector<std::pair<std::string, std::vector<float>>>;

// Gradients of every parameter after one backward of the GPT loss, with `policy` on every block.
Grads GptGrads(const GPTConfig& cfg, const std::string& policy) {
  Generator gen(11);
  GPT gpt(cfg, gen);
  for (size_t i = 0; i < gpt.layers().size(); ++i) ApplyActivationCheckpointing(*gpt.layers().at(i), policy);
  Tensor idx = Randint(0, cfg.vocab_size, std::vector<int64_t>{2, cfg.seq_len}, gen);
  Tensor tgt = Randint(0, cfg.vocab_size, std::vector<int64_t>{2, cfg.seq_len}, gen);
  Backward(gpt.Loss(idx, tgt));
  Grads out;
  for (auto& [fqn, p] : gpt.NamedParameters()) {
    EXPECT_TRUE(p.grad().defined()) << fqn;
    out.emplace_back(fqn, p.grad().ToVector<float>());
  }
  return out;
}

void ExpectBitwiseEqual(const Grads& a, const Grads& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(a[i].first);
    ASSERT_EQ(a[i].first, b[i].first);
    ASSERT_EQ(a[i].second.size(), b[i].second.size());
    EXPECT_EQ(std::memcmp(a[i].second.data(), b[i].second.data(), a[i].second.size() * sizeof(float)), 0);
  }
}

TEST(CheckpointTest, GptBlocksGiveBitwiseTheSameGradientsUnderEveryPolicy) {
  const std::vector<GPTConfig> configs = {
      {.vocab_size = 31, .d_model = 16, .n_layers = 2, .n_heads = 2, .seq_len = 8},
      {.vocab_size = 29,
       .d_model = 16,
       .n_layers = 3,
       .n_heads = 4,
       .seq_len = 8,
       .mlp = "swiglu",
       .norm = "rmsnorm",
       .bias = true,
       .tie_embeddings = true},
  };
  for (const GPTConfig& cfg : configs) {
    const Grads reference = GptGrads(cfg, "none");
    for (const char* policy : {"full", "selective", "gemm"}) {
      SCOPED_TRACE(::testing::Message() << cfg.mlp << " " << policy);
      ExpectBitwiseEqual(reference, GptGrads(cfg, policy));
    }
  }
}

// A block's children run forward twice per step under checkpointing (forward + recompute), once
// without; under "gemm" the recompute takes the linears' outputs from the cache instead of running them.
TEST(CheckpointTest, RecomputeRunsTheBlockAgainInsideBackwardAndSelectiveSkipsKeptOps) {
  for (const char* policy : {"none", "full", "gemm"}) {
    SCOPED_TRACE(policy);
    GPTConfig cfg{.vocab_size = 17, .d_model = 8, .n_layers = 1, .n_heads = 2, .seq_len = 4};
    Generator gen(2);
    GPT gpt(cfg, gen);
    Module& block = *gpt.layers().at(0);
    ApplyActivationCheckpointing(block, policy);
    int mlp_calls = 0, in_backward_calls = 0;
    block.Submodule("mlp")->RegisterForwardPreHook([&](Module&, TensorList&) {
      ++mlp_calls;
      in_backward_calls += InBackward() ? 1 : 0;
    });
    Tensor idx = Randint(0, 17, std::vector<int64_t>{1, 4}, gen);
    Tensor loss = gpt.Loss(idx, idx);
    EXPECT_EQ(mlp_calls, 1);
    Backward(loss);
    const int expected = std::string(policy) == "none" ? 1 : 2;
    EXPECT_EQ(mlp_calls, expected);
    EXPECT_EQ(in_backward_calls, expected - 1);
  }
}

// Ops dispatched and the activation ledger's peak over one GPT step (forward + backward) with `policy`
// on every block; by_options: the policy's CheckpointOptions applied directly (the fused op then runs
// inside the region too).
struct StepRecord {
  std::map<std::string, int64_t> calls;
  int64_t activation_peak = 0;
};
constexpr int64_t kLayers = 3;
StepRecord RecordStep(const std::string& policy, bool by_options = false) {
  const GPTConfig cfg{.vocab_size = 31, .d_model = 16, .n_layers = kLayers, .n_heads = 2, .seq_len = 8};
  Generator gen(11);
  GPT gpt(cfg, gen);
  for (size_t i = 0; i < gpt.layers().size(); ++i) {
    if (by_options) {
      ApplyActivationCheckpointing(*gpt.layers().at(i), CheckpointOptionsFor(policy));
    } else {
      ApplyActivationCheckpointing(*gpt.layers().at(i), policy);
    }
  }
  Tensor idx = Randint(0, cfg.vocab_size, std::vector<int64_t>{2, cfg.seq_len}, gen);
  const Device d = Device::Cpu(0);
  memory::ResetPeaks(d);
  const int64_t live_before = memory::Stats(d)[memory::Ledger::kActivations].live;
  StepRecord r;
  {
    OpProfiler prof;
    Backward(gpt.Loss(idx, idx));
    for (const auto& [op, row] : prof.rows()) r.calls[op] = row.calls;
  }
  r.activation_peak = memory::Stats(d)[memory::Ledger::kActivations].peak - live_before;
  return r;
}

// Under "gemm" the fused MLP runs as linear + gelu inside the checkpointed region: linear's output (the
// pre-activation) is kept, gelu is recomputed and no GEMM is (as many linears as without checkpointing).
// With the fused op inside the region instead, both its [B, T, 4C] outputs are kept: the step's peak (in
// the last block's backward) holds one such tensor more for each earlier block, [2, 8, 64] float32 each.
TEST(CheckpointTest, TheGemmPolicyKeepsTheMlpPreActivationOnlyAndRecomputesNoGemm) {
  const StepRecord none = RecordStep("none"), gemm = RecordStep("gemm");
  const StepRecord gemm_fused = RecordStep("gemm", /*by_options=*/true);
  EXPECT_EQ(none.calls.at("linear_gelu"), kLayers);
  EXPECT_EQ(gemm.calls.count("linear_gelu"), 0u);
  EXPECT_EQ(gemm.calls.at("linear"), none.calls.at("linear") + none.calls.at("linear_gelu"));
  EXPECT_EQ(gemm.calls.at("gelu"), 2 * kLayers);  // forward and recompute
  EXPECT_EQ(gemm_fused.calls.at("linear_gelu"), kLayers);  // kept, not recomputed
  EXPECT_EQ(gemm_fused.activation_peak - gemm.activation_peak, (kLayers - 1) * (2 * 8 * 64) * 4);
  EXPECT_LT(gemm.activation_peak, none.activation_peak);
}

// A dropout-like block drawing from a Generator: listed in the options, the recompute replays the same
// mask (bitwise equal gradients) and the generator ends where it would have without checkpointing.
class NoisyBlock final : public Module {
 public:
  NoisyBlock(Generator& noise, Generator& init) : Module("NoisyBlock"), noise_(noise) {
    RegisterParameter("w", Randn({6}, init));
  }
  TensorList Forward(const TensorList& in) override {
    Tensor keep = Gt(Rand({3, 6}, noise_), Full({}, 0.3));
    return {Mul(Where(keep, Tanh(Mul(in.at(0), Param("w"))), Zeros({3, 6})), Full({}, 1 / 0.7))};
  }

 private:
  Generator& noise_;
};

std::pair<std::vector<float>, Generator> NoisyGrads(bool checkpoint) {
  Generator init(1), noise(99);
  NoisyBlock block(noise, init);
  if (checkpoint) ApplyActivationCheckpointing(block, autograd::CheckpointOptions{.generators = {&noise}});
  Tensor x = Randn({3, 6}, init);
  Tensor y = block(x);
  noise.Advance(5);  // draws after the block: the recompute must not disturb them
  Backward(Sum(y));
  return {block.Param("w").grad().ToVector<float>(), noise};
}

TEST(CheckpointTest, ListedGeneratorsAreReplayedBitwiseAndRestoredAfterTheRecompute) {
  auto [plain, noise_plain] = NoisyGrads(false);
  auto [ckpt, noise_ckpt] = NoisyGrads(true);
  ASSERT_EQ(plain.size(), ckpt.size());
  EXPECT_EQ(std::memcmp(plain.data(), ckpt.data(), plain.size() * sizeof(float)), 0);
  EXPECT_TRUE(noise_plain == noise_ckpt);
  EXPECT_EQ(noise_ckpt.offset(), noise_plain.offset());
}

TEST(CheckpointTest, RetainedGraphRecomputesForASecondBackward) {
  Generator gen(4);
  Tensor w = Randn({5}, gen).set_requires_grad(true);
  Tensor x = Randn({5}, gen);
  int runs = 0;
  auto fn = [&](const TensorList& in) -> TensorList {
    ++runs;
    return {Tanh(Mul(in.at(0), w))};
  };
  for (const bool selective : {false, true}) {
    SCOPED_TRACE(selective ? "mul kept" : "full");
    runs = 0;
    w.set_grad(Tensor());
    autograd::CheckpointOptions options;
    if (selective) options.save_outputs = autograd::SaveOutputsOf({"mul"});
    Tensor y = Sum(autograd::Checkpoint(fn, {x}, options).at(0));
    Backward(y, Tensor(), /*retain_graph=*/true);
    const std::vector<float> once = w.grad().ToVector<float>();
    Backward(y);
    EXPECT_EQ(runs, 3);  // forward, then one recompute per backward
    const std::vector<float> twice = w.grad().ToVector<float>();
    for (size_t i = 0; i < once.size(); ++i) EXPECT_EQ(twice[i], once[i] + once[i]) << i;
  }
}

// create_graph through a checkpoint: the rerun hands out saved tensors that carry their dependence on the
// input and the parameter, so the second derivative is exact. L = Σ sin(x∘w)², g = dL/dw = x∘sin(2x∘w),
// d(Σ g)/dx = sin(2x∘w) + 2x∘w∘cos(2x∘w) in closed form (double). Before: the rerun's detached tensors
// dropped every term through them, silently.
TEST(CheckpointTest, SecondDerivativesThroughACheckpointMatchTheClosedForm) {
  Generator gen(5);
  Tensor w = Randn({6}, gen).set_requires_grad(true);
  const Tensor x0 = Randn({6}, gen);
  auto fn = [&](const TensorList& in) -> TensorList { return {Sin(Mul(in.at(0), w))}; };
  const std::vector<float> xs = x0.ToVector<float>(), ws = w.ToVector<float>();
  for (const bool selective : {false, true}) {
    SCOPED_TRACE(selective ? "mul kept" : "full");
    Tensor x = Clone(x0).set_requires_grad(true);
    autograd::CheckpointOptions options;
    if (selective) options.save_outputs = autograd::SaveOutputsOf({"mul"});
    Tensor y = autograd::Checkpoint(fn, {x}, options).at(0);
    Tensor g = Grad({Sum(Mul(y, y))}, {w}, {}, /*retain_graph=*/false, /*allow_unused=*/false,
                    /*create_graph=*/true).at(0);
    const std::vector<float> gg = Grad({Sum(g)}, {x}).at(0).ToVector<float>();
    const std::vector<float> first = g.ToVector<float>();
    for (size_t i = 0; i < xs.size(); ++i) {
      const double a = 2.0 * xs[i] * ws[i];
      EXPECT_NEAR(first[i], xs[i] * std::sin(a), 1e-5) << i;
      EXPECT_NEAR(gg[i], std::sin(a) + a * std::cos(a), 1e-4) << i;
    }
  }
}

// A selective policy is asked once per op call, in the first forward, with the op's inputs and outputs (torch
// 2.15 passes the op's args and ctx.op_output, and its rerun replays the decisions): a stateful policy (every
// other matmul kept) decides alike for the forward and the rerun.
TEST(CheckpointTest, ASelectivePolicySeesTheOpsInputsAndItsOutputsInTheForward) {
  Generator gen(6);
  Tensor w = Randn({3, 4}, gen).set_requires_grad(true);
  Tensor x = Randn({2, 3}, gen).set_requires_grad(true);
  std::vector<std::string> seen;
  autograd::CheckpointOptions options;
  options.save_outputs = [&](const OpDef& op, const TensorList& inputs, const TensorList* outputs) {
    if (op.name != "matmul") return false;
    std::string shapes = ShapeStr(inputs.at(0).sizes()) + "x" + ShapeStr(inputs.at(1).sizes());
    seen.push_back(shapes + (outputs != nullptr ? "->" + ShapeStr(outputs->at(0).sizes()) : " (no outputs)"));
    return seen.size() % 2 == 1;  // the 1st and 3rd matmul kept
  };
  Tensor v = Randn({4, 3}, gen).set_requires_grad(true);
  auto fn = [&](const TensorList& in) -> TensorList {
    return {Tanh(Matmul(Tanh(Matmul(Tanh(Matmul(in.at(0), w)), v)), w))};
  };
  Tensor y = Sum(autograd::Checkpoint(fn, {x}, options).at(0));
  const std::vector<std::string> forward = seen;
  Backward(y);
  EXPECT_EQ(forward, (std::vector<std::string>{"[2, 3]x[3, 4]->[2, 4]", "[2, 4]x[4, 3]->[2, 3]",
                                               "[2, 3]x[3, 4]->[2, 4]"}));
  EXPECT_EQ(seen, forward);  // not asked again by the rerun
  const std::vector<float> got = x.grad().ToVector<float>();
  x.set_grad(Tensor());
  Backward(Sum(fn({x}).at(0)));
  EXPECT_EQ(got, x.grad().ToVector<float>());
}

// Zero-bubble's split backward (I now, W later) through a checkpointed block: the input gradient and
// every .grad bitwise equal to one plain backward without checkpointing; the block reruns once per half
// (W's nodes unpack their saved tensors again, see [Note: activation checkpointing]'s limits).
struct SplitRun {
  std::vector<float> input_grad;
  Grads grads;
  int block_runs = 0;
};

SplitRun SplitBackwardThroughBlock(const std::string& policy) {
  GPTConfig cfg{.vocab_size = 5, .d_model = 8, .n_layers = 1, .n_heads = 2, .seq_len = 4};
  Generator gen(3);
  TransformerBlock block(cfg, gen);
  SplitRun run;
  ApplyActivationCheckpointing(block, policy);
  block.Submodule("mlp")->RegisterForwardPreHook([&](Module&, TensorList&) { ++run.block_runs; });
  Tensor x = Randn({2, 4, 8}, gen).set_requires_grad(true);
  Tensor loss = Sum(Tanh(block(x)));
  SplitBackwardResult r = BackwardInput({loss}, {Tensor()}, {x});
  run.input_grad = r.input_grads.at(0).ToVector<float>();
  BackwardWeight(r.weight_task);
  for (auto& [fqn, p] : block.NamedParameters()) run.grads.emplace_back(fqn, p.grad().ToVector<float>());
  return run;
}

// Under every policy, selective ones included: the weight half's rerun computes again the ops whose
// outputs the first rerun took from the forward's cache.
TEST(CheckpointTest, SplitBackwardThroughACheckpointedBlockIsBitwiseEqualAndRecomputesPerHalf) {
  const SplitRun plain = SplitBackwardThroughBlock("none");
  EXPECT_EQ(plain.block_runs, 1);
  for (const char* policy : {"full", "selective", "gemm"}) {
    SCOPED_TRACE(policy);
    const SplitRun ckpt = SplitBackwardThroughBlock(policy);
    ASSERT_EQ(plain.input_grad.size(), ckpt.input_grad.size());
    EXPECT_EQ(std::memcmp(plain.input_grad.data(), ckpt.input_grad.data(), plain.input_grad.size() * sizeof(float)),
              0);
    ExpectBitwiseEqual(plain.grads, ckpt.grads);
    EXPECT_EQ(ckpt.block_runs, 3);  // forward, the recompute for I, the recompute for W
  }
}

TEST(CheckpointTest, AFunctionThatSavesDifferentlyOnRecomputeIsAnInternalErrorNamingTheCounts) {
  Generator gen(4);
  Tensor w = Randn({5}, gen).set_requires_grad(true);
  int runs = 0;
  auto fn = [&](const TensorList& in) -> TensorList {
    Tensor h = Mul(in.at(0), w);
    if (runs++ == 0) h = Tanh(h);  // the recompute skips an op that saved a tensor
    return {h};
  };
  Tensor y = Sum(autograd::Checkpoint(fn, {Randn({5}, gen)}).at(0));
  ExpectErrorContains([&] { Backward(y); }, ErrorCode::kInternal, {"recompute saved", "not deterministic"});
}

// h += checkpoint(f, h): the rerun would compute f from the updated h (a silently wrong gradient); the
// rerun checks the input's version, as torch raises. A selective policy's kept output written in place
// after its op ran is refused too, unless allowed (then the written value is what the rerun reads).
TEST(CheckpointTest, InPlaceWritesToAnInputOrAKeptOutputAfterTheForwardAreCaughtAtTheRecompute) {
  Generator gen(4);
  Tensor w = Randn({5}, gen).set_requires_grad(true);
  auto f = [&](const TensorList& in) -> TensorList { return {Tanh(Mul(in.at(0), w))}; };
  Tensor h = Randn({5}, gen);
  Tensor y = autograd::Checkpoint(f, {h}).at(0);
  {
    NoGradGuard ng;
    AddInPlace(h, y);
  }
  ExpectErrorContains([&] { Backward(Sum(y)); }, ErrorCode::kFailedPrecondition,
                      {"modified by an inplace operation", "input 0 of a checkpointed function", "shape [5]",
                       "is at version 1; expected version 0"});
  auto g = [&](const TensorList& in) -> TensorList {
    Tensor lin = Mul(in.at(0), w);  // kept by the policy below
    {
      NoGradGuard ng;
      MulScalarInPlace(lin, 2.0);
    }
    return {Tanh(lin)};
  };
  for (bool allow : {false, true}) {
    autograd::CheckpointOptions sel{.save_outputs = autograd::SaveOutputsOf({"mul"}),
                                    .allow_cache_entry_mutation = allow};
    Tensor z = Sum(autograd::Checkpoint(g, {Randn({5}, gen)}, sel).at(0));
    if (!allow) {
      ExpectErrorContains([&] { Backward(z); }, ErrorCode::kFailedPrecondition,
                          {"cached during selective activation checkpoint has been mutated", "output 0 of 'mul'"});
    } else {
      w.set_grad(Tensor());
      Backward(z);
      EXPECT_TRUE(w.grad().defined());
    }
  }
}

TEST(CheckpointTest, BadPoliciesAndDoubleApplicationAreRejected) {
  GPTConfig cfg{.vocab_size = 5, .d_model = 8, .n_layers = 1, .n_heads = 2, .seq_len = 4};
  Generator gen(0);
  GPT gpt(cfg, gen);
  Module& block = *gpt.layers().at(0);
  ExpectErrorContains([&] { ApplyActivationCheckpointing(block, "everything"); }, ErrorCode::kInvalidArgument,
                      {"'full', 'selective' or 'gemm'", "'everything'"});
  checkpoint_wrapper(block);
  ASSERT_NE(CheckpointWrapper::Of(block), nullptr);
  ExpectErrorContains([&] { ApplyActivationCheckpointing(block, "full"); }, ErrorCode::kFailedPrecondition,
                      {"TransformerBlock", "already checkpointed"});
  RemoveActivationCheckpointing(block);
  EXPECT_EQ(CheckpointWrapper::Of(block), nullptr);
  EXPECT_FALSE(block.has_forward_wrapper());
}

TEST(CheckpointTest, UnderNoGradTheFunctionRunsOnceAndNothingIsRecorded) {
  Generator gen(4);
  Tensor w = Randn({5}, gen).set_requires_grad(true);
  int runs = 0;
  NoGradGuard ng;
  Tensor y = autograd::Checkpoint(
                 [&](const TensorList& in) -> TensorList {
                   ++runs;
                   return {Mul(in.at(0), w)};
                 },
                 {Randn({5}, gen)})
                 .at(0);
  EXPECT_EQ(runs, 1);
  EXPECT_FALSE(y.requires_grad());
}

}  // namespace
}  // namespace tessel::nn
