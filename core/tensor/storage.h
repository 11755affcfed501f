// core/tensor/storage.h — refcounted bytes shared by a tensor and all its views.
//
// Invariant: a Storage is a cheap handle; copies share the same Block and the same version counter.
// The version counter is bumped by every in-place write through any view, which lets autograd detect
// "a tensor saved for backward was modified in place". WithNewVersionCounter() is the one way to get the
// same Block under another counter (torch's Tensor.data, whose writes autograd does not see).
//
// Example:
//   Storage s = Storage::Allocate(64, Device::Cpu());
//   Storage alias = s;   // same bytes; alias.data() == s.data()
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "core/memory/allocator.h"
#include "core/tensor/device.h"

namespace tessel {

class Storage {
 public:
  Storage() = default;
  // Allocates under the thread's current memory ledger.
  static Storage Allocate(int64_t nbytes, Device device);

  bool defined() const { return impl_ != nullptr; }
  void* data() const { return impl_->block->data(); }
  int64_t nbytes() const { return impl_->block->nbytes(); }
  Device device() const { return impl_->block->device(); }
  memory::Ledger ledger() const { return impl_->block->ledger(); }
  void Retag(memory::Ledger ledger) const { impl_->block->Retag(ledger); }
  uint32_t version() const { return version_->load(std::memory_order_relaxed); }
  void BumpVersion() const { version_->fetch_add(1, std::memory_order_relaxed); }
  // The same bytes (and Block: UnsafeFreeBytes / UnsafeAllocateBytes reach both) under a version counter
  // of its own, starting at 0: torch's Tensor.data / variable_data(), so writes through it are not seen
  // by autograd's check on tensors saved for backward. is_same() still holds between the two.
  Storage WithNewVersionCounter() const {
    Storage s = *this;
    s.version_ = std::make_shared<std::atomic<uint32_t>>(0);
    return s;
  }
  // Unsafe (autograd no longer sees writes made since `version` was read): PyTorch's
  // _unsafe_preserve_version_counter. fsdp/ refills unsharded parameters that tensors saved for backward
  // refer to, with a strided copy that bumps the counter, and restores it afterwards.
  void UnsafeRestoreVersion(uint32_t version) const { version_->store(version, std::memory_order_relaxed); }
  // Unsafe (breaks TensorImpl's "every index lies inside the storage" for every tensor over these
  // bytes until UnsafeAllocateBytes): frees the bytes but keeps the handle, its views and its version,
  // like PyTorch's storage.resize_(0). fsdp/ frees unsharded parameters this way so tensors that
  // autograd saved for backward do not pin them, and refills the same storage before backward.
  void UnsafeFreeBytes() const { impl_->block = memory::Allocate(0, device()); }
  // Fresh (uninitialized) bytes under the thread's current ledger; views see them. Version unchanged.
  void UnsafeAllocateBytes(int64_t nbytes) const { impl_->block = memory::Allocate(nbytes, device()); }
  // Allocated under a DeferredInitGuard (torch's meta device: [Note: deferred init] in factory.h), until
  // cleared (Module.to_empty): what Tensor.is_meta reports.
  bool deferred_init() const { return impl_->deferred_init.load(std::memory_order_relaxed); }
  void set_deferred_init(bool on) const { impl_->deferred_init.store(on, std::memory_order_relaxed); }
  bool is_same(const Storage& other) const { return impl_ == other.impl_; }
  long use_count() const { return impl_.use_count(); }

 private:
  struct Impl {
    std::unique_ptr<memory::Block> block;
    std::atomic<bool> deferred_init{false};
  };
  std::shared_ptr<Impl> impl_;
  std::shared_ptr<std::atomic<uint32_t>> version_;  // shared by copies, not by WithNewVersionCounter()
};

}  // namespace tessel
