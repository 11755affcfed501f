// tp/styles/rowwise.cc — RowwiseParallel on Linear (weight [O, I] Shard(1), bias Replicate: each rank
// contracts I / W input features, the output is Partial(sum) and the bias is added once) and Embedding
// (weight [V, C] Shard(0), vocab parallel: each rank looks up the ids in its row range and writes zeros
// for the others, the output is Partial(sum)). The Partial output is reduced to output_layouts:
// Replicate is one all_reduce, Shard(d) one reduce_scatter (sequence parallel), with the dual in backward
// (none, resp. one all_gather).
#include "core/base/error.h"
#include "core/nn/layers.h"
#include "tp/styles/styles.h"

namespace tessel::tp::internal {

void Apply(const RowwiseParallel& style, nn::Module& module, const std::string& fqn, const DeviceMesh& mesh,
           const DistributeModuleOptions& options) {
  const std::string who = Who("RowwiseParallel", fqn, module);
  const auto* linear = dynamic_cast<const nn::Linear*>(&module);
  const bool embedding = module.type_name() == "Embedding";
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, linear != nullptr || embedding, who,
                    ": RowwiseParallel supports Linear and Embedding, not ", module.type_name());
  auto partition = [&module, linear, options](const std::string&, nn::Module& m, const DeviceMesh& mesh) {
    if (&m != &module) return;
    DistributeParameter(m, "weight", mesh, dtensor::Shard{linear != nullptr ? 1 : 0}, options);
    if (m.HasParam("bias")) DistributeParameter(m, "bias", mesh, dtensor::Replicate{}, options);
  };
  // A Linear knows its global in_features, so an input sharded on its last dim may be uneven over W.
  const int64_t in_features = linear != nullptr ? linear->in_features() : -1;
  auto input_fn = [style, who, in_features](nn::Module&, TensorList& inputs, const DeviceMesh& mesh) {
    TESSEL_CHECK(!inputs.empty(), who, ": called with no input");
    const Tensor& x = inputs[0];
    std::optional<Shape> shape;
    const Placement layout = Normalize(style.input_layouts, x.dim(), who);
    if (in_features > 0 && !x.is_distributed() && layout == Placement(dtensor::Shard{x.dim() - 1})) {
      shape = x.sizes();
      shape->back() = in_features;
    }
    const Placement desired = in_features > 0 ? Placement(dtensor::Shard{-1}) : Placement(dtensor::Replicate{});
    inputs[0] = PrepareInput(x, layout, desired, mesh, who, shape).tensor();
  };
  auto output_fn = [style, who](nn::Module&, TensorList& outputs, const DeviceMesh& mesh) {
    outputs.at(0) = PrepareOutput(outputs[0], std::nullopt, style.output_layouts, style.use_local_output, mesh, who);
  };
  DistributeModule(module, mesh, partition, input_fn, output_fn, options);
}

}  // namespace tessel::tp::internal
