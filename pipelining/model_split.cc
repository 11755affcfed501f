// pipelining/model_split.cc — GPTStageModuleNames and PipelineModuleSplit.
#include "pipelining/model_split.h"

#include <algorithm>
#include <map>

#include "core/base/error.h"

namespace tessel::pipelining {
namespace {

bool IsUnder(const std::string& fqn, const std::string& prefix) {
  return fqn.size() > prefix.size() && fqn.compare(0, prefix.size(), prefix) == 0 && fqn[prefix.size()] == '.';
}

// Removes from `m` (whose FQN is `prefix`) every child that is neither kept nor above a kept module.
void Prune(nn::Module& m, const std::string& prefix, const std::vector<std::string>& keep) {
  std::vector<std::string> to_remove;
  for (auto& [name, child] : m.NamedChildren()) {
    const std::string fqn = prefix.empty() ? name : prefix + "." + name;
    if (std::find(keep.begin(), keep.end(), fqn) != keep.end()) continue;
    const bool above = std::any_of(keep.begin(), keep.end(), [&](const std::string& k) { return IsUnder(k, fqn); });
    if (above) {
      Prune(*child, fqn, keep);
    } else {
      to_remove.push_back(name);
    }
  }
  for (const std::string& name : to_remove) m.RemoveChild(name);
}

}  // namespace

ModuleNamesPerStage GPTStageModuleNames(const nn::GPTConfig& cfg, int num_stages) {
  TESSEL_CHECK(num_stages >= 1 && num_stages <= cfg.n_layers, "GPTStageModuleNames: ", num_stages,
               " stages for a GPT of ", cfg.n_layers, " layers; need 1 <= stages <= layers");
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, !cfg.tie_embeddings || num_stages == 1,
                    "GPTStageModuleNames: tie_embeddings with ", num_stages,
                    " pipeline stages is not supported (wte.weight would live on the first and the last stage); "
                    "use tie_embeddings=false");
  ModuleNamesPerStage out(num_stages);
  const int64_t base = cfg.n_layers / num_stages, extra = cfg.n_layers % num_stages;
  int64_t layer = 0;
  for (int s = 0; s < num_stages; ++s) {
    if (s == 0) out[s] = {"wte", "wpe"};
    const int64_t count = base + (s < extra ? 1 : 0);
    for (int64_t i = 0; i < count; ++i) out[s].push_back(Str("layers.", layer++));
    if (s == num_stages - 1) {
      out[s].push_back("ln_f");
      if (!cfg.tie_embeddings) out[s].push_back("lm_head");
    }
  }
  return out;
}

std::unique_ptr<nn::Module> PipelineModuleSplit(const std::function<std::unique_ptr<nn::Module>()>& make_model,
                                                const ModuleNamesPerStage& names, int stage_index) {
  TESSEL_CHECK(stage_index >= 0 && stage_index < static_cast<int>(names.size()), "PipelineModuleSplit: stage ",
               stage_index, " out of range for ", names.size(), " stages");
  std::map<std::string, int> owner;
  for (int s = 0; s < static_cast<int>(names.size()); ++s) {
    for (const std::string& fqn : names[s]) {
      TESSEL_CHECK(!fqn.empty(), "PipelineModuleSplit: stage ", s, " lists an empty FQN (the root)");
      for (const auto& [other, t] : owner) {
        TESSEL_CHECK(other != fqn && !IsUnder(fqn, other) && !IsUnder(other, fqn), "PipelineModuleSplit: '", fqn,
                     "' (stage ", s, ") overlaps '", other, "' (stage ", t, ")");
      }
      owner[fqn] = s;
    }
  }
  std::unique_ptr<nn::Module> model = make_model();
  TESSEL_CHECK(model != nullptr, "PipelineModuleSplit: make_model returned null");
  for (const auto& [fqn, s] : owner) model->Submodule(fqn);  // kNotFound for a name that is no module
  const nn::StateDict own = model->NamedParameters(/*recurse=*/false);
  TESSEL_CHECK(own.empty(), "PipelineModuleSplit: the root ", model->type_name(), " registers parameter '",
               own.empty() ? "" : own.front().first, "' itself, which every stage would hold; register it in a child");
  Prune(*model, "", names[stage_index]);
  return model;
}

}  // namespace tessel::pipelining
