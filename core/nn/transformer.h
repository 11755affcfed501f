// core/nn/transformer.h — MLP (GELU or SwiGLU), CausalSelfAttention, TransformerBlock (pre-LN) and GPT.
//
// Shape legend: B = batch, T = sequence (≤ seq_len), C = d_model, H = heads, D = C / H (head dim),
// V = vocab, F = MLP hidden width (4C for GELU).
// Parameter FQNs follow the layout fully_shard/parallelize recipes address:
//   wte.weight [V, C], wpe.weight [seq_len, C], layers.{i}.ln1.{weight,bias}, layers.{i}.attn.{wq,wk,wv,wo}.weight
//   [C, C], layers.{i}.ln2.*, layers.{i}.mlp.{fc,proj}.weight (GELU) or mlp.{w1,w3,w2}.weight (SwiGLU),
//   ln_f.*, lm_head.weight [V, C] (absent when tie_embeddings: the head reuses wte.weight).
// Invariant: the model is written for plain tensors only; TP/FSDP attach from outside.
//
// [Note: GPT pipeline stages] A pipeline stage is a GPT with children removed (Module::RemoveChild, the
// way torchtitan's pipeline_module_split deletes what a stage does not own; pipelining/model_split.h does
// the cutting). Every stage is built from the full model with the same seed, so the parameters it keeps
// have the full model's FQNs ("layers.2.attn.wq.weight") and initial values. What Forward reads and
// returns follows from what the stage holds:
//   wte (and wpe) present → input is int64 token ids [B, T]; otherwise hidden states [B, T, C];
//   ln_f present → applied; lm_head present (or tied wte) → output logits [B, T, V]; else hidden [B, T, C].
// Tied embeddings need wte and the head in one module; a stage holding ln_f but no way to the head is
// rejected at Forward (kFailedPrecondition), and the splitter rejects tied embeddings across stages.
//
// Example:
//   GPTConfig cfg{.vocab_size = 256, .d_model = 64, .n_layers = 2, .n_heads = 4, .seq_len = 32};
//   Generator gen(0);
//   GPT model(cfg, gen);
//   Tensor logits_BTV = model(idx_BT);
//   Tensor loss = model.Loss(idx_BT, targets_BT);
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/nn/layers.h"

namespace tessel::nn {

struct GPTConfig {
  int64_t vocab_size = 256;
  int64_t d_model = 256;
  int64_t n_layers = 4;
  int64_t n_heads = 8;
  int64_t seq_len = 128;
  std::string mlp = "gelu";  // "gelu" (4C hidden, tanh approximation like GPT-2) or "swiglu"
  std::string norm = "layernorm";  // or "rmsnorm"
  bool bias = false;              // biases in Linear layers
  bool tie_embeddings = false;
  DType dtype = DType::kFloat32;
  double init_std = 0.02;
  // Exact count for this config (what the ledger test checks); kInvalidArgument if it overflows int64.
  int64_t NumParameters() const;
  // Every parameter's FQN and shape, as GPT(cfg) names them, computed without building the model
  // (for planners: a config too large to allocate still has a plan). kInvalidArgument naming the FQN
  // and shape when a parameter's element or byte count overflows int64.
  std::vector<std::pair<std::string, Shape>> ParameterShapes() const;
  // Sizes positive and every count (per parameter and in total, elements and bytes) inside int64;
  // GPT's constructor calls it before allocating anything.
  void Validate() const;
  int64_t MlpHidden() const;  // 4C for "gelu"; 8C/3 rounded up to a multiple of 64 for "swiglu"
};

class MLP final : public Module {
 public:
  MLP(int64_t d_model, int64_t hidden, const std::string& activation, bool bias, Generator& gen, double init_std,
      DType dtype);
  TensorList Forward(const TensorList& inputs) override;  // [B, T, C] → [B, T, C]

 private:
  bool swiglu_;
};

class CausalSelfAttention final : public Module {
 public:
  CausalSelfAttention(int64_t d_model, int64_t n_heads, bool bias, Generator& gen, double init_std, DType dtype);
  TensorList Forward(const TensorList& inputs) override;  // [B, T, C] → [B, T, C]
  int64_t n_heads() const { return n_heads_; }

 private:
  int64_t n_heads_;
};

class TransformerBlock final : public Module {
 public:
  TransformerBlock(const GPTConfig& cfg, Generator& gen);
  TensorList Forward(const TensorList& inputs) override;  // x + attn(ln1(x)), then + mlp(ln2(.))
};

// Mean cross-entropy of next-token prediction: logits [B, T, V] against targets [B, T] (what GPT::Loss and
// the pipeline's last stage compute).
Tensor TokenCrossEntropy(const Tensor& logits_BTV, const Tensor& targets_BT);

class GPT final : public Module {
 public:
  GPT(const GPTConfig& cfg, Generator& gen);
  // idx int64 [B, T] → logits [B, T, V]; a pipeline stage maps as [Note: GPT pipeline stages] says.
  TensorList Forward(const TensorList& inputs) override;
  // Mean cross-entropy of next-token prediction (the whole model only).
  Tensor Loss(const Tensor& idx_BT, const Tensor& targets_BT);
  const GPTConfig& config() const { return cfg_; }
  ModuleList& layers() { return *layers_; }

 private:
  GPTConfig cfg_;
  ModuleList* layers_;
};

}  // namespace tessel::nn
