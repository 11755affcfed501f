// checkpoint/box.h — Box: an axis-aligned block of a global tensor (per-dim offsets and sizes), the unit
// a checkpoint saves (a chunk) and a rank loads (its local shard).
//
// Invariant: offsets.size() == sizes.size() == tensor ndim; every size >= 0. A 0-d tensor is the empty
// box {[], []} with volume 1. Intersect returns nullopt when the boxes share no element.
//
// Example:
//   Box a{{0, 0}, {4, 8}}, b{{2, 4}, {4, 8}};
//   Intersect(a, b);            // Box{{2, 4}, {2, 4}}
//   BoxToString(a);             // "[0:4, 0:8]"
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/tensor/shape.h"

namespace tessel::checkpoint {

struct Box {
  Shape offsets;
  Shape sizes;
  friend bool operator==(const Box&, const Box&) = default;
};

inline int64_t Volume(const Box& b) { return NumElements(b.sizes); }
// The whole tensor of `shape`.
Box FullBox(const Shape& shape);
// REQUIRES: same ndim.
std::optional<Box> Intersect(const Box& a, const Box& b);
// True when `inner` lies inside `outer`.
bool Contains(const Box& outer, const Box& inner);
// "[0:4, 0:8]" (python slice notation); "[]" for a 0-d tensor.
std::string BoxToString(const Box& b);

}  // namespace tessel::checkpoint
