// core/optim/optimizer.h — Optimizer base (parameters keyed by FQN), SGD, AdamW, RMSprop, Adagrad, their state dicts,
// global-norm gradient clipping and the warmup + cosine learning-rate schedule.
//
// Invariant: optimizer state is keyed by parameter FQN (never by index), created lazily on the first
// Step() under the "optim" memory ledger with the parameter's layout (ZerosLike dispatches, so a
// DTensor parameter gets DTensor state and each rank updates only its shard). Step() skips
// parameters whose .grad is undefined, like PyTorch.
//
// Options are validated like torch.optim (same wording: "Invalid learning rate: -1", "Invalid beta
// parameter at index 0: 2", ...) → kInvalidArgument; a nan fails every check, as in torch.
//
// An optimizer created before fully_shard / parallelize_module holds handles the module no longer reads.
// NOTE: Step() raises kFailedPrecondition naming those FQNs rather than following the swap: the
// optimizer has no module (it is built from an FQN → tensor list), its state would have the old layout
// (dense where the new parameter is a DTensor shard), and PyTorch also requires building the optimizer
// after fully_shard; following would hide a wrong construction order behind a silent state reset.
//
// Example:
//   optim::AdamW opt(model.NamedParameters(), {.lr = 3e-4, .weight_decay = 0.1});
//   Backward(loss);
//   double norm = optim::ClipGradNorm(model.Parameters(), 1.0);
//   opt.set_lr(schedule.LrAt(step));
//   opt.Step();
//   opt.ZeroGrad();
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "core/nn/module.h"

namespace tessel::optim {

// Per-parameter state tensors plus the step counter; hyperparameters as numbers.
struct OptimizerStateDict {
  std::map<std::string, std::map<std::string, Tensor>> state;  // fqn → {"exp_avg": ..., ...}
  std::map<std::string, int64_t> steps;                         // fqn → step count
  std::map<std::string, double> hyper;                          // "lr", "beta1", ...
};

class Optimizer {
 public:
  explicit Optimizer(nn::StateDict named_params);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual void Step() = 0;
  void ZeroGrad();  // set_to_none
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  const nn::StateDict& params() const { return params_; }

  virtual OptimizerStateDict GetStateDict() const;
  // REQUIRES: keys match this optimizer's parameters (kInvalidArgument lists unknown FQNs).
  virtual void LoadStateDict(const OptimizerStateDict& sd);
  // Frees the state buffers of every parameter not in `keep` (their next step starts them over): with a load of
  // torch's layout, whose state replaces all of it, so a parameter without an entry is fresh, as torch's.
  void DropStateExcept(const std::set<std::string>& keep);
  // One parameter's state replaced: its buffers take the values of `entries` (copied into the live buffers, which
  // keep their identity; a buffer not named is dropped; none: it starts over at its next step, as a parameter
  // absent from a loaded state dict) and its step count `step`; the other parameters' state is untouched.
  // What a write to one entry of torch's `optimizer.state[p]` does, without a whole state dict's round trip.
  // REQUIRES: fqn is one of this optimizer's parameters and each tensor has its shape (kInvalidArgument).
  void LoadParamState(const std::string& fqn, const std::map<std::string, Tensor>& entries, int64_t step);
  // Parameter fqn's state buffers (aliases of the live tensors; empty before its first step) and step count.
  std::pair<std::map<std::string, Tensor>, int64_t> ParamState(const std::string& fqn) const;

  // The hyperparameters by name ("lr", "beta1", "weight_decay", ...), as the state dict holds them; the
  // Python face sets a parameter group's values before every step (torch reads param_groups each step).
  virtual std::map<std::string, double> Hyper() const = 0;
  virtual void SetHyper(const std::map<std::string, double>& h) = 0;
  // The per-parameter state tensors Step() keeps with the current hyperparameters ("exp_avg", ...), known
  // before the first step so a fresh optimizer's state dict can be a checkpoint's load target.
  virtual std::vector<std::string> StateNames() const = 0;

