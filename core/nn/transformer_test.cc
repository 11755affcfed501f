#include "core/nn/transformer.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "core/base/testing/expect_error.h"
#include "core/nn/layers.h"
#include "core/ops/matmul.h"
#include "core/ops/reduction.h"
#include "core/ops/unary.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::nn {
namespace {

GPTConfig Tiny(DType dtype = DType::kFloat64) {
  return GPTConfig{.vocab_size = 7, .d_model = 8, .n_layers = 1, .n_heads = 2, .seq_len = 4, .dtype = dtype,
                   .init_std = 0.3};
}

TEST(TransformerTest, GptLogitsHaveShapeBTVAndInitialLossNearLogV) {
  GPTConfig cfg{.vocab_size = 32, .d_model = 16, .n_layers = 2, .n_heads = 4, .seq_len = 8};
  Generator gen(0);
  GPT gpt(cfg, gen);
  Tensor idx = Randint(0, 32, std::vector<int64_t>{3, 8}, gen);
  EXPECT_EQ(gpt(idx).sizes(), (Shape{3, 8, 32}));
  const double loss = gpt.Loss(idx, idx).item<double>();
  EXPECT_NEAR(loss, std::log(32.0), 0.1);
}

TEST(TransformerTest, LogitsAtEarlierPositionsIgnoreLaterTokens) {
  Generator gen(3);
  GPT gpt(Tiny(), gen);
  Tensor a = FromVector<int64_t>({1, 2, 3, 4}, {1, 4});
  Tensor b = FromVector<int64_t>({1, 2, 6, 0}, {1, 4});
  const auto la = gpt(a).ToDoubleVector(), lb = gpt(b).ToDoubleVector();
  for (int i = 0; i < 2 * 7; ++i) EXPECT_EQ(la[i], lb[i]) << i;      // positions 0, 1 identical
  bool differs = false;
  for (int i = 2 * 7; i < 4 * 7; ++i) differs = differs || la[i] != lb[i];
  EXPECT_TRUE(differs);
}

// Every parameter's gradient of the whole model against central finite differences (float64).
void CheckGptGradients(const GPTConfig& cfg) {
  Generator gen(5);
  GPT gpt(cfg, gen);
  Tensor idx = FromVector<int64_t>({1, 2, 3, 4, 0, 6, 5, 1}, {2, 4});
  Tensor tgt = FromVector<int64_t>({2, 3, 4, 5, 6, 5, 1, 0}, {2, 4});
  Backward(gpt.Loss(idx, tgt));
  const double eps = 1e-6;
  for (auto& [fqn, p] : gpt.NamedParameters()) {
    SCOPED_TRACE(fqn);
    ASSERT_TRUE(p.grad().defined());
    const auto g = p.grad().ToDoubleVector();
    double* data = p.data_ptr<double>();
    for (int64_t i = 0; i < p.numel(); i += 3) {  // every third element keeps the test fast
      const double orig = data[i];
      NoGradGuard ng;
      data[i] = orig + eps;
      const double plus = gpt.Loss(idx, tgt).item<double>();
      data[i] = orig - eps;
      const double minus = gpt.Loss(idx, tgt).item<double>();
      data[i] = orig;
      const double numeric = (plus - minus) / (2 * eps);
      EXPECT_NEAR(g[i], numeric, 1e-6 + 1e-5 * std::abs(numeric)) << "element " << i;
    }
  }
}

TEST(TransformerTest, GptGradientsMatchFiniteDifferences) { CheckGptGradients(Tiny()); }

TEST(TransformerTest, SwigluRmsnormTiedGptGradientsMatchFiniteDifferences) {
  GPTConfig cfg = Tiny();
  cfg.mlp = "swiglu";
  cfg.norm = "rmsnorm";
  cfg.tie_embeddings = true;
  cfg.bias = true;
  CheckGptGradients(cfg);
}

// The GELU MLP runs fc as one linear_gelu op (fc's own forward, so its hooks wrap it), keeps the module
// tree and parameter names, and gives the unfused proj(gelu(fc(x))) bit for bit, gradients included.
TEST(TransformerTest, GeluMlpFusesGeluIntoFcAndEqualsTheUnfusedMlpBitForBit) {
  Generator gen(5);
  MLP mlp(16, 64, "gelu", /*bias=*/true, gen, 0.3, DType::kFloat32);
  std::vector<std::string> names;
  for (const auto& [fqn, p] : mlp.NamedParameters()) names.push_back(fqn);
  EXPECT_EQ(names, (std::vector<std::string>{"fc.weight", "fc.bias", "proj.weight", "proj.bias"}));
  auto* fc = dynamic_cast<Linear*>(mlp.Submodule("fc"));
  ASSERT_NE(fc, nullptr);
  EXPECT_EQ(fc->fused_gelu(), "tanh");
  Tensor fc_out;
  int fc_calls = 0;
  fc->RegisterForwardHook([&](Module&, const TensorList&, TensorList& out) {
    ++fc_calls;
    fc_out = out.at(0);
  });
  const Tensor x = Randn({3, 5, 16}, gen).set_requires_grad(true);
  const Tensor y = mlp(x);
  EXPECT_EQ(fc_calls, 1);
  const Tensor w1 = Detach(fc->Param("weight")).set_requires_grad(true), b1 = Detach(fc->Param("bias"));
  const Tensor w2 = Detach(mlp.Submodule("proj")->Param("weight")), b2 = Detach(mlp.Submodule("proj")->Param("bias"));
  const Tensor x2 = Detach(x).set_requires_grad(true);
  const Tensor h = Gelu(tessel::Linear(x2, w1, b1), "tanh");
  const Tensor want = tessel::Linear(h, w2, b2);
  auto bits = [](const Tensor& t) { return t.ToDoubleVector(); };
  EXPECT_EQ(bits(fc_out), bits(h));  // the hook sees the activation: fc's output is gelu(x · wᵀ + b)
  EXPECT_EQ(bits(y), bits(want));
  const Tensor g = Randn(y.sizes(), gen);
  Backward(y, g);
  Backward(want, g);
  EXPECT_EQ(bits(x.grad()), bits(x2.grad()));
  EXPECT_EQ(bits(fc->Param("weight").grad()), bits(w1.grad()));
  testing::ExpectErrorContains([&] { fc->set_fused_gelu("relu"); }, ErrorCode::kInvalidArgument,
                      {"Linear.set_fused_gelu: approximate must be 'tanh', 'none' or '' (off), got 'relu'"});
}

TEST(TransformerTest, BadConfigsRaiseNamedErrors) {
  Generator gen(0);
  GPTConfig cfg = Tiny();
  cfg.n_heads = 3;
  try {
    GPT g(cfg, gen);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not divisible by n_heads 3"), std::string::npos) << e.what();
  }
  GPT ok(Tiny(), gen);
  try {
    ok(Zeros({1, 9}, DType::kInt64));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds seq_len 4"), std::string::npos) << e.what();
  }
}

TEST(GPTConfigTest, HugeVocabRaisesInsteadOfWrapping) {
  GPTConfig cfg{.vocab_size = (int64_t{1} << 62) + 1, .d_model = 256, .n_layers = 1, .n_heads = 8, .seq_len = 8};
  testing::ExpectErrorContains([&] { cfg.NumParameters(); }, ErrorCode::kInvalidArgument,
                               {"'wte.weight'", "[4611686018427387905, 256]", "overflows int64"});
  testing::ExpectErrorContains([&] { cfg.ParameterShapes(); }, ErrorCode::kInvalidArgument, "'wte.weight'");
  const int64_t before = memory::Stats(Device::Cpu()).total.live;
  Generator gen(0);
  testing::ExpectErrorContains([&] { GPT model(cfg, gen); }, ErrorCode::kInvalidArgument, "'wte.weight'");
  EXPECT_EQ(memory::Stats(Device::Cpu()).total.live, before);  // raised before allocating anything
}

TEST(GPTConfigTest, TotalBytesOverflowAndNonPositiveSizesRaise) {
  // Each parameter fits (wte and lm_head are 2^62 bytes each), their sum does not.
  GPTConfig cfg{.vocab_size = int64_t{1} << 57, .d_model = 8, .n_layers = 1, .n_heads = 2, .seq_len = 8};
  EXPECT_EQ(cfg.ParameterShapes().front().second, (Shape{int64_t{1} << 57, 8}));
  Generator gen(0);
  testing::ExpectErrorContains([&] { cfg.Validate(); }, ErrorCode::kInvalidArgument, "overflows int64");
  GPTConfig bad{.vocab_size = 8, .d_model = 8, .n_layers = 1, .n_heads = 2, .seq_len = -4};
  testing::ExpectErrorContains([&] { GPT model(bad, gen); }, ErrorCode::kInvalidArgument,
                               "seq_len must be positive, got -4");
}

}  // namespace
}  // namespace tessel::nn
