#include "dtensor/redistribute_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <random>

#include "core/base/error.h"
#include "dtensor/layout.h"

namespace tessel::dtensor {
namespace {

using comm::ReduceOp;

std::shared_ptr<const MeshTopology> Mesh(std::vector<int64_t> shape) {
  std::vector<std::string> names;
  for (size_t i = 0; i < shape.size(); ++i) names.push_back(std::string(1, static_cast<char>('a' + i)));
  return std::make_shared<const MeshTopology>(MeshTopology::Iota(std::move(shape), std::move(names)));
}

DTensorSpec Spec(const std::shared_ptr<const MeshTopology>& mesh, const char* placements, Shape shape,
                 std::optional<ShardOrder> order = std::nullopt) {
  return DTensorSpec(mesh, ParsePlacements(placements), std::move(shape), DType::kFloat32, std::move(order));
}

struct PlanRow {
  std::vector<int64_t> mesh;
  const char* src;
  const char* dst;
  std::string want;
  std::optional<ShardOrder> src_order = std::nullopt;
  std::optional<ShardOrder> dst_order = std::nullopt;
};

void ExpectPlans(const std::vector<PlanRow>& rows) {
  for (const PlanRow& r : rows) {
    auto mesh = Mesh(r.mesh);
    DTensorSpec src = Spec(mesh, r.src, {8, 8}, r.src_order), dst = Spec(mesh, r.dst, {8, 8}, r.dst_order);
    SCOPED_TRACE(src.ToString() + " -> " + dst.ToString());
    EXPECT_EQ(PlanRedistribute(src, dst).ToString(), r.want);
  }
}

TEST(RedistributePlannerTest, OneDimensionalTransitionsAreSingleSteps) {
  ExpectPlans({
      {{4}, "S(0)", "R", "all_gather(axis=0, dim=0)"},
      {{4}, "R", "S(0)", "local_chunk(axis=0, dim=0)"},
      {{4}, "P(sum)", "R", "all_reduce(axis=0, sum)"},
      {{4}, "P(sum)", "S(1)", "reduce_scatter(axis=0, dim=1, sum)"},
      {{4}, "P(avg)", "S(0)", "reduce_scatter(axis=0, dim=0, avg)"},
      {{4}, "S(0)", "S(1)", "all_to_all(axis=0, dim 0->1)"},
      {{4}, "S(1)", "S(1)", "(no steps)"},
      {{4}, "R", "R", "(no steps)"},
      {{4}, "P(max)", "P(max)", "(no steps)"},
  });
}

TEST(RedistributePlannerTest, NestedShardReplicatesInnerAxisFirst) {
  ExpectPlans({
      {{2, 2}, "S(0), S(0)", "R, R", "all_gather(axis=1, dim=0) -> all_gather(axis=0, dim=0)"},
      {{2, 2}, "S(0), S(0)", "S(0), R", "all_gather(axis=1, dim=0)"},
      {{2, 2}, "S(0), S(0)", "R, S(0)",
       "all_gather(axis=1, dim=0) -> all_gather(axis=0, dim=0) -> local_chunk(axis=1, dim=0)"},
      {{3, 2}, "S(0), S(0)", "S(0), S(1)", "all_to_all(axis=1, dim 0->1)"},
      {{2, 2, 2}, "S(0), S(0), S(0)", "R, R, R",
       "all_gather(axis=2, dim=0) -> all_gather(axis=1, dim=0) -> all_gather(axis=0, dim=0)"},
  });
}

TEST(RedistributePlannerTest, ExplicitOrderGathersItsLastAxisFirst) {
  const ShardOrder tp_then_dp = {{1, 0}, {}};
  ExpectPlans({
      // FSDP unshard of a TP-sharded weight: one all_gather on dp, TP shard stays.
      {{2, 2}, "S(0), S(0)", "R, S(0)", "all_gather(axis=0, dim=0)", tp_then_dp},
      {{2, 2}, "S(0), S(0)", "R, R", "all_gather(axis=0, dim=0) -> all_gather(axis=1, dim=0)", tp_then_dp},
      // fully_shard on a TP weight: the dp axis joins the end of the order, no communication.
      {{2, 2}, "R, S(0)", "S(0), S(0)", "local_chunk(axis=0, dim=0)", std::nullopt, tp_then_dp},
      // ...while the default order (dp first) must regather the TP shard.
      {{2, 2}, "R, S(0)", "S(0), S(0)",
       "all_gather(axis=1, dim=0) -> local_chunk(axis=0, dim=0) -> local_chunk(axis=1, dim=0)"},
      // Same placements, other order: both axes move.
      {{2, 2}, "S(0), S(0)", "S(0), S(0)",
       "all_gather(axis=1, dim=0) -> all_gather(axis=0, dim=0) -> local_chunk(axis=1, dim=0) -> "
       "local_chunk(axis=0, dim=0)",
       std::nullopt, tp_then_dp},
  });
}

TEST(RedistributePlannerTest, PriorityTableReducesBeforeGatheringAndChunksFirst) {
  ExpectPlans({
      {{2, 2}, "P(sum), S(0)", "R, R", "all_reduce(axis=0, sum) -> all_gather(axis=1, dim=0)"},
      {{2, 2}, "S(0), P(sum)", "R, S(0)", "all_gather(axis=0, dim=0) -> reduce_scatter(axis=1, dim=0, sum)"},
      {{2, 2}, "P(sum), P(sum)", "R, R", "all_reduce(axis=0, sum) -> all_reduce(axis=1, sum)"},
      {{2, 2}, "P(sum), P(sum)", "S(0), S(0)",
       "reduce_scatter(axis=0, dim=0, sum) -> reduce_scatter(axis=1, dim=0, sum)"},
      {{2, 2}, "S(0), R", "R, S(1)", "local_chunk(axis=1, dim=1) -> all_gather(axis=0, dim=0)"},
      {{2, 2, 2}, "S(0), R, P(sum)", "R, S(0), R",
       "all_reduce(axis=2, sum) -> all_gather(axis=0, dim=0) -> local_chunk(axis=1, dim=0)"},
  });
}

TEST(RedistributePlannerTest, CyclicAllToAllIsBrokenWithOneGather) {
  ExpectPlans({
      {{2, 2}, "S(0), S(1)", "S(1), S(0)",
       "all_gather(axis=0, dim=0) -> all_to_all(axis=1, dim 1->0) -> local_chunk(axis=0, dim=1)"},
      {{2, 2}, "S(0), S(1)", "S(1), R", "all_gather(axis=1, dim=1) -> all_to_all(axis=0, dim 0->1)"},
  });
}

TEST(RedistributePlannerTest, SizeOneAxesNeverCommunicate) {
  ExpectPlans({
      {{1, 4}, "S(0), S(0)", "R, R", "all_gather(axis=1, dim=0)"},
      {{1, 4}, "P(sum), R", "R, R", "(no steps)"},
      {{1, 4}, "P(sum), R", "P(sum), S(1)", "local_chunk(axis=1, dim=1)"},
      {{4, 1}, "S(0), P(avg)", "S(1), S(0)", "all_to_all(axis=0, dim 0->1)"},
      {{1, 1, 2}, "S(0), S(1), S(0)", "R, S(0), S(1)", "all_to_all(axis=2, dim 0->1)"},
  });
}

void ExpectInvalid(const std::vector<std::string>& fragments, const std::function<void()>& fn) {
  try {
    fn();
    ADD_FAILURE() << "expected kInvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    for (const std::string& f : fragments) {
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << "missing '" << f << "' in: " << e.what();
    }
  }
}

TEST(RedistributePlannerTest, PartialToOtherPartialRaisesNamingBothSpecs) {
  auto mesh = Mesh({2, 2});
  ExpectInvalid({"P(sum) -> P(max) on mesh axis 1 is not supported", "placements=[R, P(sum)]",
                 "placements=[R, P(max)]"},
                [&] { PlanRedistribute(Spec(mesh, "R, P(sum)", {4}), Spec(mesh, "R, P(max)", {4})); });
}

TEST(RedistributePlannerTest, PartialTargetsPartitionOrEmbedLocally) {
  auto mesh = Mesh({4});
  EXPECT_EQ(PlanRedistribute(Spec(mesh, "R", {4}), Spec(mesh, "P(sum)", {4})).ToString(), "partition(axis=0, sum)");
  EXPECT_EQ(PlanRedistribute(Spec(mesh, "R", {4}), Spec(mesh, "P(avg)", {4})).ToString(), "partition(axis=0, avg)");
  // Shard -> Partial(sum) embeds the piece in zeros: no collective, as torch's Shard._to_partial_tensor.
  EXPECT_EQ(PlanRedistribute(Spec(mesh, "S(1)", {4, 6}), Spec(mesh, "P(sum)", {4, 6})).ToString(),
            "embed_shard(axis=0, dim=1)");
  // Other ops need the whole value on every rank first (torch refuses these).
  EXPECT_EQ(PlanRedistribute(Spec(mesh, "S(0)", {4}), Spec(mesh, "P(max)", {4})).ToString(),
            "all_gather(axis=0, dim=0) -> partition(axis=0, max)");
  auto mesh2 = Mesh({2, 3});
  // The inner axis of dim 0 leaves first (gathered: it shards the target's dim 0 alone), then the outer
  // one is embedded and the inner one re-chunks the whole dim.
  EXPECT_EQ(PlanRedistribute(Spec(mesh2, "S(0), S(0)", {12}), Spec(mesh2, "P(sum), S(0)", {12})).ToString(),
            "all_gather(axis=1, dim=0) -> embed_shard(axis=0, dim=0) -> local_chunk(axis=1, dim=0)");
  // Embedding comes after the other axes' gathers, so they move only the pieces.
  EXPECT_EQ(PlanRedistribute(Spec(mesh2, "S(0), S(1)", {4, 6}), Spec(mesh2, "P(sum), R", {4, 6})).ToString(),
            "all_gather(axis=1, dim=1) -> embed_shard(axis=0, dim=0)");
}

TEST(RedistributePlannerTest, MeshShapeAndDtypeMustAgree) {
  ExpectInvalid({"the meshes differ", "(a=4)", "(a=2, b=2)"},
                [&] { PlanRedistribute(Spec(Mesh({4}), "R", {4}), Spec(Mesh({2, 2}), "R, R", {4})); });
  ExpectInvalid({"global shape and dtype must not change", "shape=[4]", "shape=[5]"},
                [&] { PlanRedistribute(Spec(Mesh({4}), "R", {4}), Spec(Mesh({4}), "R", {5})); });
}

TEST(RedistributePlannerTest, DryRunReportsPaddedBytesPerRank) {
  auto mesh = Mesh({4});
  // 13 = world*3+1 rows of 2 floats: pieces [4, 4, 4, 1], every rank sends a padded 4-row piece.
  for (int64_t c = 0; c < 4; ++c) {
    const std::vector<int64_t> coord = {c};
    std::vector<PlannedCollective> g = DryRun(Spec(mesh, "S(0)", {13, 2}), Spec(mesh, "R", {13, 2}), coord);
    ASSERT_EQ(g.size(), 1u);
    EXPECT_EQ(g[0].ToString(), "all_gather(a, 32 B)");
    std::vector<PlannedCollective> rs = DryRun(Spec(mesh, "P(sum)", {13, 2}), Spec(mesh, "S(0)", {13, 2}), coord);
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_EQ(rs[0].ToString(), "reduce_scatter(a, 128 B)");
  }
  const std::vector<int64_t> last = {3};
  std::vector<PlannedCollective> a2a = DryRun(Spec(mesh, "S(0)", {13, 2}), Spec(mesh, "S(1)", {13, 2}), last);
  ASSERT_EQ(a2a.size(), 1u);
  EXPECT_EQ(a2a[0].ToString(), "all_to_all(a, 8 B)");  // rank 3 holds 1 row of 2 floats, sent unpadded
  EXPECT_TRUE(DryRun(Spec(mesh, "R", {13}), Spec(mesh, "S(0)", {13}), last).empty());
}

// ---- Property test: random (src, dst) pairs run on a reference simulator of every rank. ----

struct Arr {
  Shape shape;
  std::vector<double> v;
};

int64_t Flat(const Shape& shape, const Shape& idx) {
  int64_t f = 0;
  for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + idx[d];
  return f;
}

void ForEachIndex(const Shape& shape, const std::function<void(const Shape&)>& fn) {
  if (NumElements(shape) == 0) return;
  Shape idx(shape.size(), 0);
  while (true) {
    fn(idx);
    int d = static_cast<int>(shape.size()) - 1;
    while (d >= 0 && ++idx[d] == shape[d]) idx[d--] = 0;
    if (d < 0) return;
  }
}

Arr Narrow(const Arr& a, int64_t dim, int64_t start, int64_t len) {
  Arr out{a.shape, {}};
  out.shape[dim] = len;
  out.v.resize(static_cast<size_t>(NumElements(out.shape)));
  ForEachIndex(out.shape, [&](const Shape& i) {
    Shape j = i;
    j[dim] += start;
    out.v[Flat(out.shape, i)] = a.v[Flat(a.shape, j)];
  });
  return out;
}

Arr Cat(const std::vector<Arr>& parts, int64_t dim) {
  Arr out{parts[0].shape, {}};
  out.shape[dim] = 0;
  for (const Arr& p : parts) out.shape[dim] += p.shape[dim];
  out.v.resize(static_cast<size_t>(NumElements(out.shape)));
  int64_t off = 0;
  for (const Arr& p : parts) {
    ForEachIndex(p.shape, [&](const Shape& i) {
      Shape j = i;
      j[dim] += off;
      out.v[Flat(out.shape, j)] = p.v[Flat(p.shape, i)];
    });
    off += p.shape[dim];
  }
  return out;
}

Arr Reduce(const std::vector<Arr>& parts, ReduceOp op) {
  Arr out = parts[0];
  for (size_t k = 1; k < parts.size(); ++k) {
    EXPECT_EQ(parts[k].shape, out.shape);
    for (size_t i = 0; i < out.v.size(); ++i) {
      const double x = parts[k].v[i];
      out.v[i] = op == ReduceOp::kMax ? std::max(out.v[i], x) : op == ReduceOp::kMin ? std::min(out.v[i], x)
                                                                                    : out.v[i] + x;
    }
  }
  if (op == ReduceOp::kAvg) {
    for (double& x : out.v) x /= static_cast<double>(parts.size());
  }
  return out;
}

// Splits a value into the partial contribution of axis coordinate c of W (exact in double).
double SplitPartial(double v, ReduceOp op, int64_t c, int64_t w) {
  switch (op) {
    case ReduceOp::kSum: return c == 0 ? v - 3.0 * static_cast<double>(w - 1) : 3.0;
    case ReduceOp::kAvg: return v + 2.0 * static_cast<double>(c) - static_cast<double>(w - 1);
    case ReduceOp::kMax: return c == 0 ? v : v - 1.0 - static_cast<double>(c);
    default: return c == 0 ? v : v + 1.0 + static_cast<double>(c);
  }
}

// Runs one step on every rank's local array, like the executor (without padding).
void Simulate(const MeshTopology& mesh, const RedistributeStep& s, std::vector<Arr>& locals) {
  std::vector<Arr> next(locals.size());
  for (int r = 0; r < static_cast<int>(locals.size()); ++r) {
    const std::vector<int64_t> coord = *mesh.CoordinateOf(r);
    const int64_t w = mesh.size(s.axis), c = coord[static_cast<size_t>(s.axis)];
    std::vector<Arr> group;
    for (int g : mesh.AxisGroupRanks(s.axis, coord)) group.push_back(locals[static_cast<size_t>(g)]);
    const Arr& me = locals[static_cast<size_t>(r)];
    auto piece = [&](const Arr& a, int64_t dim, int64_t k) {
      const ChunkPiece p = ChunkPieceOf(a.shape[dim], w, k);
      return Narrow(a, dim, p.size == 0 ? a.shape[dim] : p.offset, p.size);
    };
    switch (s.kind) {
      case StepKind::kAllGather: next[r] = Cat(group, s.src_dim); break;
      case StepKind::kAllReduce: next[r] = Reduce(group, s.op); break;
      case StepKind::kReduceScatter: next[r] = piece(Reduce(group, s.op), s.dst_dim, c); break;
      case StepKind::kLocalChunk: next[r] = piece(me, s.dst_dim, c); break;
      case StepKind::kAllToAll: {
        std::vector<Arr> parts;
        for (const Arr& g : group) parts.push_back(piece(g, s.dst_dim, c));
        next[r] = Cat(parts, s.src_dim);
        break;
      }
      case StepKind::kPartition:
        next[r] = me;
        if (s.op == ReduceOp::kSum && c != 0) std::fill(next[r].v.begin(), next[r].v.end(), 0.0);
        break;
      case StepKind::kEmbedShard: {  // the group's pieces in order, the others' zeroed
        std::vector<Arr> parts = group;
        for (int64_t k = 0; k < w; ++k) {
          if (k != c) std::fill(parts[k].v.begin(), parts[k].v.end(), 0.0);
        }
        next[r] = Cat(parts, s.src_dim);
        break;
      }
    }
  }
  locals = std::move(next);
}

// The expected collective count: one per axis of size > 1 whose Shard leaves its place in the order
// (unless it becomes Partial(sum): embedded in zeros), or whose Partial is reduced.
int MinimalCollectives(const DTensorSpec& src, const DTensorSpec& dst) {
  int n = 0;
  for (int a = 0; a < src.mesh().ndim(); ++a) {
    if (src.mesh().size(a) == 1) continue;
    const Placement& p = src.placement(a);
    if (IsPartial(p) && p != dst.placement(a)) ++n;
    if (const Shard* s = std::get_if<Shard>(&p)) {
      auto norm = [&](const std::vector<int>& axes) {
        std::vector<int> out;
        for (int x : axes) {
          if (src.mesh().size(x) > 1) out.push_back(x);
        }
        return out;
      };
      const std::vector<int> so = norm(src.shard_order()[s->dim]), dO = norm(dst.shard_order()[s->dim]);
      const size_t pos = std::find(so.begin(), so.end(), a) - so.begin();
      size_t k = 0;
      while (k < so.size() && k < dO.size() && so[k] == dO[k]) ++k;
      const Partial* tp = std::get_if<Partial>(&dst.placement(a));
      if (pos >= k && !(tp != nullptr && tp->reduce_op == ReduceOp::kSum)) ++n;  // embedding is local
    }
  }
  return n;
}

struct RandomCase {
  DTensorSpec src, dst;
  ReduceOp op;  // the one reduce op of every Partial in the case
};

// A random (src, dst) pair: 1-D..3-D mesh of sizes 1..3, 1..3 dims of sizes 0..6, random placements
// and shard orders; Partial targets where the source is Partial, or on any axis in half of the cases.
RandomCase MakeRandomCase(std::mt19937& rng) {
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
  const int mesh_ndim = 1 + static_cast<int>(rng() % 3);
  std::vector<int64_t> mesh_shape;
  for (int a = 0; a < mesh_ndim; ++a) mesh_shape.push_back(1 + static_cast<int64_t>(rng() % 3));
  const int ndim = 1 + static_cast<int>(rng() % 3);
  Shape shape;
  for (int d = 0; d < ndim; ++d) shape.push_back(static_cast<int64_t>(rng() % 7));
  const ReduceOp op = ops[rng() % 4];
  const bool any_partial_target = rng() % 2 == 0;
  std::vector<Placement> sp, dp;
  for (int a = 0; a < mesh_ndim; ++a) {
    const int k = static_cast<int>(rng() % (ndim + 2)), j = static_cast<int>(rng() % (ndim + 2));
    sp.push_back(k < ndim ? Placement(Shard{k}) : k == ndim ? Placement(Replicate{}) : Placement(Partial{op}));
    const bool partial_ok = any_partial_target || IsPartial(sp.back());
    dp.push_back(j < ndim ? Placement(Shard{j}) : (j == ndim || !partial_ok) ? Placement(Replicate{})
                                                                             : Placement(Partial{op}));
  }
  ShardOrder so = DefaultShardOrder(sp, ndim), dO = DefaultShardOrder(dp, ndim);
  for (std::vector<int>& axes : so) std::shuffle(axes.begin(), axes.end(), rng);
  for (std::vector<int>& axes : dO) std::shuffle(axes.begin(), axes.end(), rng);
  auto mesh = Mesh(mesh_shape);
  return {DTensorSpec(mesh, sp, shape, DType::kFloat64, so), DTensorSpec(mesh, dp, shape, DType::kFloat64, dO), op};
}

// Runs `plan` on every rank of a simulated mesh, starting from src's boxes of a random global tensor
// (Partial axes split so they reduce back exactly), and compares with dst's boxes.
void ExpectSimulationReachesTarget(const RandomCase& c, const RedistributePlan& plan, std::mt19937& rng) {
  const Shape& shape = c.src.shape();
  const MeshTopology& m = c.src.mesh();
  Arr global{shape, std::vector<double>(static_cast<size_t>(NumElements(shape)))};
  for (double& x : global.v) x = static_cast<double>(rng() % 100);
  auto box = [&](const DTensorSpec& spec, const std::vector<int64_t>& coord) {
    Arr a = global;
    std::vector<DimInterval> iv = GlobalIntervals(spec, coord);
    for (size_t d = 0; d < shape.size(); ++d) a = Narrow(a, d, iv[d].length ? iv[d].offset : 0, iv[d].length);
    return a;
  };
  std::vector<Arr> locals;
  for (int r = 0; r < m.numel(); ++r) {
    const std::vector<int64_t> coord = *m.CoordinateOf(r);
    Arr a = box(c.src, coord);
    for (int ax = 0; ax < m.ndim(); ++ax) {
      if (!IsPartial(c.src.placement(ax))) continue;
      for (double& x : a.v) x = SplitPartial(x, c.op, coord[ax], m.size(ax));
    }
    locals.push_back(a);
  }
  for (const RedistributeStep& s : plan.steps) Simulate(m, s, locals);
  // Reduce the Partial axes the target keeps, then compare with the target boxes.
  for (int ax = 0; ax < m.ndim(); ++ax) {
    if (IsPartial(plan.end.placements[ax])) Simulate(m, {StepKind::kAllReduce, ax, -1, -1, c.op}, locals);
  }
  for (int r = 0; r < m.numel(); ++r) {
    const Arr want = box(c.dst, *m.CoordinateOf(r));
    ASSERT_EQ(locals[r].shape, want.shape) << "rank " << r;
    ASSERT_EQ(locals[r].v, want.v) << "rank " << r;
  }
}

TEST(RedistributePlannerTest, RandomPairsReachTheTargetWithMinimalCollectives) {
  std::mt19937 rng(7);
  std::map<StepKind, int> kinds;
  for (int trial = 0; trial < 6000; ++trial) {
    const RandomCase c = MakeRandomCase(rng);
    const RedistributePlan plan = PlanRedistribute(c.src, c.dst);
    SCOPED_TRACE(Str("trial ", trial, ": ", c.src.ToString(), " -> ", c.dst.ToString(), " plan ", plan.ToString()));
    ShardingState cur = plan.start;
    for (const RedistributeStep& s : plan.steps) {
      cur = ApplyStep(cur, s);
      ++kinds[s.kind];
    }
    ASSERT_EQ(cur, plan.end);
    ASSERT_EQ(plan.num_collectives(), MinimalCollectives(c.src, c.dst));
    ExpectSimulationReachesTarget(c, plan, rng);
    if (::testing::Test::HasFatalFailure()) return;
  }
  // The random pairs exercise every kind of step, many times.
  for (StepKind k : {StepKind::kAllGather, StepKind::kAllReduce, StepKind::kReduceScatter, StepKind::kAllToAll,
                     StepKind::kLocalChunk, StepKind::kPartition, StepKind::kEmbedShard}) {
    EXPECT_GT(kinds[k], 100) << StepKindName(k);
  }
}

}  // namespace
}  // namespace tessel::dtensor
