// checkpoint/state_dict.cc — model and optimizer state dicts keyed by FQN.
#include "checkpoint/state_dict.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/box.h"
#include "checkpoint/local_shard.h"
#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "core/memory/allocator.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "dtensor/dtensor.h"
#include "dtensor/dtensor_impl.h"

namespace tessel::checkpoint {
namespace {

constexpr std::string_view kStatePrefix = "optim.state.";
constexpr std::string_view kStepPrefix = "optim.step.";
constexpr std::string_view kHyperPrefix = "optim.hyper.";

bool StartsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "'" : ", '") + n + "'";
  return "[" + out + "]";
}

// Zeros in `like`'s layout (a DTensor gets a DTensor with the same spec), without DTensor ops.
Tensor ZerosInLayoutOf(const Tensor& like) {
  const dtensor::DTensorImpl* d = dtensor::AsDTensorImpl(like);
  if (d == nullptr) return Zeros(like.sizes(), like.dtype(), like.device());
  return dtensor::MakeDTensor(Zeros(d->local().sizes(), like.dtype(), d->local().device()), d->spec(), d->mesh());
}

// Copies `src` into the model tensor `dst` whatever the two layouts are (see SetModelStateDict).
void CopyIntoModelTensor(const std::string& fqn, const Tensor& dst, const Tensor& src,
                         const char* op = "set_model_state_dict") {
  TESSEL_CHECK(src.sizes() == dst.sizes(), op, ": '", fqn, "' has shape ", ShapeStr(src.sizes()),
               " in the state dict but ", ShapeStr(dst.sizes()), " in the model");
  const dtensor::DTensorImpl* dd = dtensor::AsDTensorImpl(dst);
  const dtensor::DTensorImpl* sd = dtensor::AsDTensorImpl(src);
  NoGradGuard no_grad;
  if (dd == nullptr && sd == nullptr) {
    CopyInto(dst, src);
  } else if (dd == nullptr) {
    CopyInto(dst, dtensor::DTensor(src).FullTensor());
  } else if (sd == nullptr) {
    const LocalShard target = DescribeLocalShard("set_model_state_dict", fqn, dst);
    const LocalShard full = DescribeLocalShard("set_model_state_dict", fqn, src);
    CopyInto(target.local, LocalRegionView(full, target.box));
  } else if (sd->spec() == dd->spec()) {
    CopyInto(dd->local(), sd->local());
  } else {
    TESSEL_CHECK(sd->mesh() == dd->mesh(), "set_model_state_dict: '", fqn, "' lives on ", sd->mesh().ToString(),
                 " in the state dict but on ", dd->mesh().ToString(),
                 " in the model. HINT: reshard across meshes with Save + Load");
    const dtensor::DTensor moved =
        dtensor::DTensor(src).Redistribute(dd->mesh(), dd->spec().placements(), dd->spec().shard_order());
    CopyInto(dd->local(), GetDTensorImpl(moved, "set_model_state_dict").local());
  }
}

const nn::StateDict::value_type* FindParam(const nn::StateDict& params, std::string_view fqn) {
  for (const auto& entry : params) {
    if (entry.first == fqn) return &entry;
  }
  return nullptr;
}

}  // namespace

StateDict GetModelStateDict(const nn::Module& model, const StateDictOptions& options) {
  StateDict out;
  for (const auto& [fqn, t] : model.GetStateDict()) {
    // Handles, not copies: Load writes straight into the model (no autograd is recorded by Load).
    out[fqn] = options.full_state_dict && t.is_distributed() ? dtensor::DTensor(t).FullTensor() : t;
  }
  return out;
}

