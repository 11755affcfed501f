// planner/model_spec.cc — ParameterShapes (nn::GPT's FQN scheme) and the presets.
#include "planner/model_spec.h"

#include <utility>

#include "core/base/error.h"

namespace tessel::planner {

// nn::GPT's own list (one FQN scheme, one place), adjusted where a preset goes beyond nn::GPT: no
// wpe for rotary positions, and an MLP width other than GPTConfig::MlpHidden() (always > d_model, so
// inside ".mlp." a dim equal to it is the hidden width).
std::vector<std::pair<std::string, Shape>> ModelSpec::ParameterShapes() const {
  nn::GPTConfig cfg{.vocab_size = vocab_size, .d_model = d_model, .n_layers = n_layers, .n_heads = n_heads,
                    .seq_len = max_seq_len, .mlp = swiglu ? "swiglu" : "gelu",
                    .norm = rmsnorm ? "rmsnorm" : "layernorm",
                    .bias = bias, .tie_embeddings = tie_embeddings};
  const int64_t gpt_hidden = cfg.MlpHidden();
  std::vector<std::pair<std::string, Shape>> out;
  for (auto [fqn, shape] : cfg.ParameterShapes()) {
    if (fqn == "wpe.weight" && !learned_positions) continue;
    if (fqn.find(".mlp.") != std::string::npos) {
      for (int64_t& dim : shape) dim = dim == gpt_hidden ? ffn_hidden : dim;
    }
    out.push_back({std::move(fqn), std::move(shape)});
  }
  return out;
}

void ModelSpec::Validate() const {
  const std::string where = Str("model ", name, ": ");
  for (const auto& [field, v] : {std::pair<const char*, int64_t>{"vocab_size", vocab_size}, {"d_model", d_model},
                                 {"n_layers", n_layers}, {"n_heads", n_heads}, {"ffn_hidden", ffn_hidden},
                                 {"max_seq_len", max_seq_len}}) {
    TESSEL_CHECK(v >= 1, where, field, " must be >= 1, got ", v);
  }
  TESSEL_CHECK(d_model % n_heads == 0, where, "d_model ", d_model, " is not divisible by n_heads ", n_heads);
  TESSEL_CHECK(n_layers <= kMaxLayers, where, "n_layers ", n_layers, " exceeds ", kMaxLayers);
  // The largest counts, in long double: one block's weights (attention 4·h², the MLP 3·h·F), the embeddings and
  // the head; 16 bytes per parameter (mixed-precision Adam's) must fit int64.
  const long double h = d_model, f = ffn_hidden, blocks = n_layers;
  const long double params = blocks * (4 * h * h + 3 * h * f + 4 * h + f) + 2 * vocab_size * h + max_seq_len * h + h;
  TESSEL_CHECK(params * 16 < 9.2e18L, where, "about ", static_cast<double>(params),
               " parameters: their bytes would overflow the planner's int64 counts");
}

int64_t ModelSpec::NumParameters() const {
  int64_t n = 0;
  for (const auto& [fqn, shape] : ParameterShapes()) n += NumElements(shape);
  return n;
}

ModelSpec FromGptConfig(const nn::GPTConfig& cfg) {
  ModelSpec m;
  m.name = "gpt";
  m.vocab_size = cfg.vocab_size;
  m.d_model = cfg.d_model;
  m.n_layers = cfg.n_layers;
  m.n_heads = cfg.n_heads;
  m.ffn_hidden = cfg.MlpHidden();
  m.max_seq_len = cfg.seq_len;
  m.swiglu = cfg.mlp == "swiglu";
  m.rmsnorm = cfg.norm == "rmsnorm";
  m.bias = cfg.bias;
  m.tie_embeddings = cfg.tie_embeddings;
  m.flash_attention = true;
  m.saved = ModelSpec::SavedTensors::kTessel;
  m.gpt = cfg;
  return m;
}

namespace {

ModelSpec Llama(const char* name, int64_t h, int64_t layers, int64_t heads, int64_t ffn) {
  ModelSpec m;
  m.name = name;
  m.vocab_size = 32000;
  m.d_model = h;
  m.n_layers = layers;
  m.n_heads = heads;
  m.ffn_hidden = ffn;
  m.max_seq_len = 4096;
  m.swiglu = m.rmsnorm = m.flash_attention = true;
  m.learned_positions = false;
  return m;
}

}  // namespace

std::vector<std::string> ModelPresetNames() { return {"gpt2-small", "llama-7b", "llama-13b", "tessel-gpt"}; }

ModelSpec ModelPreset(const std::string& name) {
  if (name == "llama-7b") return Llama("llama-7b", 4096, 32, 32, 11008);
  if (name == "llama-13b") return Llama("llama-13b", 5120, 40, 40, 13824);
  if (name == "gpt2-small") {
    ModelSpec m = FromGptConfig(nn::GPTConfig{.vocab_size = 50257, .d_model = 768, .n_layers = 12, .n_heads = 12,
                                              .seq_len = 1024, .bias = true, .tie_embeddings = true});
    m.name = name;
    m.dropout = true;  // GPT-2 as trained, with the paper's saved tensors (not tessel's nn::GPT)
    m.flash_attention = false;
    m.saved = ModelSpec::SavedTensors::kKorthikanti;
    return m;
  }
  if (name == "tessel-gpt") {  // examples/gpt/train.cc's defaults
    ModelSpec m = FromGptConfig(nn::GPTConfig{.vocab_size = 256, .d_model = 128, .n_layers = 4, .n_heads = 4,
                                              .seq_len = 64});
    m.name = name;
    return m;
  }
  std::string known;
  for (const std::string& n : ModelPresetNames()) known += (known.empty() ? "" : ", ") + n;
  TESSEL_CHECK(false, "planner: unknown model preset '", name, "'; known presets: ", known);
  return {};
}

int BlockOf(const std::string& fqn) {
  if (fqn.rfind("layers.", 0) != 0) return -1;
  return std::stoi(fqn.substr(7, fqn.find('.', 7) - 7));
}

}  // namespace tessel::planner
