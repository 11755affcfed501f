// dtensor/rules/view.cc — sharding rules for core/ops/view.cc: view (and so Reshape/Flatten), narrow,
// select, slice, transpose, permute, expand, unsqueeze, squeeze, contiguous, copy_, and the backward ops
// narrow_backward, select_backward, slice_backward.
//
// Invariant: a view op's sharding is a dim mapping (PyTorch's _view_ops.py): a dim that survives keeps
// its sharding at its new position; Partial passes through every view. The global sizes and strides of
// a view's output come from running the dense view kernel on a storage-less tensor of the global
// geometry (view kernels only compute metadata), so DTensor strides match what the dense op would give
// (Reshape then decides view vs copy exactly as for a dense tensor) and errors name global shapes.
// view regroups dims: within a group of input dims that becomes a group of output dims, only the
// group's first (major) dim may stay sharded, and only when its shard count divides both that dim and
// the output group's major dim (so every rank's flat range is the same before and after) or the group
// maps that dim to one output dim of the same size (then even uneven sharding stays); any other
// sharded dim of the group is gathered first. narrow / select / slice need their dim whole (a range over
// all of it keeps its sharding); expand and squeeze need their size-1 dims unsharded. Attrs holding
// global shapes ("shape", "input_shape") are rewritten to this rank's local shapes. A view whose input
// must move is a view of the moved copy.
//
// Example:
//   View(x_S0 /*[8, 6]*/, {48});        // [S(0)] -> [S(0)]: 8 % 2 == 0 and 48 % 2 == 0
//   View(x_S1 /*[8, 6]*/, {48});        // dim 1 is not the group's major dim: all_gather, then view
//   Transpose(q_S2 /*[B, T, H, D]*/, 1, 2);   // [S(2)] -> [S(1)]
#include <algorithm>
#include <numeric>

#include "core/base/error.h"
#include "core/dispatch/dispatcher.h"
#include "core/tensor/shape.h"
#include "core/tensor/storage.h"
#include "core/tensor/tensor_impl.h"
#include "dtensor/rules/rule_util.h"

