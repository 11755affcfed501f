// dtensor/mesh_topology.cc — coordinates, groups, slicing and printing of a mesh's rank layout.
#include "dtensor/mesh_topology.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <set>

#include "core/base/error.h"
#include "core/tensor/shape.h"

namespace tessel::dtensor {
namespace {

std::string NamesStr(std::span<const std::string> names) {
  std::string s = "[";
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s + "]";
}

// Prints ranks[offset ...] as a nested list over shape[axis ...].
void NestedRanks(std::string& s, std::span<const int64_t> shape, std::span<const int> ranks, size_t axis,
                 int64_t offset, int64_t stride) {
  s += "[";
  const int64_t inner = stride / shape[axis];
  for (int64_t i = 0; i < shape[axis]; ++i) {
    if (i) s += ", ";
    if (axis + 1 == shape.size()) {
      s += std::to_string(ranks[static_cast<size_t>(offset + i)]);
    } else {
      NestedRanks(s, shape, ranks, axis + 1, offset + i * inner, inner);
    }
  }
  s += "]";
}

std::vector<std::string> DefaultNames(size_t ndim) {
  std::vector<std::string> names;
  for (size_t i = 0; i < ndim; ++i) names.push_back("axis" + std::to_string(i));
  return names;
}

}  // namespace

bool MeshTopology::has_default_axis_names() const { return axis_names_ == DefaultNames(axis_names_.size()); }

MeshTopology::MeshTopology(std::vector<int64_t> shape, std::vector<std::string> axis_names, std::vector<int> ranks)
    : shape_(std::move(shape)),
      axis_names_(axis_names.empty() ? DefaultNames(shape_.size()) : std::move(axis_names)),
      ranks_(std::move(ranks)) {
  Verify();
  text_ = Format();
}

MeshTopology MeshTopology::Iota(std::vector<int64_t> shape, std::vector<std::string> axis_names) {
  int64_t n = 1;
  for (int64_t s : shape) n *= std::max<int64_t>(s, 0);
  std::vector<int> ranks(static_cast<size_t>(n));
  std::iota(ranks.begin(), ranks.end(), 0);
  return MeshTopology(std::move(shape), std::move(axis_names), std::move(ranks));
}

void MeshTopology::Verify() const {
  const std::string what = Str("DeviceMesh(shape=", ShapeStr(shape_), ", axes=", NamesStr(axis_names_), ")");
  TESSEL_CHECK(!shape_.empty(), "DeviceMesh: a mesh needs at least one axis, got ", what);
  TESSEL_CHECK(axis_names_.size() == shape_.size(), "DeviceMesh: ", axis_names_.size(), " axis names for ",
               shape_.size(), " axes in ", what);
  int64_t n = 1;
  for (size_t a = 0; a < shape_.size(); ++a) {
    TESSEL_CHECK(shape_[a] >= 1, "DeviceMesh: axis '", axis_names_[a], "' has size ", shape_[a],
                 "; every axis needs size >= 1 in ", what);
    n *= shape_[a];
  }
  std::set<std::string_view> seen;
  for (const std::string& name : axis_names_) {
    TESSEL_CHECK(!name.empty(), "DeviceMesh: empty axis name in ", what);
    TESSEL_CHECK(seen.insert(name).second, "DeviceMesh: duplicate axis name '", name, "' in ", what);
  }
  TESSEL_CHECK(static_cast<int64_t>(ranks_.size()) == n, "DeviceMesh: shape ", ShapeStr(shape_), " holds ", n,
               " ranks but ", ranks_.size(), " ranks were given (world size ", ranks_.size(), ") in ", what);
  std::set<int> unique;
  for (int r : ranks_) {
    TESSEL_CHECK(r >= 0, "DeviceMesh: negative rank ", r, " in ", what);
    TESSEL_CHECK(unique.insert(r).second, "DeviceMesh: rank ", r, " appears twice in ", what);
  }
}

int64_t MeshTopology::size(int axis) const {
  TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, axis >= 0 && axis < ndim(), "DeviceMesh::size: axis ", axis,
                    " out of range for ", ShortString());
  return shape_[static_cast<size_t>(axis)];
}

const std::string& MeshTopology::axis_name(int axis) const {
  TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, axis >= 0 && axis < ndim(), "DeviceMesh::axis_name: axis ", axis,
                    " out of range for ", ShortString());
  return axis_names_[static_cast<size_t>(axis)];
}

std::optional<int> MeshTopology::FindAxis(std::string_view name) const {
  for (size_t a = 0; a < axis_names_.size(); ++a) {
    if (axis_names_[a] == name) return static_cast<int>(a);
  }
  return std::nullopt;
}

int MeshTopology::AxisIndex(std::string_view name) const {
  std::optional<int> a = FindAxis(name);
  TESSEL_CHECK(a.has_value(), "DeviceMesh: unknown axis '", name, "'; the mesh has axes ", NamesStr(axis_names_),
               " (", ToString(), ")");
  return *a;
}

int64_t MeshTopology::Stride(int axis) const {
  int64_t s = 1;
  for (int a = ndim() - 1; a > axis; --a) s *= shape_[static_cast<size_t>(a)];
  return s;
}

