// core/ops/cuda/gemm_plan.h — how a row-major (possibly transposed, batched) product C = A · B maps onto
// one cuBLASLt matmul: column-major operands with op flags and leading dims, batch folding, strided
// batches. Plain C++, used by core/ops/matmul_cuda.cc and held by a host test against the CPU "matmul"
// op through a reference column-major GEMM with cuBLAS's (op, ld) semantics.
//
// Invariant: row-major C [M, N] = A [M, K] · B [K, N] is column-major Cᵀ [N, M] = Bᵀ [N, K] · Aᵀ [K, M], so
// cuBLASLt's "A" is our B and its "B" is our A, each described by TransposedOperand (no copy: a matrix
// with unit column stride is already a column-major transpose; one with unit row stride is read through
// op = T). PlanMatmul folds batch dims into M when B is shared and A's rows line up (x · wᵀ of a 3-d x),
// into K for sum_batch when both operands line up (wgrad gᵀ · x), and otherwise emits a strided batch
// (every batch dim of both operands collapsing to one stride). C is always a fresh contiguous
// [batch..., M, N] (or [M, N] with sum_batch). Anything else is nullopt: the caller raises kUnimplemented.
//
// Example:
//   auto plan = PlanMatmul(a.sizes(), a.strides(), b.sizes(), b.strides(), /*sum_batch=*/false);
//   // cublasLtMatmul with plan->a (our B), plan->b (our A), m = N, n = M, k = K, ldc = N, batch ...
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace tessel::cuda {

// A matrix in row-major terms (element strides).
struct MatView {
  int64_t rows, cols, row_stride, col_stride;
};

// What cuBLASLt reads: a column-major rows x cols matrix with leading dim ld, used as op(X) (trans: Xᵀ).
struct LtOperand {
  bool trans;
  int64_t rows, cols, ld;
};

// The operand whose op() equals mᵀ, read in place; nullopt when neither stride of m is unit.
inline std::optional<LtOperand> TransposedOperand(const MatView& m) {
  if ((m.col_stride == 1 || m.cols <= 1) && (m.rows <= 1 || m.row_stride >= std::max<int64_t>(m.cols, 1))) {
    return LtOperand{false, m.cols, m.rows, std::max<int64_t>(m.rows <= 1 ? m.cols : m.row_stride, 1)};
  }
  if ((m.row_stride == 1 || m.rows <= 1) && (m.cols <= 1 || m.col_stride >= std::max<int64_t>(m.rows, 1))) {
    return LtOperand{true, m.rows, m.cols, std::max<int64_t>(m.cols <= 1 ? m.rows : m.col_stride, 1)};
  }
  return std::nullopt;
}

struct LtPlan {
  LtOperand a, b;                        // cuBLASLt's A (our B, transposed) and B (our A, transposed)
  int64_t m, n, k;                       // cuBLASLt's sizes: m = N, n = M (rows of the product, batch folded), k = K
  int64_t batch;                         // 1, or the strided batch count
  int64_t stride_a, stride_b, stride_c;  // element strides between batch entries (cuBLASLt's A, B, C)
};

// The one stride of dims walking one arithmetic progression (size-1 dims ignored); nullopt otherwise.
inline std::optional<int64_t> CollapsedStride(std::span<const int64_t> sizes, std::span<const int64_t> strides) {
  int64_t stride = 1, span = -1;
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 1; i >= 0; --i) {
    if (sizes[i] == 1) continue;
    if (span >= 0 && strides[i] != span) return std::nullopt;
    if (span < 0) stride = strides[i];
    span = strides[i] * sizes[i];
  }
  return stride;
}

// An operand's sizes and strides as the product reads it: the last two dims swapped when `transpose`
// (matmul's transpose_a / transpose_b, a view). REQUIRES: at least 2 dims.
inline std::pair<std::vector<int64_t>, std::vector<int64_t>> ResolvedOperand(std::span<const int64_t> sizes,
                                                                             std::span<const int64_t> strides,
                                                                             bool transpose) {
  std::vector<int64_t> sz(sizes.begin(), sizes.end()), st(strides.begin(), strides.end());
  if (transpose) {
    std::swap(sz[sz.size() - 1], sz[sz.size() - 2]);
    std::swap(st[st.size() - 1], st[st.size() - 2]);
  }
  return {sz, st};
}

// A [batch..., M, K] and B [batch'..., K, N] (already transposed as the op asks; batch dims broadcast only
// where one side has none). REQUIRES: dims >= 2 and matching K.
inline std::optional<LtPlan> PlanMatmul(std::span<const int64_t> as, std::span<const int64_t> ast,
                                        std::span<const int64_t> bs, std::span<const int64_t> bst, bool sum_batch) {
  const size_t na = as.size(), nb = bs.size();
  const int64_t M = as[na - 2], K = as[na - 1], N = bs[nb - 1];
  std::vector<int64_t> batch_sz(as.begin(), as.end() - 2), batch_st(ast.begin(), ast.end() - 2);
  std::vector<int64_t> bbatch_sz(bs.begin(), bs.end() - 2), bbatch_st(bst.begin(), bst.end() - 2);
  int64_t nbatch = 1, nbbatch = 1;
  for (int64_t s : batch_sz) nbatch *= s;
  for (int64_t s : bbatch_sz) nbbatch *= s;
  auto make = [&](MatView a, MatView b, int64_t count, int64_t sa, int64_t sb) -> std::optional<LtPlan> {
    const auto oa = TransposedOperand(a), ob = TransposedOperand(b);
    if (!oa || !ob) return std::nullopt;
    return LtPlan{*ob, *oa, b.cols, a.rows, a.cols, count, sb, sa, a.rows * b.cols};
  };
  const MatView b2{bs[nb - 2], N, bst[nb - 2], bst[nb - 1]};
  if (nbbatch == 1 && !sum_batch) {  // shared B: fold A's batch into its rows
    batch_sz.push_back(M);
    batch_st.push_back(ast[na - 2]);
    if (auto rs = CollapsedStride(batch_sz, batch_st)) {
      if (auto p = make({nbatch * M, K, *rs, ast[na - 1]}, b2, 1, 0, 0)) return p;
    }
    batch_sz.pop_back();
    batch_st.pop_back();
  }
  if (batch_sz != bbatch_sz) return std::nullopt;  // broadcast batches: not planned
  if (sum_batch) {                                 // Σ_b A[b] B[b] = [M, (batch, K)] · [(batch, K), N]
    std::vector<int64_t> ka_sz = batch_sz, ka_st = batch_st, kb_st = bbatch_st;
    ka_sz.push_back(K);
    ka_st.push_back(ast[na - 1]);
    kb_st.push_back(bst[nb - 2]);
    const auto ka = CollapsedStride(ka_sz, ka_st), kb = CollapsedStride(ka_sz, kb_st);
    if (!ka || !kb) return std::nullopt;
    return make({M, nbatch * K, ast[na - 2], *ka}, {nbatch * K, N, *kb, bst[nb - 1]}, 1, 0, 0);
  }
  const auto sa = CollapsedStride(batch_sz, batch_st), sb = CollapsedStride(bbatch_sz, bbatch_st);
  if (!sa || !sb) return std::nullopt;
  return make({M, K, ast[na - 2], ast[na - 1]}, b2, nbatch, *sa, *sb);
}

}  // namespace tessel::cuda
