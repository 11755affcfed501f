// dtensor/dtensor.cc — DTensor handle, DistributeTensor, FromLocal (with run_check), ToLocal, FullTensor.
#include "dtensor/dtensor.h"

#include <algorithm>
#include <cstring>

// Header-only XXH3 (run_check's fingerprint of the caller's layout arguments).
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/base/error.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"
#include "dtensor/dtensor_impl.h"
#include "dtensor/internal/backward_node.h"
#include "dtensor/internal/dense.h"
#include "dtensor/layout.h"
#include "dtensor/redistribute.h"

namespace tessel::dtensor {
namespace {

constexpr int64_t kMaxCheckedDims = 16;

// Shard(-1) -> Shard(ndim - 1), like PyTorch's user-facing APIs; out-of-range dims stay for Verify.
std::vector<Placement> NormalizePlacements(std::vector<Placement> placements, int64_t ndim) {
  for (Placement& p : placements) {
    if (Shard* s = std::get_if<Shard>(&p); s != nullptr && s->dim < 0 && s->dim >= -ndim) s->dim += ndim;
  }
  return placements;
}

// from_local's / to_local's grad_placements: Shard(-1) normalized, one placement per mesh axis (kInvalidArgument
// naming the mesh otherwise).
std::optional<std::vector<Placement>> CheckedGradPlacements(std::optional<std::vector<Placement>> gp, int64_t ndim,
                                                            const DeviceMesh& mesh, const char* op) {
  if (!gp) return gp;
  gp = NormalizePlacements(std::move(*gp), ndim);
  TESSEL_CHECK(static_cast<int>(gp->size()) == mesh.ndim(), op, ": grad_placements ", PlacementsToString(*gp),
               " has ", gp->size(), " entries for a ", mesh.ndim(), "-D mesh ", mesh.ToString());
  return gp;
}

// Broadcasts `tensor` of global rank `src_rank` to every rank of the mesh: one broadcast per axis, each
// from the coordinate src_rank has on that axis (after axis a, every rank that agrees with src_rank on
// the axes after a holds the data).
Tensor BroadcastOverMesh(const Tensor& tensor, const DeviceMesh& mesh, int src_rank) {
  std::optional<std::vector<int64_t>> src = mesh.topology().CoordinateOf(src_rank);
  TESSEL_CHECK(src.has_value(), "DistributeTensor: src_rank ", src_rank, " is not in ", mesh.ToString());
  Tensor buf = internal::CopyOf(tensor);
  for (int a = 0; a < mesh.ndim(); ++a) {
    mesh.axis_group(a)->Broadcast(buf, static_cast<int>((*src)[static_cast<size_t>(a)]))->Wait();
  }
  return buf;
}

// 64-bit fingerprint of dtype, shape and bytes (splitmix64-style mixing of 8-byte words).
int64_t Fingerprint(const Tensor& tensor) {
  const Tensor t = tensor.is_contiguous() ? tensor : internal::CopyOf(tensor);
  auto mix = [](uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    return (h ^ (h >> 27)) * 0x94d049bb133111ebull;
  };
  uint64_t h = mix(0, static_cast<uint64_t>(t.dtype()));
  for (int64_t s : t.sizes()) h = mix(h, static_cast<uint64_t>(s));
  const int64_t n = t.numel() * ElementSize(t.dtype());
  const auto* p = static_cast<const unsigned char*>(n > 0 ? t.raw_data() : nullptr);
  for (int64_t i = 0; i < n; i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, p + i, static_cast<size_t>(std::min<int64_t>(8, n - i)));
    h = mix(h, w);
  }
  return static_cast<int64_t>(h);
}

// The source's coordinate: src_data_rank's, or all zeros.
std::vector<int64_t> SourceCoordinate(const DeviceMesh& mesh, std::optional<int> src_data_rank) {
  if (!src_data_rank) return std::vector<int64_t>(static_cast<size_t>(mesh.ndim()), 0);
  std::optional<std::vector<int64_t>> c = mesh.topology().CoordinateOf(*src_data_rank);
  TESSEL_CHECK(c.has_value(), "DistributeTensor: src_data_rank ", *src_data_rank, " is not in ", mesh.ToString());
  return *c;
}

// Checked mode: every rank's fingerprint, gathered over the mesh (innermost axis first, so the result is
// in flat-coordinate order), compared with the source's; the same error on every rank.
void CheckReplicasAgree(const Tensor& tensor, const DeviceMesh& mesh, const std::vector<Placement>& placements,
                        std::optional<int> src_data_rank) {
  const std::vector<int64_t> src = SourceCoordinate(mesh, src_data_rank);
  Tensor cur = FromVector<int64_t>({Fingerprint(tensor)}, {1});
  for (int a = mesh.ndim() - 1; a >= 0; --a) {
    Tensor out = Empty({mesh.size(a) * cur.size(0)}, DType::kInt64);
    mesh.axis_group(a)->AllGather(out, cur)->Wait();
    cur = out;
  }
  const std::vector<int64_t> prints = cur.ToVector<int64_t>();
  const std::vector<int>& ranks = mesh.topology().ranks();
  int64_t flat = 0;  // row-major index of the source's coordinate
  for (int a = 0; a < mesh.ndim(); ++a) flat = flat * mesh.size(a) + src[static_cast<size_t>(a)];
  const int64_t want = prints[static_cast<size_t>(flat)];
  std::string differ;
  for (size_t i = 0; i < prints.size(); ++i) {
    if (prints[i] != want) differ += Str(differ.empty() ? "" : ", ", ranks[i]);
  }
  TESSEL_CHECK(differ.empty(), "DistributeTensor(check): the tensor of shape ", ShapeStr(tensor.sizes()),
               " placed as ", PlacementsToString(placements), " on ", mesh.ToString(), " differs on rank(s) [",
               differ, "] from rank ", ranks[static_cast<size_t>(flat)],
               "'s (fingerprints differ); every rank must pass the same ",
               "tensor. HINT: draw it from a Generator with the same seed on every rank, or use the default ",
               "ReplicaSource::kBroadcast");
}

// kBroadcast: this rank's piece over each Replicate axis from the source's coordinate there.
void BroadcastReplicas(const Tensor& piece, const DeviceMesh& mesh, const std::vector<Placement>& placements,
                       std::optional<int> src_data_rank) {
  const std::vector<int64_t> src = SourceCoordinate(mesh, src_data_rank);
  for (int a = 0; a < mesh.ndim(); ++a) {
    if (!IsReplicate(placements[static_cast<size_t>(a)]) || mesh.size(a) == 1) continue;
    mesh.axis_group(a)->Broadcast(piece, static_cast<int>(src[static_cast<size_t>(a)]))->Wait();
  }
}

// The spec the gradient of a local piece is taken in (to_local / from_local): `grad_placements`, default
// the forward's with Partial read as Replicate. Partial axes hold no place in a shard order, so the forward's
// order stays valid for the default and for the forward's own placements.
DTensorSpec LocalGradSpec(const DTensorSpec& forward, const std::optional<std::vector<Placement>>& grad_placements,
                          DType dtype) {
  std::optional<ShardOrder> order = forward.shard_order();
  if (grad_placements && *grad_placements != forward.placements()) order.reset();
  return DTensorSpec(forward.mesh_ptr(), grad_placements.value_or(LocalGradPlacements(forward.placements())),
                     forward.shape(), forward.strides(), dtype, std::move(order));
}

Tensor GradToLocal(const Tensor& grad, const DTensorSpec& forward,
                   const std::optional<std::vector<Placement>>& grad_placements) {
  const DTensorImpl& g = GetDTensorImpl(grad, "from_local backward");
  const DTensorSpec spec = LocalGradSpec(forward, grad_placements, grad.dtype());
  const Tensor moved = g.spec() == spec ? grad : Redistribute(grad, spec);
  return Detach(GetDTensorImpl(moved, "from_local backward").local());
}

// Every rank's [ndim, dtype, sizes...] in mesh (row-major) order: one all_gather per axis, innermost
// first, so rows end up ordered by flat coordinate.
// One rank's row of run_check's exchange: [ndim, dtype, layout, placements (one code per mesh axis), sizes
// (kMaxCheckedDims)]. The placements travel too (torch compares none of them): ranks that pass different ones
// would otherwise each build a DTensor of another global shape from the same pieces, silently. `layout` is a
// fingerprint of what else the caller fixed (shard order, global shape and strides).
constexpr size_t kRowPlacements = 3;
// The kind in the high 32 bits (1 Shard, 2 Replicate, 3 Partial; 0 none), the dim or op in the low 32 bits, so no
// two placements share a code (a Shard dim out of range, negative, included).
int64_t PlacementCode(const Placement& p) {
  auto code = [](int64_t kind, int64_t value) {
    return static_cast<int64_t>((static_cast<uint64_t>(kind) << 32) | static_cast<uint32_t>(value));
  };
  if (const Shard* s = std::get_if<Shard>(&p)) return code(1, s->dim);
  if (const Partial* q = std::get_if<Partial>(&p)) return code(3, static_cast<int64_t>(q->reduce_op));
  return code(2, 0);
}
Placement PlacementOfCode(int64_t code) {
  const int64_t value = static_cast<int32_t>(static_cast<uint32_t>(code & 0xffffffff));
  switch (code >> 32) {
    case 1: return Shard{value};
    case 3: return Partial{static_cast<comm::ReduceOp>(value)};
    default: return Replicate{};  // 2 (0, no placement on that axis: RowPlacements prints "none")
  }
}
int64_t LayoutFingerprint(const FromLocalOptions& options) {
  std::vector<int64_t> fixed;  // the ints the caller fixed, each list after a separator: the same on every rank
  if (options.shard_order) {
    for (const auto& axes : *options.shard_order) {
      fixed.push_back(-1);
      fixed.insert(fixed.end(), axes.begin(), axes.end());
    }
  }
  for (const std::optional<Shape>* given : {&options.shape, &options.stride}) {
    fixed.push_back(-2);
    if (*given) fixed.insert(fixed.end(), (*given)->begin(), (*given)->end());
  }
  return static_cast<int64_t>(XXH3_64bits(fixed.data(), fixed.size() * sizeof(int64_t)) & 0x7fffffffffffffffull);
}

std::vector<std::vector<int64_t>> GatherLocalInfo(const Tensor& local, const DeviceMesh& mesh,
                                                  const std::vector<Placement>& placements,
                                                  const FromLocalOptions& options) {
  TESSEL_CHECK(local.dim() <= kMaxCheckedDims, "FromLocal(run_check): at most ", kMaxCheckedDims,
               " dims are supported, got ", local.dim());
  const size_t axes = static_cast<size_t>(mesh.ndim()), width = kRowPlacements + axes + kMaxCheckedDims;
  std::vector<int64_t> mine(width, 0);
  mine[0] = local.dim();
  mine[1] = static_cast<int64_t>(local.dtype());
  mine[2] = LayoutFingerprint(options);
  for (size_t a = 0; a < axes; ++a) {
    mine[kRowPlacements + a] = a < placements.size() ? PlacementCode(placements[a]) : 0;  // (0: none)
  }
  for (int64_t d = 0; d < local.dim(); ++d) mine[kRowPlacements + axes + static_cast<size_t>(d)] = local.size(d);
  Tensor cur = FromVector(mine, {1, static_cast<int64_t>(width)});
  for (int a = mesh.ndim() - 1; a >= 0; --a) {
    Tensor out = Empty({mesh.size(a) * cur.size(0), static_cast<int64_t>(width)}, DType::kInt64);
    mesh.axis_group(a)->AllGather(out, cur)->Wait();
    cur = out;
  }
  const std::vector<int64_t> flat = cur.ToVector<int64_t>();
  std::vector<std::vector<int64_t>> rows;
  for (size_t r = 0; r < static_cast<size_t>(cur.size(0)); ++r) {
    const auto row = flat.begin() + static_cast<int64_t>(r * width);
    rows.emplace_back(row, row + static_cast<int64_t>(width));
  }
  return rows;
}

// The placements rank row `row` passed (run_check's exchange), for messages.
std::string RowPlacements(const std::vector<int64_t>& row, size_t axes) {
  std::string out = "[";
  for (size_t a = 0; a < axes; ++a) {
    const int64_t code = row[kRowPlacements + a];
    out += Str(a == 0 ? "" : ", ", code >> 32 == 0 ? "none" : ToString(PlacementOfCode(code)));
  }
  return out + "]";
}

// Global size of each dim from every rank's local sizes: the sum over the pieces of a sharded dim (the
// ranks at coordinate 0 on every axis that does not shard it), the common size of an unsharded one.
Shape DeriveGlobalShape(const std::vector<std::vector<int64_t>>& rows, const MeshTopology& mesh,
                        const ShardOrder& order, int64_t ndim) {
  Shape shape(static_cast<size_t>(ndim), 0);
  for (int64_t flat = 0; flat < mesh.numel(); ++flat) {
    const std::vector<int64_t> coord = *mesh.CoordinateOf(mesh.ranks()[static_cast<size_t>(flat)]);
    for (int64_t d = 0; d < ndim; ++d) {
      const std::vector<int>& axes = order[static_cast<size_t>(d)];
      bool counts = true;
      for (int a = 0; a < mesh.ndim(); ++a) {
        const bool shards_d = std::find(axes.begin(), axes.end(), a) != axes.end();
        if (!shards_d && coord[static_cast<size_t>(a)] != 0) counts = false;
      }
      const int64_t size = rows[static_cast<size_t>(flat)][kRowPlacements + static_cast<size_t>(mesh.ndim() + d)];
      if (counts) shape[static_cast<size_t>(d)] = axes.empty() ? size : shape[static_cast<size_t>(d)] + size;
    }
  }
  return shape;
}

// run_check: derive or confirm the global shape, then hold every rank's local shape against the layout.
// Every rank sees the same data, so every rank raises the same error.
Shape CheckLocalShapes(const Tensor& local, const DeviceMesh& mesh, const std::vector<Placement>& placements,
                       const FromLocalOptions& options) {
  const std::vector<std::vector<int64_t>> rows = GatherLocalInfo(local, mesh, placements, options);
  const MeshTopology& topo = mesh.topology();
  const size_t axes = static_cast<size_t>(mesh.ndim());
  for (size_t r = 1; r < rows.size(); ++r) {
    TESSEL_CHECK(rows[r][0] == rows[0][0] && rows[r][1] == rows[0][1], "FromLocal(run_check): rank ",
                 topo.ranks()[r], " passed a ", rows[r][0], "-d ", DTypeName(static_cast<DType>(rows[r][1])),
                 " local tensor but rank ", topo.ranks()[0], " passed a ", rows[0][0], "-d ",
                 DTypeName(static_cast<DType>(rows[0][1])), " one; placements ", PlacementsToString(placements),
                 " on ", mesh.ToString());
    TESSEL_CHECK(std::equal(rows[r].begin() + kRowPlacements, rows[r].begin() + kRowPlacements + axes,
                            rows[0].begin() + kRowPlacements),
                 "FromLocal(run_check): rank ", topo.ranks()[r], " passed placements ", RowPlacements(rows[r], axes),
                 " but rank ", topo.ranks()[0], " passed ", RowPlacements(rows[0], axes), " on ", mesh.ToString(),
                 "; every rank must pass the same placements (each would build a DTensor of another global shape)");
    TESSEL_CHECK(rows[r][2] == rows[0][2], "FromLocal(run_check): rank ", topo.ranks()[r], " and rank ",
                 topo.ranks()[0], " passed different shape, stride or shard order arguments; placements ",
                 PlacementsToString(placements), " on ", mesh.ToString());
  }
  const ShardOrder order = options.shard_order.value_or(DefaultShardOrder(placements, local.dim()));
  const Shape shape = options.shape.value_or(DeriveGlobalShape(rows, topo, order, local.dim()));
  DTensorSpec spec(mesh.topology_ptr(), placements, shape, local.dtype(), order);
  for (size_t r = 0; r < rows.size(); ++r) {
    const std::vector<int64_t> coord = *topo.CoordinateOf(topo.ranks()[r]);
    const Shape want = ComputeLocalShape(spec, coord);
    const auto sizes = rows[r].begin() + static_cast<int64_t>(kRowPlacements + axes);
    const Shape got(sizes, sizes + local.dim());
    TESSEL_CHECK(got == want, "FromLocal(run_check): rank ", topo.ranks()[r], " at coordinate ", ShapeStr(coord),
                 " has local shape ", ShapeStr(got), " but ", spec.ToString(), " needs ", ShapeStr(want),
                 "; local shapes are inconsistent across ranks");
  }
  return shape;
}

// run_check's second half, as torch's: on every Replicate axis the axis's rank 0 broadcasts its piece, so
// the replicas agree. In place when `local` is contiguous (torch writes the caller's tensor too; the DTensor
// keeps sharing its storage), else into a contiguous copy. Outside autograd: the gradient passes through.
Tensor BroadcastReplicas(const Tensor& local, const DeviceMesh& mesh, const std::vector<Placement>& placements) {
  Tensor piece = local;
  for (size_t a = 0; a < placements.size(); ++a) {
    if (!std::holds_alternative<Replicate>(placements[a]) || mesh.size(static_cast<int>(a)) == 1) continue;
    if (!piece.is_contiguous()) {
      Tensor copy = Empty(piece.sizes(), piece.dtype(), piece.device());
      CopyInto(copy, piece);
      piece = copy;
    }
    mesh.axis_group(static_cast<int>(a))->Broadcast(piece, /*root=*/0)->Wait();
  }
  return piece;
}

}  // namespace

