// core/tensor/tensor_impl.h — TensorImpl (what a Tensor handle points to) and its AutogradMeta.
//
// Invariant: a dense impl's elements are storage bytes at
//   storage.data() + (storage_offset + sum_i index_i * strides[i]) * ElementSize(dtype),
// and every index lies inside the storage. A non-dense impl (dtensor's DTensorImpl) has no storage;
// its sizes/strides describe the global tensor, and it overrides is_distributed().
//
// Example (kernels):
//   const float* a = static_cast<const float*>(t.impl()->raw_data());
//   for (int64_t i = 0; i < t.numel(); ++i) ... // only when t.is_contiguous()
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "core/tensor/hook_list.h"
#include "core/tensor/storage.h"
#include "core/tensor/tensor.h"

namespace tessel {

namespace autograd {
class Node;
}

// Hook on the gradient flowing into a tensor; returning a defined Tensor replaces the gradient.
using TensorHook = std::function<Tensor(const Tensor& grad)>;
// Runs after a leaf's .grad has been updated (FSDP reduce-scatters from here).
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;

// Autograd state of one tensor; owned by its TensorImpl, created on first use.
struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<autograd::Node> grad_fn;  // null for leaves
  int output_nr = 0;                        // which output of grad_fn this tensor is
  std::weak_ptr<autograd::Node> grad_accumulator;  // leaves: the one node that accumulates into .grad
  HookList<TensorHook> hooks;
  HookList<PostAccumulateGradHook> post_accumulate_grad_hooks;
  bool retains_grad = false;
  const autograd::Node* retained_at = nullptr;  // the grad_fn RetainGrad hooked (an in-place op moves grad_fn)
};

class TensorImpl {
 public:
  // Dense tensor over `storage`.
  TensorImpl(Storage storage, Shape sizes, Shape strides, int64_t storage_offset, DType dtype);
  // Storage-less tensor (subclasses such as DTensorImpl).
  TensorImpl(Shape sizes, Shape strides, DType dtype, Device device);
  virtual ~TensorImpl();
  TensorImpl(const TensorImpl&) = delete;
  TensorImpl& operator=(const TensorImpl&) = delete;

  virtual bool is_distributed() const { return false; }
  // A new impl with the same data and metadata and no autograd state (Detach()).
  virtual std::shared_ptr<TensorImpl> ShallowCopyDetached() const;
  // As ShallowCopyDetached, with a version counter of its own (Storage::WithNewVersionCounter): VariableData().
  virtual std::shared_ptr<TensorImpl> ShallowCopyWithNewVersion() const;
  // Human-readable kind, for error messages ("dense", "DTensor").
  virtual std::string KindName() const { return "dense"; }
  // Version counter of the underlying data (bumped by in-place writes); autograd compares it.
  virtual uint32_t version() const { return storage_.defined() ? storage_.version() : 0; }
  // Moves the bytes behind this tensor to another memory ledger (a gradient becoming .grad).
  virtual void RetagMemory(memory::Ledger ledger) const {
    if (storage_.defined()) storage_.Retag(ledger);
  }
  // `self` (which holds this impl) as a dense tensor with its full value, for reads such as item()
  // and ToDoubleVector(). Dense: `self`. DTensor: redistributed to Replicate on every mesh axis
  // (all-gathers shards, reduces Partial), so it is collective: every rank of the mesh must call it.
  virtual Tensor MaterializeFull(const Tensor& self) const { return self; }
  // Tensors whose keys are equal may go to one multi-tensor (foreach) op together, beside grouping by
  // device and dtype: "" for a dense tensor; a DTensor names its mesh (the dispatcher requires one mesh
  // per op call).
  virtual std::string ForeachGroupKey() const { return ""; }
  // True when no other tensor shares these bytes (safe to adopt them as a .grad).
  virtual bool OwnsDataExclusively() const { return storage_.defined() && storage_.use_count() == 1; }
  // Built under the meta device and never materialized ([Note: deferred init] in core/tensor/factory.h): its
  // values were never written. A DTensor answers for its local tensor.
  virtual bool deferred_init() const { return storage_.defined() && storage_.deferred_init(); }

