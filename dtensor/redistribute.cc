// dtensor/redistribute.cc — one function per step kind, the step loop, and the autograd wiring.
#include "dtensor/redistribute.h"

#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "comm/comm_thread.h"
#include "core/base/error.h"
#include "core/memory/allocator.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"
#include "dtensor/dtensor_impl.h"
#include "dtensor/internal/backward_node.h"
#include "dtensor/internal/dense.h"
#include "dtensor/layout.h"

namespace tessel::dtensor {
namespace {

using internal::ContiguousView;
using internal::CopyOf;
using internal::MoveToFront;
using internal::Narrow;
using internal::WithSize;

// Everything one step needs to know about this rank.
struct StepContext {
  const DeviceMesh& mesh;
  const DTensorSpec& src;
  const ShardingState& state;  // before the step
  const RedistributeStep& step;
  int64_t world() const { return mesh.size(step.axis); }
  int64_t coord() const { return mesh.coordinate()[static_cast<size_t>(step.axis)]; }
  const comm::ProcessGroupPtr& group() const { return mesh.axis_group(step.axis); }
  // Size of `dim` on this rank once `step.axis` (the last axis of dim's order) no longer shards it.
  int64_t ReleasedExtent(int64_t dim) const {
    const std::vector<int>& axes = state.order[static_cast<size_t>(dim)];
    return DimExtent(src.shape()[static_cast<size_t>(dim)], std::span<const int>(axes).first(axes.size() - 1),
                     mesh.shape(), mesh.coordinate())
        .length;
  }
};

// ---- one function per step kind --------------------------------------------------------------------

Tensor AllGather(const StepContext& c, const Tensor& local) {
  const int64_t dim = c.step.src_dim, w = c.world();
  const int64_t extent = c.ReleasedExtent(dim), full = (extent + w - 1) / w;
  if (dim == 0 && extent % w == 0 && local.is_contiguous()) {  // even pieces along dim 0: no staging copy
    Tensor out = Empty(WithSize(local.sizes(), 0, w * full), local.dtype(), local.device());
    c.group()->AllGather(out, local)->Wait();
    return out;
  }
  if (dim != 0 && extent % w == 0) {
    // Even pieces along another dim: gather the pieces in their own layout (piece k is rows [k·n0,
    // (k+1)·n0) of `out`, n0 = local.size(0)), then one strided copy puts each at k·full along `dim`.
    // Every rank of the group takes this path (the extent is common to them), so the wire layout never
    // depends on a rank's strides; a strided local is made contiguous first (the planner assumes the
    // contiguous pieces of a model's activations: t pieces of comm buffer, not t + 1).
    Tensor out, piece = local;
    {
      memory::LedgerScope scope(memory::Ledger::kCommBuffers);
      if (!local.is_contiguous()) piece = CopyOf(local);
      out = Empty(WithSize(local.sizes(), 0, w * local.size(0)), local.dtype(), local.device());
    }
    c.group()->AllGather(out, piece)->Wait();
    Tensor result = Empty(WithSize(local.sizes(), dim, extent), local.dtype(), local.device());
    const int64_t n0 = local.size(0);
    for (int64_t k = 0; k < w; ++k) CopyInto(Narrow(result, dim, k * full, full), Narrow(out, 0, k * n0, n0));
    return result;
  }
  // Uneven pieces, or a strided local along dim 0: stage the padded piece dim-first, gather, copy out.
  const Shape gathered = WithSize(MoveToFront(local, dim).sizes(), 0, w * full);
  Tensor in, out;
  {
    memory::LedgerScope scope(memory::Ledger::kCommBuffers);
    in = local.size(dim) < full ? Zeros(WithSize(gathered, 0, full), local.dtype(), local.device())
                                : Empty(WithSize(gathered, 0, full), local.dtype(), local.device());
    out = Empty(gathered, local.dtype(), local.device());
  }
  CopyInto(Narrow(in, 0, 0, local.size(dim)), MoveToFront(local, dim));
  c.group()->AllGather(out, in)->Wait();
  Tensor result = Empty(WithSize(local.sizes(), dim, extent), local.dtype(), local.device());
  const Tensor result_front = MoveToFront(result, dim);
  for (int64_t k = 0; k < w; ++k) {
    const ChunkPiece p = ChunkPieceOf(extent, w, k);
    if (p.size > 0) CopyInto(Narrow(result_front, 0, p.offset, p.size), Narrow(out, 0, k * full, p.size));
  }
  return result;
}

Tensor ReduceScatter(const StepContext& c, const Tensor& local) {
  const int64_t dim = c.step.dst_dim, w = c.world(), extent = local.size(dim);
  const int64_t full = (extent + w - 1) / w;
  if (dim == 0 && extent % w == 0 && local.is_contiguous()) {  // even pieces along dim 0
    Tensor out = Empty(WithSize(local.sizes(), 0, full), local.dtype(), local.device());
    c.group()->ReduceScatter(out, local, c.step.op)->Wait();
    return out;
  }
  if (dim != 0 && extent % w == 0) {
    // Even pieces along another dim: stage piece k of `dim` as rows [k·n0, (k+1)·n0) of `in` (n0 =
    // local.size(0)); the collective then writes this rank's reduced piece straight into the result.
    Tensor in;
    {
      memory::LedgerScope scope(memory::Ledger::kCommBuffers);
      in = Empty(WithSize(WithSize(local.sizes(), dim, full), 0, w * local.size(0)), local.dtype(), local.device());
    }
    const int64_t n0 = local.size(0);
    for (int64_t k = 0; k < w; ++k) CopyInto(Narrow(in, 0, k * n0, n0), Narrow(local, dim, k * full, full));
    Tensor result = Empty(WithSize(local.sizes(), dim, full), local.dtype(), local.device());
    c.group()->ReduceScatter(result, in, c.step.op)->Wait();
    return result;
  }
  // Uneven pieces, or a strided local along dim 0: stage the padded pieces dim-first, scatter, copy out.
  const ChunkPiece mine = ChunkPieceOf(extent, w, c.coord());
  const Tensor front = MoveToFront(local, dim);
  Tensor in, out;
  {
    memory::LedgerScope scope(memory::Ledger::kCommBuffers);
    const Shape padded = WithSize(front.sizes(), 0, w * full);
    in = extent % w != 0 ? Zeros(padded, local.dtype(), local.device()) : Empty(padded, local.dtype(), local.device());
    out = Empty(WithSize(front.sizes(), 0, full), local.dtype(), local.device());
  }
  for (int64_t k = 0; k < w; ++k) {
    const ChunkPiece p = ChunkPieceOf(extent, w, k);
    if (p.size > 0) CopyInto(Narrow(in, 0, k * full, p.size), Narrow(front, 0, p.offset, p.size));
  }
  c.group()->ReduceScatter(out, in, c.step.op)->Wait();
  Tensor result = Empty(WithSize(local.sizes(), dim, mine.size), local.dtype(), local.device());
  CopyInto(MoveToFront(result, dim), Narrow(out, 0, 0, mine.size));
  return result;
}

Tensor AllReduce(const StepContext& c, const Tensor& local) {
  Tensor out = CopyOf(local);  // never write into the source DTensor's local tensor
  c.group()->AllReduce(out, c.step.op)->Wait();
  return out;
}

// Dim i (src_dim) is gathered over the axis while dim j (dst_dim) is cut: peer k gets my piece k of j,
// and I get peer k's piece of i (its size depends on k when i is uneven). Buffers are flat, so the
// pieces travel exactly, without padding.
Tensor AllToAll(const StepContext& c, const Tensor& local) {
  const int64_t i = c.step.src_dim, j = c.step.dst_dim, w = c.world();
  const int64_t extent_i = c.ReleasedExtent(i), extent_j = local.size(j);
  const ChunkPiece mine_j = ChunkPieceOf(extent_j, w, c.coord());
  const int64_t rest = NumElements(WithSize(WithSize(local.sizes(), i, 1), j, 1));  // dims other than i, j
  std::vector<int64_t> send_splits, recv_splits;
  Tensor send, recv;
  int64_t recv_total = 0;
  for (int64_t k = 0; k < w; ++k) {
    send_splits.push_back(ChunkPieceOf(extent_j, w, k).size * local.size(i) * rest);
    recv_splits.push_back(mine_j.size * ChunkPieceOf(extent_i, w, k).size * rest);
    recv_total += recv_splits.back();
  }
  {
    memory::LedgerScope scope(memory::Ledger::kCommBuffers);
    send = Empty({local.numel()}, local.dtype(), local.device());
    recv = Empty({recv_total}, local.dtype(), local.device());
  }
  int64_t offset = 0;
  for (int64_t k = 0; k < w; ++k) {
    const ChunkPiece p = ChunkPieceOf(extent_j, w, k);
    CopyInto(ContiguousView(send, WithSize(local.sizes(), j, p.size), offset), Narrow(local, j, p.offset, p.size));
    offset += send_splits[static_cast<size_t>(k)];
  }
  c.group()->AllToAll(recv, send, recv_splits, send_splits)->Wait();
  Tensor result = Empty(WithSize(WithSize(local.sizes(), i, extent_i), j, mine_j.size), local.dtype(), local.device());
  offset = 0;
  for (int64_t k = 0; k < w; ++k) {
    const ChunkPiece p = ChunkPieceOf(extent_i, w, k);
    const Shape block = WithSize(result.sizes(), i, p.size);
    if (p.size > 0) CopyInto(Narrow(result, i, p.offset, p.size), ContiguousView(recv, block, offset));
    offset += recv_splits[static_cast<size_t>(k)];
  }
  return result;
}

Tensor LocalChunk(const StepContext& c, const Tensor& local) {
  const ChunkPiece p = ChunkPieceOf(local.size(c.step.dst_dim), c.world(), c.coord());
  return CopyOf(Narrow(local, c.step.dst_dim, p.offset, p.size));
}

// Partial contract #3: sum keeps the value on coordinate 0 and zeros elsewhere (exact); avg, max and
// min keep the value everywhere.
Tensor Partition(const StepContext& c, const Tensor& local) {
  if (c.step.op != comm::ReduceOp::kSum || c.coord() == 0) return local;
  return Zeros(local.sizes(), local.dtype(), local.device());
}

// S(d) -> P(sum): this rank's piece at its offset in zeros of the extent the axis releases; summing the
// axis' pieces gives the gathered value, exactly.
Tensor EmbedShard(const StepContext& c, const Tensor& local) {
  const int64_t dim = c.step.src_dim, extent = c.ReleasedExtent(dim);
  const ChunkPiece p = ChunkPieceOf(extent, c.world(), c.coord());
  Tensor result = Zeros(WithSize(local.sizes(), dim, extent), local.dtype(), local.device());
  if (p.size > 0) CopyInto(Narrow(result, dim, p.offset, p.size), local);
  return result;
}

Tensor RunStep(const StepContext& c, const Tensor& local) {
  switch (c.step.kind) {
    case StepKind::kAllGather: return AllGather(c, local);
    case StepKind::kReduceScatter: return ReduceScatter(c, local);
    case StepKind::kAllReduce: return AllReduce(c, local);
    case StepKind::kAllToAll: return AllToAll(c, local);
    case StepKind::kLocalChunk: return LocalChunk(c, local);
    case StepKind::kPartition: return Partition(c, local);
    case StepKind::kEmbedShard: return EmbedShard(c, local);
  }
  TESSEL_INTERNAL_ASSERT(false, "unknown step kind");
  return Tensor();
}

Tensor RedistributeGrad(const Tensor& grad, const DTensorSpec& src) {
  const DTensorImpl& g = GetDTensorImpl(grad, "redistribute backward");
  std::vector<Placement> target;
  for (int a = 0; a < src.mesh().ndim(); ++a) target.push_back(GradPlacement(g.spec().placement(a), src.placement(a)));
  // Only Partial source axes change (to Replicate), so the source's shard order stays valid.
  DTensorSpec target_spec(src.mesh_ptr(), std::move(target), src.shape(), src.strides(), grad.dtype(),
                          src.shard_order());
  if (g.spec() == target_spec) return grad;
  return Redistribute(grad, target_spec);
}

// `spec` holding `dtype`.
DTensorSpec WithDType(const DTensorSpec& s, DType dtype) {
  return DTensorSpec(s.mesh_ptr(), s.placements(), s.shape(), s.strides(), dtype, s.shard_order());
}

// The DTensor `d` with its local piece converted to `dtype` (not recorded: the backward's own casts).
Tensor WithLocalDType(const Tensor& d, DType dtype) {
  if (d.dtype() == dtype) return d;
  const DTensorImpl& impl = GetDTensorImpl(d, "redistribute backward");
  return MakeDTensor(DenseAs(impl.local(), dtype), WithDType(impl.spec(), dtype), impl.mesh());
}

}  // namespace

Tensor ExecuteRedistribute(const Tensor& local, const DTensorSpec& src, const RedistributePlan& plan,
                           const DeviceMesh& mesh) {
  Tensor cur = local;
  ShardingState state = plan.start;
  comm::SubmitForImmediateWait waited_at_once;  // every step waits for its collective before the next
  for (const RedistributeStep& step : plan.steps) {
    cur = RunStep(StepContext{mesh, src, state, step}, cur);
    state = ApplyStep(state, step);
  }
  return cur;
}

std::optional<RedistributePlan> PlanMove(const DTensorSpec& spec, const ShardingState& want, const DeviceMesh& mesh) {
  if (spec.placements() == want.placements && spec.shard_order() == want.order) return std::nullopt;
  return PlanRedistribute(mesh.shape(), spec.ndim(), StateOf(spec), want);
}

TensorList ExecuteRedistributesCoalesced(std::span<const Tensor> dtensors,
                                         std::span<const std::optional<ShardingState>> wants, const DeviceMesh& mesh) {
  TESSEL_INTERNAL_ASSERT(dtensors.size() == wants.size(), "ExecuteRedistributesCoalesced: ", dtensors.size(),
                         " tensors but ", wants.size(), " targets");
  TensorList locals(dtensors.size());
  // (axis, reduce op, dtype, device type, device index) -> the step and the inputs whose move is that one
  // all_reduce (with their local tensors).
  using BucketKey = std::tuple<int, int, int, int, int>;
  std::map<BucketKey, std::pair<RedistributeStep, std::vector<std::pair<size_t, const Tensor*>>>> buckets;
  comm::SubmitForImmediateWait waited_at_once;
  for (size_t i = 0; i < dtensors.size(); ++i) {
    if (!dtensors[i].defined() || !wants[i].has_value()) continue;
    const DTensorImpl& d = GetDTensorImpl(dtensors[i], "redistribute");
    const Tensor& local = d.local();
    const std::optional<RedistributePlan> plan = PlanMove(d.spec(), *wants[i], mesh);
    if (!plan) {
      locals[i] = local;
    } else if (plan->steps.size() == 1 && plan->steps[0].kind == StepKind::kAllReduce) {
      const RedistributeStep& step = plan->steps[0];
      auto& bucket = buckets[{step.axis, static_cast<int>(step.op), static_cast<int>(local.dtype()),
                              static_cast<int>(local.device().type), local.device().index}];
      bucket.first = step;
      bucket.second.emplace_back(i, &local);
    } else {
      locals[i] = ExecuteRedistribute(local, d.spec(), *plan, mesh);
    }
  }
  for (const auto& [key, bucket] : buckets) {
    const auto& [step, members] = bucket;
    int64_t total = 0;
    for (const auto& [i, local] : members) total += local->numel();
    const Tensor& first = *members[0].second;
    Tensor flat = Empty({total}, first.dtype(), first.device());
    int64_t at = 0;
    for (const auto& [i, local] : members) {
      locals[i] = ContiguousView(flat, local->sizes(), at);
      CopyInto(locals[i], *local);
      at += local->numel();
    }
    mesh.axis_group(step.axis)->AllReduce(flat, step.op)->Wait();
  }
  return locals;
}

Tensor Redistribute(const Tensor& input, const DTensorSpec& dst, const RedistributeOptions& options) {
  const DTensorImpl& in = GetDTensorImpl(input, "redistribute");
  const DType in_dtype = input.dtype();
  const DType forward_dtype = options.forward_dtype.value_or(in_dtype);
  const DType backward_dtype = options.backward_dtype.value_or(in_dtype);
  // The move runs in forward_dtype: the piece is converted first (torch's op_dtype), then planned and moved.
  const DTensorSpec src = forward_dtype == in_dtype ? in.spec() : WithDType(in.spec(), forward_dtype);
  const DTensorSpec to = forward_dtype == dst.dtype() ? dst : WithDType(dst, forward_dtype);
  Tensor local = forward_dtype == in_dtype ? in.local() : DenseAs(in.local(), forward_dtype);
  if (!(src == to)) local = ExecuteRedistribute(local, src, PlanRedistribute(src, to), in.mesh());
  Tensor out = MakeDTensor(local, to, in.mesh());
  if (forward_dtype == in_dtype && backward_dtype == in_dtype) {
    internal::RecordBackward("redistribute", input, out, [src](const Tensor& g) { return RedistributeGrad(g, src); });
    return out;
  }
  // torch's backward_options: the gradient moves in backward_dtype and returns in the input's dtype.
  internal::RecordBackward("redistribute", input, out, [src, backward_dtype, in_dtype](const Tensor& g) {
    return WithLocalDType(RedistributeGrad(WithLocalDType(g, backward_dtype), src), in_dtype);
  });
  return out;
}

}  // namespace tessel::dtensor
