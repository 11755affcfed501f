// tests/tp_gpt_testing.h — training the GPT under examples/gpt/parallelize.h's recipe (TP, SP, loss
// parallel, 2-D FSDP x TP) on the threads backend, for the equivalence and checkpoint suites.
//
// Invariant: every layout trains the same model (seed 7, as fsdp_testing's TrainReference) on the same
// global batch per step; data-parallel ranks take their rows, tensor-parallel ranks all take the same
// rows. The reported loss is the global mean, so a run is comparable with one rank step by step.
//
// Example:
//   RunResult got = TrainTp(cfg, 20, 4, {.mesh_shape = {2, 2}, .axis_names = {"dp", "tp"}});
#pragma once

#include <algorithm>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "examples/gpt/parallelize.h"
#include "tests/fsdp_testing.h"
#include "tp/loss_parallel.h"

namespace tessel::fsdp::testing {

struct TpRun {
  std::vector<int64_t> mesh_shape = {2};
  std::vector<std::string> axis_names = {"tp"};
  examples::GptParallelism parallelism;
  Opt optimizer = Opt::kSgd;
};

inline int64_t WorldOf(const TpRun& run) {
  int64_t w = 1;
  for (int64_t s : run.mesh_shape) w *= s;
  return w;
}

// The loss as a plain double (a loss-parallel loss is a Replicate DTensor on the tp axis).
inline double LossValue(const Tensor& loss) {
  return loss.is_distributed() ? dtensor::DTensor(loss).ToLocal().item<double>() : loss.item<double>();
}

// One step on this rank's rows; returns the global mean loss. `dp` is the data-parallel group (or null).
inline double TpStep(nn::GPT& gpt, optim::Optimizer& opt, const nn::GPTConfig& cfg, int step, int64_t batch,
                     const examples::GptParallelism& p, const comm::ProcessGroupPtr& dp) {
  auto [idx, tgt] = GlobalBatch(cfg, step, batch);
  if (dp) {
    idx = RowsFor(idx, dp->rank(), dp->size());
    tgt = RowsFor(tgt, dp->rank(), dp->size());
  }
  std::optional<tp::LossParallel> loss_parallel;
  if (p.loss_parallel) loss_parallel.emplace();
  Tensor loss = gpt.Loss(idx, tgt);
  Backward(loss);
  loss_parallel.reset();
  opt.Step();
  opt.ZeroGrad();
  Tensor l = Full({1}, LossValue(loss), DType::kFloat64);
  if (dp) dp->AllReduce(l, comm::ReduceOp::kAvg)->Wait();
  return l.item<double>();
}

inline RunResult TrainTp(const nn::GPTConfig& cfg, int steps, int64_t batch, const TpRun& run) {
  RunResult result;
  std::mutex mu;
  comm::RunRanks(
      static_cast<int>(WorldOf(run)),
      [&](comm::ProcessGroupPtr world) {
        const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, run.mesh_shape, run.axis_names);
        const auto& axes = run.axis_names;
        const bool has_dp = std::find(axes.begin(), axes.end(), "dp") != axes.end();
        const comm::ProcessGroupPtr dp = has_dp ? mesh.axis_group("dp") : nullptr;
        Generator gen(7);
        nn::GPT gpt(cfg, gen);
        examples::ParallelizeGpt(gpt, mesh, run.parallelism);
        std::unique_ptr<optim::Optimizer> opt = MakeOptimizer(run.optimizer, gpt.NamedParameters());
        RunResult mine;
        for (int s = 0; s < steps; ++s) mine.losses.push_back(TpStep(gpt, *opt, cfg, s, batch, run.parallelism, dp));
        mine.params = FullParams(gpt);
        if (world->rank() == 0) {
          std::lock_guard<std::mutex> lock(mu);
          result = std::move(mine);
        }
      },
      FastRanks());
  return result;
}

}  // namespace tessel::fsdp::testing
