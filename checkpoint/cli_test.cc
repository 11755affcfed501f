// checkpoint/cli_test.cc — tessel-ckpt inspect / verify / export on a real sharded checkpoint.
#include "checkpoint/cli.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "checkpoint/metadata.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/save.h"
#include "checkpoint/storage.h"
#include "checkpoint/testing/checkpoint_testing.h"
#include "checkpoint/testing/checkpoint_testing_ranks.h"

namespace tessel::checkpoint {
namespace {

using testing::FreshDir;
using testing::Layout;

std::string SaveExample(const std::string& name) {
  const std::string dir = FreshDir(name);
  comm::RunRanks(
      4,
      [&](comm::ProcessGroupPtr world) {
        const Layout fsdp{4, {4}, "S(0)"};
        StateDict sd{
            {"layers.0.mlp.fc.weight", testing::Place(Full({8, 4}, 1.0), testing::MakeMesh(world, fsdp), fsdp)},
            {"ln_f.weight", Ones({4})},
            {"train.step", int64_t{100}},
            {"train.rng", Bytes{std::string(16, 'r')}}};
        Save(sd, dir, world, {.fsync = false, .checksum_block_bytes = 16});
      },
      testing::TestRanks());
  return dir;
}

struct Output {
  int rc;
  std::string out, err;
};
Output RunCli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int rc = RunTesselCkpt(args, out, err);
  return {rc, out.str(), err.str()};
}

TEST(CliTest, InspectPrintsOneRowPerTensorWithItsSavedLayout) {
  const std::string dir = SaveExample("cli_inspect");
  const Output o = RunCli({"inspect", dir});
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_NE(o.out.find("saved by 4 rank(s) into 4 data file(s); 2 tensors (144 B), 1 bytes entries, 1 values"),
            std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("FQN                     DTYPE    SHAPE   CHUNKS  BYTES  SAVED LAYOUT"), std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("layers.0.mlp.fc.weight  float32  [8, 4]  4       128    (a0=4) [S(0)]"), std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("ln_f.weight             float32  [4]     1       16     dense"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("value  train.step = int64 100"), std::string::npos) << o.out;
}

TEST(CliTest, VerifyPassesACleanCheckpointAndListsEveryProblem) {
  const std::string dir = SaveExample("cli_verify");
  Output o = RunCli({"verify", dir});
  EXPECT_EQ(o.rc, 0) << o.out;
  EXPECT_NE(o.out.find("OK: 6 chunks, 160 B in 4 files verified"), std::string::npos) << o.out;
  const Metadata md = ReadMetadata(dir);
  const ChunkMeta& c = md.tensors.at("layers.0.mlp.fc.weight").chunks.at(2);
  {
    std::fstream f(JoinPath(dir, md.files[static_cast<size_t>(c.where.file)].name),
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(c.where.byte_offset + 17);
    f.put('\x7f');
  }
  std::filesystem::remove(JoinPath(dir, md.files[3].name));
  o = RunCli({"verify", dir});
  EXPECT_EQ(o.rc, 1);
  EXPECT_NE(o.out.find("FAILED: 2 problem(s)"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[DATA_LOSS]"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("'layers.0.mlp.fc.weight' chunk [4:6, 0:4]"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find(md.files[3].name), std::string::npos) << o.out;
}

TEST(CliTest, ExportWritesASafetensorsFileAndBadUsageExitsTwo) {
  const std::string dir = SaveExample("cli_export");
  const std::string out = JoinPath(FreshDir("cli_export_out"), "m.safetensors");
  const Output o = RunCli({"export", dir, out});
  EXPECT_EQ(o.rc, 0) << o.err;
  EXPECT_NE(o.out.find("exported 2 tensors (144 B)"), std::string::npos) << o.out;
  EXPECT_EQ(ReadSafetensorsHeader(File::OpenForRead(out)).Find("layers.0.mlp.fc.weight")->shape, (Shape{8, 4}));
  EXPECT_EQ(RunCli({"inspect"}).rc, 2);
  const Output missing = RunCli({"inspect", FreshDir("cli_empty")});
  EXPECT_EQ(missing.rc, 1);
  EXPECT_NE(missing.err.find("is not a complete checkpoint"), std::string::npos) << missing.err;
}

TEST(CliTest, ExportRefusesAnOutputInsideACheckpointDirectory) {
  const std::string dir = SaveExample("cli_export_inside");
  const std::string index = ReadWholeFile(JoinPath(dir, kMetadataFileName));
  for (const std::string& target : {JoinPath(dir, std::string(kMetadataFileName)), JoinPath(dir, "m.safetensors"),
                                    JoinPath(JoinPath(dir, "sub"), "m.safetensors")}) {
    SCOPED_TRACE(target);
    const Output o = RunCli({"export", dir, target});
    EXPECT_EQ(o.rc, 1);
    EXPECT_NE(o.err.find("is inside the checkpoint directory"), std::string::npos) << o.err;
  }
  // Another checkpoint's directory is refused too.
  const std::string other = SaveExample("cli_export_other");
  const Output o = RunCli({"export", dir, JoinPath(other, "m.safetensors")});
  EXPECT_EQ(o.rc, 1);
  EXPECT_NE(o.err.find("has a metadata.json"), std::string::npos) << o.err;
  EXPECT_EQ(ReadWholeFile(JoinPath(dir, kMetadataFileName)), index);  // untouched
  EXPECT_EQ(RunCli({"verify", dir}).rc, 0);
}

}  // namespace
}  // namespace tessel::checkpoint
