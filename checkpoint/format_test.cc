// checkpoint/format_test.cc — checksums, storage, the safetensors codec and metadata.json.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <fstream>
#include <limits>

#include "checkpoint/box.h"
#include "checkpoint/checksum.h"
#include "checkpoint/metadata.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/storage.h"
#include "checkpoint/testing/checkpoint_testing.h"
#include "core/base/error.h"
#include "core/base/testing/expect_error.h"

namespace tessel::checkpoint {
namespace {

using testing::FreshDir;

using ::tessel::testing::ExpectErrorContains;

void WriteRaw(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

TEST(ChecksumTest, BlockChecksumsCoverEachBlockAndTheShortTail) {
  std::string data(10, 'x');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i);
  const std::vector<uint64_t> sums = BlockChecksums(data.data(), 10, 4);
  ASSERT_EQ(sums.size(), 3u);
  EXPECT_EQ(sums[0], Checksum(data.data(), 4));
  EXPECT_EQ(sums[2], Checksum(data.data() + 8, 2));
  EXPECT_EQ(NumChecksumBlocks(0, 4), 0);
  EXPECT_EQ(Checksum("", 0), 0x2d06800538d394c2ull);  // XXH3-64 of the empty input (xxhash's test vector)
}

TEST(ChecksumTest, HexRoundTripsAndRejectsBadDigits) {
  EXPECT_EQ(ChecksumToHex(0x0123456789abcdefull), "0123456789abcdef");
  EXPECT_EQ(ChecksumFromHex("0123456789ABCDEF"), 0x0123456789abcdefull);
  EXPECT_FALSE(ChecksumFromHex("0123").has_value());
  EXPECT_FALSE(ChecksumFromHex("0123456789abcdeg").has_value());
}

TEST(BoxTest, IntersectContainsAndPrint) {
  const Box a{{0, 0}, {4, 8}}, b{{2, 4}, {4, 8}};
  EXPECT_EQ(Intersect(a, b), (Box{{2, 4}, {2, 4}}));
  EXPECT_FALSE(Intersect(a, Box{{4, 0}, {1, 8}}).has_value());
  EXPECT_TRUE(Contains(FullBox({4, 8}), a));
  EXPECT_FALSE(Contains(a, b));
  EXPECT_EQ(BoxToString(b), "[2:6, 4:12]");
  EXPECT_EQ(Volume(FullBox({})), 1);
}

TEST(StorageTest, ReadPastTheEndIsDataLossNamingTheFile) {
  const std::string dir = FreshDir("storage_trunc");
  const std::string path = JoinPath(dir, "f.bin");
  WriteRaw(path, "hello");
  File f = File::OpenForRead(path);
  char buf[8];
  f.ReadAt(1, buf, 4);
  EXPECT_EQ(std::string(buf, 4), "ello");
  ExpectErrorContains([&] { f.ReadAt(2, buf, 8); }, ErrorCode::kDataLoss, "f.bin' is truncated");
  ExpectErrorContains([&] { File::OpenForRead(JoinPath(dir, "missing")); }, ErrorCode::kNotFound, "missing");
  // A directory where a data file belongs: named as such, not as a 4096-byte truncated file.
  ExpectErrorContains([&] { File::OpenForRead(dir); }, ErrorCode::kDataLoss, "' is a directory, not a file");
}

TEST(StorageTest, SecondLockOnOneDirectoryIsAbortedAndFreedOnRelease) {
  const std::string dir = FreshDir("storage_lock");
  {
    DirLock held = DirLock::Acquire(dir, "save A");
    ExpectErrorContains([&] { DirLock::Acquire(dir, "save B"); }, ErrorCode::kAborted, "lock held by save A");
  }
  DirLock again = DirLock::Acquire(dir, "save C");  // released with the first holder
}

TEST(SafetensorsTest, EncodedHeaderRoundTripsWithAlignedDataStart) {
  const std::string dir = FreshDir("st_roundtrip");
  std::vector<SafetensorsEntry> e = {{"w", "F32", {2, 3}}, {"b", "BF16", {3}}, {"blob", "U8", {5}}, {"z", "I64", {0}}};
  const std::string prefix = EncodeSafetensorsHeader(e, {{"format", "pt"}});
  EXPECT_EQ(prefix.size() % 8, 0u);
  EXPECT_EQ(e[1].begin, 24);
  EXPECT_EQ(e[1].end, 30);
  const std::string path = JoinPath(dir, "a.safetensors");
  WriteRaw(path, prefix + std::string(35, '\1'));
  const SafetensorsHeader h = ReadSafetensorsHeader(File::OpenForRead(path));
  ASSERT_EQ(h.entries.size(), 4u);
  EXPECT_EQ(h.data_start, static_cast<int64_t>(prefix.size()));
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(h.Find("blob")->begin, 30);
  EXPECT_EQ(h.Find("w")->shape, (Shape{2, 3}));
  EXPECT_EQ(DTypeFromSafetensors("BF16"), DType::kBFloat16);
  EXPECT_FALSE(DTypeFromSafetensors("F8_E4M3").has_value());
}

TEST(SafetensorsTest, DecoderRejectsGapsBadLengthsAndTruncation) {
  const std::string dir = FreshDir("st_bad");
  auto file_with = [&](const std::string& json, int64_t data_bytes) {
    std::string len(8, '\0');
    for (int i = 0; i < 8; ++i) len[static_cast<size_t>(i)] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
    const std::string path = JoinPath(dir, "x.safetensors");
    WriteRaw(path, len + json + std::string(static_cast<size_t>(data_bytes), '\0'));
    return path;
  };
  auto read = [](const std::string& p) { ReadSafetensorsHeader(File::OpenForRead(p)); };
  const std::string gap = file_with(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8);
  ExpectErrorContains([&] { read(gap); }, ErrorCode::kDataLoss, "tensor 'a' starts at data byte 4");
  const std::string size = file_with(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8);
  ExpectErrorContains([&] { read(size); }, ErrorCode::kDataLoss, "spans 8 bytes but F32 [3] needs 12");
  const std::string trunc = file_with(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 12);
  ExpectErrorContains([&] { read(trunc); }, ErrorCode::kDataLoss, "is truncated");
  const std::string junk = file_with("not json", 0);
  ExpectErrorContains([&] { read(junk); }, ErrorCode::kDataLoss, "not a JSON object");
  const std::string huge = JoinPath(dir, "h.safetensors");
  WriteRaw(huge, std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8) + "{}");
  ExpectErrorContains([&] { read(huge); }, ErrorCode::kDataLoss, "header length 4294967295 exceeds");
}

Metadata SmallMetadata() {
  Metadata m;
  m.save_id = "00000000deadbeef";
  m.world_size = 2;
  m.checksum_block_bytes = 8;
  m.files = {{"data-00000-of-00002.safetensors", 0, 100}};
  m.tensors["w"] = TensorMeta{DType::kFloat32,
                              {4, 2},
                              "(dp=2) [S(0)]",
                              {ChunkMeta{Box{{0, 0}, {2, 2}}, StoredRange{0, "w[0:2, 0:2]", 64, 16, {1, 2}}},
                               ChunkMeta{Box{{2, 0}, {2, 2}}, StoredRange{0, "w[2:4, 0:2]", 96, 16, {3, 4}}}}};
  m.bytes["rng"] = StoredRange{0, "rng", 80, 3, {7}};
  m.values["step"] = int64_t{5};
  m.values["lr"] = 0.1;
  m.values["nan"] = std::numeric_limits<double>::quiet_NaN();
  m.values["name"] = std::string("gpt");
  return m;
}

TEST(MetadataTest, JsonRoundTripsEveryFieldExactly) {
  const Metadata m = SmallMetadata();
  const Metadata back = ParseMetadata(MetadataToJson(m), "mem");
  EXPECT_EQ(back.save_id, m.save_id);
  EXPECT_EQ(back.files[0].size, 100);
  const TensorMeta& w = back.tensors.at("w");
  EXPECT_EQ(w.shape, (Shape{4, 2}));
  EXPECT_EQ(w.layout, "(dp=2) [S(0)]");
  EXPECT_EQ(w.chunks[0].box, (Box{{0, 0}, {2, 2}}));
  EXPECT_EQ(w.chunks[0].where.checksums, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(back.bytes.at("rng").byte_offset, 80);
  EXPECT_EQ(std::get<int64_t>(back.values.at("step")), 5);
  EXPECT_EQ(std::bit_cast<uint64_t>(std::get<double>(back.values.at("lr"))), std::bit_cast<uint64_t>(0.1));
  EXPECT_TRUE(std::isnan(std::get<double>(back.values.at("nan"))));
  EXPECT_EQ(std::get<std::string>(back.values.at("name")), "gpt");
  EXPECT_EQ(DataFileName(3, 8), "data-00003-of-00008.safetensors");
}

TEST(MetadataTest, OtherVersionIsFailedPreconditionWithHint) {
  std::string text = MetadataToJson(SmallMetadata());
  text.replace(text.find("\"version\": 2"), 12, "\"version\": 99");
  ExpectErrorContains([&] { ParseMetadata(text, "ckpt/metadata.json"); }, ErrorCode::kFailedPrecondition,
              "has format version 99 but this build reads versions 1 to 2. HINT");
}

TEST(MetadataTest, CorruptContentIsDataLossNamingTheProblem) {
  const std::string good = MetadataToJson(SmallMetadata());
  ExpectErrorContains([&] { ParseMetadata(good.substr(0, good.size() / 2), "m.json"); }, ErrorCode::kDataLoss,
              "not valid JSON");
  std::string magic = good;
  magic.replace(magic.find("tessel-checkpoint"), 17, "other-checkpoint!");
  ExpectErrorContains([&] { ParseMetadata(magic, "m.json"); }, ErrorCode::kDataLoss, "not a tessel checkpoint index");
  std::string len = good;
  len.replace(len.find("\"byte_length\": 16"), 17, "\"byte_length\": 12");
  ExpectErrorContains([&] { ParseMetadata(len, "m.json"); }, ErrorCode::kDataLoss, "12 bytes for 4 elements");
  Metadata bad_box = SmallMetadata();
  bad_box.tensors["w"].chunks[0].box.sizes = {2, 3};
  ExpectErrorContains([&] { ParseMetadata(MetadataToJson(bad_box), "m.json"); }, ErrorCode::kDataLoss,
              "chunk [0:2, 0:3] lies outside the shape [4, 2]");
  Metadata bad_file = SmallMetadata();
  bad_file.bytes["rng"].file = 3;
  ExpectErrorContains([&] { ParseMetadata(MetadataToJson(bad_file), "m.json"); }, ErrorCode::kDataLoss,
              "bytes 'rng': file index out of range");
  ExpectErrorContains([&] { ReadMetadata(FreshDir("no_meta")); }, ErrorCode::kNotFound, "is not a complete checkpoint");
}

// Replaces the first `from` after `anchor` in `text` by `to`.
std::string Edit(std::string text, const std::string& anchor, const std::string& from, const std::string& to) {
  const size_t at = text.find(from, text.find(anchor));
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(MetadataTest, IndexChecksumCatchesAnEditTheStructuralChecksAccept) {
  const std::string good = MetadataToJson(SmallMetadata());
  ASSERT_NE(good.find("\"index_checksum\": \""), std::string::npos) << good;
  // A changed step value and a renamed entry are structurally valid: only the checksum sees them.
  ExpectErrorContains([&] { ParseMetadata(Edit(good, "\"step\"", "5", "6"), "ckpt/metadata.json"); },
                      ErrorCode::kDataLoss, {"ckpt/metadata.json", "index checksum mismatch"});
  ExpectErrorContains([&] { ParseMetadata(Edit(good, "\"entry\"", "w[0:2", "w[0:3"), "m.json"); },
                      ErrorCode::kDataLoss, "index checksum mismatch");
  // A version-2 index without its checksum is corrupt; a version-1 index (written before it) loads.
  std::string no_sum = good.substr(0, good.find(",\n \"index_checksum\"")) + "\n}\n";
  ExpectErrorContains([&] { ParseMetadata(no_sum, "m.json"); }, ErrorCode::kDataLoss, "has no 'index_checksum'");
  const Metadata v1 = ParseMetadata(Edit(no_sum, "\"version\"", "2", "1"), "m.json");
  EXPECT_EQ(v1.version, 1);
  EXPECT_EQ(v1.tensors.at("w").chunks.size(), 2u);
}

TEST(MetadataTest, ChunksMustTileTheirTensorExactly) {
  auto parse_v1 = [](Metadata m) {  // version 1: no index checksum, so only the tiling checks can catch it
    std::string text = MetadataToJson(m);
    text = text.substr(0, text.find(",\n \"index_checksum\"")) + "\n}\n";
    text.replace(text.find("\"version\": 2"), 12, "\"version\": 1");
    return ParseMetadata(text, "ckpt/metadata.json");
  };
  Metadata overlap = SmallMetadata();
  overlap.tensors["w"].chunks[1].box.offsets = {1, 0};  // rows 1-2 instead of 2-3
  ExpectErrorContains([&] { parse_v1(overlap); }, ErrorCode::kDataLoss,
                      {"ckpt/metadata.json", "tensor 'w' chunk [1:3, 0:2] (in data-00000-of-00002.safetensors) "
                                             "overlaps chunk [0:2, 0:2]"});
  Metadata gap = SmallMetadata();
  gap.tensors["w"].chunks.pop_back();
  ExpectErrorContains([&] { parse_v1(gap); }, ErrorCode::kDataLoss,
                      {"tensor 'w' of shape [4, 2]: its 1 chunks cover 4 of 8 elements (a gap)"});
  Metadata out = SmallMetadata();
  out.tensors["w"].chunks[1].box.offsets = {3, 0};
  ExpectErrorContains([&] { parse_v1(out); }, ErrorCode::kDataLoss, "chunk [3:5, 0:2] lies outside the shape [4, 2]");
  Metadata shape = SmallMetadata();
  shape.tensors["w"].shape = {5, 2};  // a hand-edited shape: the chunks no longer cover it
  ExpectErrorContains([&] { parse_v1(shape); }, ErrorCode::kDataLoss, "cover 8 of 10 elements");
  Metadata huge = SmallMetadata();
  huge.tensors["w"].shape = {int64_t{1} << 62, 8};
  ExpectErrorContains([&] { parse_v1(huge); }, ErrorCode::kDataLoss, {"tensor 'w' shape", "overflows int64"});
  EXPECT_EQ(parse_v1(SmallMetadata()).tensors.at("w").chunks.size(), 2u);
}

// Found by checkpoint/fuzz/safetensors_header_fuzzer.cc: sizes above INT64_MAX or whose product overflows
// were a kInvalidArgument from the shape arithmetic instead of kDataLoss naming the file.
TEST(SafetensorsTest, HugeShapesAndOffsetsAreDataLossNotShapeErrors) {
  auto image = [](const std::string& json) {
    std::string h = json + std::string((8 - json.size() % 8) % 8, ' ');
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
    return out + h;
  };
  ExpectErrorContains([&] { ParseSafetensorsHeader(image(R"({"a":{"dtype":"F32","shape":[9223372036854775808],)"
                                                         R"("data_offsets":[0,0]}})"), "m.safetensors"); },
                      ErrorCode::kDataLoss, {"'m.safetensors'", "tensor 'a' has a bad shape"});
  ExpectErrorContains([&] { ParseSafetensorsHeader(image(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],)"
                                                         R"("data_offsets":[0,0]}})"), "m.safetensors"); },
                      ErrorCode::kDataLoss, {"tensor 'a'", "overflows int64"});
  ExpectErrorContains([&] { ParseSafetensorsHeader(image(R"({"a":{"dtype":"F32","shape":[1],)"
                                                         R"("data_offsets":[18446744073709551615,4]}})"), "m.safetensors"); },
                      ErrorCode::kDataLoss, "bad data_offsets");
  EXPECT_EQ(ParseSafetensorsHeader(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})") + "abcd",
                                   "ok.safetensors").entries.size(), 1u);
}

}  // namespace
}  // namespace tessel::checkpoint
