// examples/gpt/flag_config.cc — flag values as text and the TOML config (see flag_config.h).
#include "examples/gpt/flag_config.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>

#include <toml++/toml.h>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "core/base/error.h"

namespace tessel::examples {
namespace {

absl::CommandLineFlag& FindFlag(std::string_view name) {
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(absl::string_view(name.data(), name.size()));
  TESSEL_INTERNAL_ASSERT(flag != nullptr, "flag --", name, " is not registered");
  return *flag;
}

// A TOML leaf value as the text an absl flag parses.
std::string ValueText(const std::string& path, std::string_view key, const toml::node& node) {
  if (const auto* v = node.as_integer()) return std::to_string(v->get());
  if (const auto* v = node.as_boolean()) return v->get() ? "1" : "0";
  if (const auto* v = node.as_string()) return v->get();
  if (const auto* v = node.as_floating_point()) {
    char text[64];
    std::snprintf(text, sizeof text, "%.17g", v->get());
    return text;
  }
  TESSEL_CHECK(false, "config ", path, ": key '", key, "' (line ", node.source().begin.line,
               ") must be an integer, float, string or boolean, not a ", node.type());
  return "";
}

}  // namespace

std::map<std::string, std::string> FlagValues(std::span<const std::string_view> names) {
  std::map<std::string, std::string> values;
  for (std::string_view name : names) {
    const std::string text = FindFlag(name).CurrentValue();
    if (!text.empty()) values.emplace(name, text);  // an optional flag without a value unparses to ""
  }
  return values;
}

void ApplyTomlConfig(const std::string& path, std::span<const std::string_view> names) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    TESSEL_CHECK(false, "config ", path, ": ", e.description(), " (line ", e.source().begin.line, ", column ",
                 e.source().begin.column, ")");
  }
  std::set<std::string> seen;
  auto apply = [&](const toml::key& key, const toml::node& node) {
    const std::string name(key.str());
    TESSEL_CHECK(std::find(names.begin(), names.end(), name) != names.end(), "config ", path, ": unknown key '",
                 name, "' (line ", key.source().begin.line, "; the keys are the job's flag names)");
    TESSEL_CHECK(seen.insert(name).second, "config ", path, ": key '", name, "' is given twice (line ",
                 key.source().begin.line, ")");
    const std::string text = ValueText(path, name, node);  // checked even when the command line wins
    absl::CommandLineFlag& flag = FindFlag(name);
    if (!flag.CurrentValue().empty()) return;  // the command line gave it: the flag wins
    std::string error;
    TESSEL_CHECK(flag.ParseFrom(text, &error), "config ", path, ": key '", name, "': ", error);
  };
  for (const auto& [key, node] : root) {
    if (const toml::table* table = node.as_table()) {
      for (const auto& [leaf, value] : *table) {
        TESSEL_CHECK(!value.is_table(), "config ", path, ": table [", key.str(), ".", leaf.str(),
                     "] is nested too deep (one level of tables: [section] then flag = value)");
        apply(leaf, value);
      }
    } else {
      apply(key, node);
    }
  }
}

std::string FromWorkingDirectory(const std::string& path) {
  const char* cwd = std::getenv("BUILD_WORKING_DIRECTORY");
  if (path.empty() || path[0] == '/' || cwd == nullptr || *cwd == '\0') return path;
  return std::string(cwd) + "/" + path;
}

}  // namespace tessel::examples
