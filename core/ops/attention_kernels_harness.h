// core/ops/attention_kernels_harness.h — what the two attention timing tools share (not part of the
// library): the phase-timing hook the kernels call (TESSEL_ATTN_PHASE -> Mark, rdtsc ticks per phase),
// the variant macros (attention_kernels_avx512_isa.inc, or attention_kernels_avx2.cc's ones with
// -DTESSEL_HARNESS_AVX2), the phase names, and the operands (HarnessHeads): random heads in memory laid out
// as core/memory/allocator.cc lays out tensors (core/memory/host_pages.h), and the fwd+bwd pass over them.
// Included before core/ops/attention_kernels.inc by //core/ops:attention_kernels_phases and by
// tools/dev/attention_ab/attention_ab.cc.
//
// Example:
//   #include "core/ops/attention_kernels_harness.h"
//   #include "core/ops/attention_kernels.inc"
//   HarnessHeads x(heads, t, d, ScratchFloats(x.dm));
//   x.RunFwdBwd(Forward, Backward, /*prefetch=*/true);
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <random>
#include <vector>

#include "core/memory/host_pages.h"
#include "core/ops/attention_kernels.h"

namespace {

// Operand memory as the library's allocator gives tensors (huge pages from 2 MiB; the attention's operands
// are TLB-bound on 4 KiB pages).
template <typename T>
struct HostAllocator {
  using value_type = T;
  HostAllocator() = default;
  template <typename U>
  HostAllocator(const HostAllocator<U>&) {}
  T* allocate(size_t count) {
    void* p = ::tessel::memory::AllocateHostPages(static_cast<int64_t>(count * sizeof(T)), 64);
    if (p == nullptr) throw std::bad_alloc();
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

// `heads` causal heads [t, d] of random q, k, v and dout (seed 1), head after head as in a [heads, t, d]
// tensor, their outputs and gradients, and one 64-byte-aligned scratch buffer of `scratch_floats`.
struct HarnessHeads {
  HarnessHeads(int64_t heads, int64_t t, int64_t d, int64_t scratch_floats)
      : heads(heads), t(t), d(d), dm{t, t, d, d}, scratch_buf(static_cast<size_t>(scratch_floats) + 16) {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    for (Floats* x : {&q, &k, &v, &g}) {
      x->resize(static_cast<size_t>(heads * t * d));
      for (float& e : *x) e = normal(rng);
    }
    for (Floats* x : {&o, &dq, &dk, &dv}) x->resize(static_cast<size_t>(heads * t * d));
    lse.resize(static_cast<size_t>(heads * t));
    scratch = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch_buf.data()) + 63) & ~uintptr_t{63});
  }
  // Heads laid out as a [B, T, H, D] tensor's [B, H, T, D] view (a transformer block's q, k, v and their
  // gradients: rows interleave·D apart) when interleave = H > 1; else each head's [T, D] is contiguous.
  ::tessel::AttentionHeadPtrs Head(int64_t h) {
    ::tessel::AttentionHeadPtrs p;
    const int64_t off = h / interleave * t * interleave * d + h % interleave * d;
    if (interleave > 1) {
      p.q_ld = p.k_ld = p.v_ld = p.o_ld = p.dout_ld = p.dq_ld = p.dk_ld = p.dv_ld = interleave * d;
    }
    p.q = q.data() + off, p.k = k.data() + off, p.v = v.data() + off, p.o = o.data() + off;
    p.lse = lse.data() + h * t, p.saved_o = o.data() + off, p.saved_lse = lse.data() + h * t;
    p.dout = g.data() + off, p.dq = dq.data() + off, p.dk = dk.data() + off, p.dv = dv.data() + off;
    return p;
  }
  // Forward over every head, then backward, as the library runs them on one thread: each head names the
  // next (its operands prefetched) when `prefetch`; the phase clock restarts at each head.
  template <typename Fn>
  void RunFwdBwd(Fn forward, Fn backward, bool prefetch) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    for (Fn fn : {forward, backward}) {
      for (int64_t h = 0; h < heads; ++h) {
        ::tessel::AttentionHeadPtrs p = Head(h);
        const ::tessel::AttentionHeadPtrs next = Head(h + 1);
        if (prefetch && h + 1 < heads) p.next = &next;
        phase_mark = Now();
        fn(p, dm, /*causal=*/true, scale, scratch);
      }
    }
  }

  int64_t heads, t, d;
  int64_t interleave = 1;  // H of a [B, T, H, D] layout (heads a multiple of it), or 1
  ::tessel::AttentionHeadDims dm;
  Floats q, k, v, g, o, lse, dq, dk, dv;
  std::vector<float> scratch_buf;
  float* scratch = nullptr;
};

}  // namespace

#ifdef TESSEL_HARNESS_AVX2
#define TESSEL_ATTN_W 8
#define TESSEL_ATTN_MR 6
#define TESSEL_ATTN_NAME "avx2"
#else
#include "core/ops/attention_kernels_avx512_isa.inc"
#endif
#define TESSEL_ATTN_PHASE(n) Mark(n)
