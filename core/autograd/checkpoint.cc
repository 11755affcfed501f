// core/autograd/checkpoint.cc — the checkpoint frame: pack by index, recompute on first unpack.
#include "core/autograd/checkpoint.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>

#include "core/autograd/autocast.h"
#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/autograd/saved_tensor_hooks.h"
#include "core/base/error.h"
#include "core/tensor/factory.h"
#include "core/tensor/shape.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::autograd {
namespace {

thread_local int recompute_depth = 0;  // InCheckpointRecompute

// Thrown by the rerun's pack hook once every saved tensor is back (CheckpointOptions::early_stop); Recompute
// catches what it turns into on the way (a Python exception, when fn is Python code) by its flag.
struct StopRecompute final {};

bool Named(const std::vector<std::string>& names, const OpDef& op) {
  return std::find(names.begin(), names.end(), op.name) != names.end();
}

// One Checkpoint call: what the forward kept and what the rerun recomputed.
class Frame : public std::enable_shared_from_this<Frame> {
 public:
  Frame(CheckpointFunction fn, CheckpointOptions options)
      : fn_(std::move(fn)), options_(std::move(options)), autocast_(AutocastEnabled()), autocast_dtype_(AutocastDType()) {
    for (Generator* g : options_.generators) {
      TESSEL_CHECK(g != nullptr, "Checkpoint: CheckpointOptions::generators holds a null Generator");
      rng_at_forward_.push_back(*g);
    }
  }

  TensorList Forward(const TensorList& inputs);
  Tensor Unpack(int64_t index);

 private:
  // Selective policy during the first forward (Observe caches) and the rerun (Replace serves).
  class Cache final : public OpInterceptor {
   public:
    Cache(Frame* frame, bool replay) : frame_(frame), replay_(replay) {}
    std::optional<TensorList> Replace(const OpDef& op, const TensorList& inputs) override;
    void Observe(const OpDef& op, const TensorList& inputs, const TensorList& outputs) override;

   private:
    Frame* frame_;
    bool replay_;
  };

  void Recompute();
  // Selective: after the forward, a kept output whose memory no saved tensor and no recomputed op's input
  // shares becomes a placeholder (its shape over one zero element; [Note: needed outputs]).
  void DropUnneeded();
  void Need(const Tensor& t) {
    if (!t.defined()) return;
    if (t.is_distributed()) {
      saw_distributed_ = true;  // its local memory is not visible here: DropUnneeded keeps everything
    } else {
      needed_.push_back(t.impl()->storage().data());
    }
  }

