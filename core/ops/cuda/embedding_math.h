// core/ops/cuda/embedding_math.h — the deterministic scatter-add of the embedding_backward CUDA kernel
// (core/ops/embedding.cu): indices grouped by table row on the host (a counting sort that keeps the
// positions of each row ascending), then one thread per (touched row, column) summing its gradient rows
// in that order in fp32. Shared with a host test against the CPU op "embedding_backward".
//
// Invariant: every table element is the fp32 sum of its gradient values in ascending position order —
// the CPU kernel's order (core/ops/embedding.cc) — so float32 results are bitwise equal to the CPU's and
// bfloat16 results round the same fp32 sum once. No atomics; untouched rows stay zero.
//
// Example:
//   const RowGroups groups = GroupPositionsByRow(idx, n, num_rows);       // host
//   table[groups.rows[u] * C + c] = SumGroup(grad, groups_positions, begin, end, C, c);   // device
#pragma once

#include <cstdint>
#include <vector>

#include "core/ops/cuda/row_reduce.h"

namespace tessel::cuda {

struct RowGroups {
  std::vector<int64_t> rows;       // touched table rows, ascending
  std::vector<int64_t> offsets;    // rows.size() + 1 entries into positions
  std::vector<int64_t> positions;  // positions of idx grouped by row, ascending within a row
};

// REQUIRES: every idx[i] in [0, num_rows) (checked by the caller).
inline RowGroups GroupPositionsByRow(const int64_t* idx, int64_t n, int64_t num_rows) {
  std::vector<int64_t> count(num_rows + 1, 0);
  for (int64_t i = 0; i < n; ++i) ++count[idx[i] + 1];
  for (int64_t r = 0; r < num_rows; ++r) count[r + 1] += count[r];  // count[r] = first slot of row r
  RowGroups g;
  g.positions.resize(n);
  std::vector<int64_t> next(count.begin(), count.end() - 1);
  for (int64_t i = 0; i < n; ++i) g.positions[next[idx[i]]++] = i;
  g.offsets.push_back(0);
  for (int64_t r = 0; r < num_rows; ++r) {
    if (count[r + 1] == count[r]) continue;
    g.rows.push_back(r);
    g.offsets.push_back(count[r + 1]);
  }
  return g;
}

// Σ grad[positions[p], c] for p in [begin, end), in order, fp32.
template <typename T>
TESSEL_HOST_DEVICE inline float SumGroup(const T* grad, const int64_t* positions, int64_t begin, int64_t end,
                                         int64_t cols, int64_t c) {
  float s = 0.0f;
  for (int64_t p = begin; p < end; ++p) s += LoadF(grad, positions[p] * cols + c);
  return s;
}

}  // namespace tessel::cuda
