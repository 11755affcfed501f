// core/dispatch/dispatcher.h — the one dispatcher: routes an op call to the distributed path or a kernel.
//
// Invariant: if any input is distributed (TensorImpl::is_distributed), the registered distributed
// handler (dtensor/) runs the op — propagate sharding, redistribute inputs, run the local op on local
// shards, wrap outputs; otherwise the kernel of the inputs' device type runs. Dispatch itself records
// no autograd history (autograd::CallOp sits above it).
//
// Example:
//   TensorList out = Dispatch(GetOp("add"), {a, b}, Attrs());
#pragma once

#include <span>

#include "core/dispatch/attrs.h"
#include "core/dispatch/op.h"

namespace tessel {

TensorList Dispatch(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs);

// Runs `op` on local tensors only (the DTensor path calls this on local shards).
TensorList DispatchLocal(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs);

using DistributedHandler = TensorList (*)(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs);
// Installed once by dtensor/ at startup; a second, different handler is a bug.
void SetDistributedHandler(DistributedHandler handler);

// Scoped, per thread: a dense input that does not require grad, next to DTensor inputs, is taken as
// Replicate on their mesh instead of raising (PyTorch's
// torch.distributed.tensor.experimental.implicit_replication). Declared here, below dtensor/ (which
// reads it and re-exports it as dtensor::ImplicitReplicationGuard), so that ops composed in core/ops
// can mark their own constants: the causal mask of the masked attention path (attention_math.cc), and
// tp::LossParallel's plain targets. Nests.
class ImplicitReplicationGuard {
 public:
  ImplicitReplicationGuard();
  ~ImplicitReplicationGuard();
  ImplicitReplicationGuard(const ImplicitReplicationGuard&) = delete;
  ImplicitReplicationGuard& operator=(const ImplicitReplicationGuard&) = delete;

 private:
  bool previous_;
};
bool ImplicitReplicationEnabled();
// Under the guard, the inputs with every dense one that does not require grad, next to a DTensor input,
// turned into a Replicate DTensor on that input's mesh; unchanged otherwise (guard off, no DTensor input,
// or no replicator linked). autograd::CallOp applies it before recording, so an op's backward formula
// sees the DTensors its forward computed with (a pooled window's divisor, a mask), not the dense
// constants the dispatcher would refuse then, outside the guard.
TensorList ReplicateImplicitly(TensorList inputs);
using ImplicitReplicator = TensorList (*)(TensorList inputs);
void SetImplicitReplicator(ImplicitReplicator replicator);  // installed once by dtensor/

// Undefined input tensors are allowed (optional arguments, e.g. a missing bias).
// Ops name their inputs in errors as "<op>: input <i> ...".
std::string DescribeInputs(std::span<const Tensor> inputs);  // "[2, 3] float32, [3] float32"

}  // namespace tessel
