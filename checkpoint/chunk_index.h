// checkpoint/chunk_index.h — ChunkIndex: the saved chunks of one tensor, indexed so that "which chunks
// overlap this box?" costs O(log n + candidates) instead of a scan of every chunk; and PlanReads, the
// pure read plan of one target box (which chunk, which overlap).
//
// Invariant: Overlapping(q) returns exactly the boxes that share at least one element with q, in
// ascending index order. How: boxes are sorted by their start on the dim with the most distinct starts;
// a box starting at or before q.start - max_len cannot reach q, so a binary search bounds the candidate
// range to starts in (q.start - max_len, q.end) and only those are intersected. For the layouts
// DTensors produce (a grid of torch.chunk pieces) that range is one slab of the grid.
//
// Example:
//   ChunkIndex idx({Box{{0}, {4}}, Box{{4}, {4}}});
//   idx.Overlapping(Box{{3}, {2}});        // {0, 1}
//   PlanReads(idx, boxes, Box{{5}, {3}});  // {{.chunk = 1, .overlap = Box{{5}, {3}}}}
#pragma once

#include <vector>

#include "checkpoint/box.h"

namespace tessel::checkpoint {

class ChunkIndex {
 public:
  // REQUIRES: every box has the same ndim.
  explicit ChunkIndex(std::vector<Box> boxes);
  std::vector<int> Overlapping(const Box& query) const;
  const std::vector<Box>& boxes() const { return boxes_; }
  int dim() const { return dim_; }

 private:
  std::vector<Box> boxes_;
  int dim_ = -1;                 // -1 for 0-d tensors (every box is the whole tensor)
  std::vector<int> order_;       // box indices sorted by start on dim_
  std::vector<int64_t> starts_;  // starts_[i] = boxes_[order_[i]].offsets[dim_]
  int64_t max_len_ = 0;
};

struct ReadItem {
  int chunk = 0;
  Box overlap;
  friend bool operator==(const ReadItem&, const ReadItem&) = default;
};

// The reads that fill `target` from the indexed chunks (ascending chunk order).
std::vector<ReadItem> PlanReads(const ChunkIndex& index, const Box& target);

}  // namespace tessel::checkpoint
