// core/ops/optimizer.cc — fused AdamW and SGD update kernels ("adamw_step_", "sgd_step_") and the
// multi-tensor AdamW ("adamw_step_foreach_": every parameter of a step in one parallel pass, like
// PyTorch's fused/foreach AdamW; on DTensors, one call per mesh, each group ruled alone with its
// gradients' all_reduces coalesced: dtensor/rules/optimizer.cc).
//
// NOTE: all are registered as in-place pointwise ops so the dispatcher can run them on DTensor
// parameters (each rank updates its own shard; dtensor/rules/optimizer.cc requires equal placements).
// is_inplace names input 0 only: the foreach op writes every param and state, so
// AdamWStepForeachInPlace checks each parameter itself.
#include "core/ops/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/autograd/call.h"
#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/ops/elementwise.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

void CheckSameLayout(const char* op, std::span<const Tensor> in) {
  for (size_t i = 1; i < in.size(); ++i) {
    TESSEL_CHECK(in[i].sizes() == in[0].sizes(), op, ": tensor ", i, " has shape ", ShapeStr(in[i].sizes()),
                 " but the parameter has shape ", ShapeStr(in[0].sizes()));
    TESSEL_CHECK(in[i].is_contiguous(), op, ": tensor ", i, " must be contiguous");
  }
  TESSEL_CHECK(in[0].is_contiguous(), op, ": parameter must be contiguous");
}

// Per-tensor AdamW coefficients in the compute type (bias corrections folded in).
struct AdamWCoeffs {
  double b1, b2, eps, decay, step_size, bc2_sqrt;
};

AdamWCoeffs CoeffsFor(const Attrs& a, int64_t step) {
  const double lr = a.GetDouble("lr"), b1 = a.GetDouble("beta1"), b2 = a.GetDouble("beta2");
  TESSEL_CHECK(step >= 1, "adamw_step_: step must be >= 1, got ", step);
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(step));
  return {b1, b2, a.GetDouble("eps"), 1.0 - lr * a.GetDouble("weight_decay"), lr / bc1, std::sqrt(bc2)};
}

// Checks one (param, grad, exp_avg, exp_avg_sq) group.
void CheckAdamWGroup(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v) {
  const Tensor group[] = {p, g, m, v};
  CheckSameLayout("adamw_step_", group);
  TESSEL_CHECK(m.dtype() == p.dtype() && v.dtype() == p.dtype(), "adamw_step_: state dtype ", m.dtype(),
               " must match the parameter dtype ", p.dtype());
  TESSEL_CHECK(g.dtype() == p.dtype(), "adamw_step_: gradient dtype ", g.dtype(), " must match the parameter dtype ",
               p.dtype(), " (shape ", ShapeStr(p.sizes()), ")");
}

void BumpWritten(const Tensor& p, const Tensor& m, const Tensor& v) {
  for (const Tensor& t : {p, m, v}) t.impl()->storage().BumpVersion();
}

