// core/ops/gpt_cuda_step_test.cc — one GPT training step (loss, backward, AdamW step) on a GPU equals the
// same step on the CPU from the same initial weights: the loss and every parameter gradient within 1e-4
// relative (float32; dozens of kernels with other summation orders, measured nowhere yet: a GPU session
// should tighten it), and every parameter after the step likewise. Skips without a GPU.
// Passed on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/autograd/engine.h"
#include "core/memory/testing/gpu_test.h"
#include "core/nn/transformer.h"
#include "core/optim/optimizer.h"
#include "core/tensor/random.h"

namespace tessel {
namespace {

class GptCudaStepTest : public memory::testing::GpuTest {};

constexpr nn::GPTConfig kConfig{.vocab_size = 96, .d_model = 64, .n_layers = 2, .n_heads = 4, .seq_len = 32};

void ExpectClose(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const std::vector<double> g = got.To(Device::Cpu()).ToDoubleVector(), w = want.ToDoubleVector();
  double scale = 0;
  for (double v : w) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], 1e-4 * scale + 1e-6) << what << " element " << i;
}

std::map<std::string, Tensor> ByName(const nn::Module& m) {
  std::map<std::string, Tensor> out;
  for (const auto& [fqn, p] : m.NamedParameters()) out[fqn] = p;
  return out;
}

TEST_F(GptCudaStepTest, TrainingStepOnGpuEqualsCpu) {
  const Device gpu = Device::Cuda(0);
  Generator gen_cpu(7), gen_gpu(7), gen_data(8);
  nn::GPT cpu(kConfig, gen_cpu), gpu_model(kConfig, gen_gpu);
  for (const auto& [fqn, p] : gpu_model.NamedParameters()) {
    Tensor moved = p.To(gpu);
    moved.set_requires_grad(true);
    gpu_model.SetParameter(fqn, moved);
  }
  optim::AdamW opt_cpu(cpu.NamedParameters(), optim::AdamWOptions{.lr = 1e-3});
  optim::AdamW opt_gpu(gpu_model.NamedParameters(), optim::AdamWOptions{.lr = 1e-3});
  const Tensor idx = Randint(0, kConfig.vocab_size, std::vector<int64_t>{2, kConfig.seq_len}, gen_data);
  const Tensor tgt = Randint(0, kConfig.vocab_size, std::vector<int64_t>{2, kConfig.seq_len}, gen_data);
  const Tensor loss_cpu = cpu.Loss(idx, tgt);
  const Tensor loss_gpu = gpu_model.Loss(idx.To(gpu), tgt.To(gpu));
  EXPECT_EQ(loss_gpu.device(), gpu);
  ExpectClose(loss_gpu, loss_cpu, "loss");
  Backward(loss_cpu);
  Backward(loss_gpu);
  const auto want = ByName(cpu);
  for (const auto& [fqn, p] : gpu_model.NamedParameters()) ExpectClose(p.grad(), want.at(fqn).grad(), fqn + ".grad");
  opt_cpu.Step();
  opt_gpu.Step();
  const auto after = ByName(cpu);
  for (const auto& [fqn, p] : gpu_model.NamedParameters()) ExpectClose(p, after.at(fqn), fqn);
}

}  // namespace
}  // namespace tessel
