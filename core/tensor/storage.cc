// core/tensor/storage.cc — Storage allocation through the counting allocator.
#include "core/tensor/storage.h"

namespace tessel {

Storage Storage::Allocate(int64_t nbytes, Device device) {
  Storage s;
  s.impl_ = std::make_shared<Impl>();
  s.impl_->block = memory::Allocate(nbytes, device);
  s.version_ = std::make_shared<std::atomic<uint32_t>>(0);
  return s;
}

}  // namespace tessel
