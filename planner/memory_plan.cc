// planner/memory_plan.cc — PlanGptFullyShard (the derivation is in the header), the activations
// measurement, and the tables.
#include "planner/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>
#include <thread>

#include "core/autograd/engine.h"
#include "core/base/error.h"
#include "core/nn/checkpoint_wrapper.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"
#include "planner/layout.h"

namespace tessel::planner {
namespace {

// The block index of a parameter FQN, or -1 for the root's own parameters.
int GroupOf(const std::string& fqn) {
  if (fqn.rfind("layers.", 0) != 0) return -1;
  return std::stoi(fqn.substr(7, fqn.find('.', 7) - 7));
}

std::string Row(const char* name, int64_t predicted, const memory::Counter* measured) {
  char buf[160];
  if (measured == nullptr) {
    std::snprintf(buf, sizeof(buf), "  %-12s %12lld  (%8.2f MiB)\n", name, static_cast<long long>(predicted),
                  predicted / 1048576.0);
  } else {
    std::snprintf(buf, sizeof(buf), "  %-12s %12lld %12lld  %6.3f\n", name, static_cast<long long>(predicted),
                  static_cast<long long>(measured->peak),
                  predicted > 0 ? static_cast<double>(measured->peak) / static_cast<double>(predicted) : 0.0);
  }
  return buf;
}

}  // namespace

LedgerPlan PlanGptFullyShard(const nn::GPTConfig& cfg, int64_t world, int64_t rank, int64_t activations) {
  TESSEL_CHECK(world >= 1 && rank >= 0 && rank < world, "memory plan: rank ", rank, " of world ", world);
  TESSEL_CHECK(cfg.dtype == DType::kFloat32, "memory plan: only float32 parameters are planned, got ", cfg.dtype);
  constexpr int64_t kBytes = 4;
  int64_t sharded = 0, root_shard = 0, root_grads = 0, head_grads = 0, optim = 0;
  std::map<int, int64_t> block_shard, block_full;  // padded shard bytes and unsharded gradient bytes
  std::map<int, int64_t> counts;                    // parameters per group (-1: the root)
  for (const auto& [fqn, shape] : cfg.ParameterShapes()) {
    ++counts[GroupOf(fqn)];
    const int64_t rows = shape[0], numel = NumElements(shape), row = numel / rows;
    const int64_t padded = (rows + world - 1) / world * row * kBytes;
    sharded += padded;
    optim += 2 * ChunkSize(rows, world, rank) * row * kBytes;
    const int g = GroupOf(fqn);
    if (g < 0) {
      root_shard += padded;
      root_grads += numel * kBytes;
      if (fqn.rfind("lm_head.", 0) == 0 || fqn.rfind("ln_f.", 0) == 0) head_grads += numel * kBytes;
    } else {
      block_shard[g] += padded;
      block_full[g] += numel * kBytes;
    }
  }
  // A group's reduce-scatter block: its shard block, then its gradient flags when W > 1 (fsdp/collectives.h,
  // [Note: FSDP gradient flags]: 16 per 16 parameters).
  auto flags = [&](int g) { return world == 1 ? 0 : (counts[g] + 15) / 16 * 16 * kBytes; };
  int64_t max_block = 0, all_blocks = 0, max_block_rs = 0, all_blocks_rs = 0;
  for (const auto& [g, bytes] : block_shard) {
    max_block = std::max(max_block, bytes);
    all_blocks += bytes;
    max_block_rs = std::max(max_block_rs, bytes + flags(g));
    all_blocks_rs += bytes + flags(g);  // the sharded gradients are views of the reduce-scatter outputs
  }
  const int64_t root_rs = root_shard + flags(-1);
  LedgerPlan l;
  l.params = sharded + world * root_shard + world * max_block;
  l.grads = std::max(all_blocks_rs + root_grads,
                     block_full[0] + all_blocks_rs - block_shard[0] - flags(0) + head_grads);
  l.optim = optim;
  l.comm = world == 1 ? std::max(max_block, root_shard)
                      : std::max(world * max_block + (world + 1) * max_block_rs, (world + 1) * root_rs);
  l.activations = activations;
  l.total = l.optim + l.params + l.activations + (world > 1 ? world * max_block : 0) + head_grads;
  return l;
}

int64_t MeasureGptActivations(const nn::GPTConfig& cfg, int64_t local_batch, const std::string& ac) {
  int64_t peak = 0;
  std::exception_ptr error;
  // A thread of its own on cpu:0 (default thread budget: every core), as one in-process rank runs it.
  std::thread worker([&] {
    try {
      DeviceGuard device(Device::Cpu(0));
      Generator gen(7);
      nn::GPT gpt(cfg, gen);
      for (size_t i = 0; i < gpt.layers().size(); ++i) nn::ApplyActivationCheckpointing(*gpt.layers().at(i), ac);
      const Shape shape = {local_batch, cfg.seq_len};
      const Tensor idx = Randint(0, cfg.vocab_size, shape, gen), tgt = Randint(0, cfg.vocab_size, shape, gen);
      memory::ResetPeaks(CurrentDevice());
      const int64_t before = memory::Stats(CurrentDevice())[memory::Ledger::kActivations].live;
      Backward(gpt.Loss(idx, tgt));
      peak = memory::Stats(CurrentDevice())[memory::Ledger::kActivations].peak - before;
    } catch (...) {
      error = std::current_exception();
    }
  });
  worker.join();
  if (error) std::rethrow_exception(error);
  return peak;
}

LedgerPlan MeasuredPeaks(const memory::DeviceStats& s) {
  LedgerPlan m;
  m.params = s[memory::Ledger::kParams].peak;
  m.grads = s[memory::Ledger::kGrads].peak;
  m.optim = s[memory::Ledger::kOptimState].peak;
  m.comm = s[memory::Ledger::kCommBuffers].peak;
  m.activations = s[memory::Ledger::kActivations].peak;
  m.total = s.total.peak;
  return m;
}

std::string FormatPlan(const LedgerPlan& p) {
  std::string s = "  ledger        predicted B\n";
  s += Row("params", p.params, nullptr) + Row("grads", p.grads, nullptr) + Row("optim", p.optim, nullptr) +
       Row("comm", p.comm, nullptr) + Row("activations", p.activations, nullptr) + Row("total", p.total, nullptr);
  return s;
}

std::string FormatPlanVsMeasured(const LedgerPlan& p, const memory::DeviceStats& m) {
  std::string s = "  ledger        predicted B   measured B  measured/predicted\n";
  s += Row("params", p.params, &m[memory::Ledger::kParams]) + Row("grads", p.grads, &m[memory::Ledger::kGrads]) +
       Row("optim", p.optim, &m[memory::Ledger::kOptimState]) + Row("comm", p.comm, &m[memory::Ledger::kCommBuffers]) +
       Row("activations", p.activations, &m[memory::Ledger::kActivations]) + Row("total", p.total, &m.total);
  return s;
}

}  // namespace tessel::planner
