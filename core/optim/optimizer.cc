// core/optim/optimizer.cc — Optimizer state handling, SGD, AdamW, RMSprop, Adagrad, ClipGradNorm, schedules.
#include "core/optim/optimizer.h"

#include <cmath>
#include <map>
#include <tuple>
#include <utility>

#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "core/memory/allocator.h"
#include "core/ops/elementwise.h"
#include "core/ops/optimizer.h"
#include "core/ops/reduction.h"
#include "core/ops/ternary.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"
#include "core/optim/adam_family.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::optim {

Optimizer::Optimizer(nn::StateDict named_params) : params_(std::move(named_params)) {
  for (const auto& [fqn, p] : params_) {
    // A frozen parameter (requires_grad false) is accepted and skipped while its grad is undefined, as in
    // torch: optimizers are routinely built over model.parameters() with part of the model frozen.
    TESSEL_CHECK(p.defined(), "optimizer: parameter '", fqn, "' is an undefined tensor");
  }
}

void Optimizer::CheckParamsAreCurrent(const char* name) const {
  std::string stale;
  int64_t n = 0;
  for (const auto& [fqn, p] : params_) {
    if (!p.impl()->replaced_parameter()) continue;
    if (n++ < 8) stale += Str(stale.empty() ? "" : ", ", "'", fqn, "'");
  }
  if (n > 8) stale += Str(" and ", n - 8, " more");
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, n == 0, name, ".step: ", n, " of its ", params_.size(),
                    " parameters are no longer the module's (", stale, "): fully_shard, parallelize_module or ",
                    "SetParameter replaced them after this optimizer was created, so stepping would train ",
                    "nothing; create the optimizer afterwards from model.NamedParameters()");
}

namespace {
void CheckLr(double lr) { TESSEL_CHECK(lr >= 0.0, "Invalid learning rate: ", lr); }
void CheckWeightDecay(double wd) { TESSEL_CHECK(wd >= 0.0, "Invalid weight_decay value: ", wd); }
}  // namespace

void Optimizer::ZeroGrad() {
  for (auto& [fqn, p] : params_) p.set_grad(Tensor());
}

Tensor& Optimizer::State(const std::string& fqn, const std::string& name, const Tensor& like) {
  Tensor& t = state_[fqn][name];
  if (!t.defined()) {
    memory::LedgerScope scope(memory::Ledger::kOptimState);
    NoGradGuard no_grad;
    t = ZerosLike(like);
  }
  return t;
}

OptimizerStateDict Optimizer::GetStateDict() const { return {state_, steps_, Hyper()}; }

const Tensor& Optimizer::Param(const std::string& fqn, const char* what) const {
  for (const auto& [name, p] : params_) {
    if (name == fqn) return p;
  }
  TESSEL_FAIL(ErrorCode::kInvalidArgument, "optimizer ", what, ": state for unknown parameter '", fqn, "'");
}

void Optimizer::CopyIntoState(const std::string& fqn, const std::map<std::string, Tensor>& s) {
  const Tensor& param = Param(fqn, "load_state_dict");
  NoGradGuard no_grad;
  for (const auto& [name, t] : s) {
    TESSEL_CHECK(t.sizes() == param.sizes(), "optimizer load_state_dict: state '", name, "' of '", fqn,
                 "' has shape ", ShapeStr(t.sizes()), " but the parameter has shape ", ShapeStr(param.sizes()));
    Tensor& live = State(fqn, name, param);
    if (!live.is_same(t)) CopyInPlace(live, t);  // (a state dict taken from this optimizer aliases its buffers)
  }
}

void Optimizer::LoadStateDict(const OptimizerStateDict& sd) {
  for (const auto& [fqn, s] : sd.state) Param(fqn, "load_state_dict");  // every name known before any copy
  for (const auto& [fqn, s] : sd.state) CopyIntoState(fqn, s);
  steps_ = sd.steps;
  SetHyper(sd.hyper);
}

