// core/autograd/node.cc — Node sequence numbers, gradient edges and leaf accumulation.
#include "core/autograd/node.h"

#include <atomic>
#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "core/autograd/anomaly.h"
#include "core/autograd/call.h"
#include "core/autograd/graph_task.h"
#include "core/base/error.h"
#include "core/dispatch/dispatcher.h"
#include "core/memory/allocator.h"

namespace tessel::autograd {
namespace {
std::atomic<uint64_t> next_sequence_nr{0};
}  // namespace

Node::Node()
    : forward_trace(internal::ForwardTrace()), sequence_nr_(next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

namespace {
// Nodes whose last owner was a Node being destroyed on this thread, released one at a time by the outermost
// ~Node (torch's deleteNode does the same).
thread_local std::vector<std::shared_ptr<Node>>* releasing = nullptr;
}  // namespace

// A graph's nodes own their inputs' nodes (next_edges), so releasing a chain recursively took one stack frame
// per node: a 100k-op chain (a Python loop of `y = y + 1`) overflowed the stack and crashed when it was freed.
// Here a node hands its edges to the outermost destructor's queue before its members (saved tensors, whose
// grad_fn is normally also one of those edges) go, so the depth stays constant whatever the graph's length.
Node::~Node() {
  if (releasing != nullptr) {
    for (Edge& e : next_edges) {
      if (e.node != nullptr) releasing->push_back(std::move(e.node));
    }
    return;
  }
  std::vector<std::shared_ptr<Node>> queue;
  releasing = &queue;
  for (Edge& e : next_edges) {
    if (e.node != nullptr) queue.push_back(std::move(e.node));
  }
  while (!queue.empty()) {
    std::shared_ptr<Node> last = std::move(queue.back());
    queue.pop_back();
    last.reset();  // if this was its last owner, its destructor queues its own edges
  }
  releasing = nullptr;
}

Tensor HookResult(const Tensor& grad, Tensor replaced) {
  if (!replaced.defined()) return grad;
  const char* what = replaced.sizes() != grad.sizes()     ? "size"
                     : replaced.dtype() != grad.dtype()   ? "type"
                     : replaced.device() != grad.device() ? "device"
                                                          : nullptr;
  TESSEL_CHECK(what == nullptr, "backward hook: a tensor hook has changed the ", what, " of value: the gradient is ",
               ShapeStr(grad.sizes()), " ", DTypeName(grad.dtype()), " on ", grad.device().ToString(),
               ", the hook returned ", ShapeStr(replaced.sizes()), " ", DTypeName(replaced.dtype()), " on ",
               replaced.device().ToString());
  return replaced;
}

TensorList Node::ApplyMasked(TensorList grads, std::span<const bool> needs) {
  TensorList out = Apply(std::move(grads));
  for (size_t i = 0; i < out.size() && i < needs.size(); ++i) {
    if (!needs[i]) out[i] = Tensor();
  }
  return out;
}

namespace {
LeafGradLayout leaf_grad_layout = nullptr;  // SetLeafGradLayout
}  // namespace

void SetLeafGradLayout(LeafGradLayout layout) { leaf_grad_layout = layout; }

AccumulateGrad::AccumulateGrad(Tensor leaf) : leaf_(std::move(leaf)) {
  sequence_nr_ = std::numeric_limits<uint64_t>::max();  // run as soon as ready
  output_meta.push_back({leaf_.sizes(), leaf_.dtype(), leaf_.device(), leaf_.is_distributed()});
  output_hooks.resize(1);
}

TensorList AccumulateGrad::Apply(TensorList grads) {
  // A leaf frozen (requires_grad_(false)) between forward and backward gets no .grad, as torch: an
  // optimizer would otherwise update (and weight-decay) the frozen parameter.
  if (!leaf_.requires_grad()) return {};
  Tensor g = std::move(grads[0]);
  AutogradMeta& meta = leaf_.impl()->EnsureAutogradMeta();
  meta.hooks.ForEach([&](const TensorHook& hook) {
    if (!g.defined()) return false;
    g = HookResult(g, hook(g));
    return true;
  });
  if (g.defined() && leaf_grad_layout != nullptr && g.is_distributed() && leaf_.is_distributed()) {
    g = leaf_grad_layout(g, leaf_);
  }
  if (g.defined() && internal::CreatingGraphImpl()) {
    // create_graph: .grad keeps the gradient's own graph, accumulated out of place (torch's rule).
    if (g.dtype() != leaf_.dtype()) {
      g = CallOp1(GetOp("cast"), {g}, Attrs().Set("dtype", leaf_.dtype()).Set("src_dtype", g.dtype()));
    }
    // The first gradient is cloned (recorded): the incoming one may be the caller's seed or shared by
    // several leaves, and a later backward accumulates into .grad in place (torch clones too).
    meta.grad = meta.grad.defined() ? CallOp1(GetOp("add"), {meta.grad, g}) : CallOp1(GetOp("clone"), {g});
  } else if (g.defined()) {
    TESSEL_INTERNAL_ASSERT(g.sizes() == leaf_.sizes(), "gradient of shape ", ShapeStr(g.sizes()),
                           " for a leaf of shape ", ShapeStr(leaf_.sizes()));
    // .grad has the leaf's dtype (torch casts an incoming gradient: a bf16 seed gave a bf16 .grad, which
    // the optimizers then read as float32) and, for a contiguous leaf, contiguous strides (a gradient
    // through w.t() arrived transposed and the optimizers refused it).
    if (g.dtype() != leaf_.dtype()) {
      memory::LedgerScope scope(memory::Ledger::kGrads);
      const Tensor in[] = {g};
      g = Dispatch(GetOp("cast"), in, Attrs().Set("dtype", leaf_.dtype()).Set("src_dtype", g.dtype()))[0];
    }
    if (!meta.grad.defined()) {
      // Adopt the incoming buffer when nothing else references it; otherwise copy it.
      const bool layout_ok = g.is_contiguous() || !leaf_.is_contiguous();
      if (g.impl_ptr().use_count() == 1 && g.impl()->OwnsDataExclusively() && layout_ok) {
        meta.grad = std::move(g);
      } else {
        memory::LedgerScope scope(memory::Ledger::kGrads);
        const Tensor in[] = {g};
        meta.grad = Dispatch(GetOp("clone"), in, Attrs())[0];  // contiguous
      }
      meta.grad.impl()->RetagMemory(memory::Ledger::kGrads);
    } else {
      // A .grad of another dtype than the leaf's (`p.data = p.data.double()` after a backward) keeps its
      // dtype, as torch's in-place accumulation.
      if (meta.grad.dtype() != g.dtype()) {
        const Tensor in[] = {g};
        g = Dispatch(GetOp("cast"), in, Attrs().Set("dtype", meta.grad.dtype()).Set("src_dtype", g.dtype()))[0];
      }
      const Tensor inputs[] = {meta.grad, g};
      Dispatch(GetOp("add_"), inputs, Attrs());
    }
  }
  meta.post_accumulate_grad_hooks.ForEach([&](const PostAccumulateGradHook& hook) {
    hook(leaf_);
    return true;
  });
  return {};
}

Edge GradientEdge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  AutogradMeta& meta = t.impl()->EnsureAutogradMeta();
  if (meta.grad_fn) return {meta.grad_fn, meta.output_nr};
  std::shared_ptr<Node> acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t);
    meta.grad_accumulator = acc;
  }
  return {acc, 0};
}

std::string TorchNodeName(const std::string& name) {
  if (name == "AccumulateGrad" || name == "CopySlices") return "torch::autograd::" + name;
  if (name.find("Backward") != std::string::npos) return name;
  // tessel ops whose torch counterpart has another name (the rest read the same, camel-cased).
  static const auto* renamed = new std::map<std::string, std::string>{
      {"mul_scalar", "MulBackward0"},   {"add_scalar", "AddBackward0"}, {"narrow", "SliceBackward0"},
      {"cast", "ToCopyBackward0"},      {"contiguous", "CloneBackward0"}, {"amax", "MaxBackward1"},
      {"clamp", "ClampBackward1"},      {"div_scalar", "DivBackward0"}};
  if (auto it = renamed->find(name); it != renamed->end()) return it->second;
  std::string out;
  bool upper = true;
  for (char c : name) {
    if (c == '_' || c == '.' || c == ':') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return out + "Backward0";
}

}  // namespace tessel::autograd
