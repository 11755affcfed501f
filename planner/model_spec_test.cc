// planner/model_spec_test.cc — ModelSpec lists nn::GPT's parameters exactly, and the presets have the
// published parameter counts.
#include "planner/model_spec.h"

#include <gtest/gtest.h>

#include "core/base/testing/expect_error.h"

namespace tessel::planner {
namespace {

TEST(ModelSpecTest, FromGptConfigListsExactlyTheParametersNnGptNames) {
  std::vector<nn::GPTConfig> configs = {
      {.vocab_size = 61, .d_model = 32, .n_layers = 2, .n_heads = 2, .seq_len = 16},
      {.vocab_size = 256, .d_model = 64, .n_layers = 3, .n_heads = 4, .seq_len = 32, .mlp = "swiglu",
       .norm = "rmsnorm"},
      {.vocab_size = 100, .d_model = 48, .n_layers = 1, .n_heads = 3, .seq_len = 8, .bias = true,
       .tie_embeddings = true},
  };
  for (const nn::GPTConfig& cfg : configs) {
    SCOPED_TRACE(cfg.mlp + " " + cfg.norm);
    const ModelSpec spec = FromGptConfig(cfg);
    EXPECT_EQ(spec.ParameterShapes(), cfg.ParameterShapes());
    EXPECT_EQ(spec.NumParameters(), cfg.NumParameters());
    ASSERT_TRUE(spec.gpt.has_value());
  }
}

TEST(ModelSpecTest, PresetsHaveThePublishedParameterCounts) {
  // LLaMA-7B: embeddings and head 2·32000·4096 = 262,144,000; per block attention 4·4096² =
  // 67,108,864, SwiGLU 3·4096·11008 = 135,266,304, two RMSNorms 8,192 → 202,383,360, times 32 =
  // 6,476,267,520; final norm 4,096. Total 6,738,415,616 (the paper's "6.7B").
  EXPECT_EQ(ModelPreset("llama-7b").NumParameters(), 6'738'415'616);
  // LLaMA-13B: 2·32000·5120 = 327,680,000; per block 4·5120² + 3·5120·13824 + 2·5120 = 317,204,480,
  // times 40 = 12,688,179,200; + 5,120 → 13,015,864,320.
  EXPECT_EQ(ModelPreset("llama-13b").NumParameters(), 13'015'864'320);
  // GPT-2 small: wte 50257·768 + wpe 1024·768 + 12 blocks of (2 LayerNorms 4·768, attention
  // 4·(768² + 768), MLP 2·768·3072 + 3072 + 768) + ln_f 2·768 = 124,439,808 (tied head).
  EXPECT_EQ(ModelPreset("gpt2-small").NumParameters(), 124'439'808);
  // The main job's default model is nn::GPT of examples/gpt/train.cc's defaults.
  const nn::GPTConfig tessel{.vocab_size = 256, .d_model = 128, .n_layers = 4, .n_heads = 4, .seq_len = 64};
  EXPECT_EQ(ModelPreset("tessel-gpt").NumParameters(), tessel.NumParameters());
}

TEST(ModelSpecTest, UnknownPresetNamesTheKnownOnes) {
  testing::ExpectErrorContains([] { ModelPreset("llama-70b"); }, ErrorCode::kInvalidArgument,
                               {"unknown model preset 'llama-70b'", "gpt2-small, llama-7b, llama-13b, tessel-gpt"});
}

TEST(ModelSpecTest, BlockOfReadsTheLayerIndex) {
  EXPECT_EQ(BlockOf("layers.12.attn.wq.weight"), 12);
  EXPECT_EQ(BlockOf("wte.weight"), -1);
  EXPECT_EQ(BlockOf("ln_f.weight"), -1);
}

}  // namespace
}  // namespace tessel::planner
