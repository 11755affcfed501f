// tp/styles/sequence.cc — SequenceParallel on a norm (LayerNorm, RMSNorm, a model's own RMSNorm module), dropout or
// any module that works token by token: the parameters are replicated and the module runs on this rank's slice of
// the sequence (a plain input is annotated Shard(sequence_dim), a DTensor input is moved there), so forward and
// backward communicate nothing; the parameter gradients are row sums over the local tokens, Partial(sum), reduced
// once by the optimizer step (or by fully_shard's reduce-scatter). As torch's, any module is accepted (HF Llama's
// RMSNorm is its own class): one that mixes tokens is the caller's mistake, which the DTensor ops then price.
#include "core/base/error.h"
#include "tp/styles/styles.h"

namespace tessel::tp::internal {

void Apply(const SequenceParallel& style, nn::Module& module, const std::string& fqn, const DeviceMesh& mesh,
           const DistributeModuleOptions& options) {
  const std::string who = Who("SequenceParallel", fqn, module);
  // A plain input is annotated Shard(sequence_dim); a DTensor input in another layout is moved to it (as
  // torch's SequenceParallel does), so the norm's weight gradient is the Partial row sum the style promises.
  auto input_fn = [style, who](nn::Module&, TensorList& inputs, const DeviceMesh& mesh) {
    for (Tensor& x : inputs) {
      if (!x.defined()) continue;
      x = PrepareInput(x, dtensor::Shard{style.sequence_dim}, std::nullopt, mesh, who).tensor();
    }
  };
  auto output_fn = [style](nn::Module&, TensorList& outputs, const DeviceMesh&) {
    if (!style.use_local_output) return;
    for (Tensor& y : outputs) {
      if (y.defined() && y.is_distributed()) y = dtensor::DTensor(y).ToLocal();
    }
  };
  DistributeModule(module, mesh, nullptr, input_fn, output_fn, options);
}

}  // namespace tessel::tp::internal
