// core/nn/transformer.cc — MLP, CausalSelfAttention, TransformerBlock, GPT.
#include "core/nn/transformer.h"

#include "core/base/error.h"
#include "core/ops/attention.h"
#include "core/ops/elementwise.h"
#include "core/ops/loss.h"
#include "core/ops/matmul.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"
#include "core/tensor/factory.h"

namespace tessel::nn {
namespace {

std::unique_ptr<Module> MakeNorm(const GPTConfig& cfg) {
  if (cfg.norm == "rmsnorm") return std::make_unique<RMSNorm>(cfg.d_model, 1e-6, cfg.dtype);
  TESSEL_CHECK(cfg.norm == "layernorm", "GPTConfig.norm must be 'layernorm' or 'rmsnorm', got '", cfg.norm, "'");
  return std::make_unique<LayerNorm>(cfg.d_model, 1e-5, true, cfg.dtype);
}

}  // namespace

int64_t GPTConfig::MlpHidden() const {
  if (mlp != "swiglu") return CheckedMul(4, d_model, "GPTConfig: MLP hidden width 4 * d_model");
  return ((CheckedMul(8, d_model, "GPTConfig: SwiGLU hidden width 8 * d_model") / 3 + 63) / 64) * 64;
}

void GPTConfig::Validate() const {
  for (const auto& [name, v] : {std::pair<const char*, int64_t>{"vocab_size", vocab_size}, {"d_model", d_model},
                                {"n_layers", n_layers}, {"n_heads", n_heads}, {"seq_len", seq_len}}) {
    TESSEL_CHECK(v > 0 || (v == 0 && std::string_view(name) == "n_layers"), "GPTConfig: ", name,
                 " must be positive, got ", v);
  }
  // Element and byte counts of every parameter, and of all of them together, must fit in int64:
  // ParameterShapes checks each shape, the sum is checked here.
  int64_t bytes = 0;
  for (const auto& [fqn, shape] : ParameterShapes()) {
    bytes = CheckedAdd(bytes, NumBytes(shape, ElementSize(dtype)), "GPTConfig: total parameter bytes");
  }
}

std::vector<std::pair<std::string, Shape>> GPTConfig::ParameterShapes() const {
  const int64_t C = d_model, F = MlpHidden();
  std::vector<std::pair<std::string, Shape>> out;
  auto norm_params = [&](const std::string& prefix) {
    out.push_back({prefix + ".weight", {C}});
    if (norm != "rmsnorm") out.push_back({prefix + ".bias", {C}});
  };
  auto linear = [&](const std::string& prefix, int64_t in, int64_t out_features, bool with_bias) {
    out.push_back({prefix + ".weight", {out_features, in}});
    if (with_bias) out.push_back({prefix + ".bias", {out_features}});
  };
  out.push_back({"wte.weight", {vocab_size, C}});
  out.push_back({"wpe.weight", {seq_len, C}});
  for (int64_t i = 0; i < n_layers; ++i) {
    const std::string l = Str("layers.", i);
    norm_params(l + ".ln1");
    for (const char* w : {"wq", "wk", "wv", "wo"}) linear(Str(l, ".attn.", w), C, C, bias);
    norm_params(l + ".ln2");
    if (mlp == "swiglu") {
      linear(l + ".mlp.w1", C, F, bias);
      linear(l + ".mlp.w3", C, F, bias);
      linear(l + ".mlp.w2", F, C, bias);
    } else {
      linear(l + ".mlp.fc", C, F, bias);
      linear(l + ".mlp.proj", F, C, bias);
    }
  }
  norm_params("ln_f");
  if (!tie_embeddings) linear("lm_head", C, vocab_size, false);
  for (const auto& [fqn, shape] : out) {
    try {
      NumBytes(shape, ElementSize(dtype));
    } catch (const Error& e) {
      TESSEL_FAIL(ErrorCode::kInvalidArgument, "GPTConfig: parameter '", fqn, "' of shape ", ShapeStr(shape),
                  " is too large: ", e.what());
    }
  }
  return out;
}

int64_t GPTConfig::NumParameters() const {
  int64_t n = 0;
  for (const auto& [fqn, shape] : ParameterShapes()) n = CheckedAdd(n, NumElements(shape), "GPTConfig.NumParameters");
  return n;
}

MLP::MLP(int64_t d_model, int64_t hidden, const std::string& activation, bool bias, Generator& gen,
         double init_std, DType dtype)
    : Module("MLP"), swiglu_(activation == "swiglu") {
  TESSEL_CHECK(activation == "gelu" || activation == "swiglu", "MLP: activation must be 'gelu' or 'swiglu', got '",
               activation, "'");
  if (swiglu_) {
    RegisterModule("w1", std::make_unique<Linear>(d_model, hidden, bias, gen, init_std, dtype));
    RegisterModule("w3", std::make_unique<Linear>(d_model, hidden, bias, gen, init_std, dtype));
    RegisterModule("w2", std::make_unique<Linear>(hidden, d_model, bias, gen, init_std, dtype));
  } else {
    // fc applies the GELU itself (one linear_gelu op, GELU in the GEMM epilogue), as its own forward, so
    // hooks on fc (FSDP, TP) wrap the fused op exactly as they wrapped the linear.
    auto fc = std::make_unique<Linear>(d_model, hidden, bias, gen, init_std, dtype);
    fc->set_fused_gelu("tanh");
    RegisterModule("fc", std::move(fc));
    RegisterModule("proj", std::make_unique<Linear>(hidden, d_model, bias, gen, init_std, dtype));
  }
}

TensorList MLP::Forward(const TensorList& in) {
  const Tensor& x_BTC = in.at(0);
  if (swiglu_) {
    Tensor h_BTF = Mul(Silu((*Submodule("w1"))(x_BTC)), (*Submodule("w3"))(x_BTC));
    return {(*Submodule("w2"))(h_BTF)};
  }
  Tensor h_BTF = (*Submodule("fc"))(x_BTC);  // gelu(fc(x)), fused (see the constructor)
  return {(*Submodule("proj"))(h_BTF)};
}

CausalSelfAttention::CausalSelfAttention(int64_t d_model, int64_t n_heads, bool bias, Generator& gen,
                                         double init_std, DType dtype)
    : Module("CausalSelfAttention"), n_heads_(n_heads) {
  TESSEL_CHECK(n_heads > 0 && d_model % n_heads == 0, "CausalSelfAttention: d_model ", d_model,
               " is not divisible by n_heads ", n_heads);
  for (const char* name : {"wq", "wk", "wv", "wo"}) {
    RegisterModule(name, std::make_unique<Linear>(d_model, d_model, bias, gen, init_std, dtype));
  }
}

TensorList CausalSelfAttention::Forward(const TensorList& in) {
  const Tensor& x_BTC = in.at(0);
  TESSEL_CHECK(x_BTC.dim() == 3, "CausalSelfAttention: expected [B, T, C], got ", ShapeStr(x_BTC.sizes()));
  const int64_t B = x_BTC.size(0), T = x_BTC.size(1), C = x_BTC.size(2);
  // Under tensor parallelism wq/wk/wv are column-sharded, so the local width is C / tp: derive the
  // local head count from the projection's output width rather than from the config.
  auto heads = [&](const Tensor& t_BTC) {
    const int64_t local_c = t_BTC.size(2);
    const int64_t D = C / n_heads_;
    return Transpose(View(t_BTC, {B, T, local_c / D, D}), 1, 2);  // [B, H, T, D]
  };
  Tensor q_BHTD = heads((*Submodule("wq"))(x_BTC));
  Tensor k_BHTD = heads((*Submodule("wk"))(x_BTC));
  Tensor v_BHTD = heads((*Submodule("wv"))(x_BTC));
  Tensor y_BHTD = ScaledDotProductAttention(q_BHTD, k_BHTD, v_BHTD, /*is_causal=*/true);
  Tensor y_BTC = Reshape(Transpose(y_BHTD, 1, 2), {B, T, -1});
  return {(*Submodule("wo"))(y_BTC)};
}

TransformerBlock::TransformerBlock(const GPTConfig& cfg, Generator& gen) : Module("TransformerBlock") {
  const int64_t hidden = cfg.MlpHidden();
  RegisterModule("ln1", MakeNorm(cfg));
  RegisterModule("attn",
                 std::make_unique<CausalSelfAttention>(cfg.d_model, cfg.n_heads, cfg.bias, gen, cfg.init_std, cfg.dtype));
  RegisterModule("ln2", MakeNorm(cfg));
  RegisterModule("mlp", std::make_unique<MLP>(cfg.d_model, hidden, cfg.mlp, cfg.bias, gen, cfg.init_std, cfg.dtype));
}

TensorList TransformerBlock::Forward(const TensorList& in) {
  Tensor x_BTC = in.at(0);
  x_BTC = Add(x_BTC, (*Submodule("attn"))((*Submodule("ln1"))(x_BTC)));
  x_BTC = Add(x_BTC, (*Submodule("mlp"))((*Submodule("ln2"))(x_BTC)));
  return {x_BTC};
}

GPT::GPT(const GPTConfig& cfg, Generator& gen) : Module("GPT"), cfg_(cfg) {
  cfg.Validate();  // before any allocation: a config whose sizes overflow raises here
  RegisterModule("wte", std::make_unique<Embedding>(cfg.vocab_size, cfg.d_model, gen, cfg.init_std, cfg.dtype));
  RegisterModule("wpe", std::make_unique<Embedding>(cfg.seq_len, cfg.d_model, gen, cfg.init_std, cfg.dtype));
  layers_ = RegisterModule("layers", std::make_unique<ModuleList>());
  for (int64_t i = 0; i < cfg.n_layers; ++i) layers_->Append(std::make_unique<TransformerBlock>(cfg, gen));
  RegisterModule("ln_f", MakeNorm(cfg));
  if (!cfg.tie_embeddings) {
    RegisterModule("lm_head", std::make_unique<Linear>(cfg.d_model, cfg.vocab_size, false, gen, cfg.init_std, cfg.dtype));
  }
}

TensorList GPT::Forward(const TensorList& in) {
  Tensor x_BTC;
  if (HasChild("wte")) {
    const Tensor& idx_BT = in.at(0);
    TESSEL_CHECK(idx_BT.dim() == 2 && idx_BT.dtype() == DType::kInt64, "GPT: expected int64 token ids [B, T], got ",
                 ShapeStr(idx_BT.sizes()), " ", idx_BT.dtype());
    const int64_t T = idx_BT.size(1);
    TESSEL_CHECK(T <= cfg_.seq_len, "GPT: sequence length ", T, " exceeds seq_len ", cfg_.seq_len);
    Tensor pos_T = Arange(0, static_cast<double>(T), 1, DType::kInt64, idx_BT.device());
    x_BTC = Add((*Submodule("wte"))(idx_BT), (*Submodule("wpe"))(pos_T));
  } else {
    x_BTC = in.at(0);
    TESSEL_CHECK(x_BTC.dim() == 3 && x_BTC.size(2) == cfg_.d_model && IsFloating(x_BTC.dtype()),
                 "GPT stage without embeddings: expected hidden states [B, T, ", cfg_.d_model, "], got ",
                 ShapeStr(x_BTC.sizes()), " ", x_BTC.dtype());
  }
  for (size_t i = 0; i < layers_->size(); ++i) x_BTC = (*layers_->at(i))(x_BTC);
  if (!HasChild("ln_f")) return {x_BTC};
  x_BTC = (*Submodule("ln_f"))(x_BTC);
  if (!cfg_.tie_embeddings) {
    if (!HasChild("lm_head")) return {x_BTC};
    return {(*Submodule("lm_head"))(x_BTC)};
  }
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, HasChild("wte"),
                    "GPT: tied embeddings need wte.weight for the head, but this stage does not hold wte");
  return {tessel::Linear(x_BTC, Submodule("wte")->Param("weight"))};
}

Tensor TokenCrossEntropy(const Tensor& logits_BTV, const Tensor& targets_BT) {
  return CrossEntropy(Reshape(logits_BTV, {-1, logits_BTV.size(-1)}), Reshape(targets_BT, {-1}));
}

Tensor GPT::Loss(const Tensor& idx_BT, const Tensor& targets_BT) { return TokenCrossEntropy((*this)(idx_BT), targets_BT); }

}  // namespace tessel::nn
