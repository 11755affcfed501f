// core/autograd/grad_mode.cc — the thread-local grad mode flag.
#include "core/autograd/grad_mode.h"

namespace tessel {
namespace {
thread_local bool grad_mode = true;
}  // namespace

bool GradModeEnabled() { return grad_mode; }
void SetGradModeEnabled(bool enabled) { grad_mode = enabled; }
GradModeGuard::GradModeGuard(bool enabled) : previous_(grad_mode) { grad_mode = enabled; }
GradModeGuard::~GradModeGuard() { grad_mode = previous_; }

}  // namespace tessel
