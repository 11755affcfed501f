// core/ops/attention_kernels_harness.h — what the two attention timing tools share (not part of the
// library): the phase-timing hook the kernels call (TESSEL_ATTN_PHASE -> Mark, rdtsc ticks per phase),
// the variant macros of attention_kernels_avx512.cc / attention_kernels_avx2.cc (the AVX2 ones with
// -DTESSEL_HARNESS_AVX2), the phase names, and operand memory laid out as core/memory/allocator.cc lays out
// tensors. Included before core/ops/attention_kernels.inc by //core/ops:attention_kernels_phases and by
// tools/dev/attention_ab/attention_ab.cc.
//
// Example:
//   #include "core/ops/attention_kernels_harness.h"
//   #include "core/ops/attention_kernels.inc"
//   Floats q(n);  // huge pages from 2 MiB, as the library's tensors
#pragma once

#include <immintrin.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

namespace {

// Blocks of 2 MiB and more 2 MiB-aligned and advised MADV_HUGEPAGE, as the library's allocator gives tensors
// (the attention's operands are TLB-bound on 4 KiB pages); TESSEL_THP_MEM_ALLOC_ENABLE=0 turns it off there
// and here.
template <typename T>
struct HostAllocator {
  using value_type = T;
  HostAllocator() = default;
  template <typename U>
  HostAllocator(const HostAllocator<U>&) {}
  T* allocate(size_t count) {
    static const bool wanted = [] {
      const char* env = std::getenv("TESSEL_THP_MEM_ALLOC_ENABLE");
      return env == nullptr || std::atoi(env) != 0;
    }();
    const size_t bytes = count * sizeof(T);
    const bool huge = wanted && bytes >= (size_t{2} << 20);
    void* p = nullptr;
    if (posix_memalign(&p, huge ? size_t{2} << 20 : 64, bytes) != 0) throw std::bad_alloc();
    if (huge) madvise(p, bytes, MADV_HUGEPAGE);
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  friend bool operator==(const HostAllocator&, const HostAllocator&) { return true; }
};
using Floats = std::vector<float, HostAllocator<float>>;

// TESSEL_ATTN_PHASE(n): the ticks since the previous mark belong to phase n.
uint64_t phase_mark = 0;
uint64_t phase_ticks[16];
inline uint64_t Now() { return __builtin_ia32_rdtsc(); }
inline void Mark(int phase) {
  const uint64_t now = Now();
  phase_ticks[phase] += now - phase_mark;
  phase_mark = now;
}

// The phases the kernels mark, by number (null: unused), and which of them are products.
constexpr const char* kPhaseNames[16] = {
    "fwd pack kT",   "fwd q.kT",    "fwd softmax", "fwd P.v",     "fwd finalize", "bwd pack kT vT",
    "bwd q.kT",      "bwd dO.vT",   "bwd exp, dS", "bwd PT.dO",   "bwd dS.K",     "bwd dST.Q",
    "bwd unpack",    "bwd delta",   "bwd loop",    nullptr};
constexpr bool kIsProduct[16] = {false, true, false, true, false, false, true, true,
                                 false, true, true,  true,  false, false, false, false};

}  // namespace

#ifdef TESSEL_HARNESS_AVX2
#define TESSEL_ATTN_W 8
#define TESSEL_ATTN_MR 6
#define TESSEL_ATTN_NAME "avx2"
#else
#define TESSEL_ATTN_W 16
#define TESSEL_ATTN_MR 12
#define TESSEL_ATTN_NAME "avx512"
#define TESSEL_ATTN_SCALEF(p, n) _mm512_mask_scalef_ps((p), static_cast<__mmask16>(-1), (p), (n))
#define TESSEL_ATTN_ROUND(y) _mm512_roundscale_ps((y), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#endif
#define TESSEL_ATTN_PHASE(n) Mark(n)
