// core/nn/split_backward_test.cc — the split backward (core/autograd/split_backward.h) on real modules:
// BackwardInput then BackwardWeight gives bitwise the full Backward's input and parameter gradients.
// (The test lives in core/nn because it needs modules; core/autograd sits below core/nn.)
#include "core/autograd/split_backward.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/autograd/anomaly.h"
#include "core/autograd/engine.h"
#include "core/dispatch/profiler.h"
#include "core/base/testing/expect_error.h"
#include "core/nn/transformer.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/ops/unary.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"

namespace tessel::nn {
namespace {

using testing::ExpectErrorContains;

class TwoLayerMlp final : public Module {
 public:
  explicit TwoLayerMlp(Generator& gen) : Module("TwoLayerMlp") {
    RegisterModule("fc1", std::make_unique<Linear>(6, 12, /*bias=*/true, gen, 0.3));
    RegisterModule("fc2", std::make_unique<Linear>(12, 5, /*bias=*/true, gen, 0.3));
  }
  TensorList Forward(const TensorList& in) override {
    return {(*Submodule("fc2"))(Gelu((*Submodule("fc1"))(in.at(0)), "tanh"))};
  }
};

Tensor LeafInput(Shape shape, uint64_t seed) {
  Generator gen(seed);
  Tensor x = Randn(shape, gen);
  x.set_requires_grad(true);
  return x;
}

// Loss with a non-trivial output gradient: sum(y * y * 0.5).
Tensor HalfSquareSum(const Tensor& y) { return Sum(MulScalar(Mul(y, y), 0.5)); }

void ExpectBitwiseEqual(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_TRUE(a.defined()) << what;
  ASSERT_TRUE(b.defined()) << what;
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  const std::vector<float> va = a.ToVector<float>(), vb = b.ToVector<float>();
  for (size_t i = 0; i < va.size(); ++i) ASSERT_EQ(va[i], vb[i]) << what << " element " << i;
}

// Runs full B on one model and I+W on a twin built from the same seed; compares every gradient.
template <typename MakeModel>
void CheckSplitEqualsFull(MakeModel make, Shape input_shape) {
  Generator gen_a(11), gen_b(11);
  auto full = make(gen_a);
  auto split = make(gen_b);
  Tensor xa = LeafInput(input_shape, 5), xb = LeafInput(input_shape, 5);
  Backward(HalfSquareSum(full->Call({xa}).at(0)));

  SplitBackwardResult r = BackwardInput({HalfSquareSum(split->Call({xb}).at(0))}, {Tensor()}, {xb});
  ExpectBitwiseEqual(r.input_grads.at(0), xa.grad(), "input gradient after I");
  EXPECT_FALSE(xb.grad().defined()) << "I returns the input gradient instead of accumulating it";
  for (auto& [fqn, p] : split->NamedParameters()) EXPECT_FALSE(p.grad().defined()) << fqn << " got a grad in I";
  EXPECT_TRUE(r.weight_task.pending());
  BackwardWeight(r.weight_task);
  EXPECT_FALSE(r.weight_task.pending());
  const StateDict full_params = full->NamedParameters();
  const StateDict split_params = split->NamedParameters();
  ASSERT_EQ(full_params.size(), split_params.size());
  for (size_t i = 0; i < full_params.size(); ++i) {
    ExpectBitwiseEqual(split_params[i].second.grad(), full_params[i].second.grad(), full_params[i].first);
  }
}

TEST(SplitBackwardTest, InputThenWeightEqualsFullBackwardBitwiseOnMlp) {
  CheckSplitEqualsFull([](Generator& g) { return std::make_unique<TwoLayerMlp>(g); }, {4, 3, 6});
}

TEST(SplitBackwardTest, InputThenWeightEqualsFullBackwardBitwiseOnGptBlock) {
  const GPTConfig cfg{.vocab_size = 11, .d_model = 16, .n_layers = 1, .n_heads = 2, .seq_len = 8, .bias = true};
  CheckSplitEqualsFull([&](Generator& g) { return std::make_unique<TransformerBlock>(cfg, g); }, {2, 8, 16});
}

TEST(SplitBackwardTest, InputDefersEachLinearsWeightGradientAndKeepsOneNodePerLinear) {
  Generator gen(1);
  TwoLayerMlp mlp(gen);
  Tensor x = LeafInput({2, 6}, 3);
  SplitBackwardResult r = BackwardInput({HalfSquareSum(mlp(x))}, {Tensor()}, {x});
  // fc1 and fc2 each keep their linear node (dW, db still to do); gelu and the loss nodes are done.
  EXPECT_EQ(r.weight_task.num_deferred_nodes(), 2u);
  BackwardWeight(r.weight_task);
  EXPECT_EQ(r.weight_task.num_deferred_nodes(), 0u);
  for (auto& [fqn, p] : mlp.NamedParameters()) EXPECT_TRUE(p.grad().defined()) << fqn;
}

// No recomputation: the kernels I and W dispatch together are, op by op, those of one full B, and I alone
// runs fewer matmuls (dX only). The one exception is by design: a fused backward kernel that produces the
// input and the weight gradients in one call (layer_norm_backward: dx, dgamma, dbeta) runs once per half,
// with disjoint output masks (as PyTorch's split backward calls native_layer_norm_backward twice).
TEST(SplitBackwardTest, InputPlusWeightDispatchExactlyTheKernelsOfOneFullBackward) {
  const GPTConfig cfg{.vocab_size = 11, .d_model = 16, .n_layers = 1, .n_heads = 2, .seq_len = 8, .bias = true};
  Generator ga(3), gb(3);
  TransformerBlock full(cfg, ga), split(cfg, gb);
  Tensor xa = LeafInput({2, 8, 16}, 4), xb = LeafInput({2, 8, 16}, 4);
  Tensor la = HalfSquareSum(full(xa)), lb = HalfSquareSum(split(xb));
  std::map<std::string, OpProfiler::Row> b_rows, i_rows, w_rows;
  {
    OpProfiler prof;
    Backward(la);
    b_rows = prof.rows();
  }
  SplitBackwardResult r;
  {
    OpProfiler prof;
    r = BackwardInput({lb}, {Tensor()}, {xb});
    i_rows = prof.rows();
  }
  {
    OpProfiler prof;
    BackwardWeight(r.weight_task);
    w_rows = prof.rows();
  }
  std::map<std::string, int64_t> iw;
  for (const auto* rows : {&i_rows, &w_rows}) {
    for (const auto& [op, row] : *rows) iw[op] += row.calls;
  }
  std::map<std::string, int64_t> b;
  for (const auto& [op, row] : b_rows) b[op] = row.calls;
  ASSERT_EQ(b["layer_norm_backward"], 2);  // ln1, ln2
  EXPECT_EQ(i_rows["layer_norm_backward"].calls, 2);
  EXPECT_EQ(w_rows["layer_norm_backward"].calls, 2);
  b.erase("layer_norm_backward");
  iw.erase("layer_norm_backward");
  EXPECT_EQ(iw, b);
  ASSERT_TRUE(b.count("matmul"));
  EXPECT_LT(i_rows["matmul"].calls, b["matmul"]);
  EXPECT_GT(w_rows["matmul"].calls, 0);
}

TEST(SplitBackwardTest, WholeGptWithoutDifferentiableInputsRunsEverythingInWeight) {
  // A first pipeline stage: the token ids need no gradient, so I has nothing to do and W is the full B.
  const GPTConfig cfg{.vocab_size = 13, .d_model = 16, .n_layers = 2, .n_heads = 2, .seq_len = 6};
  Generator ga(2), gb(2), gi(9);
  GPT full(cfg, ga), split(cfg, gb);
  Tensor idx = Randint(0, 13, std::vector<int64_t>{2, 6}, gi);
  Backward(full.Loss(idx, idx));
  SplitBackwardResult r = BackwardInput({split.Loss(idx, idx)}, {Tensor()}, {});
  EXPECT_TRUE(r.input_grads.empty());
  for (auto& [fqn, p] : split.NamedParameters()) EXPECT_FALSE(p.grad().defined()) << fqn;
  BackwardWeight(r.weight_task);
  const StateDict fp = full.NamedParameters(), sp = split.NamedParameters();
  for (size_t i = 0; i < fp.size(); ++i) ExpectBitwiseEqual(sp[i].second.grad(), fp[i].second.grad(), fp[i].first);
}

TEST(SplitBackwardTest, AnomalyModeNamesTheFunctionThatReturnedNanInFullAndInputBackwards) {
  struct ModeGuard {
    ModeGuard() { autograd::SetAnomalyMode(true); }
    ~ModeGuard() { autograd::SetAnomalyMode(false); }
  };
  Tensor x = Full({2}, 0.0);
  x.set_requires_grad(true);
  // d sqrt(u)/du at u = 0 is inf; the MulBackward0 node then forms inf · 0 = NaN for x
  auto loss = [&] { return Sum(Sqrt(MulScalar(x, 0.0))); };
  {
    ModeGuard on;
    ExpectErrorContains([&] { Backward(loss()); }, ErrorCode::kFailedPrecondition,
                        {"Function 'MulBackward0' returned nan values in its 0th output."});
    ExpectErrorContains([&] { BackwardInput({loss()}, {Tensor()}, {x}); }, ErrorCode::kFailedPrecondition,
                        {"Function 'MulBackward0' returned nan values in its 0th output."});
    autograd::SetAnomalyMode(true, /*check_nan=*/false);
    Backward(loss());  // only NaN checking fails a backward
  }
  EXPECT_FALSE(autograd::AnomalyModeEnabled());
  x.set_grad(Tensor());
  Backward(loss());  // off: the NaN reaches the gradient, as without anomaly mode in torch
  EXPECT_TRUE(std::isnan(x.grad().ToVector<double>()[0]));
}

// The forward-stack hooks (anomaly.h): nodes made while anomaly mode is on record the provider's stack, and the
// node whose backward fails hands its name and that stack to the reporter before the error propagates; nodes made
// outside it record nothing.
std::vector<std::string>* reported = nullptr;
TEST(SplitBackwardTest, AnomalyModeReportsTheFailingNodesForwardStack) {
  std::vector<std::string> seen;
  reported = &seen;
  autograd::SetForwardTraceHooks([] { return std::string("forward stack of this node"); },
                                 [](const std::string& node, const std::string& trace) {
                                   reported->push_back(node + ": " + trace);
                                 });
  Tensor x = Full({2}, 0.0);
  x.set_requires_grad(true);
  auto loss = [&] { return Sum(Sqrt(MulScalar(x, 0.0))); };
  Tensor outside = loss();
  autograd::SetAnomalyMode(true);
  ExpectErrorContains([&] { Backward(loss()); }, ErrorCode::kFailedPrecondition, {"returned nan values"});
  EXPECT_EQ(seen, (std::vector<std::string>{"MulBackward0: forward stack of this node"}));
  ExpectErrorContains([&] { Backward(outside); }, ErrorCode::kFailedPrecondition, {"returned nan values"});
  EXPECT_EQ(seen.size(), 1u);  // made before anomaly mode: no stack to report
  autograd::SetAnomalyMode(false);
  autograd::SetForwardTraceHooks(nullptr, nullptr);
  reported = nullptr;
}

TEST(SplitBackwardTest, WeightBeforeInputIsAFailedPrecondition) {
  WeightGradTask never_made;
  EXPECT_FALSE(never_made.pending());
  ExpectErrorContains([&] { BackwardWeight(never_made); }, ErrorCode::kFailedPrecondition,
                      {"BackwardWeight", "W before I"});
}

TEST(SplitBackwardTest, WeightTwiceIsAFailedPrecondition) {
  Generator gen(1);
  TwoLayerMlp mlp(gen);
  Tensor x = LeafInput({2, 6}, 3);
  SplitBackwardResult r = BackwardInput({HalfSquareSum(mlp(x))}, {Tensor()}, {x});
  BackwardWeight(r.weight_task);
  ExpectErrorContains([&] { BackwardWeight(r.weight_task); }, ErrorCode::kFailedPrecondition, "already ran");
}

TEST(SplitBackwardTest, NonLeafInputIsRejectedWithItsIndex) {
  Generator gen(1);
  TwoLayerMlp mlp(gen);
  Tensor x = LeafInput({2, 6}, 3);
  Tensor h = MulScalar(x, 2.0);
  ExpectErrorContains([&] { BackwardInput({HalfSquareSum(mlp(h))}, {Tensor()}, {x, h}); },
                      ErrorCode::kInvalidArgument, {"input 1", "non-leaf"});
}

}  // namespace
}  // namespace tessel::nn
