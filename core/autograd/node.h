// core/autograd/node.h — backward graph nodes and edges.
//
// Invariant: a Node has one next edge per input of the forward call that made it (an invalid edge for
// inputs that need no gradient) and one gradient slot per forward output. Nodes made later have higher
// sequence numbers; the engine runs ready nodes highest-sequence first (PyTorch's order), and leaf
// accumulators before anything else, so post-accumulate-grad hooks fire as early as possible.
//
// Example:
//   std::shared_ptr<Node> fn = y.grad_fn();   // e.g. an OpNode named "matmul"
//   fn->name();
#pragma once

#include <cstdint>
#include <limits>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::autograd {

class Node;

struct Edge {
  std::shared_ptr<Node> node;
  int input_nr = 0;  // which gradient slot of `node`
  bool valid() const { return node != nullptr; }
};

// Shape/dtype of a forward output, so the engine can give a zero gradient to an output that got none.
struct OutputMeta {
  Shape sizes;
  DType dtype = DType::kFloat32;
  Device device;
  bool is_distributed = false;
  // False for an output the op lists in non_differentiable_outputs, and for an output of a backward
  // function (module hooks, FSDP boundaries) whose input does not require grad: no gradient can reach
  // it, so the engine leaves its grad undefined instead of materializing zeros (PyTorch passes None).
  bool differentiable = true;
};

// torch's Node.register_prehook / register_hook, run by the engine around a node's Apply (PrepareNodeInputs and
// RunNodeApply in graph_task.h). A pre hook gets the node's incoming gradients (one per forward output, undefined
// where none arrived, before the engine fills those with zeros) and returns replacements, or nullopt to keep
// them; a post hook gets the gradients Apply returned (one per next edge; none for AccumulateGrad) and the
// incoming ones, and returns replacements for the former, or nullopt. Megatron / DeepSpeed's data-parallel
// wrappers hang their gradient-ready callbacks on a parameter's AccumulateGrad node this way.
using NodePreHook = std::function<std::optional<TensorList>(const TensorList& grad_outputs)>;
using NodePostHook =
    std::function<std::optional<TensorList>(const TensorList& grad_inputs, const TensorList& grad_outputs)>;

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  virtual std::string name() const = 0;
  // grads: one per forward output (undefined = zero). Returns one gradient per next edge.
  virtual TensorList Apply(TensorList grads) = 0;
  // Apply restricted to the next edges marked in `needs` (one entry per next edge; the split backward's
  // I and W halves, core/autograd/split_backward.h): the others get undefined gradients and, where the
  // node can tell its formula (OpNode), are not computed. Default: Apply, then drop the others.
  virtual TensorList ApplyMasked(TensorList grads, std::span<const bool> needs);
  // Frees saved tensors (backward without retain_graph).
  virtual void ReleaseSaved() {}

  uint64_t sequence_nr() const { return sequence_nr_; }
  std::vector<Edge> next_edges;
  std::vector<OutputMeta> output_meta;
  // Hooks on the gradient of forward output i (non-leaf tensor hooks), run before Apply.
  std::vector<HookList<TensorHook>> output_hooks;
  // RetainGrad's, per output: run after every output hook, so .grad is the gradient as the hooks left
  // it (torch runs the retain-grad hook last whatever the registration order, since 2.0).
  std::vector<std::vector<TensorHook>> retain_hooks;
  HookList<NodePreHook> pre_hooks;
  HookList<NodePostHook> post_hooks;
  // The engine fills the undefined gradients of a node some of whose outputs got one with zeros, so
  // formulas need not test. A pass-through node (module hooks, FSDP boundaries: ApplyBackwardFunction)
  // sets it false, as torch's ctx.set_materialize_grads(False): an output nobody used keeps an undefined
  // gradient, and the parameters behind it get no .grad (not zeros, which weight decay then applied).
  bool materialize_grads = true;
  // Anomaly mode's record of the forward call that made this node (anomaly.h: SetForwardTraceHooks); null outside it.
  std::unique_ptr<std::string> forward_trace;

 protected:
  uint64_t sequence_nr_;
};

// The node that adds incoming gradients into a leaf's .grad and runs its hooks.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor leaf);
  std::string name() const override { return "AccumulateGrad"; }
  TensorList Apply(TensorList grads) override;
  const Tensor& leaf() const { return leaf_; }

 private:
  Tensor leaf_;
};

// How a distributed leaf's incoming gradient is laid out before its .grad takes it. dtensor/ installs one: on a
// mesh axis where the leaf is sharded, the gradient moves to that sharding (a Partial one is reduce-scattered),
// so .grad is laid out as the parameter, as torch's gradients come out when its backward reuses the forward's
// redistributed inputs. Unset (no dtensor/ linked), gradients are taken as they come.
using LeafGradLayout = Tensor (*)(const Tensor& grad, const Tensor& leaf);
void SetLeafGradLayout(LeafGradLayout layout);

// What a tensor hook returned for gradient `grad`: itself when the hook returned nothing, else `replaced` once
// it has grad's shape, dtype and device (torch's check_single_result: kInvalidArgument "hook has changed the
// size of value ..."; a wrong shape used to reach the backward formulas and fail as an internal error).
Tensor HookResult(const Tensor& grad, Tensor replaced);

// Edge into the graph for a tensor: its grad_fn output, or its leaf accumulator (created on demand).
// Invalid edge when the tensor does not require grad.
Edge GradientEdge(const Tensor& t);

// torch's grad_fn class name for a node: an op's node "linear_gelu" reads "LinearGeluBackward0", "mul_scalar"
// "MulBackward0"; nodes that already carry a torch-style name (custom Functions' "<Class>Backward") keep it,
// AccumulateGrad and CopySlices read "torch::autograd::<name>". Python's grad_fn names and the anomaly mode's
// messages use it.
std::string TorchNodeName(const std::string& name);

}  // namespace tessel::autograd
