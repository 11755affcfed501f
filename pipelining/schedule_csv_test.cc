// pipelining/schedule_csv_test.cc — programs to and from PyTorch's CSV layout.
#include "pipelining/schedule_csv.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "core/base/testing/expect_error.h"
#include "pipelining/lowering.h"
#include "pipelining/schedules.h"
#include "pipelining/verifier.h"

namespace tessel::pipelining {
namespace {

using ::tessel::testing::ExpectErrorContains;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST(ScheduleCsvTest, DumpWritesOneRowPerRankWithEmptyIdleCells) {
  EXPECT_EQ(DumpCsv(GenerateSchedule(ScheduleKind::k1F1B, 2, 2, 2)), "0F0,0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1\n");
}

TEST(ScheduleCsvTest, EveryGeneratedAndLoweredProgramRoundTrips) {
  for (ScheduleKind k : AllScheduleKinds()) {
    const int v = (k == ScheduleKind::kGPipe || k == ScheduleKind::k1F1B) ? 1 : 2;
    const Program compute = GenerateSchedule(k, 4, 4 * v, 8);
    EXPECT_EQ(ParseCsv(DumpCsv(compute)), compute) << ScheduleName(k);
    const Program lowered = LowerProgram(compute, StageToRankMap(k, 4, 4 * v), 8, {.fsdp = true});
    EXPECT_EQ(ParseCsv(DumpCsv(lowered)), lowered) << ScheduleName(k);
  }
}

TEST(ScheduleCsvTest, ParsesPythonCsvWriterLineEndingsAndTrailingIdleSlots) {
  const Program p = ParseCsv("0F0,,0B0,\r\n1F0,1B0\r\n");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(ToString(p[0]), "0F0,,0B0,");
  EXPECT_EQ(p[0].size(), 4u);
  EXPECT_EQ(ToString(p[1]), "1F0,1B0");
}

// PyTorch's DualPipeV dump (ScheduleDualPipeV._dump_csv(format="compute_only"), torch 2.15, 2 ranks, 4 microbatches)
// groups a forward and a backward into one overlapped cell; loading it raised "no stage index". Its actions now
// run one after the other and the program verifies, the stage map being DualPipeV's V.
TEST(ScheduleCsvTest, PyTorchsOverlappedCellsLoadAsTheirActionsInOrder) {
  const Program p = ParseCsv(
      "0F0,0F1,0F2,3F0,3I0,3W0,3F1,(0F3;3B1)OVERLAP_F_B,(3F2;0B0)OVERLAP_F_B,3B2,(3F3;0B1)OVERLAP_F_B,3B3,0I2,0W2,"
      "0I3,0W3\r\n"
      "1F0,2F0,1F1,2F1,1F2,2B0,(2F2;1B0)OVERLAP_F_B,(1F3;2B1)OVERLAP_F_B,(2F3;1B1)OVERLAP_F_B,2B2,1B2,2I3,1I3,2W3,"
      "1W3\r\n");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(ToString(p[0]), "0F0,0F1,0F2,3F0,3I0,3W0,3F1,0F3,3B1,3F2,0B0,3B2,3F3,0B1,3B3,0I2,0W2,0I3,0W3");
  EXPECT_EQ(VerifyComputeProgram(p, /*num_stages=*/4, /*num_microbatches=*/4), (std::vector<int>{0, 1, 1, 0}));
  ExpectErrorContains([] { ParseCsv("(0F0;0B0)OVERLAP_X\n"); }, ErrorCode::kInvalidArgument,
                      {"column 0", "a grouped cell must read (<action>;<action>...)OVERLAP_F_B"});
}

TEST(ScheduleCsvTest, BadCellNamesRowAndColumn) {
  ExpectErrorContains([] { ParseCsv("0F0,0B0\n1F0,1X0\n"); }, ErrorCode::kInvalidArgument,
                      {"schedule CSV: row 1 (rank 1), column 1", "'1X0'", "unknown kind 'X'"});
}

TEST(ScheduleCsvTest, SaveAndLoadAFile) {
  const Program p = GenerateSchedule(ScheduleKind::kZBVZeroBubble, 2, 4, 4);
  const std::string path = TempPath("zbv.csv");
  SaveCsv(p, path);
  EXPECT_EQ(LoadCsv(path), p);
  std::ofstream(path) << "0F0,0Q0\n";
  ExpectErrorContains([&] { LoadCsv(path); }, ErrorCode::kInvalidArgument, {path, "column 1", "'0Q0'"});
}

TEST(ScheduleCsvTest, MissingFileIsNotFoundWithThePath) {
  const std::string path = TempPath("no_such_dir/none.csv");
  ExpectErrorContains([&] { LoadCsv(path); }, ErrorCode::kNotFound, {"cannot open", path});
  ExpectErrorContains([&] { SaveCsv({}, path); }, ErrorCode::kNotFound, {"cannot open", path, "for writing"});
}

}  // namespace
}  // namespace tessel::pipelining
