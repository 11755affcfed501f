// benchmarks/gpu_gemm_bf16_vs_cublas.cc — figure gpu_gemm_bf16_vs_cublas (issue 13): tessel's Linear
// forward + backward (linear with fused bias, dgrad g · w, wgrad Σ gᵀ · x — the three op calls a training
// step makes, through the dispatcher, the caching allocator and cuBLASLt) against bare cublasLtMatmul calls
// of the same shapes (descriptors, algorithms and outputs prepared once, only the matmuls timed), bf16,
// GPT-2 124M's four Linear shapes at 8 x 1024 tokens. Prints one line per shape and the figure: bare time /
// tessel time (target >= 0.95). Timed with CUDA events on the default stream, 5 warm-up + 20 timed steps.
// Run by the GPU bundle (tools/gpu_bundle_run.sh). Run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
//
// Usage: gpu_gemm_bf16_vs_cublas      (exit 2 when no GPU is visible)
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <functional>
#include <vector>

#include "core/dispatch/dispatcher.h"
#include "core/memory/cuda_backend.h"
#include "core/ops/cuda/gemm_plan.h"
#include "core/ops/matmul.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

constexpr int kWarmup = 5, kIters = 20;
constexpr size_t kWorkspace = size_t{32} << 20;

struct LinearShape {
  const char* name;
  int64_t tokens, in, out;
};

double MillisPerIter(const std::function<void()>& step) {
  for (int i = 0; i < kWarmup; ++i) step();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, nullptr);
  for (int i = 0; i < kIters; ++i) step();
  cudaEventRecord(stop, nullptr);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / kIters;
}

// One bare cuBLASLt product, prepared once: C = A · B as cuda::PlanMatmul describes it.
struct BareGemm {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  const void *lt_a = nullptr, *lt_b = nullptr;
  void* c = nullptr;
};

BareGemm Prepare(cublasLtHandle_t h, const cuda::LtPlan& p, const void* our_a, const void* our_b, void* c,
                 const void* bias) {
  BareGemm g;
  const cudaDataType_t t = CUDA_R_16BF;
  cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const cublasOperation_t ta = p.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N, tb = p.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  if (bias != nullptr) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
    cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t, sizeof(t));
  }
  cublasLtMatrixLayoutCreate(&g.la, t, p.a.rows, p.a.cols, p.a.ld);
  cublasLtMatrixLayoutCreate(&g.lb, t, p.b.rows, p.b.cols, p.b.ld);
  cublasLtMatrixLayoutCreate(&g.lc, t, p.m, p.n, p.m);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  const uint64_t ws = kWorkspace;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulHeuristicResult_t r{};
  int found = 0;
  cublasLtMatmulAlgoGetHeuristic(h, g.desc, g.la, g.lb, g.lc, g.lc, pref, 1, &r, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  g.algo = r.algo;
  g.lt_a = our_b;  // cuBLASLt's A is our B (gemm_plan.h)
  g.lt_b = our_a;
  g.c = c;
  return g;
}

cuda::LtPlan PlanOf(const Tensor& a, bool ta, const Tensor& b, bool tb, bool sum_batch) {
  const auto [as, ast] = cuda::ResolvedOperand(a.sizes(), a.strides(), ta);
  const auto [bs, bst] = cuda::ResolvedOperand(b.sizes(), b.strides(), tb);
  return *cuda::PlanMatmul(as, ast, bs, bst, sum_batch);
}

// {tessel ms, bare ms} per fwd + bwd of one Linear.
std::pair<double, double> Measure(cublasLtHandle_t h, void* workspace, const LinearShape& s) {
  const Device gpu = Device::Cuda(0);
  const Tensor x = Full({s.tokens, s.in}, 0.01, DType::kBFloat16, gpu);
  const Tensor w = Full({s.out, s.in}, 0.02, DType::kBFloat16, gpu);
  const Tensor b = Full({s.out}, 0.1, DType::kBFloat16, gpu);
  const Tensor g = Full({s.tokens, s.out}, 0.03, DType::kBFloat16, gpu);
  const OpDef& mm = GetOp("matmul");
  const Attrs wgrad = Attrs().Set("transpose_a", true).Set("sum_batch", true);
  const double ours = MillisPerIter([&] {
    Tensor y = Linear(x, w, b);
    Tensor gx = Dispatch(mm, std::vector<Tensor>{g, w}, Attrs())[0];
    Tensor gw = Dispatch(mm, std::vector<Tensor>{g, x}, wgrad)[0];
  });
  const Tensor y = Empty({s.tokens, s.out}, DType::kBFloat16, gpu), gx = Empty({s.tokens, s.in}, DType::kBFloat16, gpu);
  const Tensor gw = Empty({s.out, s.in}, DType::kBFloat16, gpu);
  const std::vector<BareGemm> gemms = {
      Prepare(h, PlanOf(x, false, w, true, false), x.raw_data(), w.raw_data(), y.raw_data(), b.raw_data()),
      Prepare(h, PlanOf(g, false, w, false, false), g.raw_data(), w.raw_data(), gx.raw_data(), nullptr),
      Prepare(h, PlanOf(g, true, x, false, true), g.raw_data(), x.raw_data(), gw.raw_data(), nullptr)};
  const float alpha = 1.0f, beta = 0.0f;
  const double bare = MillisPerIter([&] {
    for (const BareGemm& m : gemms) {
      cublasLtMatmul(h, m.desc, &alpha, m.lt_a, m.la, m.lt_b, m.lb, &beta, m.c, m.lc, m.c, m.lc, &m.algo, workspace,
                     kWorkspace, nullptr);
    }
  });
  return {ours, bare};
}

int Main() {
  if (!memory::InstallCudaBackend()) {
    std::printf("gpu_gemm_bf16_vs_cublas: no CUDA device visible\n");
    return 2;
  }
  cublasLtHandle_t h;
  cublasLtCreate(&h);
  void* workspace = nullptr;
  cudaMalloc(&workspace, kWorkspace);
  const std::vector<LinearShape> shapes = {{"attn.qkv", 8192, 768, 2304},
                                           {"attn.proj", 8192, 768, 768},
                                           {"mlp.fc", 8192, 768, 3072},
                                           {"mlp.proj", 8192, 3072, 768}};
  double ours_total = 0, bare_total = 0;
  for (const LinearShape& s : shapes) {
    const auto [ours, bare] = Measure(h, workspace, s);
    const double tflops = 6.0 * s.tokens * s.in * s.out / (ours * 1e-3) / 1e12;
    std::printf("  %-10s [%lld x %lld] -> %lld: tessel %.3f ms, cuBLASLt %.3f ms (%.0f TFLOP/s tessel)\n", s.name,
                static_cast<long long>(s.tokens), static_cast<long long>(s.in), static_cast<long long>(s.out), ours,
                bare, tflops);
    ours_total += ours;
    bare_total += bare;
  }
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    std::printf("gpu_gemm_bf16_vs_cublas: CUDA error %s\n", cudaGetErrorString(e));
    return 1;
  }
  std::printf(
      "figure gpu_gemm_bf16_vs_cublas %.3f (bare cuBLASLt %.3f ms / tessel %.3f ms per GPT-2 layer's Linear "
      "fwd+bwd, bf16, 8192 tokens; target >= 0.95)\n",
      bare_total / ours_total, bare_total, ours_total);
  return 0;
}

}  // namespace
}  // namespace tessel

int main() { return tessel::Main(); }