  CheckpointFunction fn_;
  CheckpointOptions options_;
  std::vector<Generator> rng_at_forward_;
  bool autocast_;  // the forward's autocast region, restored for the rerun
  DType autocast_dtype_;
  TensorList inputs_;  // detached handles of the inputs: the one thing full checkpointing keeps
  TensorList originals_;  // the inputs themselves (their graph), for a rerun under create_graph
  std::vector<bool> input_requires_grad_;
  std::vector<uint32_t> input_versions_;  // after the forward: a later in-place write is caught at the rerun
  int64_t num_saved_ = 0;
  struct SavedMeta {
    bool defined = false;
    Shape shape;
    DType dtype = DType::kFloat32;
  };
  std::vector<SavedMeta> saved_meta_;  // per saved tensor at the forward (CheckpointOptions::check_metadata)
  void CheckRecomputedMeta(int64_t index, const Tensor& t) const;
  // Selective ([Note: selective decisions]): every op call of the first forward in call order (an op before
  // the ops it calls), the policy's decision on it, and a kept op's outputs.
  struct Decision {
    std::string op;
    bool keep = false;
    int64_t nested = 0;  // op calls made while this one ran (a served op's rerun makes none of them)
    std::vector<Shape> input_shapes;
    TensorList outputs;
    std::vector<uint32_t> versions;  // when the op returned them
  };
  std::vector<Decision> decisions_;
  std::vector<size_t> open_;  // first forward: decisions_ of the ops running now, innermost last
  // Rerun: the decisions of each op name in call order, and how many of them the rerun has reached.
  std::unordered_map<std::string, std::vector<size_t>> by_name_;
  std::unordered_map<std::string, size_t> reached_;
  std::vector<const void*> needed_;  // memory of saved tensors and recomputed ops' inputs (first forward)
  bool saw_distributed_ = false;
  TensorList recomputed_;                                // by save index; emptied as handed out
  int64_t handed_out_ = 0;
  bool recomputed_valid_ = false;
  bool kept_served_ = false;  // a rerun has taken the kept outputs (selective policies)
};

// [Note: selective decisions] The policy is asked once per op call, in the first forward, after the op ran
// (with its inputs and outputs: torch 2.15's op_output), and the rerun replays the decisions: the k-th call of
// an op in the rerun gets the k-th decision on that op. Calls are matched per op name, not over the whole
// sequence, because the rerun may call other ops in between than the forward did (an in-place write emulated
// one way or another depending on who else holds the tensor: clone in one pass, mul_scalar in the other);
// a served op skips the decisions of the ops it called in the forward, which its rerun does not call. A kept
// op reached with inputs of other shapes than the forward's is the function not being deterministic.
std::optional<TensorList> Frame::Cache::Replace(const OpDef& op, const TensorList& inputs) {
  std::vector<Decision>& decisions = frame_->decisions_;
  if (!replay_) {  // the first forward: the policy decides once the op has run (Observe)
    frame_->open_.push_back(decisions.size());
    Decision d{op.name};
    for (const Tensor& t : inputs) d.input_shapes.push_back(t.defined() ? t.sizes() : Shape{});
    decisions.push_back(std::move(d));
    return std::nullopt;
  }
  // A second rerun (a split backward's weight half, a retained graph's next backward) finds the kept
  // outputs handed to the first one: it computes those ops again (same inputs, same kernels, same
  // values) rather than keep them alive until the frame dies.
  if (frame_->kept_served_) return std::nullopt;
  if (frame_->by_name_.empty()) {
    for (size_t i = 0; i < decisions.size(); ++i) frame_->by_name_[decisions[i].op].push_back(i);
  }
  const std::vector<size_t>& mine = frame_->by_name_[op.name];
  const size_t k = frame_->reached_[op.name]++;
  if (k >= mine.size() || !decisions[mine[k]].keep) return std::nullopt;  // recomputed
  Decision& kept = decisions[mine[k]];
  for (size_t i = 0; i < inputs.size() && i < kept.input_shapes.size(); ++i) {
    TESSEL_CHECK_CODE(ErrorCode::kInternal, !inputs[i].defined() || inputs[i].sizes() == kept.input_shapes[i],
                      "Checkpoint recompute: call ", k, " of '", op.name, "' got input ", i, " of shape ",
                      ShapeStr(inputs[i].sizes()), " where the forward's had ", ShapeStr(kept.input_shapes[i]),
                      "; the checkpointed function is not deterministic in the ops it calls");
  }
  for (int64_t j = 1; j <= kept.nested; ++j) ++frame_->reached_[decisions[mine[k] + j].op];
  for (size_t i = 0; i < kept.outputs.size() && !frame_->options_.allow_cache_entry_mutation; ++i) {
    const Tensor& t = kept.outputs[i];
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !t.defined() || t.impl()->version() == kept.versions[i],
                      "Tensor cached during selective activation checkpoint has been mutated: output ", i, " of '",
                      op.name, "' (shape ", ShapeStr(t.sizes()), ") was written in place after the op ran, so the "
                      "recompute would read the written value; clone() it before the in-place op, or pass "
                      "allow_cache_entry_mutation=True to create_selective_checkpoint_contexts");
  }
  return std::move(kept.outputs);
}

void Frame::Cache::Observe(const OpDef& op, const TensorList& inputs, const TensorList& outputs) {
  if (replay_) return;
  const size_t index = frame_->open_.back();
  frame_->open_.pop_back();
  Decision& d = frame_->decisions_[index];
  d.nested = static_cast<int64_t>(frame_->decisions_.size() - index - 1);
  d.keep = frame_->options_.save_outputs(op, inputs, &outputs);
  if (!d.keep) {  // recomputed: the rerun reads its inputs
    for (const Tensor& t : inputs) frame_->Need(t);
    return;
  }
  for (const Tensor& t : outputs) {
    d.outputs.push_back(t.defined() ? Detach(t) : Tensor());
    d.versions.push_back(t.defined() ? t.impl()->version() : 0);
  }
}

