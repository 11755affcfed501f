#include "core/nn/module.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "core/autograd/engine.h"
#include "core/base/error.h"
#include "core/memory/allocator.h"
#include "core/nn/layers.h"
#include "core/nn/transformer.h"
#include "core/ops/dropout.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/optim/optimizer.h"
#include "core/tensor/factory.h"
#include "core/base/testing/expect_error.h"

namespace tessel::nn {
namespace {

// Two linears in a row, to test hook order and naming.
class TwoLayer final : public Module {
 public:
  explicit TwoLayer(Generator& gen) : Module("TwoLayer") {
    RegisterModule("l1", std::make_unique<Linear>(3, 4, true, gen));
    RegisterModule("l2", std::make_unique<Linear>(4, 2, false, gen));
  }
  TensorList Forward(const TensorList& in) override { return {(*Submodule("l2"))((*Submodule("l1"))(in[0]))}; }
};

std::vector<std::string> Names(const StateDict& sd) {
  std::vector<std::string> out;
  for (const auto& [k, v] : sd) out.push_back(k);
  return out;
}

// A layer built under DeferredInitGuard (the meta device) and never materialized refuses a real input, as torch's
// "Tensor on device meta is not on the expected device cpu!", instead of computing on values nobody wrote; a meta
// input passes (shape propagation); once the storage is materialized (to_empty) and written, it runs.
TEST(ModuleTest, AnUnmaterializedMetaLayerRefusesARealInput) {
  Generator gen(0);
  std::unique_ptr<Linear> lin;
  Tensor meta_input;
  {
    DeferredInitGuard meta;
    lin = std::make_unique<Linear>(3, 2, /*bias=*/true, gen);
    meta_input = Zeros({1, 3});
  }
  ::tessel::testing::ExpectErrorContains([&] { (*lin)(Ones({1, 3})); }, ErrorCode::kFailedPrecondition,
                                         {"Linear: parameter 'weight' is on the meta device", "to_empty"});
  EXPECT_EQ((*lin)(meta_input).sizes(), (Shape{1, 2}));
  for (auto& [fqn, p] : lin->NamedParameters()) {
    p.impl()->storage().set_deferred_init(false);  // what to_empty does
    FillInPlace(p, 1.0);
  }
  EXPECT_EQ((*lin)(Ones({1, 3})).ToVector<float>(), (std::vector<float>{4.0f, 4.0f}));
}

TEST(ModuleTest, DropoutDrawsFromItsGeneratorInTrainingAndIsTheIdentityInEval) {
  Generator gen(11), ref(11);
  nn::Dropout drop(0.5, gen);
  const Tensor x = Ones({4, 8});
  EXPECT_EQ(drop(x).ToDoubleVector(), tessel::Dropout(x, 0.5, ref).ToDoubleVector());
  EXPECT_EQ(gen.offset(), 32u);
  drop.Eval();
  EXPECT_EQ(drop(x).impl(), x.impl());
  EXPECT_EQ(gen.offset(), 32u);
  testing::ExpectErrorContains([&] { nn::Dropout bad(1.5, gen); }, ErrorCode::kInvalidArgument,
                               {"Dropout: dropout probability has to be between 0 and 1, but got 1.5"});
}

TEST(ModuleTest, EmbeddingPaddingRowStartsAtZeroAndNeverLearns) {
  Generator gen(2);
  nn::Embedding emb(5, 3, gen, 0.02, DType::kFloat32, /*padding_idx=*/-2);
  EXPECT_EQ(emb.padding_idx(), 3);
  const std::vector<double> w = emb.Param("weight").ToDoubleVector();
  for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(w[3 * 3 + c], 0.0);
  EXPECT_NE(w[2 * 3], 0.0);
  Backward(Sum(emb(FromVector<int64_t>({3, 1, 3}))));
  const std::vector<double> g = emb.Param("weight").grad().ToDoubleVector();
  for (int64_t c = 0; c < 3; ++c) {
    EXPECT_EQ(g[3 * 3 + c], 0.0);
    EXPECT_EQ(g[1 * 3 + c], 1.0);
  }
}

TEST(ModuleTest, NamedParametersUseDottedPathsInRegistrationOrder) {
  Generator gen(0);
  TwoLayer m(gen);
  EXPECT_EQ(Names(m.NamedParameters()), (std::vector<std::string>{"l1.weight", "l1.bias", "l2.weight"}));
  EXPECT_EQ(m.NamedParameters()[0].second.sizes(), (Shape{4, 3}));
  EXPECT_TRUE(m.NamedParameters()[0].second.requires_grad());
  EXPECT_EQ(Names(m.NamedParameters(/*recurse=*/false)).size(), 0u);
  EXPECT_EQ(m.NamedModules().size(), 3u);
  EXPECT_EQ(m.NamedModules()[1].first, "l1");
}

// A reused layer (torch: `nn.Sequential(lin, relu, lin)`, ALBERT's shared blocks): y = l(l(x)).
class Twice final : public Module {
 public:
  explicit Twice(std::shared_ptr<Linear> l) : Module("Twice") {
    RegisterModule("a", l);
    RegisterModule("b", std::move(l));
  }
  TensorList Forward(const TensorList& in) override { return {(*Submodule("b"))((*Submodule("a"))(in[0]))}; }
};

TEST(ModuleTest, AModuleSharedByTwoParentsIsWalkedOnceAndNamedEverywhereInTheStateDict) {
  Generator gen(3);
  auto lin = std::make_shared<Linear>(2, 2, true, gen);
  Twice twice(lin);
  ModuleList list;
  list.Append(lin);
  list.Append(lin);
  EXPECT_EQ(Names(twice.NamedParameters()), (std::vector<std::string>{"a.weight", "a.bias"}));
  EXPECT_EQ(Names(twice.NamedParameters(true, /*remove_duplicate=*/false)),
            (std::vector<std::string>{"a.weight", "a.bias", "b.weight", "b.bias"}));
  EXPECT_EQ(twice.Parameters().size(), 2u);  // an optimizer built from it steps each tensor once
  EXPECT_EQ(twice.NamedModules().size(), 2u);
  EXPECT_EQ(twice.NamedModules(/*remove_duplicate=*/false).size(), 3u);
  EXPECT_EQ(Names(twice.GetStateDict()), (std::vector<std::string>{"a.weight", "a.bias", "b.weight", "b.bias"}));
  EXPECT_EQ(twice.Submodule("b"), lin.get());
  EXPECT_EQ(list.at(0), list.at(1));
  // d/dW of sum(W (W x + c) + c) = 1ᵀ ⊗ (W x + c) + (Wᵀ 1) ⊗ x, accumulated over both uses.
  const Tensor x = FromVector<float>({1.0f, -2.0f}, {1, 2});
  Backward(Sum(twice(x)));
  const std::vector<double> w = lin->Param("weight").ToDoubleVector(), c = lin->Param("bias").ToDoubleVector();
  const double h[2] = {w[0] * 1 - w[1] * 2 + c[0], w[2] * 1 - w[3] * 2 + c[1]};
  const double col[2] = {w[0] + w[2], w[1] + w[3]}, xs[2] = {1.0, -2.0};
  const std::vector<double> g = lin->Param("weight").grad().ToDoubleVector();
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) EXPECT_NEAR(g[i * 2 + j], h[j] + col[i] * xs[j], 1e-5) << i << "," << j;
  }
  // Replacing one of the list's two entries of `lin` changes that entry only.
  list.ReplaceChild("1", std::make_shared<Linear>(2, 3, true, gen));
  EXPECT_EQ(list.at(0), lin.get());
  EXPECT_NE(list.at(1), lin.get());
}

