// core/autograd/engine.cc — the backward pass: dependency counting, a ready heap, hooks, callbacks.
#include "core/autograd/engine.h"

#include <queue>
#include <unordered_map>

#include "core/autograd/graph_task.h"
#include "core/base/error.h"
#include "core/dispatch/dispatcher.h"

namespace tessel {

using autograd::internal::GraphTaskScope;

bool InBackward() { return autograd::internal::InBackwardImpl(); }

void QueueCallback(std::function<void()> fn) { autograd::internal::QueueCallbackImpl(std::move(fn)); }

void Backward(const Tensor& root, const Tensor& grad, bool retain_graph) {
  Backward(TensorList{root}, TensorList{grad}, retain_graph);
}

void Backward(const TensorList& roots, const TensorList& grads, bool retain_graph) {
  using autograd::Node;
  GraphTaskScope task("backward");
  std::vector<autograd::Edge> root_edges;
  TensorList root_grads;
  autograd::internal::SeedRoots(roots, grads, &root_edges, &root_grads);

  // Count dependencies over the reachable graph.
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack;
  for (const auto& e : root_edges) {
    if (deps.emplace(e.node.get(), 0).second) stack.push_back(e.node.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const auto& e : n->next_edges) {
      if (!e.valid()) continue;
      auto [it, inserted] = deps.emplace(e.node.get(), 0);
      ++it->second;
      if (inserted) stack.push_back(e.node.get());
    }
  }
  autograd::internal::GradBuffers buffers;
  for (size_t i = 0; i < roots.size(); ++i) buffers.Add(root_edges[i], root_grads[i]);

  std::priority_queue<Node*, std::vector<Node*>, autograd::internal::ReadyOrder> ready;
  for (const auto& e : root_edges) {
    if (deps[e.node.get()] == 0) {
      deps[e.node.get()] = -1;  // queued
      ready.push(e.node.get());
    }
  }
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    TensorList in = buffers.Take(n);
    TensorList outs;
    if (autograd::internal::PrepareNodeInputs(n, in)) {
      outs = n->Apply(std::move(in));
      if (!retain_graph) n->ReleaseSaved();
    }
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      const auto& e = n->next_edges[i];
      if (!e.valid()) continue;
      buffers.Add(e, i < outs.size() ? std::move(outs[i]) : Tensor());
      int& d = deps[e.node.get()];
      if (--d == 0) {
        d = -1;
        ready.push(e.node.get());
      }
    }
  }
  task.Finish();
}

void RegisterHook(const Tensor& t, TensorHook hook) {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, t.requires_grad(),
                    "register_hook: cannot register a hook on a tensor that does not require grad");
  AutogradMeta& meta = t.impl()->EnsureAutogradMeta();
  if (meta.grad_fn) {
    auto& hooks = meta.grad_fn->output_hooks;
    if (hooks.size() <= static_cast<size_t>(meta.output_nr)) hooks.resize(meta.output_nr + 1);
    hooks[meta.output_nr].push_back(std::move(hook));
  } else {
    meta.hooks.push_back(std::move(hook));
  }
}

void RegisterPostAccumulateGradHook(const Tensor& leaf, PostAccumulateGradHook hook) {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, leaf.requires_grad() && leaf.is_leaf(),
                    "register_post_accumulate_grad_hook: only leaf tensors that require grad have one");
  leaf.impl()->EnsureAutogradMeta().post_accumulate_grad_hooks.push_back(std::move(hook));
}

void RetainGrad(const Tensor& t) {
  if (t.is_leaf()) return;
  AutogradMeta& meta = t.impl()->EnsureAutogradMeta();
  if (meta.retains_grad) return;
  meta.retains_grad = true;
  std::weak_ptr<TensorImpl> weak = t.impl_ptr();
  auto& hooks = meta.grad_fn->retain_hooks;
  if (hooks.size() <= static_cast<size_t>(meta.output_nr)) hooks.resize(meta.output_nr + 1);
  hooks[meta.output_nr].push_back([weak](const Tensor& g) {
    if (auto impl = weak.lock()) {
      AutogradMeta& m = impl->EnsureAutogradMeta();
      const Tensor in[] = {g};
      m.grad = m.grad.defined() ? autograd::internal::AddGrads(m.grad, g) : Dispatch(GetOp("clone"), in, Attrs())[0];
    }
    return Tensor();
  });
}

}  // namespace tessel
