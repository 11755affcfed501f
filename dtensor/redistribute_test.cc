#include "dtensor/redistribute.h"

#include <gtest/gtest.h>

#include <random>

#include "core/autograd/engine.h"
#include "core/ops/view.h"
#include "dtensor/dtensor.h"
#include "dtensor/dtensor_impl.h"
#include "dtensor/testing/dtensor_testing.h"

namespace tessel::dtensor {
namespace {

using testing::BoxValues;
using testing::Iota;

struct Row {
  std::vector<int64_t> mesh;
  std::vector<std::string> names;
  const char* src;
  const char* dst;
  std::string forward;   // tracer summary of the forward redistribute
  std::string backward;  // tracer summary of the backward pass
  std::optional<ShardOrder> src_order = std::nullopt;
  std::optional<ShardOrder> dst_order = std::nullopt;
};

// Partial sources are FromLocal of a leaf; others DistributeTensor leaves.
struct Source {
  DTensor x;
  Tensor partial_leaf;
};

Source MakeSource(const DeviceMesh& mesh, const DTensorSpec& spec, const std::vector<double>& full) {
  if (!spec.has_partial()) {
    Tensor t = FromDoubles(full, spec.shape(), spec.dtype());
    return {DistributeTensor(t, mesh, spec.placements(), {.shard_order = spec.shard_order()}).set_requires_grad(true),
            Tensor()};
  }
  std::vector<double> local = BoxValues(full, spec.shape(), GlobalIntervals(spec, mesh.coordinate()));
  for (int a = 0; a < mesh.ndim(); ++a) {
    if (const Partial* p = std::get_if<Partial>(&spec.placement(a))) {
      for (double& v : local) v = testing::SplitPartial(v, p->reduce_op, mesh.coordinate()[a], mesh.size(a));
    }
  }
  Tensor leaf = FromDoubles(local, ComputeLocalShape(spec, mesh.coordinate()), spec.dtype());
  leaf.set_requires_grad(true);
  DTensor x = DTensor::FromLocal(leaf, mesh, spec.placements(), {.shape = spec.shape(), .shard_order = spec.shard_order()});
  return {x, leaf};
}

// STYLE 25: values, gradient placement and exact collective counts, forward and backward, for sizes
// world*3, world*3+1, world*3+2.
void RunRow(const Row& row) {
  int64_t world = 1;
  for (int64_t s : row.mesh) world *= s;
  comm::RunRanks(static_cast<int>(world), [&](comm::ProcessGroupPtr pg) {
    DeviceMesh mesh = InitDeviceMesh(pg, row.mesh, row.names);
    for (int64_t n : {world * 3, world * 3 + 1, world * 3 + 2}) {
      const Shape shape = {n, 3};
      DTensorSpec src(mesh.topology_ptr(), ParsePlacements(row.src), shape, DType::kFloat64, row.src_order);
      DTensorSpec dst(mesh.topology_ptr(), ParsePlacements(row.dst), shape, DType::kFloat64, row.dst_order);
      SCOPED_TRACE(Str("rank ", pg->rank(), ": ", src.ToString(), " -> ", dst.ToString()));
      const std::vector<double> full = Iota(n * 3), grad_full = Iota(n * 3, 0.5, 1.0);
      Source source = MakeSource(mesh, src, full);

      comm::CommTracer fwd;
      Tensor y = Redistribute(source.x, dst);
      EXPECT_EQ(fwd.Summary(), row.forward);
      EXPECT_EQ(testing::RecordStrings(fwd), testing::PlannedStrings(DryRun(src, dst, mesh.coordinate())));
      const std::vector<DimInterval> dst_box = GlobalIntervals(dst, mesh.coordinate());
      EXPECT_EQ(DTensor(y).ToLocal().ToDoubleVector(), BoxValues(full, shape, dst_box));
      EXPECT_EQ(DTensor(y).placements(), dst.placements());

      Tensor y_local = DTensor(y).ToLocal();
      Tensor g = FromDoubles(BoxValues(grad_full, shape, dst_box), y_local.sizes(), DType::kFloat64);
      comm::CommTracer bwd;
      Backward(y_local, g);
      EXPECT_EQ(bwd.Summary(), row.backward);
      if (source.partial_leaf.defined()) {
        // A Partial source gets a Replicate gradient on its Partial axes: the whole box on every rank.
        EXPECT_EQ(source.partial_leaf.grad().ToDoubleVector(),
                  BoxValues(grad_full, shape, GlobalIntervals(src, mesh.coordinate())));
      } else {
        DTensor xg = source.x.grad();
        ASSERT_TRUE(xg.defined());
        EXPECT_EQ(xg.placements(), src.placements());
        EXPECT_EQ(xg.spec().shard_order(), src.shard_order());
        EXPECT_EQ(xg.ToLocal().ToDoubleVector(), BoxValues(grad_full, shape, GlobalIntervals(src, mesh.coordinate())));
      }
    }
  }, testing::FastRanks());
}

TEST(RedistributeTest, ShardToReplicateForwardBackward) {
  RunRow({{4}, {"x"}, "S(0)", "R", "all_gather(x) x1", ""});
  RunRow({{4}, {"x"}, "S(1)", "R", "all_gather(x) x1", ""});
}

TEST(RedistributeTest, ReplicateToShardForwardBackward) {
  RunRow({{4}, {"x"}, "R", "S(0)", "", "all_gather(x) x1"});
  RunRow({{4}, {"x"}, "R", "S(1)", "", "all_gather(x) x1"});
}

TEST(RedistributeTest, ShardToShardForwardBackward) {
  RunRow({{4}, {"x"}, "S(0)", "S(1)", "all_to_all(x) x1", "all_to_all(x) x1"});
  RunRow({{4}, {"x"}, "S(1)", "S(0)", "all_to_all(x) x1", "all_to_all(x) x1"});
}

TEST(RedistributeTest, PartialToReplicateForwardBackward) {
  RunRow({{4}, {"x"}, "P(sum)", "R", "all_reduce(x) x1", ""});
  RunRow({{4}, {"x"}, "P(max)", "R", "all_reduce(x) x1", ""});
  RunRow({{4}, {"x"}, "P(avg)", "R", "all_reduce(x) x1", ""});
}

TEST(RedistributeTest, PartialToShardForwardBackward) {
  RunRow({{4}, {"x"}, "P(sum)", "S(0)", "reduce_scatter(x) x1", "all_gather(x) x1"});
  RunRow({{4}, {"x"}, "P(min)", "S(1)", "reduce_scatter(x) x1", "all_gather(x) x1"});
}

TEST(RedistributeTest, TwoDimensionalMeshForwardBackward) {
  const std::vector<std::string> n = {"dp", "tp"};
  RunRow({{2, 2}, n, "S(0), S(0)", "R, R", "all_gather(tp) x1, all_gather(dp) x1", ""});
  RunRow({{2, 2}, n, "S(0), S(1)", "S(1), S(0)", "all_gather(dp) x1, all_to_all(tp) x1",
          "all_gather(dp) x1, all_to_all(tp) x1"});
  RunRow({{2, 2}, n, "P(sum), S(0)", "R, R", "all_reduce(dp) x1, all_gather(tp) x1", ""});
  RunRow({{2, 2}, n, "S(0), R", "R, S(1)", "all_gather(dp) x1", "all_gather(tp) x1"});
  RunRow({{2, 2}, n, "P(sum), P(sum)", "S(0), S(1)", "reduce_scatter(dp) x1, reduce_scatter(tp) x1",
          "all_gather(dp) x1, all_gather(tp) x1"});
}

TEST(RedistributeTest, FullyShardOnTensorParallelAddsNoCommunication) {
  const ShardOrder tp_then_dp = {{1, 0}, {}};
  RunRow({{2, 2}, {"dp", "tp"}, "R, S(0)", "S(0), S(0)", "", "all_gather(dp) x1", std::nullopt, tp_then_dp});
  RunRow({{2, 2}, {"dp", "tp"}, "S(0), S(0)", "R, S(0)", "all_gather(dp) x1", "", tp_then_dp});
}

TEST(RedistributeTest, ThreeDimensionalAndUnevenMeshesForwardBackward) {
  RunRow({{2, 2, 2}, {"pp", "dp", "tp"}, "S(0), S(0), S(0)", "R, R, R",
          "all_gather(tp) x1, all_gather(dp) x1, all_gather(pp) x1", ""});
  RunRow({{2, 2, 2}, {"pp", "dp", "tp"}, "S(0), R, P(sum)", "R, S(0), R", "all_reduce(tp) x1, all_gather(pp) x1",
          "all_gather(dp) x1"});
  RunRow({{3, 2}, {"dp", "tp"}, "S(0), S(0)", "S(1), R", "all_gather(tp) x1, all_to_all(dp) x1",
          "all_to_all(dp) x1"});
}

TEST(RedistributeTest, SizeOneAxesCostNothing) {
  RunRow({{1, 4}, {"dp", "tp"}, "S(0), S(0)", "R, R", "all_gather(tp) x1", ""});
  RunRow({{4, 1}, {"dp", "tp"}, "S(0), S(1)", "S(1), R", "all_to_all(dp) x1", "all_to_all(dp) x1"});
}

TEST(RedistributeTest, UnsupportedTransitionsRaiseNamingSpecs) {
  comm::RunRanks(2, [](comm::ProcessGroupPtr pg) {
    DeviceMesh mesh = InitDeviceMesh(pg, {2}, {"x"});
    DTensor r = DistributeTensor(Zeros({4}), mesh, ParsePlacements("R"));
    DTensor p = DTensor::FromLocal(Zeros({4}), mesh, ParsePlacements("P(sum)"));
    testing::ExpectError(ErrorCode::kInvalidArgument,
                         {"P(sum) -> P(max)", "placements=[P(sum)]", "placements=[P(max)]"},
                         [&] { p.Redistribute(mesh, ParsePlacements("P(max)")); });
    testing::ExpectError(ErrorCode::kInvalidArgument, {"S(1) on axis 'x' needs 0 <= dim < ndim = 1"},
                         [&] { r.Redistribute(mesh, ParsePlacements("S(1)")); });
    DeviceMesh other = InitDeviceMesh(pg, {2}, {"y"});
    testing::ExpectError(ErrorCode::kInvalidArgument, {"differs from the tensor's", "axes=[y]"},
                         [&] { r.Redistribute(other, ParsePlacements("S(0)")); });
  }, testing::FastRanks());
}

// User redistributes to Partial: the locals (exact partitions, checked value by value), the global value
// (full_tensor), the collectives, and the gradient of a per-rank local gradient (a Partial(sum) one: the
// global gradient is the sum of the ranks' pieces).
TEST(RedistributeTest, PartialTargetsKeepTheValueExactly) {
  struct Case {
    const char* src;
    const char* dst;
    std::string forward, backward;
  };
  const std::vector<Case> cases = {
      {"R", "P(sum)", "", "all_reduce(x) x1"},               // value on coordinate 0 (torch: divided by 4)
      {"R", "P(avg)", "", "all_reduce(x) x1"},               // the value everywhere (as torch)
      {"S(0)", "P(sum)", "", "reduce_scatter(x) x1"},        // the piece in zeros (as torch)
      {"S(1)", "P(sum)", "", "reduce_scatter(x) x1"},
      {"S(0)", "P(max)", "all_gather(x) x1", "reduce_scatter(x) x1"},  // torch refuses this pair
  };
  comm::RunRanks(4, [&](comm::ProcessGroupPtr pg) {
    DeviceMesh mesh = InitDeviceMesh(pg, {4}, {"x"});
    const int64_t me = pg->rank();
    for (const Case& c : cases) {
      for (int64_t n : {12, 13, 14}) {
        const Shape shape = {n, 5};
        SCOPED_TRACE(Str("rank ", me, ": ", c.src, " -> ", c.dst, " at [", n, ", 5]"));
        const std::vector<double> full = Iota(n * 5);
        DTensor x = DistributeTensor(FromDoubles(full, shape, DType::kFloat64), mesh, ParsePlacements(c.src));
        x.set_requires_grad(true);
        comm::CommTracer fwd;
        DTensor y = x.Redistribute(mesh, ParsePlacements(c.dst));
        EXPECT_EQ(fwd.Summary(), c.forward);
        EXPECT_EQ(y.placements(), ParsePlacements(c.dst));
        // The local: the whole value (R sources, P(max)), or zeros except this rank's piece / coordinate 0.
        std::vector<double> want = full;
        const Shard* s = std::get_if<Shard>(&x.placements()[0]);
        const bool sum = std::get<Partial>(y.placements()[0]).reduce_op == comm::ReduceOp::kSum;
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t j = 0; j < 5; ++j) {
            const int64_t along = s == nullptr ? -1 : s->dim == 0 ? i : j;
            const ChunkPiece p = ChunkPieceOf(shape[s == nullptr ? 0 : s->dim], 4, me);
            const bool mine = s == nullptr ? me == 0 : along >= p.offset && along < p.offset + p.size;
            if (sum && !mine) want[static_cast<size_t>(i * 5 + j)] = 0.0;
          }
        }
        EXPECT_EQ(y.ToLocal().ToDoubleVector(), want);
        EXPECT_EQ(y.FullTensor().ToDoubleVector(), full);

        // Backward: rank r's local gradient is (r + 1) * g, declared a P(sum) / P(avg) / P(max) gradient.
        const std::vector<double> g = Iota(n * 5, 0.5, 1.0);
        std::vector<double> mine_g = g;
        for (double& v : mine_g) v *= static_cast<double>(me + 1);
        comm::CommTracer bwd;
        Backward(y.ToLocal(y.placements()), FromDoubles(mine_g, shape, DType::kFloat64));
        EXPECT_EQ(bwd.Summary(), c.backward);
        // The global gradient reduces the ranks' (r + 1) g with the Partial's op: 10 g for sum, 2.5 g for
        // avg, 4 g for max (g >= 0.5).
        const double k = sum ? 10.0 : std::string(c.dst) == "P(avg)" ? 2.5 : 4.0;
        std::vector<double> want_g = g;
        for (double& v : want_g) v *= k;
        DTensor xg = x.grad();
        ASSERT_TRUE(xg.defined());
        EXPECT_EQ(xg.placements(), x.placements());
        EXPECT_EQ(xg.ToLocal().ToDoubleVector(),
                  BoxValues(want_g, shape, GlobalIntervals(xg.spec(), mesh.coordinate())));

        // to_local's default reads the Partial as Replicate (torch 2.15): the same g on every rank is the
        // whole gradient, and no collective runs.
        DTensor x2 = DistributeTensor(FromDoubles(full, shape, DType::kFloat64), mesh, ParsePlacements(c.src));
        x2.set_requires_grad(true);
        DTensor y2 = x2.Redistribute(mesh, ParsePlacements(c.dst));
        comm::CommTracer bwd2;
        Backward(y2.ToLocal(), FromDoubles(g, shape, DType::kFloat64));
        EXPECT_EQ(bwd2.Summary(), "");
        EXPECT_EQ(x2.grad().ToLocal().ToDoubleVector(),
                  BoxValues(g, shape, GlobalIntervals(x2.spec(), mesh.coordinate())));
      }
    }
  }, testing::FastRanks());
}

