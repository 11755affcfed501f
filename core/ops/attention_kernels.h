// core/ops/attention_kernels.h — internal to core/ops: the float32 per-head kernels of the fused
// causal attention (core/ops/attention.cc), compiled once per vector ISA and chosen at run time.
//
// Defines AttentionHeadDims, AttentionKernels (forward and backward of one head, plus the scratch
// each needs), the two compiled variants (AVX2 + FMA, the build's x86-64-v3 baseline; AVX-512F) and
// ActiveAttentionKernels(), which picks the variant ActiveVectorIsa() names (core/ops/vector_isa.h:
// cpuid, or ForceVectorIsaForTesting, so CI on either machine kind covers both).
//
// Invariant: the binary stays portable. Only attention_kernels_avx512.cc is compiled with AVX-512
// flags; its code lives in an ISA-named namespace with internal linkage (no inline function or
// template it defines can be merged with the AVX2 copy by the linker) and it is reached only through
// ActiveAttentionKernels() after the cpuid check. Each head is computed by one thread in one fixed
// order, so results do not depend on the thread count (they may differ in the last bits between ISAs).
//
// Example:
//   const AttentionKernels& kern = ActiveAttentionKernels();
//   std::vector<float> scratch(kern.scratch_floats(dims));
//   kern.forward(head_ptrs, dims, /*causal=*/true, scale, scratch.data());
#pragma once

#include <cstdint>

namespace tessel {

struct AttentionHeadDims {
  int64_t t = 0, s = 0, d = 0, dv = 0;  // queries, keys, q/k width, v width
};

enum class ScoreRounding : uint8_t { kNone, kBFloat16, kFloat16 };

// One head's tensors, row-major with the last dim contiguous (rows may be strided, *_ld below): q [T, D], k [S, D], v [S, Dv], o [T, Dv], lse [T];
// backward reads saved_o, saved_lse (forward's o, lse) and dout [T, Dv] and writes dq [T, D], dk [S, D],
// dv [S, Dv].
struct AttentionHeadPtrs {
  const float *q = nullptr, *k = nullptr, *v = nullptr;
  float* o = nullptr;    // forward outputs
  float* lse = nullptr;
  const float *saved_o = nullptr, *saved_lse = nullptr, *dout = nullptr;  // backward inputs
  float *dq = nullptr, *dk = nullptr, *dv = nullptr;
  // Row strides in elements (0: rows packed at the width): o_ld is o's in forward, saved_o's in backward.
  int64_t q_ld = 0, k_ld = 0, v_ld = 0, o_ld = 0, dout_ld = 0, dq_ld = 0, dk_ld = 0, dv_ld = 0;
  // The head this thread computes next (same dims), or null: its operands are prefetched into L2 a few
  // cache lines at a time while this head computes (prefetches only; results do not depend on it).
  const AttentionHeadPtrs* next = nullptr;
  // The probabilities P (forward and backward) and dS (backward) rounded to this 16-bit type before the products
  // that read them, the row sums left unrounded, as torch's CPU flash-attention kernel does for bfloat16 and
  // float16 inputs (its GEMMs take 16-bit operands): 16-bit outputs then round as torch's do.
  ScoreRounding score_rounding = ScoreRounding::kNone;
};

struct AttentionKernels {
  const char* isa;  // "avx512" or "avx2"
  // Floats of 64-byte-aligned scratch that forward and backward need for heads of these sizes.
  int64_t (*scratch_floats)(const AttentionHeadDims& dims);
  // o = softmax(q·kᵀ·scale + causal mask)·v and lse = log Σ exp(q·kᵀ·scale) per query row.
  void (*forward)(const AttentionHeadPtrs& h, const AttentionHeadDims& dims, bool causal, float scale,
                  float* scratch);
  // dq, dk, dv from dout, with P rebuilt from lse (FlashAttention-2's backward).
  void (*backward)(const AttentionHeadPtrs& h, const AttentionHeadDims& dims, bool causal, float scale,
                   float* scratch);
};

const AttentionKernels& Avx2AttentionKernels();
const AttentionKernels& Avx512AttentionKernels();

// The variant ActiveVectorIsa() names (core/ops/vector_isa.h).
const AttentionKernels& ActiveAttentionKernels();

}  // namespace tessel
