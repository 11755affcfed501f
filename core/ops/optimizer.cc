// core/ops/optimizer.cc — fused AdamW and SGD update kernels ("adamw_step_", "sgd_step_").
//
// NOTE: both are registered as in-place pointwise ops so the dispatcher can run them on DTensor
// parameters (each rank updates its own shard; dtensor/rules/optimizer.cc requires equal placements).
#include "core/ops/optimizer.h"

#include <cmath>

#include "core/autograd/call.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
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

TensorList AdamWKernel(std::span<const Tensor> in, const Attrs& a) {
  CheckSameLayout("adamw_step_", in);
  const Tensor& p = in[0];
  const Tensor& g = in[1];
  const Tensor& m = in[2];
  const Tensor& v = in[3];
  TESSEL_CHECK(m.dtype() == DType::kFloat32 || m.dtype() == DType::kFloat64 || m.dtype() == p.dtype(),
               "adamw_step_: optimizer state dtype ", m.dtype());
  const double lr = a.GetDouble("lr"), b1 = a.GetDouble("beta1"), b2 = a.GetDouble("beta2");
  const double eps = a.GetDouble("eps"), wd = a.GetDouble("weight_decay");
  const int64_t step = a.GetInt("step");
  TESSEL_CHECK(step >= 1, "adamw_step_: step must be >= 1, got ", step);
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(step));
  const double step_size = lr / bc1;
  const double bc2_sqrt = std::sqrt(bc2);
  for (const Tensor& t : {p, m, v}) t.impl()->storage().BumpVersion();
  TESSEL_DISPATCH_FLOATING_TYPES(p.dtype(), "adamw_step_", [&] {
    using T = scalar_t;
    using C = ComputeT<T>;
    T* pp = static_cast<T*>(p.raw_data());
    const T* pg = static_cast<const T*>(g.raw_data());
    TESSEL_CHECK(m.dtype() == p.dtype() && v.dtype() == p.dtype(), "adamw_step_: state dtype ", m.dtype(),
                 " must match the parameter dtype ", p.dtype());
    T* pm = static_cast<T*>(m.raw_data());
    T* pv = static_cast<T*>(v.raw_data());
    const C cb1 = static_cast<C>(b1), cb2 = static_cast<C>(b2), ceps = static_cast<C>(eps);
    const C decay = static_cast<C>(1.0 - lr * wd), ss = static_cast<C>(step_size), bcs = static_cast<C>(bc2_sqrt);
    ParallelFor(0, p.numel(), 1 << 14, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) {
        const C grad = ToCompute(pg[i]);
        const C mi = cb1 * ToCompute(pm[i]) + (1 - cb1) * grad;
        const C vi = cb2 * ToCompute(pv[i]) + (1 - cb2) * grad * grad;
        pm[i] = FromCompute<T>(mi);
        pv[i] = FromCompute<T>(vi);
        const C denom = std::sqrt(vi) / bcs + ceps;
        pp[i] = FromCompute<T>(ToCompute(pp[i]) * decay - ss * mi / denom);
      }
    });
  });
  return {p};
}

TensorList SgdKernel(std::span<const Tensor> in, const Attrs& a) {
  const bool has_buf = in[2].defined();
  CheckSameLayout("sgd_step_", has_buf ? in : in.first(2));
  const Tensor& p = in[0];
  const Tensor& g = in[1];
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
    ParallelFor(0, p.numel(), 1 << 14, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) {
        C d = ToCompute(pg[i]) + static_cast<C>(wd) * ToCompute(pp[i]);
        if (pb != nullptr && mom != 0) {
          const C buf = first ? d : static_cast<C>(mom) * ToCompute(pb[i]) + static_cast<C>(1 - damp) * d;
          pb[i] = FromCompute<T>(buf);
          d = nesterov ? d + static_cast<C>(mom) * buf : buf;
        }
        pp[i] = FromCompute<T>(ToCompute(pp[i]) - static_cast<C>(lr) * d);
      }
    });
  });
  return {p};
}

const OpDef& kAdamW = RegisterOp({.name = "adamw_step_", .cpu = AdamWKernel, .is_inplace = true});
const OpDef& kSgd = RegisterOp({.name = "sgd_step_", .cpu = SgdKernel, .is_inplace = true});

}  // namespace

void AdamWStepInPlace(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                      const AdamWHyper& h) {
  autograd::CallOp(kAdamW, {param, grad, exp_avg, exp_avg_sq},
                   Attrs()
                       .Set("lr", h.lr)
                       .Set("beta1", h.beta1)
                       .Set("beta2", h.beta2)
                       .Set("eps", h.eps)
                       .Set("weight_decay", h.weight_decay)
                       .Set("step", h.step));
}

void SgdStepInPlace(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, double lr,
                    double momentum, double dampening, double weight_decay, bool nesterov,
                    bool initialize_buffer) {
  autograd::CallOp(kSgd, {param, grad, momentum_buffer},
                   Attrs()
                       .Set("lr", lr)
                       .Set("momentum", momentum)
                       .Set("dampening", dampening)
                       .Set("weight_decay", weight_decay)
                       .Set("nesterov", nesterov)
                       .Set("first_step", initialize_buffer));
}

}  // namespace tessel