TEST(RedistributeTest, StridedLocalsGatherAndScatterAlongEveryDim) {
  // Each rank's local is the transpose of a contiguous [4, 6] leaf: local_r[a][b] = (r + 1)·(6b + a), a
  // strided [6, 4]. Reduce-scatters along dim 0 and dim 1 and an all-gather along dim 1 must read it in
  // its own strides (the dim-0 collectives take a contiguous local as it is, the others stage it).
  comm::RunRanks(2, [&](comm::ProcessGroupPtr pg) {
    DeviceMesh mesh = InitDeviceMesh(pg, {2}, {"x"});
    const int r = pg->rank();
    std::vector<double> leaf_values(24);
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 6; ++j) leaf_values[i * 6 + j] = (r + 1) * (6 * i + j);
    }
    const Tensor local = Transpose(FromDoubles(leaf_values, std::vector<int64_t>{4, 6}, DType::kFloat64), 0, 1);
    ASSERT_FALSE(local.is_contiguous());
    const DTensor partial = DTensor::FromLocal(local, mesh, {Partial{}}, {.shape = Shape{6, 4}});
    for (int64_t dim : {0, 1}) {
      SCOPED_TRACE(Str("P(sum) -> S(", dim, ")"));
      comm::CommTracer tracer;
      const Tensor got = partial.Redistribute(mesh, {Shard{dim}}).ToLocal();
      EXPECT_EQ(tracer.Summary(), "reduce_scatter(x) x1");
      std::vector<double> want;  // rows (dim 0) or columns (dim 1) [3r, 3r + 3) / [2r, 2r + 2) of 3·(6b + a)
      for (int a = 0; a < 6; ++a) {
        for (int b = 0; b < 4; ++b) {
          if ((dim == 0 && a / 3 == r) || (dim == 1 && b / 2 == r)) want.push_back(3.0 * (6 * b + a));
        }
      }
      EXPECT_EQ(got.ToDoubleVector(), want);
    }
    const DTensor sharded = DTensor::FromLocal(local, mesh, {Shard{1}}, {.shape = Shape{6, 8}});
    comm::CommTracer tracer;
    const Tensor full = sharded.Redistribute(mesh, {Replicate{}}).ToLocal();
    EXPECT_EQ(tracer.Summary(), "all_gather(x) x1");
    std::vector<double> want;  // column c comes from rank c / 4's column c % 4
    for (int a = 0; a < 6; ++a) {
      for (int c = 0; c < 8; ++c) want.push_back((c / 4 + 1) * (6 * (c % 4) + a));
    }
    EXPECT_EQ(full.ToDoubleVector(), want);
  }, testing::FastRanks());
}

