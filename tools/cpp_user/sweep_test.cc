// tools/cpp_user/sweep_test.cc — a sweep of pipelining x data parallelism compositions as a C++ user writes them
// against //:tessel alone: PipelineModel first, then fully_shard / Replicate per stage module, the executor drives
// the sharding. Every case compares losses and final full parameters against one-rank training on the global batch
// and, where meaningful, the per-step collective counts the executor's program implies.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/load.h"
#include "checkpoint/save.h"
#include "checkpoint/state_dict.h"
#include "comm/backends/threads.h"
#include "comm/tracer.h"
#include "core/autograd/engine.h"
#include "core/base/error.h"
#include "core/nn/layers.h"
#include "core/nn/module.h"
#include "core/nn/transformer.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"
#include "core/optim/optimizer.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"
#include "dtensor/device_mesh.h"
#include "dtensor/dtensor.h"
#include "fsdp/fully_shard.h"
#include "fsdp/replicate.h"
#include "pipelining/pipeline_gpt.h"
#include "tools/cpp_user/user_model.h"
#include "tp/parallelize_module.h"

namespace {

using namespace tessel;
using namespace tessel_user;
using pipelining::ScheduleKind;

constexpr int64_t kBatch = 16;
constexpr int kLayers = 6;


class Act : public nn::Module {  // no parameters
 public:
  Act() : nn::Module("Act") {}
  TensorList Forward(const TensorList& in) override { return {Gelu(in.at(0), "tanh")}; }
};

class Net : public nn::Module {
 public:
  explicit Net(Generator& gen) : nn::Module("Net") {
    auto list = std::make_shared<nn::ModuleList>();
    for (int i = 0; i < kLayers; ++i) list->Append(std::make_shared<Block>(gen));
    RegisterModule("pre", std::make_shared<Act>());
    RegisterModule("layers", list);
    RegisterModule("act", std::make_shared<Act>());
    RegisterModule("norm", std::make_shared<nn::LayerNorm>(kC));
    RegisterModule("head", std::make_shared<nn::Linear>(kC, kOut, true, gen, 0.2));
  }
  TensorList Forward(const TensorList& in) override {
    Tensor x = in.at(0);
    if (HasChild("pre")) x = (*Submodule("pre"))(x);
    if (HasChild("layers")) {
      for (auto& [name, block] : Submodule("layers")->NamedChildren()) x = (*block)(x);
    }
    if (HasChild("act")) x = (*Submodule("act"))(x);
    if (HasChild("norm")) x = (*Submodule("norm"))(x);
    if (HasChild("head")) x = (*Submodule("head"))(x);
    return {x};
  }
};

std::unique_ptr<nn::Module> MakeNet() {
  Generator gen(5);
  return std::make_unique<Net>(gen);
}

std::pair<Tensor, Tensor> Batch(int step) {
  Generator g(1000 + step);
  Tensor x = Randn(std::vector<int64_t>{kBatch, kSeq, kC}, g);
  return {x, Randn(std::vector<int64_t>{kBatch, kSeq, kOut}, g)};
}

struct Trained {
  std::vector<double> losses;       // per step (Step's reported loss)
  std::vector<double> eval_losses;  // per Eval, in call order
  Params params;
};

// ------------------------------------------------------------------------------------------------------------------
// What a case runs.

enum class Wrap {
  kBlocksAndRoot,  // fully_shard each block, then the stage module
  kBlocksOnly,     // fully_shard each block only (no root)
  kRootOnly,       // fully_shard only the stage module
  kNested,         // fully_shard each block's up and down, then the block, then the stage module
  kReplicate,      // Replicate(stage) (stages without parameters left alone)
  kMixed,          // stage index even: Replicate; odd: fully_shard blocks + root
};

struct Case {
  ScheduleKind kind = ScheduleKind::k1F1B;
  pipelining::ModuleNamesPerStage stages;
  int microbatches = 2;
  int max_active = 3;
  Wrap wrap = Wrap::kBlocksAndRoot;
  std::optional<bool> user_reshard_after_forward;  // set in FullyShardOptions by the user
  std::optional<int64_t> raf_size;                 // FullyShardOptions::reshard_after_forward_size
  fsdp::MixedPrecisionPolicy mp;
  fsdp::ReplicateOptions rep;
  bool hsdp = false;  // mesh (pp, dp_replicate, dp_shard) = (2, 2, 2)
  bool tp = false;    // mesh (pp, dp, tp) = (2, 2, 2), TP on each block's up/down first
  int dp = 2;         // 1-D dp size (mesh (pp=2, dp))
  int steps = 3;
  std::vector<bool> finalize;   // per step; missing = true
  std::set<int> eval_before;    // Eval with the step's batch before step i (i == steps: after the last)
  bool scale_grads = true;
  double momentum = 0.9;
};

double Lr() { return 0.05; }

// A tessel::Error of `code` whose message holds every fragment (//:tessel carries no test helpers).
void ExpectError(const std::function<void()>& fn, ErrorCode code, const std::vector<std::string>& fragments) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const std::string& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
    return;
  }
  ADD_FAILURE() << "no error";
}

// One-rank reference with the same schedule of steps, accumulations and evals.
Trained OneRank(const Case& c) {
  auto net = MakeNet();
  optim::SGD opt(net->NamedParameters(), optim::SGDOptions{.lr = Lr(), .momentum = c.momentum});
  Trained r;
  for (int s = 0; s <= c.steps; ++s) {
    if (c.eval_before.count(s)) {
      auto [x, y] = Batch(s);
      NoGradGuard ng;
      r.eval_losses.push_back(Mse((*net)(x), y).item<double>());
    }
    if (s == c.steps) break;
    auto [x, y] = Batch(s);
    Tensor loss = Mse((*net)(x), y);
    r.losses.push_back(loss.item<double>());
    if (!c.scale_grads) loss = Mul(loss, Full(std::vector<int64_t>{}, double(c.microbatches), loss.dtype()));
    Backward(loss);
    const bool fin = s >= static_cast<int>(c.finalize.size()) || c.finalize[s];
    if (fin) {
      opt.Step();
      opt.ZeroGrad();
    }
  }
  r.params = FullParams(*net);
  return r;
}

