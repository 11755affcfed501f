// tp/parallelize_module.cc — plan matching and style application.
#include "tp/parallelize_module.h"

#include <fnmatch.h>

#include <algorithm>

#include "core/base/error.h"
#include "tp/distribute_module.h"
#include "tp/styles/styles.h"

namespace tessel::tp {
namespace {

std::vector<std::string> SplitAtoms(const std::string& fqn) {
  std::vector<std::string> atoms;
  if (fqn.empty()) return atoms;
  size_t start = 0;
  while (true) {
    const size_t dot = fqn.find('.', start);
    atoms.push_back(fqn.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) return atoms;
    start = dot + 1;
  }
}

bool AtomMatches(const std::string& pattern, const std::string& name) {
  return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

// Where matching `pattern` stopped: the deepest matched prefix and its children's names, for the error.
std::string WhereMatchingStopped(nn::Module& root, const std::vector<std::string>& atoms) {
  std::vector<std::pair<std::string, nn::Module*>> level = {{"", &root}};
  for (const std::string& atom : atoms) {
    std::vector<std::pair<std::string, nn::Module*>> next;
    for (auto& [fqn, m] : level) {
      for (auto& [name, child] : m->NamedChildren()) {
        if (AtomMatches(atom, name)) next.emplace_back(fqn.empty() ? name : fqn + "." + name, child);
      }
    }
    if (next.empty()) {
      std::string children;
      for (auto& [name, child] : level.front().second->NamedChildren())
        children += (children.empty() ? "" : ", ") + name;
      const std::string at = level.front().first.empty() ? "the root" : "'" + level.front().first + "'";
      return Str("no child of ", at, " (a ", level.front().second->type_name(), ") matches '", atom,
                 "'; its children: [", children, "]");
    }
    level = std::move(next);
  }
  return "";
}

void ApplyStyle(const ParallelStyle& style, nn::Module& module, const std::string& fqn, const dtensor::DeviceMesh& mesh,
                const DistributeModuleOptions& options) {
  DistributeModuleOptions labelled = options;
  labelled.collective_label = Str("tp '", fqn.empty() ? "<root>" : fqn, "'");
  std::visit([&](const auto& s) { internal::Apply(s, module, fqn, mesh, labelled); }, style);
}

}  // namespace

dtensor::DeviceMesh TensorParallelMesh(const dtensor::DeviceMesh& mesh, const std::string& tp_axis) {
  if (mesh.ndim() == 1) return mesh;
  const auto& names = mesh.axis_names();
  const bool has = std::find(names.begin(), names.end(), tp_axis) != names.end();
  std::string axes;
  for (const auto& n : names) axes += (axes.empty() ? "" : ", ") + n;
  TESSEL_CHECK(has, "parallelize_module: the mesh ", mesh.ToString(), " has no mesh axis '", tp_axis, "' (axes: ", axes,
               "); pass a 1-D mesh or set ParallelizeOptions.tp_axis");
  return mesh[tp_axis];
}

std::vector<std::string> MatchModules(nn::Module& root, const std::string& pattern) {
  const std::vector<std::string> atoms = SplitAtoms(pattern);
  std::vector<std::string> out;
  for (auto& [fqn, m] : root.NamedModules()) {
    const std::vector<std::string> names = SplitAtoms(fqn);
    if (names.size() != atoms.size()) continue;  // (the pattern "" has no atoms: the root, as torch's shortcut)
    bool all = true;
    for (size_t i = 0; i < names.size() && all; ++i) all = AtomMatches(atoms[i], names[i]);
    if (all) out.push_back(fqn);
  }
  return out;
}

namespace {

// The tensor-parallel mesh, after checking that nothing below `module` is fully_shard'ed yet.
dtensor::DeviceMesh CheckedTpMesh(nn::Module& module, const dtensor::DeviceMesh& mesh,
                                  const ParallelizeOptions& options) {
  const dtensor::DeviceMesh tp = TensorParallelMesh(mesh, options.tp_axis);
  for (auto& [fqn, m] : module.NamedModules()) {
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !IsFullyShardedModule(*m),
                      "parallelize_module: ", fqn.empty() ? std::string("the root module") : "'" + fqn + "'", " (a ",
                      m->type_name(),
                      ") is already fully_shard'ed; apply tensor parallelism first (order: pipeline split -> TP -> "
                      "activation checkpointing -> fully_shard)");
  }
  return tp;
}

}  // namespace

nn::Module& ParallelizeModule(nn::Module& module, const dtensor::DeviceMesh& mesh, const ParallelizePlan& plan,
                              const ParallelizeOptions& options) {
  const dtensor::DeviceMesh tp = CheckedTpMesh(module, mesh, options);
  const DistributeModuleOptions dist{.src_data_rank = options.src_data_rank};
  // Resolve every pattern before applying any, so a typo leaves the module untouched.
  std::vector<std::vector<std::string>> matches;
  for (const auto& [pattern, style] : plan) {
    matches.push_back(MatchModules(module, pattern));
    TESSEL_CHECK(!matches.back().empty(), "parallelize_module: plan entry '", pattern, "' (", StyleName(style),
                 ") matches no submodule of the ", module.type_name(), ": ",
                 WhereMatchingStopped(module, SplitAtoms(pattern)));
  }
  for (size_t i = 0; i < plan.size(); ++i) {
    for (const std::string& fqn : matches[i]) ApplyStyle(plan[i].second, *module.Submodule(fqn), fqn, tp, dist);
  }
  return module;
}

nn::Module& ParallelizeModule(nn::Module& module, const dtensor::DeviceMesh& mesh, const ParallelStyle& style,
                              const ParallelizeOptions& options) {
  const dtensor::DeviceMesh tp = CheckedTpMesh(module, mesh, options);
  ApplyStyle(style, module, options.fqn, tp, DistributeModuleOptions{.src_data_rank = options.src_data_rank});
  return module;
}

}  // namespace tessel::tp
