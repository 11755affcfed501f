// checkpoint/local_shard.h — LocalShard: what one rank holds of one state-dict tensor (its dense local
// data and the box of the global tensor it covers), for dense tensors and DTensors alike. Save writes
// local shards and Load fills them; neither needs DTensor ops, only the spec and the local tensor.
//
// Invariant: `local` is dense, of dtype `dtype`, with local.sizes() == box.sizes, and box lies inside
// global_shape. A dense tensor is its own full box (the same value on every rank). A DTensor's box is
// GlobalIntervals(spec, coordinate) (dtensor/layout.h), exactly one box in every shard order. Partial
// DTensors have no box (the value is a pending reduction) and are refused.
//
// Example:
//   LocalShard s = DescribeLocalShard("checkpoint save", "w", dtensor_w);
//   s.box;      // {{4, 0}, {4, 16}} on rank 1 of a (dp=2) [S(0)] [8, 16] tensor
//   s.layout;   // "(dp=2) [S(0)]"
#pragma once

#include <string>
#include <string_view>

#include "checkpoint/box.h"
#include "core/tensor/tensor.h"

namespace tessel::checkpoint {

struct LocalShard {
  Tensor local;
  DType dtype = DType::kFloat32;
  Shape global_shape;
  Box box;
  std::string layout;  // "dense", or "<mesh> <placements>[ order=<order>]"
  bool is_distributed = false;
};

// REQUIRES: t defined. A DTensor with a Partial placement raises kInvalidArgument naming `op`, `fqn`,
// the placements and the mesh.
LocalShard DescribeLocalShard(std::string_view op, const std::string& fqn, const Tensor& t);

// A view of `shard.local` restricted to `region` (global coordinates; REQUIRES: inside shard.box).
Tensor LocalRegionView(const LocalShard& shard, const Box& region);

}  // namespace tessel::checkpoint