namespace tessel::dtensor::rules {
namespace {

// Output 0's global sizes and strides: the dense view kernel run on a tensor without storage.
OutputSpec ViewOutput(const OpCall& call, ShardingState out) {
  const DTensorSpec& x = call.spec(0);
  const Tensor meta[] = {MakeDense(Storage(), x.shape(), x.strides(), 0, x.dtype())};
  const Tensor result = call.op.cpu(meta, call.attrs)[0];
  return OutputSpec{std::move(out), result.sizes(), result.strides()};
}

std::vector<int64_t> Identity(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// (input dims, output dims) groups of equal element count.
struct DimGroup {
  std::vector<int64_t> in;
  std::vector<int64_t> out;
};

std::vector<DimGroup> ViewGroups(const Shape& a, const Shape& b) {
  std::vector<DimGroup> groups;
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    if (i < a.size() && a[i] == 1 && (j >= b.size() || b[j] != 1)) {
      groups.push_back({{static_cast<int64_t>(i++)}, {}});
      continue;
    }
    if (j < b.size() && b[j] == 1 && (i >= a.size() || a[i] != 1)) {
      groups.push_back({{}, {static_cast<int64_t>(j++)}});
      continue;
    }
    DimGroup g{{static_cast<int64_t>(i)}, {static_cast<int64_t>(j)}};
    int64_t pa = a[i++], pb = b[j++];
    while (pa != pb) {
      if (pa < pb) {
        g.in.push_back(static_cast<int64_t>(i));
        pa *= a[i++];
      } else {
        g.out.push_back(static_cast<int64_t>(j));
        pb *= b[j++];
      }
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

int64_t MajorDim(const std::vector<int64_t>& dims, const Shape& sizes) {
  for (int64_t d : dims) {
    if (sizes[static_cast<size_t>(d)] != 1) return d;
  }
  return -1;
}

// This rank's view of its piece. The global strides said the view is possible, but the piece may be laid out
// otherwise (a redistribute's output is contiguous in its own order, so a gradient that came back through
// full_tensor / to_local and then permute has global strides its piece does not share): such a piece is made
// contiguous first, as Reshape does for a dense tensor. The values are the view's; only aliasing is lost.
TensorList ViewLocal(const LocalContext& ctx) {
  const Tensor& x = ctx.locals[0];
  Shape strides;
  if (ComputeViewStrides(x.sizes(), x.strides(), ctx.attrs.GetInts("shape"), &strides)) {
    return DispatchLocal(ctx.call.op, ctx.locals, ctx.attrs);
  }
  const TensorList dense = DispatchLocal(GetOp("contiguous"), ctx.locals, Attrs());
  return DispatchLocal(ctx.call.op, dense, ctx.attrs);
}

std::vector<Strategy> ViewRule(const OpCall& call) {
  const DTensorSpec& x = call.spec(0);
  OutputSpec out = ViewOutput(call, {});
  const Shape& b = out.shape;
  ShardingState in = call.state(0);
  std::vector<int64_t> map(static_cast<size_t>(x.ndim()), -1);
  const bool has_zero = NumElements(x.shape()) == 0;
  std::vector<int64_t> gather;
  for (const DimGroup& g : has_zero ? std::vector<DimGroup>{} : ViewGroups(x.shape(), b)) {
    const int64_t major_in = MajorDim(g.in, x.shape()), major_out = MajorDim(g.out, b);
    for (int64_t d : g.in) {
      const int64_t k = NumShards(in, d, call.mesh);
      const int64_t size_in = x.shape()[static_cast<size_t>(d)];
      // A dim that maps onto one output dim of the same size keeps any sharding, even an uneven one
      // (Reshape(logits [B, T, V] S(2), {-1, V}) with V % k != 0: the vocab dim is untouched).
      const bool same_dim = major_out >= 0 && size_in == b[static_cast<size_t>(major_out)];
      const bool keeps = d == major_in && major_out >= 0 &&
                         (same_dim || (size_in % k == 0 && b[static_cast<size_t>(major_out)] % k == 0));
      if (k > 1 && !keeps) gather.push_back(d);
      if (keeps) map[static_cast<size_t>(d)] = major_out;
    }
  }
  if (has_zero) gather = Identity(x.ndim());
  in = ReplicateDims(in, gather);
  out.state = RemapDims(in, map, static_cast<int64_t>(b.size()));
  std::vector<Strategy> s = One({in}, {std::move(out)});
  s[0].local_attrs = LocalShapeAttr;
  s[0].local_fn = ViewLocal;
  return s;
}

// A narrow / slice (or its backward) over all of `dim` of size n: x[:, 2:5] slices dim 0 whole before
// dim 1. Its sharding stays, as torch's (it is the identity on that dim).
bool WholeRange(const OpCall& call, int64_t n) {
  const Attrs& a = call.attrs;
  if (call.op.name == "narrow" || call.op.name == "narrow_backward")
    return a.GetInt("start") == 0 && a.GetInt("length") == n;
  if (call.op.name == "slice" || call.op.name == "slice_backward")
    return a.GetInt("start") == 0 && a.GetInt("end") == n && a.GetInt("step") == 1;
  return false;
}

// The local call of a whole-range narrow / slice keeps this rank's whole piece of `dim`.
void SetLocalRange(Attrs& a, std::string_view op, int64_t local_n) {
  if (op.starts_with("narrow")) a.Set("length", local_n);
  if (op.starts_with("slice")) a.Set("end", local_n);
}

Attrs LocalWholeRangeAttrs(const LocalContext& ctx) {
  Attrs a = ctx.call.attrs;
  SetLocalRange(a, ctx.call.op.name, ctx.LocalInputShape(0)[static_cast<size_t>(a.GetInt("dim"))]);
  return a;
}

Attrs LocalWholeRangeBackwardAttrs(const LocalContext& ctx) {
  Attrs a = LocalInputShapeAttr(ctx);
  SetLocalRange(a, ctx.call.op.name, a.GetInts("input_shape")[static_cast<size_t>(a.GetInt("dim"))]);
  return a;
}

// narrow / slice: `dim` whole (unless the range is all of it), every dim stays; select: `dim` whole and
// removed.
std::vector<Strategy> NarrowLikeRule(const OpCall& call) {
  const DTensorSpec& x = call.spec(0);
  const int64_t dim = call.attrs.GetInt("dim");
  if (WholeRange(call, x.shape()[static_cast<size_t>(dim)])) {
    std::vector<Strategy> s = One({call.state(0)}, {ViewOutput(call, call.state(0))});
    s[0].local_attrs = LocalWholeRangeAttrs;
    return s;
  }
  const ShardingState in = ReplicateDims(call.state(0), {dim});
  std::vector<int64_t> map = Identity(x.ndim());
  int64_t out_nd = x.ndim();
  if (call.op.name == "select") {
    map[static_cast<size_t>(dim)] = -1;
    for (int64_t d = dim + 1; d < x.ndim(); ++d) map[static_cast<size_t>(d)] = d - 1;
    out_nd -= 1;
  }
  return One({in}, {ViewOutput(call, RemapDims(in, map, out_nd))});
}

std::vector<Strategy> TransposeRule(const OpCall& call) {
  const int64_t nd = call.spec(0).ndim();
  std::vector<int64_t> map = Identity(nd);
  if (nd > 0)
    std::swap(map[static_cast<size_t>(call.attrs.GetInt("dim0"))], map[static_cast<size_t>(call.attrs.GetInt("dim1"))]);
  const ShardingState in = call.state(0);
  return One({in}, {ViewOutput(call, RemapDims(in, map, nd))});
}

std::vector<Strategy> PermuteRule(const OpCall& call) {
  const std::vector<int64_t>& dims = call.attrs.GetInts("dims");
  std::vector<int64_t> map(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) map[static_cast<size_t>(dims[i])] = static_cast<int64_t>(i);
  const ShardingState in = call.state(0);
  return One({in}, {ViewOutput(call, RemapDims(in, map, static_cast<int64_t>(dims.size())))});
}

std::vector<Strategy> ExpandRule(const OpCall& call) {
  const DTensorSpec& x = call.spec(0);
  OutputSpec out = ViewOutput(call, {});
  const int64_t lead = static_cast<int64_t>(out.shape.size()) - x.ndim();
  std::vector<int64_t> map(static_cast<size_t>(x.ndim()));
  std::vector<int64_t> expanded;
  for (int64_t d = 0; d < x.ndim(); ++d) {
    map[static_cast<size_t>(d)] = d + lead;
    if (x.shape()[static_cast<size_t>(d)] != out.shape[static_cast<size_t>(d + lead)]) expanded.push_back(d);
  }
  const ShardingState in = ReplicateDims(call.state(0), expanded);
  out.state = RemapDims(in, map, static_cast<int64_t>(out.shape.size()));
  std::vector<Strategy> s = One({in}, {std::move(out)});
  s[0].local_attrs = LocalShapeAttr;
  return s;
}

std::vector<Strategy> UnsqueezeRule(const OpCall& call) {
  const int64_t nd = call.spec(0).ndim(), dim = call.attrs.GetInt("dim");
  std::vector<int64_t> map = Identity(nd);
  for (int64_t d = dim; d < nd; ++d) map[static_cast<size_t>(d)] = d + 1;
  const ShardingState in = call.state(0);
  return One({in}, {ViewOutput(call, RemapDims(in, map, nd + 1))});
}

std::vector<Strategy> SqueezeRule(const OpCall& call) {
  const int64_t nd = call.spec(0).ndim();
  const std::vector<int64_t>& dims = call.attrs.GetInts("dims");
  const ShardingState in = ReplicateDims(call.state(0), dims);
  std::vector<int64_t> map(static_cast<size_t>(nd));
  int64_t j = 0;
  for (int64_t d = 0; d < nd; ++d) {
    const bool removed = std::find(dims.begin(), dims.end(), d) != dims.end();
    map[static_cast<size_t>(d)] = removed ? -1 : j++;
  }
  return One({in}, {ViewOutput(call, RemapDims(in, map, j))});
}

std::vector<Strategy> ContiguousRule(const OpCall& call) {
  const ShardingState in = call.state(0);
  return One({in}, {OutputSpec{in, call.spec(0).shape(), {}}});
}

std::vector<Strategy> CopyRule(const OpCall& call) { return Pointwise(call, Linearity::kCopy); }

// *_backward of narrow / select / slice: zeros of "input_shape" with the gradient in the selected
// region; `dim` whole, the gradient may stay Partial(sum/avg) (zeros are neutral for them).
std::vector<Strategy> ScatterBackwardRule(const OpCall& call) {
  const Shape& shape = call.attrs.GetInts("input_shape");
  const int64_t dim = call.attrs.GetInt("dim");
  const int64_t g_nd = call.spec(0).ndim();
  const bool select = call.op.name == "select_backward";
  const bool whole = WholeRange(call, shape[static_cast<size_t>(dim)]);
  const int64_t g_dim = select ? -1 : dim;
  ShardingState g = whole ? call.state(0) : ReplicateDims(call.state(0), {g_dim});
  for (int a = 0; a < call.mesh_ndim(); ++a) {
    const Partial* p = std::get_if<Partial>(&g.placements[static_cast<size_t>(a)]);
    if (p != nullptr && p->reduce_op != comm::ReduceOp::kSum && p->reduce_op != comm::ReduceOp::kAvg) {
      g = SetAxis(g, a, Replicate{});
    }
  }
  std::vector<int64_t> map = Identity(g_nd);
  if (select) {
    for (int64_t d = dim; d < g_nd; ++d) map[static_cast<size_t>(d)] = d + 1;
  }
  ShardingState out = RemapDims(g, map, static_cast<int64_t>(shape.size()));
  std::vector<Strategy> s = One({g}, {OutputSpec{std::move(out), shape, {}}});
  s[0].local_attrs = whole ? LocalWholeRangeBackwardAttrs : LocalInputShapeAttr;
  return s;
}

const bool kRegistered = [] {
  RegisterShardingRule("view", ViewRule);
  RegisterShardingRule("narrow", NarrowLikeRule);
  RegisterShardingRule("select", NarrowLikeRule);
  RegisterShardingRule("slice", NarrowLikeRule);
  RegisterShardingRule("transpose", TransposeRule);
  RegisterShardingRule("permute", PermuteRule);
  RegisterShardingRule("expand", ExpandRule);
  RegisterShardingRule("unsqueeze", UnsqueezeRule);
  RegisterShardingRule("squeeze", SqueezeRule);
  RegisterShardingRule("contiguous", ContiguousRule, RuleTraits{.elementwise = true});
  RegisterShardingRule("copy_", CopyRule);
  RegisterShardingRule("narrow_backward", ScatterBackwardRule);
  RegisterShardingRule("select_backward", ScatterBackwardRule);
  RegisterShardingRule("slice_backward", ScatterBackwardRule);
  return true;
}();

}  // namespace
}  // namespace tessel::dtensor::rules
