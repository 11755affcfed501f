// dtensor/debug/visualize_sharding.h — VisualizeSharding: a printed table of which rank holds which global
// index ranges of a DTensor (the role of torch.distributed.tensor.debug.visualize_sharding).
//
// Invariant: a pure function of the spec (mesh, placements, shard order, shape): every rank prints the
// same text, nothing is communicated, and the ranges are exactly layout.h's GlobalIntervals. Ranges are
// half-open [begin, end); an empty piece prints "empty". Partial axes are named in the value column
// (the rank holds a partial value, reduced with that op over that axis).
//
// Example (mesh (dp, tp) = (2, 2), [S(0), R], shape [5, 3]):
//   DTensor [5, 3] float32, placements [S(0), R], mesh (dp=2, tp=2)
//   rank  coordinate  dim 0   dim 1   value
//   0     (0, 0)      [0, 3)  [0, 3)  full
//   1     (0, 1)      [0, 3)  [0, 3)  full
//   2     (1, 0)      [3, 5)  [0, 3)  full
//   3     (1, 1)      [3, 5)  [0, 3)  full
//   blocks:
//     [0, 3) x [0, 3): ranks 0, 1
//     [3, 5) x [0, 3): ranks 2, 3
#pragma once

#include <string>

#include "dtensor/dtensor.h"
#include "dtensor/dtensor_spec.h"

namespace tessel::dtensor {

std::string VisualizeSharding(const DTensorSpec& spec);
std::string VisualizeSharding(const DTensor& tensor);

}  // namespace tessel::dtensor
