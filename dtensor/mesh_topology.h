// dtensor/mesh_topology.h — MeshTopology: the pure part of a DeviceMesh (shape, axis names, the global
// rank at every coordinate). No process groups, so every rule about coordinates and sub-meshes is
// testable without ranks; DeviceMesh (device_mesh.h) holds one and adds a ProcessGroup per axis.
//
// Invariant (Verify(), run by every constructor): ndim >= 1; every axis size >= 1; axis names are
// non-empty and unique; ranks.size() == product of the shape; ranks are distinct and >= 0. Ranks are
// stored row-major: the rank at coordinate c is ranks[sum_a c[a] * stride[a]].
//
// Example:
//   MeshTopology t = MeshTopology::Iota({2, 2}, {"dp", "tp"});
//   t.ToString();                       // "DeviceMesh(shape=[2, 2], axes=[dp, tp], ranks=[[0, 1], [2, 3]])"
//   t.AxisGroupRanks(1, {1, 0});        // {2, 3}: the "tp" group of rank 2
//   t.Slice({1}, {1, 0});               // 1-D mesh "tp" over ranks [2, 3]
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessel::dtensor {

class MeshTopology {
 public:
  // Throws kInvalidArgument (naming shape, names and ranks) when Verify() fails. Empty `axis_names`
  // means the default names "axis0", "axis1", ...
  MeshTopology(std::vector<int64_t> shape, std::vector<std::string> axis_names, std::vector<int> ranks);
  // Ranks 0 .. numel-1 in row-major order.
  static MeshTopology Iota(std::vector<int64_t> shape, std::vector<std::string> axis_names = {});

  int ndim() const { return static_cast<int>(shape_.size()); }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t size(int axis) const;
  int64_t numel() const { return static_cast<int64_t>(ranks_.size()); }
  const std::vector<std::string>& axis_names() const { return axis_names_; }
  // Whether the axes carry the default names (none were given: torch's mesh_dim_names None).
  bool has_default_axis_names() const;
  const std::string& axis_name(int axis) const;
  const std::vector<int>& ranks() const { return ranks_; }

  std::optional<int> FindAxis(std::string_view name) const;
  // Throws kInvalidArgument "unknown axis" naming the mesh.
  int AxisIndex(std::string_view name) const;

  // nullopt when `global_rank` is not in the mesh.
  std::optional<std::vector<int64_t>> CoordinateOf(int global_rank) const;
  // REQUIRES: coordinate.size() == ndim and each entry in range (checked, kOutOfRange).
  int RankAt(std::span<const int64_t> coordinate) const;
  // Ranks that share every coordinate of `coordinate` except along `axis`, in axis order.
  std::vector<int> AxisGroupRanks(int axis, std::span<const int64_t> coordinate) const;
  // Every group over `axes` (REQUIRES: ascending, distinct): one list per coordinate of the other axes
  // (row-major), each list row-major over `axes`. This is the order in which DeviceMesh creates groups,
  // so every rank issues the same NewGroup sequence.
  std::vector<std::vector<int>> GroupsOver(std::span<const int> axes) const;
  // The sub-mesh over `axes` (ascending, distinct) that contains `coordinate`.
  MeshTopology Slice(std::span<const int> axes, std::span<const int64_t> coordinate) const;
  // The 1-D mesh named `name` over the ranks of Slice(axes, coordinate), row-major.
  MeshTopology Flatten(std::span<const int> axes, std::span<const int64_t> coordinate, std::string name) const;
  // Axis indices of `names`; throws kInvalidArgument for an unknown or repeated name, or names out of
  // mesh order (PyTorch requires the same).
  std::vector<int> AxesOf(std::span<const std::string> names) const;

  // "DeviceMesh(shape=[2, 2], axes=[dp, tp], ranks=[[0, 1], [2, 3]])" (formatted once, at construction:
  // it names the mesh in every error and keys AdamW's per-mesh groups each step)
  const std::string& ToString() const { return text_; }
  // "(dp=2, tp=2)"
  std::string ShortString() const;

  friend bool operator==(const MeshTopology& a, const MeshTopology& b) {
    return a.shape_ == b.shape_ && a.axis_names_ == b.axis_names_ && a.ranks_ == b.ranks_;
  }
  size_t Hash() const;

 private:
  // Checks: ndim >= 1; sizes >= 1; names non-empty, unique, one per axis; ranks.size() == product of
  // the shape; ranks distinct and >= 0.
  void Verify() const;
  int64_t Stride(int axis) const;
  std::string Format() const;

  std::vector<int64_t> shape_;
  std::vector<std::string> axis_names_;
  std::vector<int> ranks_;
  std::string text_;  // Format(), kept
};

std::ostream& operator<<(std::ostream& os, const MeshTopology& t);

}  // namespace tessel::dtensor