TensorList Frame::Forward(const TensorList& inputs) {
  originals_ = inputs;
  for (const Tensor& t : inputs) {
    inputs_.push_back(t.defined() ? Detach(t) : Tensor());
    input_requires_grad_.push_back(t.defined() && t.requires_grad());
  }
  std::shared_ptr<Frame> self = shared_from_this();
  PackFn pack = [this, self](const Tensor& saved) -> UnpackFn {
    if (options_.save_outputs) Need(saved);
    saved_meta_.push_back(saved.defined() ? SavedMeta{true, saved.sizes(), saved.dtype()} : SavedMeta{});
    const int64_t index = num_saved_++;
    return [self, index] { return self->Unpack(index); };
  };
  std::optional<Cache> cache;
  if (options_.save_outputs) cache.emplace(this, /*replay=*/false);
  TensorList outputs;
  {
    SavedTensorHooksGuard guard(std::move(pack), cache ? &*cache : nullptr);
    outputs = fn_(inputs);
  }
  if (cache) DropUnneeded();
  for (const Tensor& t : inputs_) input_versions_.push_back(t.defined() ? t.impl()->version() : 0);
  return outputs;
}

// [Note: needed outputs] A selective rerun needs a kept output only if a saved tensor is (a view of) it or
// a recomputed op reads it; the others (a residual branch's output that add does not save) were kept
// only to be served, and holding them until backward made a selective checkpoint keep more than none.
// They become placeholders, one zero element broadcast to the output's shape: the rerun serves that, and
// only kept ops (served, never run) or nothing read it. Memory is compared by storage, so a view's memory
// is its base's; a storage freed and reused in the forward can only keep more than needed, never less. A
// region that saved or recomputed from a DTensor keeps everything (the memory behind a DTensor, and its ops'
// local calls that this frame also sees, are not matched here).
void Frame::DropUnneeded() {
  std::sort(needed_.begin(), needed_.end());
  for (Decision& kept : decisions_) {
    for (size_t i = 0; i < kept.outputs.size(); ++i) {
      Tensor& t = kept.outputs[i];
      if (saw_distributed_ || !t.defined() || t.is_distributed() || t.numel() == 0) continue;
      if (std::binary_search(needed_.begin(), needed_.end(), t.impl()->storage().data())) continue;
      t = MakeView(Zeros({1}, t.dtype(), t.device()), t.sizes(), Shape(t.sizes().size(), 0), 0);
      kept.versions[i] = t.impl()->version();
    }
  }
  needed_.clear();
}

// [Note: higher-order checkpoint] A backward with create_graph records its formulas, so the recomputed saved
// tensors must carry their dependence on the inputs and parameters (torch's non-reentrant checkpoint gives
// second derivatives): that rerun reads the inputs themselves, not detached copies, serves the saved tensors
// with the rerun's graph, and computes every op (a selective cache's outputs are detached). The rerun's own
// nodes keep detached values (an unpacker holding the tensor whose node holds it would never be freed), so
// the derivatives of order 2 are exact and higher orders through the rerun are not.
void Frame::Recompute() {
  const bool higher_order = CreatingGraph();
  TensorList inputs;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition,
                      !inputs_[i].defined() || inputs_[i].impl()->version() == input_versions_[i],
                      "one of the variables needed for gradient computation has been modified by an inplace "
                      "operation: input ", i, " of a checkpointed function (shape ", ShapeStr(inputs_[i].sizes()),
                      ") is at version ", inputs_[i].impl()->version(), "; expected version ", input_versions_[i],
                      " (written in place after the checkpointed forward, e.g. `h += checkpoint(f, h)`: the "
                      "recompute would read the new value; write `h = h + checkpoint(f, h)`)");
    if (higher_order) {
      inputs.push_back(originals_[i]);
      continue;
    }
    Tensor t = inputs_[i].defined() ? Detach(inputs_[i]) : Tensor();
    if (input_requires_grad_[i]) t.set_requires_grad(true);
    inputs.push_back(t);
  }
  // The generators run from their state at the first forward, and get their current state back
  // afterwards, also when the rerun throws.
  struct RestoreGenerators {
    const std::vector<Generator*>& generators;
    std::vector<Generator> now;
    ~RestoreGenerators() {
      for (size_t i = 0; i < now.size(); ++i) *generators[i] = now[i];
    }
  } restore{options_.generators, {}};
  for (size_t i = 0; i < rng_at_forward_.size(); ++i) {
    restore.now.push_back(*options_.generators[i]);
    *options_.generators[i] = rng_at_forward_[i];
  }
  recomputed_.assign(num_saved_, Tensor());
  int64_t next = 0;
  bool stopped = false;
  PackFn collect = [this, &next, &stopped, higher_order](const Tensor& t) -> UnpackFn {
    TESSEL_CHECK_CODE(ErrorCode::kInternal, next < num_saved_, "Checkpoint recompute saved more than the ", num_saved_,
                      " tensors the forward saved; the checkpointed function is not deterministic");
    if (options_.check_metadata) CheckRecomputedMeta(next, t);
    recomputed_[next++] = higher_order ? t : Detach(t);
    if (options_.early_stop && next == num_saved_) {
      stopped = true;
      throw StopRecompute{};
    }
    if (!higher_order) return [] { return Tensor(); };
    Tensor value = t.defined() ? Detach(t) : Tensor();
    return [value] { return value; };
  };
  std::optional<Cache> cache;
  if (options_.save_outputs && !higher_order) cache.emplace(this, /*replay=*/true);
  {
    GradModeGuard on(true);
    AutocastGuard as_in_forward(autocast_, autocast_dtype_);
    SavedTensorHooksGuard guard(std::move(collect), cache ? &*cache : nullptr);
    struct Depth {
      Depth() { ++recompute_depth; }
      ~Depth() { --recompute_depth; }
    } in_recompute;
    try {
      fn_(inputs);
    } catch (...) {
      if (!stopped) throw;  // else the early stop, whatever the frames it crossed made of it
    }
  }
  TESSEL_CHECK_CODE(ErrorCode::kInternal, next == num_saved_, "Checkpoint recompute saved ", next,
                    " tensors but the forward saved ", num_saved_,
                    "; the checkpointed function is not deterministic (list its Generators in CheckpointOptions)");
  kept_served_ = kept_served_ || !higher_order;
  handed_out_ = 0;
  recomputed_valid_ = true;
}

