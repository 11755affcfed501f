// dtensor/placement.h — Placement = Shard(dim) | Replicate | Partial(reduce_op): how a DTensor lies on one
// mesh axis. Small immutable values with ==, hash, a short form ("S(0)", "R", "P(sum)") and a long form
// ("Shard(dim=0)", "Replicate()", "Partial(sum)"), as in PyTorch's placement_types.py (__str__ / __repr__).
//
// Invariant: a placement list has one entry per mesh axis, outer axis first (DTensorSpec::Verify checks
// it); the global tensor is always recoverable from the ranks' local tensors with the rules below.
//
// Example:
//   std::vector<Placement> p = {Shard{0}, Replicate{}};      // mesh (dp, tp): rows split over dp
//   ToString(p[0]);                                          // "S(0)"
//   std::vector<Placement> q = ParsePlacements("P(sum), S(1)");
//
// [Note: Placement semantics] (referenced from layout.h, redistribute_planner.h, dtensor_spec.h)
//
// (a) Shard(d) splits tensor dim d like torch.chunk over the axis: every piece has ceil(n / W) elements,
//     so trailing ranks may be smaller or empty. An empty piece reports global offset n (PyTorch's
//     convention, so checkpoint de-duplication sees an out-of-range, non-overlapping offset):
//       n  W   sizes          global offsets
//       8  4   [2, 2, 2, 2]   [0, 2, 4, 6]
//       7  4   [2, 2, 2, 1]   [0, 2, 4, 6]
//       6  4   [2, 2, 2, 0]   [0, 2, 4, 6]   <- the empty piece's offset is n = 6
//       5  4   [2, 2, 1, 0]   [0, 2, 4, 5]
//       9  4   [3, 3, 3, 0]   [0, 3, 6, 9]
//       1  4   [1, 0, 0, 0]   [0, 1, 1, 1]
//       0  4   [0, 0, 0, 0]   [0, 0, 0, 0]
// (b) Placements are listed per mesh axis, outer to inner. When several axes shard the same tensor dim,
//     the chunking nests in the spec's shard order (shard_order.h), by default outer axis first:
//     mesh (3, 2), [S(0), S(0)], global arange(8):
//       rank  coordinate  axis-0 piece (of 3)  axis-1 piece (of 2)  shard index  local
//       0     (0, 0)      0: rows 0-2          0                   0            [0, 1]
//       1     (0, 1)      0: rows 0-2          1                   1            [2]
//       2     (1, 0)      1: rows 3-5          0                   2            [3, 4]
//       3     (1, 1)      1: rows 3-5          1                   3            [5]
//       4     (2, 0)      2: rows 6-7          0                   4            [6]
//       5     (2, 1)      2: rows 6-7          1                   5            [7]
//     An explicit order (TP first, then FSDP: shard order {0: [tp, dp]}) on mesh (dp, tp) = (2, 2), [8, 8]:
//       rank 0 (0, 0) rows 0-1, rank 1 (0, 1) rows 4-5, rank 2 (1, 0) rows 2-3, rank 3 (1, 1) rows 6-7.
// (c) Shard or Partial on a size-1 axis holds the whole value, exactly like Replicate. tessel does NOT
//     rewrite the placement (a spec keeps what the user declared, and S(0) != R on a size-1 axis, as in
//     PyTorch); the layout math gives the same local shape (chunking into 1 piece is the identity) and the
//     planner normalizes size-1 axes internally, so they never cost a step or a collective.
// (d) Partial(op) means the global value is op-reduced over the axis' ranks. Its three contracts:
//       reduce          P(op) -> R     all_reduce(op)
//       reduce-scatter  P(op) -> S(d)  reduce_scatter(op) along d (uneven pieces: padded, then unpadded)
//       partition       R -> P(op)     local: sum keeps the value on axis coordinate 0 and zeros
//                                      elsewhere (exact; PyTorch divides by W instead); avg, max and min
//                                      keep the value on every rank.
//       embed           S(d) -> P(sum) local: the piece at its offset in zeros (as PyTorch).
//     Allowed ops: sum, avg, max, min. Partial(op1) -> Partial(op2) is never legal.
// (e) Backward: the gradient of a redistribute src -> dst arrives in dst's placements and goes back to
//     GradPlacement(grad, src) per axis: src itself, except that a Partial src whose gradient is not
//     Partial gets Replicate (the Replicate <-> Partial duality: P -> R forward is an all_reduce, backward
//     none; R -> P forward is local, backward an all_reduce). S -> R backward is a local chunk; R -> S
//     backward an all_gather.
// (f) Legal single-axis transitions and what each costs (W = axis size; W = 1 costs nothing):
//       src \ dst   R               S(j)                            P(op)
//       R           -               local chunk (no comm)           partition (no comm)
//       S(i)        all_gather      i == j: -   i != j: all_to_all  sum: embed (no comm); avg, max, min:
//                                                                   all_gather + partition (torch refuses)
//       P(op)       all_reduce      reduce_scatter                  same op: -   other op: illegal
//     When a tensor dim is sharded by several axes, only the last axis of its shard order can be
//     gathered or moved, and a new shard appends its axis to the order; redistribute_planner.h turns any
//     (src, dst) pair into such steps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "comm/process_group.h"

