// benchmarks/cnn_workload.cc — the figure `cnn_step_vs_pytorch`: images/s of one SGD training step of a
// small ResNet-style CNN on a [64, 3, 32, 32] batch, defined once in benchmarks/python/cnn_step.py against
// the torch API and run on tessel (Debian's python3 with the bindings: oneDNN convolutions, the one-pass
// max pool, composed batch norm) and on PyTorch 2.15 ($TESSEL_TORCH_PYTHON, figure.h's TorchPython), same
// threads. Ratio = tessel / PyTorch. Without PyTorch the line reads "skipped".
//
// Example: bazel run //benchmarks:report -- --filter=cnn_step
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "benchmarks/figure.h"
#include "core/base/parallel.h"
#include "core/base/error.h"

namespace tessel::bench {
namespace {

const bool kCnnStep = RegisterFigure("cnn_step_vs_pytorch", [] {
  auto torch_line = std::make_shared<std::string>();
  Figure f{"cnn_step_vs_pytorch", {"tessel_cnn_step", "images/s", 0, nullptr},
           Throughput{"pytorch_cnn_step", "images/s", 0, nullptr}};
  f.unavailable = [] { return TorchUnavailableReason(); };
  f.precomputed = [torch_line] {
    const std::string script = Runfile("benchmarks/python/cnn_step.py");
    const std::string threads = Str(" --threads=", NumThreads());
    const double tessel = RunAndReadNumber(
        Str("PYTHONPATH=", Runfile("bindings"), " /usr/bin/python3 ", script, " --lib=tessel", threads),
        "cnn_step_images_per_s: ", "cnn_step.py --lib=tessel");
    int status = 0;
    *torch_line = RunAndFindLine(Str(TorchPython(), " ", script, " --lib=torch", threads), "cnn_step_images_per_s: ", &status);
    const size_t colon = torch_line->find(": ");
    const double torch_rate = status == 0 && colon != std::string::npos ? std::atof(torch_line->c_str() + colon + 2) : 0;
    if (torch_rate <= 0) throw std::runtime_error("cnn_step.py --lib=torch failed: " + *torch_line);
    return std::pair<double, double>{tessel, torch_rate};
  };
  f.note = [torch_line] { return *torch_line; };
  return f;
});

}  // namespace
}  // namespace tessel::bench