struct RankView {
  std::vector<std::map<std::string, int>> per_step;  // "all_gather(dp)" -> count, per step
  std::vector<std::map<std::string, int>> expected;  // same keys from the program
  std::string program;
};

struct PipeRun {
  Trained trained;
  std::map<int, RankView> ranks;
};

std::map<std::string, int> Counts(const comm::CommTracer& t) {
  std::map<std::string, int> out;
  for (const auto& r : t.records()) {
    if (r.kind == comm::CollectiveKind::kSend || r.kind == comm::CollectiveKind::kRecv) continue;
    if (r.group.find("tp") != std::string::npos && r.group.find("dp") == std::string::npos) continue;  // TP's own
    out[Str(comm::CollectiveKindName(r.kind), "(", r.group, ")")]++;
  }
  return out;
}

// Whether `m` owns parameters not under an already wrapped descendant.
bool OwnsUnwrapped(nn::Module& m, const std::set<nn::Module*>& wrapped) {
  if (!m.NamedParameters(/*recurse=*/false).empty()) return true;
  for (auto& [n, child] : m.NamedChildren()) {
    if (wrapped.count(child)) continue;
    if (OwnsUnwrapped(*child, wrapped)) return true;
  }
  return false;
}

PipeRun RunPipeline(const Case& c) {
  PipeRun out;
  std::mutex mu;
  const int world = (c.hsdp || c.tp) ? 8 : 2 * c.dp;
  comm::RunRanksOptions ro;
  ro.timeout = std::chrono::milliseconds(60000);
  comm::RunRanks(world, [&](comm::ProcessGroupPtr wpg) {
    dtensor::DeviceMesh mesh =
        c.hsdp ? dtensor::InitDeviceMesh(wpg, {2, 2, 2}, {"pp", "dp_replicate", "dp_shard"})
        : c.tp ? dtensor::InitDeviceMesh(wpg, {2, 2, 2}, {"pp", "dp", "tp"})
               : dtensor::InitDeviceMesh(wpg, {2, c.dp}, {"pp", "dp"});
    dtensor::DeviceMesh dp_mesh = c.hsdp ? mesh[{"dp_replicate", "dp_shard"}] : mesh["dp"];
    const int64_t dp_size = c.hsdp ? 4 : (c.tp ? 2 : c.dp);
    const int64_t dp_rank = c.hsdp ? mesh.local_rank("dp_replicate") * 2 + mesh.local_rank("dp_shard")
                                   : mesh.local_rank("dp");
    pipelining::PipelineOptions po{.kind = c.kind, .num_microbatches = c.microbatches,
                                   .lower = {.max_active_stages = c.max_active}};
    pipelining::RankPipeline pp = pipelining::PipelineModel(MakeNet, c.stages, mesh.axis_group("pp"), po, Mse);
    if (!c.scale_grads) pp.executor->set_scale_grads(false);
    // stage index -> FSDP groups with parameters / replicate buckets
    std::map<int, int> fsdp_groups;
    std::map<int, int> buckets;
    std::vector<fsdp::ReplicateModule> reps;
    std::vector<int> rep_stage;
    for (size_t i = 0; i < pp.modules.size(); ++i) {
      nn::Module& stage = *pp.modules[i];
      const int sidx = pp.stages[i]->stage_index();
      if (c.tp) {
        tp::ParallelizeModule(stage, mesh["tp"], {{"layers.*.up", tp::ColwiseParallel{}},
                                                  {"layers.*.down", tp::RowwiseParallel{}}});
      }
      Wrap w = c.wrap;
      if (w == Wrap::kMixed) w = sidx % 2 == 0 ? Wrap::kReplicate : Wrap::kBlocksAndRoot;
      if (w == Wrap::kReplicate) {
        if (stage.NamedParameters().empty()) continue;
        reps.push_back(fsdp::Replicate(stage, dp_mesh, c.rep));
        rep_stage.push_back(sidx);
        buckets[sidx] = static_cast<int>(reps.back().num_buckets());
        continue;
      }
      fsdp::FullyShardOptions fo{.mp_policy = c.mp};
      fo.reshard_after_forward = c.user_reshard_after_forward;
      fo.reshard_after_forward_size = c.raf_size;
      std::set<nn::Module*> wrapped;
      auto wrap = [&](nn::Module& m) {
        if (OwnsUnwrapped(m, wrapped)) fsdp_groups[sidx]++;
        fsdp::FullyShard(m, dp_mesh, fo);
        wrapped.insert(&m);
      };
      if (w != Wrap::kRootOnly && stage.HasChild("layers")) {
        for (auto& [name, block] : stage.Submodule("layers")->NamedChildren()) {
          if (w == Wrap::kNested) {
            wrap(*block->Submodule("up"));
            wrap(*block->Submodule("down"));
          }
          wrap(*block);
        }
      }
      if (w == Wrap::kBlocksOnly) {  // every other child with parameters on its own, never the stage root
        for (auto& [name, child] : stage.NamedChildren()) {
          if (name != "layers" && !child->NamedParameters().empty()) wrap(*child);
        }
      } else {
        wrap(stage);
      }
    }
    // Optimizers: one SGD over every plain / FSDP parameter; ZeroOptimizer per replicated stage for zero > 0.
    std::vector<std::unique_ptr<optim::Optimizer>> opts;
    std::vector<std::unique_ptr<fsdp::ZeroOptimizer>> zeros;
    auto make_sgd = [&](nn::StateDict p) {
      return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions{.lr = Lr(), .momentum = c.momentum});
    };
    if (c.rep.zero_stage > 0 && !reps.empty()) {
      nn::StateDict rest;
      for (size_t i = 0; i < pp.modules.size(); ++i) {
        if (fsdp::AsReplicateModule(*pp.modules[i])) continue;
        for (auto& p : pp.modules[i]->NamedParameters()) rest.push_back(p);
      }
      for (auto& r : reps) zeros.push_back(std::make_unique<fsdp::ZeroOptimizer>(r, make_sgd));
      if (!rest.empty()) opts.push_back(make_sgd(rest));
    } else {
      opts.push_back(make_sgd(pp.NamedParameters()));
    }
    Trained mine;
    RankView view;
    auto global_loss = [&](std::optional<double> l) {
      Tensor t = Zeros(std::vector<int64_t>{2}, DType::kFloat64);
      auto* d = static_cast<double*>(t.raw_data());
      d[0] = l.value_or(0.0);
      d[1] = l ? 1.0 : 0.0;
      wpg->AllReduce(t, comm::ReduceOp::kSum)->Wait();
      return d[0] / d[1];
    };
    auto local = [&](const Tensor& t) {
      return Contiguous(Narrow(t, 0, dp_rank * kBatch / dp_size, kBatch / dp_size));
    };
    for (int s = 0; s <= c.steps; ++s) {
      if (c.eval_before.count(s)) {
        auto [x, y] = Batch(s);
        pipelining::StepStats st = pp.executor->Eval(local(x), local(y));
        mine.eval_losses.push_back(global_loss(st.loss));
      }
      if (s == c.steps) break;
      auto [x, y] = Batch(s);
      const bool fin = s >= static_cast<int>(c.finalize.size()) || c.finalize[s];
      pp.executor->set_finalize_gradients(fin);
      comm::CommTracer tracer;
      pipelining::StepStats st = pp.executor->Step(local(x), local(y));
      view.per_step.push_back(Counts(tracer));
      // expected from the program
      std::map<std::string, int> exp;
      const std::string shard_axis = c.hsdp ? "dp_shard" : "dp";
      for (const auto& slot : pp.executor->program()) {
        const pipelining::Action& a = *slot;
        if (a.kind == pipelining::ActionKind::kUnshard && fsdp_groups.count(a.stage)) {
          exp[Str("all_gather(", shard_axis, ")")] += fsdp_groups[a.stage];
        }
        if (a.kind == pipelining::ActionKind::kReduceGrad && fin) {
          if (fsdp_groups.count(a.stage)) {
            exp[Str("reduce_scatter(", shard_axis, ")")] += fsdp_groups[a.stage];
            if (c.hsdp) exp["all_reduce(dp_replicate)"] += fsdp_groups[a.stage];
          }
          if (buckets.count(a.stage)) {
            const std::string k = c.rep.zero_stage == 2 ? "reduce_scatter(dp)" : "all_reduce(dp)";
            exp[k] += buckets[a.stage];
            if (c.rep.find_unused_parameters) exp["all_reduce(dp)"] += 1;
          }
        }
      }
      for (auto it = exp.begin(); it != exp.end();) it = it->second == 0 ? exp.erase(it) : std::next(it);
      view.expected.push_back(exp);
      if (fin) {
        for (auto& o : opts) o->Step();
        for (auto& z : zeros) z->Step();
        for (auto& o : opts) o->ZeroGrad();
        for (auto& z : zeros) z->ZeroGrad();
      }
      mine.losses.push_back(global_loss(st.loss));
    }
    view.program = pipelining::ToString(pp.executor->program());
    Params params;
    for (auto& stage : pp.modules) params.merge(FullParams(*stage));
    std::lock_guard<std::mutex> lock(mu);
    out.trained.params.merge(params);
    if (wpg->rank() == 0) {
      out.trained.losses = mine.losses;
      out.trained.eval_losses = mine.eval_losses;
    }
    out.ranks[wpg->rank()] = std::move(view);
  }, ro);
  return out;
}

