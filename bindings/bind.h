// bindings/bind.h — what the pybind11 translation units of tessel._C share: one Bind* function per area
// (each in its own *_py.cc so no single TU is slow to compile), dtype conversion, and NoGil.
//
// Invariant: bindings are thin (STYLE.md 28): convert arguments with the GIL held, then release it inside
// the lambda (NoGil) around the C++ call; never `call_guard<gil_scoped_release>` on a py::init factory or
// on a function whose arguments convert implicitly. Errors are translated in one place (errors_py.cc).
//
// Example:
//   m.def("exp", [](const Tensor& x) { return NoGil([&] { return Exp(x); }); });
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "core/tensor/dtype.h"
#include "core/tensor/random.h"

namespace tessel::bindings {

namespace py = pybind11;

// Runs f with the GIL released (the arguments are already converted) and returns its result.
template <typename F>
auto NoGil(F&& f) -> decltype(f()) {
  py::gil_scoped_release release;
  return std::forward<F>(f)();
}

// A Python object held by C++ (hooks, fully_shard's callables, autograd Functions' backward, what a
// saved-tensor pack hook returned): copies share it; the last one drops it with the GIL held (nn_py.cc).
std::shared_ptr<py::object> ShareCallable(py::object fn);

// torch's Python state on tensors (tensor_attrs.cc): attributes kept with the tensor itself, so every Python
// object of one tensor sees them. InstallTensorAttributes sets the Tensor type's getattr / setattr slots;
// TensorObject(t) is the live Python object last handed out for t (RememberTensorObject) or a new one (None for
// an undefined tensor): `.grad` returns the same object while one is alive; CarryTensorAttributes gives `to`
// the attributes of `from` (a Python object rebound to another tensor keeps its attributes); TensorAttributes
// is t's attribute dict or None, without making one.
void InstallTensorAttributes(py::handle tensor_type);
py::object TensorObject(const Tensor& t);
void RememberTensorObject(py::handle obj);
void CarryTensorAttributes(const Tensor& from, const Tensor& to);
py::object TensorAttributes(const Tensor& t);

// This thread's default generator (torch's default generator; each rank thread has its own, so ranks that
// seed alike draw alike). tessel.manual_seed reseeds it.
Generator& DefaultGenerator();
inline Generator& GenOrDefault(Generator* gen) { return gen != nullptr ? *gen : DefaultGenerator(); }
// RMSNorm's default eps (eps=None) in torch: finfo of the compute type, so float64's for float64 and
// float32's for float32, bfloat16 and float16 (which compute in float32; their own finfo eps, 7.8e-3 and
// 9.8e-4, gave 0.112 where torch gives 0.730 on inputs near 0.01).
inline double MachineEpsilon(DType dtype) {
  return dtype == DType::kFloat64 ? 2.220446049250313e-16 : 1.1920928955078125e-07;
}

// torch's type promotion between two tensors (torch.result_type): bool < integer < floating; within the
// dimensioned tensors (and within the 0-d ones) the wider type (float16 with bfloat16: float32); a 0-d
// tensor decides only when it is of a higher category (x_f32 + tensor(1., float64) stays float32,
// x_int + tensor(0.5) is float32). Tensor methods and F.where cast their operands with it; C++ ops
// themselves stay strict (core/ops/elementwise.h).
DType ResultType(const Tensor& a, const Tensor& b);
// torch.get_default_dtype / set_default_dtype (tensor_py.cc): the floating dtype of Python's factories, layers
// and float-scalar promotion when none is given; process-wide, as torch's (float32 until set).
DType DefaultFloatDType();
void SetDefaultFloatDType(DType dtype);
// Writes `full` (a whole parameter's values, the same on every rank) into parameter `p` outside autograd: a
// dense `p` is overwritten; a DTensor one (under fully_shard or tensor parallel) gets its own piece, cut as
// DistributeTensor cuts it (Replicate axes take rank 0's values), so an initializer run after sharding gives
// the values it gives the whole tensor before (nn_py.cc).
void AssignFull(const Tensor& p, const Tensor& full);
std::pair<Tensor, Tensor> Promoted(const Tensor& a, const Tensor& b);
Tensor FromArray(const py::array& in);  // tensor_py.cc: a copy of a numpy array, its dtype kept

void BindErrors(py::module_& m);       // errors_py.cc: ErrorCode → Python exception table
void BindTensor(py::module_& m);       // tensor_py.cc: dtype, Tensor, creation, numpy, grad mode, RNG
void BindTensorOps(py::module_& m);    // tensor_ops_py.cc: Tensor methods named like torch's
void BindFastInPlace(py::module_& m);  // inplace_py.cc: the C++ front of add_, mul_, lerp_, addcmul_, ...
void BindFunctional(py::module_& m);   // functional_py.cc: torch.nn.functional's names
void BindModules(py::module_& m);      // nn_py.cc: subclassable Module, layers, GPT
void BindOptim(py::module_& m);        // optim_py.cc: SGD, AdamW, clipping, schedule
void BindDistributed(py::module_& m);  // distributed_py.cc: process groups, mesh, DTensor, fsdp
void BindCheckpoint(py::module_& m);   // checkpoint_py.cc: save / load / state dicts
void BindTensorParallel(py::module_& m);  // tp_py.cc: ParallelStyles, parallelize_module, loss_parallel
void BindPipelining(py::module_& m);   // pipelining_py.cc: schedules, action IR, simulator, GPT pipeline
void BindPlanner(py::module_& m);      // planner_py.cc: the ledger planner (_C._planner)

// The Python object of each dtype: the enum's own value objects, recorded by BindDTypes (tensor_py.cc);
// nullptr before. A borrowed reference, alive as long as the interpreter.
PyObject* DTypeObject(DType dtype);
// Gradients for a Python hook (module and node hooks): a tuple, None where undefined (an output nobody used), as
// torch passes them. tensor_py.cc.
py::tuple GradsForPython(const TensorList& grads);

// A Python int operand, or a numpy integer scalar (np.int64 from indexing an array, ...) taken as the int it
// holds: a parameter of this type makes an overload take both (pybind11's py::int_ takes Python ints only, so a
// numpy int fell through to the float overload: int tensor + np.int64(1) was float32, torch's int64).
struct IntLike {
  py::int_ value;
};

// An operator overload's operand that is a complex number: a Python complex or a numpy complex scalar (t * 1j).
// Its caster takes nothing else, in either of pybind's passes, so the overloads before it keep every real case.
struct ComplexNumber {
  py::object value;
};

}  // namespace tessel::bindings

