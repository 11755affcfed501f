// benchmarks/gpu_attention_vs_torch_sdpa.cc — tessel's side of figure gpu_attention_vs_torch_sdpa (issue
// 13): scaled_dot_product_attention forward + backward (causal, bf16, GPT-2 124M's heads: batch 8, 12
// heads, T = S = 1024, head dim 64) on one GPU, through the dispatcher and the flash-style kernels of
// core/ops/attention.cu. Prints its time; benchmarks/pytorch/sdpa_cuda.py times torch SDPA on the same
// shapes in the same session and the bundle script prints the ratio SDPA time / tessel time (target
// >= 0.8; the kernels are untuned CUDA-core code, so expect far less). Timed with CUDA events, 3 warm-up
// + 10 timed iterations. Run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
//
// Usage: gpu_attention_vs_torch_sdpa      (exit 2 when no GPU is visible)
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "core/dispatch/dispatcher.h"
#include "core/memory/cuda_backend.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"

namespace tessel {
namespace {

int Main() {
  if (!memory::InstallCudaBackend()) {
    std::printf("gpu_attention_vs_torch_sdpa: no CUDA device visible\n");
    return 2;
  }
  const Device gpu = Device::Cuda(0);
  Generator gen(0);
  auto rand = [&] { return Randn(std::vector<int64_t>{8, 12, 1024, 64}, gen, DType::kBFloat16).To(gpu); };
  const Tensor q = rand(), k = rand(), v = rand(), dout = rand();
  const Attrs attrs = Attrs().Set("is_causal", true).Set("scale", 0.125);
  const OpDef& fwd = GetOp("scaled_dot_product_attention");
  const OpDef& bwd = GetOp("scaled_dot_product_attention_backward");
  auto step = [&] {
    const TensorList o = Dispatch(fwd, std::vector<Tensor>{q, k, v}, attrs);
    Dispatch(bwd, std::vector<Tensor>{dout, q, k, v, o[0], o[1]}, attrs);
  };
  for (int i = 0; i < 3; ++i) step();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, nullptr);
  constexpr int kIters = 10;
  for (int i = 0; i < kIters; ++i) step();
  cudaEventRecord(stop, nullptr);
  const cudaError_t e = cudaEventSynchronize(stop);
  if (e != cudaSuccess) {
    std::printf("gpu_attention_vs_torch_sdpa: CUDA error %s\n", cudaGetErrorString(e));
    return 1;
  }
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  std::printf("tessel_attention_fwd_bwd_ms %.3f (causal bf16, [8, 12, 1024, 64])\n", ms / kIters);
  return 0;
}

}  // namespace
}  // namespace tessel

int main() { return tessel::Main(); }
