// core/autograd/split_backward.cc — BackwardInput / BackwardWeight ([Note: split backward] in the header).
#include "core/autograd/split_backward.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "core/autograd/anomaly.h"
#include "core/autograd/graph_task.h"
#include "core/autograd/node.h"
#include "core/base/error.h"

namespace tessel {

using autograd::Edge;
using autograd::Node;
namespace internal = autograd::internal;

// One on-path node in the order I ran it; `node` is set only when it left work for W.
struct WeightGradStep {
  uint64_t sequence_nr = 0;
  std::shared_ptr<Node> node;
  TensorList grads;         // its output gradients after hooks (dY)
  std::vector<char> needs;  // per next edge: deferred to W
};

struct WeightGradTask::State {
  std::vector<WeightGradStep> order;
  std::vector<Edge> off_path_roots;  // roots whose node leads to no input: all of their backward is W's
  TensorList off_path_root_grads;
  bool ran = false;
};

struct WeightGradTaskAccess {
  static std::unique_ptr<WeightGradTask::State>& state(WeightGradTask& t) { return t.state_; }
};

WeightGradTask::WeightGradTask() = default;
WeightGradTask::~WeightGradTask() = default;
WeightGradTask::WeightGradTask(WeightGradTask&&) noexcept = default;
WeightGradTask& WeightGradTask::operator=(WeightGradTask&&) noexcept = default;
bool WeightGradTask::pending() const { return state_ != nullptr && !state_->ran; }

size_t WeightGradTask::num_deferred_nodes() const {
  if (!state_) return 0;
  size_t n = 0;
  for (const WeightGradStep& s : state_->order) n += s.node != nullptr;
  return n;
}

namespace {

std::span<const bool> AsBools(const std::vector<char>& v) {
  return {reinterpret_cast<const bool*>(v.data()), v.size()};
}

// Nodes reachable from `roots`, and each one's parents (the nodes with an edge into it).
std::unordered_map<Node*, std::vector<Node*>> ReachableParents(const std::vector<Edge>& roots) {
  std::unordered_map<Node*, std::vector<Node*>> parents;
  std::vector<Node*> stack;
  for (const Edge& e : roots) {
    if (parents.emplace(e.node.get(), std::vector<Node*>{}).second) stack.push_back(e.node.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.valid()) continue;
      auto [it, inserted] = parents.emplace(e.node.get(), std::vector<Node*>{});
      it->second.push_back(n);
      if (inserted) stack.push_back(e.node.get());
    }
  }
  return parents;
}

// Nodes from which some target is reachable (targets included).
std::unordered_set<Node*> InputPath(const std::unordered_map<Node*, std::vector<Node*>>& parents,
                                    const std::unordered_map<Node*, std::vector<size_t>>& targets) {
  std::unordered_set<Node*> on_path;
  std::vector<Node*> stack;
  for (const auto& [t, idx] : targets) {
    if (parents.count(t) && on_path.insert(t).second) stack.push_back(t);
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (Node* p : parents.at(n)) {
      if (on_path.insert(p).second) stack.push_back(p);
    }
  }
  return on_path;
}

// The accumulator node of each input (which must be a leaf that requires grad) → the input indices.
std::unordered_map<Node*, std::vector<size_t>> InputTargets(const TensorList& inputs, std::vector<Edge>* edges) {
  std::unordered_map<Node*, std::vector<size_t>> targets;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    TESSEL_CHECK(x.defined() && x.is_leaf() && x.requires_grad(), "BackwardInput: input ", i,
                 " must be a leaf that requires grad (a stage's received activation), got ",
                 x.defined() ? (x.is_leaf() ? "a leaf that does not require grad" : "a non-leaf") : "undefined");
    edges->push_back(autograd::GradientEdge(x));
    targets[edges->back().node.get()].push_back(i);
  }
  return targets;
}

// Runs on-path node `n` for I: applies the edges into the path now, keeps the others as a W step.
WeightGradStep RunInputStep(Node* n, TensorList in, const std::unordered_set<Node*>& on_path, TensorList* outs) {
  WeightGradStep step{n->sequence_nr()};
  if (!internal::PrepareNodeInputs(n, in)) return step;
  std::vector<char> now(n->next_edges.size()), later(n->next_edges.size());
  bool any_now = false, any_later = false;
  for (size_t i = 0; i < n->next_edges.size(); ++i) {
    const Edge& e = n->next_edges[i];
    if (!e.valid()) continue;
    (on_path.count(e.node.get()) ? now[i] : later[i]) = 1;
    any_now = any_now || now[i];
    any_later = any_later || later[i];
  }
  if (any_later) {
    step.node = n->shared_from_this();
    step.grads = in;
    step.needs = std::move(later);
  }
  if (any_now) {
    *outs = internal::RunNodeApply(n, std::move(in), AsBools(now));
    internal::CheckAnomaly(*n, *outs);
  }
  if (!any_later) n->ReleaseSaved();
  return step;
}

}  // namespace