namespace pybind11::detail {
template <>
struct type_caster<tessel::bindings::IntLike> {
  PYBIND11_TYPE_CASTER(tessel::bindings::IntLike, const_name("int"));
  bool load(handle src, bool /*convert*/) {
    PyObject* o = src.ptr();
    if (PyLong_Check(o)) {
      value.value = reinterpret_borrow<int_>(src);
      return true;
    }
    // numpy integer scalars: an __index__ and no float value (a Tensor operand never gets here: the Tensor
    // overloads come first).
    if (PyFloat_Check(o) || !PyIndex_Check(o) || std::string_view(Py_TYPE(o)->tp_name).find("numpy.") != 0) {
      return false;
    }
    PyObject* i = PyNumber_Index(o);
    if (i == nullptr) {
      PyErr_Clear();
      return false;
    }
    value.value = reinterpret_steal<int_>(i);
    return true;
  }
};
template <>
struct type_caster<tessel::bindings::ComplexNumber> {
  PYBIND11_TYPE_CASTER(tessel::bindings::ComplexNumber, const_name("complex"));
  bool load(handle src, bool /*convert*/) {
    if (!PyComplex_Check(src.ptr()) && std::string_view(Py_TYPE(src.ptr())->tp_name).find("numpy.complex") != 0) {
      return false;
    }
    value.value = reinterpret_borrow<object>(src);
    return true;
  }
};
}  // namespace pybind11::detail

// DType to Python returns the one object per dtype (DTypeObject) instead of a new enum instance per cast:
// torch's dtypes are singletons (`x.dtype is torch.float32`, `mask.dtype is torch.bool` hold there and held
// nowhere here), and `x.dtype` allocates nothing (0.42 µs a read, against torch's 0.06). Python to DType is
// pybind11's enum conversion, unchanged. Every TU of tessel._C includes this file, so all of them use it.
namespace pybind11::detail {
template <>
class type_caster<tessel::DType> : public type_caster_base<tessel::DType> {
 public:
  static handle cast(const tessel::DType& src, return_value_policy policy, handle parent) {
    if (PyObject* o = tessel::bindings::DTypeObject(src)) return handle(o).inc_ref();
    return type_caster_base<tessel::DType>::cast(src, policy, parent);  // while BindDTypes makes them
  }
  static handle cast(const tessel::DType* src, return_value_policy policy, handle parent) {
    if (src == nullptr) return none().release();
    return cast(*src, policy, parent);
  }
};
}  // namespace pybind11::detail
