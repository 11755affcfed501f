// bindings/inplace_py.cc — the C++ front of the in-place Tensor methods optimizers and weight averages call once
// per parameter per step (add_, sub_, mul_, div_, lerp_, addcmul_, addcdiv_; zero_, copy_ and clamp_ of plain tensors):
// `_C._fast_in_place(name, fallback)` returns a method that runs the C++ op itself when autograd records nothing
// and the operands need no promotion, and calls `fallback` (the Python method it replaces: tessel/_inplace.py's
// recording wrapper around tessel/_compat.py's rules) for everything else, which keeps every torch rule the
// Python face has. `_C._fast_unary(name, fallback)` does the same for t.exp(), t.sqrt() and the other float
// unary methods of a plain floating tensor.
//
// Why: through the Python layers each call cost 2-25 us against PyTorch's 0.3-2.5 (a custom optimizer's
// `exp_avg.lerp_(g, 1 - b1)`, an EMA's `ema.mul_(d).add_(p, alpha=1 - d)`); the checks below are what those
// layers decide for these operands, done in C++.
//
// Invariant: the fast path is taken only where the fallback would compute the same values with one version
// bump (or, for add_ / sub_ of a number with an alpha, where torch's fmadd(other, alpha, x) is computed exactly)
// — grad mode off, or nothing involved requires grad (self, its view base, any tensor operand); tensor operands of
// self's floating dtype, all plain or all DTensors (add_ / sub_: float32 / float64, as _compat._add_'s own fast
// path; a number added only to a plain tensor); numbers that are Python floats or ints of at most 2^53 in
// magnitude (not bools). The method returns self (the same Python object), as torch's.
//
// Example (tessel/_inplace.py):
//   Tensor.lerp_ = _C._fast_in_place("lerp_", Tensor.lerp_)
#include <pybind11/pybind11.h>

