// core/autograd/engine.cc — the backward pass: dependency counting, a ready heap, hooks, callbacks.
#include "core/autograd/engine.h"

#include <optional>
#include <queue>
#include <unordered_map>

#include "core/autograd/grad_mode.h"
#include "core/autograd/node.h"
#include "core/base/error.h"
#include "core/dispatch/dispatcher.h"
#include "core/memory/allocator.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

struct GraphTask {
  std::vector<std::function<void()>> callbacks;
};
thread_local GraphTask* current_task = nullptr;

Tensor AddGrads(const Tensor& a, const Tensor& b) {
  const Tensor in[] = {a, b};
  return Dispatch(GetOp("add"), in, Attrs())[0];
}

Tensor ZerosFor(const autograd::OutputMeta& m) {
  if (m.is_distributed || !IsFloating(m.dtype)) return Tensor();
  return Zeros(m.sizes, m.dtype, m.device);
}

struct ReadyOrder {
  bool operator()(const autograd::Node* a, const autograd::Node* b) const {
    return a->sequence_nr() < b->sequence_nr();  // max-heap on sequence number
  }
};

}  // namespace

bool InBackward() { return current_task != nullptr; }

void QueueCallback(std::function<void()> fn) {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, current_task != nullptr,
                    "QueueCallback: only valid while a backward pass runs on this thread");
  current_task->callbacks.push_back(std::move(fn));
}

void Backward(const Tensor& root, const Tensor& grad, bool retain_graph) {
  Backward(TensorList{root}, TensorList{grad}, retain_graph);
}

void Backward(const TensorList& roots, const TensorList& grads, bool retain_graph) {
  using autograd::Node;
  TESSEL_CHECK(roots.size() == grads.size(), "backward: ", roots.size(), " roots but ", grads.size(), " grads");
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, current_task == nullptr,
                    "backward: re-entrant backward is not supported");
  GradModeGuard no_grad(false);
  std::optional<memory::LedgerScope> ledger;
  if (memory::CurrentLedger() == memory::Ledger::kOther) ledger.emplace(memory::Ledger::kActivations);

  std::unordered_map<Node*, TensorList> buffers;
  std::unordered_map<Node*, int> deps;
  std::vector<std::shared_ptr<Node>> keep_alive;
  auto add_to_buffer = [&](const autograd::Edge& e, Tensor g) {
    TensorList& buf = buffers[e.node.get()];
    if (buf.empty()) buf.resize(e.node->output_meta.size());
    if (!g.defined()) return;
    buf[e.input_nr] = buf[e.input_nr].defined() ? AddGrads(buf[e.input_nr], g) : std::move(g);
  };

  std::vector<autograd::Edge> root_edges;
  TensorList root_grads;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, r.defined() && r.requires_grad(), "backward: root ", i,
                      " does not require grad and has no grad_fn");
    Tensor g = grads[i];
    if (!g.defined()) {
      TESSEL_CHECK(r.numel() == 1, "backward: grad can be implicitly created only for one-element outputs, got "
                   "shape ", ShapeStr(r.sizes()));
      const Tensor in[] = {r};
      g = Dispatch(GetOp("ones_like"), in, Attrs())[0];
    }
    TESSEL_CHECK(g.sizes() == r.sizes(), "backward: grad shape ", ShapeStr(g.sizes()), " != root shape ",
                 ShapeStr(r.sizes()));
    root_edges.push_back(autograd::GradientEdge(r));
    root_grads.push_back(std::move(g));
  }
  // Count dependencies over the reachable graph.
  std::vector<Node*> stack;
  for (const auto& e : root_edges) {
    if (deps.emplace(e.node.get(), 0).second) {
      stack.push_back(e.node.get());
      keep_alive.push_back(e.node);
    }
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
  for (size_t i = 0; i < roots.size(); ++i) add_to_buffer(root_edges[i], root_grads[i]);

  GraphTask task;
  current_task = &task;
  struct Reset {
    ~Reset() { current_task = nullptr; }
  } reset;

  std::priority_queue<Node*, std::vector<Node*>, ReadyOrder> ready;
  for (const auto& e : root_edges) {
    if (deps[e.node.get()] == 0) {
      deps[e.node.get()] = -1;  // queued
      ready.push(e.node.get());
    }
  }
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    TensorList in = std::move(buffers[n]);
    buffers.erase(n);
    in.resize(n->output_meta.size());
    bool any = false;
    for (size_t i = 0; i < in.size(); ++i) {
      if (i < n->output_hooks.size() && !dynamic_cast<autograd::AccumulateGrad*>(n)) {
        for (const TensorHook& hook : n->output_hooks[i]) {
          if (!in[i].defined()) break;
          Tensor replaced = hook(in[i]);
          if (replaced.defined()) in[i] = std::move(replaced);
        }
      }
      any = any || in[i].defined();
    }
    TensorList outs;
    if (any) {
      for (size_t i = 0; i < in.size(); ++i) {
        if (!in[i].defined()) in[i] = ZerosFor(n->output_meta[i]);
      }
      outs = n->Apply(std::move(in));
      if (!retain_graph) n->ReleaseSaved();
    }
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      const auto& e = n->next_edges[i];
      if (!e.valid()) continue;
      add_to_buffer(e, i < outs.size() ? std::move(outs[i]) : Tensor());
      int& d = deps[e.node.get()];
      if (--d == 0) {
        d = -1;
        ready.push(e.node.get());
      }
    }
  }
  for (size_t i = 0; i < task.callbacks.size(); ++i) task.callbacks[i]();
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
  RegisterHook(t, [weak](const Tensor& g) {
    if (auto impl = weak.lock()) {
      AutogradMeta& m = impl->EnsureAutogradMeta();
      const Tensor in[] = {g};
      m.grad = m.grad.defined() ? AddGrads(m.grad, g) : Dispatch(GetOp("clone"), in, Attrs())[0];
    }
    return Tensor();
  });
}

}  // namespace tessel
