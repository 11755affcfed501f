// pipelining/timeline_svg_test.cc — the SVG timeline: one box per action with rank time, colored by kind,
// deterministic, escaped.
#include "pipelining/timeline_svg.h"

#include <gtest/gtest.h>

#include "pipelining/lowering.h"
#include "pipelining/schedules.h"

namespace tessel::pipelining {
namespace {

int Occurrences(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) ++n;
  return n;
}

SimulationResult ZbvRun() {
  const Program compute = GenerateSchedule(ScheduleKind::kZBVZeroBubble, 4, 8, 8);
  const std::vector<int> where = StageToRankMap(ScheduleKind::kZBVZeroBubble, 4, 8);
  return Simulate(LowerProgram(compute, where, 8, {}), where);
}

TEST(TimelineSvgTest, DrawsOneBoxPerComputeActionColoredByKind) {
  const std::string svg = TimelineSvg(ZbvRun(), "ZBV");
  const int per_kind = 8 * 8;  // 8 stages x 8 microbatches
  EXPECT_EQ(Occurrences(svg, "<title>rank "), 3 * per_kind);  // F, I, W; SEND/RECV and REDUCE_GRAD take no time
  EXPECT_EQ(Occurrences(svg, "fill=\"#4e79a7\""), per_kind + 1);  // F boxes + legend swatch
  EXPECT_EQ(Occurrences(svg, "fill=\"#f28e2b\""), per_kind + 1);  // I
  EXPECT_EQ(Occurrences(svg, "fill=\"#59a14f\""), per_kind + 1);  // W
  EXPECT_EQ(Occurrences(svg, "fill=\"#e15759\""), 1);             // no B: legend only
  EXPECT_EQ(Occurrences(svg, "font-size=\"12\">rank "), 4);  // one lane label per rank
  EXPECT_NE(svg.find("<title>rank 0: 0F0 [0.00, 1.00)</title>"), std::string::npos);
  EXPECT_NE(svg.find("makespan 51.00, bubble 5.88%"), std::string::npos);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
}

TEST(TimelineSvgTest, IsDeterministicAndEscapesTheTitle) {
  const SimulationResult r = ZbvRun();
  EXPECT_EQ(TimelineSvg(r, "a"), TimelineSvg(r, "a"));
  const std::string svg = TimelineSvg(r, "p<4 & \"m\">8");
  EXPECT_NE(svg.find("p&lt;4 &amp; &quot;m&quot;&gt;8"), std::string::npos);
  EXPECT_EQ(svg.find("p<4"), std::string::npos);
}

}  // namespace
}  // namespace tessel::pipelining
