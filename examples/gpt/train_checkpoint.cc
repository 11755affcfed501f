// examples/gpt/train_checkpoint.cc — CheckpointState and Resume for any number of model parts (moved
// from train.cc and generalized from one model to the pipeline stages of a rank).
#include "examples/gpt/train_checkpoint.h"

#include <cstdio>
#include <map>

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
                                      const std::string& config, const std::string& schedule, int nranks) {
  checkpoint::StateDict sd = GetPartsStateDict(parts, optimizers);
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
               const std::string& schedule, const comm::ProcessGroupPtr& world, int nranks, bool partial) {
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
  const checkpoint::LoadResult loaded = checkpoint::Load(sd, dir, {.strict = !partial});
  TESSEL_CHECK_CODE(ErrorCode::kNotFound, loaded.missing_keys.empty(), "train: ", dir, " lacks ",
                    loaded.missing_keys.size(), " keys of this rank's stages, first ",
                    loaded.missing_keys.empty() ? "" : loaded.missing_keys.front());
  TESSEL_CHECK(loaded.mismatched_keys.empty(), "train: ", dir, ": ",
               loaded.mismatched_keys.empty() ? "" : loaded.mismatched_keys.front());
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

}  // namespace tessel::examples
