// checkpoint/local_shard.cc — dense tensors and DTensors as (local data, global box).
#include "checkpoint/local_shard.h"

#include "core/base/error.h"
#include "core/tensor/tensor_impl.h"
#include "dtensor/dtensor_impl.h"
#include "dtensor/layout.h"

namespace tessel::checkpoint {

LocalShard DescribeLocalShard(std::string_view op, const std::string& fqn, const Tensor& t) {
  TESSEL_CHECK(t.defined(), op, ": state dict entry '", fqn, "' is an undefined tensor");
  LocalShard s;
  s.dtype = t.dtype();
  s.global_shape = t.sizes();
  const dtensor::DTensorImpl* d = dtensor::AsDTensorImpl(t);
  if (d == nullptr) {
    s.local = t;
    s.box = FullBox(t.sizes());
    s.layout = "dense";
    return s;
  }
  const dtensor::DTensorSpec& spec = d->spec();
  TESSEL_CHECK(!spec.has_partial(), op, ": '", fqn, "' is a DTensor with placements ",
               dtensor::PlacementsToString(spec.placements()), " on ", d->mesh().ToString(),
               "; a Partial value is a pending reduction, not the tensor. HINT: Redistribute it to Replicate or "
               "Shard before saving or loading");
  s.local = d->local();
  s.is_distributed = true;
  for (const dtensor::DimInterval& iv : dtensor::GlobalIntervals(spec, d->mesh().coordinate())) {
    // An empty interval reports offset = dim size (PyTorch's convention); keep it inside the shape.
    s.box.offsets.push_back(iv.length == 0 ? 0 : iv.offset);
    s.box.sizes.push_back(iv.length);
  }
  s.layout = spec.mesh().ShortString() + " " + dtensor::PlacementsToString(spec.placements());
  if (!dtensor::IsDefaultShardOrder(spec.shard_order())) {
    s.layout += " order=" + dtensor::ShardOrderToString(spec.shard_order());
  }
  TESSEL_INTERNAL_ASSERT(s.local.sizes() == s.box.sizes, op, ": local shape ", ShapeStr(s.local.sizes()), " of '", fqn,
                         "' does not match its box ", BoxToString(s.box));
  return s;
}

Tensor LocalRegionView(const LocalShard& shard, const Box& region) {
  const Tensor& t = shard.local;
  int64_t offset = t.storage_offset();
  for (size_t d = 0; d < region.offsets.size(); ++d) {
    offset += (region.offsets[d] - shard.box.offsets[d]) * t.stride(static_cast<int64_t>(d));
  }
  return MakeView(t, region.sizes, t.strides(), offset);
}

}  // namespace tessel::checkpoint
