// fsdp/fsdp_param.cc — FsdpParam: sharding one parameter, the unsharded leaf, copy-in/out and gradients.
#include "fsdp/fsdp_param.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "core/memory/allocator.h"
#include "core/ops/elementwise.h"
#include "core/tensor/copy.h"
#include "core/tensor/device_copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"
#include "dtensor/dtensor.h"
#include "dtensor/dtensor_impl.h"
#include "dtensor/layout.h"

namespace tessel::fsdp {
namespace {

using dtensor::DTensorSpec;
using dtensor::Placement;

// The slices [start, start + n) of t along `dim`: a view with t's strides (torch's narrow).
Tensor SlicesOf(const Tensor& t, int64_t dim, int64_t start, int64_t n) {
  Shape sizes = t.sizes();
  sizes[static_cast<size_t>(dim)] = n;
  return MakeView(t, sizes, t.strides(), t.storage_offset() + start * t.stride(dim));
}

// dst = src (a strided copy) leaving dst's version counter as it was: the unsharded parameter's bytes are
// refilled under tensors autograd saved in an earlier forward (PyTorch's _unsafe_preserve_version_counter).
void CopyPreservingVersion(const Tensor& dst, const Tensor& src) {
  const Storage& storage = dst.impl()->storage();
  const uint32_t version = storage.version();
  CopyInto(dst, src);
  storage.UnsafeRestoreVersion(version);
}

// dst += src, converting src to dst's dtype first when they differ.
void AddConverted(const Tensor& dst, const Tensor& src) {
  if (src.dtype() == dst.dtype()) {
    AddInPlace(dst, src);
    return;
  }
  Tensor tmp = Empty(dst.sizes(), dst.dtype(), dst.device());
  CopyInto(tmp, src);
  AddInPlace(dst, tmp);
}

// The sharded parameter's layout on `mesh` (FsdpParam::param_mesh): TP's placements on TP's axes, Shard(dim) on
// the FSDP shard axis (appended last to that dim's shard order, see [Note: FSDP layout]: "TP shard, then FSDP shard
// of that"), Replicate elsewhere (the HSDP replicate axis).
DTensorSpec ShardedSpec(const Tensor& param, const FsdpMeshInfo& mi, const dtensor::DeviceMesh& mesh, int64_t dim) {
  std::vector<Placement> placements(static_cast<size_t>(mesh.ndim()), dtensor::Replicate{});
  dtensor::ShardOrder order(static_cast<size_t>(param.dim()));
  if (const dtensor::DTensorImpl* d = dtensor::AsDTensorImpl(param)) {
    const std::vector<std::string>& names = d->mesh().axis_names();
    std::vector<int> to_full(names.size());
    for (size_t ta = 0; ta < names.size(); ++ta) {
      to_full[ta] = mesh.topology().AxisIndex(names[ta]);
      placements[static_cast<size_t>(to_full[ta])] = d->spec().placement(static_cast<int>(ta));
    }
    for (size_t dim = 0; dim < order.size(); ++dim) {
      for (int ta : d->spec().shard_order()[dim]) order[dim].push_back(to_full[static_cast<size_t>(ta)]);
    }
  }
  if (mi.has_shard_axis()) {  // else replicate only: Replicate on every FSDP axis
    const int axis = mesh.topology().AxisIndex(mi.shard_axis_name());
    placements[static_cast<size_t>(axis)] = dtensor::Shard{dim};
    order[static_cast<size_t>(dim)].push_back(axis);
  }
  return DTensorSpec(mesh.topology_ptr(), std::move(placements), param.sizes(), param.dtype(), std::move(order));
}

}  // namespace

namespace {

// Every live FsdpParam of the process (ranks may be threads: one lock for all).
struct Registry {
  std::mutex mu;
  std::vector<const FsdpParam*> params;
};
Registry& Live() {
  static auto* r = new Registry();  // never destroyed: parameters may outlive static destruction
  return *r;
}

}  // namespace

FsdpParam::FsdpParam(nn::Module* module, std::vector<std::string> fqns, const Tensor& param,
                     const FsdpMeshInfo& mesh_info, const MixedPrecisionPolicy& mp, int64_t shard_dim)
    : module_(module),
      fqns_(std::move(fqns)),
      original_(param.impl_ptr()),
      display_fqn_(fqns_.at(0)),
      mesh_info_(mesh_info),
      mp_param_dtype_(mp.param_dtype),
      mp_reduce_dtype_(mp.reduce_dtype) {
  SetDTypes(param.dtype());
  NoGradGuard no_grad;
  Tensor local = param;
  if (const dtensor::DTensorImpl* d = dtensor::AsDTensorImpl(param)) {
    local = d->local();
    tp_mesh_ = d->mesh();
    const DTensorSpec& s = d->spec();
    tp_spec_.emplace(s.mesh_ptr(), s.placements(), s.shape(), s.strides(), param_dtype_, s.shard_order());
  }
  unsharded_shape_ = local.sizes();
  const int64_t world = mesh_info_.shard_size();
  dim_ = shard_dim;
  dim_size_ = unsharded_shape_.at(static_cast<size_t>(dim_));
  slice_numel_ = 1;
  for (size_t i = 0; i < unsharded_shape_.size(); ++i) {
    if (i != static_cast<size_t>(dim_)) slice_numel_ *= unsharded_shape_[i];
  }
  chunk_ = (dim_size_ + world - 1) / world;
  TESSEL_INTERNAL_ASSERT(dim_ == 0 || chunk_ * world == dim_size_, "fully_shard: ", display_fqn_, " sharded unevenly ",
                         "on dim ", dim_);
  const dtensor::ChunkPiece piece = dtensor::ChunkPieceOf(dim_size_, world, mesh_info_.shard_rank());
  local_size_ = piece.size;
  StoreShard(local, [&] { return SlicesOf(local, dim_, piece.offset, local_size_); });
  sharded_spec_.emplace(ShardedSpec(param, mesh_info_, param_mesh(), dim_));
  sharded_param_ = dtensor::MakeDTensor(LocalView(sharded_storage_, 0, local_size_), *sharded_spec_, param_mesh());
  if (param.requires_grad()) sharded_param_.set_requires_grad(true);
  Registry& r = Live();
  std::lock_guard<std::mutex> lock(r.mu);
  r.params.push_back(this);
}

Tensor FsdpParam::LocalView(const Tensor& flat, int64_t offset, int64_t n) const {
  Shape sizes = unsharded_shape_;
  sizes[static_cast<size_t>(dim_)] = n;
  const Shape strides = ContiguousStrides(sizes);
  return MakeView(flat, sizes, strides, flat.storage_offset() + offset);
}

Tensor FsdpParam::UnshardedLocal() const {
  return MakeView(unsharded_flat_, unsharded_shape_, ContiguousStrides(unsharded_shape_), 0);
}

FsdpParam::~FsdpParam() {
  Registry& r = Live();
  std::lock_guard<std::mutex> lock(r.mu);
  std::erase(r.params, this);
}

const FsdpParam* FsdpParam::FindOwnerOf(const Tensor& t, std::string* module_type) {
  Registry& r = Live();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const FsdpParam* p : r.params) {
    if (p->WasBuiltFrom(t) || p->sharded_param().is_same(t)) {
      if (module_type != nullptr) *module_type = p->module_->type_name();
      return p;
    }
  }
  return nullptr;
}

