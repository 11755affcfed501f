// core/autograd/call.cc — CallOp (dispatch + record) and the nodes it creates.
#include "core/autograd/call.h"

#include <algorithm>

#include "core/autograd/autocast.h"
#include "core/autograd/grad_mode.h"
#include "core/autograd/graph_task.h"
#include "core/autograd/node.h"
#include "core/autograd/saved_tensor_hooks.h"
#include "core/base/error.h"
#include "core/dispatch/dispatcher.h"

namespace tessel::autograd {
namespace {

// True when index i appears in an OpDef's index list (saved_inputs, saved_outputs, non_differentiable_outputs).
bool Listed(const std::vector<int>& indices, size_t i) {
  return std::find(indices.begin(), indices.end(), static_cast<int>(i)) != indices.end();
}

// A saved tensor, or (under saved-tensor hooks) only the function that gives it back, with the input's place in
// the graph (its edge) for a create_graph backward to relink what the hook returns to.
struct Saved {
  Tensor tensor;
  uint32_t version = 0;
  UnpackFn unpack;
  Edge edge;
};

Saved MakeSaved(const Tensor& t, const PackFn* pack, bool is_input) {
  if (pack != nullptr) return Saved{Tensor(), 0, (*pack)(t), is_input && t.requires_grad() ? GradientEdge(t) : Edge{}};
  return Saved{t, t.impl()->version(), nullptr, Edge{}};
}

// `t` (what an unpack hook returned) as a tensor at `edge` of the graph: torch's SavedVariable::unpack re-wraps the
// hook's result with the saved tensor's grad_fn, so a formula in terms of it differentiates through the op's
// inputs, whatever graph (or none) the hook's tensor had.
Tensor AtEdge(const Tensor& t, const Edge& edge) {
  Tensor alias = Detach(t);
  AutogradMeta& meta = alias.impl()->EnsureAutogradMeta();
  meta.requires_grad = true;
  meta.grad_fn = edge.node;
  meta.output_nr = edge.input_nr;
  return alias;
}

// The node of one recorded op call: runs the op's backward formula.
class OpNode final : public Node {
 public:
  OpNode(const OpDef& op, const Attrs& attrs) : op_(op), attrs_(attrs) {}
  std::string name() const override { return op_.name; }

  void Save(const TensorList& inputs, const TensorList& outputs) {
    const PackFn* pack = internal::CurrentPackHook();
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor& t = inputs[i];
      const bool keep = op_.save_inputs && t.defined() && (op_.saved_inputs.empty() || Listed(op_.saved_inputs, i));
      saved_inputs_.push_back(keep ? MakeSaved(t, pack, /*is_input=*/true) : Saved{});
      saved_any_ = saved_any_ || keep;
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      const Tensor& t = outputs[i];
      const bool keep =
          op_.save_outputs && t.defined() && (op_.saved_outputs.empty() || Listed(op_.saved_outputs, i));
      saved_outputs_.push_back(keep ? MakeSaved(Detach(t), pack, /*is_input=*/false) : Saved{});
      saved_any_ = saved_any_ || keep;
    }
  }

  TensorList Apply(TensorList grads) override {
    std::vector<char> needs(next_edges.size());
    for (size_t i = 0; i < next_edges.size(); ++i) needs[i] = next_edges[i].valid();
    const bool* needs_ptr = reinterpret_cast<const bool*>(needs.data());
    return ApplyMasked(std::move(grads), std::span<const bool>(needs_ptr, needs.size()));
  }

