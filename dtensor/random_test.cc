#include "dtensor/random.h"

#include <gtest/gtest.h>

#include "dtensor/testing/rules_testing.h"

namespace tessel::dtensor {
namespace {

using testing::ExpectError;

struct Case {
  std::vector<int64_t> mesh;
  const char* placements;
  Shape shape;
  std::optional<ShardOrder> order = std::nullopt;
};

// RandnDTensor == DistributeTensor(Randn(full)) bit for bit, and both generators end at the same offset.
TEST(RandomDTensorTest, ShardedInitEqualsFullInitThenDistribute) {
  const std::vector<Case> cases = {
      {{4}, "S(0)", {7, 5}},
      {{4}, "S(1)", {3, 13}},
      {{4}, "R", {6}},
      {{2, 2}, "S(0), S(1)", {5, 7}},
      {{2, 2}, "S(0), S(0)", {9, 2}},
      {{2, 2}, "R, S(1)", {2, 3}},
      {{2, 2}, "S(0), S(0)", {8, 8}, ShardOrder{{1, 0}, {}}},  // TP then FSDP order
      {{2, 2}, "S(1), R", {4, 0}},
  };
  for (const Case& c : cases) {
    int world = 1;
    for (int64_t s : c.mesh) world *= static_cast<int>(s);
    std::vector<std::string> names =
        c.mesh.size() == 1 ? std::vector<std::string>{"x"} : std::vector<std::string>{"dp", "tp"};
    comm::RunRanks(
        world,
        [&](comm::ProcessGroupPtr pg) {
          DeviceMesh mesh = InitDeviceMesh(pg, c.mesh, names);
          SCOPED_TRACE(Str(c.placements, " ", ShapeStr(c.shape), " rank ", pg->rank()));
          for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
            Generator gen(1234, 17), ref(1234, 17);
            comm::CommTracer tracer;
            DTensor got = RandomDTensor(c.shape, mesh, ParsePlacements(c.placements), gen, Distribution::Normal(),
                                        dtype, c.order);
            EXPECT_EQ(tracer.Total(), 0);
            DTensor want = DistributeTensor(Randn(c.shape, ref, dtype), mesh, ParsePlacements(c.placements),
                                            {.shard_order = c.order});
            EXPECT_EQ(got.spec(), want.spec());
            EXPECT_EQ(got.ToLocal().ToDoubleVector(), want.ToLocal().ToDoubleVector());
            EXPECT_EQ(gen, ref);  // advanced by the global numel on every rank
            // The next draw stays in step with the unsharded stream.
            EXPECT_EQ(RandDTensor({3}, mesh, ParsePlacements(world == 4 && c.mesh.size() == 2 ? "R, R" : "R"), gen)
                          .ToLocal()
                          .ToDoubleVector(),
                      Rand({3}, ref).ToDoubleVector());
          }
        },
        testing::FastRanks());
  }
}

TEST(RandomDTensorTest, PartialPlacementIsRejected) {
  testing::OnMesh1D(2, [](const DeviceMesh& mesh) {
    Generator gen(1);
    ExpectError(ErrorCode::kInvalidArgument, {"RandomDTensor", "[P(sum)]", "Partial", "rank"},
                [&] { RandnDTensor({4}, mesh, ParsePlacements("P(sum)"), gen); });
    DTensor partial = DTensor::FromLocal(Zeros({4}), mesh, ParsePlacements("P(sum)"));
    const uint64_t offset = gen.offset();
    ExpectError(ErrorCode::kInvalidArgument, {"random fill of a DTensor", "[P(sum)]", "no random form", "rank"},
                [&] { FillRandomDTensor(partial, gen, Distribution::Normal()); });
    EXPECT_EQ(gen.offset(), offset);  // nothing reserved
  });
}

// FillRandomDTensor (normal_ / uniform_ / trunc_normal_ on a parameter under fully_shard or TP) writes each rank's
// piece of the unsharded draw, with no communication, and leaves the generator where the unsharded draw does.
TEST(RandomDTensorTest, FillInPlaceEqualsTheUnshardedDrawPieceByPiece) {
  comm::RunRanks(
      4,
      [](comm::ProcessGroupPtr pg) {
        DeviceMesh mesh = InitDeviceMesh(pg, {2, 2}, {"dp", "tp"});
        const Shape shape{7, 5};  // uneven on both axes
        for (const Distribution& dist : {Distribution::Uniform(-0.5, 0.25), Distribution::Normal(1.0, 0.5),
                                         Distribution::TruncatedNormal(0.0, 1.0, -0.5, 1.0)}) {
          Generator gen(77, 3), ref(77, 3);
          DTensor d = DistributeTensor(Zeros(shape), mesh, ParsePlacements("S(0), S(1)"));
          comm::CommTracer tracer;
          FillRandomDTensor(d, gen, dist);
          EXPECT_EQ(tracer.Total(), 0);
          const Tensor full = Random(shape, ref, dist, DType::kFloat32);
          EXPECT_EQ(d.ToLocal().ToDoubleVector(),
                    DistributeTensor(full, mesh, ParsePlacements("S(0), S(1)")).ToLocal().ToDoubleVector());
          EXPECT_EQ(gen, ref);
        }
      },
      testing::FastRanks());
}

}  // namespace
}  // namespace tessel::dtensor