#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "bindings/bind.h"
#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "core/ops/elementwise.h"
#include "core/ops/ternary.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::bindings {
namespace {

enum class FastOp { kAdd, kSub, kMul, kDiv, kLerp, kAddcmul, kAddcdiv, kZero, kCopy, kClamp };

FastOp FastOpNamed(const std::string& name) {
  if (name == "add_") return FastOp::kAdd;
  if (name == "sub_") return FastOp::kSub;
  if (name == "mul_") return FastOp::kMul;
  if (name == "div_") return FastOp::kDiv;
  if (name == "lerp_") return FastOp::kLerp;
  if (name == "addcmul_") return FastOp::kAddcmul;
  if (name == "zero_") return FastOp::kZero;
  if (name == "copy_") return FastOp::kCopy;
  if (name == "clamp_") return FastOp::kClamp;
  TESSEL_CHECK(name == "addcdiv_", "_fast_in_place: no fast path for ", name,
               " (add_, sub_, mul_, div_, lerp_, addcmul_, addcdiv_, zero_, copy_, clamp_)");
  return FastOp::kAddcdiv;
}

// A Python float or int that is not a bool (exact types: a numpy scalar or a 0-d tensor goes to the fallback).
bool PlainNumber(const py::handle& h, double* out) {
  if (PyFloat_CheckExact(h.ptr())) {
    *out = PyFloat_AS_DOUBLE(h.ptr());
    return true;
  }
  if (PyLong_CheckExact(h.ptr())) {  // exact in a double (|v| <= 2^53); larger ints: the fallback's rules
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
    if (overflow != 0 || v > (1LL << 53) || v < -(1LL << 53)) return false;
    *out = static_cast<double>(v);
    return true;
  }
  return false;
}

// Operand h as a tensor self's fast kernels take as it is (self's dtype, self's kind), else null.
const Tensor* SameKind(const py::handle& h, const Tensor& self) {
  if (!py::isinstance<Tensor>(h)) return nullptr;
  const Tensor& t = h.cast<const Tensor&>();
  if (t.dtype() != self.dtype() || t.is_distributed() != self.is_distributed()) return nullptr;
  return &t;
}

// Autograd would record (or refuse) this write: the fallback decides how.
bool Recorded(const Tensor& self, const py::args& args) {
  if (!GradModeEnabled()) return false;
  if (self.requires_grad()) return true;
  if (const auto& base = self.checked_impl()->view_base(); base != nullptr && Tensor(base).requires_grad()) return true;
  for (const py::handle& a : args) {
    if (py::isinstance<Tensor>(a) && a.cast<const Tensor&>().requires_grad()) return true;
  }
  return false;
}

// The one keyword argument `key` (absent: `fallback_value`) as a plain number; false for any other keyword or a
// value of another type.
bool KeywordNumber(const py::kwargs& kwargs, const char* key, double fallback_value, double* out) {
  *out = fallback_value;
  if (kwargs.empty()) return true;
  if (kwargs.size() != 1 || !kwargs.contains(key)) return false;
  return PlainNumber(kwargs[key], out);
}

// Runs op on self when the fast path applies; false leaves everything to the fallback.
bool TryFast(FastOp op, const Tensor& self, const py::args& args, const py::kwargs& kwargs) {
  if (!self.device().is_cpu() || Recorded(self, args)) return false;
  if (op == FastOp::kZero || op == FastOp::kCopy) {  // any dtype; a DTensor's fill and copy rules stay Python's
    // (copy_'s non_blocking: a CPU copy is synchronous either way)
    const bool only_non_blocking = op == FastOp::kCopy && kwargs.size() == 1 && kwargs.contains("non_blocking") &&
                                   PyBool_Check(kwargs["non_blocking"].ptr());
    if (self.is_distributed() || (!kwargs.empty() && !only_non_blocking)) return false;
    if (args.size() != (op == FastOp::kCopy ? 1u : 0u)) return false;
    if (op == FastOp::kZero) {
      NoGil([&] { FillInPlace(self, 0.0); });
      return true;
    }
    if (!py::isinstance<Tensor>(args[0])) return false;
    const Tensor& src = args[0].cast<const Tensor&>();
    if (src.is_distributed()) return false;
    NoGil([&] { CopyInPlace(self, src); });
    return true;
  }
  if (!IsFloating(self.dtype())) return false;
  double number = 0;
  switch (op) {
    case FastOp::kZero:
    case FastOp::kCopy:
      return false;  // (handled above)
    case FastOp::kClamp: {  // _compat._clamp's own fast path: float32 / float64, bounds None or non-NaN numbers
      if (self.is_distributed() || (self.dtype() != DType::kFloat32 && self.dtype() != DType::kFloat64)) return false;
      if (args.size() > 2) return false;
      py::handle bounds[2] = {py::none(), py::none()};
      for (size_t i = 0; i < args.size(); ++i) bounds[i] = args[i];
      for (const auto& [key, value] : kwargs) {
        const std::string k = py::str(key);
        const int at = k == "min" ? 0 : k == "max" ? 1 : -1;
        if (at < 0 || static_cast<size_t>(at) < args.size()) return false;
        bounds[at] = value;
      }
      std::optional<double> lo, hi;
      for (int i = 0; i < 2; ++i) {
        if (bounds[i].is_none()) continue;
        if (!PlainNumber(bounds[i], &number) || number != number) return false;
        (i == 0 ? lo : hi) = number;
      }
      if (!lo && !hi) return false;  // torch's error, from the Python rules
      CheckNoInternalOverlap(self, "clamp_");  // (CopyInto writes an expanded tensor's one element many times)
      NoGil([&] { CopyInto(self, Clamp(self, lo, hi)); });
      return true;
    }
    case FastOp::kAdd:
    case FastOp::kSub: {
      if (self.dtype() != DType::kFloat32 && self.dtype() != DType::kFloat64) return false;
      if (args.size() != 1 || !KeywordNumber(kwargs, "alpha", 1.0, &number)) return false;
      const double alpha = op == FastOp::kSub ? -number : number;
      double other_number = 0;
      if (PlainNumber(args[0], &other_number)) {
        // torch's fmadd(other, alpha, x), both rounded to self's dtype first; a DTensor's layout rules stay the
        // Python path's
        if (self.is_distributed()) return false;
        NoGil([&] { AddScalarInPlace(self, other_number, alpha); });
        return true;
      }
      if (!py::isinstance<Tensor>(args[0])) return false;
      const Tensor& other = args[0].cast<const Tensor&>();
      if (other.dtype() != self.dtype()) return false;
      NoGil([&] { AddInPlace(self, other, alpha); });
      return true;
    }
    case FastOp::kMul:
    case FastOp::kDiv: {
      if (args.size() != 1 || !kwargs.empty()) return false;  // (div_'s rounding_mode: the Python rules)
      if (PlainNumber(args[0], &number)) {
        if (op == FastOp::kDiv && self.is_distributed()) return false;  // a DTensor's layout rules stay Python's
        NoGil([&] { op == FastOp::kMul ? MulScalarInPlace(self, number) : DivScalarInPlace(self, number); });
        return true;
      }
      const Tensor* other = SameKind(args[0], self);
      if (other == nullptr) return false;
      NoGil([&] { op == FastOp::kMul ? MulInPlace(self, *other) : DivInPlace(self, *other); });
      return true;
    }
    case FastOp::kLerp: {
      if (args.size() != 2 || !kwargs.empty()) return false;
      const Tensor* end = SameKind(args[0], self);
      if (end == nullptr) return false;
      if (PlainNumber(args[1], &number)) {
        NoGil([&] { LerpInPlace(self, *end, number); });
        return true;
      }
      const Tensor* weight = SameKind(args[1], self);
      if (weight == nullptr) return false;
      NoGil([&] { LerpInPlace(self, *end, *weight); });
      return true;
    }
    case FastOp::kAddcmul:
    case FastOp::kAddcdiv: {
      if (args.size() != 2 || !KeywordNumber(kwargs, "value", 1.0, &number)) return false;
      const Tensor* t1 = SameKind(args[0], self);
      const Tensor* t2 = SameKind(args[1], self);
      if (t1 == nullptr || t2 == nullptr) return false;
      NoGil([&] {
        if (op == FastOp::kAddcmul) {
          AddcmulInPlace(self, *t1, *t2, number);
        } else {
          AddcdivInPlace(self, *t1, *t2, number);
        }
      });
      return true;
    }
  }
  return false;
}

using UnaryFn = Tensor (*)(const Tensor&);

// The float ops of tessel/_extra.py's _FLOAT_OPS (which compute an integer tensor in the default float dtype).
UnaryFn FloatUnaryNamed(const std::string& name) {
  static const std::pair<const char*, UnaryFn> kOps[] = {
      {"sin", &Sin}, {"cos", &Cos}, {"exp2", &Exp2}, {"log1p", &Log1p}, {"expm1", &Expm1}, {"erf", &Erf},
      {"exp", &Exp}, {"log", &Log}, {"sqrt", &Sqrt}, {"rsqrt", &Rsqrt}, {"tanh", &Tanh},   {"sigmoid", &Sigmoid}};
  for (const auto& [op, fn] : kOps) {
    if (name == op) return fn;
  }
  TESSEL_FAIL(ErrorCode::kInvalidArgument, "_fast_unary: no fast path for ", name);
}

}  // namespace

