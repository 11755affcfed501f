// core/ops/cuda/row_kernels_launch.h — plain C++ entry points of core/ops/softmax.cu, norm.cu, loss.cu
// embedding.cu, reduction.cu and attention.cu (no CUDA types, so g++ code calls them): softmax / log_softmax and their
// backward over lanes of a contiguous tensor, layer_norm / rms_norm over rows and their fused backward, cross_entropy
// with a fused log-softmax and its backward, the embedding gather and its deterministic scatter-add,
// sum / mean over dims of a strided tensor and sum_backward's scaled broadcast, and the flash-style
// attention forward.
//
// Invariant: every pointer is device memory of one device, tensors contiguous, elements float32 or
// bfloat16 (ElemType), statistics float32; the work is enqueued on `stream` (a cudaStream_t, null = the
// default stream) and is asynchronous. Each entry returns the launch error, "" on success. The math is
// cuda/softmax_math.h and cuda/norm_math.h (host-tested against the CPU kernels). Compiled for sm_90a +
// compute_90 PTX; run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
//
// The math is also cuda/loss_math.h and cuda/embedding_math.h.
//
// Example:
//   cuda::LaunchSoftmax(false, cuda::ElemType::kFloat32, x, y, cuda::Lanes::Of(sizes, dim), stream);
#pragma once

#include <cstdint>

#include "core/ops/cuda/elementwise_launch.h"
#include "core/ops/cuda/flash_math.h"
#include "core/ops/cuda/reduce_plan.h"
#include "core/ops/cuda/row_reduce.h"

namespace tessel::cuda {

const char* LaunchSoftmax(bool log, ElemType type, const void* x, void* y, const Lanes& lanes, void* stream);
const char* LaunchSoftmaxBackward(bool log, ElemType type, const void* grad, const void* y, void* dx,
                                  const Lanes& lanes, void* stream);

// x [rows, cols]; w, b: [cols] or null; mean: [rows] or null (rms_norm); rstd: [rows].
const char* LaunchNormForward(ElemType type, const void* x, const void* w, const void* b, void* y, float* mean,
                              float* rstd, int64_t rows, int64_t cols, float eps, void* stream);

// dx (may be null) from dy, x, w (or null), mean (null: rms_norm), rstd. When dw or db is wanted,
// `partial` is scratch of NormParamScratchFloats(rows, cols) floats and dw / db (either may be null)
// receive the column sums.
int64_t NormParamScratchFloats(int64_t rows, int64_t cols);
const char* LaunchNormBackward(ElemType type, const void* dy, const void* x, const void* w, const float* mean,
                               const float* rstd, void* dx, void* dw, void* db, float* partial, int64_t rows,
                               int64_t cols, void* stream);

// logits [rows, classes], target int64 [rows] (every entry in range or ignore_index: checked by the
// caller); loss_rows: float scratch [rows]. out: the per-row losses ([rows], x's type) when !reduce,
// else one element Σ loss_rows / divisor.
const char* LaunchCrossEntropy(ElemType type, const void* logits, const int64_t* target, int64_t ignore_index,
                               float* loss_rows, void* out, bool reduce, float divisor, int64_t rows, int64_t classes,
                               void* stream);
// grad: [rows] (per_row) or one element divided by `divisor`.
const char* LaunchCrossEntropyBackward(ElemType type, const void* grad, bool per_row, float divisor, const void* logits,
                                       const int64_t* target, int64_t ignore_index, void* dx, int64_t rows,
                                       int64_t classes, void* stream);

// out[i, :] = weight[idx[i], :] for n indices (in range: checked by the caller), rows of `cols`.
const char* LaunchEmbedding(ElemType type, const void* weight, const int64_t* idx, void* out, int64_t n, int64_t cols,
                            void* stream);
// table (zeroed by the caller) row rows[u] = Σ grad rows positions[offsets[u] .. offsets[u + 1]) in order
// (cuda/embedding_math.h's RowGroups, uploaded).
const char* LaunchEmbeddingBackward(ElemType type, const void* grad, const int64_t* rows, const int64_t* offsets,
                                    const int64_t* positions, int64_t num_groups, void* table, int64_t cols,
                                    void* stream);

// out[o] = scale * Σ x over output o's reduced elements (cuda/reduce_plan.h), out contiguous.
const char* LaunchSum(ElemType type, const void* x, void* out, const ReducePlan& plan, float scale, void* stream);
// The same sum where IsColumnSum(plan) (cuda/reduce_plan.h): x is [rows, cols] contiguous; partial is
// fp32 scratch [chunks, cols], chunks = ColumnSumChunks(rows, cols) (the caller sizes the scratch with it).
const char* LaunchColumnSum(ElemType type, const void* x, void* out, float* partial, int64_t rows, int64_t cols,
                            int64_t chunks, float scale, void* stream);
// max along one dim: values (x's dtype) and int64 indices of the first maximum (cuda/reduce_plan.h).
const char* LaunchArgMax(ElemType type, const void* x, void* values, int64_t* indices, const ReducePlan& plan,
                         void* stream);
// max_backward: out[o + idx * dim_stride] = g for every kept position (out zero-filled by the caller);
// calc walks the kept shape with {out, g, idx} strides.
const char* LaunchArgMaxScatter(ElemType type, const void* g, const int64_t* idx, void* out,
                                const OffsetCalculator<3>& calc, int64_t n, int64_t dim_stride, void* stream);
// amax / norm (p = 1, 2, inf) over the plan's reduced elements (cuda/reduce_plan.h: ReduceKind).
const char* LaunchMappedReduce(ElemType type, ReduceKind kind, const void* x, void* out, const ReducePlan& plan,
                               void* stream);
// out[off0(i)] = g[off1(i)] * scale for i < n (sum_backward: calc = {out strides, ReducedGradStrides}).
const char* LaunchBroadcastScale(ElemType type, const void* g, void* out, const OffsetCalculator<2>& calc, int64_t n,
                                 float scale, void* stream);

// Flash-style attention forward over bh heads of contiguous q [bh, t, d], k [bh, s, d], v [bh, s, dv]
// (d, dv <= kMaxHeadDim; bh <= 65535): out [bh, t, dv] in q's type, lse [bh, t] float32
// (cuda/flash_math.h).
const char* LaunchFlashForward(ElemType type, const void* q, const void* k, const void* v, void* out, float* lse,
                               int64_t bh, int64_t t, int64_t s, int64_t d, int64_t dv, float scale, bool causal,
                               void* stream);
// Its backward from the saved out and lse: dq [bh, t, d], dk [bh, s, d], dv_out [bh, s, dv] in q's type;
// dd: float scratch [bh, t] (D_i = dO_i · O_i).
const char* LaunchFlashBackward(ElemType type, const void* dout, const void* q, const void* k, const void* v,
                                const void* out, const float* lse, void* dq, void* dk, void* dv_out, float* dd,
                                int64_t bh, int64_t t, int64_t s, int64_t d, int64_t dv, float scale, bool causal,
                                void* stream);

}  // namespace tessel::cuda
