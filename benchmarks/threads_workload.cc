// benchmarks/threads_workload.cc — the `threads_vs_ranks` headline figure (issue 16): the reference GPT
// step (gpt_workload.cc's config: vocab 256, d_model 256, 4 layers, 8 heads, seq 128, batch 16, fp32,
// AdamW) as one rank with a budget of W threads (intra-op parallelism: core/base/parallel.h and the
// GEMM split) against the same work as W ranks with a budget of 1 thread each, every rank training its
// own copy on its share of the batch. W is the most cores that split the batch evenly (Width). The ranks do not communicate: the baseline is
// the best data parallelism can do with these cores, so the ratio isolates what splitting every op
// across threads costs. Target >= 1.0 ("one rank × 2 threads must not be slower than 2 ranks × 1
// thread for the same work"). The note repeats it for fsdp_workload.cc's small model (d_model 64,
// 2 layers, seq 32, batch 8), where each op is a few microseconds and hand-offs weigh most.
//
// Invariant: both sides run the same number of optimizer steps on the same global batch; rank r of the
// baseline takes rows [r·B/W, (r+1)·B/W).
//
// Example:
//   bazel run //benchmarks:report -- --filter=threads_vs_ranks
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/figure.h"
#include "benchmarks/rank_world.h"
#include "core/autograd/engine.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/nn/transformer.h"
#include "core/ops/view.h"
#include "core/optim/optimizer.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"

namespace tessel::bench {
namespace {

struct Config {
  nn::GPTConfig gpt;
  int64_t batch;
  int steps_per_run;
};

const Config kReference{{.vocab_size = 256, .d_model = 256, .n_layers = 4, .n_heads = 8, .seq_len = 128}, 16, 2};
const Config kSmall{{.vocab_size = 256, .d_model = 64, .n_layers = 2, .n_heads = 4, .seq_len = 32}, 8, 32};

// A model, its AdamW and `rows` rows of the fixed global batch starting at `first_row`.
struct Trainer {
  std::unique_ptr<nn::GPT> gpt;
  std::unique_ptr<optim::AdamW> opt;
  Tensor idx, tgt;

  Trainer(const Config& c, int64_t first_row, int64_t rows) {
    Generator gen(7);
    gpt = std::make_unique<nn::GPT>(c.gpt, gen);
    opt = std::make_unique<optim::AdamW>(gpt->NamedParameters(), optim::AdamWOptions{.lr = 1e-4});
    Generator data(1234);
    const std::vector<int64_t> shape{c.batch, c.gpt.seq_len};
    idx = Contiguous(Narrow(Randint(0, c.gpt.vocab_size, shape, data), 0, first_row, rows));
    tgt = Contiguous(Narrow(Randint(0, c.gpt.vocab_size, shape, data), 0, first_row, rows));
  }
  void Run(int steps) {
    for (int s = 0; s < steps; ++s) {
      Backward(gpt->Loss(idx, tgt));
      opt->Step();
      opt->ZeroGrad();
    }
  }
};

// Ranks (and threads of the one-rank side): the most cores that split the batch evenly, so both sides do
// the same work on any machine (16 cores: 16; 6 cores: 4 for batch 16 and 8).
int Width(const Config& c) {
  int w = std::max(1, std::min<int>(HardwareConcurrency(), static_cast<int>(c.batch)));
  while (c.batch % w != 0) --w;
  return w;
}

// One rank per core, budget 1 each, no communication.
std::shared_ptr<RankWorld> RanksWorld(const Config& c) {
  const int world = Width(c);
  return std::make_shared<RankWorld>(
      world,
      [c, world](const comm::ProcessGroupPtr& pg) {
        const int64_t rows = c.batch / world;
        auto trainer = std::make_shared<Trainer>(c, pg->rank() * rows, rows);
        const int steps = c.steps_per_run;
        return [trainer, steps] { trainer->Run(steps); };
      },
      /*threads_per_rank=*/1);
}

double TokensPerRun(const Config& c) {
  return static_cast<double>(c.steps_per_run * c.batch * c.gpt.seq_len);
}

// The one-rank side: `c`'s whole batch on Width(c) threads.
std::function<void()> OneRankRun(const Config& c) {
  auto trainer = std::make_shared<Trainer>(c, 0, c.batch);
  const int width = Width(c);
  return [trainer, width, steps = c.steps_per_run] {
    const NumThreadsGuard budget(width);
    trainer->Run(steps);
  };
}

const bool kRegistered = RegisterFigure("threads_vs_ranks", [] {
  auto ranks = RanksWorld(kReference);
  const int width = Width(kReference);
  const double tokens = TokensPerRun(kReference);
  Figure f{"threads_vs_ranks",
           {Str("1_rank_x_", width, "_threads"), "tokens/s", tokens, OneRankRun(kReference)},
           Throughput{Str(width, "_ranks_x_1_thread"), "tokens/s", tokens, [ranks] { ranks->Run(1); }}};
  f.note = [] {
    const int cores = Width(kSmall);
    auto world = RanksWorld(kSmall);
    const double tokens = TokensPerRun(kSmall);
    const double t = MeasureThroughput({"one_rank", "tokens/s", tokens, OneRankRun(kSmall)}, 1, 5);
    const double r = MeasureThroughput({"ranks", "tokens/s", tokens, [world] { world->Run(1); }}, 1, 5);
    char ratio[32];
    std::snprintf(ratio, sizeof(ratio), "%.3f", t / r);
    return Str("small model (d_model 64, 2 layers, seq 32, batch 8): 1 rank x ", cores, " threads ",
               static_cast<int64_t>(t), " tokens/s vs ", cores, " ranks x 1 thread ", static_cast<int64_t>(r),
               " tokens/s: ratio ", ratio);
  };
  return f;
});

}  // namespace
}  // namespace tessel::bench
