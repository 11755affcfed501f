// benchmarks/ddp_workload.cc — the figure `ddp_gloo_step_vs_pytorch`: global tokens/s of the reference GPT's
// training step under DistributedDataParallel on 2 gloo processes, written once against the torch API in
// benchmarks/python/ddp_gloo_step.py and run on tessel (Debian's python3 with the bindings: tessel.nn.parallel's
// DDP over fsdp::Replicate's buckets) and on PyTorch 2.15 ($TESSEL_TORCH_PYTHON, figure.h's TorchPython), each
// process on max(1, cores / 2) threads. Ratio = tessel / PyTorch. Without PyTorch the line reads "skipped".
//
// Example: bazel run //benchmarks:report -- --filter=ddp_gloo
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "benchmarks/figure.h"
#include "core/base/error.h"

namespace tessel::bench {
namespace {

const bool kDdpGlooStep = RegisterFigure("ddp_gloo_step_vs_pytorch", [] {
  auto torch_line = std::make_shared<std::string>();
  Figure f{"ddp_gloo_step_vs_pytorch", {"tessel_ddp_gloo_step", "tokens/s", 0, nullptr},
           Throughput{"pytorch_ddp_gloo_step", "tokens/s", 0, nullptr}};
  f.unavailable = [] { return TorchUnavailableReason(); };
  f.precomputed = [torch_line] {
    const std::string script = Runfile("benchmarks/python/ddp_gloo_step.py");
    const double tessel =
        RunAndReadNumber(Str("PYTHONPATH=", Runfile("bindings"), " /usr/bin/python3 ", script, " --lib=tessel"),
                         "ddp_gloo_step_tokens_per_s: ", "ddp_gloo_step.py --lib=tessel");
    int status = 0;
    *torch_line = RunAndFindLine(Str(TorchPython(), " ", script, " --lib=torch"), "ddp_gloo_step_tokens_per_s: ",
                                 &status);
    const size_t colon = torch_line->find(": ");
    const double torch_rate = status == 0 && colon != std::string::npos ? std::atof(torch_line->c_str() + colon + 2) : 0;
    if (torch_rate <= 0) throw std::runtime_error("ddp_gloo_step.py --lib=torch failed: " + *torch_line);
    return std::pair<double, double>{tessel, torch_rate};
  };
  f.note = [torch_line] { return *torch_line; };
  return f;
});

}  // namespace
}  // namespace tessel::bench
