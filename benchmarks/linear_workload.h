// benchmarks/linear_workload.h — the GPT hot path as a benchmark workload: Linear forward + backward
// through tessel (op "linear", autograd), and the same three GEMMs on raw Eigen as the baseline.
//
//   forward   y_NO  = x_NI · w_OI^T
//   backward  gx_NI = g_NO · w_OI        gw_OI = g_NO^T · x_NI        (g = ones, bias off)
//
// Invariant: both sides do exactly these three GEMMs (3 · 2·N·I·O flops) in float32 with the calling
// thread's NumThreads() budget, so their ratio is tessel's overhead (dispatch, autograd, allocation).
//
// Example:
//   LinearShape s{4096, 1024, 4096};
//   auto run = MakeTesselLinearFwdBwd(s);   // allocates inputs once
//   run();                                  // one forward + backward
#pragma once

#include <cstdint>
#include <functional>

namespace tessel::bench {

struct LinearShape {
  int64_t rows = 4096;          // N = batch · sequence
  int64_t in_features = 1024;   // I
  int64_t out_features = 4096;  // O
  double Gflop() const { return 3 * 2.0 * rows * in_features * out_features / 1e9; }
};

// Each returns a closure that runs one forward + backward and owns its inputs.
std::function<void()> MakeTesselLinearFwdBwd(const LinearShape& shape);
// The GPT MLP's first projection with its activation, h = gelu(x · wᵀ + b) ("tanh"), forward + backward
// (grad_x, grad_w, grad_b): fused = one linear_gelu (GELU in the GEMM epilogue), else Linear then Gelu.
// The same three GEMMs as above plus the bias and GELU passes.
// With backward false: the forward alone, under NoGradGuard.
std::function<void()> MakeTesselMlpFcFwdBwd(const LinearShape& shape, bool fused, bool backward = true);
std::function<void()> MakeEigenGemmFwdBwd(const LinearShape& shape);

}  // namespace tessel::bench