void ExpectClose(const std::vector<double>& got, const std::vector<double>& want, double rtol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], rtol * std::abs(want[i]) + 1e-12) << what << " " << i;
  }
}

void ExpectEqualTraining(const Trained& got, const Trained& want, double rtol = 1e-5) {
  ExpectClose(got.losses, want.losses, rtol, "loss");
  ExpectClose(got.eval_losses, want.eval_losses, rtol, "eval loss");
  ASSERT_EQ(got.params.size(), want.params.size());
  int bad = 0;
  for (const auto& [fqn, w] : want.params) {
    ASSERT_EQ(got.params.count(fqn), 1u) << fqn;
    const std::vector<double>& g = got.params.at(fqn);
    ASSERT_EQ(g.size(), w.size()) << fqn;
    double scale = 0, err = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      scale = std::max(scale, std::abs(w[i]));
      err = std::max(err, std::abs(g[i] - w[i]));
    }
    if (rtol > 1e-4) scale = std::max(scale, 0.1);  // bf16: errors follow the activations, not tiny biases
    if (err > rtol * scale && bad++ < 6) ADD_FAILURE() << fqn << ": max err " << err << " scale " << scale;
  }
  EXPECT_EQ(bad, 0);
}

void ExpectCounts(const PipeRun& run) {
  for (const auto& [rank, v] : run.ranks) {
    for (size_t s = 0; s < v.per_step.size(); ++s) {
      std::ostringstream got, want;
      for (auto& [k, n] : v.per_step[s]) got << k << "x" << n << " ";
      for (auto& [k, n] : v.expected[s]) want << k << "x" << n << " ";
      EXPECT_EQ(got.str(), want.str()) << "rank " << rank << " step " << s << " program " << v.program;
    }
  }
}

void Check(const Case& c, bool counts = true, double rtol = 1e-5) {
  const PipeRun run = RunPipeline(c);
  ExpectEqualTraining(run.trained, OneRank(c), rtol);
  if (counts) ExpectCounts(run);
}

const pipelining::ModuleNamesPerStage kTwo = {{"pre", "layers.0", "layers.1", "layers.2"},
                                              {"layers.3", "layers.4", "layers.5", "act", "norm", "head"}};
const pipelining::ModuleNamesPerStage kFour = {{"pre", "layers.0", "layers.1"}, {"layers.2"}, {"layers.3", "layers.4"},
                                               {"layers.5", "act", "norm", "head"}};
const pipelining::ModuleNamesPerStage kEight = {{"pre", "layers.0"}, {"layers.1"}, {"layers.2"}, {"layers.3"},
                                                {"layers.4"}, {"layers.5", "act"}, {"norm"}, {"head"}};
// stage 6 has no parameters
const pipelining::ModuleNamesPerStage kEightEmpty = {{"pre", "layers.0"}, {"layers.1"}, {"layers.2"}, {"layers.3"},
                                                     {"layers.4"}, {"layers.5"}, {"act"}, {"norm", "head"}};