nn::LoadResult SetModelStateDict(nn::Module& model, const StateDict& state, bool strict) {
  nn::LoadResult result;
  const nn::StateDict own = model.GetStateDict();
  for (const auto& [fqn, t] : own) {
    auto it = state.find(fqn);
    if (it == state.end() || !std::holds_alternative<Tensor>(it->second)) {
      result.missing_keys.push_back(fqn);
      continue;
    }
    const Tensor& src = std::get<Tensor>(it->second);
    if (src.is_same(t)) continue;  // the model's own handle: Load already filled it
    CopyIntoModelTensor(fqn, t, src);
  }
  for (const auto& [key, value] : state) {
    if (StartsWith(key, kOptimizerKeyPrefix) || !std::holds_alternative<Tensor>(value)) continue;
    if (FindParam(own, key) == nullptr) result.unexpected_keys.push_back(key);
  }
  TESSEL_CHECK(!strict || (result.missing_keys.empty() && result.unexpected_keys.empty()),
               "set_model_state_dict: missing keys ", JoinNames(result.missing_keys), ", unexpected keys ",
               JoinNames(result.unexpected_keys), ". HINT: pass strict=false to load a subset");
  return result;
}

std::vector<std::string> OptimizerStateNames(const optim::Optimizer& optimizer) { return optimizer.StateNames(); }

std::vector<std::string> OptimizerParamFqns(const nn::Module& model, const optim::Optimizer& optimizer,
                                            const char* op) {
  const nn::StateDict model_params = model.NamedParameters();
  std::vector<std::string> out;
  for (const auto& [name, p] : optimizer.params()) {
    auto same = std::find_if(model_params.begin(), model_params.end(),
                             [&](const auto& entry) { return entry.second.is_same(p); });
    TESSEL_CHECK(same != model_params.end() || FindParam(model_params, name) != nullptr, op,
                 ": the optimizer's parameter '", name, "' is not a parameter of the model");
    out.push_back(same != model_params.end() ? same->first : name);
  }
  return out;
}


StateDict GetStateDict(const nn::Module& model, const optim::Optimizer* optimizer, const StateDictOptions& options) {
  StateDict sd = GetModelStateDict(model, options);
  if (optimizer != nullptr) sd.merge(GetOptimizerStateDict(model, *optimizer, options));
  return sd;
}

StateDict GetOptimizerStateDict(const nn::Module& model, const optim::Optimizer& optimizer,
                                const StateDictOptions& options) {
  const std::vector<std::string> fqns = OptimizerParamFqns(model, optimizer, "get_optimizer_state_dict");
  const optim::OptimizerStateDict osd = optimizer.GetStateDict();
  const std::vector<std::string> names = OptimizerStateNames(optimizer);
  StateDict out;
  for (size_t i = 0; i < fqns.size(); ++i) {
    const auto& [own_name, p] = optimizer.params()[i];  // the optimizer keys its state by its own names
    const std::string& fqn = fqns[i];
    for (const std::string& name : names) {
      Tensor t;
      auto s = osd.state.find(own_name);
      if (s != osd.state.end() && s->second.count(name)) t = s->second.at(name);
      if (!t.defined() && options.init_optimizer_state) {
        memory::LedgerScope ledger(memory::Ledger::kOptimState);
        t = ZerosInLayoutOf(p);
      }
      if (!t.defined()) continue;
      if (options.full_state_dict && t.is_distributed()) t = dtensor::DTensor(t).FullTensor();
      out[std::string(kStatePrefix) + fqn + "." + name] = t;
    }
    auto step = osd.steps.find(own_name);
    out[std::string(kStepPrefix) + fqn] = step == osd.steps.end() ? int64_t{0} : step->second;
  }
  for (const auto& [name, v] : osd.hyper) out[std::string(kHyperPrefix) + name] = v;
  return out;
}

