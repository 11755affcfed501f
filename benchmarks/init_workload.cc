// benchmarks/init_workload.cc — the figure `init_vs_pytorch`: parameters built and initialized per second as
// torchtitan's LLaMA does it (nn.Linear's default init, then trunc_normal_(std=0.02) on every weight and
// normal_ on the embedding; benchmarks/python/init_step.py, written once against the torch API), tessel
// against PyTorch 2.15 on the same threads. Ratio = tessel / PyTorch. Without PyTorch the line reads
// "skipped". What it times is the random fills (core/tensor/random_kernels.h) and the layers' construction.
//
// Example: bazel run //benchmarks:report -- --filter=init
#include "benchmarks/figure.h"

namespace tessel::bench {
namespace {

const bool kInit = RegisterTesselVsTorchScript("init_vs_pytorch", "benchmarks/python/init_step.py",
                                               "init_params_per_s: ", "Mparams/s", "tessel_init", "pytorch_init");

}  // namespace
}  // namespace tessel::bench
