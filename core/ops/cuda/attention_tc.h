// core/ops/cuda/attention_tc.h — the tensor-core (WMMA bf16) flash attention of core/ops/attention_tc.cu,
// which attention.cu's launchers use for bfloat16 heads where TcAttentionApplies; the same contracts as
// LaunchFlashForward / LaunchFlashBackward (row_kernels_launch.h) with d == dv.
//
// Example (attention.cu):
//   if (TcAttentionApplies(d, dv, t, s, {q, k, v, out})) TcAttentionForward(q, k, v, out, lse, bh, t, s, d, ...);
#pragma once

#include <cstdint>
#include <initializer_list>

namespace tessel::cuda {

// d == dv in {16, 32, 64, 128}, t, s > 0 and every pointer 16-byte aligned (the tiles load 16 bytes at once).
bool TcAttentionApplies(int64_t d, int64_t dv, int64_t t, int64_t s, std::initializer_list<const void*> pointers);

// bf16 q [bh, t, d], k, v [bh, s, d] -> out [bh, t, d] bf16, lse [bh, t] float32 (natural log).
void TcAttentionForward(const void* q, const void* k, const void* v, void* out, float* lse, int64_t bh, int64_t t,
                        int64_t s, int64_t d, float scale, bool causal, void* stream);

// dq, dk, dv (bf16) from dout, q, k, v, lse and dd (D_i = dO_i · O_i, float32 [bh, t]).
void TcAttentionBackward(const void* dout, const void* q, const void* k, const void* v, const float* lse,
                         const float* dd, void* dq, void* dk, void* dv, int64_t bh, int64_t t, int64_t s, int64_t d,
                         float scale, bool causal, void* stream);

}  // namespace tessel::cuda