void SetOptimizerStateDict(const nn::Module& model, optim::Optimizer& optimizer, const StateDict& state) {
  const std::vector<std::string> fqns = OptimizerParamFqns(model, optimizer, "set_optimizer_state_dict");
  // The state dict's keys name model FQNs; the optimizer's parameters (entry i: fqns[i]) its own names.
  nn::StateDict by_fqn;
  std::map<std::string, std::string> own_name;
  for (size_t i = 0; i < fqns.size(); ++i) {
    by_fqn.emplace_back(fqns[i], optimizer.params()[i].second);
    own_name[fqns[i]] = optimizer.params()[i].first;
  }
  const optim::OptimizerStateDict own = optimizer.GetStateDict();
  optim::OptimizerStateDict in;
  in.hyper = own.hyper;
  for (const auto& [key, value] : state) {
    if (StartsWith(key, kStatePrefix)) {
      const std::string rest = key.substr(kStatePrefix.size());
      const size_t dot = rest.rfind('.');
      const std::string fqn = dot == std::string::npos ? rest : rest.substr(0, dot);
      TESSEL_CHECK(dot != std::string::npos && FindParam(by_fqn, fqn) != nullptr,
                   "set_optimizer_state_dict: '", key, "' names no parameter of the optimizer");
      TESSEL_CHECK(std::holds_alternative<Tensor>(value), "set_optimizer_state_dict: '", key, "' is ",
                   StateValueKindName(value), ", expected a tensor");
      const Tensor& t = std::get<Tensor>(value);
      auto s = own.state.find(own_name.at(fqn));
      const std::string name = rest.substr(dot + 1);
      const bool aliased = s != own.state.end() && s->second.count(name) && s->second.at(name).is_same(t);
      if (aliased) continue;
      // State in another layout than the parameter's (a full state dict of a fully_shard / TP model, or a
      // sharded one for a dense model) is first put into the parameter's layout, as the model's tensors
      // are: the optimizer's ops would otherwise mix a DTensor parameter with dense state ("mixed DTensor
      // and dense tensor inputs", naming neither the key nor the parameter). torch accepts full states.
      const Tensor& param = FindParam(by_fqn, fqn)->second;
      const dtensor::DTensorImpl* pd = dtensor::AsDTensorImpl(param);
      const dtensor::DTensorImpl* td = dtensor::AsDTensorImpl(t);
      const bool same_layout = (pd == nullptr && td == nullptr) || (pd != nullptr && td != nullptr && pd->spec() == td->spec());
      if (same_layout) {
        in.state[own_name.at(fqn)][name] = t;
      } else {
        Tensor placed = ZerosInLayoutOf(param);
        CopyIntoModelTensor(key, placed, t, "set_optimizer_state_dict");
        in.state[own_name.at(fqn)][name] = placed;
      }
    } else if (StartsWith(key, kStepPrefix)) {
      const std::string fqn = key.substr(kStepPrefix.size());
      TESSEL_CHECK(FindParam(by_fqn, fqn) != nullptr && std::holds_alternative<int64_t>(value),
                   "set_optimizer_state_dict: '", key, "' must be the int64 step of a parameter of the optimizer");
      in.steps[own_name.at(fqn)] = std::get<int64_t>(value);
    } else if (StartsWith(key, kHyperPrefix)) {
      TESSEL_CHECK(std::holds_alternative<double>(value), "set_optimizer_state_dict: '", key, "' is ",
                   StateValueKindName(value), ", expected float64");
      in.hyper[key.substr(kHyperPrefix.size())] = std::get<double>(value);
    }
  }
  optimizer.LoadStateDict(in);
}

Bytes GeneratorToBytes(const Generator& gen) {
  Bytes b;
  b.data.resize(16);
  const uint64_t words[2] = {gen.seed(), gen.offset()};
  for (int i = 0; i < 16; ++i)
    b.data[static_cast<size_t>(i)] = static_cast<char>((words[i / 8] >> (8 * (i % 8))) & 0xff);
  return b;
}

Generator GeneratorFromBytes(const Bytes& bytes) {
  TESSEL_CHECK(bytes.data.size() == 16, "GeneratorFromBytes: expected 16 bytes (seed, offset), got ",
               bytes.data.size());
  uint64_t words[2] = {0, 0};
  for (int i = 15; i >= 0; --i) {
    words[i / 8] = (words[i / 8] << 8) | static_cast<unsigned char>(bytes.data[static_cast<size_t>(i)]);
  }
  return Generator(words[0], words[1]);
}

std::string_view StateValueKindName(const StateValue& v) {
  static constexpr std::string_view kNames[] = {"tensor", "bytes", "int64", "float64", "string"};
  return kNames[v.index()];
}

}  // namespace tessel::checkpoint