  TensorList ApplyMasked(TensorList grads, std::span<const bool> mask) override {
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !released_,
                      "Trying to backward through the graph a second time (or directly access saved tensors after they "
                      "have already been freed): backward through '", op_.name, "' a second time, its saved tensors "
                      "were freed; pass retain_graph=true to the first backward");
    std::vector<char> needs(next_edges.size());
    for (size_t i = 0; i < next_edges.size(); ++i) needs[i] = next_edges[i].valid() && i < mask.size() && mask[i];
    TensorList inputs = Unpack(saved_inputs_, "input", &needs);
    TensorList outputs = Unpack(saved_outputs_, "output", nullptr);
    if (internal::CreatingGraphImpl()) {
      RelinkOutputs(outputs);
      for (size_t i = 0; i < inputs.size(); ++i) {  // (without hooks the saved input is the tensor itself)
        if (saved_inputs_[i].unpack && saved_inputs_[i].edge.valid() && inputs[i].defined() &&
            IsFloating(inputs[i].dtype())) {
          inputs[i] = AtEdge(inputs[i], saved_inputs_[i].edge);
        }
      }
    }
    const bool* needs_ptr = reinterpret_cast<const bool*>(needs.data());
    BackwardContext ctx{attrs_, inputs, outputs, grads, std::span<const bool>(needs_ptr, needs.size()), input_sizes_};
    TensorList out = op_.backward(ctx);
    TESSEL_INTERNAL_ASSERT(out.size() == next_edges.size(), op_.name, " backward returned ", out.size(),
                           " gradients for ", next_edges.size(), " inputs");
    for (size_t i = 0; i < out.size(); ++i) {
      if (!needs[i]) {
        out[i] = Tensor();
      } else if (out[i].defined()) {
        TESSEL_INTERNAL_ASSERT(out[i].sizes() == input_sizes_[i], op_.name, " backward: gradient ", i, " has shape ",
                               ShapeStr(out[i].sizes()), " but the input has shape ", ShapeStr(input_sizes_[i]));
      }
    }
    return out;
  }

  void ReleaseSaved() override {
    // A node that saved nothing (add, sum) can run backward again, as in torch: nothing was freed.
    if (!saved_any_) return;
    saved_inputs_.clear();
    saved_outputs_.clear();
    released_ = true;
  }

  std::vector<Shape> input_sizes_;

 private:
  // create_graph: saved outputs are stored detached (a node holding its own output would be a cycle), so
  // a formula in terms of the output would differentiate as if it were a constant. Give each one back
  // its place in the graph: an alias whose grad_fn is this node (torch's SavedVariable does the same), also
  // when an unpack hook gave it back (saved_tensors_hooks, save_on_cpu, checkpoint's recompute: skipping those
  // dropped the term through the output, e.g. half of exp's second derivative).
  void RelinkOutputs(TensorList& outputs) {
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (!outputs[i].defined() || i >= output_meta.size() || !output_meta[i].differentiable ||
          !IsFloating(outputs[i].dtype())) {
        continue;
      }
      outputs[i] = AtEdge(outputs[i], Edge{shared_from_this(), static_cast<int>(i)});
    }
  }

  bool saved_any_ = false;
  // Whether some gradient this backward computes (needs) reads saved input i's values (OpDef::saved_input_readers).
  bool ValuesRead(size_t i, const std::vector<char>& needs) const {
    if (i >= op_.saved_input_readers.size()) return true;
    for (int reader : op_.saved_input_readers[i]) {
      if (static_cast<size_t>(reader) < needs.size() && needs[reader]) return true;
    }
    return false;
  }
  // The saved tensors; `needs` (inputs only): the gradients computed, whose readers' inputs are version-checked.
  TensorList Unpack(const std::vector<Saved>& saved, const char* what, const std::vector<char>* needs) const {
    TensorList out;
    out.reserve(saved.size());
    for (size_t i = 0; i < saved.size(); ++i) {
      const Saved& s = saved[i];
      if (s.unpack) {
        out.push_back(s.unpack());
        continue;
      }
      if (s.tensor.defined() && (needs == nullptr || ValuesRead(i, *needs))) {
        TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, s.tensor.impl()->version() == s.version,
                          "one of the variables needed for gradient computation has been modified by an inplace "
                          "operation: ", what, " ", i, " of '", op_.name, "' (shape ", ShapeStr(s.tensor.sizes()),
                          ") is at version ", s.tensor.impl()->version(), "; expected version ", s.version,
                          " instead. Hint: enable anomaly detection to find the operation that failed to compute "
                          "its gradient, with torch.autograd.set_detect_anomaly(True).");
      }
      out.push_back(s.tensor);
    }
    return out;
  }

  const OpDef& op_;
  Attrs attrs_;
  std::vector<Saved> saved_inputs_;
  std::vector<Saved> saved_outputs_;
  bool released_ = false;
};

thread_local Node* running_function = nullptr;  // ReattachFunctionOutput: the FunctionNode whose backward runs