bool FsdpParam::on_meta() const {
  return sharded_storage_.defined() && sharded_storage_.impl()->storage().deferred_init();
}

void FsdpParam::CheckStillRegistered() const {
  if (!swapped_in_) return;
  auto check = [&](nn::Module* module, const std::string& fqn) {
    const size_t dot = fqn.rfind('.');
    const nn::Module* owner = dot == std::string::npos ? module : module->Submodule(fqn.substr(0, dot));
    const Tensor now = owner->OptionalParam(dot == std::string::npos ? fqn : fqn.substr(dot + 1));
    if (now.is_same(sharded_param_) || now.is_same(unsharded_param_)) return;
    // torch fails here too, at its forward ("'Parameter' object has no attribute '_local_tensor'")
    const std::string by = now.defined() ? Str("a tensor of shape ", ShapeStr(now.sizes())) : "None";
    TESSEL_FAIL(ErrorCode::kFailedPrecondition, "fully_shard: parameter '", display_fqn_, "' was replaced after ",
                "fully_shard (by ", by, "): the group computes with the parameter it sharded and would silently ",
                "drop the new one; write the values into the parameter instead (under no_grad: param.copy_(value), ",
                "or load_state_dict), or replace it before fully_shard");
  };
  for (const std::string& fqn : fqns_) check(module_, fqn);
  for (const auto& [module, fqn] : other_owners_) check(module, fqn);
}