namespace tessel::dtensor {

// Tensor dim `dim` is split over the mesh axis like torch.chunk. `dim` is normalized (0 <= dim < ndim)
// by the APIs that take user input; DTensorSpec::Verify rejects a negative or too-large dim.
struct Shard {
  int64_t dim = 0;
  std::string ToString() const;      // "S(0)"
  std::string ToLongString() const;  // "Shard(dim=0)"
  friend bool operator==(const Shard&, const Shard&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const Shard& s) {
    return H::combine(std::move(h), 0, s.dim);
  }
};

// Every rank of the axis holds the whole value.
struct Replicate {
  std::string ToString() const { return "R"; }
  std::string ToLongString() const { return "Replicate()"; }
  friend bool operator==(const Replicate&, const Replicate&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const Replicate&) {
    return H::combine(std::move(h), 1);
  }
};

// Every rank holds a partial value; the global value is their reduction with `reduce_op`.
struct Partial {
  comm::ReduceOp reduce_op = comm::ReduceOp::kSum;
  std::string ToString() const;      // "P(sum)"
  std::string ToLongString() const;  // "Partial(sum)"
  friend bool operator==(const Partial&, const Partial&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const Partial& p) {
    return H::combine(std::move(h), 2, static_cast<int>(p.reduce_op));
  }
};

using Placement = std::variant<Shard, Replicate, Partial>;

inline bool IsShard(const Placement& p) { return std::holds_alternative<Shard>(p); }
inline bool IsShardOn(const Placement& p, int64_t dim) {
  const Shard* s = std::get_if<Shard>(&p);
  return s != nullptr && s->dim == dim;
}
inline bool IsReplicate(const Placement& p) { return std::holds_alternative<Replicate>(p); }
inline bool IsPartial(const Placement& p) { return std::holds_alternative<Partial>(p); }
// True for the reduce ops a Partial may carry (sum, avg, max, min).
bool IsSupportedPartialOp(comm::ReduceOp op);

std::string ToString(const Placement& p);      // short form
std::string ToLongString(const Placement& p);  // long form
// "[S(0), R]"
std::string PlacementsToString(std::span<const Placement> placements);
// Parses short or long forms separated by commas and/or spaces: "S(0), R, P(avg)", "Shard(dim=1)",
// "Partial()" (= sum). Throws kInvalidArgument naming the text.
std::vector<Placement> ParsePlacements(std::string_view text);

std::ostream& operator<<(std::ostream& os, const Shard& p);
std::ostream& operator<<(std::ostream& os, const Replicate& p);
std::ostream& operator<<(std::ostream& os, const Partial& p);
std::ostream& operator<<(std::ostream& os, const Placement& p);

// The placement a gradient is redistributed to, on one axis, in the backward of a redistribute whose
// source placement was `forward_src`, when the incoming gradient has placement `grad` (Note (e)).
Placement GradPlacement(const Placement& grad, const Placement& forward_src);
// The default gradient placements of to_local / from_local (torch 2.15's gradient placement guarantee):
// the forward placements with every Partial read as Replicate. A local piece of a Partial value feeds the
// whole value, so its gradient is the whole gradient, whatever placement that gradient arrives in.
std::vector<Placement> LocalGradPlacements(const std::vector<Placement>& forward);

}  // namespace tessel::dtensor

template <>
struct std::hash<tessel::dtensor::Shard> {
  size_t operator()(const tessel::dtensor::Shard& s) const noexcept {
    return std::hash<int64_t>()(s.dim) * 0x9e3779b97f4a7c15ull + 11;
  }
};
template <>
struct std::hash<tessel::dtensor::Replicate> {
  size_t operator()(const tessel::dtensor::Replicate&) const noexcept { return 0x5bd1e995u; }
};
template <>
struct std::hash<tessel::dtensor::Partial> {
  size_t operator()(const tessel::dtensor::Partial& p) const noexcept {
    return std::hash<int>()(static_cast<int>(p.reduce_op)) * 0xc2b2ae3d27d4eb4full + 29;
  }
};
