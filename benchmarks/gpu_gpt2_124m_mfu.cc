// benchmarks/gpu_gpt2_124m_mfu.cc — figure gpu_gpt2_124m_mfu (issue 13): GPT-2 124M (12 layers, d 768,
// 12 heads, seq 1024, vocab 50257, biases, tied embeddings, GELU-tanh MLP, pre-LayerNorm) trained in
// bf16 (parameters, activations and AdamW state in bf16; fp32 math inside every kernel) on one GPU,
// batch 8 x 1024 tokens. Prints the step time, tokens/s and MFU against 989 TFLOP/s (H100/H200 dense
// bf16), with nanoGPT's FLOP count: 6 N + 12 L H Q T per token, N = parameters less the position table.
// The PyTorch eager side of the figure is benchmarks/pytorch/gpt2_124m_eager_cuda.py, run by the bundle's
// script in the same session; the script prints the ratio. Targets: MFU >= 40%, faster than eager.
// Run on an H200 on 2026-12-04 (tools/gpu_bundle.sh; its kernels are untuned: see core/ops/cuda/README.md).
//
// Usage: gpu_gpt2_124m_mfu [steps=5]      (exit 2 when no GPU is visible)
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/autograd/engine.h"
#include "core/memory/cuda_backend.h"
#include "core/nn/transformer.h"
#include "core/dispatch/profiler.h"
#include "core/optim/optimizer.h"
#include "core/tensor/random.h"

namespace tessel {
namespace {

constexpr double kPeakBf16 = 989e12;
constexpr int64_t kBatch = 8;

int Main(int argc, char** argv) {
  if (!memory::InstallCudaBackend()) {
    std::printf("gpu_gpt2_124m_mfu: no CUDA device visible\n");
    return 2;
  }
  const int steps = argc > 1 ? std::atoi(argv[1]) : 5;
  const nn::GPTConfig cfg{.vocab_size = 50257,
                          .d_model = 768,
                          .n_layers = 12,
                          .n_heads = 12,
                          .seq_len = 1024,
                          .bias = true,
                          .tie_embeddings = true,
                          .dtype = DType::kBFloat16};
  const Device gpu = Device::Cuda(0);
  Generator gen(0);
  nn::GPT model(cfg, gen);
  for (const auto& [fqn, p] : model.NamedParameters()) {
    Tensor moved = p.To(gpu);
    moved.set_requires_grad(true);
    model.SetParameter(fqn, moved);
  }
  optim::AdamW opt(model.NamedParameters(), optim::AdamWOptions{.lr = 6e-4});
  const Tensor idx = Randint(0, cfg.vocab_size, std::vector<int64_t>{kBatch, cfg.seq_len}, gen).To(gpu);
  const Tensor tgt = Randint(0, cfg.vocab_size, std::vector<int64_t>{kBatch, cfg.seq_len}, gen).To(gpu);
  auto step = [&] {
    Backward(model.Loss(idx, tgt));
    opt.Step();
    opt.ZeroGrad();
  };
  step();  // warm-up: allocator, cuBLASLt handles and workspaces
  step();
  cudaDeviceSynchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  const cudaError_t e = cudaDeviceSynchronize();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
  if (e != cudaSuccess) {
    std::printf("gpu_gpt2_124m_mfu: CUDA error %s\n", cudaGetErrorString(e));
    return 1;
  }
  const double n = static_cast<double>(cfg.NumParameters() - cfg.seq_len * cfg.d_model);
  const double tokens = static_cast<double>(kBatch * cfg.seq_len);
  const double flops_per_token =
      6 * n + 12.0 * cfg.n_layers * cfg.n_heads * (cfg.d_model / cfg.n_heads) * static_cast<double>(cfg.seq_len);
  const double mfu = flops_per_token * tokens / seconds / kPeakBf16;
  std::printf("tessel_gpt2_124m_tokens_per_s %.0f (step %.1f ms, %lld parameters)\n", tokens / seconds, seconds * 1e3,
              static_cast<long long>(cfg.NumParameters()));
  std::printf("figure gpu_gpt2_124m_mfu %.4f (MFU vs 989 TFLOP/s dense bf16; target >= 0.40)\n", mfu);
  // TESSEL_GPU_PROFILE=1: one more step, each op's device time on its own; =shapes: a row per op and shapes.
  if (const char* profile = std::getenv("TESSEL_GPU_PROFILE"); profile != nullptr) {
    const auto p0 = std::chrono::steady_clock::now();
    OpProfiler prof([] { cudaDeviceSynchronize(); }, std::string(profile) == "shapes");
    step();
    cudaDeviceSynchronize();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - p0).count();
    double in_ops = 0;
    for (const auto& [name, row] : prof.rows()) in_ops += row.seconds * 1e3;
    std::printf("# profiled step %.1f ms (each op synchronized), %.1f ms inside ops, %.1f ms between them\n%s", ms,
                in_ops, ms - in_ops, prof.Table().c_str());
  }
  return 0;
}

}  // namespace
}  // namespace tessel

int main(int argc, char** argv) { return tessel::Main(argc, argv); }