  const Shape& sizes() const { return sizes_; }
  const Shape& strides() const { return strides_; }
  int64_t dim() const { return static_cast<int64_t>(sizes_.size()); }
  int64_t numel() const { return numel_; }
  int64_t storage_offset() const { return storage_offset_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Storage& storage() const { return storage_; }
  bool is_contiguous() const { return is_contiguous_; }
  // REQUIRES: dense. Pointer to element [0, ..., 0].
  void* raw_data() const;

  AutogradMeta* autograd_meta() const { return autograd_meta_.get(); }
  AutogradMeta& EnsureAutogradMeta();

  // Set by nn::Module::SetParameter on the handle it replaces (fully_shard, parallelize_module, a user
  // swap) once no module's parameter slot holds it any more, and cleared on the handle it installs: an
  // optimizer holding a replaced handle would update a tensor no module reads, so Optimizer::Step raises on
  // it (core/optim/optimizer.h). A tied weight replaced in one of its modules stays the other's: not replaced.
  bool replaced_parameter() const { return replaced_parameter_; }
  void set_replaced_parameter(bool replaced) { replaced_parameter_ = replaced; }
  // How many modules' parameter slots hold this tensor (nn::Module keeps the count on every registration,
  // replacement, removal and destruction).
  void AddParameterSlot() { parameter_slots_.fetch_add(1, std::memory_order_relaxed); }
  // Returns whether no slot holds it any more.
  bool DropParameterSlot() { return parameter_slots_.fetch_sub(1, std::memory_order_relaxed) == 1; }

  // Opaque state a language binding keeps with this tensor for as long as it lives (bindings/tensor_attrs.cc:
  // the Python attributes of torch's Tensor.__dict__, and the Python object that last wrapped it). Core never
  // reads it; Detach, views and ShallowCopy* start without it (in torch they are other Python objects). Its
  // deleter runs on whichever thread drops the impl's last handle.
  const std::shared_ptr<void>& binding_state() const { return binding_state_; }
  void set_binding_state(std::shared_ptr<void> state) { binding_state_ = std::move(state); }

  // torch's Tensor.set_(source): this impl becomes a view of `source`'s storage with its sizes, strides and
  // offset, so every handle of this impl (a module's buffer, a caller's input) sees the new shape and data.
  // Dense only, same device and (unless `as_data`) dtype; never on a tensor with autograd history, nor
  // (unless `as_data`: torch's `leaf.data = source`, which keeps the leaf's requires_grad and .grad and takes
  // the source's dtype: Module.to(dtype) keeps its parameter objects so) on one that requires grad.
  // kFailedPrecondition / kInvalidArgument otherwise. Bumps nothing: the old storage is untouched.
  // `as_data` with two DTensors (torch's `dtensor_param.data = cast`, Module.to after fully_shard or tensor
  // parallel): this DTensor takes source's local tensor and spec; both on one mesh (kInvalidArgument otherwise).
  void SetDataFrom(const TensorImpl& source, bool as_data = false);

  // torch's view relation (Tensor._base). A view op's output (autograd::CallOp, OpDef::is_view) records
  // the root base it aliases, never itself a view, and the root keeps weak handles of its live views, so
  // an in-place write recorded by autograd through one of them (core/ops/inplace.h) can give the base and
  // every view their new history, as torch's CopySlices does. Detach(), set_ and kernels' internal
  // aliases make no views. Dense only.
  const std::shared_ptr<TensorImpl>& view_base() const { return view_base_; }
  // `view` (a fresh impl over base's storage that no other thread sees yet) becomes a view of base's
  // root. Thread-safe on the root's side: ranks on threads may view one shared tensor at once.
  static void LinkView(const std::shared_ptr<TensorImpl>& base, const std::shared_ptr<TensorImpl>& view);
  // The live views of this root base, in creation order (empty when it has none). Thread-safe.
  std::vector<std::shared_ptr<TensorImpl>> LiveViews() const;

 protected:
  void RefreshContiguity();
  // A storage-less subclass's new sizes, strides and dtype (DTensorImpl's SetDataFromDistributed).
  void SetMetadata(Shape sizes, Shape strides, DType dtype);
  // SetDataFrom's distributed case, after its checks: both impls are distributed. Only DTensorImpl has one.
  virtual void SetDataFromDistributed(const TensorImpl& source);

 private:
  // Dense impls: every element offset is computed without overflow and lies inside the storage
  // (the invariant above); kInvalidArgument naming shape, strides and offset otherwise.
  void CheckExtent() const;

  Storage storage_;
  Shape sizes_;
  Shape strides_;
  int64_t storage_offset_ = 0;
  int64_t numel_ = 0;
  DType dtype_;
  Device device_;
  bool is_contiguous_ = true;
  bool replaced_parameter_ = false;
  std::atomic<int32_t> parameter_slots_{0};
  std::unique_ptr<AutogradMeta> autograd_meta_;
  std::shared_ptr<TensorImpl> view_base_;
  std::shared_ptr<void> binding_state_;
  struct ViewList;  // a mutex and weak handles; created on the first view (tensor.cc)
  mutable std::atomic<ViewList*> views_{nullptr};
};

// Builds a dense tensor handle (no autograd state).
Tensor MakeDense(Storage storage, Shape sizes, Shape strides, int64_t storage_offset, DType dtype);
// An alias of `t` with new sizes/strides/offset over the same storage (REQUIRES: dense).
Tensor MakeView(const Tensor& t, Shape sizes, Shape strides, int64_t storage_offset);
// Same data, no autograd history (shares storage; in-place writes are visible in both).
Tensor Detach(const Tensor& t);
// torch's Tensor.data: Detach() with a version counter of its own, starting at 0, so an in-place write through
// it (p.data.mul_(2), old-style optimizers and weight init) is not "a saved tensor modified in place" to
// autograd, and does not move t's _version.
Tensor VariableData(const Tensor& t);
// A tensor that nothing but `t` refers to (one handle to its impl, one to its storage) and that is not a
// DTensor gets version 0: ops and factories that fill a fresh output through in-place writes (CopyInto,
// FillInPlace, the random fills) return it at torch's version 0. No-op otherwise: a tensor autograd saved, or
// any view or other handle of it, is referred to elsewhere and keeps its count.
void ResetVersionIfUnshared(const Tensor& t);

}  // namespace tessel
