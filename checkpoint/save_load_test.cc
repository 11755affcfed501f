// checkpoint/save_load_test.cc — Save on one layout, Load on another: every world size change, placement
// change, mesh change and shard order of the issue, with uneven and empty shards and four dtypes, checked
// bit for bit on every rank (local box and FullTensor).
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>

#include "checkpoint/load.h"
#include "checkpoint/metadata.h"
#include "checkpoint/save.h"
#include "checkpoint/testing/checkpoint_testing.h"
#include "checkpoint/testing/checkpoint_testing_ranks.h"
#include "core/base/error.h"
#include "core/base/testing/expect_error.h"
#include "dtensor/dtensor.h"

namespace tessel::checkpoint {
namespace {

using testing::ExpectLocalMatchesFull;
using testing::FreshDir;
using testing::Layout;
using testing::LayoutName;
using testing::MakeMesh;
using testing::Pattern;
using testing::Place;

struct Case {
  std::string name;
  Layout src;
  Layout dst;
};

// Four 2-D tensors: uneven sizes everywhere, the bool one has empty shards on 4+ ranks.
std::map<std::string, Tensor> FullTensors() {
  return {{"w", Pattern({7, 10}, DType::kFloat32, 1)},
          {"layers.0.idx", Pattern({9, 4}, DType::kInt64, 2)},
          {"h", Pattern({4, 6}, DType::kBFloat16, 3)},
          {"mask", Pattern({3, 5}, DType::kBool, 4)}};
}

void SaveIn(const Layout& l, const std::string& dir) {
  const auto full = FullTensors();
  comm::RunRanks(
      l.world,
      [&](comm::ProcessGroupPtr world) {
        const auto mesh = MakeMesh(world, l);
        StateDict sd;
        for (const auto& [fqn, t] : full) sd[fqn] = Place(t, mesh, l);
        Save(sd, dir, world, {.fsync = false, .checksum_block_bytes = 64});
      },
      testing::TestRanks());
}

void LoadInAndCheck(const Layout& l, const std::string& dir) {
  const auto full = FullTensors();
  comm::RunRanks(
      l.world,
      [&](comm::ProcessGroupPtr world) {
        const auto mesh = MakeMesh(world, l);
        StateDict sd;
        for (const auto& [fqn, t] : full) sd[fqn] = Place(Pattern(t.sizes(), t.dtype(), 99), mesh, l);
        const LoadResult r = Load(sd, dir);
        EXPECT_TRUE(r.missing_keys.empty() && r.unexpected_keys.empty());
        for (const auto& [fqn, t] : full) {
          const Tensor& got = std::get<Tensor>(sd.at(fqn));
          ExpectLocalMatchesFull(got, t, fqn);
          if (got.is_distributed()) {
            EXPECT_EQ(testing::DenseBytes(dtensor::DTensor(got).FullTensor()), testing::DenseBytes(t)) << fqn;
          }
        }
      },
      testing::TestRanks());
}

class ReshardTest : public ::testing::TestWithParam<Case> {};

TEST_P(ReshardTest, LoadedTensorsEqualTheSavedOnesBitwise) {
  const Case& c = GetParam();
  SCOPED_TRACE(LayoutName(c.src) + " -> " + LayoutName(c.dst));
  const std::string dir = FreshDir("reshard_" + c.name);
  SaveIn(c.src, dir);
  LoadInAndCheck(c.dst, dir);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ReshardTest,
    ::testing::Values(Case{"World8ToWorld2", {8, {8}, "S(0)"}, {2, {2}, "S(0)"}},
                      Case{"World2ToWorld8ShardDim0ToShardDim1", {2, {2}, "S(0)"}, {8, {8}, "S(1)"}},
                      Case{"World4ToWorld3Uneven", {4, {4}, "S(0)"}, {3, {3}, "S(0)"}},
                      Case{"World4ToOneDenseRank", {4, {4}, "S(1)"}, {1, {}, ""}},
                      Case{"ReplicateToShard", {2, {2}, "R"}, {4, {4}, "S(1)"}},
                      Case{"ShardToReplicate", {4, {4}, "S(0)"}, {3, {3}, "R"}},
                      Case{"FsdpLayoutToTpLayout", {4, {4}, "S(0)"}, {2, {2}, "S(1)"}},
                      Case{"Mesh2DToMesh1D", {4, {2, 2}, "S(0), S(1)"}, {3, {3}, "S(1)"}},
                      Case{"Mesh1DToMesh2D", {3, {3}, "S(0)"}, {4, {2, 2}, "R, S(0)"}},
                      Case{"Mesh2DNestedToMesh2DTransposed", {8, {2, 4}, "S(1), S(0)"}, {6, {3, 2}, "S(0), S(0)"}},
                      Case{"ExplicitShardOrderToDefault",
                           {4, {2, 2}, "S(0), S(0)", dtensor::ShardOrder{{1, 0}, {}}},
                           {4, {2, 2}, "S(0), S(0)"}},
                      Case{"DefaultToExplicitShardOrder",
                           {6, {3, 2}, "S(0), S(0)"},
                           {4, {2, 2}, "S(1), S(1)", dtensor::ShardOrder{{}, {1, 0}}}},
                      Case{"DenseReplicasToShards", {2, {}, ""}, {2, {2}, "S(0)"}},
                      Case{"OneDenseRankToWorld4", {1, {}, ""}, {4, {2, 2}, "S(1), S(0)"}}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(SaveLoadTest, EachRankReadsOnlyTheBytesOfItsBox) {
  const std::string dir = FreshDir("reads_only_box");
  const Tensor full = Pattern({16, 256}, DType::kFloat32, 5);  // rows of 1 KiB
  const Layout fsdp{4, {4}, "S(0)"};
  comm::RunRanks(
      4,
      [&](comm::ProcessGroupPtr world) {
        StateDict sd{{"w", Place(full, MakeMesh(world, fsdp), fsdp)}};
        Save(sd, dir, world, {.fsync = false, .checksum_block_bytes = 64});
      },
      testing::TestRanks());
  for (const Layout& dst : {Layout{2, {2}, "S(0)"}, Layout{4, {4}, "S(1)"}}) {
    SCOPED_TRACE(LayoutName(dst));
    std::atomic<int64_t> total{0};
    comm::RunRanks(
        dst.world,
        [&](comm::ProcessGroupPtr world) {
          StateDict sd{{"w", Place(Zeros({16, 256}), MakeMesh(world, dst), dst)}};
          const LoadResult r = Load(sd, dir);
          // Runs are block-aligned here, so a rank reads exactly its own bytes: never the whole tensor.
          EXPECT_EQ(r.bytes_read, 16 * 256 * 4 / dst.world);
          total += r.bytes_read;
          ExpectLocalMatchesFull(std::get<Tensor>(sd.at("w")), full, "w");
        },
        testing::TestRanks());
    EXPECT_EQ(total.load(), 16 * 256 * 4);
  }
}

TEST(SaveLoadTest, ReplicatedTensorsAreWrittenOnceAndSpreadOverRanks) {
  const std::string dir = FreshDir("dedup");
  std::vector<int64_t> written(4);
  comm::RunRanks(
      4,
      [&](comm::ProcessGroupPtr world) {
        StateDict sd;
        for (int i = 0; i < 8; ++i) sd[Str("p", i)] = Pattern({32}, DType::kFloat32, static_cast<uint64_t>(i));
        written[static_cast<size_t>(world->rank())] = Save(sd, dir, world, {.fsync = false}).bytes_written;
      },
      testing::TestRanks());
  EXPECT_EQ(written, (std::vector<int64_t>{256, 256, 256, 256}));  // 8 x 128 B, two per rank
  const Metadata md = ReadMetadata(dir);
  EXPECT_EQ(md.files.size(), 4u);
  for (const auto& [fqn, t] : md.tensors) EXPECT_EQ(t.chunks.size(), 1u) << fqn;
}

TEST(SaveLoadTest, NonTensorEntriesScalarsEmptyAndStridedTensorsRoundTrip) {
  const std::string dir = FreshDir("kinds");
  const Tensor mat = Pattern({3, 4}, DType::kFloat64, 8);
  const Tensor transposed = MakeView(mat, {4, 3}, {1, 4}, 0);  // non-contiguous
  StateDict sd{{"scalar", Pattern({}, DType::kFloat32, 1)},
               {"empty", Zeros({0, 4})},
               {"t", transposed},
               {"blob", Bytes{std::string("\0\1\2zz", 5)}},
               {"step", int64_t{42}},
               {"lr", 3e-4},
               {"name", std::string("gpt-tiny")}};
  Save(sd, dir);
  Tensor into_t = Zeros({3, 4}, DType::kFloat64);
  StateDict back{{"scalar", Zeros({})},  {"empty", Zeros({0, 4})}, {"t", MakeView(into_t, {4, 3}, {1, 4}, 0)},
                 {"blob", Bytes{}},      {"step", int64_t{0}},     {"lr", 0.0},
                 {"name", std::string()}};
  Load(back, dir);
  EXPECT_EQ(std::get<Tensor>(back["scalar"]).item<float>(), std::get<Tensor>(sd["scalar"]).item<float>());
  EXPECT_EQ(testing::DenseBytes(into_t), testing::DenseBytes(mat));
  EXPECT_EQ(std::get<Bytes>(back["blob"]).data, std::string("\0\1\2zz", 5));
  EXPECT_EQ(std::get<int64_t>(back["step"]), 42);
  EXPECT_EQ(std::get<double>(back["lr"]), 3e-4);
  EXPECT_EQ(std::get<std::string>(back["name"]), "gpt-tiny");
}

// Loading into a tensor whose elements share memory (an expand) wrote the last saved value into every element;
// torch refuses to write into such a tensor. The refusal comes before any entry is written.
TEST(SaveLoadTest, LoadingIntoAnExpandedTensorIsRefusedBeforeAnyWrite) {
  const std::string dir = FreshDir("expanded");
  Save(StateDict{{"a", Pattern({4}, DType::kFloat32, 3)}, {"w", Pattern({4}, DType::kFloat32, 5)}}, dir);
  const Tensor a = Zeros({4});
  StateDict back{{"a", a}, {"w", MakeView(Zeros({1}), {4}, {0}, 0)}};
  ::tessel::testing::ExpectErrorContains([&] { Load(back, dir); }, ErrorCode::kFailedPrecondition,
                                         {"checkpoint load: 'w' is [4] with strides [0]", "an expanded tensor"});
  EXPECT_EQ(a.ToDoubleVector(), std::vector<double>(4, 0.0));
}

}  // namespace
}  // namespace tessel::checkpoint
