// bindings/tensor_ops_py.cc — tessel.Tensor's methods and operators with torch's names, each one call
// of a core op (core/ops/*.h). Shapes may be given as varargs or one sequence (x.view(2, 3) or
// x.view((2, 3))), as in torch. Every op releases the GIL (an op on a DTensor may communicate).
//
// Invariant: no op here computes anything itself; scalars become the op's scalar form or a 0-dim tensor of
// the other operand's dtype (so `x + 1` keeps x's dtype, as torch's type promotion does for Python scalars).
//
// Example (Python): y = (x.view(2, -1).transpose(0, 1) * 2 + 1).sum(dim=0, keepdim=True)
#include <pybind11/stl.h>

#include <functional>
#include <optional>
#include <variant>
#include <vector>

#include "bindings/bind.h"
#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "core/ops/elementwise.h"
#include "core/ops/embedding.h"
#include "core/ops/index_dim.h"
#include "core/tensor/copy.h"
#include "core/ops/matmul.h"
#include "core/ops/reduction.h"
#include "core/ops/softmax.h"
#include "core/ops/strided_view.h"
#include "core/ops/ternary.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"
#include "dtensor/dtensor.h"
#include "dtensor/dtensor_impl.h"

namespace tessel::bindings {
namespace {

using Tensor = ::tessel::Tensor;

// x.view(2, 3) and x.view((2, 3)) both mean [2, 3].
std::vector<int64_t> ShapeArgs(const py::args& args, const char* op) {
  if (args.size() == 1 && !py::isinstance<py::int_>(args[0])) {
    try {
      return args[0].cast<std::vector<int64_t>>();
    } catch (const py::cast_error&) {
      throw py::type_error(std::string(op) + ": expected ints or one sequence of ints, got " +
                           py::str(args[0].get_type()).cast<std::string>());
    }
  }
  try {
    return args.cast<std::vector<int64_t>>();
  } catch (const py::cast_error&) {
    throw py::type_error(std::string(op) + ": expected ints or one sequence of ints, got " +
                         py::repr(args).cast<std::string>());
  }
}

std::vector<int64_t> Dims(const std::optional<std::variant<int64_t, std::vector<int64_t>>>& dim) {
  if (!dim) return {};
  if (const auto* d = std::get_if<int64_t>(&*dim)) return {*d};
  return std::get<std::vector<int64_t>>(*dim);
}

using DimArg = std::optional<std::variant<int64_t, std::vector<int64_t>>>;

Tensor ScalarLike(const Tensor& t, double v) { return Scalar(v, t.dtype()); }

// torch's promotion with a Python scalar: a float scalar takes an integer or bool tensor to the default
// float dtype (DefaultFloatDType: float32 unless set), an int scalar keeps the tensor's dtype (a bool tensor's
// becomes int64: WithIntScalar); true division is always floating. Without it int_tensor + 1.5 truncated the
// scalar ([1, 2] + 1.5 gave [2, 3]), int / int truncated the quotient, and int / 0 killed the process with
// SIGFPE.
Tensor Floating(const Tensor& a) { return IsFloating(a.dtype()) ? a : Cast(a, DefaultFloatDType()); }

// t + v for a Python number v, as torch's CPU kernel: the number is cast to a bfloat16 / float16 tensor's dtype
// first (the wrapped number joins the common dtype; add reads no float32 copy of it, unlike mul and div), so
// bf16(0.1) - 0.1 is 0 and float16 -65504 + 70000 is inf (it was 9.8e-5 and 4496).
Tensor AddNumber(const Tensor& t, double v) {
  if (t.dtype() == DType::kBFloat16) v = ToCompute(FromCompute<BFloat16>(static_cast<float>(v)));
  if (t.dtype() == DType::kFloat16) v = ToCompute(FromCompute<Float16>(static_cast<float>(v)));
  return AddScalar(t, v);
}

// torch's Tensor.view(dtype): the same bytes read as another dtype, sharing storage (writes show through both),
// without autograd history (torch's view_dtype is not differentiable). A different element size rescales the
// last dim, which must be contiguous (stride 1), divisible and not the only element of a 0-d tensor.
Tensor ViewAsDType(const Tensor& t, DType dtype) {
  const auto what = [&] { return Str(DTypeName(t.dtype()), " as ", DTypeName(dtype)); };
  TESSEL_CHECK(!t.is_distributed(), "view(dtype): not supported for a DTensor (view its to_local() instead)");
  const int64_t from = ElementSize(t.dtype()), to = ElementSize(dtype);
  Shape sizes = t.sizes(), strides = t.strides();
  int64_t offset = t.storage_offset();
  if (from != to) {
    TESSEL_CHECK(t.dim() > 0, "self.dim() cannot be 0 to view ", what(), " (different element sizes)");
    TESSEL_CHECK(t.strides().back() == 1, "self.stride(-1) must be 1 to view ", what(),
                 " (different element sizes), but got ", t.strides().back());
    if (from < to) {
      const int64_t k = to / from;
      TESSEL_CHECK(sizes.back() % k == 0, "self.size(-1) must be divisible by ", k, " to view ", what(),
                   " (different element sizes), but got ", sizes.back());
      TESSEL_CHECK(offset % k == 0, "self.storage_offset() must be divisible by ", k, " to view ", what(),
                   " (different element sizes), but got ", offset);
      for (size_t i = 0; i + 1 < strides.size(); ++i) {
        TESSEL_CHECK(strides[i] % k == 0, "self.stride(", i, ") must be divisible by ", k, " to view ", what(),
                     " (different element sizes), but got ", strides[i]);
        strides[i] /= k;
      }
      sizes.back() /= k, offset /= k;
    } else {
      const int64_t k = from / to;
      for (size_t i = 0; i + 1 < strides.size(); ++i) strides[i] *= k;
      sizes.back() *= k, offset *= k;
    }
  }
  return MakeDense(t.checked_impl()->storage(), sizes, strides, offset, dtype);
}

// The value of b where torch's mul / div read it as a number: a 0-d float32 / float64 CPU tensor b (no gradient
// to take) beside a bfloat16 / float16 tensor a of one or more dims, whose dtype the result keeps; torch's kernels
// take b at float32 precision (float16 x * tensor(70000.) is 7000 for x = 0.1; rounding b first gave inf).
std::optional<double> NumberOperand(const Tensor& a, const Tensor& b) {
  if ((a.dtype() != DType::kBFloat16 && a.dtype() != DType::kFloat16) || a.dim() == 0 || b.dim() != 0) return {};
  if ((b.dtype() != DType::kFloat32 && b.dtype() != DType::kFloat64) || b.is_distributed() || a.is_distributed() ||
      !b.device().is_cpu() || (b.requires_grad() && GradModeEnabled())) {
    return {};
  }
  return static_cast<double>(static_cast<float>(b.ItemDouble()));
}

// t / v for a Python number v, as torch's CPU kernel: a bfloat16 / float16 tensor is divided in float32 by v at
// float32 precision and rounded once (v rounded to bfloat16 first gave another value for one quotient in ten:
// bf16(11) / 0.7 gave 15.75 where torch gives 15.6875).
Tensor DivByNumber(const Tensor& t, double v) {
  const Tensor f = Floating(t);
  if (f.dtype() != DType::kBFloat16 && f.dtype() != DType::kFloat16) return Div(f, ScalarLike(f, v));
  const Tensor x = Cast(f, DType::kFloat32);
  return Cast(Div(x, ScalarLike(x, v)), f.dtype());
}

// torch's lattice: bool < uint8, int8 < int16 < int32 < int64 < floating; uint8 with int8 is int16 (the
// smallest type holding both ranges); float16 with bfloat16 is float32.
int IntegralRank(DType d) {
  switch (d) {
    case DType::kUInt8: case DType::kInt8: return 1;
    case DType::kInt16: return 2;
    case DType::kInt32: return 3;
    default: return 4;  // int64
  }
}

DType PromoteTypes(DType a, DType b) {
  if (a == b || b == DType::kBool) return a;
  if (a == DType::kBool) return b;
  if (IsFloating(a) != IsFloating(b)) return IsFloating(a) ? a : b;
  if (!IsFloating(a)) {
    if (IntegralRank(a) == 1 && IntegralRank(b) == 1) return DType::kInt16;  // uint8 with int8
    return IntegralRank(a) >= IntegralRank(b) ? a : b;
  }
  return a == DType::kFloat64 || b == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
}

}  // namespace

DType ResultType(const Tensor& a, const Tensor& b) {
  std::optional<DType> dimensioned, zero_dim;
  for (const Tensor* t : {&a, &b}) {
    std::optional<DType>& group = t->dim() > 0 ? dimensioned : zero_dim;
    group = group ? PromoteTypes(*group, t->dtype()) : t->dtype();
  }
  if (!dimensioned) return *zero_dim;
  if (!zero_dim || IsFloating(*dimensioned)) return *dimensioned;
  if (*dimensioned == DType::kBool || IsFloating(*zero_dim)) return PromoteTypes(*dimensioned, *zero_dim);
  return *dimensioned;
}

std::pair<Tensor, Tensor> Promoted(const Tensor& a, const Tensor& b) {
  const DType t = ResultType(a, b);
  return {a.dtype() == t ? a : Cast(a, t), b.dtype() == t ? b : Cast(b, t)};
}

namespace {

// fill_ and zero_ write directly (FillInPlace is no op): on a tensor that requires grad, with grad mode on,
// the tensor kept its old graph (y = x * 2; y.fill_(0) still gave x a gradient of 2 per use), silently.
// torch raises for a leaf and records it otherwise; tessel records no in-place op, so it raises for both.
// torch's checked conversion of a Python number to a tensor's dtype (c10::checked_convert), for fill_ /
// masked_fill / full: a finite number that float16 or float32 would round to inf, or an integer out of its type's
// range (uint8 also takes -255..-1, which wrap) or not finite, raises instead of storing inf or wrapped bits
// (full((2,), 300, dtype=uint8) gave 44). bfloat16 and float64 are not checked, as torch's.
void CheckNumberFits(double v, DType dtype) {
  const char* name = nullptr;
  bool overflow = false;
  const double t = std::trunc(v);
  switch (dtype) {
    case DType::kFloat16: name = "c10::Half", overflow = std::isfinite(v) && std::abs(v) >= 65520.0; break;
    case DType::kFloat32: name = "float", overflow = std::isfinite(v) && std::abs(v) >= 3.4028235677973366e38; break;
    case DType::kInt8: name = "int8_t", overflow = !std::isfinite(v) || (t < -128 || t > 127); break;
    case DType::kUInt8: name = "uint8_t", overflow = !std::isfinite(v) || (t < -255 || t > 255); break;
    case DType::kInt16: name = "int16_t", overflow = !std::isfinite(v) || (t < -32768 || t > 32767); break;
    case DType::kInt32: name = "int", overflow = !std::isfinite(v) || (t < -2147483648.0 || t > 2147483647.0); break;
    case DType::kInt64: name = "int64_t", overflow = !std::isfinite(v) || (t < -9223372036854775808.0 ||
                                                                             t >= 9223372036854775808.0); break;
    default: break;
  }
  TESSEL_CHECK(!overflow, "value cannot be converted to type ", name, " without overflow");
}

void CheckFillable(const Tensor& a, const char* op) {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !GradModeEnabled() || !a.requires_grad(), op,
                    ": in-place operation on a tensor of shape ", ShapeStr(a.sizes()), " that requires grad (",
                    "autograd records no in-place op); run it under no_grad() or build the value out of place");
}

// fill_ / zero_ of a DTensor fills every rank's local piece, which is the filled global tensor for Shard
// and Replicate placements (zero_grad(set_to_none=False) and p.zero_() under fully_shard raised "works on
// local tensors"); and for a Partial one when the value is 0, exact under every reduce op (sequence-parallel
// norm gradients are Partial: zero_grad(set_to_none=False) raised), or under avg, max and min, which give v back
// from W copies of it (as torch's). Another value on a Partial(sum) would sum W copies of it, so it is refused
// (torch returns W·v).
void FillAnyInPlace(const Tensor& a, double v, const char* op) {
  if (!a.is_distributed()) return FillInPlace(a, v);
  dtensor::CheckWritesThrough(a, op);
  const dtensor::DTensor d(a);
  for (const dtensor::Placement& p : d.placements()) {
    const auto* partial = std::get_if<dtensor::Partial>(&p);
    TESSEL_CHECK(v == 0.0 || partial == nullptr || partial->reduce_op != comm::ReduceOp::kSum, op,
                 ": the DTensor of shape ", ShapeStr(a.sizes()), " is ", dtensor::PlacementsToString(d.placements()),
                 "; filling a Partial(sum) DTensor would sum a copy of the value per rank. Redistribute it to "
                 "Replicate or Shard first");
  }
  FillInPlace(d.ToLocal(), v);
}

// Tensor.fill_ with a number: checked as torch's, then written on every rank's piece.
Tensor& Fill(Tensor& a, double v) {
  CheckFillable(a, "fill_");
  CheckNumberFits(v, a.dtype());
  NoGil([&] { FillAnyInPlace(a, v, "fill_"); });
  return a;
}

// pow with a tensor exponent: tessel/_pow.py's (numpy's power on the host, differentiable in both operands).
py::object TensorPow(py::object base, py::object exponent) {
  return py::module_::import("tessel._pow").attr("pow")(std::move(base), std::move(exponent));
}

// torch's result type of a tensor with a Python int: a bool tensor takes int64 (tensor([True]) * 2 is
// tensor([2]); it raised "not supported for bool tensors"), any other keeps its dtype; a Python bool leaves
// a bool tensor bool.
bool IsPlainInt(py::handle v) { return PyLong_Check(v.ptr()) && !PyBool_Check(v.ptr()); }
Tensor WithIntScalar(const Tensor& a, py::handle v) {
  return a.dtype() == DType::kBool && IsPlainInt(v) ? Cast(a, DType::kInt64) : a;
}

// A Python int as a scalar for tensor `a`: for an integer dtype narrower than int64 it wraps into the dtype
// first, as torch's scalar cast (int32 tensor + 2**40 adds 0, uint8 tensor // -2 divides by 254); it was
// saturated.
double IntScalarFor(const Tensor& a, py::int_ v) {
  int bits = 0;
  bool is_signed = true;
  switch (a.dtype()) {
    case DType::kInt8: bits = 8; break;
    case DType::kUInt8: bits = 8, is_signed = false; break;
    case DType::kInt16: bits = 16; break;
    case DType::kInt32: bits = 32; break;
    default: return v.cast<double>();
  }
  int64_t w = py::reinterpret_steal<py::object>(PyNumber_And(v.ptr(), py::int_((int64_t{1} << bits) - 1).ptr()))
                  .cast<int64_t>();
  if (is_signed && w >= (int64_t{1} << (bits - 1))) w -= int64_t{1} << bits;
  return static_cast<double>(w);
}

// torch refuses subtraction with a bool operand (a mask minus a mask is almost always a mistaken inversion).
void CheckBoolSubtraction(bool a_is_bool, bool b_is_bool) {
  if (a_is_bool && b_is_bool) {
    TESSEL_FAIL(ErrorCode::kInvalidArgument, "Subtraction, the `-` operator, with two bool tensors is not supported. "
                "Use the `^` or `logical_xor()` operator instead.");
  }
  if (a_is_bool || b_is_bool) {
    TESSEL_FAIL(ErrorCode::kInvalidArgument, "Subtraction, the `-` operator, with a bool tensor is not supported. "
                "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.");
  }
}

// A Python int as an exact int64 0-d tensor, where the scalar ops put their scalars.
Tensor Int64Scalar(int64_t v) {
  const Device d = CurrentDevice();
  Tensor s = Empty({}, DType::kInt64, d.is_cpu() ? d : Device::Cpu());
  s.data_ptr<int64_t>()[0] = v;
  return d.is_cpu() ? s : s.To(d);
}

// True for an int64 tensor and a Python int a double cannot hold (beyond ±2^53): torch adds 2^53 + 1 exactly.
bool NeedsExactInt64(const Tensor& a, py::handle v) {
  if (a.dtype() != DType::kInt64 || !IsPlainInt(v)) return false;
  const int64_t w = py::cast<int64_t>(v);
  return w > (int64_t{1} << 53) || w < -(int64_t{1} << 53);
}

// An operator overload for a Python int operand (or a numpy integer scalar, IntLike): `op(tensor promoted by
// WithIntScalar, the int as a double)`, or `exact(tensor, the int as an int64 0-d tensor)` where the double
// would round it.
template <typename Op, typename Exact>
auto IntScalarOperator(Op op, Exact exact) {
  return [op, exact](const Tensor& t, IntLike i) {
    const Tensor a = WithIntScalar(t, i.value);
    if (NeedsExactInt64(a, i.value)) {
      const Tensor s = Int64Scalar(py::cast<int64_t>(i.value));
      return NoGil([&] { return exact(a, s); });
    }
    const double x = IntScalarFor(a, i.value);
    return NoGil([&] { return op(a, x); });
  };
}

// self <op> number for a complex number: the tensor promoted to torch's result type, as a complex tensor, then the
// operator (tessel/_complex_torch.py).
py::object ComplexNumberOperation(const char* name, const py::object& self, const py::object& number) {
  return py::module_::import("tessel._complex_torch").attr("number_operation")(name, self, number);
}

void BindArithmetic(py::class_<Tensor>& c) {
  const auto ExactAdd = [](const Tensor& t, const Tensor& n) { return Add(t, n); };
  const auto ExactMul = [](const Tensor& t, const Tensor& n) { return Mul(t, n); };
  // Overloads are tried in order: Tensor, then a Python int (py::int_ also takes bool, as torch's int
  // promotion does), then a Python float.
  c.def("__add__", [](const Tensor& a, const Tensor& b) { return NoGil([&] { const auto [x, y] = Promoted(a, b); return Add(x, y); }); }, py::is_operator())
      .def("__add__", IntScalarOperator([](const Tensor& a, double x) { return AddNumber(a, x); }, ExactAdd), py::is_operator())
      .def("__add__", [](const Tensor& a, double v) { return NoGil([&] { return AddNumber(Floating(a), v); }); },
           py::is_operator())
      .def("__radd__", IntScalarOperator([](const Tensor& a, double x) { return AddNumber(a, x); }, ExactAdd), py::is_operator())
      .def("__radd__", [](const Tensor& a, double v) { return NoGil([&] { return AddNumber(Floating(a), v); }); },
           py::is_operator())
      .def("__sub__", [](const Tensor& a, const Tensor& b) {
        CheckBoolSubtraction(a.dtype() == DType::kBool, b.dtype() == DType::kBool);
        return NoGil([&] { const auto [x, y] = Promoted(a, b); return Sub(x, y); });
      }, py::is_operator())
      .def("__sub__", [](const Tensor& a, IntLike v) {
        CheckBoolSubtraction(a.dtype() == DType::kBool, PyBool_Check(v.value.ptr()));
        return IntScalarOperator([](const Tensor& t, double x) { return AddNumber(t, -x); },
                                 [](const Tensor& t, const Tensor& n) { return Sub(t, n); })(a, v);
      }, py::is_operator())
      .def("__sub__", [](const Tensor& a, double v) {
        CheckBoolSubtraction(a.dtype() == DType::kBool, false);
        return NoGil([&] { return AddNumber(Floating(a), -v); });
      }, py::is_operator())
      .def("__rsub__", [](const Tensor& a, IntLike v) {
        CheckBoolSubtraction(a.dtype() == DType::kBool, PyBool_Check(v.value.ptr()));
        return IntScalarOperator([](const Tensor& t, double x) { return AddNumber(Neg(t), x); },
                                 [](const Tensor& t, const Tensor& n) { return Sub(n, t); })(a, v);
      },
           py::is_operator())
      .def("__rsub__", [](const Tensor& a, double v) {
        CheckBoolSubtraction(a.dtype() == DType::kBool, false);
        return NoGil([&] { return AddNumber(Neg(Floating(a)), v); });
      }, py::is_operator())
      .def("__mul__", [](const Tensor& a, const Tensor& b) {
        return NoGil([&] {
          if (const std::optional<double> v = NumberOperand(a, b)) return MulScalar(a, *v);
          const auto [x, y] = Promoted(a, b);
          return Mul(x, y);
        });
      }, py::is_operator())
      .def("__mul__", IntScalarOperator([](const Tensor& a, double x) { return MulScalar(a, x); }, ExactMul), py::is_operator())
      .def("__mul__", [](const Tensor& a, double v) { return NoGil([&] { return MulScalar(Floating(a), v); }); }, py::is_operator())
      .def("__rmul__", IntScalarOperator([](const Tensor& a, double x) { return MulScalar(a, x); }, ExactMul), py::is_operator())
      .def("__rmul__", [](const Tensor& a, double v) { return NoGil([&] { return MulScalar(Floating(a), v); }); }, py::is_operator())
      .def("__truediv__", [](const Tensor& a, const Tensor& b) {
        return NoGil([&] {
          if (const std::optional<double> v = NumberOperand(a, b)) return DivByNumber(a, *v);
          const bool ints = !IsFloating(a.dtype()) && !IsFloating(b.dtype());
          if (ints) return Div(Floating(a), Floating(b));
          const auto [x, y] = Promoted(a, b);
          return Div(x, y);
        });
      }, py::is_operator())
      .def("__truediv__", [](const Tensor& a, double v) {
        return NoGil([&] { return DivByNumber(a, v); });
      }, py::is_operator())
      .def("__rtruediv__", [](const Tensor& a, double v) {
        return NoGil([&] {  // torch's v / t is t.reciprocal() * v (535 of 2,000 float32 quotients differ from a
          const Tensor f = Floating(a);  // division's in their last bit; bf16's v is kept at float32 precision)
          const Tensor r = Div(ScalarLike(f, 1.0), f);
          return v == 1.0 ? r : MulScalar(r, v);
        });
      }, py::is_operator())
      .def("__neg__", [](const Tensor& a) { return NoGil([&] { return Neg(a); }); })
      .def("__pow__", [](const Tensor& a, double e) { return NoGil([&] { return Pow(a, e); }); }, py::is_operator())
      // A tensor exponent, or a number base (theta ** t), is composed in Python (tessel/_pow.py).
      .def("__pow__", [](py::object a, const Tensor& e) { return TensorPow(std::move(a), py::cast(e)); },
           py::is_operator())
      .def("__rpow__", [](const Tensor& e, py::int_ base) { return TensorPow(std::move(base), py::cast(e)); },
           py::is_operator())
      .def("__rpow__", [](const Tensor& e, py::float_ base) { return TensorPow(std::move(base), py::cast(e)); },
           py::is_operator())
      // (an operator: t @ z is NotImplemented, so a ComplexTensor's __rmatmul__ runs; it raised pybind's TypeError)
      .def("__matmul__", [](const Tensor& a, const Tensor& b) { return NoGil([&] { return Matmul(a, b); }); },
           py::is_operator())
      .def("__abs__", [](const Tensor& a) { return NoGil([&] { return Abs(a); }); })
      .def("add", [](const Tensor& a, const Tensor& b) { return NoGil([&] { const auto [x, y] = Promoted(a, b); return Add(x, y); }); })
      .def("mul", [](const Tensor& a, const Tensor& b) { return NoGil([&] { const auto [x, y] = Promoted(a, b); return Mul(x, y); }); })
      .def("matmul", [](const Tensor& a, const Tensor& b) { return NoGil([&] { return Matmul(a, b); }); })
      // In place (not recorded by autograd, like torch's under no_grad): the optimizer-style updates.
      .def("add_", [](Tensor& a, const Tensor& b, double alpha) -> Tensor& {
        NoGil([&] { AddInPlace(a, b, alpha); });
        return a;
      }, py::arg("other"), py::arg("alpha") = 1.0, py::return_value_policy::reference_internal)
      .def("mul_", [](Tensor& a, double v) -> Tensor& {
        NoGil([&] { MulScalarInPlace(a, v); });
        return a;
      }, py::return_value_policy::reference_internal)
      // torch's copy_(src, non_blocking=False): a CPU copy is synchronous either way (the flag is accepted, as
      // pinned-memory training loops pass it).
      .def("copy_", [](Tensor& a, const Tensor& b, bool) -> Tensor& {
        NoGil([&] { CopyInPlace(a, b); });
        return a;
      }, py::arg("src"), py::arg("non_blocking") = false, py::return_value_policy::reference_internal)
      .def("fill_", [](Tensor& a, double v) -> Tensor& { return Fill(a, v); },
           py::return_value_policy::reference_internal)
      // An int64 tensor takes a Python int beyond 2^53 exactly (through a double it lost its low bits:
      // fill_(2**62 + 1) stored 2**62); every other case is the overload above.
      .def("fill_", [](Tensor& a, py::int_ v) -> Tensor& {
        const double d = v.cast<double>();
        if (a.dtype() != DType::kInt64 || a.is_distributed() || std::abs(d) < 9007199254740992.0) return Fill(a, d);
        CheckFillable(a, "fill_");
        CheckNumberFits(d, a.dtype());
        const Tensor value = FromVector<int64_t>({v.cast<int64_t>()}, {1});
        NoGil([&] { CopyInto(a, value); });
        return a;
      }, py::return_value_policy::reference_internal)
      .def("zero_", [](Tensor& a) -> Tensor& {
        CheckFillable(a, "zero_");
        NoGil([&] { FillAnyInPlace(a, 0.0, "zero_"); });
        return a;
      }, py::return_value_policy::reference_internal);
  // A numpy array operand is copied into a tensor of its dtype (a float64 array promotes, as in torch)
  // and the tensor overloads above run; numpy defers `ndarray + tensor` to the reflected forms because
  // of Tensor.__array_priority__ (tessel/__init__.py), so both orders give a tensor, as torch's do.
  // Registered last: numbers and tensors never reach them.
  for (const char* name : {"__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
                           "__rtruediv__", "__matmul__", "__rmatmul__"}) {
    const bool reflected = name[2] == 'r';  // __radd__, __rsub__, ...: other op self
    const std::string forward = reflected ? "__" + std::string(name + 3) : std::string(name);
    // (py::array binds only real ndarrays, in both of pybind's passes: lists and objects with __array__,
    // such as ComplexTensor whose own reflected operators must run, still get NotImplemented.)
    c.def(name, [forward, reflected](py::object self, const py::array& other) {
      py::object t = py::cast(FromArray(other));
      return reflected ? t.attr(forward.c_str())(self) : self.attr(forward.c_str())(t);
    }, py::is_operator());
  }
  // Last of all: a Python (or numpy) complex number, t * 1j, goes to the complex tensors' Python side
  // (ComplexNumberOperation). Real operands never get this far: no cost on their paths.
  for (const char* name : {"__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
                           "__rtruediv__", "__pow__", "__rpow__"}) {
    c.def(name, [name](py::object self, const ComplexNumber& z) { return ComplexNumberOperation(name, self, z.value); },
          py::is_operator());
  }
}

void BindComparisons(py::class_<Tensor>& c) {
  // ==, !=, <, >, <=, >= are one op each (!= true for NaN, as in torch; <= and >= false). A float scalar compares an
  // integer tensor as float32 (torch's promotion: int_tensor == 1.5 is all false, < 1.5 true for 1).
  // The scalar as a 0-d tensor of `a`'s dtype, or of the default float dtype with `a` promoted when the scalar
  // is a float.
  // A bool tensor against an int scalar compares as int64 (torch: tensor([True]) == 2 is False; the scalar
  // was cast to bool first), and an int64 scalar is taken exactly (through a double, 2^62 == 2^62 + 1).
  auto operands = [](const Tensor& a, const py::object& v) -> std::pair<Tensor, Tensor> {
    if (PyFloat_Check(v.ptr()) && !IsFloating(a.dtype())) {
      return {Cast(a, DefaultFloatDType()), Scalar(v.cast<double>(), DefaultFloatDType())};
    }
    const bool is_int = IsPlainInt(v);
    const Tensor x = WithIntScalar(a, v);
    if (is_int && x.dtype() == DType::kInt64) return {x, Int64Scalar(v.cast<int64_t>())};
    return {x, ScalarLike(x, v.cast<double>())};
  };
  // Python and numpy ints (anything with __index__) and floats.
  const auto scalar = [](const py::object& v) { return PyFloat_Check(v.ptr()) || PyIndex_Check(v.ptr()); };
  // Two tensors compare in their promoted type (torch: int_tensor == float_tensor compares as float).
  c.def("__eq__", [](const Tensor& a, const Tensor& b) { return NoGil([&] { const auto [x, y] = Promoted(a, b); return Eq(x, y); }); })
      .def("__ne__", [](const Tensor& a, const Tensor& b) { return NoGil([&] { const auto [x, y] = Promoted(a, b); return Ne(x, y); }); })
      .def("__lt__", [](const Tensor& a, const Tensor& b) { return NoGil([&] { const auto [x, y] = Promoted(a, b); return Lt(x, y); }); })
      .def("__gt__", [](const Tensor& a, const Tensor& b) { return NoGil([&] { const auto [x, y] = Promoted(a, b); return Gt(x, y); }); })
      .def("__le__", [](const Tensor& a, const Tensor& b) { return NoGil([&] { const auto [x, y] = Promoted(a, b); return Le(x, y); }); })
      .def("__ge__", [](const Tensor& a, const Tensor& b) { return NoGil([&] { const auto [x, y] = Promoted(a, b); return Ge(x, y); }); });
  using Cmp = std::function<Tensor(const Tensor&, const Tensor&)>;
  const std::vector<std::pair<const char*, Cmp>> with_scalar = {
      {"__eq__", [](const Tensor& a, const Tensor& b) { return Eq(a, b); }},
      {"__ne__", [](const Tensor& a, const Tensor& b) { return Ne(a, b); }},
      {"__lt__", [](const Tensor& a, const Tensor& b) { return Lt(a, b); }},
      {"__gt__", [](const Tensor& a, const Tensor& b) { return Gt(a, b); }},
      {"__le__", [](const Tensor& a, const Tensor& b) { return Le(a, b); }},
      {"__ge__", [](const Tensor& a, const Tensor& b) { return Ge(a, b); }}};
  for (const auto& [name, cmp] : with_scalar) {
    // Anything but a tensor or a number: NotImplemented, so Python falls back (t == None is False, as torch); a
    // complex number compares through the complex side (== and != only: ordering one raises there).
    c.def(name, [=, cmp = cmp](const Tensor& a, const py::object& v) -> py::object {
      if (!scalar(v)) {
        const bool complex_number = PyComplex_Check(v.ptr()) ||
                                    std::string_view(Py_TYPE(v.ptr())->tp_name).find("numpy.complex") == 0;
        return complex_number ? ComplexNumberOperation(name, py::cast(a), v)
                              : py::reinterpret_borrow<py::object>(Py_NotImplemented);
      }
      const auto [x, y] = operands(a, v);
      return py::cast(NoGil([&] { return cmp(x, y); }));
    }, py::is_operator());
  }
  c.def("masked_fill", [](const Tensor& x, const Tensor& mask, double v) {
        // torch 2.15 checks every dtype here, bfloat16 too (int8 masked_fill(m, 200) stored -56)
        CheckNumberFits(v, x.dtype());
        TESSEL_CHECK(x.dtype() != DType::kBFloat16 || !std::isfinite(v) || std::abs(v) <= 3.3895313892515355e38,
                     "value cannot be converted to type c10::BFloat16 without overflow");
        return NoGil([&] { return MaskedFill(x, mask, v); });
      }, py::arg("mask"), py::arg("value"));
}


// Tensor.__getitem__'s fast path (tessel/_tensor.py _getitem): a key of ints, slices with a positive step, None
// and one ..., alone or in a tuple, as the chain of views (select / slice / unsqueeze) in one call; x[1:3, 2]
// took 6.7 us through the Python loop against torch's 1.8. Returns None for any other key (tensors, lists,
// numpy integers, bools) and for every key that is an error (out of range, too many indices, step <= 0), so
// that the Python path handles the rest and raises torch's errors in one place.
// x[index] for an integer tensor (rows of dim 0) or a bool mask over x's leading dims (the selected rows, in
// order): the Python path's values (_advanced_index: rows gathered through the embedding op, so the gradient
// scatters back) in one call; x[idx] took 15 us there against torch's 2. None where that path handles the key
// (DTensors, 0-d and other-dtype indices) or raises torch's error (a row out of range, a mask's shape).
py::object IndexRows(const Tensor& x, const Tensor& index) {
  if (x.is_distributed() || index.is_distributed() || x.dim() == 0 || index.dim() == 0) return py::none();
  std::vector<int64_t> rows;
  Shape out_shape;
  int64_t k = 1;  // the dims of x the index covers
  if (index.dtype() == DType::kBool) {
    k = index.dim();
    if (k > x.dim() || !std::equal(index.sizes().begin(), index.sizes().end(), x.sizes().begin())) return py::none();
    const Tensor mask = Contiguous(index);
    const bool* p = static_cast<const bool*>(mask.raw_data());
    const int64_t n = mask.numel();  // (out of line: not in the loop condition)
    rows.resize(static_cast<size_t>(n));
    size_t count = 0;  // branch-free: a mask's bits are data, a branch on them mispredicts half the time
    for (int64_t i = 0; i < n; ++i) {
      rows[count] = i;
      count += p[i] ? 1 : 0;
    }
    rows.resize(count);
    out_shape = {static_cast<int64_t>(rows.size())};
  } else if (index.dtype() == DType::kInt64 || index.dtype() == DType::kInt32) {
    rows = index.ToInt64Vector();
    const int64_t n = x.sizes()[0];
    for (int64_t& r : rows) {
      if (r < -n || r >= n) return py::none();
      if (r < 0) r += n;
    }
    out_shape = index.sizes();
  } else {
    return py::none();
  }
  int64_t lead = 1, width = 1;
  for (int64_t d = 0; d < x.dim(); ++d) (d < k ? lead : width) *= x.sizes()[static_cast<size_t>(d)];
  out_shape.insert(out_shape.end(), x.sizes().begin() + k, x.sizes().end());
  return py::cast(NoGil([&] {
    // index_select's row copies (element loads for width 1: a mask over every element), not the embedding op;
    // a 16-bit gradient rounds after each added row, as torch's x[index] backward (index_put_ accumulate)
    const Tensor picked = IndexSelectDim(Reshape(x, {lead, width}), 0,
                                         FromVector<int64_t>(rows, {static_cast<int64_t>(rows.size())}),
                                         /*rounded_adds=*/true);
    return Reshape(picked, out_shape);
  }));
}

py::object BasicIndex(const Tensor& x, py::handle key) {
  if (py::isinstance<Tensor>(key)) return IndexRows(x, key.cast<Tensor>());
  struct Entry {
    enum Kind { kNone, kInt, kSlice } kind;
    py::handle item;
  };
  std::vector<Entry> entries;
  int64_t named = 0;
  bool ellipsis = false;
  auto classify = [&](py::handle h) {
    if (h.is_none()) {
      entries.push_back({Entry::kNone, h});
    } else if (h.ptr() == Py_Ellipsis) {
      if (ellipsis) return false;
      ellipsis = true;
      entries.push_back({Entry::kSlice, py::handle()});  // expanded below
    } else if (PyLong_CheckExact(h.ptr())) {  // exact: a bool (an int subclass) is a mask, not an index
      entries.push_back({Entry::kInt, h});
      ++named;
    } else if (PySlice_Check(h.ptr())) {
      entries.push_back({Entry::kSlice, h});
      ++named;
    } else {
      return false;
    }
    return true;
  };
  if (PyTuple_CheckExact(key.ptr())) {
    for (py::handle h : py::reinterpret_borrow<py::tuple>(key)) {
      if (!classify(h)) return py::none();
    }
  } else if (!classify(key)) {
    return py::none();
  }
  // x[...] / x[()] alone: the Python path's (a view of every dim, not x itself)
  if (named > x.dim() || entries.size() == (ellipsis ? 1U : 0U)) return py::none();
  Tensor out = x;
  int64_t dim = 0;
  for (const Entry& e : entries) {
    if (e.kind == Entry::kNone) {
      out = NoGil([&] { return Unsqueeze(out, dim); });
      ++dim;
    } else if (e.kind == Entry::kSlice && !e.item) {  // ...: the dims no entry names
      dim += x.dim() - named;
    } else if (e.kind == Entry::kSlice) {
      Py_ssize_t start = 0, stop = 0, step = 0;
      if (PySlice_Unpack(e.item.ptr(), &start, &stop, &step) < 0) {
        PyErr_Clear();
        return py::none();
      }
      if (step <= 0) return py::none();
      const int64_t size = out.sizes()[static_cast<size_t>(dim)];
      PySlice_AdjustIndices(size, &start, &stop, step);
      out = NoGil([&] { return Slice(out, dim, start, std::max(stop, start), step); });
      ++dim;
    } else {
      const int64_t i = PyLong_AsLongLong(e.item.ptr());
      if (i == -1 && PyErr_Occurred()) {  // beyond int64
        PyErr_Clear();
        return py::none();
      }
      const int64_t size = out.sizes()[static_cast<size_t>(dim)];
      if (i < -size || i >= size) return py::none();
      out = NoGil([&] { return Select(out, dim, i < 0 ? i + size : i); });
    }
  }
  return py::cast(std::move(out));
}
void BindViews(py::class_<Tensor>& c) {
  c.def("view", [](const Tensor& x, py::args s) {
     if (s.size() == 1 && py::isinstance<DType>(s[0])) return ViewAsDType(x, s[0].cast<DType>());
     auto sh = ShapeArgs(s, "view");
     return NoGil([&] { return View(x, sh); });
   })
      .def("reshape", [](const Tensor& x, py::args s) {
        auto sh = ShapeArgs(s, "reshape");
        return NoGil([&] { return Reshape(x, sh); });
      })
      .def("expand", [](const Tensor& x, py::args s) {
        auto sh = ShapeArgs(s, "expand");
        return NoGil([&] { return Expand(x, sh); });
      })
      .def("permute", [](const Tensor& x, py::args s) {
        auto d = ShapeArgs(s, "permute");
        return NoGil([&] { return Permute(x, d); });
      })
      .def("transpose", [](const Tensor& x, int64_t a, int64_t b) { return NoGil([&] { return Transpose(x, a, b); }); },
           py::arg("dim0"), py::arg("dim1"))
      .def_property_readonly("T", [](const Tensor& x) { return NoGil([&] { return Transpose(x, 0, 1); }); })
      .def("t", [](const Tensor& x) {  // torch.Tensor.t: <= 2-D; 0-D and 1-D come back as they are
        TESSEL_CHECK(x.dim() <= 2, "t() expects a tensor with <= 2 dimensions, but self is ", x.dim(), "D");
        return x.dim() < 2 ? x : NoGil([&] { return Transpose(x, 0, 1); });
      })
      .def("contiguous", [](const Tensor& x) { return NoGil([&] { return Contiguous(x); }); })
      .def("clone", [](const Tensor& x) { return NoGil([&] { return Clone(x); }); })
      .def("flatten", [](const Tensor& x, int64_t s, int64_t e) { return NoGil([&] { return Flatten(x, s, e); }); },
           py::arg("start_dim") = 0, py::arg("end_dim") = -1)
      .def("unsqueeze", [](const Tensor& x, int64_t d) { return NoGil([&] { return Unsqueeze(x, d); }); }, py::arg("dim"))
      .def("squeeze", [](const Tensor& x, std::optional<int64_t> d) {
        return NoGil([&] { return d ? Squeeze(x, *d) : Squeeze(x); });
      }, py::arg("dim") = py::none())
      .def("narrow", [](const Tensor& x, int64_t d, int64_t s, int64_t n) { return NoGil([&] { return Narrow(x, d, s, n); }); },
           py::arg("dim"), py::arg("start"), py::arg("length"))
      .def("select", [](const Tensor& x, int64_t d, int64_t i) { return NoGil([&] { return Select(x, d, i); }); },
           py::arg("dim"), py::arg("index"))
      // torch's as_strided view and view bookkeeping (core/ops/strided_view.h): _base is the root base a view
      // aliases (None for a tensor that is not a view), _record_in_place the write autograd records through a
      // view or a shared base (tessel/_inplace.py).
      .def("as_strided", [](const Tensor& x, std::vector<int64_t> size, std::vector<int64_t> stride,
                            std::optional<int64_t> storage_offset) {
        return NoGil([&] { return AsStrided(x, size, stride, storage_offset); });
      }, py::arg("size"), py::arg("stride"), py::arg("storage_offset") = py::none())
      .def("storage_offset", [](const Tensor& x) {
        TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, !x.is_distributed(), "storage_offset: a DTensor of shape ",
                          ShapeStr(x.sizes()), " has no storage; call to_local() first");
        return x.storage_offset();
      })
      .def("_is_view", [](const Tensor& x) { return x.checked_impl()->view_base() != nullptr; })
      .def_property_readonly("_base", [](const Tensor& x) -> py::object {
        const std::shared_ptr<TensorImpl>& base = x.checked_impl()->view_base();
        return base == nullptr ? py::none() : py::cast(Tensor(base));
      })
      .def("_record_in_place", [](const Tensor& self, const Tensor& result) {
        NoGil([&] { RecordInPlace(self, result); });
      }, py::arg("result"))
      .def("_slice", [](const Tensor& x, int64_t d, int64_t s, int64_t e, int64_t step) {
        return NoGil([&] { return Slice(x, d, s, e, step); });
      })
      .def("_basic_index", &BasicIndex, py::arg("key"))
      // Tuples, as torch's chunk / split.
      .def("chunk", [](const Tensor& x, int64_t n, int64_t d) {
        return py::tuple(py::cast(NoGil([&] { return Chunk(x, n, d); })));
      }, py::arg("chunks"), py::arg("dim") = 0)
      .def("split", [](const Tensor& x, int64_t n, int64_t d) {
        return py::tuple(py::cast(NoGil([&] { return Split(x, n, d); })));
      }, py::arg("split_size"), py::arg("dim") = 0)  // torch's names: Tensor.split(split_size, dim)
      .def("split", [](const Tensor& x, std::vector<int64_t> sizes, int64_t d) {
        return py::tuple(py::cast(NoGil([&] { return SplitWithSizes(x, sizes, d); })));
      }, py::arg("split_size"), py::arg("dim") = 0);
}