void FsdpParam::SetModuleParam(const Tensor& value) {
  // The first swap retires the user's original handle (an optimizer built before fully_shard then raises
  // on Step); later swaps toggle between this parameter's own sharded and unsharded handles.
  for (const std::string& fqn : fqns_) module_->SetParameter(fqn, value, false, /*retire_old=*/!swapped_in_);
  for (const auto& [module, fqn] : other_owners_) module->SetParameter(fqn, value, false, !swapped_in_);
  swapped_in_ = true;
}

void FsdpParam::SetDTypes(DType orig) {
  orig_dtype_ = orig;
  param_dtype_ = IsFloating(orig) ? mp_param_dtype_.value_or(orig) : orig;
  // unset: the original dtype (torch 2.15: fp32 gradients reduce in fp32 whatever param_dtype)
  reduce_dtype_ = IsFloating(orig) ? mp_reduce_dtype_.value_or(orig) : orig;
}

void FsdpParam::StoreShard(const Tensor& like, const std::function<Tensor()>& rows) {
  {
    memory::LedgerScope ledger(memory::Ledger::kParams);
    sharded_storage_ = Zeros({padded_shard_numel()}, like.dtype(), like.device());
  }
  // A parameter built under tessel.device("meta") ([Note: deferred init] in core/tensor/factory.h) has no
  // values to copy: its shard stays unwritten and keeps reporting is_meta until to_empty, as torch's.
  const bool deferred = like.impl()->storage().deferred_init();
  if (local_size_ > 0 && !deferred) CopyInto(LocalView(sharded_storage_, 0, local_size_), rows());
  if (deferred) sharded_storage_.impl()->storage().set_deferred_init(true);
}

void FsdpParam::ResetShardedParam() {
  const dtensor::DTensorImpl& d = dtensor::GetDTensorImpl(sharded_param_, "fully_shard");
  const Tensor local = d.local();
  if (local.impl()->storage().is_same(sharded_storage_.impl()->storage()) && local.dtype() == orig_dtype_) return;
  const Tensor expected = LocalView(sharded_storage_, 0, local_size_);
  TESSEL_CHECK(local.sizes() == expected.sizes(), "fully_shard: parameter '", display_fqn_, "' was given data of ",
               "local shape ", ShapeStr(local.sizes()), " where its shard is ", ShapeStr(expected.sizes()),
               ": replace a sharded parameter's data with data of its own shape");
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !unsharded_allocated_, "fully_shard: parameter '", display_fqn_,
                    "' changed while its unsharded parameter is in use (during forward or backward, or unsharded by ",
                    "hand); change parameters between iterations");
  NoGradGuard no_grad;
  const DType dtype = local.dtype();
  StoreShard(local, [&] { return local; });
  if (dtype != orig_dtype_) {
    SetDTypes(dtype);
    const DTensorSpec s = *sharded_spec_;  // copies: emplace destroys the old value first
    sharded_spec_.emplace(s.mesh_ptr(), s.placements(), s.shape(), s.strides(), dtype, s.shard_order());
    if (tp_spec_) {
      const DTensorSpec t = *tp_spec_;
      tp_spec_.emplace(t.mesh_ptr(), t.placements(), t.shape(), t.strides(), param_dtype_, t.shard_order());
    }
    // The next unshard builds the unsharded parameter in the new all-gather dtype.
    unsharded_flat_ = Tensor();
    unsharded_param_ = Tensor();
  }
  const Tensor fresh = dtensor::MakeDTensor(LocalView(sharded_storage_, 0, local_size_), *sharded_spec_,
                                            param_mesh());
  sharded_param_.checked_impl()->SetDataFrom(*fresh.impl(), /*as_data=*/true);
}

void FsdpParam::ToSharded() { SetModuleParam(sharded_param_); }

