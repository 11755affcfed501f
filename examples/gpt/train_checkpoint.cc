// examples/gpt/train_checkpoint.cc — CheckpointState and Resume for any number of model parts (moved
// from train.cc and generalized from one model to the pipeline stages of a rank).
#include "examples/gpt/train_checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>

#include "checkpoint/checksum.h"
#include "checkpoint/load.h"
#include "checkpoint/metadata.h"
#include "core/base/error.h"
#include "core/ops/view.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"
#include "examples/gpt/parallel_gpt.h"

namespace tessel::examples {
namespace {

constexpr const char* kFingerprintPrefix = "train.fingerprint.";
constexpr const char* kDataCursor = "train.data_cursor";
constexpr const char* kLayout = "train.layout";
constexpr const char* kRngState = "train.rng_state";

// "seed:offset" of every rank's generator in rank order, ';'-separated. Collective over `world` (an
// all-gather), so every rank holds the same string and the save keeps one value.
std::string GatherRngState(const Generator& gen, const comm::ProcessGroupPtr& world) {
  const int n = world ? world->size() : 1;
  Tensor mine = FromVector(std::vector<int64_t>{static_cast<int64_t>(gen.seed()), static_cast<int64_t>(gen.offset())});
  Tensor all = Empty({2 * n}, DType::kInt64);
  if (world) {
    world->AllGather(all, mine)->Wait();
  } else {
    all = mine;
  }
  std::string text;
  const int64_t* v = all.data_ptr<int64_t>();
  for (int r = 0; r < n; ++r) {
    text += Str(r ? ";" : "", static_cast<uint64_t>(v[2 * r]), ":", static_cast<uint64_t>(v[2 * r + 1]));
  }
  return text;
}

void AddRunState(checkpoint::StateDict& sd, const RunState& run, int64_t step, const comm::ProcessGroupPtr& world) {
  sd[kDataCursor] = step;  // the next batch is SampleBatch(..., step, ...)
  sd[kLayout] = run.layout;
  if (run.gen != nullptr) sd[kRngState] = GatherRngState(*run.gen, world);
}

// After Load: the data cursor must be the step (kDataLoss otherwise), a layout change is noted, and this
// rank's generator continues from its saved offset when the world size is the saved one.
void ApplyRunState(const std::string& dir, const checkpoint::StateDict& sd, RunState& run, int64_t step,
                   const comm::ProcessGroupPtr& world) {
  const int rank = world ? world->rank() : 0;
  const int n = world ? world->size() : 1;
  const int64_t cursor = std::get<int64_t>(sd.at(kDataCursor));
  TESSEL_CHECK_CODE(ErrorCode::kDataLoss, cursor == step, "train: ", dir, " is at step ", step,
                    " but its data cursor is at batch ", cursor, ": the checkpoint is inconsistent");
  const std::string& layout = std::get<std::string>(sd.at(kLayout));
  if (rank == 0 && layout != run.layout) {
    std::printf("resume: note: saved with layout '%s', resharded into '%s'\n", layout.c_str(), run.layout.c_str());
  }
  if (run.gen == nullptr || !sd.count(kRngState)) return;
  std::vector<std::pair<uint64_t, uint64_t>> states;
  std::stringstream in(std::get<std::string>(sd.at(kRngState)));
  for (std::string item; std::getline(in, item, ';');) {
    const size_t colon = item.find(':');
    TESSEL_CHECK_CODE(ErrorCode::kDataLoss, colon != std::string::npos, "train: ", dir, ": malformed ", kRngState,
                      " entry '", item, "'");
    states.emplace_back(std::stoull(item.substr(0, colon)), std::stoull(item.substr(colon + 1)));
  }
  if (static_cast<int>(states.size()) != n) {
    if (rank == 0) {
      std::printf("resume: note: RNG states of %zu ranks saved, %d ranks now: each rank keeps its fresh generator\n",
                  states.size(), n);
    }
    return;
  }
  TESSEL_CHECK(states[rank].first == run.gen->seed(), "train: ", dir, " holds rank ", rank, "'s RNG seed ",
               states[rank].first, " but this run's seed is ", run.gen->seed());
  run.gen->set_offset(states[rank].second);
}

// xxh3 of every full tensor (model + optimizer state). Collective: a sharded tensor is gathered, one
// at a time, so no rank ever holds more than one full tensor beyond its shards.
std::map<std::string, uint64_t> Fingerprints(const std::vector<const nn::Module*>& parts,
                                             const std::vector<optim::Optimizer*>& optimizers) {
  std::map<std::string, uint64_t> sums;
  for (const auto& [fqn, value] : GetPartsStateDict(parts, optimizers)) {
    if (const Tensor* t = std::get_if<Tensor>(&value)) {
      const Tensor c = Contiguous(t->impl()->MaterializeFull(*t));
      sums[fqn] = checkpoint::Checksum(c.raw_data(), c.numel() * ElementSize(c.dtype()));
    }
  }
  return sums;
}

// The config first: loading into a model of another shape would only list mismatched tensors.
void CheckConfig(const std::string& dir, const checkpoint::Metadata& md, const std::string& config) {
  const auto saved = md.values.find("train.config");
  TESSEL_CHECK(saved != md.values.end(), "train: ", dir, " is not a checkpoint of this example (no train.config)");
  const std::string* saved_text = std::get_if<std::string>(&saved->second);
  TESSEL_CHECK(saved->second == checkpoint::ScalarValue(config), "train: checkpoint ", dir,
               " was saved by a run with '", saved_text ? *saved_text : "?", "'; this run has '", config,
               "' (pass the same model and batch flags)");
}

}  // namespace

checkpoint::StateDict CheckpointState(const std::vector<const nn::Module*>& parts,
                                      const std::vector<optim::Optimizer*>& optimizers, int64_t step,
                                      const std::string& config, const std::string& schedule, int nranks,
                                      const comm::ProcessGroupPtr& world, const RunState* run) {
  checkpoint::StateDict sd = GetPartsStateDict(parts, optimizers);
  if (run != nullptr) AddRunState(sd, *run, step, world);
  sd["train.step"] = step;
  sd["train.config"] = config;
  sd["train.schedule"] = schedule;
  sd["train.world_size"] = int64_t{nranks};
  for (const auto& [fqn, sum] : Fingerprints(parts, optimizers)) {
    sd[kFingerprintPrefix + fqn] = checkpoint::ChecksumToHex(sum);
  }
  return sd;
}

int64_t Resume(const std::string& dir, const std::vector<const nn::Module*>& parts,
               const std::vector<optim::Optimizer*>& optimizers, const std::string& config,
               const std::string& schedule, const comm::ProcessGroupPtr& world, int nranks, bool partial,
               RunState* run) {
  const checkpoint::Metadata md = checkpoint::ReadMetadata(dir);
  CheckConfig(dir, md, config);
  checkpoint::StateDict sd = GetPartsStateDict(parts, optimizers);
  std::vector<std::string> tensor_keys;
  for (const auto& [fqn, v] : sd) {
    if (std::holds_alternative<Tensor>(v)) tensor_keys.push_back(fqn);
  }
  sd["train.step"] = int64_t{0};
  sd["train.config"] = std::string();
  const bool has_schedule = md.values.count("train.schedule") > 0;  // older checkpoints lack it
  if (has_schedule) sd["train.schedule"] = std::string();
  sd["train.world_size"] = int64_t{0};
  for (const std::string& fqn : tensor_keys) sd[kFingerprintPrefix + fqn] = std::string();
  for (const char* key : {kDataCursor, kLayout, kRngState}) {  // checkpoints before issue 15 lack them
    if (md.values.count(key)) std::visit([&](const auto& v) { sd[key] = v; }, md.values.at(key));
  }
  const checkpoint::LoadResult loaded = checkpoint::Load(sd, dir, {.strict = !partial});
  TESSEL_CHECK_CODE(ErrorCode::kNotFound, loaded.missing_keys.empty(), "train: ", dir, " lacks ",
                    loaded.missing_keys.size(), " keys of this rank's stages, first ",
                    loaded.missing_keys.empty() ? "" : loaded.missing_keys.front());
  SetPartsOptimizerStateDict(parts, optimizers, sd);
  std::vector<std::string> differ;
  const std::map<std::string, uint64_t> now = Fingerprints(parts, optimizers);
  for (const std::string& fqn : tensor_keys) {
    const auto want = checkpoint::ChecksumFromHex(std::get<std::string>(sd.at(kFingerprintPrefix + fqn)));
    if (!want || now.at(fqn) != *want) differ.push_back(fqn);
  }
  TESSEL_CHECK_CODE(ErrorCode::kDataLoss, differ.empty(), "train: after loading ", dir, ", ", differ.size(),
                    " full tensors differ from the saved ones, first ", differ.empty() ? "" : differ.front());
  const int64_t step = std::get<int64_t>(sd.at("train.step"));
  if (run != nullptr && sd.count(kDataCursor)) ApplyRunState(dir, sd, *run, step, world);
  Tensor total = Scalar(static_cast<double>(loaded.bytes_read), DType::kFloat64);
  if (world) world->AllReduce(total, comm::ReduceOp::kSum)->Wait();
  const std::string saved_schedule = has_schedule ? std::get<std::string>(sd.at("train.schedule")) : schedule;
  if ((!world || world->rank() == 0) && saved_schedule != schedule) {
    std::printf("resume: note: the checkpoint was trained with the LR schedule '%s'; continuing with '%s'\n",
                saved_schedule.c_str(), schedule.c_str());
  }
  if (!world || world->rank() == 0) {
    std::printf("resume: step %lld from %s (saved on %lld ranks, loaded on %d, %.2f MiB read): %zu tensors "
                "(model + optimizer) match the saved ones bitwise\n",
                static_cast<long long>(step), dir.c_str(), static_cast<long long>(std::get<int64_t>(sd.at("train.world_size"))),
                nranks, total.item<double>() / 1048576.0, tensor_keys.size());
    std::fflush(stdout);
  }
  return step;
}

std::optional<std::string> NewestCompleteCheckpoint(const std::string& root, bool verbose) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (root.empty() || !fs::is_directory(root, ec)) return std::nullopt;
  std::map<int64_t, std::string, std::greater<>> steps;  // newest first
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || name.rfind("step_", 0) != 0) continue;
    const std::string digits = name.substr(5);
    if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    steps[std::stoll(digits)] = e.path().string();
  }
  for (const auto& [step, dir] : steps) {
    try {
      const checkpoint::Metadata md = checkpoint::ReadMetadata(dir);
      if (md.values.count("train.step")) return dir;
      if (verbose) std::printf("resume: skipping %s: not a checkpoint of this example (no train.step)\n", dir.c_str());
    } catch (const Error& e) {
      if (verbose) std::printf("resume: skipping %s: not complete (%s)\n", dir.c_str(), e.what());
    }
  }
  return std::nullopt;
}

}  // namespace tessel::examples
