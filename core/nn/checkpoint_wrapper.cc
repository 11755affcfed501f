// core/nn/checkpoint_wrapper.cc — CheckpointWrapper: Module's forward wrapper running autograd::Checkpoint.
#include "core/nn/checkpoint_wrapper.h"

#include <memory>
#include <utility>

#include "core/base/error.h"

namespace tessel::nn {

CheckpointWrapper* CheckpointWrapper::Of(const Module& module) {
  return dynamic_cast<CheckpointWrapper*>(module.GetComposableState(kKey));
}

Module& ApplyActivationCheckpointing(Module& module, autograd::CheckpointOptions options) {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, CheckpointWrapper::Of(module) == nullptr,
                    "ApplyActivationCheckpointing: ", module.type_name(), " is already checkpointed");
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !module.has_forward_wrapper(),
                    "ApplyActivationCheckpointing: ", module.type_name(), " already has a forward wrapper");
  auto state = std::make_unique<CheckpointWrapper>(std::move(options));
  const CheckpointWrapper* raw = state.get();
  module.SetComposableState(CheckpointWrapper::kKey, std::move(state));
  module.SetForwardWrapper([raw](const TensorList& inputs, const ForwardFn& forward) {
    return autograd::Checkpoint(forward, inputs, raw->options());
  });
  return module;
}

autograd::CheckpointOptions CheckpointOptionsFor(const std::string& policy) {
  if (policy == "full") return {};
  if (policy == "selective") return {.save_outputs = autograd::RecomputeOnly({"scaled_dot_product_attention"})};
  if (policy == "gemm") return {.save_outputs = autograd::SaveOutputsOf({"linear", "linear_gelu", "matmul"})};
  TESSEL_FAIL(ErrorCode::kInvalidArgument,
              "activation checkpointing policy must be 'full', 'selective' or 'gemm', got '", policy, "'");
}

Module& ApplyActivationCheckpointing(Module& module, const std::string& policy) {
  if (policy == "none") return module;
  return ApplyActivationCheckpointing(module, CheckpointOptionsFor(policy));
}

void RemoveActivationCheckpointing(Module& module) {
  if (CheckpointWrapper::Of(module) == nullptr) return;
  module.SetForwardWrapper(nullptr);
  module.SetComposableState(CheckpointWrapper::kKey, nullptr);
}

}  // namespace tessel::nn