// Elements [s, e) of one group: the whole update in one pass (read p, g, m, v; write p, m, v).
void AdamWRange(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamWCoeffs& k, int64_t s,
                int64_t e) {
  TESSEL_DISPATCH_FLOATING_TYPES(p.dtype(), "adamw_step_", [&] {
    using T = scalar_t;
    using C = ComputeT<T>;
    T* pp = static_cast<T*>(p.raw_data());
    const T* pg = static_cast<const T*>(g.raw_data());
    T* pm = static_cast<T*>(m.raw_data());
    T* pv = static_cast<T*>(v.raw_data());
    const C cb2 = static_cast<C>(k.b2), ceps = static_cast<C>(k.eps);
    const C decay = static_cast<C>(k.decay), ss = static_cast<C>(k.step_size), bcs = static_cast<C>(k.bc2_sqrt);
    // torch's weights: 1 - beta in double, then rounded (1 - 0.999f in float32 is 6.6e-6 relative off)
    const C w1 = static_cast<C>(1.0 - k.b1), w2 = static_cast<C>(1.0 - k.b2), omw1 = 1 - w1;
    // exp_avg.lerp_(grad, 1 - beta1) with torch's two-sided lerp; the side is chosen once per call, so
    // the loop stays one vectorizable body
    auto update = [&](auto low_weight) {
      for (int64_t i = s; i < e; ++i) {
        const C grad = ToCompute(pg[i]), m0 = ToCompute(pm[i]);
        const C mi = decltype(low_weight)::value ? m0 + w1 * (grad - m0) : grad - (grad - m0) * omw1;
        const C vi = cb2 * ToCompute(pv[i]) + w2 * grad * grad;
        pm[i] = FromCompute<T>(mi);
        pv[i] = FromCompute<T>(vi);
        const C denom = std::sqrt(vi) / bcs + ceps;
        pp[i] = FromCompute<T>(ToCompute(pp[i]) * decay - ss * mi / denom);
      }
    };
    if constexpr (sizeof(T) == 2) {
      // float16 / bfloat16: torch's single-tensor AdamW (its CPU default) op by op, each result rounded to T, as
      // its kernels compute them: param.mul_(1 - lr·wd); exp_avg.lerp_(grad, 1 - β1) (a fused multiply-add);
      // exp_avg_sq.mul_(β2).addcmul_(grad, grad, 1 - β2) (fused: (w2·g)·g + v); denom = sqrt(v) / √bc2 + eps
      // (three roundings: float16's eps of 1e-8 is 0, so a zero exp_avg_sq divides by zero, as torch's does);
      // param.addcdiv_(exp_avg, denom, -step_size). Computed once in float and rounded at the end, a
      // float16 / bfloat16 model drifted from torch's by an ulp a step (the fp32 path keeps its fused form).
      const auto round = RoundedTo<T>;
      const bool low = 1.0 - k.b1 < 0.5;
      for (int64_t i = s; i < e; ++i) {
        const C grad = ToCompute(pg[i]), m0 = ToCompute(pm[i]);
        const C p = k.decay != 1.0 ? round(ToCompute(pp[i]) * decay) : ToCompute(pp[i]);
        const C mi = round(low ? std::fma(w1, grad - m0, m0) : std::fma(-(grad - m0), omw1, grad));
        const C vi = round(std::fma(w2 * grad, grad, round(ToCompute(pv[i]) * cb2)));
        const C denom = round(round(round(std::sqrt(vi)) / bcs) + ceps);
        pm[i] = FromCompute<T>(mi);
        pv[i] = FromCompute<T>(vi);
        pp[i] = FromCompute<T>(p + (-ss * mi) / denom);
      }
      return;
    }
    if (1.0 - k.b1 < 0.5) {
      update(std::true_type{});
    } else {
      update(std::false_type{});
    }
  });
}

constexpr int64_t kAdamWGrain = 1 << 14;

TensorList AdamWKernel(std::span<const Tensor> in, const Attrs& a) {
  CheckAdamWGroup(in[0], in[1], in[2], in[3]);
  const AdamWCoeffs k = CoeffsFor(a, a.GetInt("step"));
  BumpWritten(in[0], in[2], in[3]);
  ParallelFor(0, in[0].numel(), kAdamWGrain,
              [&](int64_t s, int64_t e) { AdamWRange(in[0], in[1], in[2], in[3], k, s, e); });
  return {in[0]};
}

// The written tensors (params, exp_avgs, exp_avg_sqs) must not overlap: one pass updates every group at
// once, so a parameter listed twice (or two views of one buffer that overlap) would be written by two
// threads at the same time. Each is contiguous, so its bytes are one range of its storage.
void CheckNoOverlappingWrites(std::span<const Tensor> in, size_t n) {
  struct Range {
    uintptr_t storage;
    int64_t begin, end;
    size_t group;
  };
  std::vector<Range> ranges;
  for (size_t i = 0; i < n; ++i) {
    for (size_t list : {size_t{0}, size_t{2}, size_t{3}}) {
      const Tensor& t = in[list * n + i];
      if (t.numel() == 0) continue;
      const int64_t esz = ElementSize(t.dtype());
      const auto storage = reinterpret_cast<uintptr_t>(t.impl()->storage().data());
      ranges.push_back({storage, t.storage_offset() * esz, (t.storage_offset() + t.numel()) * esz, i});
    }
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return std::tie(a.storage, a.begin) < std::tie(b.storage, b.begin);
  });
  for (size_t k = 1; k < ranges.size(); ++k) {
    const Range& a = ranges[k - 1];
    const Range& b = ranges[k];
    TESSEL_CHECK(a.storage != b.storage || b.begin >= a.end, "adamw_step_foreach_: groups ", std::min(a.group, b.group),
                 " and ", std::max(a.group, b.group), " write overlapping memory (a parameter, or its optimizer ",
                 "state, listed twice or aliased)");
  }
}

