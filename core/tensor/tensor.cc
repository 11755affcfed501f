// core/tensor/tensor.cc — TensorImpl and the Tensor handle's accessors.
#include <algorithm>
#include <cmath>
#include <mutex>
#include <sstream>

#include "core/base/error.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {

TensorImpl::TensorImpl(Storage storage, Shape sizes, Shape strides, int64_t storage_offset, DType dtype)
    : storage_(std::move(storage)),
      sizes_(std::move(sizes)),
      strides_(std::move(strides)),
      storage_offset_(storage_offset),
      dtype_(dtype),
      device_(storage_.defined() ? storage_.device() : CurrentDevice()) {
  TESSEL_INTERNAL_ASSERT(sizes_.size() == strides_.size(), "sizes ", ShapeStr(sizes_), " strides ",
                         ShapeStr(strides_));
  RefreshContiguity();
  CheckExtent();
}

void TensorImpl::SetDataFrom(const TensorImpl& source, bool as_data) {
  const bool distributed = is_distributed() && source.is_distributed() && as_data;
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, distributed || (!is_distributed() && !source.is_distributed()),
                    as_data ? "Tensor.data = value: two dense tensors or two DTensors, got a "
                            : "Tensor.set_: dense tensors only, got a ",
                    KindName(), " and a ", source.KindName());
  TESSEL_CHECK((as_data || dtype_ == source.dtype_) && device_ == source.device_,
               as_data ? "Tensor.data = value: source has dtype " : "Tensor.set_: source has dtype ",
               DTypeName(source.dtype_), " on ", source.device_.ToString(), ", this tensor ", DTypeName(dtype_), " on ",
               device_.ToString());
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition,
                    autograd_meta_ == nullptr ||
                        (autograd_meta_->grad_fn == nullptr && (as_data || !autograd_meta_->requires_grad)),
                    as_data ? "Tensor.data = value: not on a tensor with autograd history (shape "
                            : "Tensor.set_: not on a tensor that requires grad or has autograd history (shape ",
                    ShapeStr(sizes_), ")");
  if (distributed) return SetDataFromDistributed(source);
  // A parameter's (or gradient's, optimizer state's) new bytes stay in its ledger: `p.data = p.data.half()`
  // (Module.half / .to), load_state_dict(assign=True) moved a model's parameters to 'other'.
  const memory::Ledger ledger = storage_.defined() ? storage_.ledger() : memory::Ledger::kOther;
  const bool keep_ledger = source.storage_.defined() && (ledger == memory::Ledger::kParams ||
                                                         ledger == memory::Ledger::kGrads ||
                                                         ledger == memory::Ledger::kOptimState);
  storage_ = source.storage_;
  if (keep_ledger) storage_.Retag(ledger);
  dtype_ = source.dtype_;  // `as_data` only: torch's `p.data = t.double()` (Module.to) makes p float64
  sizes_ = source.sizes_;
  strides_ = source.strides_;
  storage_offset_ = source.storage_offset_;
  RefreshContiguity();
  CheckExtent();
}

void TensorImpl::SetMetadata(Shape sizes, Shape strides, DType dtype) {
  sizes_ = std::move(sizes);
  strides_ = std::move(strides);
  dtype_ = dtype;
  RefreshContiguity();
}

void TensorImpl::SetDataFromDistributed(const TensorImpl& source) {
  TESSEL_INTERNAL_ASSERT(false, "Tensor.data = value: a ", KindName(), " cannot take a ", source.KindName(), "'s data");
}

TensorImpl::TensorImpl(Shape sizes, Shape strides, DType dtype, Device device)
    : sizes_(std::move(sizes)), strides_(std::move(strides)), dtype_(dtype), device_(device) {
  RefreshContiguity();
}

struct TensorImpl::ViewList {
  std::mutex mu;
  std::vector<std::weak_ptr<TensorImpl>> views;
  size_t prune_at = 16;  // expired handles are dropped when the list reaches this size (amortized O(1))
};

TensorImpl::~TensorImpl() { delete views_.load(std::memory_order_acquire); }

