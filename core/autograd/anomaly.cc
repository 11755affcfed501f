// core/autograd/anomaly.cc — see anomaly.h.
#include "core/autograd/anomaly.h"

#include <atomic>
#include <cmath>
#include <vector>

#include "core/base/error.h"

namespace tessel::autograd {
namespace {
std::atomic<bool> enabled{false};
std::atomic<bool> check_nan{true};
std::atomic<ForwardTraceProvider> trace_provider{nullptr};
std::atomic<AnomalyTraceReporter> trace_reporter{nullptr};
}  // namespace

void SetForwardTraceHooks(ForwardTraceProvider provider, AnomalyTraceReporter reporter) {
  trace_provider.store(provider, std::memory_order_relaxed);
  trace_reporter.store(reporter, std::memory_order_relaxed);
}

void SetAnomalyMode(bool on, bool nan) {
  check_nan.store(nan, std::memory_order_relaxed);
  enabled.store(on, std::memory_order_relaxed);
}

bool AnomalyModeEnabled() { return enabled.load(std::memory_order_relaxed); }
bool AnomalyCheckNan() { return check_nan.load(std::memory_order_relaxed); }

namespace internal {

std::unique_ptr<std::string> ForwardTrace() {
  if (!AnomalyModeEnabled()) return nullptr;
  const ForwardTraceProvider provider = trace_provider.load(std::memory_order_relaxed);
  if (provider == nullptr) return nullptr;
  std::string trace = provider();
  return trace.empty() ? nullptr : std::make_unique<std::string>(std::move(trace));
}

void ReportForwardTrace(const Node& node) {
  const AnomalyTraceReporter reporter = trace_reporter.load(std::memory_order_relaxed);
  if (reporter != nullptr && node.forward_trace != nullptr) reporter(TorchNodeName(node.name()), *node.forward_trace);
}

void CheckAnomaly(const Node& node, const TensorList& outputs) {
  if (!AnomalyModeEnabled() || !AnomalyCheckNan()) return;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& g = outputs[i];
    if (!g.defined() || !IsFloating(g.dtype()) || g.is_distributed()) continue;
    for (double v : g.ToVector<double>()) {
      TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !std::isnan(v), "Function '", TorchNodeName(node.name()),
                        "' returned nan values in its ", i, "th output.");
    }
  }
}

}  // namespace internal
}  // namespace tessel::autograd
