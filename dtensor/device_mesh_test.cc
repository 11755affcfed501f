#include "dtensor/device_mesh.h"

#include <gtest/gtest.h>

#include <mutex>

#include "comm/backends/threads.h"
#include "comm/tracer.h"
#include "core/base/error.h"
#include "core/tensor/factory.h"
#include "core/base/testing/expect_error.h"

namespace tessel::dtensor {
namespace {

comm::RunRanksOptions Fast() { return {.timeout = std::chrono::milliseconds(5000)}; }

// (code, fragment, fn): the long lambda last. The check itself is core/base/testing/expect_error.h.
void ExpectError(ErrorCode code, const std::string& fragment, const std::function<void()>& fn) {
  ::tessel::testing::ExpectErrorContains(fn, code, fragment);
}

// Sum of the global ranks of the calling rank's group on `axis`, through that axis' group.
double AxisSum(const DeviceMesh& mesh, std::string_view axis) {
  Tensor t = Full({1}, mesh.global_rank(), DType::kFloat64);
  mesh.axis_group(axis)->AllReduce(t, comm::ReduceOp::kSum)->Wait();
  return t.item<double>();
}

TEST(DeviceMeshTest, InitDeviceMeshBuildsOneNamedGroupPerAxis) {
  comm::RunRanks(4, [](comm::ProcessGroupPtr world) {
    DeviceMesh mesh = InitDeviceMesh(world, {2, 2}, {"dp", "tp"});
    const int r = world->rank();
    EXPECT_EQ(mesh.ToString(), "DeviceMesh(shape=[2, 2], axes=[dp, tp], ranks=[[0, 1], [2, 3]])");
    EXPECT_EQ(mesh.coordinate(), (std::vector<int64_t>{r / 2, r % 2}));
    EXPECT_EQ(mesh.local_rank("dp"), r / 2);
    EXPECT_EQ(mesh.local_rank("tp"), r % 2);
    EXPECT_EQ(mesh.size(), 4);
    EXPECT_EQ(mesh.size("tp"), 2);
    EXPECT_EQ(mesh.axis_group("tp")->global_ranks(), (std::vector<int>{r / 2 * 2, r / 2 * 2 + 1}));
    EXPECT_EQ(mesh.axis_group("dp")->global_ranks(), (std::vector<int>{r % 2, r % 2 + 2}));
    EXPECT_EQ(mesh.axis_group("tp")->name(), "tp");
    EXPECT_EQ(mesh.axis_group(0)->name(), "dp");
    EXPECT_EQ(mesh.axis_group("tp")->rank(), r % 2);
    comm::CommTracer tracer;
    EXPECT_EQ(AxisSum(mesh, "tp"), (r / 2 * 2) * 2 + 1);
    EXPECT_EQ(AxisSum(mesh, "dp"), (r % 2) * 2 + 2);
    EXPECT_EQ(tracer.Summary(), "all_reduce(tp) x1, all_reduce(dp) x1");
  }, Fast());
}

// torch's DeviceMesh(device_type, mesh): any layout of the world's ranks; the axis groups follow it.
TEST(DeviceMeshTest, InitDeviceMeshWithARankLayout) {
  comm::RunRanks(4, [](comm::ProcessGroupPtr world) {
    DeviceMesh mesh = InitDeviceMesh(world, {2, 2}, {"dp", "tp"}, std::vector<int>{0, 2, 1, 3});
    const int r = world->rank();
    EXPECT_EQ(mesh.ToString(), "DeviceMesh(shape=[2, 2], axes=[dp, tp], ranks=[[0, 2], [1, 3]])");
    EXPECT_EQ(mesh.coordinate(), (std::vector<int64_t>{r % 2, r / 2}));
    EXPECT_EQ(mesh.axis_group("tp")->global_ranks(), (std::vector<int>{r % 2, r % 2 + 2}));
    EXPECT_EQ(AxisSum(mesh, "tp"), (r % 2) * 2 + 2);
    ExpectError(ErrorCode::kInvalidArgument, "are not the ranks of the world group 'world' [0, 1, 2, 3] each once",
                [&] { InitDeviceMesh(world, {4}, {"x"}, std::vector<int>{0, 1, 1, 3}); });
  }, Fast());
}

// torch's DeviceMesh.from_group: the 1-D mesh over an existing group uses that group (no new one), named
// after it, with the group's global ranks and this rank's group rank as its coordinate.
TEST(DeviceMeshTest, MeshOfGroupWrapsTheGroupItself) {
  comm::RunRanks(4, [](comm::ProcessGroupPtr world) {
    const int r = world->rank();
    comm::ProcessGroupPtr even = world->NewGroup({0, 2}), odd = world->NewGroup({1, 3});  // same order everywhere
    comm::ProcessGroupPtr odd_even = r % 2 == 0 ? even : odd;
    odd_even->set_name("pairs");
    DeviceMesh mesh = MeshOfGroup(odd_even);
    EXPECT_EQ(mesh.axis_group(0), odd_even);
    EXPECT_EQ(mesh.ToString(), r % 2 == 0 ? "DeviceMesh(shape=[2], axes=[pairs], ranks=[0, 2])"
                                          : "DeviceMesh(shape=[2], axes=[pairs], ranks=[1, 3])");
    EXPECT_EQ(mesh.coordinate(), (std::vector<int64_t>{r / 2}));
    EXPECT_EQ(mesh.global_rank(), r);
    EXPECT_EQ(MeshOfGroup(world, "dp").axis_names(), (std::vector<std::string>{"dp"}));
    comm::CommTracer tracer;
    EXPECT_EQ(AxisSum(mesh, "pairs"), r % 2 == 0 ? 2 : 4);
    EXPECT_EQ(tracer.Summary(), "all_reduce(pairs) x1");
    ExpectError(ErrorCode::kInvalidArgument, "no process group", [] { MeshOfGroup(nullptr); });
  }, Fast());
}

TEST(DeviceMeshTest, SubMeshesReuseTheAxisGroups) {
  comm::RunRanks(8, [](comm::ProcessGroupPtr world) {
    DeviceMesh mesh = InitDeviceMesh(world, {2, 2, 2}, {"pp", "dp", "tp"});
    const int r = world->rank();
    DeviceMesh tp = mesh["tp"];
    EXPECT_EQ(tp.ndim(), 1);
    EXPECT_EQ(tp.topology().ranks(), (std::vector<int>{r / 2 * 2, r / 2 * 2 + 1}));
    EXPECT_EQ(tp.axis_group(0), mesh.axis_group("tp"));
    DeviceMesh pp_tp = mesh[{"pp", "tp"}];
    const int dp = (r / 2) % 2;
    EXPECT_EQ(pp_tp.topology().ranks(), (std::vector<int>{2 * dp, 2 * dp + 1, 4 + 2 * dp, 5 + 2 * dp}));
    EXPECT_EQ(pp_tp.coordinate(), (std::vector<int64_t>{r / 4, r % 2}));
    EXPECT_EQ(pp_tp.axis_group("pp"), mesh.axis_group("pp"));
    EXPECT_TRUE((mesh[{"pp", "dp", "tp"}] == mesh));
    EXPECT_FALSE(tp == mesh);
    EXPECT_EQ(AxisSum(pp_tp, "tp"), (r / 2 * 2) * 2 + 1);
  }, Fast());
}

TEST(DeviceMeshTest, FlattenCreatesOneGroupOverTheAxes) {
  comm::RunRanks(8, [](comm::ProcessGroupPtr world) {
    DeviceMesh mesh = InitDeviceMesh(world, {2, 2, 2}, {"pp", "dp", "tp"});
    const int r = world->rank();
    DeviceMesh flat = mesh.Flatten({"dp", "tp"}, "dp_tp");
    EXPECT_EQ(flat.ToString(), Str("DeviceMesh(shape=[4], axes=[dp_tp], ranks=[", r / 4 * 4, ", ", r / 4 * 4 + 1,
                                   ", ", r / 4 * 4 + 2, ", ", r / 4 * 4 + 3, "])"));
    EXPECT_EQ(flat.local_rank(0), r % 4);
    EXPECT_EQ(flat.axis_group(0)->name(), "dp_tp");
    const int base = r / 4 * 4;
    EXPECT_EQ(AxisSum(flat, "dp_tp"), 4 * base + 6);
    // Flatten on a sub-mesh: every rank calls it, groups are made over the root mesh.
    DeviceMesh pp_dp = mesh[{"pp", "dp"}].Flatten({"pp", "dp"}, "pp_dp");
    EXPECT_EQ(pp_dp.size(), 4);
    EXPECT_EQ(AxisSum(pp_dp, "pp_dp"), (r % 2) * 4 + 12);
  }, Fast());
}

TEST(DeviceMeshTest, TheRootSlicesFlattenedAxesAndFlattenIsCachedByName) {
  // torchtitan's HSDP + context parallel meshes: (dp_replicate, dp_shard, cp) with dp_shard and cp flattened.
  comm::RunRanks(8, [](comm::ProcessGroupPtr world) {
    DeviceMesh root = InitDeviceMesh(world, {2, 2, 2}, {"dp_replicate", "dp_shard", "cp"});
    const int r = world->rank();
    DeviceMesh flat = root[{"dp_shard", "cp"}].Flatten({"dp_shard", "cp"}, "dp_shard_cp");
    DeviceMesh again = root[{"dp_shard", "cp"}].Flatten({"dp_shard", "cp"}, "dp_shard_cp");
    EXPECT_EQ(again.axis_group(0), flat.axis_group(0));  // the same group: no second NewGroup
    DeviceMesh by_name = root["dp_shard_cp"];
    EXPECT_TRUE(by_name == flat);
    EXPECT_EQ(by_name.axis_group(0), flat.axis_group(0));
    EXPECT_EQ(AxisSum(by_name, "dp_shard_cp"), r / 4 * 16 + 6);  // ranks 4·(r / 4) + {0, 1, 2, 3}
    DeviceMesh hsdp = root[{"dp_replicate", "dp_shard_cp"}];
    EXPECT_EQ(hsdp.ToString(), "DeviceMesh(shape=[2, 4], axes=[dp_replicate, dp_shard_cp], ranks=[[0, 1, 2, 3], "
                               "[4, 5, 6, 7]])");
    EXPECT_EQ(hsdp.coordinate(), (std::vector<int64_t>{r / 4, r % 4}));
    EXPECT_EQ(hsdp.axis_group("dp_replicate"), root.axis_group("dp_replicate"));
    EXPECT_EQ(AxisSum(hsdp, "dp_replicate"), 2 * (r % 4) + 4);
    EXPECT_EQ(hsdp.axis_group("dp_shard_cp"), flat.axis_group(0));
    // Errors: the name for other axes, overlapping or unordered names, unknown names (listing both kinds).
    ExpectError(ErrorCode::kInvalidArgument, "name 'dp_shard_cp' already names other flattened axes",
                [&] { root[{"dp_replicate", "dp_shard"}].Flatten({"dp_replicate", "dp_shard"}, "dp_shard_cp"); });
    ExpectError(ErrorCode::kInvalidArgument, "overlap or are not in the root mesh's order",
                [&] { root[{"dp_shard", "dp_shard_cp"}]; });
    ExpectError(ErrorCode::kInvalidArgument, "overlap or are not in the root mesh's order",
                [&] { root[{"dp_shard_cp", "dp_replicate"}]; });
    ExpectError(ErrorCode::kInvalidArgument, "unknown axis 'tp'; the mesh has axes [dp_replicate, dp_shard, cp] and "
                "flattened axes [dp_shard_cp]", [&] { root["tp"]; });
    // Only the root slices flattened names (a sub-mesh reports its own axes).
    ExpectError(ErrorCode::kInvalidArgument, "unknown axis 'dp_shard_cp'",
                [&] { root[{"dp_shard", "cp"}]["dp_shard_cp"]; });
  }, Fast());
}

TEST(DeviceMeshTest, JoinTakesAFlattenedAxisAsFsdpOverDpShardCpWithTensorParallelism) {
  // torchtitan: fully_shard over the flattened (dp_shard, cp) and tensor parallelism on tp; FSDP joins the two.
  comm::RunRanks(8, [](comm::ProcessGroupPtr world) {
    DeviceMesh root = InitDeviceMesh(world, {2, 2, 2}, {"dp_shard", "cp", "tp"});
    const int r = world->rank();
    DeviceMesh dp = root[{"dp_shard", "cp"}].Flatten({"dp_shard", "cp"}, "dp_shard_cp");
    DeviceMesh tp = root["tp"];
    DeviceMesh joint = tp.Join(dp);  // in root order whichever side calls
    EXPECT_TRUE(joint == dp.Join(tp));
    EXPECT_EQ(joint.ToString(), "DeviceMesh(shape=[4, 2], axes=[dp_shard_cp, tp], ranks=[[0, 1], [2, 3], [4, 5], "
                                "[6, 7]])");
    EXPECT_EQ(joint.coordinate(), (std::vector<int64_t>{r / 2, r % 2}));
    EXPECT_EQ(joint.axis_group("dp_shard_cp"), dp.axis_group(0));
    EXPECT_EQ(joint.axis_group("tp"), root.axis_group("tp"));
    EXPECT_EQ(AxisSum(joint, "dp_shard_cp"), 4 * (r % 2) + 12);
    // The joint mesh flattens again (clip_grad_norm_ reduces over all of an FSDP + TP parameter's mesh).
    DeviceMesh all = joint.Flatten(joint.axis_names(), "dp_shard_cp_tp");
    EXPECT_EQ(all.size(), 8);
    EXPECT_EQ(AxisSum(all, "dp_shard_cp_tp"), 28);
    // A flattened axis overlapping the other mesh's root axes, or interleaving with them, cannot join.
    ExpectError(ErrorCode::kInvalidArgument, "overlap or are not in the root mesh's order",
                [&] { root["cp"].Join(dp); });
    DeviceMesh dp_tp = root[{"dp_shard", "tp"}].Flatten({"dp_shard", "tp"}, "dp_shard_tp");
    ExpectError(ErrorCode::kInvalidArgument, "overlap or are not in the root mesh's order",
                [&] { dp_tp.Join(root["cp"]); });
  }, Fast());
}

TEST(DeviceMeshTest, ThreeByTwoMeshHasUnevenAxes) {
  comm::RunRanks(6, [](comm::ProcessGroupPtr world) {
    DeviceMesh mesh = InitDeviceMesh(world, {3, 2}, {"dp", "tp"});
    const int r = world->rank();
    EXPECT_EQ(mesh.axis_group("dp")->size(), 3);
    EXPECT_EQ(mesh.axis_group("dp")->global_ranks(), (std::vector<int>{r % 2, r % 2 + 2, r % 2 + 4}));
    EXPECT_EQ(AxisSum(mesh, "dp"), 3 * (r % 2) + 6);
  }, Fast());
}

TEST(DeviceMeshTest, BadShapesAndNamesRaiseInvalidArgument) {
  comm::RunRanks(4, [&](comm::ProcessGroupPtr world) {
    ExpectError(ErrorCode::kInvalidArgument, "mesh shape [2, 3] holds 6 ranks but the world group 'world' has 4",
                [&] { InitDeviceMesh(world, {2, 3}, {"dp", "tp"}); });
    ExpectError(ErrorCode::kInvalidArgument, "duplicate axis name 'dp'",
                [&] { InitDeviceMesh(world, {2, 2}, {"dp", "dp"}); });
    DeviceMesh mesh = InitDeviceMesh(world, {2, 2}, {"dp", "tp"});
    ExpectError(ErrorCode::kInvalidArgument, "unknown axis 'pp'", [&] { mesh["pp"]; });
    ExpectError(ErrorCode::kInvalidArgument, "must be distinct and in mesh order", [&] { mesh[{"tp", "dp"}]; });
    ExpectError(ErrorCode::kInvalidArgument, "unknown axis 'cp'", [&] { mesh.axis_group("cp"); });
    ExpectError(ErrorCode::kInvalidArgument, "name 'tp' is already an axis",
                [&] { mesh.Flatten({"dp", "tp"}, "tp"); });
  }, Fast());
}

TEST(DeviceMeshTest, AMeshOverSomeRanksIsBuiltByThemAlone) {
  // torch's DeviceMesh over part of the world: only its ranks communicate; rank 2 gets a mesh it is not part of
  comm::RunRanks(5, [](comm::ProcessGroupPtr world) {
    const int r = world->rank();
    DeviceMesh mesh = InitDeviceMesh(world, {2, 2}, {"dp", "tp"}, std::vector<int>{3, 1, 4, 0});
    EXPECT_EQ(mesh.ToString(), "DeviceMesh(shape=[2, 2], axes=[dp, tp], ranks=[[3, 1], [4, 0]])");
    if (r == 2) {
      EXPECT_FALSE(mesh.is_member());
      EXPECT_EQ(mesh.size(), 4);
      EXPECT_EQ(mesh.global_rank(), 2);
      const std::string why = "rank 2 is not part of DeviceMesh(shape=[2, 2], axes=[dp, tp], ranks=[[3, 1], [4, 0]])";
      ExpectError(ErrorCode::kFailedPrecondition, "DeviceMesh::coordinate: " + why, [&] { mesh.coordinate(); });
      ExpectError(ErrorCode::kFailedPrecondition, "DeviceMesh::axis_group: " + why, [&] { mesh.axis_group("tp"); });
      ExpectError(ErrorCode::kFailedPrecondition, "DeviceMesh: slicing: " + why, [&] { mesh["tp"]; });
      ExpectError(ErrorCode::kFailedPrecondition, "DeviceMesh::Flatten: " + why,
                  [&] { mesh.Flatten({"dp", "tp"}, "flat"); });
    } else {
      EXPECT_TRUE(mesh.is_member());
      const std::vector<int64_t> where[] = {{1, 1}, {0, 1}, {}, {0, 0}, {1, 0}};
      EXPECT_EQ(mesh.coordinate(), where[r]);
      EXPECT_EQ(AxisSum(mesh, "tp"), mesh.coordinate()[0] == 0 ? 3 + 1 : 4 + 0);
      EXPECT_EQ(AxisSum(mesh, "dp"), mesh.coordinate()[1] == 0 ? 3 + 4 : 1 + 0);
      DeviceMesh flat = mesh.Flatten({"dp", "tp"}, "flat");  // collective over the mesh's ranks only
      EXPECT_EQ(AxisSum(flat, "flat"), 8);
      EXPECT_EQ(mesh["tp"].ToString(), mesh.coordinate()[0] == 0 ? "DeviceMesh(shape=[2], axes=[tp], ranks=[3, 1])"
                                                                  : "DeviceMesh(shape=[2], axes=[tp], ranks=[4, 0])");
    }
    Tensor t = Full({1}, 1.0, DType::kFloat64);  // the world never took part and is still in step
    world->AllReduce(t, comm::ReduceOp::kSum)->Wait();
    EXPECT_EQ(t.item<double>(), 5);
    ExpectError(ErrorCode::kInvalidArgument, "rank 7 of the mesh [0, 7] is not in the world group 'world' of 5",
                [&] { InitDeviceMesh(world, {2}, {}, std::vector<int>{0, 7}); });
    ExpectError(ErrorCode::kInvalidArgument, "the mesh [1, 1] names a rank twice",
                [&] { InitDeviceMesh(world, {2}, {}, std::vector<int>{1, 1}); });
  }, Fast());
}

TEST(DeviceMeshTest, DefaultAxisNamesAreNumbered) {
  comm::RunRanks(2, [](comm::ProcessGroupPtr world) {
    DeviceMesh mesh = InitDeviceMesh(world, {2});
    EXPECT_EQ(mesh.ToString(), "DeviceMesh(shape=[2], axes=[axis0], ranks=[0, 1])");
    EXPECT_EQ(mesh.axis_group(0)->name(), "axis0");
  }, Fast());
}

}  // namespace
}  // namespace tessel::dtensor
