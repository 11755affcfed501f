// benchmarks/figure.h — headline figures for `bazel run //benchmarks:report`: a registry and the
// runner that measures them.
//
// A Figure is a throughput (work per run / seconds per run) optionally compared with a baseline
// measured in the same process. The runner is a small C++ timer, not Google Benchmark: it runs
// `warmup` untimed runs of each side, then `reps` timed runs that alternate value and baseline (so a
// burst of load from another process hits both sides alike), and reports each side's median (a peak
// baseline: its best run, Figure::baseline_is_peak).
//
// A figure that is computed rather than timed (e.g. a measured / predicted memory ratio) sets
// `precomputed`: Measure then calls it once instead of running value / baseline, and the line is
// formatted as usual from the {value, baseline} it returns (value.run and baseline->run may be empty).
//
// Invariant: a line reads `<name>: <value> <unit> vs <baseline>: <value> <unit> ratio <r>` with
// ratio = value / baseline (higher is better), or `<name>: <value> <unit>` without a baseline.
//
// Example (in a benchmark library linked into //benchmarks:report, alwayslink):
//   const bool kRegistered = RegisterFigure("memcpy_bw", [] {
//     auto buf = std::make_shared<std::vector<char>>(1 << 28);
//     return Figure{"memcpy_bw", {"memcpy_bw", "GB/s", 0.268, [buf] { ... }}, std::nullopt};
//   });
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessel::bench {

struct Throughput {
  std::string name;           // "eigen_gemm"
  std::string unit;           // "GFLOP/s"
  double work_per_run = 0;    // in the unit's numerator (GFLOP)
  std::function<void()> run;  // one run of the work; owns its inputs
};

struct Figure {
  std::string name;
  Throughput value;
  std::optional<Throughput> baseline;
  // Optional context printed after the figure's line as "# <text>" (e.g. memory ledger peaks).
  std::function<std::string()> note;
  // Optional: computes {value, baseline} in the units of value / baseline instead of timing the runs
  // (baseline 0 when the figure has none). Evaluated once per Measure.
  std::function<std::pair<double, double>()> precomputed;
  // The baseline is a peak (the machine's best GEMM rate): report its fastest timed run, not its
  // median, so a burst of load from another process during some of the baseline's runs cannot lower
  // the peak and inflate the ratio (the value side keeps its median, so the ratio errs low unless every
  // one of the peak's runs was slowed).
  bool baseline_is_peak = false;
  // Optional: a non-empty reason means the figure cannot be measured here (e.g. an optional external
  // baseline is not installed); the line then reads `<name>: skipped (<reason>)`.
  std::function<std::string()> unavailable;
};

// Registers a figure by name; `make` runs only when the report measures it (inputs allocated then).
bool RegisterFigure(std::string name, std::function<Figure()> make);
const std::vector<std::pair<std::string, std::function<Figure()>>>& RegisteredFigures();

struct FigureResult {
  double value = 0;     // throughput, median over reps
  double baseline = 0;  // 0 without a baseline
  std::string skipped;  // why it was not measured ("" when it was)
};

FigureResult Measure(const Figure& figure, int warmup, int reps);
// One side alone, as Measure times it: `t`'s median throughput over `reps` runs after `warmup` (for note
// lines that measure a second shape or configuration).
double MeasureThroughput(const Throughput& t, int warmup, int reps);

// Helpers for figures that run another program (a multi-process backend, an external baseline).
// The path of a file in this binary's runfiles tree (workspace "tessel"), e.g. "comm/gloo_bench".
std::string Runfile(const std::string& path);
// Runs `command` through the shell (stderr merged into stdout) and returns the first output line that
// contains `key` ("" if none); *exit_status gets pclose's status (0 on success).
std::string RunAndFindLine(const std::string& command, const std::string& key, int* exit_status);
// The number after `key` on that line; throws std::runtime_error naming `what` when the command failed
// or printed no such line.
double RunAndReadNumber(const std::string& command, const std::string& key, const std::string& what);
// The Python that runs the PyTorch baselines: $TESSEL_TORCH_PYTHON when set (e.g. the wrapper that
// tools/dev/install_torch.sh writes), else /usr/bin/python3.
std::string TorchPython();
// "" when TorchPython() imports torch, else why not (with the install hint).
std::string TorchUnavailableReason();
// A benchmarks/python script (a runfile path) written once against the torch API, run with `--lib=tessel`
// (Debian's python3 with the bindings) and `--lib=torch` (TorchPython()), each followed by `args`: the numbers
// after `key` on each one's output line, tessel's first; *torch_line gets PyTorch's whole line (the figure's
// note). Throws std::runtime_error naming the script when either run fails.
std::pair<double, double> RunOnTesselAndTorch(const std::string& script, const std::string& key,
                                              const std::string& args, std::string* torch_line);
// Registers the figure `name` (value unit `unit`): RunOnTesselAndTorch(script, key, "--threads=<NumThreads()>")
// as tessel's value against PyTorch's, PyTorch's line as the note, "skipped" where PyTorch is not installed.
bool RegisterTesselVsTorchScript(const std::string& name, const std::string& script, const std::string& key,
                                 const std::string& unit, const std::string& tessel_label,
                                 const std::string& torch_label);
std::string FormatLine(const Figure& figure, const FigureResult& result);

// The AVX2 path of a machine with AVX-512: figure `name`'s line from a child report (this binary, --filter=name, the
// same --threads) run with oneDNN capped at AVX2 (ONEDNN_MAX_CPU_ISA=AVX2, read once when oneDNN first runs, hence
// a fresh process) and tessel's own per-ISA kernels pinned to their AVX2 copies (report.cc, ForceVectorIsaForTesting):
// the kernels an AVX2-only CPU (the AMD EPYC Zen 3 machines) gets, so every report shows both paths. Such a child
// sees InAvx2ChildReport() and keeps its notes short.
std::string Avx2ChildLine(const std::string& name);
bool InAvx2ChildReport();

}  // namespace tessel::bench