Shape GlobalShapeOfLocals(const Tensor& local, const DeviceMesh& mesh, std::vector<Placement> placements) {
  TESSEL_CHECK(local.defined() && !local.is_distributed(), "GlobalShapeOfLocals: expected a dense local tensor");
  placements = NormalizePlacements(std::move(placements), local.dim());
  return CheckLocalShapes(local, mesh, placements, FromLocalOptions{});
}

DTensor::DTensor(Tensor t) : tensor_(std::move(t)) { GetDTensorImpl(tensor_, "DTensor"); }

const DTensorSpec& DTensor::spec() const { return GetDTensorImpl(tensor_, "DTensor::spec").spec(); }
const DeviceMesh& DTensor::mesh() const { return GetDTensorImpl(tensor_, "DTensor::mesh").mesh(); }
Shape DTensor::local_shape() const { return GetDTensorImpl(tensor_, "DTensor::local_shape").local().sizes(); }

DTensor DTensor::FromLocal(const Tensor& local, const DeviceMesh& mesh, std::vector<Placement> placements,
                           const FromLocalOptions& options) {
  TESSEL_CHECK(local.defined() && !local.is_distributed(), "FromLocal: expected a dense local tensor, got ",
               local.defined() ? local.impl()->KindName() : "an undefined tensor");
  placements = NormalizePlacements(std::move(placements), local.dim());
  Shape shape;
  Tensor piece = local;
  if (options.run_check) {
    shape = CheckLocalShapes(local, mesh, placements, options);
    piece = BroadcastReplicas(local, mesh, placements);
  } else if (options.shape) {
    shape = *options.shape;
  } else {
    shape = local.sizes();
    for (size_t a = 0; a < placements.size() && a < static_cast<size_t>(mesh.ndim()); ++a) {
      const Shard* s = std::get_if<Shard>(&placements[a]);
      if (s != nullptr && s->dim >= 0 && s->dim < local.dim()) shape[static_cast<size_t>(s->dim)] *= mesh.size(int(a));
    }
  }
  DTensorSpec spec(mesh.topology_ptr(), std::move(placements), shape,
                   options.stride.value_or(ContiguousStrides(shape)), local.dtype(), options.shard_order);
  std::optional<std::vector<Placement>> grad_placements =
      CheckedGradPlacements(options.grad_placements, local.dim(), mesh, "FromLocal");
  Tensor out = MakeDTensor(piece, spec, mesh);
  internal::RecordBackward("from_local", local, out, [spec, gp = std::move(grad_placements)](const Tensor& g) {
    return GradToLocal(g, spec, gp);
  });
  return DTensor(std::move(out));
}