// inputs: params[0, n), grads[n, 2n), exp_avgs[2n, 3n), exp_avg_sqs[3n, 4n); attr "steps" (one per
// group). One ParallelFor over the concatenated elements, so small parameters share the threads too.
TensorList AdamWForeachKernel(std::span<const Tensor> in, const Attrs& a) {
  const std::vector<int64_t>& steps = a.GetInts("steps");
  const size_t n = steps.size();
  TESSEL_CHECK(in.size() == 4 * n, "adamw_step_foreach_: expected 4 x ", n, " tensors (params, grads, exp_avgs, ",
               "exp_avg_sqs), got ", in.size());
  std::vector<AdamWCoeffs> coeffs;
  std::vector<int64_t> starts{0};  // starts[i]: first element of group i in the concatenation
  for (size_t i = 0; i < n; ++i) {  // every check before any write: a bad group updates nothing
    CheckAdamWGroup(in[i], in[n + i], in[2 * n + i], in[3 * n + i]);
    coeffs.push_back(CoeffsFor(a, steps[i]));
    starts.push_back(starts.back() + in[i].numel());
  }
  CheckNoOverlappingWrites(in, n);
  for (size_t i = 0; i < n; ++i) BumpWritten(in[i], in[2 * n + i], in[3 * n + i]);
  ParallelFor(0, starts.back(), kAdamWGrain, [&](int64_t s, int64_t e) {
    size_t i = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), s) - starts.begin()) - 1;
    for (; i < n && starts[i] < e; ++i) {
      const int64_t b = std::max(s, starts[i]) - starts[i], f = std::min(e, starts[i + 1]) - starts[i];
      if (b < f) AdamWRange(in[i], in[n + i], in[2 * n + i], in[3 * n + i], coeffs[i], b, f);
    }
  });
  return TensorList(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n));
}

TensorList SgdKernel(std::span<const Tensor> in, const Attrs& a) {
  const bool has_buf = in[2].defined();
  CheckSameLayout("sgd_step_", has_buf ? in : in.first(2));
  const Tensor& p = in[0];
  const Tensor& g = in[1];
  // The kernel reads every tensor as the parameter's dtype: another dtype stepped with garbage, or read
  // past the end of a narrower buffer (a float16 grad of a float32 parameter: SIGSEGV).
  for (size_t i = 1; i < (has_buf ? 3u : 2u); ++i) {
    TESSEL_CHECK(in[i].dtype() == p.dtype(), "sgd_step_: ", i == 1 ? "gradient" : "momentum buffer", " dtype ",
                 DTypeName(in[i].dtype()), " differs from the parameter's ", DTypeName(p.dtype()), " (shape ",
                 ShapeStr(p.sizes()), ")");
  }
  const double lr = a.GetDouble("lr"), mom = a.GetDouble("momentum"), damp = a.GetDouble("dampening");
  const double wd = a.GetDouble("weight_decay");
  const bool nesterov = a.GetBool("nesterov");
  const bool first = a.GetBool("first_step");
  p.impl()->storage().BumpVersion();
  TESSEL_DISPATCH_FLOATING_TYPES(p.dtype(), "sgd_step_", [&] {
    using T = scalar_t;
    using C = ComputeT<T>;
    T* pp = static_cast<T*>(p.raw_data());
    const T* pg = static_cast<const T*>(g.raw_data());
    T* pb = has_buf ? static_cast<T*>(in[2].raw_data()) : nullptr;
    const auto round = RoundedTo<T>;  // to T and back, as a stored result
    // torch's vector kernels take an add's alpha in a 16-bit tensor's own dtype first, then the compute type; a
    // multiplier (buf.mul_(momentum)) in the compute type directly
    const auto alpha = [&](double v) { return sizeof(T) == 2 ? round(static_cast<C>(v)) : static_cast<C>(v); };
    const C cwd = alpha(wd), cmom = alpha(mom), cdamp = alpha(1 - damp), clr = alpha(-lr);
    const C cmul = static_cast<C>(mom);
    // torch's single-tensor SGD (its CPU default) one op at a time, each result rounded to T: d =
    // grad.add(param, alpha=wd) (wd != 0 only); buf = d on the first step, else buf.mul_(momentum).add_(d,
    // alpha=1-dampening); d = d.add(buf, alpha=momentum) with nesterov, else buf; param.add_(d, alpha=-lr). Each
    // add with alpha is one fused multiply-add, as torch's CPU kernels compute it (cuda/sgd_math.h: the same).
    ParallelFor(0, p.numel(), 1 << 14, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) {
        C d = ToCompute(pg[i]);
        if (wd != 0) d = round(std::fma(cwd, ToCompute(pp[i]), d));
        if (pb != nullptr && mom != 0) {
          const C buf = first ? d : round(std::fma(cdamp, d, round(cmul * ToCompute(pb[i]))));
          pb[i] = FromCompute<T>(buf);
          d = nesterov ? round(std::fma(cmom, buf, d)) : buf;
        }
        pp[i] = FromCompute<T>(std::fma(clr, d, ToCompute(pp[i])));
      }
    });
  });
  return {p};
}

