// pipelining/dependencies.cc — see dependencies.h.
#include "pipelining/dependencies.h"

namespace tessel::pipelining {

std::vector<std::vector<Action>> DataDependencies(const Action& a, int num_stages) {
  if (!a.microbatch.has_value()) return {};
  const int s = a.stage, m = *a.microbatch;
  switch (a.kind) {
    case ActionKind::kForward:
      if (s == 0) return {};
      return {{F(s - 1, m)}};
    case ActionKind::kFullBackward:
    case ActionKind::kBackwardInput:
      if (s == num_stages - 1) return {{F(s, m)}};
      return {{F(s, m)}, {B(s + 1, m), I(s + 1, m)}};
    case ActionKind::kBackwardWeight:
      return {{I(s, m)}};
    default:
      return {};
  }
}

}  // namespace tessel::pipelining
