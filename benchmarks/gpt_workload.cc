// benchmarks/gpt_workload.cc — the `gpt_step_tokens_per_s` headline figure: one full training step
// (forward, backward, AdamW) of the reference GPT config, in tokens per second on all cores.
//
// Reference config (issue 2): vocab 256, d_model 256, 4 layers, 8 heads, seq 128, batch 16, fp32,
// pre-LN, GELU MLP 4x, learned positions, untied head. The memory ledger's peaks for the step are
// printed as a note line after the figure.
//
// `gpt_step_vs_pytorch` compares the same step with PyTorch on this machine: benchmarks/pytorch/
// gpt_step.py (the same model in torch.nn, same threads) run by $TESSEL_TORCH_PYTHON (figure.h's
// TorchPython; tools/dev/install_torch.sh installs PyPI's PyTorch, with MKL and oneDNN, privately),
// else /usr/bin/python3. PyTorch is not a dependency of tessel: without it the line reads "skipped".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/figure.h"
#include "core/autograd/engine.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
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

double TesselTokensPerS(GptStep& step, int reps, int steps) {
  for (int i = 0; i < 2; ++i) step.Run();
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step.Run();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(static_cast<double>(steps * step.batch * step.cfg.seq_len) / s);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

const bool kVsPytorch = RegisterFigure("gpt_step_vs_pytorch", [] {
  auto torch_line = std::make_shared<std::string>();
  Figure f{"gpt_step_vs_pytorch", {"tessel_gpt_step", "tokens/s", 0, nullptr},
           Throughput{"pytorch_gpt_step", "tokens/s", 0, nullptr}};
  f.unavailable = [] { return TorchUnavailableReason(); };
  f.precomputed = [torch_line] {
    GptStep step;
    const double tessel = TesselTokensPerS(step, 5, 4);
    int status = 0;
    *torch_line = RunAndFindLine(Str(TorchPython(), " ", Runfile("benchmarks/pytorch/gpt_step.py"), " --threads=", NumThreads()),
                             "pytorch_gpt_step_tokens_per_s: ", &status);
    const size_t colon = torch_line->find(": ");
    const double torch_rate = status == 0 && colon != std::string::npos ? std::atof(torch_line->c_str() + colon + 2) : 0;
    return std::pair<double, double>{tessel, torch_rate};
  };
  f.note = [torch_line] {
    return torch_line->empty() ? std::string("the PyTorch run printed no result") : *torch_line;
  };
  return f;
});

}  // namespace
}  // namespace tessel::bench