Tensor DTensor::ToLocal(std::optional<std::vector<Placement>> grad_placements) const {
  const DTensorImpl& d = GetDTensorImpl(tensor_, "ToLocal");
  grad_placements = CheckedGradPlacements(std::move(grad_placements), static_cast<int64_t>(d.spec().shape().size()),
                                          d.mesh(), "to_local");
  Tensor out = Detach(d.local());
  internal::RecordBackward("to_local", tensor_, out,
                           [spec = d.spec(), mesh = d.mesh(), gp = std::move(grad_placements)](const Tensor& g) {
                             return MakeDTensor(g, LocalGradSpec(spec, gp, g.dtype()), mesh);
                           });
  return out;
}

Tensor DTensor::FullTensor(std::optional<std::vector<Placement>> grad_placements) const {
  std::vector<Placement> replicated(static_cast<size_t>(mesh().ndim()), Replicate{});
  return Redistribute(mesh(), std::move(replicated)).ToLocal(std::move(grad_placements));
}

DTensor DTensor::Redistribute(const DeviceMesh& mesh, std::vector<Placement> placements,
                              std::optional<ShardOrder> shard_order, const RedistributeOptions& options) const {
  TESSEL_CHECK(mesh == this->mesh(), "redistribute: target mesh ", mesh.ToString(), " differs from the tensor's ",
               this->mesh().ToString(), " (redistributing across meshes is not supported)");
  DTensorSpec dst = spec().WithPlacements(NormalizePlacements(std::move(placements), shape().size()),
                                          std::move(shard_order));
  return DTensor(dtensor::Redistribute(tensor_, dst, options));
}