// ---------------------------------------------------------------- schedules
TEST(Sweep, OneFOneB) { Check({.kind = ScheduleKind::k1F1B, .stages = kTwo, .microbatches = 4}); }
TEST(Sweep, GPipe) { Check({.kind = ScheduleKind::kGPipe, .stages = kTwo, .microbatches = 4}); }
TEST(Sweep, Interleaved1F1B) { Check({.kind = ScheduleKind::kInterleaved1F1B, .stages = kFour, .microbatches = 4}); }
TEST(Sweep, LoopedBFS) { Check({.kind = ScheduleKind::kLoopedBFS, .stages = kFour, .microbatches = 4}); }
TEST(Sweep, ZBVZeroBubble) { Check({.kind = ScheduleKind::kZBVZeroBubble, .stages = kFour, .microbatches = 4}); }
TEST(Sweep, DualPipeV) { Check({.kind = ScheduleKind::kDualPipeV, .stages = kFour, .microbatches = 4}); }
TEST(Sweep, InterleavedZeroBubble) {
  Check({.kind = ScheduleKind::kInterleavedZeroBubble, .stages = kFour, .microbatches = 4});
}
TEST(Sweep, OneFOneBFourDpRanks) { Check({.kind = ScheduleKind::k1F1B, .stages = kTwo, .microbatches = 2, .dp = 4}); }

// ---------------------------------------------------------------- windows
TEST(Sweep, Interleaved8StagesWindow1) {
  Check({.kind = ScheduleKind::kInterleaved1F1B, .stages = kEight, .microbatches = 4, .max_active = 1});
}
TEST(Sweep, Interleaved8StagesWindow2) {
  Check({.kind = ScheduleKind::kInterleaved1F1B, .stages = kEight, .microbatches = 4, .max_active = 2});
}
TEST(Sweep, Interleaved8StagesWindow3) {
  Check({.kind = ScheduleKind::kInterleaved1F1B, .stages = kEight, .microbatches = 4, .max_active = 3});
}
TEST(Sweep, ZBVWindow1) {
  Check({.kind = ScheduleKind::kZBVZeroBubble, .stages = kFour, .microbatches = 4, .max_active = 1});
}
TEST(Sweep, DualPipeVWindow1) {
  Check({.kind = ScheduleKind::kDualPipeV, .stages = kFour, .microbatches = 4, .max_active = 1});
}
TEST(Sweep, InterleavedZBWindow1) {
  Check({.kind = ScheduleKind::kInterleavedZeroBubble, .stages = kEight, .microbatches = 4, .max_active = 1});
}

// ---------------------------------------------------------------- wrapping
TEST(Sweep, BlocksOnlyNoRoot) { Check({.stages = kTwo, .wrap = Wrap::kBlocksOnly}); }
TEST(Sweep, BlocksOnlyNoRootInterleaved) {
  Check({.kind = ScheduleKind::kInterleaved1F1B, .stages = kFour, .microbatches = 4, .max_active = 1,
         .wrap = Wrap::kBlocksOnly});
}
TEST(Sweep, RootOnly) { Check({.stages = kTwo, .wrap = Wrap::kRootOnly}); }
TEST(Sweep, Nested) { Check({.stages = kTwo, .wrap = Wrap::kNested}); }
TEST(Sweep, NestedZBV) {
  Check({.kind = ScheduleKind::kZBVZeroBubble, .stages = kFour, .microbatches = 4, .wrap = Wrap::kNested});
}
TEST(Sweep, UserReshardAfterForwardTrue) { Check({.stages = kTwo, .user_reshard_after_forward = true}); }
TEST(Sweep, UserReshardAfterForwardFalse) { Check({.stages = kTwo, .user_reshard_after_forward = false}); }
TEST(Sweep, HsdpUnderPP) { Check({.stages = kTwo, .hsdp = true}); }
TEST(Sweep, HsdpUnderInterleavedWindow1) {
  Check({.kind = ScheduleKind::kInterleaved1F1B, .stages = kFour, .microbatches = 4, .max_active = 1, .hsdp = true});
}
TEST(Sweep, EmptyStageFsdp) {
  Check({.kind = ScheduleKind::kInterleaved1F1B, .stages = kEightEmpty, .microbatches = 4, .max_active = 1});
}
TEST(Sweep, EmptyStageReplicate) {
  Check({.kind = ScheduleKind::kInterleaved1F1B, .stages = kEightEmpty, .microbatches = 4, .wrap = Wrap::kReplicate});
}
TEST(Sweep, EmptyFirstStageFsdp) {
  Check({.stages = {{"pre"},
                    {"layers.0", "layers.1", "layers.2", "layers.3", "layers.4", "layers.5", "act", "norm", "head"}}});
}

// ---------------------------------------------------------------- Replicate / ZeRO
TEST(Sweep, ReplicateZero0) { Check({.stages = kTwo, .wrap = Wrap::kReplicate}); }
TEST(Sweep, ReplicateZero1) { Check({.stages = kTwo, .wrap = Wrap::kReplicate, .rep = {.zero_stage = 1}}); }
TEST(Sweep, ReplicateZero2) { Check({.stages = kTwo, .wrap = Wrap::kReplicate, .rep = {.zero_stage = 2}}); }
TEST(Sweep, ReplicateZero2ZBV) {
  Check({.kind = ScheduleKind::kZBVZeroBubble, .stages = kFour, .microbatches = 4, .wrap = Wrap::kReplicate,
         .rep = {.zero_stage = 2}});
}
TEST(Sweep, ReplicateFindUnused) {
  Check({.stages = kTwo, .wrap = Wrap::kReplicate, .rep = {.find_unused_parameters = true}});
}
TEST(Sweep, ReplicateSmallBuckets) {
  Check({.stages = kTwo, .wrap = Wrap::kReplicate, .rep = {.bucket_cap_bytes = 1000}});
}
TEST(Sweep, ReplicateInterleavedSmallBucketsZero1) {
  Check({.kind = ScheduleKind::kInterleaved1F1B, .stages = kFour, .microbatches = 4, .wrap = Wrap::kReplicate,
         .rep = {.bucket_cap_bytes = 1000, .zero_stage = 1}});
}
TEST(Sweep, MixedReplicateAndFsdpOnOneRank) {
  Check({.kind = ScheduleKind::kZBVZeroBubble, .stages = kFour, .microbatches = 4, .wrap = Wrap::kMixed});
}

