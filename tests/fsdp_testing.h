// tests/fsdp_testing.h — helpers shared by the multi-rank FullyShard suites: a tiny GPT config with
// awkward shapes, deterministic batches, the one-rank reference training loop, FSDP wrapping, full
// parameter gathering, and the optimizers the suites step the sharded DTensor parameters with.
//
// Invariant: the reference and the sharded runs see the same initial parameters (same seed, built the
// same way on every rank) and the same global batch per step (rank r of W takes rows [r*B/W, (r+1)*B/W)),
// so any difference is FSDP's.
//
// Example:
//   RunResult ref = TrainReference(TinyGpt(), kSteps, kBatch);
//   RunResult got = TrainFsdp(TinyGpt(), kSteps, kBatch, {.world = 4});
//   ExpectRunsClose(got, ref, 1e-5);
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/backends/threads.h"
#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/memory/allocator.h"
#include "core/base/error.h"
#include "core/base/testing/rel_err.h"
#include "core/nn/transformer.h"
#include "core/ops/elementwise.h"
#include "core/ops/view.h"
#include "core/optim/optimizer.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"
#include "core/tensor/tensor_impl.h"
#include "dtensor/device_mesh.h"
#include "dtensor/dtensor.h"
#include "dtensor/dtensor_impl.h"
#include "fsdp/fully_shard.h"

namespace tessel::fsdp::testing {

// vocab 37: lm_head/wte dim 0 not divisible by 2, 3 or 4; wpe [3, C] has dim 0 smaller than W = 4.
// NOTE: no Linear biases: the key bias has an exactly-zero gradient (softmax ignores a per-query constant),
// and AdamW turns the rounding noise of a zero gradient into lr-sized steps that no two reduction orders
// reproduce.
inline nn::GPTConfig TinyGpt() {
  return nn::GPTConfig{.vocab_size = 37, .d_model = 16, .n_layers = 2, .n_heads = 2, .seq_len = 3};
}

inline comm::RunRanksOptions FastRanks() { return {.timeout = std::chrono::milliseconds(60000)}; }

// The global batch of `step`: random token ids and a learnable target (the next id, 7 * id + 3 mod V),
// [batch, seq_len] int64.
inline std::pair<Tensor, Tensor> GlobalBatch(const nn::GPTConfig& cfg, int step, int64_t batch) {
  Generator gen(1234, static_cast<uint64_t>(step) * 1000);
  Tensor idx = Randint(0, cfg.vocab_size, std::vector<int64_t>{batch, cfg.seq_len}, gen);
  std::vector<int64_t> t = idx.ToVector<int64_t>();
  for (int64_t& v : t) v = (7 * v + 3) % cfg.vocab_size;
  return {idx, FromVector(t, {batch, cfg.seq_len})};
}

// Rows [rank * B / world, (rank + 1) * B / world) of a global batch.
inline Tensor RowsFor(const Tensor& global, int64_t rank, int64_t world) {
  const int64_t rows = global.size(0) / world;
  return Contiguous(Narrow(global, 0, rank * rows, rows));
}

// The mean over `world`'s ranks of each rank's `loss` (float64).
inline double GlobalMeanLoss(const comm::ProcessGroupPtr& world, const Tensor& loss) {
  Tensor l = Full({1}, loss.item<double>(), DType::kFloat64);
  world->AllReduce(l, comm::ReduceOp::kAvg)->Wait();
  return l.item<double>();
}

struct RunResult {
  std::vector<double> losses;
  std::map<std::string, std::vector<double>> params;  // full (global) values, by FQN
};

inline std::vector<double> FullValues(const Tensor& t) {
  if (t.is_distributed()) return dtensor::DTensor(t).FullTensor().ToDoubleVector();
  return t.ToDoubleVector();
}

inline std::map<std::string, std::vector<double>> FullParams(nn::Module& m) {
  std::map<std::string, std::vector<double>> out;
  for (auto& [fqn, p] : m.NamedParameters()) out[fqn] = FullValues(p);
  return out;
}

enum class Opt { kSgd, kAdamW };

// The core optimizers step the sharded DTensor parameters directly (DTensor dispatch runs the pointwise
// update on each rank's shard). SGD with momentum is linear in the gradients, so reduction-order
// rounding stays at fp32 level; AdamW divides each update by the running RMS of its gradient, which turns
// the rounding of near-cancelling gradient entries into visible parameter differences (see the
// tolerances of the suites).
inline std::unique_ptr<optim::Optimizer> MakeOptimizer(Opt kind, const nn::StateDict& params) {
  if (kind == Opt::kSgd) return std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  return std::make_unique<optim::AdamW>(
      params, optim::AdamWOptions{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1});
}

// FullyShard on every block, then the root (the documented bottom-up order).
inline FSDPModule WrapGpt(nn::GPT& gpt, const dtensor::DeviceMesh& mesh, const FullyShardOptions& block_options = {},
                          const FullyShardOptions& root_options = {}) {
  for (size_t i = 0; i < gpt.layers().size(); ++i) FullyShard(*gpt.layers().at(i), mesh, block_options);
  return FullyShard(gpt, mesh, root_options);
}

// One-rank training on the whole global batch.
inline RunResult TrainReference(const nn::GPTConfig& cfg, int steps, int64_t batch, Opt kind = Opt::kSgd) {
  Generator gen(7);
  nn::GPT gpt(cfg, gen);
  std::unique_ptr<optim::Optimizer> opt = MakeOptimizer(kind, gpt.NamedParameters());
  RunResult r;
  for (int s = 0; s < steps; ++s) {
    auto [idx, tgt] = GlobalBatch(cfg, s, batch);
    Tensor loss = gpt.Loss(idx, tgt);
    Backward(loss);
    opt->Step();
    opt->ZeroGrad();
    r.losses.push_back(loss.item<double>());
  }
  r.params = FullParams(gpt);
  return r;
}

struct FsdpRun {
  int world = 2;
  std::vector<int64_t> mesh_shape;  // default {world}
  std::vector<std::string> axis_names;
  FullyShardOptions block_options;
  FullyShardOptions root_options;
  Opt optimizer = Opt::kSgd;
};

// Training on `run.world` ranks, each on its rows of the global batch; losses are the global mean.
inline RunResult TrainFsdp(const nn::GPTConfig& cfg, int steps, int64_t batch, const FsdpRun& run) {
  RunResult result;
  std::mutex mu;
  comm::RunRanks(run.world, [&](comm::ProcessGroupPtr world) {
    std::vector<int64_t> shape = run.mesh_shape.empty() ? std::vector<int64_t>{run.world} : run.mesh_shape;
    std::vector<std::string> names = run.axis_names.empty() ? std::vector<std::string>{"dp"} : run.axis_names;
    dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, shape, names);
    Generator gen(7);
    nn::GPT gpt(cfg, gen);
    WrapGpt(gpt, mesh, run.block_options, run.root_options);
    std::unique_ptr<optim::Optimizer> opt = MakeOptimizer(run.optimizer, gpt.NamedParameters());
    RunResult mine;
    for (int s = 0; s < steps; ++s) {
      auto [idx, tgt] = GlobalBatch(cfg, s, batch);
      Tensor loss = gpt.Loss(RowsFor(idx, world->rank(), run.world), RowsFor(tgt, world->rank(), run.world));
      Backward(loss);
      opt->Step();
      opt->ZeroGrad();
      mine.losses.push_back(GlobalMeanLoss(world, loss));
    }
    mine.params = FullParams(gpt);
    if (world->rank() == 0) {
      std::lock_guard<std::mutex> lock(mu);
      result = std::move(mine);
    }
  }, FastRanks());
  return result;
}