void Optimizer::DropStateExcept(const std::set<std::string>& keep) {
  std::erase_if(state_, [&](const auto& entry) { return !keep.count(entry.first); });
}

void Optimizer::LoadParamState(const std::string& fqn, const std::map<std::string, Tensor>& entries, int64_t step) {
  const Tensor& param = Param(fqn, "state write");
  for (const auto& [name, t] : entries) {  // every shape checked before the old buffers go
    TESSEL_CHECK(t.defined() && t.sizes() == param.sizes(), "optimizer state write: state '", name, "' of '", fqn,
                 "' has shape ", t.defined() ? ShapeStr(t.sizes()) : "(undefined)", " but the parameter has shape ",
                 ShapeStr(param.sizes()));
  }
  // Buffers the entry names take its values in place (the others keep their identity, as the untouched entries of
  // torch's dict do); buffers it no longer names start over at the next step.
  if (auto live = state_.find(fqn); live != state_.end()) {
    std::erase_if(live->second, [&](const auto& buffer) { return !entries.count(buffer.first); });
  }
  CopyIntoState(fqn, entries);
  if (entries.empty()) state_.erase(fqn);
  steps_[fqn] = step;
}

std::pair<std::map<std::string, Tensor>, int64_t> Optimizer::ParamState(const std::string& fqn) const {
  Param(fqn, "state");
  const auto s = state_.find(fqn);
  const auto t = steps_.find(fqn);
  return {s == state_.end() ? std::map<std::string, Tensor>() : s->second, t == steps_.end() ? 0 : t->second};
}

SGD::SGD(nn::StateDict named_params, SGDOptions options) : Optimizer(std::move(named_params)), o_(options) {
  // torch.optim.SGD's checks and wording (`not 0.0 <= x` also rejects nan).
  CheckLr(o_.lr);
  TESSEL_CHECK(o_.momentum >= 0.0, "Invalid momentum value: ", o_.momentum);
  CheckWeightDecay(o_.weight_decay);
  TESSEL_CHECK(!o_.nesterov || (o_.momentum > 0 && o_.dampening == 0),
               "Nesterov momentum requires a momentum and zero dampening");
  lr_ = o_.lr;
}

void SGD::Step() {
  CheckParamsAreCurrent("SGD");
  CheckLr(lr_);
  NoGradGuard no_grad;
  for (auto& [fqn, p] : params_) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const bool first = steps_[fqn] == 0;
    Tensor buf = o_.momentum != 0 ? State(fqn, "momentum_buffer", p) : Tensor();
    SgdStepInPlace(p, g, buf, lr_, o_.momentum, o_.dampening, o_.weight_decay, o_.nesterov, first);
    ++steps_[fqn];  // after the update: a step that threw leaves the buffer to be initialized again
  }
}

std::vector<std::string> SGD::StateNames() const {
  return o_.momentum != 0 ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{};
}

std::map<std::string, double> SGD::Hyper() const {
  return {{"lr", lr_}, {"momentum", o_.momentum}, {"dampening", o_.dampening}, {"weight_decay", o_.weight_decay},
          {"nesterov", o_.nesterov ? 1.0 : 0.0}};
}

void SGD::SetHyper(const std::map<std::string, double>& h) {
  if (h.count("lr")) lr_ = h.at("lr");
  if (h.count("momentum")) o_.momentum = h.at("momentum");
  if (h.count("dampening")) o_.dampening = h.at("dampening");
  if (h.count("weight_decay")) o_.weight_decay = h.at("weight_decay");
  if (h.count("nesterov")) o_.nesterov = h.at("nesterov") != 0;
}

AdamW::AdamW(nn::StateDict named_params, AdamWOptions options) : Optimizer(std::move(named_params)), o_(options) {
  // torch.optim.AdamW's checks and wording (`not 0.0 <= x` also rejects nan).
  CheckLr(o_.lr);
  TESSEL_CHECK(o_.eps >= 0.0, "Invalid epsilon value: ", o_.eps);
  TESSEL_CHECK(o_.beta1 >= 0.0 && o_.beta1 < 1.0, "Invalid beta parameter at index 0: ", o_.beta1);
  TESSEL_CHECK(o_.beta2 >= 0.0 && o_.beta2 < 1.0, "Invalid beta parameter at index 1: ", o_.beta2);
  CheckWeightDecay(o_.weight_decay);
  lr_ = o_.lr;
}