SplitBackwardResult BackwardInput(const TensorList& roots, const TensorList& grads, const TensorList& inputs) {
  internal::GraphTaskScope scope("BackwardInput");
  std::vector<Edge> root_edges;
  TensorList root_grads;
  internal::SeedRoots(roots, grads, &root_edges, &root_grads);
  std::vector<Edge> target_edges;  // keeps accumulators created here alive
  const auto targets = InputTargets(inputs, &target_edges);
  const auto parents = ReachableParents(root_edges);
  const std::unordered_set<Node*> on_path = InputPath(parents, targets);

  SplitBackwardResult result;
  result.input_grads.resize(inputs.size());
  auto state = std::make_unique<WeightGradTask::State>();
  std::unordered_map<Node*, int> deps;
  for (const auto& [n, ps] : parents) {
    if (on_path.count(n)) deps[n] = static_cast<int>(ps.size());
  }
  internal::GradBuffers buffers;
  std::priority_queue<Node*, std::vector<Node*>, internal::ReadyOrder> ready;
  for (size_t i = 0; i < root_edges.size(); ++i) {
    Node* n = root_edges[i].node.get();
    if (!on_path.count(n)) {
      state->off_path_roots.push_back(root_edges[i]);
      state->off_path_root_grads.push_back(root_grads[i]);
      continue;
    }
    buffers.Add(root_edges[i], root_grads[i]);
    if (deps[n] == 0) {
      deps[n] = -1;  // queued
      ready.push(n);
    }
  }
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    TensorList in = buffers.Take(n);
    if (auto t = targets.find(n); t != targets.end()) {
      in.resize(1);
      for (size_t idx : t->second) result.input_grads[idx] = in[0];
      continue;
    }
    TensorList outs;
    state->order.push_back(RunInputStep(n, std::move(in), on_path, &outs));
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      const Edge& e = n->next_edges[i];
      if (!e.valid() || !on_path.count(e.node.get())) continue;
      buffers.Add(e, i < outs.size() ? std::move(outs[i]) : Tensor());
      if (--deps[e.node.get()] == 0) {
        deps[e.node.get()] = -1;
        ready.push(e.node.get());
      }
    }
  }
  WeightGradTaskAccess::state(result.weight_task) = std::move(state);
  scope.Finish();
  return result;
}

namespace {

// Dependency counts of the nodes W runs besides the kept steps: everything reachable from the steps'
// deferred edges and from the off-path roots.
std::unordered_map<Node*, int> WeightDeps(const WeightGradTask::State& s) {
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack;
  auto visit = [&](Node* n, int count) {
    auto [it, inserted] = deps.emplace(n, 0);
    it->second += count;
    if (inserted) stack.push_back(n);
  };
  for (const Edge& e : s.off_path_roots) visit(e.node.get(), 0);
  for (const WeightGradStep& step : s.order) {
    if (!step.node) continue;
    for (size_t i = 0; i < step.needs.size(); ++i) {
      if (step.needs[i]) visit(step.node->next_edges[i].node.get(), 1);
    }
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (e.valid()) visit(e.node.get(), 1);
    }
  }
  return deps;
}

}  // namespace

void BackwardWeight(WeightGradTask& task) {
  auto& state = WeightGradTaskAccess::state(task);
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, state != nullptr,
                    "BackwardWeight: no BackwardInput made this task (W before I?)");
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !state->ran,
                    "BackwardWeight: this task already ran (W twice for one I)");
  state->ran = true;
  internal::GraphTaskScope scope("BackwardWeight");
  std::unordered_map<Node*, int> deps = WeightDeps(*state);
  internal::GradBuffers buffers;
  std::priority_queue<Node*, std::vector<Node*>, internal::ReadyOrder> ready;
  for (size_t i = 0; i < state->off_path_roots.size(); ++i) buffers.Add(state->off_path_roots[i],
                                                                        state->off_path_root_grads[i]);
  for (const Edge& e : state->off_path_roots) {
    if (deps[e.node.get()] == 0) {
      deps[e.node.get()] = -1;
      ready.push(e.node.get());
    }
  }
  auto route = [&](Node* n, TensorList& outs, const std::vector<char>* needs) {
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      const Edge& e = n->next_edges[i];
      if (!e.valid() || (needs && !(*needs)[i])) continue;
      buffers.Add(e, i < outs.size() ? std::move(outs[i]) : Tensor());
      if (--deps[e.node.get()] == 0) {
        deps[e.node.get()] = -1;
        ready.push(e.node.get());
      }
    }
  };
  // Replays one full backward's greedy order: the next step of I's order or the highest ready node.
  size_t next = 0;
  while (true) {
    while (next < state->order.size() && !state->order[next].node) ++next;
    const bool step_first = next < state->order.size() &&
                            (ready.empty() || state->order[next].sequence_nr > ready.top()->sequence_nr());
    if (step_first) {
      WeightGradStep& step = state->order[next++];
      TensorList outs = internal::RunNodeApply(step.node.get(), std::move(step.grads), AsBools(step.needs));
      internal::CheckAnomaly(*step.node, outs);
      step.node->ReleaseSaved();
      route(step.node.get(), outs, &step.needs);  // the node stays alive: its edges own the ready nodes
    } else if (!ready.empty()) {
      Node* n = ready.top();
      ready.pop();
      TensorList in = buffers.Take(n);
      TensorList outs;
      if (internal::PrepareNodeInputs(n, in)) {
        outs = internal::RunNodeApply(n, std::move(in));
        internal::CheckAnomaly(*n, outs);
        n->ReleaseSaved();
      }
      route(n, outs, nullptr);
    } else {
      break;
    }
  }
  scope.Finish();
  state->order.clear();
}

}  // namespace tessel
