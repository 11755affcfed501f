// checkpoint/state_dict.h — the checkpoint StateDict (FQN → tensor / bytes / small value) and the
// accessors that build one from a model and its optimizer and push one back (PyTorch's
// torch.distributed.checkpoint.state_dict: get/set_model_state_dict, get/set_optimizer_state_dict).
//
// Invariant: tensor entries are handles that alias the model's and optimizer's own tensors (dense, or
// DTensor for fully_shard'ed / tensor-parallel parameters), so Load (load.h) fills them in place and
// no copy of the model ever exists; only `full_state_dict` makes gathered copies. Optimizer state is
// keyed by parameter FQN, never by index:
//   "optim.state.<param fqn>.<name>"  tensor laid out like the parameter ("exp_avg", "exp_avg_sq", ...)
//   "optim.step.<param fqn>"           int64 step count
//   "optim.hyper.<name>"               float64 hyperparameter ("lr", "beta1", ...)
// Everything else a training run needs (step, RNG state, data position, config) goes in as Bytes or a
// small value under any key outside "optim.".
//
// Example:
//   StateDict sd = GetModelStateDict(model);
//   sd.merge(GetOptimizerStateDict(model, opt));      // creates missing optimizer state as zeros
//   sd["train.step"] = int64_t{step};
//   sd["train.rng"] = GeneratorToBytes(gen);
//   Save(sd, dir, world);                              // ... later, in any layout:
//   Load(sd, dir);
//   SetOptimizerStateDict(model, opt, sd);             // model tensors were filled in place already
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>

#include "core/nn/module.h"
#include "core/optim/optimizer.h"
#include "core/tensor/random.h"
#include "core/tensor/tensor.h"

namespace tessel::checkpoint {

// Opaque bytes (serialized RNG state, a tokenizer blob, ...). Saved into a data file, checksummed.
struct Bytes {
  std::string data;
  friend bool operator==(const Bytes&, const Bytes&) = default;
};

// A state dict value: a tensor (dense = the same full value on every rank; DTensor = sharded), bytes,
// or a small value kept inline in the metadata.
using StateValue = std::variant<Tensor, Bytes, int64_t, double, std::string>;
using StateDict = std::map<std::string, StateValue>;

inline constexpr std::string_view kOptimizerKeyPrefix = "optim.";

struct StateDictOptions {
  // Gather DTensors into full dense tensors on every rank (collective; a copy). Default: aliases.
  bool full_state_dict = false;
  // GetOptimizerStateDict: create state the optimizer has not created yet (before its first step) as
  // zeros in the parameter's layout, so a fresh optimizer can be loaded into.
  bool init_optimizer_state = true;
};

// Parameters and persistent buffers by FQN.
StateDict GetModelStateDict(const nn::Module& model, const StateDictOptions& options = {});
// Copies the tensor entries of `state` whose keys are outside "optim." into the model's tensors, in
// any combination of layouts: dense ↔ DTensor, or DTensor → DTensor with other placements on the same
// mesh (redistributed). Entries that alias the model's tensors are skipped. strict: a model tensor
// missing from `state`, or a tensor entry the model does not have, raises kInvalidArgument listing them.
nn::LoadResult SetModelStateDict(nn::Module& model, const StateDict& state, bool strict = true);

StateDict GetOptimizerStateDict(const nn::Module& model, const optim::Optimizer& optimizer,
                                const StateDictOptions& options = {});
// Both of the above in one state dict (torch.distributed.checkpoint.state_dict.get_state_dict); the
// model's alone when `optimizer` is null.
StateDict GetStateDict(const nn::Module& model, const optim::Optimizer* optimizer, const StateDictOptions& options = {});
// Pushes the "optim." entries into `optimizer` (state tensors, step counts, hyperparameters) through
// Optimizer::LoadStateDict. Tensors that alias the optimizer's own state are not copied (no op runs
// for them), so after Load into GetOptimizerStateDict's aliases this only sets steps and hyperparameters.
// State the optimizer has not created yet is created and copied by LoadStateDict with ops, which for
// DTensor parameters needs the DTensor dispatcher (dtensor/dispatch.h).
// REQUIRES: every parameter FQN named by a key is one of the optimizer's and of the model's
// (kInvalidArgument otherwise).
void SetOptimizerStateDict(const nn::Module& model, optim::Optimizer& optimizer, const StateDict& state);
// The per-parameter state tensor names of `optimizer` ("exp_avg", "exp_avg_sq" for AdamW).
std::vector<std::string> OptimizerStateNames(const optim::Optimizer& optimizer);
// The model's FQN of each optimizer parameter, in the optimizer's order, as torch maps them (by identity):
// the name under which the model holds the same tensor (an optimizer built from a submodule's parameters
// named them from that submodule: 'weight' for the model's '0.weight'), else the optimizer's own name when
// the model has a parameter of that name (a module that is unsharded right now holds other handles).
// kInvalidArgument (prefixed with `op`) naming the parameter when the model has neither.
std::vector<std::string> OptimizerParamFqns(const nn::Module& model, const optim::Optimizer& optimizer,
                                            const char* op = "optimizer state dict");

// A Generator as 16 bytes (seed, offset; little-endian) and back (kInvalidArgument on a bad length).
Bytes GeneratorToBytes(const Generator& gen);
Generator GeneratorFromBytes(const Bytes& bytes);

// "tensor", "bytes", "int64", "float64", "string".
std::string_view StateValueKindName(const StateValue& v);

}  // namespace tessel::checkpoint
