// tests/comp3d_checkpoint_test.cc — checkpoints across 3-D layouts (examples/gpt/parallel_gpt.h): a
// checkpoint saved after 2 AdamW steps under each of 1 rank, (pp 2, dp_shard 2, tp 2), (pp 2, dp_shard 4),
// (dp_replicate 2, dp_shard 2, tp 2) and (pp 2, tp 2) loads bitwise into every one of them (the full 5 x 5
// matrix): every parameter, every AdamW moment and every step count, gathered to full tensors, equals what
// the saving run held; the stage split changes with pp, the FQNs do not.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint/load.h"
#include "checkpoint/save.h"
#include "comm/backends/threads.h"
#include "dtensor/dtensor.h"
#include "examples/gpt/parallel_gpt.h"
#include "tests/pp_testing.h"

namespace tessel::examples {
namespace {

namespace ppt = pipelining::pp_testing;
using pipelining::ScheduleKind;

struct Layout {
  std::string name;
  ParallelDims dims;
  ScheduleKind schedule;
};

// Full values of every tensor entry and every int64 entry of the state dicts of all ranks.
struct Snapshot {
  std::mutex mu;
  std::map<std::string, std::vector<float>> tensors;
  std::map<std::string, int64_t> ints;
  std::vector<std::string> conflicts;
};

void Record(const checkpoint::StateDict& sd, Snapshot& snap) {
  std::map<std::string, std::vector<float>> tensors;
  std::map<std::string, int64_t> ints;
  for (const auto& [key, value] : sd) {  // sorted keys: every rank of a mesh gathers in the same order
    if (const Tensor* t = std::get_if<Tensor>(&value)) {
      tensors[key] = (t->is_distributed() ? dtensor::DTensor(*t).FullTensor() : *t).ToVector<float>();
    } else if (const int64_t* i = std::get_if<int64_t>(&value)) {
      ints[key] = *i;
    }
  }
  std::lock_guard<std::mutex> lock(snap.mu);
  for (auto& [key, v] : tensors) {
    if (snap.tensors.count(key) && snap.tensors[key] != v) snap.conflicts.push_back(key);
    snap.tensors[key] = std::move(v);
  }
  for (auto& [key, v] : ints) snap.ints[key] = v;
}

struct Run {
  ParallelMesh mesh;
  ParallelGpt model;
  std::vector<std::unique_ptr<optim::AdamW>> owned;
  std::vector<optim::Optimizer*> optimizers;
};

std::unique_ptr<Run> Build(const Layout& layout, const comm::ProcessGroupPtr& world, uint64_t seed) {
  auto run = std::make_unique<Run>(Run{ParallelMesh::Build(world, layout.dims), {}, {}, {}});
  run->model = BuildParallelGpt(ppt::Config(), seed, run->mesh, {.schedule = layout.schedule, .num_microbatches = 2});
  for (nn::GPT* part : run->model.parts) {
    run->owned.push_back(std::make_unique<optim::AdamW>(part->NamedParameters(), optim::AdamWOptions{.lr = 0.05}));
    run->optimizers.push_back(run->owned.back().get());
  }
  return run;
}

void SaveAfterTwoSteps(const Layout& layout, const std::string& dir, Snapshot& saved) {
  comm::RunRanks(static_cast<int>(layout.dims.world_size()), [&](comm::ProcessGroupPtr world) {
    std::unique_ptr<Run> run = Build(layout, world, ppt::kSeed);
    for (int step = 0; step < 2; ++step) {
      auto [idx, tgt] = ppt::Batch(step);
      run->model.ForwardBackward(idx, tgt);
      for (optim::Optimizer* opt : run->optimizers) {
        opt->Step();
        opt->ZeroGrad();
      }
    }
    const checkpoint::StateDict sd = run->model.GetStateDict(run->optimizers);
    checkpoint::Save(sd, dir, world);
    Record(sd, saved);
  });
}

void LoadInto(const Layout& layout, const std::string& dir, Snapshot& loaded) {
  comm::RunRanks(static_cast<int>(layout.dims.world_size()), [&](comm::ProcessGroupPtr world) {
    std::unique_ptr<Run> run = Build(layout, world, /*seed=*/ppt::kSeed + 99);  // other values before the load
    checkpoint::StateDict sd = run->model.GetStateDict(run->optimizers);
    const checkpoint::LoadResult r = checkpoint::Load(sd, dir, {.strict = false});
    EXPECT_TRUE(r.missing_keys.empty()) << r.missing_keys.front();
    run->model.SetOptimizerStateDict(run->optimizers, sd);
    Record(run->model.GetStateDict(run->optimizers), loaded);
  });
}

const std::vector<Layout>& Layouts() {
  static const std::vector<Layout> layouts = {
      {"one_rank", {}, ScheduleKind::k1F1B},
      {"pp2_dpshard2_tp2", {.pp = 2, .dp_shard = 2, .tp = 2}, ScheduleKind::k1F1B},
      {"pp2_dpshard4", {.pp = 2, .dp_shard = 4}, ScheduleKind::kInterleaved1F1B},
      {"dprep2_dpshard2_tp2", {.dp_replicate = 2, .dp_shard = 2, .tp = 2}, ScheduleKind::k1F1B},
      {"pp2_tp2", {.pp = 2, .tp = 2}, ScheduleKind::kInterleaved1F1B},
  };
  return layouts;
}

TEST(Comp3dCheckpointTest, EveryLayoutLoadsBitwiseIntoEveryLayout) {
  const std::string root = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") + "/comp3d";
  for (const Layout& from : Layouts()) {
    const std::string dir = root + "/" + from.name;
    Snapshot saved;
    SaveAfterTwoSteps(from, dir, saved);
    ASSERT_TRUE(saved.conflicts.empty()) << from.name << ": replicas differ on " << saved.conflicts.front();
    // Parameters, exp_avg and exp_avg_sq of all 8 blocks + embeddings + head; a step count per parameter.
    ASSERT_EQ(saved.tensors.size(), 3 * ppt::Reference().params.size()) << from.name;
    for (const auto& [key, step] : saved.ints) ASSERT_EQ(step, 2) << key;
    for (const Layout& to : Layouts()) {
      SCOPED_TRACE(from.name + " -> " + to.name);
      Snapshot loaded;
      LoadInto(to, dir, loaded);
      EXPECT_TRUE(loaded.conflicts.empty());
      EXPECT_EQ(loaded.ints, saved.ints);
      ASSERT_EQ(loaded.tensors.size(), saved.tensors.size());
      for (const auto& [key, want] : saved.tensors) EXPECT_EQ(loaded.tensors[key], want) << key << " not bitwise";
    }
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace tessel::examples
