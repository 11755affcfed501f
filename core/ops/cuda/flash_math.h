// core/ops/cuda/flash_math.h — the per-query-row online softmax of tessel's flash-style CUDA attention
// forward (core/ops/attention.cu), shared with a host test that runs it in the kernel's order against the
// CPU op "scaled_dot_product_attention" (core/ops/attention.cc).
//
// Invariant: for query row i, keys j = 0, 1, ... (skipping j > i under is_causal, torch's top-left
// mask) each fold in once: s = scale * q_i · k_j (fp32), m' = max(m, s), acc = acc * exp(m - m') +
// exp(s - m') * v_j, l = l * exp(m - m') + exp(s - m'); at the end out_i = acc / l and lse_i = m + log l
// (out 0 and lse -inf for a row with no keys, as the CPU op). No score matrix is ever stored.
//
// Example (one thread per query row, keys streamed through shared memory in tiles):
//   FlashState st = FlashState::Start(); float acc[kMaxHeadDim] = {};
//   for each key j: FlashUpdate(st, acc, FlashScore(q_row, k_row, d, scale), v_row, dv);
//   FlashFinish(st, acc, dv, out_row, &lse[i]);
#pragma once

#include <cstdint>

#include "core/ops/cuda/row_reduce.h"

namespace tessel::cuda {

inline constexpr int64_t kMaxHeadDim = 128;

struct FlashState {
  float m, l;
  TESSEL_HOST_DEVICE static FlashState Start() { return {-INFINITY, 0.0f}; }
};

// scale * q · k in fp32 (k already widened to fp32, as the kernel's shared-memory tile holds it).
template <typename T>
TESSEL_HOST_DEVICE inline float FlashScore(const T* q_row, const float* k_row, int64_t d, float scale) {
  float s = 0.0f;
  for (int64_t c = 0; c < d; ++c) s += LoadF(q_row, c) * k_row[c];
  return s * scale;
}

TESSEL_HOST_DEVICE inline void FlashUpdate(FlashState& st, float* acc, float s, const float* v_row, int64_t dv) {
  const float m_new = s > st.m ? s : st.m;
  const float alpha = expf(st.m - m_new);  // 0 on the first key (m = -inf)
  const float p = expf(s - m_new);
  st.l = st.l * alpha + p;
  for (int64_t c = 0; c < dv; ++c) acc[c] = acc[c] * alpha + p * v_row[c];
  st.m = m_new;
}

template <typename T>
TESSEL_HOST_DEVICE inline void FlashFinish(const FlashState& st, const float* acc, int64_t dv, T* out_row, float* lse) {
  if (st.l == 0.0f) {
    for (int64_t c = 0; c < dv; ++c) StoreF(out_row, c, 0.0f);
    *lse = -INFINITY;
    return;
  }
  const float inv = 1.0f / st.l;
  for (int64_t c = 0; c < dv; ++c) StoreF(out_row, c, acc[c] * inv);
  *lse = st.m + logf(st.l);
}

// ---- backward (recomputes P from lse; no score matrix either) ----------------------------------------
//   D_i = dO_i · O_i;  P_ij = exp(s_ij - lse_i);  dS_ij = P_ij (dO_i · v_j - D_i)
//   dQ_i = scale Σ_j dS_ij k_j (keys ascending);  dK_j = scale Σ_i dS_ij q_i, dV_j = Σ_i P_ij dO_i
//   (queries ascending), over the pairs the forward attended to (FlashKeyEnd / FlashQueryBegin).

// Σ a_c b_c in fp32 over n elements (D_i = dO_i · O_i, and dO_i · v_j with v_j widened).
template <typename A, typename B>
TESSEL_HOST_DEVICE inline float FlashDot(const A* a, const B* b, int64_t n) {
  float s = 0.0f;
  for (int64_t c = 0; c < n; ++c) s += LoadF(a, c) * LoadF(b, c);
  return s;
}

TESSEL_HOST_DEVICE inline float FlashProb(float s, float lse) { return expf(s - lse); }

TESSEL_HOST_DEVICE inline float FlashDScore(float p, float do_dot_v, float d_i) { return p * (do_dot_v - d_i); }

// First query row that attends to key j: 0, or j under is_causal (top-left mask).
TESSEL_HOST_DEVICE inline int64_t FlashQueryBegin(int64_t j, bool causal) { return causal ? j : 0; }

// Keys query row i attends to: [0, s) or, causal, [0, min(s, i + 1)).
TESSEL_HOST_DEVICE inline int64_t FlashKeyEnd(int64_t i, int64_t s, bool causal) {
  return causal ? (i + 1 < s ? i + 1 : s) : s;
}

}  // namespace tessel::cuda
