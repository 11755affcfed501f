// benchmarks/python_optim_workload.cc — the figure `python_optim_vs_pytorch`: steps per second of an optimizer
// written by hand in Python (torch's single-tensor AdamW update as user code writes it, plus a weight EMA through
// _foreach_lerp_) over the reference GPT's 52 parameter tensors (benchmarks/python/optim_step.py, written once
// against the torch API), tessel against PyTorch 2.15 on the same threads. Ratio = tessel / PyTorch. Without
// PyTorch the line reads "skipped". What it times is the in-place methods' per-call path
// (bindings/inplace_py.cc) and the elementwise kernels behind them (core/ops/ternary.cc, elementwise.cc).
//
// Example: bazel run //benchmarks:report -- --filter=python_optim
#include "benchmarks/figure.h"

namespace tessel::bench {
namespace {

const bool kPythonOptim =
    RegisterTesselVsTorchScript("python_optim_vs_pytorch", "benchmarks/python/optim_step.py", "optim_steps_per_s: ",
                                "steps/s", "tessel_hand_adamw", "pytorch_hand_adamw");

}  // namespace
}  // namespace tessel::bench
