// checkpoint/box.cc — Box arithmetic.
#include "checkpoint/box.h"

#include <algorithm>

#include "core/base/error.h"

namespace tessel::checkpoint {

Box FullBox(const Shape& shape) { return Box{Shape(shape.size(), 0), shape}; }

std::optional<Box> Intersect(const Box& a, const Box& b) {
  TESSEL_INTERNAL_ASSERT(a.offsets.size() == b.offsets.size(), "box rank mismatch");
  Box out;
  for (size_t d = 0; d < a.offsets.size(); ++d) {
    const int64_t lo = std::max(a.offsets[d], b.offsets[d]);
    const int64_t hi = std::min(a.offsets[d] + a.sizes[d], b.offsets[d] + b.sizes[d]);
    if (hi <= lo) return std::nullopt;
    out.offsets.push_back(lo);
    out.sizes.push_back(hi - lo);
  }
  return out;
}

bool Contains(const Box& outer, const Box& inner) {
  if (outer.offsets.size() != inner.offsets.size()) return false;
  for (size_t d = 0; d < outer.offsets.size(); ++d) {
    // Written so that no sum overflows: inner's values may come from a corrupt file.
    const int64_t outer_end = outer.offsets[d] + outer.sizes[d];
    if (inner.offsets[d] < outer.offsets[d] || inner.offsets[d] > outer_end ||
        inner.sizes[d] > outer_end - inner.offsets[d]) {
      return false;
    }
  }
  return true;
}

std::string BoxToString(const Box& b) {
  std::string s = "[";
  for (size_t d = 0; d < b.offsets.size(); ++d) {
    if (d > 0) s += ", ";
    s += Str(b.offsets[d], ":", b.offsets[d] + b.sizes[d]);
  }
  return s + "]";
}

}  // namespace tessel::checkpoint