using ::tessel::testing::RelErr;  // max |a - b| / max(max |b|, tiny)

// Returns the largest parameter error seen.
inline double ExpectRunsClose(const RunResult& got, const RunResult& want, double rtol, double param_rtol = -1) {
  if (param_rtol < 0) param_rtol = rtol;
  double worst = 0;
  EXPECT_EQ(got.losses.size(), want.losses.size());
  for (size_t s = 0; s < want.losses.size() && s < got.losses.size(); ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], rtol * std::abs(want.losses[s])) << "step " << s;
  }
  EXPECT_EQ(got.params.size(), want.params.size());
  for (const auto& [fqn, values] : want.params) {
    auto it = got.params.find(fqn);
    EXPECT_TRUE(it != got.params.end()) << fqn;
    if (it == got.params.end()) continue;
    const double err = RelErr(it->second, values);
    EXPECT_LE(err, param_rtol) << fqn;
    worst = std::max(worst, err);
  }
  return worst;
}

// One ledger's measured peak against its plan: prints both and the ratio, and expects them within
// `tol` of the plan (0: to the byte).
inline void ExpectLedgerNear(const char* ledger, int64_t measured, int64_t planned, double tol) {
  std::printf("    %-12s measured %9lld  planned %9lld  ratio %.3f\n", ledger, static_cast<long long>(measured),
              static_cast<long long>(planned),
              planned != 0 ? static_cast<double>(measured) / static_cast<double>(planned) : 0.0);
  EXPECT_NEAR(static_cast<double>(measured), static_cast<double>(planned), tol * static_cast<double>(planned))
      << ledger;
}

}  // namespace tessel::fsdp::testing
