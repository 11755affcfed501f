// planner/model_spec.h — ModelSpec: the shapes of a decoder-only transformer the planner needs, for
// configs too large to allocate (LLaMA-7B) as well as any nn::GPTConfig, plus named presets.
//
// Invariant: ParameterShapes() lists every parameter with the FQN and shape nn::GPT would give it;
// for FromGptConfig(cfg) it equals cfg.ParameterShapes() element by element (model_spec_test.cc).
// Presets beyond nn::GPT's reach (LLaMA's rotary positions, an 11008-wide SwiGLU) only change the
// list (no wpe, another F), never the FQN scheme.
//
// Example:
//   ModelSpec llama = ModelPreset("llama-7b");   // 6,738,415,616 parameters
//   ModelSpec tiny = FromGptConfig(nn::GPTConfig{.vocab_size = 256, .d_model = 64});
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/nn/transformer.h"
#include "core/tensor/shape.h"

namespace tessel::planner {

struct ModelSpec {
  std::string name = "custom";
  int64_t vocab_size = 256;
  int64_t d_model = 256;  // h
  int64_t n_layers = 4;   // L
  int64_t n_heads = 8;    // a
  int64_t ffn_hidden = 1024;  // F: the MLP's hidden width
  int64_t max_seq_len = 128;  // rows of wpe when learned_positions
  bool swiglu = false;        // w1, w3, w2 (LLaMA) instead of fc, proj (GPT-2)
  bool rmsnorm = false;       // no norm bias
  bool bias = false;          // biases in Linear layers
  bool tie_embeddings = false;
  bool learned_positions = true;  // wpe.weight [max_seq_len, h]; false: rotary (no parameter)
  // Activations (planner/activations.h): flash attention saves no [s, s] score matrix; dropout saves
  // one 1-byte mask per dropout (Korthikanti et al. 2022 count three per layer); `saved` says whose
  // set of saved tensors to count: the paper's, or exactly what tessel's ops keep (FromGptConfig).
  bool flash_attention = false;
  bool dropout = false;
  enum class SavedTensors { kKorthikanti, kTessel };
  SavedTensors saved = SavedTensors::kKorthikanti;
  // Set by FromGptConfig: the config itself, so the FSDP-exact plan (planner/memory_plan.h) applies.
  std::optional<nn::GPTConfig> gpt;

  std::vector<std::pair<std::string, Shape>> ParameterShapes() const;
  int64_t NumParameters() const;
  // kInvalidArgument naming the field: every size >= 1, d_model divisible by n_heads, at most kMaxLayers layers,
  // and the parameter count (and its bytes at 16 per parameter) inside int64. Verify and the Python face call it.
  void Validate() const;
  static constexpr int64_t kMaxLayers = 1 << 16;
};

// The spec of nn::GPT(cfg): ffn_hidden = cfg.MlpHidden(), learned positions, no dropout, and tessel's
// saved tensors (its attention saves only the log-sum-exp, like flash attention).
ModelSpec FromGptConfig(const nn::GPTConfig& cfg);

// "gpt2-small" (124M, GPT-2's 50257 vocab, tied embeddings, biases, dropout), "llama-7b", "llama-13b"
// (SwiGLU 11008 / 13824, RMSNorm, rotary, untied head, flash attention), "tessel-gpt" (the main job's
// default model, examples/gpt/train.cc). Throws kInvalidArgument naming the presets for any other name.
ModelSpec ModelPreset(const std::string& name);
std::vector<std::string> ModelPresetNames();

// The transformer block index of a parameter FQN ("layers.{i}.…"), or -1 for the root's parameters.
int BlockOf(const std::string& fqn);

}  // namespace tessel::planner