void BindFastInPlace(py::module_& m) {
  // t.exp(), t.sqrt(), ... of a plain floating CPU tensor: the C++ op itself (what the Python method reaches for
  // it after its DTensor and integer checks); anything else calls `fallback`.
  m.def("_fast_unary", [](const std::string& name, py::object fallback) {
    const UnaryFn fn = FloatUnaryNamed(name);
    const std::string doc = "torch's Tensor." + name + " (bindings/inplace_py.cc: C++ for a plain floating tensor)";
    return py::cpp_function(
        [fn, fallback](py::object self) -> py::object {
          if (py::isinstance<Tensor>(self)) {
            const Tensor& t = self.cast<const Tensor&>();
            if (IsFloating(t.dtype()) && !t.is_distributed() && t.device().is_cpu()) {
              return py::cast(NoGil([&] { return fn(t); }));
            }
          }
          return fallback(self);
        },
        py::name(name.c_str()), py::doc(doc.c_str()), py::is_method(py::type::of<Tensor>()));
  }, py::arg("name"), py::arg("fallback"));
  m.def("_fast_in_place", [](const std::string& name, py::object fallback) {
    const FastOp op = FastOpNamed(name);
    const std::string doc = "torch's Tensor." + name + ": in place (bindings/inplace_py.cc: C++ when autograd "
                            "records nothing and no promotion is needed, else the Python rules)";
    return py::cpp_function(  // (pybind copies the name and doc strings)
        [op, fallback](py::object self, py::args args, py::kwargs kwargs) -> py::object {
          if (py::isinstance<Tensor>(self) && TryFast(op, self.cast<const Tensor&>(), args, kwargs)) return self;
          return fallback(self, *args, **kwargs);
        },
        py::name(name.c_str()), py::doc(doc.c_str()), py::is_method(py::type::of<Tensor>()));
  }, py::arg("name"), py::arg("fallback"));
}

}  // namespace tessel::bindings