void BindMath(py::class_<Tensor>& c) {
  // dtype= casts the input first, as torch's sum / mean (a float64 sum of float32 values).
  c.def("sum", [](const Tensor& x, DimArg dim, bool keep, std::optional<DType> dt) {
        auto d = Dims(dim);
        return NoGil([&] {
          // the result takes dtype= (torch's): an int8 sum wraps in int8 instead of widening to int64
          const Tensor s = Sum(dt && *dt != x.dtype() ? Cast(x, *dt) : x, d, keep);
          return dt && s.dtype() != *dt ? Cast(s, *dt) : s;
        });
      }, py::arg("dim") = py::none(), py::arg("keepdim") = false, py::kw_only(), py::arg("dtype") = py::none())
      .def("mean", [](const Tensor& x, DimArg dim, bool keep, std::optional<DType> dt) {
        auto d = Dims(dim);
        return NoGil([&] { return Mean(dt && *dt != x.dtype() ? Cast(x, *dt) : x, d, keep); });
      }, py::arg("dim") = py::none(), py::arg("keepdim") = false, py::kw_only(), py::arg("dtype") = py::none())
      .def("amax", [](const Tensor& x, DimArg dim, bool keep) { auto d = Dims(dim); return NoGil([&] { return Amax(x, d, keep); }); },
           py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def("max", [](const Tensor& x) { return NoGil([&] { return Amax(x); }); })
      .def("max", [](const Tensor& x, int64_t dim, bool keep) {
        auto [v, i] = NoGil([&] { return Max(x, dim, keep); });
        return py::make_tuple(v, i);  // torch returns (values, indices)
      }, py::arg("dim"), py::arg("keepdim") = false)
      .def("norm", [](const Tensor& x, const py::object& p_arg, DimArg dim, bool keep) {
        // torch's p: a number, or "fro" (the 2-norm over the dims: Frobenius for two of them).
        double p = 2.0;
        if (py::isinstance<py::str>(p_arg)) {
          const std::string name = p_arg.cast<std::string>();
          if (name == "nuc") {  // the nuclear norm of a matrix (two dims, the last two by default): torch's
            const py::object dims = dim.has_value() ? py::cast(Dims(dim)) : py::cast(std::vector<int64_t>{-2, -1});
            return py::module_::import("tessel.linalg").attr("matrix_norm")(x, "nuc", dims, keep).cast<Tensor>();
          }
          TESSEL_CHECK(name == "fro", "norm: p='", name, "' is not supported (a number, 'fro' or 'nuc')");
        } else if (!p_arg.is_none()) {
          p = p_arg.cast<double>();
        }
        if (p <= 0.0) {  // 0: the count of nonzero entries (cdist / pdist with p = 0 use it); -inf: min |x|; p < 0
          return py::module_::import("tessel.linalg").attr("vector_norm")(x, p, py::cast(dim), keep).cast<Tensor>();
        }
        auto d = Dims(dim);
        return NoGil([&] { return Norm(x, p, d, keep); });
      }, py::arg("p") = 2.0, py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def("softmax", [](const Tensor& x, int64_t d, std::optional<DType> dt) {
        return NoGil([&] { return Softmax(dt && *dt != x.dtype() ? Cast(x, *dt) : x, d); });
      }, py::arg("dim"), py::arg("dtype") = py::none())
      .def("log_softmax", [](const Tensor& x, int64_t d, std::optional<DType> dt) {
        return NoGil([&] { return LogSoftmax(dt && *dt != x.dtype() ? Cast(x, *dt) : x, d); });
      }, py::arg("dim"), py::arg("dtype") = py::none())
      .def("pow", [](const Tensor& x, double e) { return NoGil([&] { return Pow(x, e); }); }, py::arg("exponent"))
      .def("pow", [](py::object x, const Tensor& e) { return TensorPow(std::move(x), py::cast(e)); },
           py::arg("exponent"))
      .def("clamp", [](const Tensor& x, std::optional<double> lo, std::optional<double> hi) {
        return NoGil([&] { return Clamp(x, lo, hi); });
      }, py::arg("min") = py::none(), py::arg("max") = py::none())
      .def("to", [](const Tensor& x, DType d) { return NoGil([&] { return x.dtype() == d ? x : Cast(x, d); }); },
           py::arg("dtype"));
  // One-argument functions: x.exp(), x.tanh(), ...
  using Fn = Tensor (*)(const Tensor&);
  const std::pair<const char*, Fn> unary[] = {
      {"exp", &Exp}, {"log", &Log}, {"sqrt", &Sqrt}, {"rsqrt", &Rsqrt}, {"tanh", &Tanh}, {"sigmoid", &Sigmoid},
      {"relu", &Relu}, {"silu", &Silu}, {"abs", &Abs}, {"neg", &Neg}, {"sin", &Sin}, {"cos", &Cos}, {"erf", &Erf},
      {"log1p", &Log1p}, {"expm1", &Expm1}, {"exp2", &Exp2}, {"floor", &Floor}, {"ceil", &Ceil}, {"_round", &Round}};
  for (const auto& [name, fn] : unary) {
    c.def(name, [fn = fn](const Tensor& x) { return NoGil([&] { return fn(x); }); });
  }
  const std::pair<const char*, DType> casts[] = {{"float", DType::kFloat32}, {"double", DType::kFloat64},
                                                 {"half", DType::kFloat16}, {"bfloat16", DType::kBFloat16},
                                                 {"long", DType::kInt64},   {"int", DType::kInt32},
                                                 {"bool", DType::kBool},    {"byte", DType::kUInt8},
                                                 {"char", DType::kInt8},    {"short", DType::kInt16}};
  for (const auto& [name, dt] : casts) {
    c.def(name, [dt = dt](const Tensor& x) { return NoGil([&] { return x.dtype() == dt ? x : Cast(x, dt); }); });
  }
}

}  // namespace

void BindTensorOps(py::module_& m) {
  auto c = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  BindArithmetic(c);
  BindComparisons(c);
  BindViews(c);
  BindMath(c);
  // torch.any / torch.all of a plain CPU tensor over everything or one dim, without the four composed ops
  // (11.3 µs a call against torch's 1.4); None for the rest (tessel/_extra.py composes those).
  m.def("_any_all", [](const Tensor& x, std::optional<int64_t> dim, bool keepdim, bool all) -> py::object {
    Tensor out = AnyAllLocal(x, dim ? std::vector<int64_t>{*dim} : std::vector<int64_t>{}, keepdim, all);
    return out.defined() ? py::cast(out) : py::none();
  });
  // torch.promote_types (tessel/_namespace.py): the same lattice the binary ops promote on.
  m.def("_promote_types", &PromoteTypes, py::arg("type1"), py::arg("type2"));
  m.def("_check_number_fits", &CheckNumberFits, py::arg("value"), py::arg("dtype"));
}

}  // namespace tessel::bindings
