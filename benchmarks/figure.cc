// benchmarks/figure.cc — figure registry, interleaved median timing, report-line formatting.
#include "benchmarks/figure.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "core/base/parallel.h"

namespace tessel::bench {
namespace {

std::vector<std::pair<std::string, std::function<Figure()>>>& Registry() {
  static auto* registry = new std::vector<std::pair<std::string, std::function<Figure()>>>();
  return *registry;
}

double SecondsOf(const std::function<void()>& run) {
  const auto start = std::chrono::steady_clock::now();
  run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// About three significant digits without exponents: 11167, 54.8, 6.31, 0.0507.
std::string Fixed(double v) {
  char buf[64];
  const double a = std::abs(v);
  if (a >= 100 || a == 0) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  } else if (a >= 1) {
    std::snprintf(buf, sizeof(buf), "%.*f", a >= 10 ? 1 : 2, v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.3g", v);
  }
  return buf;
}

}  // namespace

bool RegisterFigure(std::string name, std::function<Figure()> make) {
  Registry().emplace_back(std::move(name), std::move(make));
  std::sort(Registry().begin(), Registry().end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return true;
}

const std::vector<std::pair<std::string, std::function<Figure()>>>& RegisteredFigures() { return Registry(); }

FigureResult Measure(const Figure& figure, int warmup, int reps) {
  if (figure.unavailable) {
    if (std::string why = figure.unavailable(); !why.empty()) return FigureResult{0, 0, why};
  }
  if (figure.precomputed) {
    const auto [value, baseline] = figure.precomputed();
    return FigureResult{value, baseline, ""};
  }
  const bool has_baseline = figure.baseline.has_value();
  for (int i = 0; i < warmup; ++i) {
    figure.value.run();
    if (has_baseline) figure.baseline->run();
  }
  std::vector<double> tv, tb;
  for (int i = 0; i < std::max(reps, 1); ++i) {
    // Alternate which side goes first so neither always runs on a warmer cache or cooler chip.
    if (has_baseline && i % 2 == 1) tb.push_back(SecondsOf(figure.baseline->run));
    tv.push_back(SecondsOf(figure.value.run));
    if (has_baseline && i % 2 == 0) tb.push_back(SecondsOf(figure.baseline->run));
  }
  FigureResult r;
  r.value = figure.value.work_per_run / Median(tv);
  if (has_baseline) {
    r.baseline = figure.baseline->work_per_run /
                 (figure.baseline_is_peak ? *std::min_element(tb.begin(), tb.end()) : Median(tb));
  }
  return r;
}

double MeasureThroughput(const Throughput& t, int warmup, int reps) {
  return Measure(Figure{t.name, t, std::nullopt}, warmup, reps).value;
}

std::string FormatLine(const Figure& figure, const FigureResult& r) {
  if (!r.skipped.empty()) return figure.name + ": skipped (" + r.skipped + ")";
  std::string line = figure.name + ": " + Fixed(r.value) + " " + figure.value.unit;
  if (!figure.baseline) return line;
  char ratio[32];
  std::snprintf(ratio, sizeof(ratio), "%.3f", r.value / r.baseline);
  return line + " vs " + figure.baseline->name + ": " + Fixed(r.baseline) + " " + figure.baseline->unit + " ratio " +
         ratio;
}

std::string Runfile(const std::string& path) {
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe");
  return (std::filesystem::path(self.string() + ".runfiles") / "tessel" / path).string();
}

std::string RunAndFindLine(const std::string& command, const std::string& key, int* exit_status) {
  *exit_status = -1;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return "";
  std::string found;
  char line[1024];
  while (std::fgets(line, sizeof(line), p) != nullptr) {
    if (found.empty() && std::strstr(line, key.c_str()) != nullptr) found = line;
  }
  *exit_status = pclose(p);
  while (!found.empty() && (found.back() == '\n' || found.back() == '\r')) found.pop_back();
  return found;
}

double RunAndReadNumber(const std::string& command, const std::string& key, const std::string& what) {
  int status = 0;
  const std::string line = RunAndFindLine(command, key, &status);
  const size_t at = line.find(key);
  if (status != 0 || at == std::string::npos) {
    throw std::runtime_error(what + " exited with status " + std::to_string(status) +
                             (line.empty() ? std::string(" and printed no result") : ": " + line));
  }
  return std::atof(line.c_str() + at + key.size());
}

namespace {
constexpr char kAvx2Child[] = "TESSEL_REPORT_AVX2_CHILD";
}  // namespace

bool InAvx2ChildReport() { return std::getenv(kAvx2Child) != nullptr; }

std::string Avx2ChildLine(const std::string& name) {
  int status = 0;
  const std::string line = RunAndFindLine(std::string("ONEDNN_MAX_CPU_ISA=AVX2 ") + kAvx2Child + "=1 /proc/" +
                                              std::to_string(getpid()) + "/exe --filter=" + name +
                                              " --threads=" + std::to_string(NumThreads()),
                                          name + ": ", &status);
  return line.empty() || status != 0 ? "the AVX2 run failed (wait status " + std::to_string(status) + ")" : line;
}

std::pair<double, double> RunOnTesselAndTorch(const std::string& script, const std::string& key,
                                              const std::string& args, std::string* torch_line) {
  const std::string path = Runfile(script);
  const double tessel = RunAndReadNumber(
      "PYTHONPATH=" + Runfile("bindings") + " /usr/bin/python3 " + path + " --lib=tessel " + args, key,
      script + " --lib=tessel");
  int status = 0;
  *torch_line = RunAndFindLine(TorchPython() + " " + path + " --lib=torch " + args, key, &status);
  const size_t at = torch_line->find(key);
  const double torch_rate = status == 0 && at != std::string::npos ? std::atof(torch_line->c_str() + at + key.size())
                                                                   : 0;
  if (torch_rate <= 0) throw std::runtime_error(script + " --lib=torch failed: " + *torch_line);
  return {tessel, torch_rate};
}

bool RegisterTesselVsTorchScript(const std::string& name, const std::string& script, const std::string& key,
                                 const std::string& unit, const std::string& tessel_label,
                                 const std::string& torch_label) {
  return RegisterFigure(name, [=] {
    auto torch_line = std::make_shared<std::string>();
    Figure f{name, {tessel_label, unit, 0, nullptr}, Throughput{torch_label, unit, 0, nullptr}};
    f.unavailable = [] { return TorchUnavailableReason(); };
    f.precomputed = [=] {
      return RunOnTesselAndTorch(script, key, "--threads=" + std::to_string(NumThreads()), torch_line.get());
    };
    f.note = [torch_line] { return *torch_line; };
    return f;
  });
}

std::string TorchPython() {
  const char* env = std::getenv("TESSEL_TORCH_PYTHON");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string("/usr/bin/python3");
}

std::string TorchUnavailableReason() {
  int status = 0;
  RunAndFindLine(TorchPython() + " -c 'import torch; print(\"torch\", torch.__version__)'", "torch ", &status);
  if (status == 0) return "";
  return "PyTorch does not import in " + TorchPython() +
         " (bash tools/dev/install_torch.sh, then export TESSEL_TORCH_PYTHON as it prints)";
}

}  // namespace tessel::bench
