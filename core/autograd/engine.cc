// core/autograd/engine.cc — the backward pass: dependency counting, a ready heap, hooks, callbacks.
#include "core/autograd/engine.h"

#include <functional>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "core/autograd/anomaly.h"
#include "core/autograd/autocast.h"
#include "core/autograd/call.h"
#include "core/autograd/graph_task.h"
#include "core/base/error.h"
#include "core/dispatch/dispatcher.h"

namespace tessel {

using autograd::internal::GraphTaskScope;

bool InBackward() { return autograd::internal::InBackwardImpl(); }
uint64_t BackwardPassId() { return autograd::internal::BackwardPassIdImpl(); }
bool CreatingGraph() { return autograd::internal::CreatingGraphImpl(); }

void QueueCallback(std::function<void()> fn) { autograd::internal::QueueCallbackImpl(std::move(fn)); }

void Backward(const Tensor& root, const Tensor& grad, bool retain_graph, bool create_graph) {
  Backward(TensorList{root}, TensorList{grad}, retain_graph, create_graph);
}

namespace {

using autograd::Edge;
using autograd::Node;

// Runs the graph below root_edges (seeded with root_grads) in ReadyOrder once every gradient flowing
// into a node has been summed. Only nodes for which reach(n) holds take part (the others, and their
// edges, are ignored); a node runs (Apply) when visit(n, its prepared inputs, whether any is defined)
// returns true, and its outputs then flow on; a node that does not run passes nothing on.
void Execute(const std::vector<Edge>& root_edges, const TensorList& root_grads, bool retain_graph,
             const std::function<bool(Node*)>& reach, const std::function<bool(Node*, TensorList&, bool)>& visit) {
  AutocastGuard no_autocast(false, AutocastDType());  // backward formulas run in the dtypes the forward recorded
  std::unordered_map<Node*, int> deps;  // gradients still to arrive, over the reached subgraph
  std::vector<Node*> stack;
  for (const auto& e : root_edges) {
    if (reach(e.node.get()) && deps.emplace(e.node.get(), 0).second) stack.push_back(e.node.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const auto& e : n->next_edges) {
      if (!e.valid() || !reach(e.node.get())) continue;
      auto [it, inserted] = deps.emplace(e.node.get(), 0);
      ++it->second;
      if (inserted) stack.push_back(e.node.get());
    }
  }
  autograd::internal::GradBuffers buffers;
  for (size_t i = 0; i < root_edges.size(); ++i) {
    if (reach(root_edges[i].node.get())) buffers.Add(root_edges[i], root_grads[i]);
  }
  std::priority_queue<Node*, std::vector<Node*>, autograd::internal::ReadyOrder> ready;
  for (const auto& e : root_edges) {
    auto it = deps.find(e.node.get());
    if (it != deps.end() && it->second == 0) it->second = -1, ready.push(e.node.get());  // -1: queued
  }
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    TensorList in = buffers.Take(n);
    const bool any = autograd::internal::PrepareNodeInputs(n, in);
    TensorList outs;
    if (visit(n, in, any) && any) {
      try {
        outs = autograd::internal::RunNodeApply(n, std::move(in));
        autograd::internal::CheckAnomaly(*n, outs);
      } catch (...) {  // anomaly mode: the failing node's forward stack first, as torch's warning
        autograd::internal::ReportForwardTrace(*n);
        throw;
      }
      if (!retain_graph) n->ReleaseSaved();
    }
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      const auto& e = n->next_edges[i];
      if (!e.valid() || !reach(e.node.get())) continue;
      buffers.Add(e, i < outs.size() ? std::move(outs[i]) : Tensor());
      int& d = deps[e.node.get()];
      if (--d == 0) d = -1, ready.push(e.node.get());
    }
  }
}

// Over the graph below root_edges: needed[n] when one of `targets` is reachable from n (n included),
// below[n] when one is reachable through n's children (so n must run). Iterative post-order.
struct Reach {
  std::unordered_map<Node*, bool> needed, below;
};
Reach ReachTargets(const std::vector<Edge>& root_edges, const std::vector<Edge>& targets) {
  std::unordered_set<Node*> target_nodes;
  for (const auto& t : targets) target_nodes.insert(t.node.get());
  Reach r;
  std::vector<std::pair<Node*, size_t>> stack;
  for (const auto& e : root_edges) {
    if (r.needed.emplace(e.node.get(), false).second) stack.push_back({e.node.get(), 0});
    while (!stack.empty()) {
      auto& [n, next] = stack.back();
      if (next < n->next_edges.size()) {
        const Edge& child = n->next_edges[next++];
        if (child.valid() && r.needed.emplace(child.node.get(), false).second) stack.push_back({child.node.get(), 0});
        continue;
      }
      bool any = false;
      for (const auto& c : n->next_edges) any = any || (c.valid() && r.needed[c.node.get()]);
      r.below[n] = any;
      r.needed[n] = any || target_nodes.count(n) > 0;
      stack.pop_back();
    }
  }
  return r;
}

