// tp/styles/colwise.cc — ColwiseParallel on Linear (weight [O, I] and bias [O] Shard(0): each rank
// computes O / W output features) and Embedding (weight [V, C] Shard(1): each rank looks up C / W
// columns). The input is annotated with input_layouts and moved to Replicate (an all_gather when it
// arrives Shard(1) under sequence parallelism); the output is Shard(-1) and moves to output_layouts.
// Backward: the input gradient of a Linear is Partial(sum) and becomes Replicate through the input's
// FromLocal (one all_reduce), or reduce-scatters back to the sequence shard.
#include "core/base/error.h"
#include "tp/styles/styles.h"

namespace tessel::tp::internal {

void Apply(const ColwiseParallel& style, nn::Module& module, const std::string& fqn, const DeviceMesh& mesh,
           const DistributeModuleOptions& options) {
  const std::string who = Who("ColwiseParallel", fqn, module);
  const bool linear = module.type_name() == "Linear", embedding = module.type_name() == "Embedding";
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, linear || embedding, who,
                    ": ColwiseParallel supports Linear and Embedding, not ", module.type_name());
  auto partition = [&module, linear, options](const std::string& name, nn::Module& m, const DeviceMesh& mesh) {
    if (&m != &module) return;
    if (linear) {
      DistributeParameter(m, "weight", mesh, dtensor::Shard{0}, options);
      if (m.HasParam("bias")) DistributeParameter(m, "bias", mesh, dtensor::Shard{0}, options);
    } else {
      DistributeParameter(m, "weight", mesh, dtensor::Shard{1}, options);
    }
  };
  auto input_fn = [style, who](nn::Module&, TensorList& inputs, const DeviceMesh& mesh) {
    TESSEL_CHECK(!inputs.empty(), who, ": called with no input");
    inputs[0] = PrepareInput(inputs[0], style.input_layouts, dtensor::Replicate{}, mesh, who).tensor();
  };
  auto output_fn = [style, who](nn::Module&, TensorList& outputs, const DeviceMesh& mesh) {
    outputs.at(0) = PrepareOutput(outputs[0], std::nullopt, style.output_layouts, style.use_local_output, mesh, who);
  };
  DistributeModule(module, mesh, partition, input_fn, output_fn, options);
}

}  // namespace tessel::tp::internal
