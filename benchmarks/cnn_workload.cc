// benchmarks/cnn_workload.cc — the figure `cnn_step_vs_pytorch`: images/s of one SGD training step of a
// small ResNet-style CNN on a [64, 3, 32, 32] batch, defined once in benchmarks/python/cnn_step.py against
// the torch API and run on tessel (Debian's python3 with the bindings: oneDNN convolutions, the one-pass
// max pool, composed batch norm) and on PyTorch 2.15 ($TESSEL_TORCH_PYTHON, figure.h's TorchPython), same
// threads. Ratio = tessel / PyTorch. Without PyTorch the line reads "skipped".
//
// Example: bazel run //benchmarks:report -- --filter=cnn_step
#include "benchmarks/figure.h"

namespace tessel::bench {
namespace {

const bool kCnnStep = RegisterTesselVsTorchScript("cnn_step_vs_pytorch", "benchmarks/python/cnn_step.py",
                                                  "cnn_step_images_per_s: ", "images/s", "tessel_cnn_step",
                                                  "pytorch_cnn_step");

}  // namespace
}  // namespace tessel::bench
