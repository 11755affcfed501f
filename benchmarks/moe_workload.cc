// benchmarks/moe_workload.cc — the figure `moe_layer_vs_pytorch`: steps per second of a dropless top-2
// Mixture-of-Experts layer's forward + backward on one rank (torchtitan's routing and SwiGLU experts through
// torch._grouped_mm; benchmarks/python/moe_layer.py, written once against the torch API), tessel against PyTorch
// 2.15 on the same threads. Ratio = tessel / PyTorch. Without PyTorch the line reads "skipped". What it times is
// the grouped GEMMs (core/ops/grouped_mm.cc: a GEMM per expert into the output, small experts in parallel; torch's
// CPU fallback loops mm calls) and the routing's sort, gathers and scatters.
//
// Example: bazel run //benchmarks:report -- --filter=moe
#include "benchmarks/figure.h"

namespace tessel::bench {
namespace {

const bool kMoeLayer = RegisterTesselVsTorchScript("moe_layer_vs_pytorch", "benchmarks/python/moe_layer.py",
                                                   "moe_steps_per_s: ", "steps/s", "tessel_moe_layer",
                                                   "pytorch_moe_layer");

}  // namespace
}  // namespace tessel::bench