void TensorImpl::LinkView(const std::shared_ptr<TensorImpl>& base, const std::shared_ptr<TensorImpl>& view) {
  TESSEL_INTERNAL_ASSERT(base != nullptr && view != nullptr && view != base && view->view_base_ == nullptr,
                         "LinkView: a fresh view of another tensor expected");
  const std::shared_ptr<TensorImpl>& root = base->view_base_ != nullptr ? base->view_base_ : base;
  view->view_base_ = root;
  ViewList* list = root->views_.load(std::memory_order_acquire);
  if (list == nullptr) {
    auto* fresh = new ViewList();
    if (root->views_.compare_exchange_strong(list, fresh, std::memory_order_acq_rel)) {
      list = fresh;
    } else {
      delete fresh;  // another thread made it first: `list` now holds theirs
    }
  }
  std::lock_guard<std::mutex> lock(list->mu);
  if (list->views.size() >= list->prune_at) {
    std::erase_if(list->views, [](const std::weak_ptr<TensorImpl>& v) { return v.expired(); });
    list->prune_at = std::max<size_t>(16, 2 * list->views.size());
  }
  list->views.push_back(view);
}

std::vector<std::shared_ptr<TensorImpl>> TensorImpl::LiveViews() const {
  std::vector<std::shared_ptr<TensorImpl>> out;
  ViewList* list = views_.load(std::memory_order_acquire);
  if (list == nullptr) return out;
  std::lock_guard<std::mutex> lock(list->mu);
  for (const std::weak_ptr<TensorImpl>& v : list->views) {
    if (std::shared_ptr<TensorImpl> live = v.lock()) out.push_back(std::move(live));
  }
  return out;
}

void TensorImpl::CheckExtent() const {
  if (numel_ == 0) return;
  // Element offsets span [lo, hi] relative to storage_offset; computed with checked arithmetic so a
  // huge shape or stride is an error naming the shape, never a wrapped (small) extent.
  int64_t lo = storage_offset_, hi = storage_offset_;
  for (int64_t i = 0; i < dim(); ++i) {
    const int64_t reach = CheckedMul(sizes_[i] - 1, strides_[i], "tensor view: offset of the last element");
    (reach < 0 ? lo : hi) = CheckedAdd(reach < 0 ? lo : hi, reach, "tensor view: offset of the last element");
  }
  const int64_t es = ElementSize(dtype_);
  const int64_t end = CheckedMul(CheckedAdd(hi, 1, "tensor view: end offset"), es, "tensor view: end byte");
  // A storage whose bytes were freed (Storage::UnsafeFreeBytes, fsdp/) has 0 bytes and is refilled later.
  const int64_t nbytes = storage_.defined() ? storage_.nbytes() : 0;
  TESSEL_CHECK(lo >= 0 && (nbytes == 0 || end <= nbytes), "tensor view: shape ", ShapeStr(sizes_), " strides ",
               ShapeStr(strides_), " at offset ", storage_offset_, " reaches elements [", lo, ", ", hi,
               "] outside a storage of ", nbytes, " bytes of ", dtype_);
}

void TensorImpl::RefreshContiguity() {
  numel_ = NumElements(sizes_);
  is_contiguous_ = true;
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (sizes_[i] == 1) continue;
    if (strides_[i] != expected) {
      is_contiguous_ = false;
      break;
    }
    expected *= sizes_[i];
  }
  if (numel_ == 0) is_contiguous_ = true;
}

std::shared_ptr<TensorImpl> TensorImpl::ShallowCopyDetached() const {
  return std::make_shared<TensorImpl>(storage_, sizes_, strides_, storage_offset_, dtype_);
}