const OpDef& kAdamW = RegisterOp({.name = "adamw_step_", .cpu = AdamWKernel, .is_inplace = true});
const OpDef& kSgd = RegisterOp({.name = "sgd_step_", .cpu = SgdKernel, .is_inplace = true});
const OpDef& kAdamWForeach =
    RegisterOp({.name = "adamw_step_foreach_", .cpu = AdamWForeachKernel, .is_inplace = true});

// The hyperparameters every AdamW op reads (the step or steps are set by the caller).
Attrs AdamWAttrs(const AdamWHyper& h) {
  return Attrs()
      .Set("lr", h.lr)
      .Set("beta1", h.beta1)
      .Set("beta2", h.beta2)
      .Set("eps", h.eps)
      .Set("weight_decay", h.weight_decay);
}

// The kernels update dense contiguous memory. Tensors that are strided views (torch allows
// `w.data = w.data.t()`, as loralib does) are updated through contiguous copies written back after.
class Staged {
 public:
  explicit Staged(std::span<const Tensor> tensors) : original_(tensors.begin(), tensors.end()) {
    for (const Tensor& t : original_) work_.push_back(t.defined() && !t.is_contiguous() ? Contiguous(t) : t);
  }
  const TensorList& work() const { return work_; }
  void WriteBack() const {
    for (size_t i = 0; i < work_.size(); ++i) {
      if (work_[i].defined() && work_[i].impl() != original_[i].impl()) CopyInPlace(original_[i], work_[i]);
    }
  }

 private:
  TensorList original_, work_;
};

}  // namespace

void AdamWStepInPlace(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                      const AdamWHyper& h) {
  const Tensor group[] = {param, grad, exp_avg, exp_avg_sq};
  const Staged staged(group);
  autograd::CallOp(kAdamW, staged.work(), AdamWAttrs(h).Set("step", h.step));
  staged.WriteBack();
}

void AdamWStepForeachInPlace(std::span<const Tensor> params, std::span<const Tensor> grads,
                             std::span<const Tensor> exp_avgs, std::span<const Tensor> exp_avg_sqs,
                             std::span<const int64_t> steps, const AdamWHyper& h) {
  const size_t n = params.size();
  TESSEL_CHECK(grads.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n && steps.size() == n,
               "adamw_step_foreach_: ", n, " params but ", grads.size(), " grads, ", exp_avgs.size(), " exp_avgs, ",
               exp_avg_sqs.size(), " exp_avg_sqs and ", steps.size(), " steps");
  if (n == 0) return;
  if (GradModeEnabled()) {  // CallOp checks input 0 only (is_inplace); every parameter is written
    for (const Tensor& p : params) {
      TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !p.requires_grad(), "adamw_step_foreach_: in-place update of ",
                        "a parameter of shape ", ShapeStr(p.sizes()), " that requires grad; run under NoGradGuard");
    }
  }
  TensorList in;
  for (std::span<const Tensor> list : {params, grads, exp_avgs, exp_avg_sqs}) in.insert(in.end(), list.begin(), list.end());
  const Staged staged(in);
  autograd::CallOp(kAdamWForeach, staged.work(),
                   AdamWAttrs(h).Set("steps", std::vector<int64_t>(steps.begin(), steps.end())));
  staged.WriteBack();
}

