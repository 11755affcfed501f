// core/autograd/saved_tensor_hooks.cc — the thread-local stack of saved-tensor hooks.
#include "core/autograd/saved_tensor_hooks.h"

#include <utility>
#include <vector>

namespace tessel::autograd {
namespace {

struct Frame {
  PackFn pack;
  OpInterceptor* interceptor;
};
thread_local std::vector<Frame> hook_stack;

}  // namespace

SavedTensorHooksGuard::SavedTensorHooksGuard(PackFn pack, OpInterceptor* interceptor) {
  hook_stack.push_back({std::move(pack), interceptor});
}

SavedTensorHooksGuard::~SavedTensorHooksGuard() { hook_stack.pop_back(); }

namespace internal {
const PackFn* CurrentPackHook() { return hook_stack.empty() ? nullptr : &hook_stack.back().pack; }
OpInterceptor* CurrentInterceptor() { return hook_stack.empty() ? nullptr : hook_stack.back().interceptor; }
}  // namespace internal

}  // namespace tessel::autograd
