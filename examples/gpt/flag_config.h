// examples/gpt/flag_config.h — the main job's flags as one map, and its TOML config (torchtitan style).
//
// The main job declares its flags with absl as std::optional<T> (examples/gpt/train.cc): a flag "holds a
// value" when the command line or the config gave it one, and the job keeps its mode-dependent defaults
// (e.g. --sp is on under --tp and off under --pp) in code. `--config=FILE` reads a TOML file whose keys
// are flag names, grouped in any tables torchtitan-style ([job], [model], [training], [parallelism] ...;
// the table is grouping only, the leaf key names the flag):
//
//   [training]
//   steps = 8
//   lr = 1e-2
//   [parallelism]
//   pp = 2
//   schedule = "1F1B"
//
// Invariant: a flag given on the command line keeps its command-line value (the config never overrides
// it); every key of the config names one of the job's flags, once, or the config is refused with a
// kInvalidArgument naming the key (and the file).
//
// Example:
//   const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
//   if (auto path = absl::GetFlag(FLAGS_config)) ApplyTomlConfig(*path, kTrainFlags);
//   std::map<std::string, std::string> values = FlagValues(kTrainFlags);   // {"steps": "8", ...}
#pragma once

#include <map>
#include <span>
#include <string>
#include <string_view>

namespace tessel::examples {

// REQUIRES: every name is a registered absl flag of type std::optional<T>.
// The text of each named flag that holds a value (absl's unparse: "8", "0.01", "1F1B").
std::map<std::string, std::string> FlagValues(std::span<const std::string_view> names);

// Sets each key of the TOML file at `path` on the flag of the same name unless that flag already holds
// a value. Values: integers, floats, strings and booleans (true / false set 1 / 0). Throws
// kInvalidArgument for an unreadable file or a TOML syntax error (with line and column), a key that is
// not one of `names`, a key given twice (in two tables), an array or nested table, or a value its flag
// does not parse.
void ApplyTomlConfig(const std::string& path, std::span<const std::string_view> names);

// `bazel run` starts the binary in its runfiles: a relative path the user typed (--config, --data) is
// relative to $BUILD_WORKING_DIRECTORY when that is set. Absolute paths and plain runs are unchanged.
std::string FromWorkingDirectory(const std::string& path);

}  // namespace tessel::examples