std::vector<std::string> AdamW::StateNames() const {
  std::vector<std::string> names{"exp_avg", "exp_avg_sq"};
  if (o_.amsgrad) names.push_back("max_exp_avg_sq");
  return names;
}

// torch's Adam / AdamW step with amsgrad: p ← p·(1 − lr·wd); m, v as without it; v_max ← max(v_max, v);
// p ← p − lr/(1 − β1ᵗ) · m / (√v_max / √(1 − β2ᵗ) + ε).
void AdamW::StepAmsgrad() {
  ForEachGradient("AdamW", [&](const std::string& fqn, const Tensor& p, const Tensor& g, int64_t t) {
    Tensor& m = State(fqn, "exp_avg", p);
    Tensor& v = State(fqn, "exp_avg_sq", p);
    Tensor& v_max = State(fqn, "max_exp_avg_sq", p);
    internal::UpdateMoments(m, v, internal::DecayedGrad(g, p, lr_, o_.weight_decay, /*decoupled=*/true), o_.beta1,
                            o_.beta2);
    CopyInPlace(v_max, Where(Gt(v, v_max), v, v_max));
    const double bias1 = 1.0 - std::pow(o_.beta1, static_cast<double>(t));
    const double bias2 = 1.0 - std::pow(o_.beta2, static_cast<double>(t));
    const Tensor denom = AddScalar(MulScalar(Sqrt(v_max), 1.0 / std::sqrt(bias2)), o_.eps);
    AddInPlace(p, Div(m, denom), -lr_ / bias1);
  });
}

void AdamW::Step() {
  if (o_.amsgrad) return StepAmsgrad();
  CheckParamsAreCurrent("AdamW");
  CheckLr(lr_);
  NoGradGuard no_grad;
  const AdamWHyper hyper{.lr = lr_, .beta1 = o_.beta1, .beta2 = o_.beta2, .eps = o_.eps,
                         .weight_decay = o_.weight_decay};
  // One multi-tensor call per device and foreach group (on the CPU one parallel pass over every
  // parameter): plain tensors group by device; DTensors by device and mesh (their sharding rule rules
  // each parameter's update alone and redistributes its gradient to the parameter's layout).
  struct Lists {
    TensorList ps, gs, ms, vs;
    std::vector<int64_t> steps;
    std::vector<int64_t*> counters;  // steps_ entries, advanced once the group's update has run
  };
  std::map<std::tuple<int, int, std::string>, Lists> groups;  // (device type, index, foreach key)
  for (auto& [fqn, p] : params_) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    int64_t& count = steps_[fqn];
    const int64_t step = count + 1;
    Tensor& m = State(fqn, "exp_avg", p);
    Tensor& v = State(fqn, "exp_avg_sq", p);
    Lists& l = groups[{static_cast<int>(p.device().type), p.device().index, p.impl()->ForeachGroupKey()}];
    l.ps.push_back(p);
    l.gs.push_back(g);
    l.ms.push_back(m);
    l.vs.push_back(v);
    l.steps.push_back(step);
    l.counters.push_back(&count);
  }
  for (const auto& [key, l] : groups) {
    AdamWStepForeachInPlace(l.ps, l.gs, l.ms, l.vs, l.steps, hyper);  // writes nothing if it throws
    for (int64_t* c : l.counters) ++*c;
  }
}

std::map<std::string, double> AdamW::Hyper() const {
  return {{"lr", lr_},         {"beta1", o_.beta1},
          {"beta2", o_.beta2}, {"eps", o_.eps},
          {"weight_decay", o_.weight_decay}, {"amsgrad", o_.amsgrad ? 1.0 : 0.0}};
}

