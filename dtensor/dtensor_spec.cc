// dtensor/dtensor_spec.cc — DTensorSpec construction, Verify() and printing.
#include "dtensor/dtensor_spec.h"

#include <algorithm>
#include <functional>

#include "core/base/error.h"

namespace tessel::dtensor {
namespace {

std::string Describe(const std::shared_ptr<const MeshTopology>& mesh, const std::vector<Placement>& placements,
                     const Shape& shape) {
  return Str("placements ", PlacementsToString(placements), " on mesh ", mesh ? mesh->ShortString() : "<null>",
             " for a tensor of shape ", ShapeStr(shape));
}

}  // namespace

DTensorSpec::DTensorSpec(std::shared_ptr<const MeshTopology> mesh, std::vector<Placement> placements, Shape shape,
                         DType dtype, std::optional<ShardOrder> order)
    : DTensorSpec(std::move(mesh), std::move(placements), shape, ContiguousStrides(shape), dtype, std::move(order)) {}

DTensorSpec::DTensorSpec(std::shared_ptr<const MeshTopology> mesh, std::vector<Placement> placements, Shape shape,
                         Shape strides, DType dtype, std::optional<ShardOrder> order)
    : mesh_(std::move(mesh)),
      placements_(std::move(placements)),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      dtype_(dtype) {
  if (order.has_value()) {
    order_ = std::move(*order);
  } else {
    // Build the default order leniently; Verify() reports bad Shard dims with context.
    order_.assign(shape_.size(), {});
    for (size_t a = 0; a < placements_.size(); ++a) {
      const Shard* s = std::get_if<Shard>(&placements_[a]);
      if (s != nullptr && s->dim >= 0 && s->dim < ndim()) order_[static_cast<size_t>(s->dim)].push_back(int(a));
    }
  }
  Verify();
}

void DTensorSpec::Verify() const {
  TESSEL_CHECK(mesh_ != nullptr, "DTensorSpec: no mesh for ", Describe(mesh_, placements_, shape_));
  TESSEL_CHECK(static_cast<int>(placements_.size()) == mesh_->ndim(), "DTensorSpec: ", placements_.size(),
               " placements for a ", mesh_->ndim(), "-d mesh: ", Describe(mesh_, placements_, shape_),
               "; give one placement per mesh axis");
  for (size_t a = 0; a < placements_.size(); ++a) {
    if (const Shard* s = std::get_if<Shard>(&placements_[a])) {
      TESSEL_CHECK(s->dim >= 0 && s->dim < ndim(), "DTensorSpec: ", s->ToString(), " on axis '",
                   mesh_->axis_name(static_cast<int>(a)), "' needs 0 <= dim < ndim = ", ndim(), ": ",
                   Describe(mesh_, placements_, shape_));
    } else if (const Partial* p = std::get_if<Partial>(&placements_[a])) {
      TESSEL_CHECK(IsSupportedPartialOp(p->reduce_op), "DTensorSpec: ", p->ToString(),
                   " is not supported (sum, avg, max, min): ", Describe(mesh_, placements_, shape_));
    }
  }
  TESSEL_CHECK(strides_.size() == shape_.size(), "DTensorSpec: strides ", ShapeStr(strides_), " for shape ",
               ShapeStr(shape_));
  for (int64_t s : shape_) TESSEL_CHECK(s >= 0, "DTensorSpec: negative size in shape ", ShapeStr(shape_));
  TESSEL_CHECK(static_cast<int64_t>(order_.size()) == ndim(), "DTensorSpec: shard order ", ShardOrderToString(order_),
               " has ", order_.size(), " entries; expected one per tensor dim (", ndim(), "): ",
               Describe(mesh_, placements_, shape_));
  std::vector<int> seen(placements_.size(), 0);
  for (size_t d = 0; d < order_.size(); ++d) {
    for (int a : order_[d]) {
      TESSEL_CHECK(a >= 0 && a < mesh_->ndim() && IsShardOn(placements_[static_cast<size_t>(a)], int64_t(d)),
                   "DTensorSpec: shard order ", ShardOrderToString(order_), " lists axis ", a, " for dim ", d,
                   " but that axis is not Shard(", d, "): ", Describe(mesh_, placements_, shape_));
      ++seen[static_cast<size_t>(a)];
    }
  }
  for (size_t a = 0; a < placements_.size(); ++a) {
    const int want = IsShard(placements_[a]) ? 1 : 0;
    TESSEL_CHECK(seen[a] == want, "DTensorSpec: shard order ", ShardOrderToString(order_), " lists axis ", a, " ",
                 seen[a], " times; ", dtensor::ToString(placements_[a]), " needs ", want, ": ",
                 Describe(mesh_, placements_, shape_));
  }
}

bool DTensorSpec::has_partial() const { return std::any_of(placements_.begin(), placements_.end(), IsPartial); }

bool DTensorSpec::is_replicated() const {
  return std::all_of(placements_.begin(), placements_.end(), IsReplicate);
}

int64_t DTensorSpec::num_shards(int64_t dim) const {
  int64_t n = 1;
  for (int a : order_[static_cast<size_t>(dim)]) n *= mesh_->size(a);
  return n;
}

DTensorSpec DTensorSpec::WithPlacements(std::vector<Placement> placements, std::optional<ShardOrder> order) const {
  return DTensorSpec(mesh_, std::move(placements), shape_, strides_, dtype_, std::move(order));
}

std::string DTensorSpec::ToString() const {
  std::string s = Str("DTensorSpec(mesh=", mesh_->ShortString(), ", placements=", PlacementsToString(placements_));
  if (!IsDefaultShardOrder(order_)) s += ", order=" + ShardOrderToString(order_);
  s += ", shape=" + ShapeStr(shape_);
  if (strides_ != ContiguousStrides(shape_)) s += ", strides=" + ShapeStr(strides_);
  return s + Str(", dtype=", DTypeName(dtype_), ")");
}

size_t DTensorSpec::Hash() const {
  size_t h = mesh_->Hash();
  auto mix = [&h](size_t v) { h = (h ^ v) * 0x100000001b3ull; };
  for (const Placement& p : placements_) mix(std::hash<Placement>()(p));
  for (const std::vector<int>& axes : order_) {
    mix(0x9e37u);
    for (int a : axes) mix(std::hash<int>()(a));
  }
  for (int64_t v : shape_) mix(std::hash<int64_t>()(v));
  for (int64_t v : strides_) mix(std::hash<int64_t>()(v));
  mix(static_cast<size_t>(dtype_));
  return h;
}

bool operator==(const DTensorSpec& a, const DTensorSpec& b) {
  return (a.mesh_ == b.mesh_ || *a.mesh_ == *b.mesh_) && a.placements_ == b.placements_ && a.order_ == b.order_ &&
         a.shape_ == b.shape_ && a.strides_ == b.strides_ && a.dtype_ == b.dtype_;
}

std::ostream& operator<<(std::ostream& os, const DTensorSpec& spec) { return os << spec.ToString(); }

}  // namespace tessel::dtensor
