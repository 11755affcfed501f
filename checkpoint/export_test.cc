// checkpoint/export_test.cc — checkpoint → one safetensors of full tensors, and safetensors → any layout.
#include "checkpoint/export.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "checkpoint/metadata.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/save.h"
#include "checkpoint/storage.h"
#include "checkpoint/testing/checkpoint_testing.h"
#include "checkpoint/testing/checkpoint_testing_ranks.h"
#include "core/base/error.h"
#include "core/base/testing/expect_error.h"

namespace tessel::checkpoint {
namespace {

using testing::DenseBytes;
using testing::ExpectLocalMatchesFull;
using testing::FreshDir;
using testing::Layout;
using testing::MakeMesh;
using testing::Pattern;
using testing::Place;

std::map<std::string, Tensor> Model() {
  return {{"wte.weight", Pattern({10, 6}, DType::kFloat32, 1)},
          {"layers.0.attn.wq.weight", Pattern({6, 6}, DType::kBFloat16, 2)},
          {"ln_f.bias", Pattern({6}, DType::kFloat64, 3)}};
}

// Saves Model() from 4 ranks as 2-D [S(0), S(1)] (1-D tensors as [S(0), R]) plus a value and bytes.
std::string SaveSharded(const std::string& name) {
  const std::string dir = FreshDir(name);
  comm::RunRanks(
      4,
      [&](comm::ProcessGroupPtr world) {
        const Layout two_d{4, {2, 2}, "S(0), S(1)"}, vec{4, {2, 2}, "S(0), R"};
        const auto mesh = MakeMesh(world, two_d);
        StateDict sd{{"train.step", int64_t{12}}, {"train.rng", Bytes{"0123456789abcdef"}}};
        for (const auto& [fqn, t] : Model()) sd[fqn] = Place(t, mesh, t.dim() == 2 ? two_d : vec);
        Save(sd, dir, world, {.fsync = false, .checksum_block_bytes = 32});
      },
      testing::TestRanks());
  return dir;
}

std::string FileBytes(const std::string& path, int64_t offset, int64_t n) {
  std::string s(static_cast<size_t>(n), '\0');
  File::OpenForRead(path).ReadAt(offset, s.data(), n);
  return s;
}

TEST(ExportTest, ExportWritesEveryTensorWholeUnderItsFqn) {
  const std::string dir = SaveSharded("export_src");
  const std::string out = JoinPath(FreshDir("export_out"), "model.safetensors");
  const ExportResult r = ExportToSafetensors(dir, out);
  EXPECT_EQ(r.num_tensors, 3);
  EXPECT_EQ(r.tensor_bytes, 10 * 6 * 4 + 6 * 6 * 2 + 6 * 8);
  EXPECT_EQ(r.num_skipped_bytes_entries, 1);
  const SafetensorsHeader h = ReadSafetensorsHeader(File::OpenForRead(out));
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(h.metadata.at("tessel.value.train.step"), "int64 12");
  for (const auto& [fqn, t] : Model()) {
    const SafetensorsEntry* e = h.Find(fqn);
    ASSERT_NE(e, nullptr) << fqn;
    EXPECT_EQ(e->shape, t.sizes());
    EXPECT_EQ(e->dtype, SafetensorsDTypeName(t.dtype()));
    EXPECT_EQ(FileBytes(out, h.data_start + e->begin, e->nbytes()), DenseBytes(t)) << fqn;
  }
}

// A failed export (here a truncated data file) raises and leaves neither OUT nor its temporary file.
TEST(ExportTest, AFailedExportLeavesNoPartialFile) {
  const std::string dir = SaveSharded("export_bad_src");
  const Metadata md = ReadMetadata(dir);
  const std::string data = JoinPath(dir, md.files.back().name);
  std::filesystem::resize_file(data, 8);
  const std::string out = JoinPath(FreshDir("export_bad_out"), "model.safetensors");
  try {
    ExportToSafetensors(dir, out);
    ADD_FAILURE() << "the export succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(md.files.back().name), std::string::npos) << e.what();
  }
  EXPECT_FALSE(PathExists(out));
  EXPECT_FALSE(PathExists(out + ".tmp-export"));
}

TEST(ExportTest, ImportFillsAnyLayoutReadingOnlyEachRanksBox) {
  const std::string out = JoinPath(FreshDir("import_src"), "model.safetensors");
  ExportToSafetensors(SaveSharded("import_ckpt"), out);
  for (const Layout& l : {Layout{3, {3}, "S(0)"}, Layout{2, {2}, "R"}, Layout{1, {}, ""}}) {
    SCOPED_TRACE(testing::LayoutName(l));
    comm::RunRanks(
        l.world,
        [&](comm::ProcessGroupPtr world) {
          const auto mesh = MakeMesh(world, l);
          StateDict sd;
          int64_t local_bytes = 0;
          for (const auto& [fqn, t] : Model()) {
            sd[fqn] = Place(Zeros(t.sizes(), t.dtype()), mesh, l);
            local_bytes +=
                DescribeLocalShard("test", fqn, std::get<Tensor>(sd[fqn])).local.numel() * ElementSize(t.dtype());
          }
          const LoadResult r = ImportSafetensors(sd, out);
          EXPECT_EQ(r.bytes_read, local_bytes);  // row shards are contiguous: read exactly, never a whole tensor
          for (const auto& [fqn, t] : Model()) ExpectLocalMatchesFull(std::get<Tensor>(sd[fqn]), t, fqn);
        },
        testing::TestRanks());
  }
}

TEST(ExportTest, ASingleRankDataFileIsAStandardSafetensorsOfTheModel) {
  const std::string dir = FreshDir("single_rank_file");
  StateDict sd;
  for (const auto& [fqn, t] : Model()) sd[fqn] = t;
  Save(sd, dir, nullptr, {.fsync = false});
  StateDict back;
  for (const auto& [fqn, t] : Model()) back[fqn] = Zeros(t.sizes(), t.dtype());
  ImportSafetensors(back, JoinPath(dir, DataFileName(0, 1)));
  for (const auto& [fqn, t] : Model()) ExpectLocalMatchesFull(std::get<Tensor>(back[fqn]), t, fqn);
}

TEST(ExportTest, ImportRefusesDtypesTesselLacks) {
  const std::string path = JoinPath(FreshDir("import_u16"), "x.safetensors");
  std::vector<SafetensorsEntry> e = {{"q", "U16", {2}}, {"w", "F32", {1}}};
  std::ofstream(path, std::ios::binary) << EncodeSafetensorsHeader(e, {}) << std::string(8, '\0');
  StateDict want_q{{"q", Zeros({2})}, {"w", Zeros({1})}};
  try {
    ImportSafetensors(want_q, path);
    ADD_FAILURE();
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::kUnimplemented);
    EXPECT_NE(std::string(err.what()).find("tensor q (U16)"), std::string::npos) << err.what();
  }
  StateDict only_w{{"w", Zeros({1})}};
  ::tessel::testing::ExpectErrorContains([&] { ImportSafetensors(only_w, path); },  // strict: q is unexpected
                                         ErrorCode::kInvalidArgument, {"unexpected tensor q", "strict = false"});
  const LoadResult r = ImportSafetensors(only_w, path, {.strict = false});
  EXPECT_EQ(r.unexpected_keys, std::vector<std::string>{"q"});
}

}  // namespace
}  // namespace tessel::checkpoint
