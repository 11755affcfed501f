// examples/gpt/train.cc — the main job: train a byte-level GPT on the generated corpus.
//
// What it is: one reference training program (forward, backward, global-norm clipping, AdamW with
// warmup + cosine LR) printing one progress line per `--log_every` steps — step, loss, LR, tokens/s and
// the memory ledger's peaks — and a final summary with the loss drop. What it will not do (yet):
// distribute; that arrives with fully_shard / parallelize_module and a --nproc flag.
//
// Usage: bazel run //examples/gpt:train -- [--steps=300] [--batch=16] [--seq=64] [--d_model=128]
//        [--layers=4] [--heads=4] [--lr=3e-3] [--seed=1] [--log_every=25] [--profile_step=N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "core/autograd/engine.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/dispatch/profiler.h"
#include "core/memory/allocator.h"
#include "core/nn/transformer.h"
#include "core/optim/optimizer.h"
#include "examples/gpt/corpus.h"

namespace tessel::examples {
namespace {

struct Flags {
  std::map<std::string, std::string> values;
  double Get(const std::string& name, double dflt) const {
    auto it = values.find(name);
    return it == values.end() ? dflt : std::stod(it->second);
  }
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    TESSEL_CHECK(a.rfind("--", 0) == 0 && a.find('=') != std::string::npos, "train: expected --name=value, got '", a,
                 "'");
    f.values[a.substr(2, a.find('=') - 2)] = a.substr(a.find('=') + 1);
  }
  return f;
}

double MiB(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

int Main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  const int64_t steps = static_cast<int64_t>(flags.Get("steps", 300));
  const int64_t B = static_cast<int64_t>(flags.Get("batch", 16));
  const int64_t T = static_cast<int64_t>(flags.Get("seq", 64));
  const int64_t log_every = static_cast<int64_t>(flags.Get("log_every", 25));
  const uint64_t seed = static_cast<uint64_t>(flags.Get("seed", 1));
  nn::GPTConfig cfg{.vocab_size = 256,
                    .d_model = static_cast<int64_t>(flags.Get("d_model", 128)),
                    .n_layers = static_cast<int64_t>(flags.Get("layers", 4)),
                    .n_heads = static_cast<int64_t>(flags.Get("heads", 4)),
                    .seq_len = T};
  const std::string text = GenerateCorpus(seed, 1 << 20);
  Generator gen(seed);
  nn::GPT model(cfg, gen);
  optim::AdamW opt(model.NamedParameters(), {.lr = flags.Get("lr", 3e-3), .weight_decay = 0.1});
  const optim::WarmupCosineSchedule schedule{.max_lr = flags.Get("lr", 3e-3),
                                             .min_lr = flags.Get("lr", 3e-3) / 10,
                                             .warmup_steps = std::max<int64_t>(1, steps / 10),
                                             .total_steps = steps};
  std::printf("tessel GPT: %lld params (d_model %lld, %lld layers, %lld heads, seq %lld, batch %lld), %d threads\n",
              static_cast<long long>(cfg.NumParameters()), static_cast<long long>(cfg.d_model),
              static_cast<long long>(cfg.n_layers), static_cast<long long>(cfg.n_heads), static_cast<long long>(T),
              static_cast<long long>(B), NumThreads());
  double first_loss = 0, last_loss = 0, window = 0, total_seconds = 0;
  int64_t window_steps = 0;
  const int64_t avg_over = std::max<int64_t>(1, std::min<int64_t>(10, steps / 4));
  for (int64_t step = 0; step < steps; ++step) {
    // --profile_step=N prints a per-op time table for step N (0-based).
    std::optional<OpProfiler> prof;
    if (step == static_cast<int64_t>(flags.Get("profile_step", -1))) prof.emplace();
    const auto t0 = std::chrono::steady_clock::now();
    const Batch batch = SampleBatch(text, B, T, step, seed + 17);
    Tensor loss = model.Loss(batch.idx_BT, batch.targets_BT);
    Backward(loss);
    optim::ClipGradNorm(model.Parameters(), 1.0);
    opt.set_lr(schedule.LrAt(step));
    opt.Step();
    opt.ZeroGrad();
    const double l = loss.item<double>();
    if (prof) std::printf("%s", prof->Table().c_str());
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (step > 0) total_seconds += dt;  // step 0 includes one-time warmup
    if (step < avg_over) first_loss += l / avg_over;
    if (step >= steps - avg_over) last_loss += l / avg_over;
    window += l;
    ++window_steps;
    if ((step + 1) % log_every == 0 || step + 1 == steps) {
      const memory::DeviceStats st = memory::Stats(CurrentDevice());
      std::printf(
          "step %5lld/%lld | loss %.4f | lr %.2e | %8.0f tok/s | peak MiB: params %.2f grads %.2f optim %.2f "
          "activations %.2f total %.2f\n",
          static_cast<long long>(step + 1), static_cast<long long>(steps), window / window_steps, opt.lr(),
          B * T / dt, MiB(st[memory::Ledger::kParams].peak), MiB(st[memory::Ledger::kGrads].peak),
          MiB(st[memory::Ledger::kOptimState].peak), MiB(st[memory::Ledger::kActivations].peak),
          MiB(st.total.peak));
      std::fflush(stdout);
      window = 0;
      window_steps = 0;
    }
  }
  const double tok_s = steps > 1 ? B * T * (steps - 1) / total_seconds : 0.0;
  std::printf("summary: loss %.4f -> %.4f (mean of first/last %lld steps) | %.0f tokens/s | %.1f s\n", first_loss,
              last_loss, static_cast<long long>(avg_over), tok_s, total_seconds);
  std::printf("%s", memory::Report(CurrentDevice()).c_str());
  return last_loss < first_loss ? 0 : 1;
}

}  // namespace
}  // namespace tessel::examples

int main(int argc, char** argv) {
  try {
    return tessel::examples::Main(argc, argv);
  } catch (const tessel::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
