// tp/testing/tp_testing.h — helpers for the multi-rank tensor-parallel tests: torch.chunk pieces of a
// full tensor computed by index arithmetic, full values of (D)Tensors, a relative error, the W=2/4 runner.
//
// Invariant: the reference side never goes through tp/: pieces come from Narrow on the full tensor with
// torch.chunk's ceil sizes written out here, so a wrong layout in tp/ cannot hide behind the same math.
//
// Example:
//   RunTp(4, [&](const dtensor::DeviceMesh& tp) {
//     Tensor x_local = ChunkOf(x_full, /*dim=*/1, tp.local_rank(0), 4);
//   });
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "comm/backends/threads.h"
#include "comm/tracer.h"
#include "core/autograd/engine.h"
#include "core/base/testing/expect_error.h"
#include "core/base/testing/rel_err.h"
#include "core/ops/view.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"
#include "dtensor/device_mesh.h"
#include "dtensor/dtensor.h"

namespace tessel::tp::testing {

using ::tessel::testing::ExpectErrorContains;
using ::tessel::testing::RelErr;

inline comm::RunRanksOptions FastRanks() { return {.timeout = std::chrono::milliseconds(60000)}; }

// Runs `fn` on `world` ranks with a 1-D mesh named "tp".
inline void RunTp(int world, const std::function<void(const dtensor::DeviceMesh& tp)>& fn) {
  comm::RunRanks(
      world, [&](comm::ProcessGroupPtr pg) { fn(dtensor::InitDeviceMesh(pg, {world}, {"tp"})); }, FastRanks());
}

// Piece `rank` of `full` split on `dim` into `world` torch.chunk pieces (ceil size; trailing may be empty).
inline Tensor ChunkOf(const Tensor& full, int64_t dim, int64_t rank, int64_t world) {
  if (dim < 0) dim += full.dim();
  const int64_t n = full.size(dim), c = (n + world - 1) / world;
  const int64_t start = std::min(rank * c, n), len = std::max<int64_t>(0, std::min(c, n - start));
  return Contiguous(Narrow(full, dim, start, len));
}

// A fresh leaf copy that requires grad.
inline Tensor Leaf(const Tensor& t) {
  Tensor c = FromVector(t.ToVector<float>(), t.sizes());
  c.set_requires_grad(true);
  return c;
}

inline std::vector<double> FullValues(const Tensor& t) {
  if (t.is_distributed()) return dtensor::DTensor(t).FullTensor().ToDoubleVector();
  return t.ToDoubleVector();
}

inline std::string PlacementsOf(const Tensor& t) {
  return t.is_distributed() ? dtensor::PlacementsToString(dtensor::DTensor(t).placements()) : "plain";
}

}  // namespace tessel::tp::testing