DTensor& DTensor::set_requires_grad(bool requires_grad) {
  tensor_.set_requires_grad(requires_grad);
  return *this;
}

DTensor DTensor::grad() const {
  Tensor g = tensor_.grad();
  return g.defined() ? DTensor(std::move(g)) : DTensor();
}

std::string DTensor::ToString() const {
  if (!defined()) return "DTensor(undefined)";
  return Str("DTensor(local=", ShapeStr(local_shape()), ", spec=", spec().ToString(), ")");
}

std::ostream& operator<<(std::ostream& os, const DTensor& t) { return os << t.ToString(); }

DTensor DistributeTensor(const Tensor& tensor, const DeviceMesh& mesh, std::vector<Placement> placements,
                         const DistributeOptions& options) {
  TESSEL_CHECK(tensor.defined() && !tensor.is_distributed(), "DistributeTensor: expected a dense tensor, got ",
               tensor.defined() ? tensor.impl()->KindName() : "an undefined tensor");
  placements = NormalizePlacements(std::move(placements), tensor.dim());
  for (size_t a = 0; a < placements.size(); ++a) {
    TESSEL_CHECK(!IsPartial(placements[a]), "DistributeTensor: placements ", PlacementsToString(placements),
                 " places ", ToString(placements[a]), " on mesh axis ", a,
                 "; a full tensor can only be sharded or replicated (use DTensor::FromLocal for partial values)");
  }
  const std::vector<Placement> placed = placements;
  DTensorSpec spec(mesh.topology_ptr(), std::move(placements), tensor.sizes(), tensor.dtype(), options.shard_order);
  if (tensor.impl()->storage().deferred_init()) {
    // Built under tessel.device("meta") ([Note: deferred init] in core/tensor/factory.h): no values to move
    // or check; the piece stays unwritten and meta until to_empty, as torch's meta DTensor.
    const Tensor piece = Empty(ComputeLocalShape(spec, mesh.coordinate()), tensor.dtype(), tensor.device());
    piece.impl()->storage().set_deferred_init(true);
    DTensor out(MakeDTensor(piece, std::move(spec), mesh));
    if (tensor.requires_grad()) out.set_requires_grad(true);
    return out;
  }
  if (!options.src_rank && options.replicas == ReplicaSource::kCheck) {
    CheckReplicasAgree(tensor, mesh, placed, options.src_data_rank);
  }
  const Tensor full = options.src_rank ? BroadcastOverMesh(tensor, mesh, *options.src_rank) : tensor;
  Tensor view = full;
  const std::vector<DimInterval> box = GlobalIntervals(spec, mesh.coordinate());
  for (size_t d = 0; d < box.size(); ++d) view = internal::Narrow(view, int64_t(d), box[d].offset, box[d].length);
  const Tensor piece = internal::CopyOf(view);
  if (!options.src_rank && options.replicas == ReplicaSource::kBroadcast) {
    BroadcastReplicas(piece, mesh, placed, options.src_data_rank);
  }
  DTensor out(MakeDTensor(piece, std::move(spec), mesh));
  if (tensor.requires_grad()) out.set_requires_grad(true);
  return out;
}

}  // namespace tessel::dtensor