TEST(ModuleTest, ChildrenOutliveTheirParentAndCyclesAreRefused) {
  Generator gen(4);
  auto outer = std::make_unique<TwoLayer>(gen);
  std::shared_ptr<Module> l1 = outer->Submodule("l1")->shared_from_this();
  const Tensor w = l1->Param("weight");
  outer.reset();  // the child's other owner is gone; it stays whole
  EXPECT_EQ((*l1)(Ones({1, 3})).sizes(), (Shape{1, 4}));
  EXPECT_EQ(l1->Param("weight").impl(), w.impl());
  auto inner = std::make_shared<ModuleList>();
  auto top = std::make_shared<ModuleList>();
  top->Append(inner);
  testing::ExpectErrorContains(
      [&] { inner->Append(top); }, ErrorCode::kInvalidArgument,
      {"ModuleList: cannot register ModuleList as '0'", "the module is an ancestor of ModuleList"});
  testing::ExpectErrorContains([&] { inner->RegisterModule("self", inner); }, ErrorCode::kInvalidArgument,
                               {"a module cannot be its own child"});
  EXPECT_EQ(inner->size(), 0u);
}

TEST(ModuleTest, ParameterShapesNameEveryParameterOfTheBuiltModelWithItsShape) {
  int variants = 0;
  for (const char* mlp : {"gelu", "swiglu"}) {
    for (const char* norm : {"layernorm", "rmsnorm"}) {
      for (bool bias : {false, true}) {
        for (bool tie : {false, true}) {
          GPTConfig cfg{.vocab_size = 13, .d_model = 16, .n_layers = 2, .n_heads = 2, .seq_len = 5,
                        .mlp = mlp, .norm = norm, .bias = bias, .tie_embeddings = tie};
          Generator gen(0);
          GPT gpt(cfg, gen);
          std::map<std::string, Shape> built, planned;
          for (const auto& [fqn, p] : gpt.NamedParameters()) built[fqn] = p.sizes();
          for (const auto& [fqn, shape] : cfg.ParameterShapes()) planned[fqn] = shape;
          EXPECT_EQ(planned, built) << mlp << " " << norm << " bias " << bias << " tie " << tie;
          EXPECT_EQ(planned.size(), cfg.ParameterShapes().size()) << "duplicate names";
          ++variants;
        }
      }
    }
  }
  EXPECT_EQ(variants, 16);
}