void* TensorImpl::raw_data() const {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !is_distributed() && storage_.defined(),
                    "raw_data: a ", KindName(), " tensor of shape ", ShapeStr(sizes_),
                    " has no local storage; call ToLocal() on a DTensor first");
  // Storage::UnsafeFreeBytes leaves 0 bytes behind a tensor that still has elements: reading them would
  // read freed memory. fsdp/ is what frees storages this way (unsharded parameters after forward).
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, numel_ == 0 || storage_.nbytes() > 0, "raw_data: a ", dtype_,
                    " tensor of shape ", ShapeStr(sizes_), " reads a storage whose bytes were freed: fully_shard ",
                    "frees a group's unsharded parameters after forward and gathers them again before a backward ",
                    "that reads them, unless set_unshard_in_backward(false) was set on its module; a split ",
                    "backward (a pipeline's I, then W) reads them after the group resharded at the end of I unless ",
                    "the group is held gathered for the schedule (the pipeline executor holds the fully_shard states ",
                    "it drives)");
  return static_cast<char*>(storage_.data()) + storage_offset_ * ElementSize(dtype_);
}

AutogradMeta& TensorImpl::EnsureAutogradMeta() {
  if (!autograd_meta_) autograd_meta_ = std::make_unique<AutogradMeta>();
  return *autograd_meta_;
}

Tensor MakeDense(Storage storage, Shape sizes, Shape strides, int64_t storage_offset, DType dtype) {
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), std::move(sizes), std::move(strides),
                                             storage_offset, dtype));
}

Tensor MakeView(const Tensor& t, Shape sizes, Shape strides, int64_t storage_offset) {
  TESSEL_INTERNAL_ASSERT(!t.is_distributed(), "MakeView on a distributed tensor");
  return MakeDense(t.impl()->storage(), std::move(sizes), std::move(strides), storage_offset, t.dtype());
}

Tensor Detach(const Tensor& t) { return Tensor(t.checked_impl()->ShallowCopyDetached()); }

std::shared_ptr<TensorImpl> TensorImpl::ShallowCopyWithNewVersion() const {
  return std::make_shared<TensorImpl>(storage_.defined() ? storage_.WithNewVersionCounter() : storage_, sizes_,
                                      strides_, storage_offset_, dtype_);
}

Tensor VariableData(const Tensor& t) { return Tensor(t.checked_impl()->ShallowCopyWithNewVersion()); }

void ResetVersionIfUnshared(const Tensor& t) {
  if (!t.defined() || t.is_distributed() || t.impl_ptr().use_count() != 1) return;
  const Storage& s = t.impl()->storage();
  if (s.defined() && s.use_count() == 1 && s.version() != 0) s.UnsafeRestoreVersion(0);
}

// ---- Tensor handle -------------------------------------------------------------------------------

namespace {
const TensorImpl& Impl(const std::shared_ptr<TensorImpl>& p) {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, p != nullptr, "use of an undefined Tensor");
  return *p;
}
}  // namespace

TensorImpl* Tensor::checked_impl() const { return const_cast<TensorImpl*>(&Impl(impl_)); }

const Shape& Tensor::sizes() const { return Impl(impl_).sizes(); }
const Shape& Tensor::strides() const { return Impl(impl_).strides(); }
// (NormalizeDim lets dim 0 / -1 name a 0-d tensor's only element, as ops do; a size or stride of one has none:
// indexing the empty shape crashed the process)
int64_t Tensor::size(int64_t d) const {
  TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, dim() > 0, "Dimension specified as ", d, " but tensor has no dimensions");
  return sizes()[NormalizeDim(d, dim(), "size")];
}
int64_t Tensor::stride(int64_t d) const {
  TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, dim() > 0, "Dimension specified as ", d, " but tensor has no dimensions");
  return strides()[NormalizeDim(d, dim(), "stride")];
}
int64_t Tensor::dim() const { return Impl(impl_).dim(); }
int64_t Tensor::numel() const { return Impl(impl_).numel(); }
int64_t Tensor::storage_offset() const { return Impl(impl_).storage_offset(); }
DType Tensor::dtype() const { return Impl(impl_).dtype(); }
Device Tensor::device() const { return Impl(impl_).device(); }
bool Tensor::is_contiguous() const { return Impl(impl_).is_contiguous(); }
bool Tensor::is_distributed() const { return Impl(impl_).is_distributed(); }
void* Tensor::raw_data() const { return Impl(impl_).raw_data(); }