namespace {

DType Wider(DType a, DType b) {
  if (a == b) return a;
  return a == DType::kFloat64 || b == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
}

// dst += alpha · src as torch's add_ with operands of other dtypes: computed in the wider dtype (float32 for
// bfloat16 with float16), rounded once to dst's; a 16-bit computation takes alpha in its dtype first, as torch's
// vector kernels (the fused kernel's `alpha` in SgdKernel).
void AddWidened(const Tensor& dst, const Tensor& src, double alpha) {
  const DType w = Wider(dst.dtype(), src.dtype());
  if (ElementSize(w) == 2) alpha = Full({}, alpha, w).ItemDouble();
  if (w == dst.dtype()) return AddInPlace(dst, Cast(src, w), alpha);  // widening casts are exact
  const Tensor wide = Cast(dst, w);
  AddInPlace(wide, Cast(src, w), alpha);
  CopyInPlace(dst, wide);
}

// torch's single-tensor SGD step (its CPU default) for a parameter whose gradient or momentum buffer has another
// floating dtype: a model cast with .double() after its first step keeps its float32 momentum buffers, and torch
// steps it (buf.mul_(m).add_(d, alpha=1-dampening), param.add_(d, alpha=-lr), each add in the wider dtype rounded
// to its destination's). The fused kernel reads every operand as the parameter's dtype, so these take separate
// passes: d = grad + wd·param (the wider of the two dtypes), then the buffer, then the parameter.
void SgdStepMixedDTypes(const Tensor& param, const Tensor& grad, const Tensor& buf, double lr, double momentum,
                        double dampening, double weight_decay, bool nesterov, bool initialize_buffer) {
  const DType dd = Wider(grad.dtype(), param.dtype());
  Tensor d = dd == grad.dtype() ? Clone(grad) : Cast(grad, dd);  // (a copy either way: d is written below)
  if (weight_decay != 0) AddWidened(d, param, weight_decay);
  if (buf.defined() && momentum != 0) {
    if (initialize_buffer) {
      CopyInPlace(buf, d);
    } else {
      MulScalarInPlace(buf, momentum);
      AddWidened(buf, d, 1 - dampening);
    }
    if (nesterov) {
      d = Cast(d, Wider(d.dtype(), buf.dtype()));
      AddWidened(d, buf, momentum);
    } else {
      d = buf;
    }
  }
  AddWidened(param, d, -lr);
}

}  // namespace

void SgdStepInPlace(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, double lr,
                    double momentum, double dampening, double weight_decay, bool nesterov,
                    bool initialize_buffer) {
  if (IsFloating(param.dtype()) && IsFloating(grad.dtype()) &&
      (grad.dtype() != param.dtype() || (momentum_buffer.defined() && IsFloating(momentum_buffer.dtype()) &&
                                         momentum_buffer.dtype() != param.dtype()))) {
    return SgdStepMixedDTypes(param, grad, momentum_buffer, lr, momentum, dampening, weight_decay, nesterov,
                              initialize_buffer);
  }
  const Tensor group[] = {param, grad, momentum_buffer};
  const Staged staged(group);
  autograd::CallOp(kSgd, staged.work(),
                   Attrs()
                       .Set("lr", lr)
                       .Set("momentum", momentum)
                       .Set("dampening", dampening)
                       .Set("weight_decay", weight_decay)
                       .Set("nesterov", nesterov)
                       .Set("first_step", initialize_buffer));
  staged.WriteBack();
}

}  // namespace tessel
