// checkpoint/testing/checkpoint_testing_ranks.h — multi-rank helpers for checkpoint tests: a layout
// description (world size, mesh, placements, shard order) and placing a full tensor in it.
//
// Invariant: Place() on every rank of a layout yields a state-dict tensor whose global value is `full`
// (a dense copy when the layout has no mesh), so tests can compare against `full` without collectives.
//
// Example:
//   const Layout fsdp{4, {4}, "S(0)"};
//   comm::RunRanks(fsdp.world, [&](comm::ProcessGroupPtr w) {
//     auto mesh = MakeMesh(w, fsdp);
//     Tensor t = Place(full, mesh, fsdp);
//   });
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "comm/backends/threads.h"
#include "core/base/error.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "dtensor/device_mesh.h"
#include "dtensor/dtensor.h"

namespace tessel::checkpoint::testing {

struct Layout {
  int world = 1;
  Shape mesh;              // empty: dense tensors, every rank a full replica
  std::string placements;  // e.g. "S(0), R"
  std::optional<dtensor::ShardOrder> order;
};

inline std::string LayoutName(const Layout& l) {
  std::string s = Str("W=", l.world, " mesh=", ShapeStr(l.mesh), " [", l.placements, "]");
  if (l.order) s += " order=" + dtensor::ShardOrderToString(*l.order);
  return s;
}

inline std::optional<dtensor::DeviceMesh> MakeMesh(const comm::ProcessGroupPtr& world, const Layout& l) {
  if (l.mesh.empty()) return std::nullopt;
  std::vector<std::string> names;
  for (size_t i = 0; i < l.mesh.size(); ++i) names.push_back(Str("a", i));
  return dtensor::InitDeviceMesh(world, l.mesh, names);
}

inline Tensor Place(const Tensor& full, const std::optional<dtensor::DeviceMesh>& mesh, const Layout& l) {
  if (!mesh) {
    Tensor copy = Empty(full.sizes(), full.dtype());
    CopyInto(copy, full);
    return copy;
  }
  return dtensor::DistributeTensor(full, *mesh, dtensor::ParsePlacements(l.placements), {.shard_order = l.order})
      .tensor();
}

inline comm::RunRanksOptions TestRanks() { return {.timeout = std::chrono::milliseconds(20000)}; }

}  // namespace tessel::checkpoint::testing
