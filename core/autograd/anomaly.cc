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
}  // namespace

void SetAnomalyMode(bool on, bool nan) {
  check_nan.store(nan, std::memory_order_relaxed);
  enabled.store(on, std::memory_order_relaxed);
}

bool AnomalyModeEnabled() { return enabled.load(std::memory_order_relaxed); }
bool AnomalyCheckNan() { return check_nan.load(std::memory_order_relaxed); }

namespace internal {

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