// Property test: random meshes (1-D..3-D, up to 8 ranks), shapes with sizes 0, 1 and non-divisible ones,
// random src/dst placements and orders; Redistribute then FullTensor equals the original, and the
// tracer sees exactly DryRun's collectives. Seeds are printed on failure.
TEST(RedistributeTest, RandomRedistributionsPreserveTheTensor) {
  const std::vector<std::vector<int64_t>> meshes = {{4}, {8}, {2, 2}, {3, 2}, {2, 4}, {2, 2, 2}, {1, 2, 3}};
  int cases = 0;
  for (size_t m = 0; m < meshes.size(); ++m) {
    int64_t world = 1;
    for (int64_t s : meshes[m]) world *= s;
    const int num_cases = 320;
    comm::RunRanks(static_cast<int>(world), [&](comm::ProcessGroupPtr pg) {
      DeviceMesh mesh = InitDeviceMesh(pg, meshes[m]);
      std::mt19937 rng(1000 + static_cast<unsigned>(m));  // same sequence on every rank
      for (int c = 0; c < num_cases; ++c) {
        const unsigned seed = rng();
        std::mt19937 r(seed);
        const int ndim = 1 + static_cast<int>(r() % 3);
        Shape shape;
        for (int d = 0; d < ndim; ++d) shape.push_back(static_cast<int64_t>(r() % 7));
        auto random_placements = [&](bool allow_partial) {
          std::vector<Placement> p;
          for (int a = 0; a < mesh.ndim(); ++a) {
            const int k = static_cast<int>(r() % (ndim + (allow_partial ? 2 : 1)));
            p.push_back(k < ndim ? Placement(Shard{k}) : k == ndim ? Placement(Replicate{}) : Placement(Partial{}));
          }
          return p;
        };
        std::vector<Placement> sp = random_placements(true), dp = random_placements(false);
        ShardOrder so = DefaultShardOrder(sp, ndim), dO = DefaultShardOrder(dp, ndim);
        for (auto& axes : so) std::shuffle(axes.begin(), axes.end(), r);
        for (auto& axes : dO) std::shuffle(axes.begin(), axes.end(), r);
        DTensorSpec src(mesh.topology_ptr(), sp, shape, DType::kFloat64, so);
        DTensorSpec dst(mesh.topology_ptr(), dp, shape, DType::kFloat64, dO);
        SCOPED_TRACE(Str("seed ", seed, ": ", src.ToString(), " -> ", dst.ToString()));
        const std::vector<double> full = Iota(NumElements(shape), 1.0, -3.0);
        Source source = MakeSource(mesh, src, full);
        comm::CommTracer tracer;
        DTensor y(Redistribute(source.x, dst));
        ASSERT_EQ(testing::RecordStrings(tracer), testing::PlannedStrings(DryRun(src, dst, mesh.coordinate())));
        ASSERT_EQ(y.ToLocal().ToDoubleVector(), BoxValues(full, shape, GlobalIntervals(dst, mesh.coordinate())));
        ASSERT_EQ(y.FullTensor().ToDoubleVector(), full);
        if (pg->rank() == 0) ++cases;
      }
    }, testing::FastRanks());
  }
  EXPECT_EQ(cases, 7 * 320);
}

}  // namespace
}  // namespace tessel::dtensor
