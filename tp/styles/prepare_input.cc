// tp/styles/prepare_input.cc — PrepareModuleInput: per positional input, annotate it with its declared
// layout and redistribute it to the desired one (e.g. the attention block's input Shard(1) -> Replicate
// under sequence parallelism: one all_gather forward, one reduce_scatter backward). A module that takes
// one DTensor input for several projections receives their gradients as one Partial(sum) sum, reduced once.
#include "core/base/error.h"
#include "tp/parallelize_module.h"
#include "tp/styles/styles.h"

namespace tessel::tp::internal {
namespace {

void CheckLayouts(const Layouts& layouts, const Layouts& desired, const std::string& who, const char* what) {
  TESSEL_CHECK(layouts.size() == desired.size(), who, ": ", what, "_layouts has ", layouts.size(),
               " entries but desired_", what, "_layouts has ", desired.size());
  for (size_t i = 0; i < layouts.size(); ++i) {
    TESSEL_CHECK(layouts[i].has_value() || !desired[i].has_value(), who, ": desired_", what, "_layouts[", i, "] is ",
                 dtensor::ToString(*desired[i]), " but ", what, "_layouts[", i,
                 "] is None (declare the layout it arrives in)");
  }
}

}  // namespace

void RegisterInputHook(nn::Module& module, const Layouts& layouts, const Layouts& desired, bool use_local,
                       const DeviceMesh& mesh, const std::string& who, const std::string& label) {
  CheckPrepareInputLayouts(layouts, desired, who);
  // No layouts at all: torch's input_layouts=None, the positional inputs pass untouched (a style that only
  // moves keyword arguments, which the Python face's with_kwargs hook does).
  if (layouts.empty()) return;
  module.RegisterForwardPreHook([=](nn::Module&, TensorList& inputs) {
    TESSEL_CHECK(inputs.size() == layouts.size(), who, ": the module got ", inputs.size(),
                 " tensor positional inputs but input_layouts has ", layouts.size(),
                 " entries (tuples, lists and other non-tensor arguments are not seen by module hooks)");
    LabelledCall(label, [&] {
      for (size_t i = 0; i < inputs.size(); ++i) {
        inputs[i] = PrepareModuleInputValue(inputs[i], layouts[i], desired[i], use_local, mesh, Str(who, " input ", i));
      }
    });
  });
}

void RegisterOutputHook(nn::Module& module, const Layouts& layouts, const Layouts& desired, bool use_local,
                        const DeviceMesh& mesh, const std::string& who, const std::string& label) {
  CheckLayouts(layouts, desired, who, "output");
  module.RegisterForwardHook([=](nn::Module&, const TensorList&, TensorList& outputs) {
    TESSEL_CHECK(outputs.size() == layouts.size(), who, ": the module returned ", outputs.size(),
                 " outputs but output_layouts has ", layouts.size(), " entries");
    LabelledCall(label, [&] {
      for (size_t i = 0; i < outputs.size(); ++i) {
        if (!layouts[i].has_value()) continue;
        const Placement target = desired[i].value_or(*layouts[i]);
        outputs[i] = PrepareOutput(outputs[i], *layouts[i], target, use_local, mesh, Str(who, " output ", i));
      }
    });
  });
}

}  // namespace tessel::tp::internal

namespace tessel::tp {

Tensor PrepareModuleInputValue(const Tensor& x, const std::optional<Placement>& layout,
                               const std::optional<Placement>& desired, bool use_local,
                               const dtensor::DeviceMesh& mesh, const std::string& who) {
  if (!layout.has_value()) return x;
  const dtensor::DTensor d = internal::PrepareInput(x, *layout, desired, mesh, who);
  return use_local ? d.ToLocal() : d.tensor();
}

void CheckPrepareInputLayouts(const Layouts& layouts, const Layouts& desired, const std::string& who) {
  internal::CheckLayouts(layouts, desired, who, "input");
}

}  // namespace tessel::tp

namespace tessel::tp::internal {

void Apply(const PrepareModuleInput& style, nn::Module& module, const std::string& fqn, const DeviceMesh& mesh,
           const DistributeModuleOptions& options) {
  RegisterInputHook(module, style.input_layouts, style.desired_input_layouts, style.use_local_output, mesh,
                    Who("PrepareModuleInput", fqn, module), options.collective_label);
}

}  // namespace tessel::tp::internal
