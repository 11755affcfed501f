// core/optim/adam_family.cc — Adamax, NAdam, RAdam and Adadelta (formulas in adam_family.h).
#include "core/optim/adam_family.h"

#include <cmath>
#include <utility>

#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "core/ops/elementwise.h"
#include "core/ops/ternary.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"

namespace tessel::optim {
namespace {

// torch's checks and wording for the Adam family.
void CheckAdamOptions(double lr, double beta1, double beta2, double eps, double weight_decay) {
  TESSEL_CHECK(lr >= 0.0, "Invalid learning rate: ", lr);
  TESSEL_CHECK(eps >= 0.0, "Invalid epsilon value: ", eps);
  TESSEL_CHECK(beta1 >= 0.0 && beta1 < 1.0, "Invalid beta parameter at index 0: ", beta1);
  TESSEL_CHECK(beta2 >= 0.0 && beta2 < 1.0, "Invalid beta parameter at index 1: ", beta2);
  TESSEL_CHECK(weight_decay >= 0.0, "Invalid weight_decay value: ", weight_decay);
}

// The hyperparameters every Adam relative has, under the state dict's names.
std::map<std::string, double> AdamHyper(double lr, double beta1, double beta2, double eps, double wd) {
  return {{"lr", lr}, {"beta1", beta1}, {"beta2", beta2}, {"eps", eps}, {"weight_decay", wd}};
}
void SetAdamHyper(const std::map<std::string, double>& h, double& lr, double& beta1, double& beta2, double& eps,
                  double& wd) {
  for (auto [name, field] : {std::pair{"lr", &lr}, std::pair{"beta1", &beta1}, std::pair{"beta2", &beta2},
                             std::pair{"eps", &eps}, std::pair{"weight_decay", &wd}}) {
    if (auto it = h.find(name); it != h.end()) *field = it->second;
  }
}
void SetFlag(const std::map<std::string, double>& h, const char* name, bool& flag) {
  if (auto it = h.find(name); it != h.end()) flag = it->second != 0;
}

}  // namespace

namespace internal {

Tensor DecayedGrad(const Tensor& grad, const Tensor& p, double lr, double wd, bool decoupled) {
  if (wd == 0.0) return grad;
  if (decoupled) {
    CopyInPlace(p, MulScalar(p, 1.0 - lr * wd));
    return grad;
  }
  return Add(grad, MulScalar(p, wd));
}

void UpdateMoments(Tensor& exp_avg, Tensor& exp_avg_sq, const Tensor& g, double beta1, double beta2) {
  CopyInPlace(exp_avg, Add(MulScalar(exp_avg, beta1), MulScalar(g, 1.0 - beta1)));
  CopyInPlace(exp_avg_sq, Add(MulScalar(exp_avg_sq, beta2), MulScalar(Mul(g, g), 1.0 - beta2)));
}

}  // namespace internal

using internal::DecayedGrad;
using internal::UpdateMoments;

Adamax::Adamax(nn::StateDict named_params, AdamaxOptions options) : Optimizer(std::move(named_params)), o_(options) {
  CheckAdamOptions(o_.lr, o_.beta1, o_.beta2, o_.eps, o_.weight_decay);
  lr_ = o_.lr;
}

void Adamax::Step() {
  ForEachGradient("Adamax", [&](const std::string& fqn, Tensor& p, const Tensor& grad, int64_t t) {
    const Tensor g = DecayedGrad(grad, p, lr_, o_.weight_decay, false);
    Tensor& exp_avg = State(fqn, "exp_avg", p);
    Tensor& exp_inf = State(fqn, "exp_inf", p);
    CopyInPlace(exp_avg, Add(MulScalar(exp_avg, o_.beta1), MulScalar(g, 1.0 - o_.beta1)));
    const Tensor decayed = MulScalar(exp_inf, o_.beta2), fresh = AddScalar(Abs(g), o_.eps);
    CopyInPlace(exp_inf, Where(Gt(decayed, fresh), decayed, fresh));
    const double clr = lr_ / (1.0 - std::pow(o_.beta1, static_cast<double>(t)));
    AddInPlace(p, MulScalar(Div(exp_avg, exp_inf), -clr));
  });
}

std::map<std::string, double> Adamax::Hyper() const {
  return AdamHyper(lr_, o_.beta1, o_.beta2, o_.eps, o_.weight_decay);
}

void Adamax::SetHyper(const std::map<std::string, double>& h) {
  SetAdamHyper(h, lr_, o_.beta1, o_.beta2, o_.eps, o_.weight_decay);
}

NAdam::NAdam(nn::StateDict named_params, NAdamOptions options) : Optimizer(std::move(named_params)), o_(options) {
  CheckAdamOptions(o_.lr, o_.beta1, o_.beta2, o_.eps, o_.weight_decay);
  TESSEL_CHECK(o_.momentum_decay >= 0.0, "Invalid momentum_decay value: ", o_.momentum_decay);
  lr_ = o_.lr;
}

double NAdam::Mu(int64_t t) const {
  return o_.beta1 * (1.0 - 0.5 * std::pow(0.96, static_cast<double>(t) * o_.momentum_decay));
}

double NAdam::ProductThrough(int64_t t) const {
  double product = 1.0;
  for (int64_t i = 1; i <= t; ++i) product *= Mu(i);
  return product;
}

double NAdam::MuProduct(const std::string& fqn) const {
  const auto step = steps_.find(fqn);
  const int64_t t = step == steps_.end() ? 0 : step->second;
  const auto cached = mu_product_.find(fqn);
  return cached != mu_product_.end() && cached->second.first == t ? cached->second.second : ProductThrough(t);
}

void NAdam::Step() {
  ForEachGradient("NAdam", [&](const std::string& fqn, Tensor& p, const Tensor& grad, int64_t t) {
    auto& [covered, product] = mu_product_.try_emplace(fqn, 0, 1.0).first->second;
    if (covered != t - 1) {  // after a load (or a fresh optimizer): rebuild Π μ_1..t-1 from the step count
      covered = t - 1, product = ProductThrough(t - 1);
    }
    const double mu = Mu(t), mu_next = Mu(t + 1);
    product *= mu;
    covered = t;
    const Tensor g = DecayedGrad(grad, p, lr_, o_.weight_decay, o_.decoupled_weight_decay);
    Tensor& exp_avg = State(fqn, "exp_avg", p);
    Tensor& exp_avg_sq = State(fqn, "exp_avg_sq", p);
    UpdateMoments(exp_avg, exp_avg_sq, g, o_.beta1, o_.beta2);
    const double bc2 = 1.0 - std::pow(o_.beta2, static_cast<double>(t));
    const Tensor denom = AddScalar(Sqrt(MulScalar(exp_avg_sq, 1.0 / bc2)), o_.eps);
    AddInPlace(p, MulScalar(Div(g, denom), -lr_ * (1.0 - mu) / (1.0 - product)));
    AddInPlace(p, MulScalar(Div(exp_avg, denom), -lr_ * mu_next / (1.0 - product * mu_next)));
  });
}

std::map<std::string, double> NAdam::Hyper() const {
  std::map<std::string, double> h = AdamHyper(lr_, o_.beta1, o_.beta2, o_.eps, o_.weight_decay);
  h["momentum_decay"] = o_.momentum_decay;
  h["decoupled_weight_decay"] = o_.decoupled_weight_decay ? 1.0 : 0.0;
  return h;
}

void NAdam::SetHyper(const std::map<std::string, double>& h) {
  SetAdamHyper(h, lr_, o_.beta1, o_.beta2, o_.eps, o_.weight_decay);
  if (auto it = h.find("momentum_decay"); it != h.end()) o_.momentum_decay = it->second;
  SetFlag(h, "decoupled_weight_decay", o_.decoupled_weight_decay);
}

RAdam::RAdam(nn::StateDict named_params, RAdamOptions options) : Optimizer(std::move(named_params)), o_(options) {
  CheckAdamOptions(o_.lr, o_.beta1, o_.beta2, o_.eps, o_.weight_decay);
  lr_ = o_.lr;
}

void RAdam::Step() {
  ForEachGradient("RAdam", [&](const std::string& fqn, Tensor& p, const Tensor& grad, int64_t t) {
    const double td = static_cast<double>(t);
    const Tensor g = DecayedGrad(grad, p, lr_, o_.weight_decay, o_.decoupled_weight_decay);
    Tensor& exp_avg = State(fqn, "exp_avg", p);
    Tensor& exp_avg_sq = State(fqn, "exp_avg_sq", p);
    UpdateMoments(exp_avg, exp_avg_sq, g, o_.beta1, o_.beta2);
    const double bc1 = 1.0 - std::pow(o_.beta1, td), bc2 = 1.0 - std::pow(o_.beta2, td);
    const double rho_inf = 2.0 / (1.0 - o_.beta2) - 1.0;
    const double rho_t = rho_inf - 2.0 * td * std::pow(o_.beta2, td) / bc2;
    if (rho_t > 5.0) {
      const double rect =
          std::sqrt((rho_t - 4.0) * (rho_t - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t));
      const Tensor adaptive = Div(exp_avg, AddScalar(Sqrt(exp_avg_sq), o_.eps));
      AddInPlace(p, MulScalar(adaptive, -lr_ / bc1 * rect * std::sqrt(bc2)));
    } else {
      AddInPlace(p, MulScalar(exp_avg, -lr_ / bc1));
    }
  });
}

std::map<std::string, double> RAdam::Hyper() const {
  std::map<std::string, double> h = AdamHyper(lr_, o_.beta1, o_.beta2, o_.eps, o_.weight_decay);
  h["decoupled_weight_decay"] = o_.decoupled_weight_decay ? 1.0 : 0.0;
  return h;
}

void RAdam::SetHyper(const std::map<std::string, double>& h) {
  SetAdamHyper(h, lr_, o_.beta1, o_.beta2, o_.eps, o_.weight_decay);
  SetFlag(h, "decoupled_weight_decay", o_.decoupled_weight_decay);
}

Adadelta::Adadelta(nn::StateDict named_params, AdadeltaOptions options)
    : Optimizer(std::move(named_params)), o_(options) {
  TESSEL_CHECK(o_.lr >= 0.0, "Invalid learning rate: ", o_.lr);
  TESSEL_CHECK(o_.rho >= 0.0 && o_.rho <= 1.0, "Invalid rho value: ", o_.rho);
  TESSEL_CHECK(o_.eps >= 0.0, "Invalid epsilon value: ", o_.eps);
  TESSEL_CHECK(o_.weight_decay >= 0.0, "Invalid weight_decay value: ", o_.weight_decay);
  lr_ = o_.lr;
}

void Adadelta::Step() {
  ForEachGradient("Adadelta", [&](const std::string& fqn, Tensor& p, const Tensor& grad, int64_t) {
    const Tensor g = DecayedGrad(grad, p, lr_, o_.weight_decay, false);
    Tensor& square_avg = State(fqn, "square_avg", p);
    Tensor& acc_delta = State(fqn, "acc_delta", p);
    CopyInPlace(square_avg, Add(MulScalar(square_avg, o_.rho), MulScalar(Mul(g, g), 1.0 - o_.rho)));
    const Tensor delta = Mul(Div(Sqrt(AddScalar(acc_delta, o_.eps)), Sqrt(AddScalar(square_avg, o_.eps))), g);
    CopyInPlace(acc_delta, Add(MulScalar(acc_delta, o_.rho), MulScalar(Mul(delta, delta), 1.0 - o_.rho)));
    AddInPlace(p, MulScalar(delta, -lr_));
  });
}

std::map<std::string, double> Adadelta::Hyper() const {
  return {{"lr", lr_}, {"rho", o_.rho}, {"eps", o_.eps}, {"weight_decay", o_.weight_decay}};
}

void Adadelta::SetHyper(const std::map<std::string, double>& h) {
  for (auto [name, field] : {std::pair{"lr", &lr_}, std::pair{"rho", &o_.rho}, std::pair{"eps", &o_.eps},
                             std::pair{"weight_decay", &o_.weight_decay}}) {
    if (auto it = h.find(name); it != h.end()) *field = it->second;
  }
}

}  // namespace tessel::optim
