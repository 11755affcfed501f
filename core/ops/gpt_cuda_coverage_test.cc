// core/ops/gpt_cuda_coverage_test.cc — which ops a GPT training step dispatches (a tiny nn::GPT: loss,
// backward, AdamW step, run on the CPU under OpProfiler) and which of them have a CUDA kernel once every
// CUDA op library is linked. The claim is exact: the ops without one are precisely kMissing, so this test
// fails both when a new op enters the step and when a missing kernel is written (then shrink the list).
// Needs the CUDA toolkit to link; runs without a GPU (kernel registration needs no device).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/autograd/engine.h"
#include "core/dispatch/op.h"
#include "core/dispatch/profiler.h"
#include "core/nn/transformer.h"
#include "core/optim/optimizer.h"
#include "core/tensor/random.h"

namespace tessel {
namespace {

// What this step would still hit on CUDA tensors: nothing (every op has a compiled, never-run kernel).
const std::set<std::string> kMissing = {};

// The ops one training step of `cfg` dispatches (run on the CPU).
std::set<std::string> OpsOfAStep(const nn::GPTConfig& cfg) {
  Generator gen(0);
  nn::GPT model(cfg, gen);
  optim::AdamW opt(model.NamedParameters(), optim::AdamWOptions{.lr = 1e-3});
  const Tensor idx = Randint(0, cfg.vocab_size, std::vector<int64_t>{2, cfg.seq_len}, gen);
  const Tensor tgt = Randint(0, cfg.vocab_size, std::vector<int64_t>{2, cfg.seq_len}, gen);
  OpProfiler prof;
  Backward(model.Loss(idx, tgt));
  opt.Step();
  opt.ZeroGrad();
  std::set<std::string> used;
  for (const auto& [name, row] : prof.rows()) used.insert(name);
  return used;
}

TEST(GptCudaCoverageTest, EveryOpOfAGptTrainingStepButTheListedOnesHasACudaKernel) {
  // The tiny default GPT (fp32, no biases, untied) and the GPT-2 layout of the gpu_gpt2_124m_mfu figure
  // (bf16, biases, tied embeddings), scaled down.
  for (const nn::GPTConfig& cfg :
       {nn::GPTConfig{.vocab_size = 64, .d_model = 32, .n_layers = 2, .n_heads = 2, .seq_len = 16},
        nn::GPTConfig{.vocab_size = 64,
        .d_model = 32,
        .n_layers = 2,
        .n_heads = 2,
        .seq_len = 16,
        .bias = true,
        .tie_embeddings = true,
        .dtype = DType::kBFloat16}}) {
    const std::set<std::string> used = OpsOfAStep(cfg);
    const std::set<std::string> missing = OpsWithoutCudaKernel(used);
    EXPECT_GT(used.size(), 10u);
    EXPECT_EQ(missing, kMissing) << "ops of the step: " << ::testing::PrintToString(used);
  }
}

}  // namespace
}  // namespace tessel