class FunctionNode final : public Node {
 public:
  FunctionNode(std::string name, std::function<TensorList(const TensorList&)> fn,
               std::function<void()> release = nullptr)
      : name_(std::move(name)), fn_(std::move(fn)), release_(std::move(release)) {
    materialize_grads = false;  // identity: an unused output's undefined gradient passes through
  }
  std::string name() const override { return name_; }
  void ReleaseSaved() override {
    if (release_) release_();
  }
  TensorList Apply(TensorList grads) override {
    struct Running {
      Node* previous;
      explicit Running(Node* node) : previous(running_function) { running_function = node; }
      ~Running() { running_function = previous; }
    } running(this);
    TensorList out = fn_(grads);
    TESSEL_CHECK(out.size() == next_edges.size(), name_, ": backward function returned ", out.size(),
                 " gradients for ", next_edges.size(), " inputs");
    return out;
  }

 private:
  std::string name_;
  std::function<TensorList(const TensorList&)> fn_;
  std::function<void()> release_;
};

void Attach(const std::shared_ptr<Node>& node, Tensor& out, int index, bool differentiable) {
  node->output_meta.push_back({out.sizes(), out.dtype(), out.device(), out.is_distributed(), differentiable});
  node->output_hooks.emplace_back();
  if (!differentiable || !IsFloating(out.dtype())) return;
  AutogradMeta& meta = out.impl()->EnsureAutogradMeta();
  meta.requires_grad = true;
  meta.grad_fn = node;
  meta.output_nr = index;
}

// OpDef::is_view: output 0 aliases input 0's storage; record the relation (TensorImpl::LinkView) so an
// in-place write recorded through either reaches the other's history (core/ops/inplace.h).
void LinkViewOutput(const OpDef& op, const TensorList& inputs, const TensorList& outputs) {
  if (!op.is_view || inputs.empty() || outputs.empty()) return;
  const Tensor& in = inputs[0];
  const Tensor& out = outputs[0];
  if (!in.defined() || !out.defined() || in.is_distributed() || out.is_distributed() || out.is_same(in)) return;
  if (out.impl()->view_base() != nullptr || !out.impl()->storage().is_same(in.impl()->storage())) return;
  TensorImpl::LinkView(in.impl_ptr(), out.impl_ptr());
}

}  // namespace

TensorList CallOp(const OpDef& op, TensorList inputs, const Attrs& attrs) {
  if (AutocastEnabled()) inputs = internal::AutocastInputs(op, std::move(inputs));
  if (ImplicitReplicationEnabled()) inputs = ReplicateImplicitly(std::move(inputs));
  const bool grad_mode = GradModeEnabled();
  const bool any_requires =
      std::any_of(inputs.begin(), inputs.end(), [](const Tensor& t) { return t.defined() && t.requires_grad(); });
  if (op.is_inplace && grad_mode) {
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !inputs[0].requires_grad(), op.name,
                      ": in-place operation on a tensor of shape ", ShapeStr(inputs[0].sizes()),
                      " that requires grad; use the out-of-place op or run under NoGradGuard");
    // Autograd records no in-place op, so a source that requires grad would be copied without its graph:
    // out[0] = w * 2 left out not requiring grad and w's gradient missing that use, silently (torch
    // records it). An error instead, as for the destination above.
    for (size_t i = 1; i < inputs.size(); ++i) {
      TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !inputs[i].defined() || !inputs[i].requires_grad(), op.name,
                        ": in-place operation into a tensor of shape ", ShapeStr(inputs[0].sizes()), " from input ",
                        i, " of shape ", ShapeStr(inputs[i].sizes()), ", which requires grad: in-place ops are not "
                        "recorded by autograd, so its gradient would be lost. Build the result out of place (cat, "
                        "stack, where, index ops) or detach() the input if no gradient should flow");
    }
  }
  TensorList outputs;
  OpInterceptor* interceptor = internal::CurrentInterceptor();
  std::optional<TensorList> replaced = interceptor != nullptr ? interceptor->Replace(op, inputs) : std::nullopt;
  if (replaced) {
    outputs = std::move(*replaced);
  } else {
    GradModeGuard off(false);
    outputs = Dispatch(op, inputs, attrs);
    // Kernels fill fresh outputs by in-place writes that count (CopyInto, fills); torch's outputs start at 0.
    if (!op.is_inplace) {
      for (const Tensor& out : outputs) ResetVersionIfUnshared(out);
    }
    if (interceptor != nullptr) interceptor->Observe(op, inputs, outputs);
  }
  if (!op.backward && grad_mode && any_requires && !op.is_inplace && internal::CreatingGraphImpl()) {
    // A backward formula (create_graph) used an op that has no gradient of its own: the higher-order
    // gradient would silently miss its term. Outputs that cannot carry a gradient (integers, bools) are fine.
    const bool floating = std::any_of(outputs.begin(), outputs.end(),
                                      [](const Tensor& t) { return t.defined() && IsFloating(t.dtype()); });
    TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, !floating || op.constant_outputs, "create_graph: the backward ",
                      "formula uses '", op.name, "', which has no gradient of its own, so a higher-order gradient ",
                      "through this op is not implemented (its term would be missing); differentiate once, or ",
                      "express the model with ops whose backward is differentiable");
  }
  if (op.is_inplace || !grad_mode || !any_requires || !op.backward) {
    LinkViewOutput(op, inputs, outputs);
    return outputs;
  }
  // Outputs must be fresh handles: a kernel may return an input as-is (e.g. contiguous()).
  for (Tensor& out : outputs) {
    for (const Tensor& in : inputs) {
      if (out.defined() && out.is_same(in)) out = Detach(out);
    }
  }
  auto node = std::make_shared<OpNode>(op, attrs);
  node->next_edges.reserve(inputs.size());
  for (const Tensor& in : inputs) {
    node->next_edges.push_back(GradientEdge(in));
    node->input_sizes_.push_back(in.defined() ? in.sizes() : Shape());
  }
  node->Save(inputs, outputs);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const bool diff = !Listed(op.non_differentiable_outputs, i);
    if (outputs[i].defined()) Attach(node, outputs[i], static_cast<int>(i), diff);
  }
  LinkViewOutput(op, inputs, outputs);
  return outputs;
}