std::optional<std::vector<int64_t>> MeshTopology::CoordinateOf(int global_rank) const {
  auto it = std::find(ranks_.begin(), ranks_.end(), global_rank);
  if (it == ranks_.end()) return std::nullopt;
  int64_t flat = it - ranks_.begin();
  std::vector<int64_t> coord(shape_.size());
  for (int a = ndim() - 1; a >= 0; --a) {
    coord[static_cast<size_t>(a)] = flat % shape_[static_cast<size_t>(a)];
    flat /= shape_[static_cast<size_t>(a)];
  }
  return coord;
}

int MeshTopology::RankAt(std::span<const int64_t> coordinate) const {
  TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, static_cast<int>(coordinate.size()) == ndim(),
                    "DeviceMesh::RankAt: coordinate ", ShapeStr(coordinate), " for ", ShortString());
  int64_t flat = 0;
  for (int a = 0; a < ndim(); ++a) {
    const int64_t c = coordinate[static_cast<size_t>(a)];
    TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, c >= 0 && c < shape_[static_cast<size_t>(a)],
                      "DeviceMesh::RankAt: coordinate ", ShapeStr(coordinate), " out of range for ", ShortString());
    flat = flat * shape_[static_cast<size_t>(a)] + c;
  }
  return ranks_[static_cast<size_t>(flat)];
}

std::vector<int> MeshTopology::AxisGroupRanks(int axis, std::span<const int64_t> coordinate) const {
  std::vector<int64_t> c(coordinate.begin(), coordinate.end());
  std::vector<int> out;
  for (int64_t i = 0; i < size(axis); ++i) {
    c[static_cast<size_t>(axis)] = i;
    out.push_back(RankAt(c));
  }
  return out;
}

std::vector<std::vector<int>> MeshTopology::GroupsOver(std::span<const int> axes) const {
  std::vector<bool> in_group(shape_.size(), false);
  for (int a : axes) in_group[static_cast<size_t>(a)] = true;
  std::vector<int> others;
  for (int a = 0; a < ndim(); ++a) {
    if (!in_group[static_cast<size_t>(a)]) others.push_back(a);
  }
  // Enumerate coordinates of `others` (row-major), then of `axes` (row-major) inside each group.
  auto for_each_coord = [&](std::span<const int> ax, std::vector<int64_t>& coord, const auto& fn) {
    std::function<void(size_t)> rec = [&](size_t k) {
      if (k == ax.size()) return fn();
      for (int64_t i = 0; i < shape_[static_cast<size_t>(ax[k])]; ++i) {
        coord[static_cast<size_t>(ax[k])] = i;
        rec(k + 1);
      }
    };
    rec(0);
  };
  std::vector<std::vector<int>> groups;
  std::vector<int64_t> coord(shape_.size(), 0);
  for_each_coord(others, coord, [&] {
    std::vector<int> g;
    for_each_coord(axes, coord, [&] { g.push_back(RankAt(coord)); });
    groups.push_back(std::move(g));
  });
  return groups;
}

std::vector<int> MeshTopology::AxesOf(std::span<const std::string> names) const {
  std::vector<int> axes;
  for (const std::string& n : names) {
    const int a = AxisIndex(n);
    TESSEL_CHECK(axes.empty() || a > axes.back(), "DeviceMesh: axes ", NamesStr(names),
                 " must be distinct and in mesh order ", NamesStr(axis_names_));
    axes.push_back(a);
  }
  TESSEL_CHECK(!axes.empty(), "DeviceMesh: no axis names given for ", ShortString());
  return axes;
}

MeshTopology MeshTopology::Slice(std::span<const int> axes, std::span<const int64_t> coordinate) const {
  std::vector<int64_t> shape;
  std::vector<std::string> names;
  for (int a : axes) {
    shape.push_back(size(a));
    names.push_back(axis_names_[static_cast<size_t>(a)]);
  }
  std::vector<int64_t> c(coordinate.begin(), coordinate.end());
  std::vector<int> ranks;
  std::function<void(size_t)> rec = [&](size_t k) {
    if (k == axes.size()) return ranks.push_back(RankAt(c));
    for (int64_t i = 0; i < size(axes[k]); ++i) {
      c[static_cast<size_t>(axes[k])] = i;
      rec(k + 1);
    }
  };
  rec(0);
  return MeshTopology(std::move(shape), std::move(names), std::move(ranks));
}

MeshTopology MeshTopology::Flatten(std::span<const int> axes, std::span<const int64_t> coordinate,
                                   std::string name) const {
  MeshTopology s = Slice(axes, coordinate);
  return MeshTopology({s.numel()}, {std::move(name)}, s.ranks());
}

std::string MeshTopology::Format() const {
  std::string s = Str("DeviceMesh(shape=", ShapeStr(shape_), ", axes=", NamesStr(axis_names_), ", ranks=");
  NestedRanks(s, shape_, ranks_, 0, 0, numel());
  return s + ")";
}

std::string MeshTopology::ShortString() const {
  std::string s = "(";
  for (size_t a = 0; a < shape_.size(); ++a) s += Str(a ? ", " : "", axis_names_[a], "=", shape_[a]);
  return s + ")";
}

size_t MeshTopology::Hash() const {
  size_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](size_t v) { h = (h ^ v) * 0x100000001b3ull; };
  for (int64_t s : shape_) mix(std::hash<int64_t>()(s));
  for (const std::string& n : axis_names_) mix(std::hash<std::string>()(n));
  for (int r : ranks_) mix(std::hash<int>()(r));
  return h;
}

std::ostream& operator<<(std::ostream& os, const MeshTopology& t) { return os << t.ToString(); }

}  // namespace tessel::dtensor