// Where each of `inputs`' gradients arrives: (node, input_nr) of its gradient edge; `what` names the caller.
std::vector<Edge> GradientTargets(const TensorList& inputs, const char* what) {
  std::vector<Edge> targets;
  for (size_t i = 0; i < inputs.size(); ++i) {
    TESSEL_CHECK(inputs[i].defined() && inputs[i].requires_grad(), what, ": input ", i,
                 " does not require grad (one of the differentiated tensors does not require grad)");
    targets.push_back(autograd::GradientEdge(inputs[i]));
  }
  return targets;
}

}  // namespace

void Backward(const TensorList& roots, const TensorList& grads, bool retain_graph, bool create_graph,
              const TensorList& inputs) {
  if (inputs.empty()) return Backward(roots, grads, retain_graph, create_graph);
  const std::vector<Edge> targets = GradientTargets(inputs, "backward(inputs=)");
  GraphTaskScope task("backward", create_graph);
  std::vector<Edge> root_edges;
  TensorList root_grads;
  autograd::internal::SeedRoots(roots, grads, &root_edges, &root_grads);
  Reach reach = ReachTargets(root_edges, targets);
  for (size_t i = 0; i < inputs.size(); ++i) {
    // torch leaves an input the outputs do not reach without a gradient, silently; a DTensor parameter
    // under fully_shard is such an input (the forward used its unsharded copy), and its None gradient
    // would make the optimizer step skip it: an error for DTensor leaves.
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !inputs[i].is_distributed() || !inputs[i].is_leaf() ||
                          reach.needed[targets[i].node.get()],
                      "backward(inputs=): input ", i, " (a DTensor of shape ", ShapeStr(inputs[i].sizes()),
                      ") is not in the graph of the outputs, so it would get no gradient; a fully_shard parameter "
                      "is one (the forward computed with its unsharded copy): call backward() without inputs");
  }
  Execute(root_edges, root_grads, retain_graph || create_graph, [&](Node* n) { return reach.needed[n]; },
          [&](Node* n, TensorList& in, bool) {
            if (dynamic_cast<autograd::AccumulateGrad*>(n) != nullptr) return true;  // a leaf input: accumulate
            for (size_t i = 0; i < targets.size(); ++i) {  // a non-leaf input: its .grad, as retain_grad's
              if (targets[i].node.get() != n || in.size() <= targets[i].input_nr) continue;
              const Tensor& g = in[targets[i].input_nr];
              if (!g.defined()) continue;
              AutogradMeta& m = inputs[i].impl()->EnsureAutogradMeta();
              if (m.retains_grad && m.retained_at == n) continue;  // retain_grad's hook has set it already
              const Tensor mine = create_graph ? g : Detach(g);
              m.grad = m.grad.defined() ? autograd::internal::AddGrads(m.grad, mine)
                                        : (create_graph ? g : autograd::CallOp1(GetOp("clone"), {mine}));
            }
            return reach.below[n];
          });
  task.Finish();
}

void Backward(const TensorList& roots, const TensorList& grads, bool retain_graph, bool create_graph) {
  GraphTaskScope task("backward", create_graph);
  std::vector<Edge> root_edges;
  TensorList root_grads;
  autograd::internal::SeedRoots(roots, grads, &root_edges, &root_grads);
  Execute(root_edges, root_grads, retain_graph || create_graph, [](Node*) { return true; },
          [](Node*, TensorList&, bool) { return true; });
  task.Finish();
}

