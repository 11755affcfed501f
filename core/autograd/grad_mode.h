// core/autograd/grad_mode.h — thread-local switch for recording autograd history.
//
// Invariant: while a NoGradGuard is alive on a thread, ops called on that thread record no history and
// their outputs do not require grad. Each rank thread has its own mode.
//
// Example:
//   { NoGradGuard g; optimizer.Step(); }   // parameter updates are not recorded
#pragma once

namespace tessel {

bool GradModeEnabled();
// Sets this thread's mode with no scope (torch.set_grad_enabled called as a function); prefer the guards.
void SetGradModeEnabled(bool enabled);

class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled);
  ~GradModeGuard();
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};

}  // namespace tessel