// ---------------------------------------------------------------- accumulation, eval, scale_grads
TEST(Sweep, AccumulateFsdp) { Check({.stages = kTwo, .steps = 3, .finalize = {false, true, true}}); }
TEST(Sweep, AccumulateFsdpTwice) {
  Check({.kind = ScheduleKind::kInterleaved1F1B, .stages = kFour, .microbatches = 4, .max_active = 1, .steps = 4,
         .finalize = {false, false, true, true}});
}
TEST(Sweep, AccumulateHsdp) { Check({.stages = kTwo, .hsdp = true, .steps = 3, .finalize = {false, true, true}}); }
TEST(Sweep, AccumulateReplicate) {
  Check({.stages = kTwo, .wrap = Wrap::kReplicate, .steps = 3, .finalize = {false, true, true}});
}
TEST(Sweep, AccumulateReplicateZero2) {
  Check({.stages = kTwo, .wrap = Wrap::kReplicate, .rep = {.zero_stage = 2}, .steps = 3,
         .finalize = {false, true, true}});
}
TEST(Sweep, EvalBeforeFirstStepAndBetween) { Check({.stages = kTwo, .eval_before = {0, 1, 2, 3}}); }
TEST(Sweep, EvalInterleavedWindow1) {
  Check({.kind = ScheduleKind::kInterleaved1F1B, .stages = kFour, .microbatches = 4, .max_active = 1,
         .eval_before = {0, 2, 3}},
        /*counts=*/true);
}
TEST(Sweep, EvalReplicate) { Check({.stages = kTwo, .wrap = Wrap::kReplicate, .eval_before = {0, 1, 3}}); }
TEST(Sweep, EvalDuringAccumulation) {
  Check({.stages = kTwo, .steps = 3, .finalize = {false, true, true}, .eval_before = {1}});
}
TEST(Sweep, NoScaleGrads) { Check({.stages = kTwo, .microbatches = 4, .scale_grads = false}); }
TEST(Sweep, NoScaleGradsReplicateZBV) {
  Check({.kind = ScheduleKind::kZBVZeroBubble, .stages = kFour, .microbatches = 4, .wrap = Wrap::kReplicate,
         .scale_grads = false});
}

// ---------------------------------------------------------------- mixed precision, TP
TEST(Sweep, MixedPrecisionBf16) {
  Check({.stages = kTwo, .mp = {.param_dtype = DType::kBFloat16, .reduce_dtype = DType::kFloat32}}, true, 3e-2);
}
TEST(Sweep, MixedPrecisionBf16Interleaved) {
  Check({.kind = ScheduleKind::kInterleaved1F1B, .stages = kFour, .microbatches = 4, .max_active = 1,
         .mp = {.param_dtype = DType::kBFloat16, .reduce_dtype = DType::kFloat32}},
        true, 3e-2);
}
TEST(Sweep, TensorParallelPlusFsdp) {
  Check({.stages = {{"pre", "layers.0", "layers.1", "layers.2"},
                    {"layers.3", "layers.4", "layers.5", "act", "norm", "head"}},
         .tp = true});
}

TEST(Sweep, ReshardAfterForwardSizeTwoOfFour) {
  Check({.stages = kTwo, .raf_size = 2, .dp = 4});
}

// ---------------------------------------------------------------- custom runs (misuse, callbacks, checkpoint)

struct Env {
  dtensor::DeviceMesh mesh;
  pipelining::RankPipeline pp;
  int64_t dp_rank;
};

Env MakeEnv(comm::ProcessGroupPtr world, ScheduleKind kind, const pipelining::ModuleNamesPerStage& stages, int m,
            bool lower_fsdp = false) {
  dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2, 2}, {"pp", "dp"});
  pipelining::PipelineOptions po{.kind = kind, .num_microbatches = m, .lower = {.fsdp = lower_fsdp}};
  auto pp = pipelining::PipelineModel(MakeNet, stages, mesh.axis_group("pp"), po, Mse);
  const int64_t dp = mesh.local_rank("dp");
  return Env{std::move(mesh), std::move(pp), dp};
}

std::vector<fsdp::FSDPModule> WrapBlocksAndRoot(pipelining::RankPipeline& pp, const dtensor::DeviceMesh& dp_mesh) {
  std::vector<fsdp::FSDPModule> out;
  for (auto& stage : pp.modules) {
    if (stage->HasChild("layers")) {
      for (auto& [name, block] : stage->Submodule("layers")->NamedChildren()) {
        out.push_back(fsdp::FullyShard(*block, dp_mesh));
      }
    }
    out.push_back(fsdp::FullyShard(*stage, dp_mesh));
  }
  return out;
}

Tensor Rows(const Tensor& t, int64_t dp, int64_t n) { return Contiguous(Narrow(t, 0, dp * kBatch / n, kBatch / n)); }

double GlobalLoss(comm::ProcessGroupPtr world, std::optional<double> l) {
  Tensor t = Zeros(std::vector<int64_t>{2}, DType::kFloat64);
  auto* d = static_cast<double*>(t.raw_data());
  d[0] = l.value_or(0.0);
  d[1] = l ? 1.0 : 0.0;
  world->AllReduce(t, comm::ReduceOp::kSum)->Wait();
  return d[0] / d[1];
}

// One step on this dp rank's half of batch `step`, then the optimizer's step: the global loss.
double StepOn(Env& e, optim::Optimizer& opt, comm::ProcessGroupPtr world, int step) {
  auto [x, y] = Batch(step);
  auto st = e.pp.executor->Step(Rows(x, e.dp_rank, 2), Rows(y, e.dp_rank, 2));
  opt.Step();
  opt.ZeroGrad();
  return GlobalLoss(world, st.loss);
}

// This rank's stage parameters (full values) into `got`, and rank 0's losses.
void Collect(Env& e, comm::ProcessGroupPtr world, const std::vector<double>& losses, std::mutex& mu, Trained& got) {
  Params params;
  for (auto& stage : e.pp.modules) params.merge(FullParams(*stage));
  std::lock_guard<std::mutex> lock(mu);
  got.params.merge(params);
  if (world->rank() == 0) got.losses = losses;
}

