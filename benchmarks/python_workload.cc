// benchmarks/python_workload.cc — the figure `python_module_step_vs_cpp`: tokens/s of one training step
// of a GPT defined in Python (examples/python/gpt.py, tessel.nn modules whose forward is Python) against
// the same GPT as the C++ tessel.GPT, both driven from Python in one process (benchmarks/python/
// module_step.py, run by Debian's /usr/bin/python3). Ratio = Python / C++; the target is ≥ 0.9: every op
// releases the GIL and the per-module Python work is a few attribute lookups and calls.
//
// Invariant: both sides run the same weights, batch, optimizer and threads, timed alternately (medians).
//
// Example: bazel run //benchmarks:report -- --filter=python_module
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "benchmarks/figure.h"

namespace tessel::bench {
namespace {

const bool kPythonModuleStep = RegisterFigure("python_module_step_vs_cpp", [] {
  Figure f{"python_module_step_vs_cpp", {"python_gpt_step", "tokens/s", 0, nullptr},
           Throughput{"cpp_gpt_step", "tokens/s", 0, nullptr}};
  f.precomputed = [] {
    const std::string command = "PYTHONPATH=" + Runfile("bindings") + ":" + Runfile("examples/python") +
                                " /usr/bin/python3 " + Runfile("benchmarks/python/module_step.py");
    int status = 0;
    const std::string line = RunAndFindLine(command, "python_module_step_vs_cpp: ", &status);
    double python = 0, cpp = 0;
    if (status == 0) std::istringstream(line.substr(line.find(": ") + 2)) >> python >> cpp;
    if (python <= 0 || cpp <= 0) throw std::runtime_error("module_step.py failed: " + line);
    return std::pair<double, double>{python, cpp};
  };
  return f;
});

}  // namespace
}  // namespace tessel::bench
