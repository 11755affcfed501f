// core/nn/checkpoint_wrapper.cc — CheckpointWrapper: Module's forward wrapper running autograd::Checkpoint.
#include "core/nn/checkpoint_wrapper.h"

#include <memory>
#include <utility>

#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "core/ops/linear_gelu.h"

namespace tessel::nn {

CheckpointWrapper* CheckpointWrapper::Of(const Module& module) {
  return dynamic_cast<CheckpointWrapper*>(module.GetComposableState(kKey));
}

namespace {

Module& Apply(Module& module, autograd::CheckpointOptions options, bool unfuse_linear_gelu) {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, CheckpointWrapper::Of(module) == nullptr,
                    "ApplyActivationCheckpointing: ", module.type_name(), " is already checkpointed");
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !module.has_forward_wrapper(),
                    "ApplyActivationCheckpointing: ", module.type_name(), " already has a forward wrapper");
  auto state = std::make_unique<CheckpointWrapper>(std::move(options));
  const CheckpointWrapper* raw = state.get();
  module.SetComposableState(CheckpointWrapper::kKey, std::move(state));
  // unfuse_linear_gelu: the forward (and its recompute) runs under UnfusedLinearGeluScope
  // (core/ops/linear_gelu.h), as the "gemm" policy needs.
  module.SetForwardWrapper([raw, unfuse_linear_gelu](const TensorList& inputs, const ForwardFn& forward) {
    // Without grad mode (evaluation) nothing is kept or recomputed: the fused op runs.
    if (!unfuse_linear_gelu || !GradModeEnabled()) return autograd::Checkpoint(forward, inputs, raw->options());
    // The recompute calls this function again: both passes run the same (unfused) ops.
    return autograd::Checkpoint(
        [forward](const TensorList& in) {
          UnfusedLinearGeluScope unfused;
          return forward(in);
        },
        inputs, raw->options());
  });
  return module;
}

}  // namespace

Module& ApplyActivationCheckpointing(Module& module, autograd::CheckpointOptions options) {
  return Apply(module, std::move(options), /*unfuse_linear_gelu=*/false);
}

autograd::CheckpointOptions CheckpointOptionsFor(const std::string& policy) {
  if (policy == "full") return {};
  if (policy == "selective") return {.save_outputs = autograd::RecomputeOnly({"scaled_dot_product_attention"})};
  // linear_gelu is listed for callers that build the options themselves (ApplyActivationCheckpointing by
  // name runs the region unfused, where linear's output is the one kept).
  if (policy == "gemm") return {.save_outputs = autograd::SaveOutputsOf({"linear", "linear_gelu", "matmul"})};
  TESSEL_FAIL(ErrorCode::kInvalidArgument,
              "activation checkpointing policy must be 'full', 'selective' or 'gemm', got '", policy, "'");
}

Module& ApplyActivationCheckpointing(Module& module, const std::string& policy) {
  if (policy == "none") return module;
  return Apply(module, CheckpointOptionsFor(policy), /*unfuse_linear_gelu=*/policy == "gemm");
}

void RemoveActivationCheckpointing(Module& module) {
  if (CheckpointWrapper::Of(module) == nullptr) return;
  module.SetForwardWrapper(nullptr);
  module.SetComposableState(CheckpointWrapper::kKey, nullptr);
}

}  // namespace tessel::nn
