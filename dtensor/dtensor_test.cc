#include "dtensor/dtensor.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd/engine.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/optim/optimizer.h"
#include "core/tensor/tensor_impl.h"
#include "dtensor/dtensor_impl.h"
#include "dtensor/testing/dtensor_testing.h"

namespace tessel::dtensor {
namespace {

using testing::BoxValues;
using testing::ExpectError;
using testing::Iota;

TEST(DTensorTest, DistributeTensorKeepsThisRanksPieceWithoutCommunication) {
  comm::RunRanks(4, [](comm::ProcessGroupPtr pg) {
    DeviceMesh mesh = InitDeviceMesh(pg, {2, 2}, {"dp", "tp"});
    const Shape shape = {5, 3};
    Tensor full = FromDoubles(Iota(15), shape, DType::kFloat32);
    comm::CommTracer tracer;
    DTensor d = DistributeTensor(full, mesh, ParsePlacements("S(0), S(-1)"));
    EXPECT_EQ(tracer.Total(), 0);
    EXPECT_EQ(d.placements(), ParsePlacements("S(0), S(1)"));  // Shard(-1) normalized
    EXPECT_EQ(d.shape(), shape);
    EXPECT_EQ(d.dtype(), DType::kFloat32);
    const std::vector<DimInterval> box = GlobalIntervals(d.spec(), mesh.coordinate());
    EXPECT_EQ(d.local_shape(), (Shape{box[0].length, box[1].length}));
    EXPECT_EQ(d.ToLocal().ToDoubleVector(), BoxValues(Iota(15), shape, box));
    EXPECT_FALSE(d.requires_grad());
  }, testing::FastRanks());
}

TEST(DTensorTest, DTensorIsADistributedTensorImplBehindTheTensorHandle) {
  comm::RunRanks(2, [](comm::ProcessGroupPtr pg) {
    DeviceMesh mesh = InitDeviceMesh(pg, {2}, {"x"});
    DTensor d = DistributeTensor(FromDoubles(Iota(6), Shape{6}, DType::kFloat64), mesh, ParsePlacements("S(0)"));
    const Tensor& t = d;
    EXPECT_TRUE(t.is_distributed());
    EXPECT_EQ(t.impl()->KindName(), "DTensor");
    EXPECT_EQ(t.sizes(), (Shape{6}));  // global
    EXPECT_EQ(t.ToString().substr(0, 7), "DTensor");
    ExpectError(ErrorCode::kFailedPrecondition, {"has no local storage"}, [&] { t.raw_data(); });
    // Version: in-place writes through the local alias are visible on the DTensor.
    const uint32_t v0 = t.impl()->version();
    Tensor local = d.ToLocal();
    FillInPlace(local, 7.0);
    EXPECT_GT(t.impl()->version(), v0);
    EXPECT_EQ(d.ToLocal().ToDoubleVector(), (std::vector<double>{7, 7, 7}));
    // ShallowCopyDetached keeps data and spec, drops autograd state.
    DTensor leaf = DistributeTensor(FromDoubles(Iota(6), Shape{6}, DType::kFloat64), mesh, ParsePlacements("S(0)"));
    leaf.set_requires_grad(true);
    DTensor detached(Tensor(leaf.tensor().impl()->ShallowCopyDetached()));
    EXPECT_FALSE(detached.requires_grad());
    EXPECT_EQ(detached.spec(), leaf.spec());
    EXPECT_TRUE(detached.ToLocal().impl()->storage().is_same(leaf.ToLocal().impl()->storage()));
    EXPECT_EQ(d.ToString(), Str("DTensor(local=[3], spec=DTensorSpec(mesh=(x=2), placements=[S(0)], shape=[6], ",
                                "dtype=float64))"));
  }, testing::FastRanks());
}

TEST(DTensorTest, DataAssignmentTakesAnotherDTensorsShardsAndDTypeOnTheSameMesh) {
  comm::RunRanks(2, [](comm::ProcessGroupPtr pg) {
    DeviceMesh mesh = InitDeviceMesh(pg, {2}, {"x"});
    DeviceMesh other = InitDeviceMesh(pg, {2}, {"y"});
    DTensor p = DistributeTensor(FromDoubles(Iota(6), Shape{6}, DType::kFloat32), mesh, ParsePlacements("S(0)"));
    p.set_requires_grad(true);
    const Tensor handle = p;  // another handle of the same parameter (a module's, an optimizer's)
    DTensor cast = DistributeTensor(FromDoubles({.5, 1, 2, 3, 4, 5}, Shape{6}, DType::kFloat64), mesh,
                                    ParsePlacements("S(0)"));
    handle.impl()->SetDataFrom(*cast.tensor().impl(), /*as_data=*/true);  // torch's `p.data = cast`
    const DTensor seen(handle);
    EXPECT_EQ(seen.dtype(), DType::kFloat64);
    EXPECT_EQ(seen.spec(), cast.spec());
    EXPECT_TRUE(seen.requires_grad());
    EXPECT_TRUE(seen.ToLocal().impl()->storage().is_same(cast.ToLocal().impl()->storage()));
    const std::vector<double> mine = pg->rank() == 0 ? std::vector<double>{.5, 1, 2} : std::vector<double>{3, 4, 5};
    EXPECT_EQ(seen.ToLocal().ToDoubleVector(), mine);
    DTensor elsewhere =
        DistributeTensor(FromDoubles(Iota(6), Shape{6}, DType::kFloat32), other, ParsePlacements("S(0)"));
    ExpectError(ErrorCode::kInvalidArgument, {"Tensor.data = value", "axes=[x]", "axes=[y]"},
                [&] { handle.impl()->SetDataFrom(*elsewhere.tensor().impl(), true); });
    ExpectError(ErrorCode::kFailedPrecondition, {"Tensor.data = value: two dense tensors or two DTensors", "DTensor",
                                                 "dense"},
                [&] { handle.impl()->SetDataFrom(*Zeros({6}).impl(), true); });
    ExpectError(ErrorCode::kFailedPrecondition, {"Tensor.set_: dense tensors only"},
                [&] { handle.impl()->SetDataFrom(*cast.tensor().impl()); });
  }, testing::FastRanks());
}

TEST(DTensorTest, SourceRankIsBroadcastOverTheMesh) {
  comm::RunRanks(4, [](comm::ProcessGroupPtr pg) {
    DeviceMesh mesh = InitDeviceMesh(pg, {2, 2}, {"dp", "tp"});
    // Only rank 3 has the real data.
    std::vector<double> values = pg->rank() == 3 ? Iota(8) : std::vector<double>(8, -1.0);
    Tensor full = FromDoubles(values, Shape{8}, DType::kFloat64);
    comm::CommTracer tracer;
    DTensor d = DistributeTensor(full, mesh, ParsePlacements("R, S(0)"), {.src_rank = 3});
    EXPECT_EQ(tracer.Summary(), "broadcast(dp) x1, broadcast(tp) x1");
    const int64_t tp = mesh.local_rank("tp");
    EXPECT_EQ(d.ToLocal().ToDoubleVector(), (std::vector<double>{4.0 * tp, 4.0 * tp + 1, 4.0 * tp + 2, 4.0 * tp + 3}));
    EXPECT_EQ(full.ToDoubleVector(), values);  // the caller's tensor is untouched
    ExpectError(ErrorCode::kInvalidArgument, {"src_rank 9 is not in"},
                [&] { DistributeTensor(full, mesh, ParsePlacements("R, R"), {.src_rank = 9}); });
  }, testing::FastRanks());
}

TEST(DTensorTest, DistributeTensorReplicasTakeSrcDataRanksValuesByDefault) {
  comm::RunRanks(4, [](comm::ProcessGroupPtr pg) {
    DeviceMesh mesh = InitDeviceMesh(pg, {2, 2}, {"dp", "tp"});
    // Every rank passes a different tensor (what a raced, shared Generator gives).
    Tensor full = FromDoubles(std::vector<double>(8, 10.0 * pg->rank()), Shape{8}, DType::kFloat64);
    comm::CommTracer tracer;
    DTensor r = DistributeTensor(full, mesh, ParsePlacements("R, R"));
    EXPECT_EQ(tracer.Summary(), "broadcast(dp) x1, broadcast(tp) x1");
    EXPECT_EQ(r.ToLocal().ToDoubleVector(), std::vector<double>(8, 0.0));  // rank 0's values everywhere
    // Sharded over tp, replicated over dp: the tp pieces come from the dp coordinate of src_data_rank 3.
    comm::CommTracer one;
    DTensor s = DistributeTensor(full, mesh, ParsePlacements("R, S(0)"), {.src_data_rank = 3});
    EXPECT_EQ(one.Summary(), "broadcast(dp) x1");
    EXPECT_EQ(s.ToLocal().ToDoubleVector(), std::vector<double>(4, 10.0 * (2 + mesh.local_rank("tp"))));
    // kLocal: PyTorch's src_data_rank=None, no communication, each rank keeps its own values.
    comm::CommTracer none;
    DTensor own = DistributeTensor(full, mesh, ParsePlacements("R, R"), {.replicas = ReplicaSource::kLocal});
    EXPECT_EQ(none.Total(), 0);
    EXPECT_EQ(own.ToLocal().ToDoubleVector(), std::vector<double>(8, 10.0 * pg->rank()));
  }, testing::FastRanks());
}

TEST(DTensorTest, DistributeTensorCheckedModeNamesTheRanksWhoseTensorDiffers) {
  comm::RunRanks(4, [](comm::ProcessGroupPtr pg) {
    DeviceMesh mesh = InitDeviceMesh(pg, {2, 2}, {"dp", "tp"});
    Tensor same = FromDoubles(Iota(6), Shape{2, 3}, DType::kFloat32);
    comm::CommTracer tracer;
    DTensor ok = DistributeTensor(same, mesh, ParsePlacements("R, S(1)"), {.replicas = ReplicaSource::kCheck});
    EXPECT_EQ(tracer.Summary(), "all_gather(tp) x1, all_gather(dp) x1");  // 8 bytes each, no data moved
    EXPECT_EQ(ok.ToLocal().sizes(), (Shape{2, mesh.local_rank("tp") == 0 ? 2 : 1}));
    std::vector<double> v = Iota(6);
    if (pg->rank() == 1 || pg->rank() == 2) v[5] += 1e-3;  // one element differs on ranks 1 and 2
    ExpectError(ErrorCode::kInvalidArgument, {"differs on rank(s) [1, 2] from rank 0's", "[2, 3]", "same seed"}, [&] {
      DistributeTensor(FromDoubles(v, Shape{2, 3}, DType::kFloat32), mesh, ParsePlacements("R, R"),
                       {.replicas = ReplicaSource::kCheck});
    });
  }, testing::FastRanks());
}

TEST(DTensorTest, DistributeTensorRejectsPartialAndBadPlacements) {
  comm::RunRanks(2, [](comm::ProcessGroupPtr pg) {
    DeviceMesh mesh = InitDeviceMesh(pg, {2}, {"x"});
    ExpectError(ErrorCode::kInvalidArgument, {"places P(sum) on mesh axis 0", "use DTensor::FromLocal"},
                [&] { DistributeTensor(Zeros({4}), mesh, ParsePlacements("P(sum)")); });
    ExpectError(ErrorCode::kInvalidArgument, {"S(1) on axis 'x' needs 0 <= dim < ndim = 1", "shape [4]"},
                [&] { DistributeTensor(Zeros({4}), mesh, ParsePlacements("S(1)")); });
    ExpectError(ErrorCode::kInvalidArgument, {"2 placements for a 1-d mesh"},
                [&] { DistributeTensor(Zeros({4}), mesh, ParsePlacements("S(0), R")); });
  }, testing::FastRanks());
}

TEST(DTensorTest, FromLocalAssumesEvenShardsUnlessTold) {
  comm::RunRanks(4, [](comm::ProcessGroupPtr pg) {
    DeviceMesh mesh = InitDeviceMesh(pg, {2, 2}, {"dp", "tp"});
    DTensor even = DTensor::FromLocal(Zeros({2, 3}), mesh, ParsePlacements("S(0), S(1)"));
    EXPECT_EQ(even.shape(), (Shape{4, 6}));
    EXPECT_EQ(even.spec().strides(), (Shape{6, 1}));
    // Uneven: 5 rows over dp -> [3, 2]; the global shape must be given (or derived by run_check).
    const int64_t rows = mesh.local_rank("dp") == 0 ? 3 : 2;
    DTensor uneven = DTensor::FromLocal(Zeros({rows, 3}), mesh, ParsePlacements("S(0), R"), {.shape = Shape{5, 3}});
    EXPECT_EQ(uneven.shape(), (Shape{5, 3}));
    DTensor derived = DTensor::FromLocal(Zeros({rows, 3}), mesh, ParsePlacements("S(0), R"), {.run_check = true});
    EXPECT_EQ(derived.shape(), (Shape{5, 3}));
    ExpectError(ErrorCode::kInvalidArgument, {"holds a local tensor of shape [", "needs ["}, [&] {
      DTensor::FromLocal(Zeros({rows, 3}), mesh, ParsePlacements("S(0), R"), {.shape = Shape{7, 3}});
    });
  }, testing::FastRanks());
}

TEST(DTensorTest, FromLocalRunCheckRaisesTheSameErrorOnEveryRank) {
  comm::RunRanks(4, [](comm::ProcessGroupPtr pg) {
    DeviceMesh mesh = InitDeviceMesh(pg, {4}, {"x"});
    // S(0) of 9 rows needs [3, 3, 3, 0]; rank 3 claims 1 row.
    const int64_t rows = pg->rank() == 3 ? 1 : 3;
    comm::CommTracer tracer;
    ExpectError(ErrorCode::kInvalidArgument,
                {"FromLocal(run_check): rank 3 at coordinate [3] has local shape [1, 2]", "needs [0, 2]",
                 "inconsistent"},
                [&] {
                  DTensor::FromLocal(Zeros({rows, 2}), mesh, ParsePlacements("S(0)"),
                                     {.shape = Shape{9, 2}, .run_check = true});
                });
    EXPECT_EQ(tracer.Summary(), "all_gather(x) x1");
    ExpectError(ErrorCode::kInvalidArgument, {"rank 1 passed a 2-d float32 local tensor but rank 0 passed a 1-d float32 one"}, [&] {
      DTensor::FromLocal(pg->rank() == 0 ? Zeros({3}) : Zeros({3, 2}), mesh, ParsePlacements("S(0)"),
                         {.run_check = true});
    });
  }, testing::FastRanks());
}

TEST(DTensorTest, ToLocalAndFromLocalAreDifferentiable) {
  comm::RunRanks(2, [](comm::ProcessGroupPtr pg) {
    DeviceMesh mesh = InitDeviceMesh(pg, {2}, {"x"});
    Tensor leaf = FromDoubles(Iota(3), Shape{3}, DType::kFloat64);
    leaf.set_requires_grad(true);
    DTensor d = DTensor::FromLocal(leaf, mesh, ParsePlacements("S(0)"));
    EXPECT_TRUE(d.requires_grad());
    Tensor local = d.ToLocal();
    Backward(local, FromDoubles({1, 2, 3}, Shape{3}, DType::kFloat64));
    EXPECT_EQ(leaf.grad().ToDoubleVector(), (std::vector<double>{1, 2, 3}));
    // grad_placements: the local gradient is declared Partial; FromLocal's backward reduces it to the
    // forward placement Replicate (one all_reduce).
    Tensor leaf2 = FromDoubles(Iota(4), Shape{4}, DType::kFloat64);
    leaf2.set_requires_grad(true);
    DTensor r = DTensor::FromLocal(leaf2, mesh, ParsePlacements("R"));
    Tensor out = r.ToLocal(ParsePlacements("P(sum)"));
    comm::CommTracer tracer;
    Backward(out, FromDoubles({1, 1, 1, 1}, Shape{4}, DType::kFloat64));
    EXPECT_EQ(tracer.Summary(), "all_reduce(x) x1");
    EXPECT_EQ(leaf2.grad().ToDoubleVector(), (std::vector<double>{2, 2, 2, 2}));
  }, testing::FastRanks());
}

TEST(DTensorTest, FromLocalGradPlacementsKeepTheGradientInThatLayout) {
  comm::RunRanks(2, [](comm::ProcessGroupPtr pg) {
    DeviceMesh mesh = InitDeviceMesh(pg, {2}, {"x"});
    // A Partial forward whose Replicate gradient is asked back as Partial: no collective, the local pieces
    // sum to the gradient (rank 0 holds it, rank 1 zeros: the exact partition, placement.h (d)).
    Tensor leaf = FromDoubles(Iota(3), Shape{3}, DType::kFloat64);
    leaf.set_requires_grad(true);
    DTensor p = DTensor::FromLocal(leaf, mesh, ParsePlacements("P(sum)"),
                                   {.grad_placements = ParsePlacements("P(sum)")});
    Tensor full = p.Redistribute(mesh, ParsePlacements("R")).ToLocal();
    comm::CommTracer tracer;
    Backward(full, FromDoubles({1, 2, 3}, Shape{3}, DType::kFloat64));
    EXPECT_EQ(tracer.Total(), 0);
    const std::vector<double> want = pg->rank() == 0 ? std::vector<double>{1, 2, 3} : std::vector<double>{0, 0, 0};
    EXPECT_EQ(leaf.grad().ToDoubleVector(), want);
    // Shard(-1) is normalized; a wrong count names the mesh.
    Tensor l2 = FromDoubles(Iota(2), Shape{2}, DType::kFloat64);
    EXPECT_NO_THROW(DTensor::FromLocal(l2, mesh, ParsePlacements("S(0)"), {.grad_placements = {{Shard{-1}}}}));
    testing::ExpectError(ErrorCode::kInvalidArgument, {"FromLocal: grad_placements [R, R] has 2 entries", "mesh"},
                         [&] { DTensor::FromLocal(l2, mesh, ParsePlacements("S(0)"),
                                                  {.grad_placements = ParsePlacements("R, R")}); });
  }, testing::FastRanks());
}

TEST(DTensorTest, FullTensorGathersEveryPiece) {
  comm::RunRanks(6, [](comm::ProcessGroupPtr pg) {
    DeviceMesh mesh = InitDeviceMesh(pg, {3, 2}, {"dp", "tp"});
    DTensor d = DistributeTensor(FromDoubles(Iota(8), Shape{8}, DType::kFloat64), mesh, ParsePlacements("S(0), S(0)"));
    const std::vector<std::vector<double>> locals = {{0, 1}, {2}, {3, 4}, {5}, {6}, {7}};
    EXPECT_EQ(d.ToLocal().ToDoubleVector(), locals[static_cast<size_t>(pg->rank())]);
    comm::CommTracer tracer;
    EXPECT_EQ(d.FullTensor().ToDoubleVector(), Iota(8));
    EXPECT_EQ(tracer.Summary(), "all_gather(tp) x1, all_gather(dp) x1");
  }, testing::FastRanks());
}

TEST(DTensorTest, ItemAndToDoubleVectorReadTheFullValue) {
  comm::RunRanks(2, [](comm::ProcessGroupPtr pg) {
    DeviceMesh mesh = InitDeviceMesh(pg, {2}, {"x"});
    DTensor d = DistributeTensor(FromDoubles(Iota(5), Shape{5}, DType::kFloat64), mesh, ParsePlacements("S(0)"));
    comm::CommTracer tracer;
    EXPECT_EQ(d.tensor().ToDoubleVector(), Iota(5));  // all-gathers the uneven shards
    // A Partial scalar (the sum of this rank's squares) reads as the reduced value: 0+1+4 + 9+16.
    const Tensor sq = Sum(Mul(d.tensor(), d.tensor()));
    ASSERT_TRUE(sq.is_distributed());
    EXPECT_EQ(sq.item<double>(), 30.0);
    EXPECT_EQ(tracer.Summary(), "all_gather(x) x1, all_reduce(x) x1");
  }, testing::FastRanks());
}

TEST(DTensorTest, ClipGradNormOnDTensorGradsEqualsTheDenseComputation) {
  // Shard(0) weight (uneven rows) and a Replicate bias: the norm counts each element once.
  const std::vector<double> w_grad = {3, -1, 2, 0.5, -4, 1, 2};
  const std::vector<double> b_grad = {1, -2};
  double dense_sq = 0;
  for (double g : w_grad) dense_sq += g * g;
  for (double g : b_grad) dense_sq += g * g;
  const double dense_norm = std::sqrt(dense_sq), max_norm = 2.0;
  comm::RunRanks(2, [&](comm::ProcessGroupPtr pg) {
    DeviceMesh mesh = InitDeviceMesh(pg, {2}, {"x"});
    DTensor w = DistributeTensor(Zeros({7}, DType::kFloat64), mesh, ParsePlacements("S(0)"));
    DTensor b = DistributeTensor(Zeros({2}, DType::kFloat64), mesh, ParsePlacements("R"));
    w.set_requires_grad(true);
    b.set_requires_grad(true);
    w.tensor().set_grad(DistributeTensor(FromDoubles(w_grad, Shape{7}, DType::kFloat64), mesh, ParsePlacements("S(0)")).tensor());
    b.tensor().set_grad(DistributeTensor(FromDoubles(b_grad, Shape{2}, DType::kFloat64), mesh, ParsePlacements("R")).tensor());
    const double norm = optim::ClipGradNorm({w.tensor(), b.tensor()}, max_norm);
    EXPECT_NEAR(norm, dense_norm, 1e-12);
    const double coef = max_norm / (dense_norm + 1e-6);
    const std::vector<double> got_w = w.tensor().grad().ToDoubleVector();
    const std::vector<double> got_b = b.tensor().grad().ToDoubleVector();
    for (size_t i = 0; i < w_grad.size(); ++i) EXPECT_NEAR(got_w[i], w_grad[i] * coef, 1e-12) << i;
    for (size_t i = 0; i < b_grad.size(); ++i) EXPECT_NEAR(got_b[i], b_grad[i] * coef, 1e-12) << i;
  }, testing::FastRanks());
}

TEST(DTensorTest, MakeDTensorChecksTheLocalShape) {
  comm::RunRanks(2, [](comm::ProcessGroupPtr pg) {
    DeviceMesh mesh = InitDeviceMesh(pg, {2}, {"x"});
    DTensorSpec spec(mesh.topology_ptr(), ParsePlacements("S(0)"), Shape{5}, DType::kFloat32);
    ExpectError(ErrorCode::kInvalidArgument, {"holds a local tensor of shape [4] float32", "needs ["},
                [&] { MakeDTensor(Zeros({4}), spec, mesh); });
    ExpectError(ErrorCode::kInvalidArgument, {"expected a DTensor, got dense tensor of shape [4]"},
                [&] { DTensor(Zeros({4})); });
  }, testing::FastRanks());
}

}  // namespace
}  // namespace tessel::dtensor