TEST(ModuleTest, GptParameterNamesAndCountMatchTheConfig) {
  GPTConfig cfg{.vocab_size = 11, .d_model = 8, .n_layers = 2, .n_heads = 2, .seq_len = 5};
  Generator gen(0);
  GPT gpt(cfg, gen);
  const auto names = Names(gpt.NamedParameters());
  for (const char* want : {"wte.weight", "wpe.weight", "layers.0.ln1.weight", "layers.0.attn.wq.weight",
                           "layers.1.attn.wo.weight", "layers.1.mlp.fc.weight", "layers.1.mlp.proj.weight",
                           "ln_f.bias", "lm_head.weight"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
  int64_t total = 0;
  for (const auto& [k, p] : gpt.NamedParameters()) total += p.numel();
  EXPECT_EQ(total, cfg.NumParameters());
  GPTConfig tied = cfg;
  tied.tie_embeddings = true;
  tied.mlp = "swiglu";
  tied.norm = "rmsnorm";
  tied.bias = true;
  GPT g2(tied, gen);
  total = 0;
  for (const auto& [k, p] : g2.NamedParameters()) total += p.numel();
  EXPECT_EQ(total, tied.NumParameters());
  const auto names2 = Names(g2.NamedParameters());
  EXPECT_EQ(std::find(names2.begin(), names2.end(), "lm_head.weight"), names2.end());
}

TEST(ModuleTest, StateDictRoundTripReproducesOutputs) {
  Generator g1(1), g2(2);
  TwoLayer a(g1), b(g2);
  Tensor x = Randn({5, 3}, g1);
  EXPECT_NE(a(x).ToDoubleVector(), b(x).ToDoubleVector());
  const LoadResult r = b.LoadStateDict(a.GetStateDict());
  EXPECT_TRUE(r.missing_keys.empty() && r.unexpected_keys.empty());
  EXPECT_EQ(a(x).ToDoubleVector(), b(x).ToDoubleVector());
}

TEST(ModuleTest, LoadStateDictNamesMissingUnexpectedAndMismatchedKeys) {
  Generator gen(0);
  TwoLayer m(gen);
  StateDict sd = m.GetStateDict();
  sd.erase(sd.begin());                       // drop l1.weight
  sd.emplace_back("l3.weight", Zeros({1}));   // unexpected
  try {
    m.LoadStateDict(sd);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("missing keys: [l1.weight]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("unexpected keys: [l3.weight]"), std::string::npos) << e.what();
  }
  const LoadResult r = m.LoadStateDict(sd, /*strict=*/false);
  EXPECT_EQ(r.missing_keys, (std::vector<std::string>{"l1.weight"}));
  StateDict bad = {{"l1.bias", Zeros({7})}};
  try {
    m.LoadStateDict(bad, false);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("size mismatch for l1.bias"), std::string::npos) << e.what();
  }
}

TEST(ModuleTest, AComputedParameterFeedsTheLayersForwardOncePerCallAfterThePreHooks) {
  // torch.nn.utils.parametrize's mechanism: "weight" = 2 * raw, computed from a tensor the module does not
  // register; the C++ Linear's Forward reads it by name.
  Generator gen(3);
  Linear lin(3, 2, /*bias=*/true, gen);
  Tensor raw = Detach(lin.RemoveParameter("weight"));
  raw.set_requires_grad(true);
  int computed = 0;
  bool hook_ran = false;
  lin.RegisterForwardPreHook([&](Module&, TensorList&) { hook_ran = true; });
  lin.SetComputedParameter("weight", [&] {
    EXPECT_TRUE(hook_ran) << "computed before the forward pre-hooks";
    ++computed;
    return MulScalar(raw, 2.0);
  });
  EXPECT_EQ(Names(lin.NamedParameters()), std::vector<std::string>{"bias"});
  EXPECT_EQ(Names(lin.GetStateDict()), std::vector<std::string>{"bias"});
  EXPECT_TRUE(lin.HasComputedParameter("weight") && !lin.HasParam("weight"));
  EXPECT_EQ(lin.ComputedParameterNames(), std::vector<std::string>{"weight"});
  const Tensor x = FromVector<float>({1, 2, 3}, {1, 3});
  const Tensor y = lin(x);
  EXPECT_EQ(computed, 1);
  const std::vector<double> w = raw.ToDoubleVector(), b = lin.Param("bias").ToDoubleVector();
  for (int o = 0; o < 2; ++o) {
    const double want = 2 * (w[3 * o] * 1 + w[3 * o + 1] * 2 + w[3 * o + 2] * 3) + b[o];
    EXPECT_NEAR(y.ToDoubleVector()[o], want, 1e-5);
  }
  Backward(Sum(y));
  EXPECT_EQ(raw.grad().ToDoubleVector(), (std::vector<double>{2, 4, 6, 2, 4, 6}));  // d(2 raw · x)/d raw
  // Outside a call each access computes afresh; a null function removes it.
  lin.Param("weight");
  EXPECT_EQ(computed, 2);
  tessel::testing::ExpectErrorContains([&] { lin.SetComputedParameter("bias", [] { return Tensor(); }); },
                                       ErrorCode::kInvalidArgument, {"'bias' is a parameter, buffer or child"});
  lin.SetComputedParameter("weight", nullptr);
  tessel::testing::ExpectErrorContains([&] { lin.Param("weight"); }, ErrorCode::kNotFound, {"no parameter 'weight'"});
  tessel::testing::ExpectErrorContains([&] { lin.RemoveParameter("weight"); }, ErrorCode::kNotFound,
                                       {"no parameter 'weight'"});
}

TEST(ModuleTest, ForwardHooksCanRewriteInputsAndOutputs) {
  Generator gen(0);
  TwoLayer m(gen);
  Tensor x = Randn({2, 3}, gen);
  const auto base = m(x).ToDoubleVector();
  const auto doubled = m(MulScalar(x, 2.0)).ToDoubleVector();
  int pre = m.RegisterForwardPreHook([](Module&, TensorList& in) { in[0] = MulScalar(in[0], 2.0); });
  EXPECT_EQ(m(x).ToDoubleVector(), doubled);
  m.RemoveHook(pre);
  m.RegisterForwardHook([](Module&, const TensorList&, TensorList& out) { out[0] = MulScalar(out[0], 0.0); });
  EXPECT_EQ(m(x).ToDoubleVector(), std::vector<double>(base.size(), 0.0));
}

TEST(ModuleTest, PrependedHooksRunBeforeThoseAlreadyRegistered) {
  Generator gen(0);
  TwoLayer m(gen);
  Tensor x = Randn({2, 3}, gen);
  // (x + 1) · 2 without prepend, x · 2 + 1 with: the order is visible in the values, not only in a log.
  m.RegisterForwardPreHook([](Module&, TensorList& in) { in[0] = AddScalar(in[0], 1.0); });
  const int times = m.RegisterForwardPreHook([](Module&, TensorList& in) { in[0] = MulScalar(in[0], 2.0); },
                                             /*prepend=*/true);
  EXPECT_EQ(m(x).ToDoubleVector(), m.Forward({AddScalar(MulScalar(x, 2.0), 1.0)})[0].ToDoubleVector());
  m.RemoveHook(times);
  std::vector<std::string> order;
  for (const auto& [name, prepend] : {std::pair{"a", false}, {"b", true}, {"c", false}, {"d", true}}) {
    auto log = [&order, n = std::string(name)](Module&, const TensorList&, TensorList&) { order.push_back(n); };
    m.RegisterForwardHook(log, prepend);
  }
  m(x);
  EXPECT_EQ(order, (std::vector<std::string>{"d", "b", "a", "c"}));
}

TEST(ModuleTest, BackwardHooksReplaceGradientsAsTorchsReturnValues) {
  Generator gen(1);
  auto grads = [&](bool double_outputs, bool zero_inputs) {
    TwoLayer m(gen = Generator(1));
    if (double_outputs) {  // l2's backward (and so its weight's gradient and everything below) sees 2·g
      m.Submodule("l2")->RegisterFullBackwardPreHook([](Module&, const TensorList& g) -> std::optional<TensorList> {
        return TensorList{MulScalar(g[0], 2.0)};
      });
    }
    if (zero_inputs) {  // l2 passes nothing down to l1
      m.Submodule("l2")->RegisterFullBackwardHook(
          [](Module&, const TensorList& gin, const TensorList&) -> std::optional<TensorList> {
            return TensorList{ZerosLike(gin[0])};
          });
    }
    Tensor x = Randn({2, 3}, gen);
    x.set_requires_grad(true);
    Backward(Sum(m(x)));
    return std::make_pair(m.Submodule("l2")->Param("weight").grad().ToDoubleVector(),
                          m.Submodule("l1")->Param("weight").grad().ToDoubleVector());
  };
  const auto plain = grads(false, false), doubled = grads(true, false), cut = grads(false, true);
  for (size_t i = 0; i < plain.first.size(); ++i) EXPECT_DOUBLE_EQ(doubled.first[i], 2 * plain.first[i]);
  for (size_t i = 0; i < plain.second.size(); ++i) EXPECT_DOUBLE_EQ(doubled.second[i], 2 * plain.second[i]);
  EXPECT_EQ(cut.first, plain.first);
  for (double g : cut.second) EXPECT_EQ(g, 0.0);
  TwoLayer m(gen);
  m.Submodule("l2")->RegisterFullBackwardPreHook(
      [](Module&, const TensorList& g) -> std::optional<TensorList> { return TensorList{g[0], g[0]}; });
  Tensor x = Randn({2, 3}, gen);
  x.set_requires_grad(true);
  const Tensor y = Sum(m(x));
  testing::ExpectErrorContains([&] { Backward(y); }, ErrorCode::kInvalidArgument,
                               "Linear: the backward pre-hook returned 2 grad_output entries, expected 1");
}

TEST(ModuleTest, BackwardHooksFireInReverseLayerOrderWithGradients) {
  Generator gen(0);
  TwoLayer m(gen);
  std::vector<std::string> order;
  for (const char* name : {"l1", "l2"}) {
    Module* sub = m.Submodule(name);
    sub->RegisterFullBackwardPreHook([&order, name](Module&, const TensorList& g) -> std::optional<TensorList> {
      order.push_back(std::string("pre ") + name);
      EXPECT_TRUE(g[0].defined());
      return std::nullopt;
    });
    sub->RegisterFullBackwardHook(
        [&order, name](Module&, const TensorList& gin, const TensorList& gout) -> std::optional<TensorList> {
          order.push_back(std::string("post ") + name);
          EXPECT_EQ(gout.size(), 1u);
          if (std::string(name) == "l2") EXPECT_EQ(gin.at(0).sizes(), (Shape{2, 4}));
          return std::nullopt;
        });
  }
  Tensor x = Randn({2, 3}, gen);  // does not require grad: l1's backward hook fires with empty grad_inputs
  Tensor y = Sum(m(x));
  Backward(y);
  EXPECT_EQ(order, (std::vector<std::string>{"pre l2", "post l2", "pre l1", "post l1"}));
}

TEST(ModuleTest, RegisteringAnExistingBufferReplacesItInPlaceWithTheNewPersistence) {
  Generator gen(0);
  TwoLayer m(gen);
  m.RegisterBuffer("scale", Full({2}, 1.0f));
  m.RegisterBuffer("count", Full({1}, 3.0f), /*persistent=*/false);
  m.RegisterBuffer("scale", Full({2}, 5.0f), /*persistent=*/false);  // torch's register_buffer: a replacement
  const StateDict buffers = m.NamedBuffers(false);
  ASSERT_EQ(buffers.size(), 2u);
  EXPECT_EQ(buffers[0].first, "scale");  // where it was, not appended
  EXPECT_EQ(buffers[0].second.ToVector<float>(), (std::vector<float>{5.0f, 5.0f}));
  StateDict state = m.GetStateDict();
  const auto has = [&](const std::string& k) {
    return std::any_of(state.begin(), state.end(), [&](const auto& e) { return e.first == k; });
  };
  EXPECT_FALSE(has("scale"));  // now non-persistent
  m.RegisterBuffer("count", Full({1}, 4.0f), /*persistent=*/true);
  state = m.GetStateDict();
  EXPECT_TRUE(has("count"));
  EXPECT_EQ(m.NamedBuffers(false)[1].second.item<float>(), 4.0f);
}

TEST(ModuleTest, LedgerCountsParamsGradsAndOptimizerStateExactly) {
  DeviceGuard dg(Device::Cpu(60));
  const Device d = Device::Cpu(60);
  Generator gen(0);
  auto lin = std::make_unique<Linear>(4, 3, true, gen);
  const int64_t param_bytes = (4 * 3 + 3) * 4;
  EXPECT_EQ(memory::Stats(d)[memory::Ledger::kParams].live, param_bytes);
  Tensor x = Randn({2, 4}, gen);
  Backward(Sum((*lin)(x)));
  EXPECT_EQ(memory::Stats(d)[memory::Ledger::kGrads].live, param_bytes);
  optim::AdamW opt(lin->NamedParameters(), {});
  opt.Step();
  EXPECT_EQ(memory::Stats(d)[memory::Ledger::kOptimState].live, 2 * param_bytes);
  opt.ZeroGrad();
  EXPECT_EQ(memory::Stats(d)[memory::Ledger::kGrads].live, 0);
  EXPECT_EQ(memory::Stats(d)[memory::Ledger::kGrads].peak, param_bytes);
  EXPECT_EQ(memory::Stats(d)[memory::Ledger::kActivations].live, 0);
  EXPECT_GT(memory::Stats(d)[memory::Ledger::kActivations].peak, 0);
}

}  // namespace
}  // namespace tessel::nn
