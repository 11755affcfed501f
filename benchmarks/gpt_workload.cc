// benchmarks/gpt_workload.cc — the `gpt_step_tokens_per_s` headline figure: one full training step
// (forward, backward, AdamW) of the reference GPT config, in tokens per second on all cores.
//
// Reference config (issue 2): vocab 256, d_model 256, 4 layers, 8 heads, seq 128, batch 16, fp32,
// pre-LN, GELU MLP 4x, learned positions, untied head. No in-process baseline exists (PyTorch is not a
// dependency); docs/PERFORMANCE.md records PyTorch's number for the same config when measured.
// The memory ledger's peaks for the step are printed as a note line after the figure.
#include <cstdio>
#include <memory>

#include "benchmarks/figure.h"
#include "core/autograd/engine.h"
#include "core/memory/allocator.h"
#include "core/nn/transformer.h"
#include "core/optim/optimizer.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"

namespace tessel::bench {
namespace {

struct GptStep {
  nn::GPTConfig cfg{.vocab_size = 256, .d_model = 256, .n_layers = 4, .n_heads = 8, .seq_len = 128};
  int64_t batch = 16;
  Generator gen{0};
  std::unique_ptr<nn::GPT> model;
  std::unique_ptr<optim::AdamW> opt;
  Tensor idx, tgt;

  GptStep() {
    model = std::make_unique<nn::GPT>(cfg, gen);
    opt = std::make_unique<optim::AdamW>(model->NamedParameters(), optim::AdamWOptions{.lr = 1e-4});
    idx = Randint(0, cfg.vocab_size, std::vector<int64_t>{batch, cfg.seq_len}, gen);
    tgt = Randint(0, cfg.vocab_size, std::vector<int64_t>{batch, cfg.seq_len}, gen);
  }
  void Run() {
    Backward(model->Loss(idx, tgt));
    opt->Step();
    opt->ZeroGrad();
  }
};

const bool kRegistered = RegisterFigure("gpt_step_tokens_per_s", [] {
  auto step = std::make_shared<GptStep>();
  const double tokens = static_cast<double>(step->batch * step->cfg.seq_len);
  Figure f{"gpt_step_tokens_per_s", {"gpt_step", "tokens/s", tokens, [step] { step->Run(); }}, std::nullopt};
  f.note = [] {
    const memory::DeviceStats st = memory::Stats(CurrentDevice());
    char line[256];
    std::snprintf(line, sizeof(line),
                  "gpt_step ledger peaks (MiB): params %.2f grads %.2f optim %.2f activations %.2f total %.2f",
                  st[memory::Ledger::kParams].peak / 1048576.0, st[memory::Ledger::kGrads].peak / 1048576.0,
                  st[memory::Ledger::kOptimState].peak / 1048576.0,
                  st[memory::Ledger::kActivations].peak / 1048576.0, st.total.peak / 1048576.0);
    return std::string(line);
  };
  return f;
});

}  // namespace
}  // namespace tessel::bench