void AdamW::SetHyper(const std::map<std::string, double>& h) {
  if (h.count("lr")) lr_ = h.at("lr");
  if (h.count("beta1")) o_.beta1 = h.at("beta1");
  if (h.count("beta2")) o_.beta2 = h.at("beta2");
  if (h.count("eps")) o_.eps = h.at("eps");
  if (h.count("weight_decay")) o_.weight_decay = h.at("weight_decay");
  if (h.count("amsgrad")) o_.amsgrad = h.at("amsgrad") != 0;
}

namespace {
// g + weight_decay·p (torch's L2 form), or g itself.
Tensor WithL2(const Tensor& g, const Tensor& p, double weight_decay) {
  return weight_decay != 0 ? Add(g, MulScalar(p, weight_decay)) : g;
}
}  // namespace

RMSprop::RMSprop(nn::StateDict named_params, RMSpropOptions options)
    : Optimizer(std::move(named_params)), o_(options) {
  // torch.optim.RMSprop's checks and wording.
  CheckLr(o_.lr);
  TESSEL_CHECK(o_.eps >= 0.0, "Invalid epsilon value: ", o_.eps);
  TESSEL_CHECK(o_.momentum >= 0.0, "Invalid momentum value: ", o_.momentum);
  CheckWeightDecay(o_.weight_decay);
  TESSEL_CHECK(o_.alpha >= 0.0, "Invalid alpha value: ", o_.alpha);
  lr_ = o_.lr;
}

std::vector<std::string> RMSprop::StateNames() const {
  std::vector<std::string> names{"square_avg"};
  if (o_.momentum > 0) names.push_back("momentum_buffer");
  if (o_.centered) names.push_back("grad_avg");
  return names;
}

void RMSprop::Step() {
  CheckParamsAreCurrent("RMSprop");
  CheckLr(lr_);
  NoGradGuard no_grad;
  for (auto& [fqn, p] : params_) {
    const Tensor grad = p.grad();
    if (!grad.defined()) continue;
    const Tensor g = WithL2(grad, p, o_.weight_decay);
    Tensor& square_avg = State(fqn, "square_avg", p);
    CopyInPlace(square_avg, Add(MulScalar(square_avg, o_.alpha), MulScalar(Mul(g, g), 1.0 - o_.alpha)));
    Tensor var = square_avg;
    if (o_.centered) {
      Tensor& grad_avg = State(fqn, "grad_avg", p);
      CopyInPlace(grad_avg, Add(MulScalar(grad_avg, o_.alpha), MulScalar(g, 1.0 - o_.alpha)));
      var = Sub(square_avg, Mul(grad_avg, grad_avg));
    }
    const Tensor step = Div(g, AddScalar(Sqrt(var), o_.eps));
    if (o_.momentum > 0) {
      Tensor& buf = State(fqn, "momentum_buffer", p);
      CopyInPlace(buf, Add(MulScalar(buf, o_.momentum), step));
      AddInPlace(p, MulScalar(buf, -lr_));
    } else {
      AddInPlace(p, MulScalar(step, -lr_));
    }
    ++steps_[fqn];
  }
}

std::map<std::string, double> RMSprop::Hyper() const {
  return {{"lr", lr_}, {"alpha", o_.alpha}, {"eps", o_.eps}, {"weight_decay", o_.weight_decay},
          {"momentum", o_.momentum}, {"centered", o_.centered ? 1.0 : 0.0}};
}

void RMSprop::SetHyper(const std::map<std::string, double>& h) {
  if (h.count("lr")) lr_ = h.at("lr");
  if (h.count("alpha")) o_.alpha = h.at("alpha");
  if (h.count("eps")) o_.eps = h.at("eps");
  if (h.count("weight_decay")) o_.weight_decay = h.at("weight_decay");
  if (h.count("momentum")) o_.momentum = h.at("momentum");
  if (h.count("centered")) o_.centered = h.at("centered") != 0;
}

