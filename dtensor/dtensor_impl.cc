// dtensor/dtensor_impl.cc — DTensorImpl and the checked constructor MakeDTensor.
#include "dtensor/dtensor_impl.h"

#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "dtensor/dtensor.h"
#include "dtensor/layout.h"

namespace tessel::dtensor {

DTensorImpl::DTensorImpl(Tensor local, DTensorSpec spec, DeviceMesh mesh)
    : TensorImpl(spec.shape(), spec.strides(), spec.dtype(), local.device()),
      local_(std::move(local)),
      spec_(std::move(spec)),
      mesh_(std::move(mesh)) {}

std::shared_ptr<TensorImpl> DTensorImpl::ShallowCopyDetached() const {
  auto copy = std::make_shared<DTensorImpl>(local_, spec_, mesh_);
  copy->view_copy_of_ = view_copy_of_;
  return copy;
}

std::shared_ptr<TensorImpl> DTensorImpl::ShallowCopyWithNewVersion() const {
  auto copy = std::make_shared<DTensorImpl>(VariableData(local_), spec_, mesh_);
  copy->view_copy_of_ = view_copy_of_;
  return copy;
}

void DTensorImpl::SetDataFromDistributed(const TensorImpl& source) {
  const auto* src = dynamic_cast<const DTensorImpl*>(&source);
  TESSEL_CHECK(src != nullptr, "Tensor.data = value: a DTensor takes a DTensor's data, got a ", source.KindName());
  TESSEL_CHECK(src->mesh_ == mesh_, "Tensor.data = value: the DTensor on ", mesh_.ToString(),
               " cannot take the data of one on ", src->mesh_.ToString());
  local_ = src->local_;
  spec_ = src->spec_;
  view_copy_of_ = src->view_copy_of_;
  SetMetadata(spec_.shape(), spec_.strides(), spec_.dtype());
}

void CheckWritesThrough(const Tensor& t, const std::string& op) {
  const DTensorImpl* d = AsDTensorImpl(t);
  TESSEL_CHECK(d == nullptr || d->view_copy_of().empty(), op, ": the DTensor it writes (", ShapeStr(t.sizes()), " ",
               PlacementsToString(d->spec().placements()), " on ", d->mesh().ToString(),
               ") is a copy, not a view: the ", d->view_copy_of(),
               " that made it had to redistribute the DTensor it came from (the elements it names live on other "
               "ranks' shards), so the write would not reach that DTensor, as a view's does (torch's DTensor loses "
               "it silently); write the DTensor itself (x[...] = value, index_copy_, masked_fill_) or redistribute "
               "it first");
}

Tensor DTensorImpl::MaterializeFull(const Tensor& self) const {
  NoGradGuard no_grad;  // a read: no graph
  return DTensor(self).FullTensor();
}

bool DTensorImpl::OwnsDataExclusively() const {
  return local_.impl_ptr().use_count() == 1 && local_.impl()->OwnsDataExclusively();
}

Tensor MakeDTensor(const Tensor& local, DTensorSpec spec, const DeviceMesh& mesh) {
  TESSEL_CHECK(local.defined() && !local.is_distributed(), "DTensor: the local tensor must be a defined dense tensor",
               " for ", spec.ToString());
  TESSEL_CHECK(spec.mesh() == mesh.topology(), "DTensor: spec mesh ", spec.mesh().ToString(),
               " differs from the mesh ", mesh.ToString());
  const Shape want = ComputeLocalShape(spec, mesh.coordinate());
  TESSEL_CHECK(local.sizes() == want && local.dtype() == spec.dtype(), "DTensor: rank ", mesh.global_rank(),
               " at coordinate ", ShapeStr(mesh.coordinate()), " holds a local tensor of shape ",
               ShapeStr(local.sizes()), " ", DTypeName(local.dtype()), " but ", spec.ToString(), " needs ",
               ShapeStr(want), " ", DTypeName(spec.dtype()));
  return Tensor(std::make_shared<DTensorImpl>(Detach(local), std::move(spec), mesh));
}

const DTensorImpl* AsDTensorImpl(const Tensor& t) {
  if (!t.defined() || !t.is_distributed()) return nullptr;
  return dynamic_cast<const DTensorImpl*>(t.impl());
}

const DTensorImpl& GetDTensorImpl(const Tensor& t, const char* op) {
  const DTensorImpl* d = AsDTensorImpl(t);
  TESSEL_CHECK(d != nullptr, op, ": expected a DTensor, got ",
               t.defined() ? Str(t.impl()->KindName(), " tensor of shape ", ShapeStr(t.sizes())) : "an undefined tensor");
  return *d;
}

}  // namespace tessel::dtensor