void FsdpParam::ToUnsharded() {
  TESSEL_INTERNAL_ASSERT(unsharded_allocated_, "fully_shard: ", display_fqn_, " switched to unsharded before its ",
                         "all-gather finished");
  // The user freezes or unfreezes the parameter they hold, the sharded one, possibly after fully_shard:
  // the unsharded handle the forward computes with follows it on every unshard (PyTorch's
  // set_requires_grad_if_needed in to_unsharded).
  if (unsharded_param_.requires_grad() != requires_grad()) unsharded_param_.set_requires_grad(requires_grad());
  SetModuleParam(unsharded_param_);
}

void FsdpParam::CopyShardInto(const Tensor& flat_input, int64_t offset) const {
  CopyInto(MakeView(flat_input, {padded_shard_numel()}, {1}, flat_input.storage_offset() + offset), sharded_storage_);
}

void FsdpParam::AllocateUnsharded() {
  if (unsharded_allocated_) return;
  memory::LedgerScope ledger(memory::Ledger::kParams);
  const int64_t numel = mesh_info_.shard_size() * padded_shard_numel();
  if (!unsharded_flat_.defined()) {
    unsharded_flat_ = Empty({numel}, param_dtype_, sharded_storage_.device());
    Tensor view = UnshardedLocal();
    unsharded_param_ = tp_spec_ ? dtensor::MakeDTensor(view, *tp_spec_, *tp_mesh_) : view;
    if (requires_grad()) unsharded_param_.set_requires_grad(true);
  } else {
    unsharded_flat_.impl()->storage().UnsafeAllocateBytes(numel * ElementSize(param_dtype_));
  }
  unsharded_allocated_ = true;
}

void FsdpParam::FreeUnsharded() {
  if (!unsharded_allocated_) return;
  unsharded_flat_.impl()->storage().UnsafeFreeBytes();
  unsharded_allocated_ = false;
}

namespace {

// n elements from src (at element offset src_off of its storage view) to dst (likewise) without touching
// either version counter: memcpy on the host, the device-aware copy (stream-ordered, no host round trip)
// when either side is a device tensor.
void CopyElementsPreservingVersion(const Tensor& dst, int64_t dst_off, const Tensor& src, int64_t src_off, int64_t n) {
  if (n == 0) return;
  if (dst.device().is_cpu() && src.device().is_cpu()) {
    const int64_t es = ElementSize(dst.dtype());
    std::memcpy(static_cast<char*>(dst.raw_data()) + dst_off * es,
                static_cast<const char*>(src.raw_data()) + src_off * es, static_cast<size_t>(n * es));
    return;
  }
  CopyAcrossDevices(MakeView(dst, {n}, {1}, dst.storage_offset() + dst_off),
                    MakeView(src, {n}, {1}, src.storage_offset() + src_off));
}

}  // namespace

void FsdpParam::CopyOutFrom(const Tensor& all_gather_output, int64_t offset, int64_t group_shard_numel) {
  TESSEL_INTERNAL_ASSERT(all_gather_output.dtype() == param_dtype_ && unsharded_allocated_,
                         "fully_shard copy-out of ", display_fqn_);
  const int64_t chunk = padded_shard_numel();
  if (dim_ > 0) {  // rank j's contiguous shard is the strided slice [j * chunk_, (j + 1) * chunk_) of dim_
    const Tensor full = UnshardedLocal();
    for (int64_t j = 0; j < mesh_info_.shard_size(); ++j) {
      CopyPreservingVersion(SlicesOf(full, dim_, j * chunk_, chunk_),
                            LocalView(all_gather_output, j * group_shard_numel + offset, chunk_));
    }
    return;
  }
  // NOTE: not CopyInto: the copy must not bump the version counter (tensors saved for backward in an
  // earlier forward refer to these bytes; PyTorch's _unsafe_preserve_version_counter).
  for (int64_t j = 0; j < mesh_info_.shard_size(); ++j) {
    CopyElementsPreservingVersion(unsharded_flat_, j * chunk, all_gather_output, j * group_shard_numel + offset, chunk);
  }
}