Adagrad::Adagrad(nn::StateDict named_params, AdagradOptions options)
    : Optimizer(std::move(named_params)), o_(options) {
  // torch.optim.Adagrad's checks and wording.
  CheckLr(o_.lr);
  TESSEL_CHECK(o_.lr_decay >= 0.0, "Invalid lr_decay value: ", o_.lr_decay);
  CheckWeightDecay(o_.weight_decay);
  TESSEL_CHECK(o_.initial_accumulator_value >= 0.0, "Invalid initial_accumulator_value value: ",
               o_.initial_accumulator_value);
  TESSEL_CHECK(o_.eps >= 0.0, "Invalid epsilon value: ", o_.eps);
  lr_ = o_.lr;
}

void Adagrad::Step() {
  CheckParamsAreCurrent("Adagrad");
  CheckLr(lr_);
  NoGradGuard no_grad;
  for (auto& [fqn, p] : params_) {
    const Tensor grad = p.grad();
    if (!grad.defined()) continue;
    const bool fresh = state_[fqn].count("sum") == 0;
    Tensor& sum = State(fqn, "sum", p);
    if (fresh && o_.initial_accumulator_value != 0) CopyInPlace(sum, AddScalar(sum, o_.initial_accumulator_value));
    const int64_t step = steps_[fqn] + 1;
    const Tensor g = WithL2(grad, p, o_.weight_decay);
    const double clr = lr_ / (1.0 + static_cast<double>(step - 1) * o_.lr_decay);
    AddInPlace(sum, Mul(g, g));
    AddInPlace(p, MulScalar(Div(g, AddScalar(Sqrt(sum), o_.eps)), -clr));
    steps_[fqn] = step;
  }
}

std::map<std::string, double> Adagrad::Hyper() const {
  return {{"lr", lr_}, {"lr_decay", o_.lr_decay}, {"weight_decay", o_.weight_decay},
          {"initial_accumulator_value", o_.initial_accumulator_value}, {"eps", o_.eps}};
}

void Adagrad::SetHyper(const std::map<std::string, double>& h) {
  if (h.count("lr")) lr_ = h.at("lr");
  if (h.count("lr_decay")) o_.lr_decay = h.at("lr_decay");
  if (h.count("weight_decay")) o_.weight_decay = h.at("weight_decay");
  if (h.count("initial_accumulator_value")) o_.initial_accumulator_value = h.at("initial_accumulator_value");
  if (h.count("eps")) o_.eps = h.at("eps");
}

double ClipGradNorm(const TensorList& params, double max_norm) {
  // Any max_norm, as torch's: 0 zeroes the gradients (a "freeze" idiom), a negative one flips their sign.
  NoGradGuard no_grad;
  double total_sq = 0;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    // Sum of squares in float32 at least (a DTensor grad reduces across ranks here): in float16 the squares
    // of 4096 gradients of 300 overflowed to inf and every gradient was zeroed (torch: norm 19200), and
    // bf16 rounded the sum (19211.9).
    const Tensor w = g.dtype() == DType::kFloat16 || g.dtype() == DType::kBFloat16 ? Cast(g, DType::kFloat32) : g;
    total_sq += Sum(Mul(w, w)).item<double>();
  }
  const double norm = std::sqrt(total_sq);
  // torch's clamp(coef, max=1): a NaN norm makes every gradient NaN instead of leaving the finite ones to step.
  const double coef = max_norm / (norm + 1e-6);
  if (std::isnan(coef) || coef < 1.0) {
    for (const Tensor& p : params) {
      if (p.grad().defined()) MulScalarInPlace(p.grad(), coef);
    }
  }
  return norm;
}

double WarmupCosineSchedule::LrAt(int64_t step) const {
  if (warmup_steps > 0 && step < warmup_steps) return max_lr * static_cast<double>(step + 1) / warmup_steps;
  if (step >= total_steps) return min_lr;
  const double span = std::max<int64_t>(1, total_steps - warmup_steps);
  const double progress = static_cast<double>(step - warmup_steps) / span;
  return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace tessel::optim