Tensor CallOp1(const OpDef& op, TensorList inputs, const Attrs& attrs) {
  TensorList out = CallOp(op, std::move(inputs), attrs);
  TESSEL_INTERNAL_ASSERT(!out.empty(), op.name, " returned no outputs");
  return out[0];
}

TensorList ApplyBackwardFunction(std::string name, const TensorList& inputs,
                                 std::function<TensorList(const TensorList& grads)> backward) {
  const bool any_requires =
      std::any_of(inputs.begin(), inputs.end(), [](const Tensor& t) { return t.defined() && t.requires_grad(); });
  if (!GradModeEnabled() || !any_requires) return inputs;
  auto node = std::make_shared<FunctionNode>(std::move(name), std::move(backward));
  TensorList outputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    node->next_edges.push_back(GradientEdge(in));
    Tensor out = in.defined() && in.requires_grad() ? Detach(in) : in;
    if (out.defined()) {
      Attach(node, out, static_cast<int>(i), in.requires_grad());
    } else {
      node->output_meta.emplace_back();
      node->output_hooks.emplace_back();
    }
    outputs.push_back(out);
  }
  return outputs;
}

Tensor ReattachFunctionOutput(const Tensor& saved, int index) {
  if (running_function == nullptr || !saved.defined() || !IsFloating(saved.dtype()) || index < 0 ||
      static_cast<size_t>(index) >= running_function->output_meta.size() ||
      !running_function->output_meta[static_cast<size_t>(index)].differentiable) {
    return saved;
  }
  return AtEdge(saved, Edge{running_function->shared_from_this(), index});
}

TensorList ApplyCustomFunction(std::string name, const TensorList& inputs, const TensorList& outputs,
                               const std::vector<bool>& differentiable,
                               std::function<TensorList(const TensorList& grads)> backward, bool materialize_grads,
                               std::function<void()> release) {
  TESSEL_CHECK(differentiable.size() == outputs.size(), name, ": ", differentiable.size(),
               " differentiable flags for ", outputs.size(), " outputs");
  const bool any_requires =
      std::any_of(inputs.begin(), inputs.end(), [](const Tensor& t) { return t.defined() && t.requires_grad(); });
  if (!GradModeEnabled() || !any_requires) return outputs;
  auto node = std::make_shared<FunctionNode>(std::move(name), std::move(backward), std::move(release));
  node->materialize_grads = materialize_grads;
  for (const Tensor& in : inputs) node->next_edges.push_back(GradientEdge(in));
  TensorList result;
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor out = outputs[i].defined() ? Detach(outputs[i]) : outputs[i];
    if (out.defined()) {
      Attach(node, out, static_cast<int>(i), differentiable[i]);
    } else {
      node->output_meta.emplace_back();
      node->output_meta.back().differentiable = false;
      node->output_hooks.emplace_back();
    }
    result.push_back(out);
  }
  return result;
}

}  // namespace tessel::autograd