void Tensor::CheckDataPtr(DType want) const {
  TESSEL_CHECK(dtype() == want, "data_ptr: tensor has dtype ", dtype(), " but ", want, " was requested");
}

double Tensor::ItemDouble() const {
  TESSEL_CHECK(numel() == 1, "a Tensor with ", numel(), " elements cannot be converted to Scalar (item: shape ",
               ShapeStr(sizes()), ")");
  return ToDoubleVector()[0];
}

namespace {

// The elements of `t` (the full tensor of a DTensor) converted to T on the host, in row-major order.
template <typename T>
std::vector<T> HostValues(const Tensor& t, DType dtype) {
  const TensorImpl* impl = t.impl();
  if (impl != nullptr && impl->is_distributed()) {
    const Tensor full = impl->MaterializeFull(t);
    TESSEL_INTERNAL_ASSERT(!full.impl()->is_distributed(), impl->KindName(), " does not implement MaterializeFull");
    return HostValues<T>(full, dtype);
  }
  Tensor c = Empty(t.sizes(), dtype, Device::Cpu(t.device().is_cpu() ? t.device().index : 0));
  CopyInto(c, t);
  const T* p = c.data_ptr<T>();
  return std::vector<T>(p, p + c.numel());
}

}  // namespace

std::vector<double> Tensor::ToDoubleVector() const { return HostValues<double>(*this, DType::kFloat64); }

std::vector<int64_t> Tensor::ToInt64Vector() const { return HostValues<int64_t>(*this, DType::kInt64); }

bool Tensor::requires_grad() const {
  const AutogradMeta* m = Impl(impl_).autograd_meta();
  return m != nullptr && m->requires_grad;
}

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  TESSEL_CHECK(!requires_grad || IsFloating(dtype()), "set_requires_grad: only floating tensors can require "
               "gradients, got ", dtype());
  AutogradMeta& m = checked_impl()->EnsureAutogradMeta();
  TESSEL_CHECK(m.grad_fn == nullptr, "set_requires_grad: can only change requires_grad of leaf tensors (this one "
               "was produced by an op; use Detach() first)");
  m.requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const {
  const AutogradMeta* m = Impl(impl_).autograd_meta();
  return m == nullptr || m->grad_fn == nullptr;
}

Tensor Tensor::grad() const {
  const AutogradMeta* m = Impl(impl_).autograd_meta();
  return m == nullptr ? Tensor() : m->grad;
}

void Tensor::set_grad(const Tensor& grad) const {
  if (grad.defined()) {
    TESSEL_CHECK(grad.sizes() == sizes(), "set_grad: gradient shape ", ShapeStr(grad.sizes()),
                 " does not match tensor shape ", ShapeStr(sizes()));
    // As torch ("assigned grad has data of a different type"): an optimizer reads .grad as the
    // parameter's dtype, so a float64 or bf16 .grad on a float32 parameter stepped it with garbage.
    TESSEL_CHECK(grad.dtype() == dtype(), "set_grad: gradient dtype ", DTypeName(grad.dtype()),
                 " does not match the tensor's ", DTypeName(dtype()), " (shape ", ShapeStr(sizes()), ")");
  }
  // A gradient assigned by hand (p.grad = zeros_like(p)) is what backward then accumulates into: its bytes are
  // grads, as AccumulateGrad's own (they stayed in the ledger they were made under).
  if (grad.defined() && !grad.is_distributed()) grad.impl()->RetagMemory(memory::Ledger::kGrads);
  checked_impl()->EnsureAutogradMeta().grad = grad;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> kNone;
  const AutogradMeta* m = Impl(impl_).autograd_meta();
  return m == nullptr ? kNone : m->grad_fn;
}

std::string Tensor::ToString() const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << (is_distributed() ? impl_->KindName() : "Tensor") << "(" << dtype() << ", " << ShapeStr(sizes()) << ", "
     << device();
  if (requires_grad()) os << ", requires_grad";
  if (!is_distributed() && numel() <= 16) {
    os << ", [";
    const std::vector<double> v = ToDoubleVector();
    for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
    os << "]";
  }
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.ToString(); }

}  // namespace tessel
