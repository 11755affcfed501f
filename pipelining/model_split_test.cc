// pipelining/model_split_test.cc — stage modules keep full-model FQNs and values, and chained stage
// forwards give the full model's logits bitwise.
#include "pipelining/model_split.h"

#include <gtest/gtest.h>

#include "core/base/testing/expect_error.h"
#include "core/tensor/random.h"

namespace tessel::pipelining {
namespace {

using testing::ExpectErrorContains;

nn::GPTConfig Config(int64_t n_layers) {
  return {.vocab_size = 19, .d_model = 16, .n_layers = n_layers, .n_heads = 2, .seq_len = 6, .bias = true};
}

std::function<std::unique_ptr<nn::Module>()> Maker(const nn::GPTConfig& cfg, uint64_t seed) {
  return [cfg, seed] {
    Generator g(seed);
    return std::make_unique<nn::GPT>(cfg, g);
  };
}

std::vector<std::string> Fqns(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [fqn, t] : m.NamedParameters()) out.push_back(fqn);
  return out;
}

TEST(ModelSplitTest, GptNamesSplitLayersEvenlyEarlierStagesTakeTheRemainder) {
  const ModuleNamesPerStage names = GPTStageModuleNames(Config(5), 2);
  EXPECT_EQ(names[0], (std::vector<std::string>{"wte", "wpe", "layers.0", "layers.1", "layers.2"}));
  EXPECT_EQ(names[1], (std::vector<std::string>{"layers.3", "layers.4", "ln_f", "lm_head"}));
  const ModuleNamesPerStage three = GPTStageModuleNames(Config(4), 3);
  EXPECT_EQ(three[1], (std::vector<std::string>{"layers.2"}));
}

TEST(ModelSplitTest, StagesKeepFullModelFqnsAndInitialValues) {
  const nn::GPTConfig cfg = Config(4);
  for (int num_stages : {1, 2, 4}) {
    SCOPED_TRACE(num_stages);
    std::unique_ptr<nn::Module> full = Maker(cfg, 7)();
    const nn::StateDict full_params = full->NamedParameters();
    const ModuleNamesPerStage names = GPTStageModuleNames(cfg, num_stages);
    size_t next = 0;  // stages hold consecutive runs of the full model's parameter list
    for (int s = 0; s < num_stages; ++s) {
      std::unique_ptr<nn::Module> stage = PipelineModuleSplit(Maker(cfg, 7), names, s);
      for (const auto& [fqn, p] : stage->NamedParameters()) {
        ASSERT_LT(next, full_params.size());
        EXPECT_EQ(fqn, full_params[next].first);
        EXPECT_EQ(p.ToVector<float>(), full_params[next].second.ToVector<float>()) << fqn;
        ++next;
      }
    }
    EXPECT_EQ(next, full_params.size());
  }
  std::unique_ptr<nn::Module> middle = PipelineModuleSplit(Maker(cfg, 7), GPTStageModuleNames(cfg, 4), 2);
  const std::vector<std::string> fqns = Fqns(*middle);
  EXPECT_EQ(fqns.front(), "layers.2.ln1.weight");
  EXPECT_NE(std::find(fqns.begin(), fqns.end(), "layers.2.attn.wq.weight"), fqns.end());
  EXPECT_EQ(static_cast<nn::GPT*>(middle.get())->layers().size(), 1u);
}

TEST(ModelSplitTest, ChainedStageForwardsEqualFullLogitsBitwise) {
  const nn::GPTConfig cfg = Config(4);
  Generator data(3);
  Tensor idx = Randint(0, cfg.vocab_size, std::vector<int64_t>{3, 6}, data);
  const std::vector<float> want = (*Maker(cfg, 11)())(idx).ToVector<float>();
  for (int num_stages : {2, 3, 4}) {
    SCOPED_TRACE(num_stages);
    const ModuleNamesPerStage names = GPTStageModuleNames(cfg, num_stages);
    Tensor x = idx;
    for (int s = 0; s < num_stages; ++s) {
      std::unique_ptr<nn::Module> stage = PipelineModuleSplit(Maker(cfg, 11), names, s);
      x = (*stage)(x);
      if (s + 1 < num_stages) EXPECT_EQ(x.sizes(), (Shape{3, 6, 16}));  // hidden states between stages
    }
    EXPECT_EQ(x.ToVector<float>(), want);
  }
}

TEST(ModelSplitTest, TiedEmbeddingsAcrossStagesAreUnimplemented) {
  nn::GPTConfig cfg = Config(2);
  cfg.tie_embeddings = true;
  EXPECT_EQ(GPTStageModuleNames(cfg, 1)[0].back(), "ln_f");  // one stage: the head reuses wte
  ExpectErrorContains([&] { GPTStageModuleNames(cfg, 2); }, ErrorCode::kUnimplemented,
                      {"tie_embeddings", "2 pipeline stages"});
  // A hand-made split that separates wte from the head fails at forward, not silently.
  std::unique_ptr<nn::Module> last = PipelineModuleSplit(Maker(cfg, 1), {{"wte", "wpe", "layers.0"},
                                                                         {"layers.1", "ln_f"}}, 1);
  Generator g(0);
  ExpectErrorContains([&] { (*last)(Randn({1, 2, 16}, g)); }, ErrorCode::kFailedPrecondition, "does not hold wte");
}

TEST(ModelSplitTest, BadSplitsAreRejected) {
  const nn::GPTConfig cfg = Config(2);
  ExpectErrorContains([&] { PipelineModuleSplit(Maker(cfg, 1), {{"wte", "layers.0"}, {"layers", "ln_f"}}, 0); },
                      ErrorCode::kInvalidArgument, {"'layers' (stage 1) overlaps 'layers.0' (stage 0)"});
  ExpectErrorContains([&] { PipelineModuleSplit(Maker(cfg, 1), {{"wte", "layers.7"}}, 0); }, ErrorCode::kNotFound,
                      "'7'");
  ExpectErrorContains([&] { PipelineModuleSplit(Maker(cfg, 1), {{"wte"}}, 1); }, ErrorCode::kInvalidArgument,
                      "stage 1 out of range for 1 stages");
  ExpectErrorContains([&] { GPTStageModuleNames(cfg, 3); }, ErrorCode::kInvalidArgument,
                      "3 stages for a GPT of 2 layers");
  auto with_root_param = [] {
    Generator g(0);
    auto m = std::make_unique<nn::ModuleList>();
    m->Append(std::make_unique<nn::Linear>(2, 2, false, g));
    m->RegisterParameter("scale", Randn({2}, g));
    return std::unique_ptr<nn::Module>(std::move(m));
  };
  ExpectErrorContains([&] { PipelineModuleSplit(with_root_param, {{"0"}}, 0); }, ErrorCode::kInvalidArgument,
                      {"root ModuleList registers parameter 'scale'", "every stage would hold"});
}

TEST(ModelSplitTest, MiddleStageRejectsTokenIdsWithItsExpectedShape) {
  const nn::GPTConfig cfg = Config(3);
  std::unique_ptr<nn::Module> middle = PipelineModuleSplit(Maker(cfg, 1), GPTStageModuleNames(cfg, 3), 1);
  Generator g(0);
  ExpectErrorContains([&] { (*middle)(Randint(0, 5, std::vector<int64_t>{2, 6}, g)); }, ErrorCode::kInvalidArgument,
                      {"expected hidden states [B, T, 16]", "[2, 6]"});
}

}  // namespace
}  // namespace tessel::pipelining
