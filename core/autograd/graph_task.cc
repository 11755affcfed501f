// core/autograd/graph_task.cc — shared backward-pass pieces (see graph_task.h).
#include "core/autograd/graph_task.h"

#include <algorithm>
#include <atomic>

#include "core/autograd/call.h"
#include "core/base/error.h"
#include "core/dispatch/dispatcher.h"
#include "core/tensor/factory.h"

namespace tessel::autograd::internal {
namespace {

thread_local GraphTaskScope* current_task = nullptr;
std::atomic<uint64_t> pass_counter{0};  // every rank thread's passes: ids never repeat in the process

Tensor ZerosFor(const OutputMeta& m) {
  if (m.is_distributed || !IsFloating(m.dtype)) return Tensor();
  return Zeros(m.sizes, m.dtype, m.device);
}

}  // namespace

Tensor AddGrads(const Tensor& a, const Tensor& b) {
  return CallOp1(GetOp("add"), {a, b});  // recorded under create_graph (grad mode on), else a plain add
}

void SeedRoots(const TensorList& roots, const TensorList& grads, std::vector<Edge>* edges, TensorList* seeds) {
  TESSEL_CHECK(roots.size() == grads.size(), "backward: ", roots.size(), " roots but ", grads.size(), " grads");
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, r.defined() && r.requires_grad(), "element ", i,
                      " of tensors does not require grad and does not have a grad_fn (backward: root ", i, ")");
    Tensor g = grads[i];
    if (!g.defined()) {
      TESSEL_CHECK(r.numel() == 1, "grad can be implicitly created only for scalar outputs (backward: output of shape ",
                   ShapeStr(r.sizes()), "; pass gradient=)");
      const Tensor in[] = {r};
      g = Dispatch(GetOp("ones_like"), in, Attrs())[0];
    }
    TESSEL_CHECK(g.sizes() == r.sizes(), "backward: grad shape ", ShapeStr(g.sizes()), " != root shape ",
                 ShapeStr(r.sizes()));
    if (g.dtype() != r.dtype()) {  // torch casts the seed to the root's dtype
      const Tensor in[] = {g};
      g = Dispatch(GetOp("cast"), in, Attrs().Set("dtype", r.dtype()).Set("src_dtype", g.dtype()))[0];
    }
    edges->push_back(GradientEdge(r));
    seeds->push_back(std::move(g));
  }
}

namespace {
// A node hook's replacement list checked against the list it replaces (torch's "hook ... has returned an incorrect
// number of values"), each tensor as a tensor hook's result (HookResult: its shape, dtype and device).
void TakeHookResult(const Node& n, const char* kind, TensorList& current, TensorList replaced) {
  TESSEL_CHECK(replaced.size() == current.size(), kind, " hook of ", TorchNodeName(n.name()),
               " has returned an incorrect number of values (got ", replaced.size(), ", but expected ",
               current.size(), ")");
  for (size_t i = 0; i < current.size(); ++i) {
    current[i] = current[i].defined() && replaced[i].defined() ? HookResult(current[i], std::move(replaced[i]))
                                                                : std::move(replaced[i]);
  }
}

// n's pre hooks (Node::pre_hooks) over its incoming gradients, in registration order, before undefined ones are
// filled with zeros (torch passes None for them).
void RunNodePreHooks(Node* n, TensorList& in) {
  n->pre_hooks.ForEach([&](const NodePreHook& hook) {
    if (std::optional<TensorList> r = hook(in)) TakeHookResult(*n, "pre", in, std::move(*r));
    return true;
  });
}
}  // namespace

TensorList RunNodeApply(Node* n, TensorList in, std::optional<std::span<const bool>> needs) {
  const TensorList incoming = n->post_hooks.empty() ? TensorList() : in;
  TensorList outs = needs ? n->ApplyMasked(std::move(in), *needs) : n->Apply(std::move(in));
  n->post_hooks.ForEach([&](const NodePostHook& hook) {
    if (std::optional<TensorList> r = hook(outs, incoming)) TakeHookResult(*n, "post", outs, std::move(*r));
    return true;
  });
  return outs;
}

bool PrepareNodeInputs(Node* n, TensorList& in) {
  in.resize(n->output_meta.size());
  bool any = false;
  // AccumulateGrad runs its leaf's hooks itself.
  const bool run_hooks = dynamic_cast<AccumulateGrad*>(n) == nullptr;
  for (size_t i = 0; i < in.size(); ++i) {
    if (run_hooks && i < n->output_hooks.size()) {
      n->output_hooks[i].ForEach([&](const TensorHook& hook) {
        if (!in[i].defined()) return false;
        in[i] = HookResult(in[i], hook(in[i]));
        return true;
      });
    }
    if (run_hooks && i < n->retain_hooks.size() && in[i].defined()) {
      for (const TensorHook& hook : n->retain_hooks[i]) hook(in[i]);
    }
    any = any || in[i].defined();
  }
  if (any && !n->pre_hooks.empty()) {
    RunNodePreHooks(n, in);
    any = std::any_of(in.begin(), in.end(), [](const Tensor& g) { return g.defined(); });
  }
  if (any && n->materialize_grads) {
    for (size_t i = 0; i < in.size(); ++i) {
      if (!in[i].defined() && n->output_meta[i].differentiable) in[i] = ZerosFor(n->output_meta[i]);
    }
  }
  return any;
}

void GradBuffers::Add(const Edge& e, Tensor g) {
  TensorList& buf = buffers_[e.node.get()];
  if (buf.empty()) buf.resize(e.node->output_meta.size());
  if (!g.defined()) return;
  buf[e.input_nr] = buf[e.input_nr].defined() ? AddGrads(buf[e.input_nr], g) : std::move(g);
}

TensorList GradBuffers::Take(Node* n) {
  auto it = buffers_.find(n);
  if (it == buffers_.end()) return {};
  TensorList out = std::move(it->second);
  buffers_.erase(it);
  return out;
}

GraphTaskScope::GraphTaskScope(const char* what, bool create_graph)
    : no_grad_(create_graph), create_graph_(create_graph), id_(++pass_counter) {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, current_task == nullptr, what,
                    ": re-entrant backward is not supported");
  if (memory::CurrentLedger() == memory::Ledger::kOther) ledger_.emplace(memory::Ledger::kActivations);
  current_task = this;
}

GraphTaskScope::~GraphTaskScope() { current_task = nullptr; }

void GraphTaskScope::Finish() {
  for (size_t i = 0; i < callbacks_.size(); ++i) callbacks_[i]();
  callbacks_.clear();
}

void QueueCallbackImpl(std::function<void()> fn) {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, current_task != nullptr,
                    "QueueCallback: only valid while a backward pass runs on this thread");
  current_task->callbacks_.push_back(std::move(fn));
}

bool InBackwardImpl() { return current_task != nullptr; }

uint64_t BackwardPassIdImpl() { return current_task != nullptr ? current_task->id_ : 0; }

bool CreatingGraphImpl() { return current_task != nullptr && current_task->create_graph_ && GradModeEnabled(); }

}  // namespace tessel::autograd::internal