// fully_shard applied AFTER the first Step (step 0 runs with the whole global batch on every dp rank and no data
// parallelism, so its gradients are the reference's); then steps 1, 2 with the batch split over dp. SGD without
// momentum, rebuilt after wrapping. Must be correct (or a clear error).
// `want`: each rank's collectives over "dp" in steps 1 and 2 (none in step 0): once per group or bucket per step.
void LateWrap(ScheduleKind kind, const pipelining::ModuleNamesPerStage& stages, int m, bool replicate,
              const std::map<int, std::map<std::string, int>>& want_counts) {
  Case c{.kind = kind, .stages = stages, .microbatches = m, .momentum = 0.0};
  c.steps = 3;
  const Trained want = OneRank(c);
  Trained got;
  std::map<int, std::vector<std::map<std::string, int>>> counts;
  std::mutex mu;
  comm::RunRanksOptions ro;
  ro.timeout = std::chrono::milliseconds(30000);
  comm::RunRanks(4, [&](comm::ProcessGroupPtr world) {
    Env e = MakeEnv(world, c.kind, c.stages, c.microbatches);
    auto sgd = [&] { return std::make_unique<optim::SGD>(e.pp.NamedParameters(), optim::SGDOptions{.lr = Lr()}); };
    auto opt = sgd();
    std::vector<double> losses;
    std::vector<std::map<std::string, int>> mine;
    for (int s = 0; s < 3; ++s) {
      auto [x, y] = Batch(s);
      if (s == 1) {
        if (replicate) {
          for (auto& stage : e.pp.modules) fsdp::Replicate(*stage, e.mesh["dp"]);
        } else {
          WrapBlocksAndRoot(e.pp, e.mesh["dp"]);
        }
        opt = sgd();
      }
      comm::CommTracer tracer;
      auto st = s == 0 ? e.pp.executor->Step(x, y) : e.pp.executor->Step(Rows(x, e.dp_rank, 2), Rows(y, e.dp_rank, 2));
      mine.push_back(Counts(tracer));
      opt->Step();
      opt->ZeroGrad();
      losses.push_back(GlobalLoss(world, st.loss));
    }
    Collect(e, world, losses, mu, got);
    std::lock_guard<std::mutex> lock(mu);
    counts[world->rank()] = mine;
  }, ro);
  ExpectEqualTraining(got, want);
  ASSERT_EQ(counts.size(), 4u);
  for (auto& [r, steps] : counts) {
    SCOPED_TRACE(r);
    EXPECT_EQ(steps, (std::vector<std::map<std::string, int>>{{}, want_counts.at(r), want_counts.at(r)}));
  }
}

// Groups with parameters per rank: 1F1B over kTwo, stage 0 (ranks 0, 1): layers.0-2; stage 1 (ranks 2, 3): layers.3-5
// and the root's norm + head. ZBV over kFour, stages 0 + 3 on ranks 0, 1: layers.0, layers.1, layers.5, root;
// stages 1 + 2 on ranks 2, 3: layers.2, layers.3, layers.4. Replicate: one bucket per stage.
std::map<int, std::map<std::string, int>> PerRank(int first_pair, int second_pair, const char* kind) {
  std::map<int, std::map<std::string, int>> out;
  for (int r = 0; r < 4; ++r) {
    const int n = r < 2 ? first_pair : second_pair;
    if (std::string(kind) == "fsdp") {
      out[r] = {{"all_gather(dp)", n}, {"reduce_scatter(dp)", n}};
    } else {
      out[r] = {{"all_reduce(dp)", n}};
    }
  }
  return out;
}

// Applied after the first Step, fully_shard / Replicate are taken up at the next one (PyTorch's stage checks for an
// FSDPModule each time): held, gathered once per step. Under split-backward schedules an unheld group would be
// resharded after I and W would read freed weights.
TEST(SweepMisuse, FullyShardAfterFirstStep) { LateWrap(ScheduleKind::k1F1B, kTwo, 2, false, PerRank(3, 4, "fsdp")); }
TEST(SweepMisuse, FullyShardAfterFirstStepZBV) {
  LateWrap(ScheduleKind::kZBVZeroBubble, kFour, 4, false, PerRank(4, 3, "fsdp"));
}
TEST(SweepMisuse, FullyShardAfterFirstStepInterleavedZB) {
  LateWrap(ScheduleKind::kInterleavedZeroBubble, kFour, 4, false, PerRank(4, 3, "fsdp"));
}
TEST(SweepMisuse, ReplicateAfterFirstStep) { LateWrap(ScheduleKind::k1F1B, kTwo, 2, true, PerRank(1, 1, "ddp")); }
TEST(SweepMisuse, ReplicateAfterFirstStepZBV) {
  LateWrap(ScheduleKind::kZBVZeroBubble, kFour, 4, true, PerRank(2, 2, "ddp"));
}

// Different data-parallel wrapping on the two dp ranks of a stage: the first diverging collective fails on every rank,
// naming both calls (no hang, no silently wrong training).
void RunDifferentWrapping(bool replicate_vs_fsdp) {
  comm::RunRanksOptions ro;
  ro.timeout = std::chrono::milliseconds(20000);
  comm::RunRanks(4, [&](comm::ProcessGroupPtr world) {
    Env e = MakeEnv(world, ScheduleKind::k1F1B, kTwo, 2);
    dtensor::DeviceMesh dp = e.mesh["dp"];
    for (auto& stage : e.pp.modules) {
      if (e.dp_rank == 0) {
        if (replicate_vs_fsdp) {
          fsdp::Replicate(*stage, dp);
        } else {
          for (auto& [n, b] : stage->Submodule("layers")->NamedChildren()) fsdp::FullyShard(*b, dp);
          fsdp::FullyShard(*stage, dp);
        }
      } else {
        fsdp::FullyShard(*stage, dp);
      }
    }
    optim::SGD opt(e.pp.NamedParameters(), optim::SGDOptions{.lr = Lr()});
    for (int s = 0; s < 2; ++s) {
      auto [x, y] = Batch(s);
      e.pp.executor->Step(Rows(x, e.dp_rank, 2), Rows(y, e.dp_rank, 2));
      opt.Step();
      opt.ZeroGrad();
    }
  }, ro);
}