TensorList Grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs, bool retain_graph,
                bool allow_unused, bool create_graph) {
  TESSEL_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), "grad: ", outputs.size(),
               " outputs but ", grad_outputs.size(), " grad_outputs");
  const std::vector<Edge> targets = GradientTargets(inputs, "grad");
  GraphTaskScope task("grad", create_graph);
  std::vector<Edge> root_edges;
  TensorList root_grads;
  autograd::internal::SeedRoots(outputs, grad_outputs.empty() ? TensorList(outputs.size()) : grad_outputs,
                                &root_edges, &root_grads);
  // A target's own node that leads to no other target does not run (below[n] false), as torch's: its saved
  // tensors stay for a later backward through it.
  Reach reach = ReachTargets(root_edges, targets);
  auto& needed = reach.needed;
  auto& below = reach.below;
  TensorList result(inputs.size());
  Execute(root_edges, root_grads, retain_graph || create_graph, [&](Node* n) { return needed[n]; },
          [&](Node* n, TensorList& in, bool) {
            const bool leaf = dynamic_cast<autograd::AccumulateGrad*>(n) != nullptr;
            for (size_t i = 0; i < targets.size(); ++i) {
              if (targets[i].node.get() != n) continue;
              Tensor g = in.size() > targets[i].input_nr ? in[targets[i].input_nr] : Tensor();
              if (leaf && g.defined()) {  // the leaf's own hooks, which AccumulateGrad would have run
                inputs[i].impl()->EnsureAutogradMeta().hooks.ForEach([&](const TensorHook& hook) {
                  g = autograd::HookResult(g, hook(g));
                  return true;
                });
              }
              result[i] = std::move(g);
            }
            return !leaf && below[n];  // AccumulateGrad never runs: nothing is accumulated
          });
  task.Finish();
  for (size_t i = 0; i < result.size(); ++i) {
    TESSEL_CHECK(allow_unused || result[i].defined(), "grad: input ", i, " of shape ", ShapeStr(inputs[i].sizes()),
                 " was not used in the graph of the outputs; pass allow_unused=true if that is intended");
  }
  return result;
}

HookRemover RegisterHook(const Tensor& t, TensorHook hook) {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, t.requires_grad(),
                    "register_hook: cannot register a hook on a tensor that does not require grad");
  AutogradMeta& meta = t.impl()->EnsureAutogradMeta();
  if (meta.grad_fn) {  // on the node's output: the hook stays with this version of the tensor, as torch's
    auto& hooks = meta.grad_fn->output_hooks;
    const size_t nr = static_cast<size_t>(meta.output_nr);
    if (hooks.size() <= nr) hooks.resize(nr + 1);
    const uint64_t id = hooks[nr].Add(std::move(hook));
    return [node = std::weak_ptr<autograd::Node>(meta.grad_fn), nr, id] {
      if (const std::shared_ptr<autograd::Node> n = node.lock(); n != nullptr && nr < n->output_hooks.size()) {
        n->output_hooks[nr].Remove(id);
      }
    };
  }
  const uint64_t id = meta.hooks.Add(std::move(hook));
  return [impl = std::weak_ptr<TensorImpl>(t.impl_ptr()), id] {
    if (const std::shared_ptr<TensorImpl> p = impl.lock()) p->EnsureAutogradMeta().hooks.Remove(id);
  };
}

HookRemover RegisterPostAccumulateGradHook(const Tensor& leaf, PostAccumulateGradHook hook) {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, leaf.requires_grad() && leaf.is_leaf(),
                    "register_post_accumulate_grad_hook: only leaf tensors that require grad have one");
  const uint64_t id = leaf.impl()->EnsureAutogradMeta().post_accumulate_grad_hooks.Add(std::move(hook));
  return [impl = std::weak_ptr<TensorImpl>(leaf.impl_ptr()), id] {
    if (const std::shared_ptr<TensorImpl> p = impl.lock()) {
      p->EnsureAutogradMeta().post_accumulate_grad_hooks.Remove(id);
    }
  };
}

void RetainGrad(const Tensor& t) {
  if (t.is_leaf()) return;
  AutogradMeta& meta = t.impl()->EnsureAutogradMeta();
  const autograd::Node* node = meta.grad_fn.get();
  if (meta.retains_grad && meta.retained_at == node) return;
  meta.retains_grad = true;
  meta.retained_at = node;
  std::weak_ptr<TensorImpl> weak = t.impl_ptr();
  auto& hooks = meta.grad_fn->retain_hooks;
  if (hooks.size() <= static_cast<size_t>(meta.output_nr)) hooks.resize(meta.output_nr + 1);
  hooks[meta.output_nr].push_back([weak, node](const Tensor& g) {
    if (auto impl = weak.lock()) {
      AutogradMeta& m = impl->EnsureAutogradMeta();
      // After an in-place op the tensor is a later version (another grad_fn): torch's .grad is that version's
      // gradient, so this older node's hook keeps out of it (it added the old version's gradient in).
      if (m.grad_fn.get() != node) return Tensor();
      // Recorded under create_graph (a penalty on y.grad keeps its term), a plain clone otherwise.
      m.grad = m.grad.defined() ? autograd::internal::AddGrads(m.grad, g) : autograd::CallOp1(GetOp("clone"), {g});
    }
    return Tensor();
  });
}

}  // namespace tessel
