// dtensor/dtensor_impl.h — DTensorImpl: the TensorImpl of a distributed tensor (its local shard + its
// DTensorSpec + the DeviceMesh it lives on). Behind a plain `Tensor` handle, `is_distributed()` is true
// and sizes()/strides() are the *global* ones (DESIGN.md: DTensor is a kind of Tensor).
//
// Invariant: local() is a dense tensor with no autograd state, of dtype spec().dtype(), whose shape is
// ComputeLocalShape(spec(), mesh().coordinate()) (layout.h); spec().mesh() == mesh().topology(). The
// impl is immutable except through the data of local() (in-place ops bump its version, which is this
// impl's version too). Autograd state lives on the DTensorImpl, never on the local tensor.
//
// Example:
//   Tensor t = MakeDTensor(local, spec, mesh);         // checks the invariant
//   const DTensorImpl* d = AsDTensorImpl(t);           // nullptr for a dense tensor
//   d->local().sizes();                                // this rank's shard shape
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "core/tensor/tensor.h"
#include "core/tensor/tensor_impl.h"
#include "dtensor/device_mesh.h"
#include "dtensor/dtensor_spec.h"

namespace tessel::dtensor {

class DTensorImpl final : public TensorImpl {
 public:
  // REQUIRES the file invariant (use MakeDTensor, which checks it and detaches `local`).
  DTensorImpl(Tensor local, DTensorSpec spec, DeviceMesh mesh);

  bool is_distributed() const override { return true; }
  std::shared_ptr<TensorImpl> ShallowCopyDetached() const override;
  std::shared_ptr<TensorImpl> ShallowCopyWithNewVersion() const override;  // the local tensor's
  std::string KindName() const override { return "DTensor"; }
  std::string ForeachGroupKey() const override { return mesh_.ToString(); }
  uint32_t version() const override { return local_.impl()->version(); }
  bool deferred_init() const override { return local_.impl()->deferred_init(); }
  void RetagMemory(memory::Ledger ledger) const override { local_.impl()->RetagMemory(ledger); }
  bool OwnsDataExclusively() const override;
  Tensor MaterializeFull(const Tensor& self) const override;

  const Tensor& local() const { return local_; }
  const DTensorSpec& spec() const { return spec_; }
  const DeviceMesh& mesh() const { return mesh_; }

  // The view op whose output this is when that output could not alias its input (the input was redistributed
  // first: x[2:6] of a Shard(0) DTensor, x.view(-1) of a Shard(1) one), else empty. An in-place write to such a
  // copy would not reach the tensor it was taken from, which a torch view's write does, so the dispatcher
  // refuses one (dtensor/dispatch.cc). Detached copies keep it.
  const std::string& view_copy_of() const { return view_copy_of_; }
  void set_view_copy_of(std::string op) { view_copy_of_ = std::move(op); }

 protected:
  // torch's `dtensor.data = other` (TensorImpl::SetDataFrom): every handle of this DTensor sees other's local
  // tensor, spec (dtype included) and mesh, which must be this DTensor's mesh.
  void SetDataFromDistributed(const TensorImpl& source) override;

 private:
  Tensor local_;
  DTensorSpec spec_;
  DeviceMesh mesh_;
  std::string view_copy_of_;
};

// A distributed tensor handle over `local` (detached: the DTensor never shares autograd state with it).
// Throws kInvalidArgument naming the spec and rank when local's shape or dtype does not match the spec
// at this rank's coordinate, or when `mesh` is not the spec's mesh.
Tensor MakeDTensor(const Tensor& local, DTensorSpec spec, const DeviceMesh& mesh);
// Refuses (kInvalidArgument) an in-place write by `op` to a DTensor that is a view op's copy (view_copy_of):
// the write would not reach the DTensor the view names. Plain tensors and other DTensors pass.
void CheckWritesThrough(const Tensor& t, const std::string& op);
// The impl of a distributed tensor, or nullptr for a dense (or undefined) one.
const DTensorImpl* AsDTensorImpl(const Tensor& t);
// Like AsDTensorImpl but throws kInvalidArgument naming `op` when `t` is not a DTensor.
const DTensorImpl& GetDTensorImpl(const Tensor& t, const char* op);

}  // namespace tessel::dtensor
