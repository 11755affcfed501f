// dtensor/shard_order.cc — default shard order, its printed form and the _StridedShard mapping.
#include "dtensor/shard_order.h"

#include <algorithm>
#include <string>

#include "core/base/error.h"

namespace tessel::dtensor {

ShardOrder DefaultShardOrder(std::span<const Placement> placements, int64_t ndim) {
  ShardOrder order(static_cast<size_t>(ndim));
  for (size_t axis = 0; axis < placements.size(); ++axis) {
    const Shard* s = std::get_if<Shard>(&placements[axis]);
    if (s == nullptr) continue;
    TESSEL_INTERNAL_ASSERT(s->dim >= 0 && s->dim < ndim, "DefaultShardOrder: ", s->ToString(), " on a ", ndim,
                           "-d tensor");
    order[static_cast<size_t>(s->dim)].push_back(static_cast<int>(axis));
  }
  return order;
}

bool IsDefaultShardOrder(const ShardOrder& order) {
  for (const std::vector<int>& axes : order) {
    for (size_t i = 1; i < axes.size(); ++i) {
      if (axes[i - 1] > axes[i]) return false;
    }
  }
  return true;
}

std::string ShardOrderToString(const ShardOrder& order) {
  std::string s = "{";
  bool first = true;
  for (size_t d = 0; d < order.size(); ++d) {
    if (order[d].empty()) continue;
    if (!first) s += ", ";
    first = false;
    s += Str(d, ": [");
    for (size_t i = 0; i < order[d].size(); ++i) s += Str(i ? ", " : "", order[d][i]);
    s += "]";
  }
  return s + "}";
}

std::vector<int64_t> StridedShardSplitFactors(const ShardOrder& order, std::span<const int64_t> mesh_shape) {
  std::vector<int64_t> factors(mesh_shape.size(), 1);
  for (const std::vector<int>& axes : order) {
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t f = 1;
      for (size_t k = 0; k < i; ++k) {
        if (axes[k] > axes[i]) f *= mesh_shape[static_cast<size_t>(axes[k])];
      }
      factors[static_cast<size_t>(axes[i])] = f;
    }
  }
  return factors;
}

ShardOrder ShardOrderFromSplitFactors(std::span<const Placement> placements, std::span<const int64_t> split_factors,
                                      std::span<const int64_t> mesh_shape, int64_t ndim) {
  ShardOrder order = DefaultShardOrder(placements, ndim);
  for (std::vector<int>& axes : order) {  // ascending mesh order: next_permutation visits every order
    bool found = false;
    do {
      const std::vector<int64_t> got = StridedShardSplitFactors(ShardOrder{axes}, mesh_shape);
      found = std::all_of(axes.begin(), axes.end(), [&](int a) {
        return got[static_cast<size_t>(a)] == split_factors[static_cast<size_t>(a)];
      });
    } while (!found && std::next_permutation(axes.begin(), axes.end()));
    if (found) continue;
    auto join = [](std::span<const int64_t> v) {
      std::string out;
      for (int64_t x : v) out += (out.empty() ? "" : ", ") + std::to_string(x);
      return "[" + out + "]";
    };
    TESSEL_FAIL(ErrorCode::kInvalidArgument, "_StridedShard: no sharding order of placements ",
                PlacementsToString(placements), " on a mesh of shape ", join(mesh_shape), " gives the split factors ",
                join(split_factors));
  }
  return order;
}

}  // namespace tessel::dtensor
