// core/autograd/graph_task.h — internal: the pieces of a backward pass that Backward (engine.cc) and the
// split backward (split_backward.cc) share: root seeding, gradient buffers, output hooks, the ready
// order and the per-thread task that QueueCallback appends to. Not a public header (only in srcs).
//
// Invariant: at most one GraphTaskScope is alive per thread (re-entrant backward is rejected), and its
// callbacks run once, in queue order, when Finish() is called after the last node ran.
//
// Example:
//   internal::GraphTaskScope scope("backward");
//   ... run nodes ...
//   scope.Finish();
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/autograd/grad_mode.h"
#include "core/autograd/node.h"
#include "core/memory/allocator.h"
#include "core/tensor/tensor.h"

namespace tessel::autograd::internal {

Tensor AddGrads(const Tensor& a, const Tensor& b);

// The root edges and their seed gradients (ones for a one-element root without a given grad).
void SeedRoots(const TensorList& roots, const TensorList& grads, std::vector<Edge>* edges, TensorList* seeds);

// Runs node `n`'s output hooks, then its pre hooks, on `in` (resized to one slot per output); if any gradient is
// defined, fills the undefined ones with zeros and returns true; otherwise returns false (the node is skipped).
bool PrepareNodeInputs(Node* n, TensorList& in);
// n->Apply(in) (or ApplyMasked with `needs`) and then n's post hooks over what it returned (its pre hooks ran in
// PrepareNodeInputs, before the zero fill).
TensorList RunNodeApply(Node* n, TensorList in, std::optional<std::span<const bool>> needs = std::nullopt);

// Gradient slots per node, summed in arrival order.
class GradBuffers {
 public:
  void Add(const Edge& e, Tensor g);
  TensorList Take(Node* n);

 private:
  std::unordered_map<Node*, TensorList> buffers_;
};

// Highest sequence number first (PyTorch's order); leaf accumulators carry the maximum.
struct ReadyOrder {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

// Grad mode off (on with create_graph: the backward formulas then record their own graph), the
// activations ledger (unless a caller chose one), and this thread's callback queue.
class GraphTaskScope {
 public:
  explicit GraphTaskScope(const char* what, bool create_graph = false);
  ~GraphTaskScope();
  GraphTaskScope(const GraphTaskScope&) = delete;
  GraphTaskScope& operator=(const GraphTaskScope&) = delete;
  void Finish();  // runs the queued callbacks

 private:
  GradModeGuard no_grad_;
  std::optional<memory::LedgerScope> ledger_;
  std::vector<std::function<void()>> callbacks_;
  friend void QueueCallbackImpl(std::function<void()> fn);
  friend bool InBackwardImpl();
  friend bool CreatingGraphImpl();
  friend uint64_t BackwardPassIdImpl();
  bool create_graph_ = false;
  uint64_t id_ = 0;  // distinct for every pass of the process (BackwardPassId)
};

// Whether this thread runs a backward pass with create_graph (its formulas' ops are recorded).
bool CreatingGraphImpl();

void QueueCallbackImpl(std::function<void()> fn);
bool InBackwardImpl();
uint64_t BackwardPassIdImpl();

}  // namespace tessel::autograd::internal
