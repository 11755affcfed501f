// checkpoint/chunk_index.cc — sorted-start index over chunk boxes.
#include "checkpoint/chunk_index.h"

#include <algorithm>
#include <set>

#include "core/base/error.h"

namespace tessel::checkpoint {

ChunkIndex::ChunkIndex(std::vector<Box> boxes) : boxes_(std::move(boxes)) {
  if (boxes_.empty() || boxes_[0].offsets.empty()) return;
  const size_t ndim = boxes_[0].offsets.size();
  size_t best = 0;
  for (size_t d = 0; d < ndim; ++d) {
    std::set<int64_t> starts;
    for (const Box& b : boxes_) {
      TESSEL_INTERNAL_ASSERT(b.offsets.size() == ndim, "ChunkIndex: boxes of different ranks");
      starts.insert(b.offsets[d]);
    }
    if (starts.size() > best) {
      best = starts.size();
      dim_ = static_cast<int>(d);
    }
  }
  order_.resize(boxes_.size());
  for (size_t i = 0; i < order_.size(); ++i) order_[i] = static_cast<int>(i);
  std::stable_sort(order_.begin(), order_.end(),
                   [&](int a, int b) { return boxes_[a].offsets[dim_] < boxes_[b].offsets[dim_]; });
  for (int i : order_) {
    starts_.push_back(boxes_[i].offsets[dim_]);
    max_len_ = std::max(max_len_, boxes_[i].sizes[dim_]);
  }
}

std::vector<int> ChunkIndex::Overlapping(const Box& query) const {
  std::vector<int> out;
  if (dim_ < 0) {
    for (size_t i = 0; i < boxes_.size(); ++i) {
      if (Intersect(boxes_[i], query)) out.push_back(static_cast<int>(i));
    }
    return out;
  }
  const int64_t q_start = query.offsets[dim_];
  const int64_t q_end = q_start + query.sizes[dim_];
  // Candidates start in (q_start - max_len, q_end): anything starting earlier ends at or before q_start.
  auto lo = std::upper_bound(starts_.begin(), starts_.end(), q_start - max_len_);
  auto hi = std::lower_bound(starts_.begin(), starts_.end(), q_end);
  for (auto it = lo; it < hi; ++it) {
    const int i = order_[static_cast<size_t>(it - starts_.begin())];
    if (Intersect(boxes_[i], query)) out.push_back(i);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<ReadItem> PlanReads(const ChunkIndex& index, const Box& target) {
  std::vector<ReadItem> out;
  for (int i : index.Overlapping(target)) out.push_back({i, *Intersect(index.boxes()[i], target)});
  return out;
}

}  // namespace tessel::checkpoint