void Frame::CheckRecomputedMeta(int64_t index, const Tensor& t) const {
  const SavedMeta& want = saved_meta_[static_cast<size_t>(index)];
  const bool same = want.defined == t.defined() && (!want.defined || (want.shape == t.sizes() && want.dtype == t.dtype()));
  TESSEL_CHECK_CODE(ErrorCode::kInternal, same, "torch.utils.checkpoint: Recomputed values for the following tensors "
                    "have different metadata than during the forward pass.\ntensor at position ", index, ":\n"
                    "saved metadata: {'shape': ", want.defined ? ShapeStr(want.shape) : std::string("None"),
                    ", 'dtype': ", want.defined ? std::string(DTypeName(want.dtype)) : std::string("None"),
                    "}\nrecomputed metadata: {'shape': ", t.defined() ? ShapeStr(t.sizes()) : std::string("None"),
                    ", 'dtype': ", t.defined() ? std::string(DTypeName(t.dtype())) : std::string("None"),
                    "}\n(the checkpointed function must compute the same tensors when it reruns; "
                    "determinism_check='none' skips this check)");
}

Tensor Frame::Unpack(int64_t index) {
  // Undefined while valid: handed out before in this round (a split backward unpacks twice): redo.
  if (!recomputed_valid_ || !recomputed_[index].defined()) Recompute();
  Tensor t = std::move(recomputed_[index]);
  recomputed_[index] = Tensor();
  if (++handed_out_ == num_saved_) {  // the whole region's backward has run: a retained graph recomputes anew
    recomputed_valid_ = false;
    recomputed_.clear();
  }
  return t;
}

}  // namespace

bool InCheckpointRecompute() { return recompute_depth > 0; }

CheckpointPolicy SaveOutputsOf(std::vector<std::string> op_names) {
  return [names = std::move(op_names)](const OpDef& op, const TensorList&, const TensorList*) {
    return Named(names, op);
  };
}

CheckpointPolicy RecomputeOnly(std::vector<std::string> op_names) {
  return [names = std::move(op_names)](const OpDef& op, const TensorList&, const TensorList*) {
    return !Named(names, op);
  };
}

TensorList Checkpoint(CheckpointFunction fn, const TensorList& inputs, CheckpointOptions options) {
  TESSEL_CHECK(fn != nullptr, "Checkpoint: the function to checkpoint is empty");
  if (!GradModeEnabled()) return fn(inputs);  // nothing is saved without grad mode: nothing to drop
  auto frame = std::make_shared<Frame>(std::move(fn), std::move(options));
  return frame->Forward(inputs);
}

}  // namespace tessel::autograd
