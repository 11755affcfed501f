// core/autograd/autocast.cc — the autocast region flag and the per-op casting policies.
#include "core/autograd/autocast.h"

#include <string_view>

#include "core/autograd/call.h"
#include "core/dispatch/attrs.h"

namespace tessel {
namespace {

thread_local bool autocast_enabled = false;
thread_local DType autocast_dtype = DType::kBFloat16;

enum class Policy { kNone, kLower, kFloat32, kWidest };

Policy PolicyOf(std::string_view name) {
  for (std::string_view n : {"matmul", "linear", "linear_gelu", "scaled_dot_product_attention"}) {
    if (name == n) return Policy::kLower;
  }
  if (name == "cross_entropy") return Policy::kFloat32;
  if (name == "cat" || name == "stack") return Policy::kWidest;
  return Policy::kNone;
}

bool IsLowerFloat(DType d) { return d == DType::kBFloat16 || d == DType::kFloat16; }

int Width(DType d) {
  switch (d) {
    case DType::kFloat64: return 3;
    case DType::kFloat32: return 2;
    default: return IsLowerFloat(d) ? 1 : 0;
  }
}

Tensor CastTo(const Tensor& t, DType dtype) {
  static const OpDef& cast = GetOp("cast");
  return autograd::CallOp1(cast, {t}, Attrs().Set("dtype", dtype).Set("src_dtype", t.dtype()));
}

}  // namespace

bool AutocastEnabled() { return autocast_enabled; }
DType AutocastDType() { return autocast_dtype; }
void SetAutocastState(bool enabled, DType dtype) {
  autocast_enabled = enabled;
  autocast_dtype = dtype;
}

AutocastGuard::AutocastGuard(bool enabled, DType dtype)
    : previous_enabled_(autocast_enabled), previous_dtype_(autocast_dtype) {
  autocast_enabled = enabled;
  autocast_dtype = dtype;
}
AutocastGuard::~AutocastGuard() {
  autocast_enabled = previous_enabled_;
  autocast_dtype = previous_dtype_;
}

namespace autograd::internal {

TensorList AutocastInputs(const OpDef& op, TensorList inputs) {
  if (!autocast_enabled) return inputs;
  const Policy policy = PolicyOf(op.name);
  if (policy == Policy::kNone) return inputs;
  DType target = autocast_dtype;
  if (policy == Policy::kFloat32) target = DType::kFloat32;
  if (policy == Policy::kWidest) {
    int widest = 0;
    for (const Tensor& t : inputs) {
      if (t.defined() && Width(t.dtype()) > widest) widest = Width(t.dtype()), target = t.dtype();
    }
    if (widest == 0) return inputs;
  }
  for (Tensor& t : inputs) {
    if (!t.defined() || t.dtype() == target || Width(t.dtype()) == 0) continue;
    if (policy == Policy::kLower && t.dtype() == DType::kFloat64) continue;  // not eligible, as torch
    if (policy == Policy::kFloat32 && !IsLowerFloat(t.dtype())) continue;
    t = CastTo(t, target);
  }
  return inputs;
}

}  // namespace autograd::internal
}  // namespace tessel
