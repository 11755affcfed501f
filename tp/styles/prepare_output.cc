// tp/styles/prepare_output.cc — PrepareModuleOutput (per output: annotate, redistribute to the desired
// layout, by default hand back the local shard) and PrepareModuleInputOutput (both hooks on one module).
// E.g. a GPT whose tied head leaves vocab-sharded logits: output S(-1) -> Replicate, one all_gather.
#include "tp/styles/styles.h"

namespace tessel::tp::internal {

void Apply(const PrepareModuleOutput& style, nn::Module& module, const std::string& fqn, const DeviceMesh& mesh,
           const DistributeModuleOptions& options) {
  RegisterOutputHook(module, style.output_layouts, style.desired_output_layouts, style.use_local_output, mesh,
                     Who("PrepareModuleOutput", fqn, module), options.collective_label);
}

void Apply(const PrepareModuleInputOutput& style, nn::Module& module, const std::string& fqn, const DeviceMesh& mesh,
           const DistributeModuleOptions& options) {
  const std::string who = Who("PrepareModuleInputOutput", fqn, module);
  const std::string& label = options.collective_label;
  RegisterInputHook(module, style.input_layouts, style.desired_input_layouts, style.use_local_input, mesh, who, label);
  RegisterOutputHook(module, style.output_layouts, style.desired_output_layouts, style.use_local_output, mesh, who,
                     label);
}

}  // namespace tessel::tp::internal