TEST(SweepMisuse, DifferentFsdpWrappingPerDpRank) {
  ExpectError([] { RunDifferentWrapping(false); }, ErrorCode::kAborted,
                               {"collective mismatch on group 'dp'", "for fully_shard '<root>' while rank 0 called "
                                "all_gather #0", "for fully_shard 'layers.0'"});
}

TEST(SweepMisuse, ReplicateOnOneDpRankFsdpOnOther) {
  ExpectError([] { RunDifferentWrapping(true); }, ErrorCode::kAborted,
                               {"collective mismatch on group 'dp'", "for fully_shard '<root>' while rank 0 called "
                                "broadcast #0"});
}

// User-supplied ExecutorOptions callbacks win: the executor must not hold / drive the FSDP states itself.
// (a) counting callbacks that do nothing, program lowered with fsdp=true: FSDP runs per microbatch on its own.
// (b) callbacks that drive FSDPModule themselves after the user holds the groups: same counts as the executor's.
void CallbackCase(bool user_drives) {
  Case c{.stages = kTwo, .microbatches = 2};
  const Trained want = OneRank(c);
  Trained got;
  std::mutex mu;
  std::map<int, std::string> notes;
  comm::RunRanks(4, [&](comm::ProcessGroupPtr world) {
    Env e = MakeEnv(world, ScheduleKind::k1F1B, c.stages, c.microbatches, /*lower_fsdp=*/true);
    std::vector<fsdp::FSDPModule> groups = WrapBlocksAndRoot(e.pp, e.mesh["dp"]);
    fsdp::FSDPModule root = groups.back();
    std::map<std::string, int> calls;
    pipelining::ExecutorOptions eo;
    eo.unshard = [&](int) {
      calls["unshard"]++;
      if (user_drives) for (auto& g : groups) g.Unshard();
    };
    eo.reshard = [&](int) {
      calls["reshard"]++;
      if (user_drives) for (auto& g : groups) g.Reshard();
    };
    eo.reduce_grad = [&](int) {
      calls["reduce_grad"]++;
      if (user_drives) root.ReduceGrad();
    };
    if (user_drives) {
      root.SetReshardAfterForward(false);
      root.SetReshardAfterBackward(false);
      root.SetRequiresGradientSync(false);
    }
    std::vector<pipelining::PipelineStage*> raw;
    for (auto& st : e.pp.stages) raw.push_back(st.get());
    e.pp.executor = std::make_unique<pipelining::PipelineExecutor>(raw, e.pp.lowered.at(e.mesh.local_rank("pp")),
                                                                   c.microbatches, eo);
    optim::SGD opt(e.pp.NamedParameters(), optim::SGDOptions{.lr = Lr(), .momentum = 0.9});
    std::vector<double> losses;
    std::string note;
    for (int s = 0; s < c.steps; ++s) {
      auto [x, y] = Batch(s);
      comm::CommTracer tracer;
      auto st = e.pp.executor->Step(Rows(x, e.dp_rank, 2), Rows(y, e.dp_rank, 2));
      for (auto& [k, n] : Counts(tracer)) note += Str(" ", k, "x", n);
      note += " |";
      opt.Step();
      opt.ZeroGrad();
      losses.push_back(GlobalLoss(world, st.loss));
    }
    for (auto& [k, n] : calls) note += Str(" ", k, "=", n);
    Collect(e, world, losses, mu, got);
    std::lock_guard<std::mutex> lock(mu);
    notes[world->rank()] = note;
    EXPECT_EQ(calls["unshard"], c.steps);
    EXPECT_EQ(calls["reshard"], c.steps);
    EXPECT_EQ(calls["reduce_grad"], c.steps);
  });
  ExpectEqualTraining(got, want);
  if (!user_drives) return;  // fully_shard then runs per microbatch on its own
  for (auto& [r, n] : notes) {  // once per group per step (3 groups on stage 0's ranks, 4 on stage 1's)
    const int g = r < 2 ? 3 : 4;
    const std::string step = Str(" all_gather(dp)x", g, " reduce_scatter(dp)x", g, " |");
    EXPECT_EQ(n, Str(step, step, step, " reduce_grad=3 reshard=3 unshard=3")) << "rank " << r;
  }
}

TEST(SweepCallbacks, CountingCallbacksWin) { CallbackCase(false); }
TEST(SweepCallbacks, UserDrivenCallbacks) { CallbackCase(true); }

// drive_stage_sharding = false: FSDP left alone, trains per microbatch, correct.
void DriveFalse(ScheduleKind kind, const pipelining::ModuleNamesPerStage& stages, int m) {
  Case c{.kind = kind, .stages = stages, .microbatches = m};
  const Trained want = OneRank(c);
  Trained got;
  std::mutex mu;
  comm::RunRanks(4, [&](comm::ProcessGroupPtr world) {
    Env e = MakeEnv(world, c.kind, c.stages, c.microbatches);
    WrapBlocksAndRoot(e.pp, e.mesh["dp"]);
    std::vector<pipelining::PipelineStage*> raw;
    for (auto& st : e.pp.stages) raw.push_back(st.get());
    e.pp.executor = std::make_unique<pipelining::PipelineExecutor>(
        raw, e.pp.lowered.at(e.mesh.local_rank("pp")), c.microbatches,
        pipelining::ExecutorOptions{.drive_stage_sharding = false});
    optim::SGD opt(e.pp.NamedParameters(), optim::SGDOptions{.lr = Lr(), .momentum = 0.9});
    std::vector<double> losses;
    for (int s = 0; s < c.steps; ++s) losses.push_back(StepOn(e, opt, world, s));
    Collect(e, world, losses, mu, got);
  });
  ExpectEqualTraining(got, want);
}

TEST(SweepCallbacks, DriveStageShardingFalse) { DriveFalse(ScheduleKind::k1F1B, kTwo, 2); }
// Left undriven (the Python face's setting) under a split-backward schedule: fully_shard reshards after I and W
// fails reading the freed weights, naming the action and why.
TEST(SweepCallbacks, DriveStageShardingFalseZBV) {
  ExpectError([] { DriveFalse(ScheduleKind::kZBVZeroBubble, kFour, 4); }, ErrorCode::kFailedPrecondition,
                               {"W0: raw_data:", "reads a storage whose bytes were freed", "split backward"});
}
TEST(SweepCallbacks, DriveStageShardingFalseInterleavedZB) {
  ExpectError([] { DriveFalse(ScheduleKind::kInterleavedZeroBubble, kFour, 4); },
                               ErrorCode::kFailedPrecondition,
                               {"W0: raw_data:", "reads a storage whose bytes were freed"});
}

