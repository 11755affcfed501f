// benchmarks/fsdp_gloo_step.cc — one process of the `fsdp_gloo_step_vs_pytorch` figure (gloo_workload.cc):
// the reference GPT (vocab 256, d_model 256, 4 layers, 8 heads, seq 128, fp32, AdamW lr 1e-4) under
// fully_shard (each block, then the root) on the gloo world, the global batch of 16 split by rank.
// Rank 0 prints `tessel_fsdp_gloo_tokens_per_s: <v>` (global tokens per second, the median of `reps`
// runs of `steps` steps after 2 warm-up steps), the same protocol as benchmarks/pytorch/fsdp_gloo_step.py.
//
// Threads: each process gets max(1, cores / world) intra-op threads (what PyTorch's side sets), so
// the two processes do not oversubscribe the cores.
//
// Run under the launcher:  tessel_run --nproc-per-node 2 --master-port 0 fsdp_gloo_step [reps] [steps]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "comm/backends/gloo.h"
#include "core/autograd/engine.h"
#include "core/base/parallel.h"
#include "core/nn/transformer.h"
#include "core/ops/view.h"
#include "core/optim/optimizer.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"
#include "dtensor/device_mesh.h"
#include "fsdp/fully_shard.h"

int main(int argc, char** argv) {
  using namespace tessel;
  const int reps = argc > 1 ? std::atoi(argv[1]) : 5;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 4;
  constexpr int64_t kGlobalBatch = 16;
  comm::ProcessGroupPtr pg = comm::InitProcessGroupFromEnv();
  const int world = pg->size();
  SetNumThreads(std::max(1, HardwareConcurrency() / world));
  const nn::GPTConfig cfg{.vocab_size = 256, .d_model = 256, .n_layers = 4, .n_heads = 8, .seq_len = 128};
  Generator gen(0);
  nn::GPT gpt(cfg, gen);
  const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(pg, {world}, {"dp"});
  for (size_t i = 0; i < gpt.layers().size(); ++i) fsdp::FullyShard(*gpt.layers().at(i), mesh);
  fsdp::FullyShard(gpt, mesh);
  optim::AdamW opt(gpt.NamedParameters(), {.lr = 1e-4});
  const int64_t local = kGlobalBatch / world;
  const Tensor idx = Contiguous(
      Narrow(Randint(0, cfg.vocab_size, std::vector<int64_t>{kGlobalBatch, cfg.seq_len}, gen), 0, pg->rank() * local,
             local));
  const Tensor tgt = Contiguous(
      Narrow(Randint(0, cfg.vocab_size, std::vector<int64_t>{kGlobalBatch, cfg.seq_len}, gen), 0, pg->rank() * local,
             local));
  auto step = [&] {
    Backward(gpt.Loss(idx, tgt));
    opt.Step();
    opt.ZeroGrad();
  };
  for (int i = 0; i < 2; ++i) step();
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) {
    pg->Barrier()->Wait();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    pg->Barrier()->Wait();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(static_cast<double>(steps * kGlobalBatch * cfg.seq_len) / s);
  }
  std::sort(rates.begin(), rates.end());
  if (pg->rank() == 0) {
    std::printf("tessel_fsdp_gloo_tokens_per_s: %.0f tokens/s (W=%d gloo processes, %d threads each)\n",
                rates[rates.size() / 2], world, NumThreads());
  }
  pg->Barrier()->Wait();
  return 0;
}
