// examples/gpt/flag_config_test.cc — the TOML config fills the flags the command line did not give, and
// refuses what is not a flag, given twice, nested or unparsable, naming the key.
#include "examples/gpt/flag_config.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>

#include "absl/flags/flag.h"
#include "core/base/testing/expect_error.h"
#include "gtest/gtest.h"

ABSL_FLAG(std::optional<int64_t>, cfg_steps, std::nullopt, "test flag");
ABSL_FLAG(std::optional<double>, cfg_lr, std::nullopt, "test flag");
ABSL_FLAG(std::optional<std::string>, cfg_schedule, std::nullopt, "test flag");
ABSL_FLAG(std::optional<int>, cfg_sp, std::nullopt, "test flag");
ABSL_FLAG(int, cfg_plain, 7, "a flag outside the job's list");

namespace tessel::examples {
namespace {

using ::tessel::testing::ExpectErrorContains;

constexpr std::string_view kNames[] = {"cfg_steps", "cfg_lr", "cfg_schedule", "cfg_sp"};

std::string WriteToml(const std::string& name, const std::string& text) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

void ResetFlags() {
  absl::SetFlag(&FLAGS_cfg_steps, std::nullopt);
  absl::SetFlag(&FLAGS_cfg_lr, std::nullopt);
  absl::SetFlag(&FLAGS_cfg_schedule, std::nullopt);
  absl::SetFlag(&FLAGS_cfg_sp, std::nullopt);
}

TEST(FlagConfig, TablesGroupKeysAndEveryTypeSetsItsFlag) {
  ResetFlags();
  ApplyTomlConfig(WriteToml("all.toml", "cfg_steps = 12\n[training]\ncfg_lr = 1e-2\n[parallelism]\n"
                                        "cfg_schedule = \"GPipe\"\ncfg_sp = true\n"),
                  kNames);
  EXPECT_EQ(absl::GetFlag(FLAGS_cfg_steps), 12);
  EXPECT_EQ(absl::GetFlag(FLAGS_cfg_lr), 0.01);
  EXPECT_EQ(absl::GetFlag(FLAGS_cfg_schedule), "GPipe");
  EXPECT_EQ(absl::GetFlag(FLAGS_cfg_sp), 1);
  const std::map<std::string, std::string> values = FlagValues(kNames);
  EXPECT_EQ(values, (std::map<std::string, std::string>{
                        {"cfg_lr", "0.01"}, {"cfg_schedule", "GPipe"}, {"cfg_sp", "1"}, {"cfg_steps", "12"}}));
}

TEST(FlagConfig, CommandLineValueWinsOverTheConfig) {
  ResetFlags();
  absl::SetFlag(&FLAGS_cfg_steps, 3);  // as if given on the command line
  ApplyTomlConfig(WriteToml("override.toml", "[training]\ncfg_steps = 12\ncfg_lr = 0.5\n"), kNames);
  EXPECT_EQ(absl::GetFlag(FLAGS_cfg_steps), 3);
  EXPECT_EQ(absl::GetFlag(FLAGS_cfg_lr), 0.5);
  EXPECT_EQ(FlagValues(kNames).size(), 2u);  // the two given; the others hold no value
}

TEST(FlagConfig, UnknownKeyIsAnErrorNamingIt) {
  ResetFlags();
  ExpectErrorContains([] { ApplyTomlConfig(WriteToml("unknown.toml", "[model]\nbogus_key = 1\n"), kNames); },
                      ErrorCode::kInvalidArgument, "unknown key 'bogus_key' (line 2");
  // A registered flag outside the job's list is unknown to the config too.
  ExpectErrorContains([] { ApplyTomlConfig(WriteToml("plain.toml", "cfg_plain = 1\n"), kNames); },
                      ErrorCode::kInvalidArgument, "unknown key 'cfg_plain'");
}

TEST(FlagConfig, DuplicateNestedArrayAndUnparsableValuesAreErrors) {
  ResetFlags();
  ExpectErrorContains([] { ApplyTomlConfig(WriteToml("twice.toml", "[a]\ncfg_steps = 1\n[b]\ncfg_steps = 2\n"), kNames); },
                      ErrorCode::kInvalidArgument, "key 'cfg_steps' is given twice (line 4)");
  ExpectErrorContains([] { ApplyTomlConfig(WriteToml("nested.toml", "[a.b]\ncfg_steps = 1\n"), kNames); },
                      ErrorCode::kInvalidArgument, "table [a.b] is nested too deep");
  ExpectErrorContains([] { ApplyTomlConfig(WriteToml("array.toml", "cfg_steps = [1, 2]\n"), kNames); },
                      ErrorCode::kInvalidArgument, "key 'cfg_steps' (line 1) must be an integer, float, string or boolean");
  ResetFlags();
  ExpectErrorContains([] { ApplyTomlConfig(WriteToml("badvalue.toml", "cfg_steps = \"many\"\n"), kNames); },
                      ErrorCode::kInvalidArgument, "key 'cfg_steps': ");
  ExpectErrorContains([] { ApplyTomlConfig(WriteToml("syntax.toml", "cfg_steps = = 1\n"), kNames); },
                      ErrorCode::kInvalidArgument, "(line 1, column");
  ExpectErrorContains([] { ApplyTomlConfig("/nonexistent/tessel.toml", kNames); }, ErrorCode::kInvalidArgument,
                      "config /nonexistent/tessel.toml: ");
}

}  // namespace
}  // namespace tessel::examples