TEST(SweepMisuse, MaxActiveStagesZero) {
  ExpectError([] { Check({.stages = kTwo, .max_active = 0}); }, ErrorCode::kInvalidArgument,
                               {"PipelineExecutor: max_active_stages must be >= 1, got 0"});
}

// PipelineGPT (ZBV, 2 x 2) with fully_shard on each stage's blocks and root, cross-entropy with ignored targets
// spread unevenly over the microbatches (equal per dp rank): equals one-rank GPT training.
void GptCase(ScheduleKind kind, int m, int max_active) {
  const nn::GPTConfig cfg{.vocab_size = 29, .d_model = 16, .n_layers = 4, .n_heads = 2, .seq_len = 8};
  constexpr int64_t B = 8, T = 8;
  auto batch = [&](int step) {
    Generator g(77 + step);
    std::vector<int64_t> shape{B, T};
    Tensor idx = Randint(0, cfg.vocab_size, shape, g);
    Tensor tgt = Contiguous(Randint(0, cfg.vocab_size, shape, g));
    auto* t = static_cast<int64_t*>(tgt.raw_data());
    for (int64_t r : {int64_t{0}, B / 2}) {  // first row of each dp rank's slice: 3 ignored tokens
      for (int64_t j = 0; j < 3; ++j) t[r * T + j] = -100;
    }
    return std::make_pair(idx, tgt);
  };
  Trained want;
  {
    Generator gen(3);
    nn::GPT gpt(cfg, gen);
    optim::SGD opt(gpt.NamedParameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    for (int s = 0; s < 3; ++s) {
      auto [x, y] = batch(s);
      Tensor loss = gpt.Loss(x, y);
      Backward(loss);
      opt.Step();
      opt.ZeroGrad();
      want.losses.push_back(loss.item<double>());
    }
    want.params = FullParams(gpt);
  }
  Trained got;
  std::mutex mu;
  comm::RunRanks(4, [&](comm::ProcessGroupPtr world) {
    dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2, 2}, {"pp", "dp"});
    auto pp = pipelining::PipelineGPT(cfg, 3, mesh.axis_group("pp"),
                                      {.kind = kind, .num_microbatches = m,
                                       .lower = {.max_active_stages = max_active}});
    for (auto& stage : pp.modules) {
      if (stage->HasChild("layers")) {
        for (auto& [n, b] : stage->Submodule("layers")->NamedChildren()) fsdp::FullyShard(*b, mesh["dp"]);
      }
      fsdp::FullyShard(*stage, mesh["dp"]);
    }
    optim::SGD opt(pp.NamedParameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    const int64_t dp = mesh.local_rank("dp");
    std::vector<double> losses;
    for (int s = 0; s < 3; ++s) {
      auto [x, y] = batch(s);
      auto st = pp.executor->Step(Contiguous(Narrow(x, 0, dp * B / 2, B / 2)),
                                  Contiguous(Narrow(y, 0, dp * B / 2, B / 2)));
      opt.Step();
      opt.ZeroGrad();
      losses.push_back(GlobalLoss(world, st.loss));
    }
    Params params;
    for (auto& stage : pp.modules) params.merge(FullParams(*stage));
    std::lock_guard<std::mutex> lock(mu);
    got.params.merge(params);
    if (world->rank() == 0) got.losses = losses;
  });
  ExpectEqualTraining(got, want);
}

TEST(SweepGpt, ZBV) { GptCase(ScheduleKind::kZBVZeroBubble, 2, 3); }
TEST(SweepGpt, Interleaved1F1BWindow1) { GptCase(ScheduleKind::kInterleaved1F1B, 2, 1); }
TEST(SweepGpt, OneFOneB) { GptCase(ScheduleKind::k1F1B, 2, 3); }

// Checkpoint: PP x FSDP (1F1B, 2 x 2) trains 2 steps, saves model + optimizer, a fresh PP x FSDP loads and trains a
// third step: equals 3 steps of one-rank training.
TEST(SweepCheckpoint, SaveLoadPipelineFsdp) {
  Case c{.stages = kTwo, .microbatches = 2};
  const Trained want = OneRank(c);
  const std::string dir = Str(::testing::TempDir(), "/sweep_ckpt_", ::getpid());
  std::filesystem::remove_all(dir);
  Trained got;
  std::mutex mu;
  comm::RunRanks(4, [&](comm::ProcessGroupPtr world) {
    std::vector<double> losses;
    {
      Env e = MakeEnv(world, ScheduleKind::k1F1B, c.stages, c.microbatches);
      WrapBlocksAndRoot(e.pp, e.mesh["dp"]);
      optim::SGD opt(e.pp.NamedParameters(), optim::SGDOptions{.lr = Lr(), .momentum = 0.9});
      for (int s = 0; s < 2; ++s) losses.push_back(StepOn(e, opt, world, s));
      checkpoint::StateDict sd = checkpoint::GetStateDict(*e.pp.modules.at(0), &opt);
      checkpoint::Save(sd, dir, world, {.fsync = false});
    }
    Env e = MakeEnv(world, ScheduleKind::k1F1B, c.stages, c.microbatches);
    WrapBlocksAndRoot(e.pp, e.mesh["dp"]);
    optim::SGD opt(e.pp.NamedParameters(), optim::SGDOptions{.lr = Lr(), .momentum = 0.9});
    checkpoint::StateDict sd = checkpoint::GetStateDict(*e.pp.modules.at(0), &opt);
    checkpoint::Load(sd, dir);
    checkpoint::SetOptimizerStateDict(*e.pp.modules.at(0), opt, sd);
    losses.push_back(StepOn(e, opt, world, 2));
    Collect(e, world, losses, mu, got);
  });
  ExpectEqualTraining(got, want);
  std::filesystem::remove_all(dir);
}

}  // namespace
