// core/optim/adam_family.h — torch's Adamax, NAdam, RAdam and Adadelta over named parameters (the Adam relatives and
// the adaptive-delta rule a ported script may name), each composed of dispatched elementwise ops as AdamW is
// (core/optim/optimizer.h), so DTensor parameters update their shards locally. g is the gradient, with torch's L2 term
// weight_decay·p added unless decoupled_weight_decay (then p *= 1 - lr·weight_decay first); t the parameter's step
// count after this step.
//
//   Adamax  exp_avg = β1·exp_avg + (1-β1)·g;  exp_inf = max(β2·exp_inf, |g| + eps);
//           p -= lr / (1 - β1^t) · exp_avg / exp_inf
//   NAdam   μ_t = β1·(1 - ½·0.96^(t·momentum_decay)); mu_product = Π μ_1..t; exp_avg, exp_avg_sq as Adam;
//           denom = sqrt(exp_avg_sq / (1 - β2^t)) + eps;
//           p -= lr·(1 - μ_t)/(1 - mu_product) · g/denom + lr·μ_{t+1}/(1 - mu_product·μ_{t+1}) · exp_avg/denom
//   RAdam   exp_avg, exp_avg_sq as Adam; ρ∞ = 2/(1-β2) - 1, ρ_t = ρ∞ - 2t·β2^t/(1-β2^t);
//           ρ_t > 5: p -= lr · exp_avg/(1-β1^t) · r_t · sqrt(1-β2^t)/(sqrt(exp_avg_sq) + eps) with
//           r_t = sqrt((ρ_t-4)(ρ_t-2)ρ∞ / ((ρ∞-4)(ρ∞-2)ρ_t)); else p -= lr · exp_avg/(1-β1^t)
//   Adadelta square_avg = ρ·square_avg + (1-ρ)·g²; δ = sqrt(acc_delta + eps)/sqrt(square_avg + eps)·g;
//           acc_delta = ρ·acc_delta + (1-ρ)·δ²; p -= lr·δ  (L2 weight decay only, as torch)
//
// NAdam's mu_product is a function of the step count and the hyperparameters: it is kept per parameter
// beside the state (not in the state dict) and rebuilt from the step count after a load.
//
// Example:
//   optim::NAdam opt(model.NamedParameters(), {.lr = 2e-3});
//   Backward(loss); opt.Step(); opt.ZeroGrad();
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/optim/optimizer.h"

namespace tessel::optim {

struct AdamaxOptions {
  double lr = 2e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

class Adamax final : public Optimizer {
 public:
  Adamax(nn::StateDict named_params, AdamaxOptions options);
  void Step() override;
  std::vector<std::string> StateNames() const override { return {"exp_avg", "exp_inf"}; }

 private:
  std::map<std::string, double> Hyper() const override;
  void SetHyper(const std::map<std::string, double>& h) override;
  AdamaxOptions o_;
};

struct NAdamOptions {
  double lr = 2e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0, momentum_decay = 4e-3;
  bool decoupled_weight_decay = false;
};

class NAdam final : public Optimizer {
 public:
  NAdam(nn::StateDict named_params, NAdamOptions options);
  void Step() override;
  std::vector<std::string> StateNames() const override { return {"exp_avg", "exp_avg_sq"}; }
  // torch's state entry mu_product of parameter `fqn`: Π μ_1..t at its step count t (1 before any step).
  double MuProduct(const std::string& fqn) const;

 private:
  std::map<std::string, double> Hyper() const override;
  void SetHyper(const std::map<std::string, double>& h) override;
  double Mu(int64_t t) const;
  double ProductThrough(int64_t t) const;  // Π μ_1..t
  NAdamOptions o_;
  std::map<std::string, std::pair<int64_t, double>> mu_product_;  // fqn -> (step it covers, product)
};

struct RAdamOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool decoupled_weight_decay = false;
};

class RAdam final : public Optimizer {
 public:
  RAdam(nn::StateDict named_params, RAdamOptions options);
  void Step() override;
  std::vector<std::string> StateNames() const override { return {"exp_avg", "exp_avg_sq"}; }

 private:
  std::map<std::string, double> Hyper() const override;
  void SetHyper(const std::map<std::string, double>& h) override;
  RAdamOptions o_;
};

struct AdadeltaOptions {
  double lr = 1.0, rho = 0.9, eps = 1e-6, weight_decay = 0.0;
};

class Adadelta final : public Optimizer {
 public:
  Adadelta(nn::StateDict named_params, AdadeltaOptions options);
  void Step() override;
  std::vector<std::string> StateNames() const override { return {"square_avg", "acc_delta"}; }

 private:
  std::map<std::string, double> Hyper() const override;
  void SetHyper(const std::map<std::string, double>& h) override;
  AdadeltaOptions o_;
};

namespace internal {
// The Adam relatives' shared steps (AdamW's amsgrad path uses them too). The gradient the moments see:
// g + wd·p (L2), or g after p *= 1 - lr·wd (decoupled).
Tensor DecayedGrad(const Tensor& grad, const Tensor& p, double lr, double wd, bool decoupled);
// exp_avg = β1·exp_avg + (1-β1)·g and exp_avg_sq = β2·exp_avg_sq + (1-β2)·g².
void UpdateMoments(Tensor& exp_avg, Tensor& exp_avg_sq, const Tensor& g, double beta1, double beta2);
}  // namespace internal

}  // namespace tessel::optim
