// core/memory/host_pages.h — how host memory is obtained from the system (allocator.cc's HostAlloc, and the
// attention timing tools of core/ops and tools/dev, which must lay out their operands as tensors are laid
// out and cannot link the library: tools/dev/attention_ab compiles with g++ alone). Header-only for that.
//
// [Note: huge pages] Blocks of kHugePageBytes (2 MiB) and more start on a 2 MiB boundary and are advised
// MADV_HUGEPAGE, so that where transparent huge pages are in "madvise" mode (Debian's default, and these
// VMs') their memory is mapped by 2 MiB pages: one TLB entry where 4 KiB pages take 512. The fused
// attention (128 heads [128, 32], its q, k, v and gradients 2 MiB each, streamed head after head) ran
// 7-9% faster with its operands on huge pages, measured on Zen 4 (AMD EPYC family 25 model 17): the
// software prefetch of the next head's lines no longer waits on page walks. PyTorch has the same policy
// behind C10_THP_MEM_ALLOC_ENABLE (off by default there); here it is on, since freed blocks are cached
// and reused rather than refaulted, and TESSEL_THP_MEM_ALLOC_ENABLE=0 turns it off. In "always" mode the
// kernel does this by itself; in "never" mode the advice is ignored (madvise's result is not checked:
// the pages are only a speed-up).
//
// Example:
//   void* p = memory::AllocateHostPages(bytes, /*align=*/64);  // nullptr when the system has none
//   std::free(p);
#pragma once

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>

namespace tessel::memory {

inline constexpr int64_t kHugePageBytes = int64_t{2} << 20;

// Whether blocks of kHugePageBytes and more go on huge pages (TESSEL_THP_MEM_ALLOC_ENABLE, read once).
inline bool HugePagesWanted() {
  static const bool wanted = [] {
    const char* env = std::getenv("TESSEL_THP_MEM_ALLOC_ENABLE");
    return env == nullptr || std::atoi(env) != 0;
  }();
  return wanted;
}

// `bytes` of memory aligned to `align`, or to 2 MiB and advised MADV_HUGEPAGE when bytes >= kHugePageBytes
// and HugePagesWanted(); nullptr when the system has none. Freed with std::free.
inline void* AllocateHostPages(int64_t bytes, int64_t align) {
  const bool huge = bytes >= kHugePageBytes && HugePagesWanted();
  void* p = nullptr;
  if (posix_memalign(&p, static_cast<size_t>(huge ? kHugePageBytes : align), static_cast<size_t>(bytes)) != 0) {
    return nullptr;
  }
  if (huge) madvise(p, static_cast<size_t>(bytes), MADV_HUGEPAGE);
  return p;
}

}  // namespace tessel::memory