void FsdpParam::CopyShardToUnsharded() {
  TESSEL_INTERNAL_ASSERT(unsharded_allocated_ && mesh_info_.shard_size() == 1, "fully_shard copy of ", display_fqn_);
  Tensor src = sharded_storage_;
  if (src.dtype() != param_dtype_) {
    memory::LedgerScope ledger(memory::Ledger::kCommBuffers);
    src = Empty(sharded_storage_.sizes(), param_dtype_, sharded_storage_.device());
    CopyInto(src, sharded_storage_);
  }
  CopyElementsPreservingVersion(unsharded_flat_, 0, src, 0, padded_shard_numel());
}

void FsdpParam::CopyUnshardedChunkInto(int64_t j, const Tensor& flat, int64_t offset) const {
  TESSEL_INTERNAL_ASSERT(unsharded_allocated_ && flat.dtype() == param_dtype_ && j >= 0 && j < mesh_info_.shard_size(),
                         "fully_shard post-forward copy of ", display_fqn_);
  if (dim_ > 0) {
    CopyInto(LocalView(flat, offset, chunk_), SlicesOf(UnshardedLocal(), dim_, j * chunk_, chunk_));
    return;
  }
  CopyElementsPreservingVersion(flat, offset, unsharded_flat_, j * padded_shard_numel(), padded_shard_numel());
}

Tensor FsdpParam::TakeUnshardedGrad() {
  if (!unsharded_param_.defined()) return Tensor();
  Tensor g = unsharded_param_.grad();
  if (!g.defined()) return Tensor();
  unsharded_param_.set_grad(Tensor());
  if (!tp_spec_) return g;
  dtensor::DTensor dg(g);
  if (!(dg.spec().placements() == tp_spec_->placements() && dg.spec().shard_order() == tp_spec_->shard_order())) {
    dg = dg.Redistribute(*tp_mesh_, tp_spec_->placements(), tp_spec_->shard_order());
  }
  return dtensor::GetDTensorImpl(dg, "fully_shard post-backward").local();
}

void FsdpParam::FoldGradInto(const Tensor& grad, const Tensor& flat_input, int64_t offset, int64_t group_shard_numel,
                             bool accumulate) const {
  TESSEL_INTERNAL_ASSERT(grad.sizes() == unsharded_shape_, "fully_shard: gradient of ", display_fqn_, " has shape ",
                         ShapeStr(grad.sizes()), ", expected ", ShapeStr(unsharded_shape_));
  NoGradGuard no_grad;
  const int64_t world = mesh_info_.shard_size();
  for (int64_t j = 0; j < world; ++j) {
    const int64_t n = dtensor::ChunkPieceOf(dim_size_, world, j).size;
    const int64_t base = j * group_shard_numel + offset;
    if (n > 0) {
      const Tensor dst = LocalView(flat_input, base, n);
      const Tensor src = SlicesOf(grad, dim_, j * chunk_, n);
      if (accumulate) {
        AddConverted(dst, src);
      } else {
        CopyInto(dst, src);
      }
    }
    // Only dim 0 pads (other dims shard evenly): the padding is the block's contiguous tail.
    const int64_t pad = (chunk_ - n) * slice_numel_;
    if (!accumulate && pad > 0) {
      FillInPlace(MakeView(flat_input, {pad}, {1}, flat_input.storage_offset() + base + n * slice_numel_), 0.0);
    }
  }
}

bool FsdpParam::SetShardedGradFrom(const Tensor& flat_output, int64_t offset) {
  NoGradGuard no_grad;
  const Tensor reduced = LocalView(flat_output, offset, local_size_);
  const Tensor existing = sharded_param_.grad();
  if (existing.defined()) {
    AddConverted(dtensor::GetDTensorImpl(existing, "fully_shard post-backward").local(), reduced);
    return false;
  }
  if (reduced.dtype() != orig_dtype_) {
    memory::LedgerScope ledger(memory::Ledger::kGrads);
    Tensor cast = Empty(reduced.sizes(), orig_dtype_, reduced.device());
    CopyInto(cast, reduced);
    sharded_param_.set_grad(dtensor::MakeDTensor(cast, *sharded_spec_, param_mesh()));
    return false;
  }
  sharded_param_.set_grad(dtensor::MakeDTensor(reduced, *sharded_spec_, param_mesh()));
  return true;
}

}  // namespace tessel::fsdp