 protected:
  // The parameter named fqn (kInvalidArgument naming `what` when there is none).
  const Tensor& Param(const std::string& fqn, const char* what) const;
  // Copies s's tensors into parameter fqn's state buffers (created as needed), each checked against its shape.
  void CopyIntoState(const std::string& fqn, const std::map<std::string, Tensor>& s);
  // The state tensor `name` of parameter `fqn`, created as zeros like the parameter on first use.
  Tensor& State(const std::string& fqn, const std::string& name, const Tensor& like);
  // kFailedPrecondition naming the FQNs whose handles nn::Module::SetParameter has replaced.
  void CheckParamsAreCurrent(const char* optimizer_name) const;
  // A Step()'s frame: the replaced-handle and learning-rate checks, no grad recording, then fn(fqn, param, grad, t)
  // for every parameter with a gradient, t being its step count after this step (recorded once fn returns).
  template <typename F>
  void ForEachGradient(const char* optimizer_name, F&& fn) {
    CheckParamsAreCurrent(optimizer_name);
    TESSEL_CHECK(lr_ >= 0.0, "Invalid learning rate: ", lr_);
    NoGradGuard no_grad;
    for (auto& [fqn, p] : params_) {
      const Tensor grad = p.grad();
      if (!grad.defined()) continue;
      const int64_t t = steps_[fqn] + 1;
      fn(fqn, p, grad, t);
      steps_[fqn] = t;
    }
  }

  nn::StateDict params_;
  double lr_ = 1e-3;
  std::map<std::string, std::map<std::string, Tensor>> state_;
  std::map<std::string, int64_t> steps_;
};

struct SGDOptions {
  double lr = 1e-2;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD final : public Optimizer {
 public:
  SGD(nn::StateDict named_params, SGDOptions options);
  void Step() override;
  std::vector<std::string> StateNames() const override;

 private:
  std::map<std::string, double> Hyper() const override;
  void SetHyper(const std::map<std::string, double>& h) override;
  SGDOptions o_;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  // torch's AMSGrad: the denominator uses max_exp_avg_sq, the running maximum of exp_avg_sq (a state tensor
  // of its own), instead of exp_avg_sq; composed of dispatched elementwise ops rather than the fused kernel.
  bool amsgrad = false;
};

class AdamW final : public Optimizer {
 public:
  AdamW(nn::StateDict named_params, AdamWOptions options);
  void Step() override;
  std::vector<std::string> StateNames() const override;

 private:
  std::map<std::string, double> Hyper() const override;
  void SetHyper(const std::map<std::string, double>& h) override;
  void StepAmsgrad();
  AdamWOptions o_;
};

// torch.optim.RMSprop: square_avg = alpha·square_avg + (1 - alpha)·g² (g with the L2 term weight_decay·p),
// denominator sqrt(square_avg) + eps (centered: sqrt(square_avg - grad_avg²) + eps with grad_avg the mean
// of g), then p -= lr·g / denominator, or through a momentum buffer (buf = momentum·buf + g / denominator).
// Composed of dispatched elementwise ops, so DTensor parameters update their shards locally.
struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;
  bool centered = false;
};

class RMSprop final : public Optimizer {
 public:
  RMSprop(nn::StateDict named_params, RMSpropOptions options);
  void Step() override;
  std::vector<std::string> StateNames() const override;

 private:
  std::map<std::string, double> Hyper() const override;
  void SetHyper(const std::map<std::string, double>& h) override;
  RMSpropOptions o_;
};

// torch.optim.Adagrad: sum += g² (g with the L2 term), p -= clr·g / (sqrt(sum) + eps) with
// clr = lr / (1 + (step - 1)·lr_decay); sum starts at initial_accumulator_value.
struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0.0;
  double weight_decay = 0.0;
  double initial_accumulator_value = 0.0;
  double eps = 1e-10;
};

class Adagrad final : public Optimizer {
 public:
  Adagrad(nn::StateDict named_params, AdagradOptions options);
  void Step() override;
  std::vector<std::string> StateNames() const override { return {"sum"}; }

 private:
  std::map<std::string, double> Hyper() const override;
  void SetHyper(const std::map<std::string, double>& h) override;
  AdagradOptions o_;
};

// Scales every defined .grad in place so their global L2 norm is at most max_norm; returns the
// norm before clipping (torch.nn.utils.clip_grad_norm_). DTensor grads count each element of the full
// tensor once (a sharded grad's sum of squares is Partial and is reduced when read): collective, one
// scalar all-reduce per sharded grad. fsdp::ClipGradNorm does one all-reduce for a whole model.
double ClipGradNorm(const TensorList& params, double max_norm);

// Linear warmup from 0 to max_lr over warmup_steps, then cosine decay to min_lr at total_steps.
struct WarmupCosineSchedule {
  double max_lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup_steps = 100;
  int64_t total_steps = 1000;
  double LrAt(int64_t step) const;  // step is 0-based
};

}  // namespace tessel::optim
