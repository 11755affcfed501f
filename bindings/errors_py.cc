// bindings/errors_py.cc — the one table that turns a tessel::Error into a Python exception
// (STYLE.md 18): the code picks the exception type, the message is passed unchanged.
//
//   kInvalidArgument → InvalidArgumentError, a subclass of both ValueError and RuntimeError (torch raises
//   RuntimeError for bad shapes and autograd misuse; a port's `except RuntimeError` must still catch it)
//   kOutOfRange → IndexError     kUnimplemented → NotImplementedError
//   kDeadlineExceeded → TimeoutError  kNotFound → KeyError         everything else → RuntimeError
//
// Invariant: every bound call raises through this table; no binding builds its own exception from an Error.
#include "bindings/bind.h"
#include "core/base/error.h"

namespace tessel::bindings {

namespace {

PyObject* g_invalid_argument = nullptr;  // tessel.InvalidArgumentError (BindErrors)

PyObject* ExceptionFor(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return g_invalid_argument != nullptr ? g_invalid_argument : PyExc_ValueError;
    case ErrorCode::kOutOfRange: return PyExc_IndexError;
    case ErrorCode::kUnimplemented: return PyExc_NotImplementedError;
    case ErrorCode::kDeadlineExceeded: return PyExc_TimeoutError;
    case ErrorCode::kNotFound: return PyExc_KeyError;
    default: return PyExc_RuntimeError;
  }
}

}  // namespace

void BindErrors(py::module_& m) {
  py::object bases = py::make_tuple(py::handle(PyExc_ValueError), py::handle(PyExc_RuntimeError));
  PyObject* cls = PyErr_NewException("tessel._C.InvalidArgumentError", bases.ptr(), nullptr);
  if (cls == nullptr) throw py::error_already_set();
  g_invalid_argument = cls;  // kept for the process's lifetime (module attribute below holds a reference)
  m.attr("InvalidArgumentError") = py::handle(cls);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      PyErr_SetString(ExceptionFor(e.code()), e.what());
    }
  });
}

}  // namespace tessel::bindings
