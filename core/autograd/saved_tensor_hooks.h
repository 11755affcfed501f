// core/autograd/saved_tensor_hooks.h — hooks on what autograd saves for backward, and on op calls
// (torch.autograd.graph.saved_tensors_hooks, and the slice of a dispatch mode that selective
// activation checkpointing needs).
//
// Invariant: while a SavedTensorHooksGuard is alive on a thread, every tensor a recorded op saves for
// backward on that thread goes through its pack function, and the node keeps only the returned
// unpack function (never the tensor); the backward formula sees exactly what unpack returns. Guards
// nest; the innermost wins. An OpInterceptor given to the guard sees every CallOp on the thread, in
// call order: it may answer an op with outputs of its own (the op is then not dispatched) or observe
// the outputs the op produced.
//
// Example:
//   SavedTensorHooksGuard g([](const Tensor& t) -> UnpackFn { Tensor c = Clone(t); return [c] { return c; }; });
//   Tensor y = Mul(x, w);   // the mul node keeps closures returning the clones of x and w
#pragma once

#include <functional>
#include <optional>

#include "core/dispatch/op.h"

namespace tessel::autograd {

using UnpackFn = std::function<Tensor()>;
using PackFn = std::function<UnpackFn(const Tensor& saved)>;

class OpInterceptor {
 public:
  virtual ~OpInterceptor() = default;
  // Before dispatch: outputs to use instead of running `op` on `inputs`, or nullopt to run it.
  virtual std::optional<TensorList> Replace(const OpDef& op, const TensorList& inputs) = 0;
  // After dispatch (only when Replace answered nullopt).
  virtual void Observe(const OpDef& op, const TensorList& inputs, const TensorList& outputs) = 0;
};

class SavedTensorHooksGuard {
 public:
  // `interceptor` (optional) must outlive the guard.
  explicit SavedTensorHooksGuard(PackFn pack, OpInterceptor* interceptor = nullptr);
  ~SavedTensorHooksGuard();
  SavedTensorHooksGuard(const SavedTensorHooksGuard&) = delete;
  SavedTensorHooksGuard& operator=(const SavedTensorHooksGuard&) = delete;
};

namespace internal {
// The innermost guard's pack function / interceptor on this thread; nullptr when none.
const PackFn* CurrentPackHook();
OpInterceptor* CurrentInterceptor();
}  // namespace internal

}  // namespace tessel::autograd
