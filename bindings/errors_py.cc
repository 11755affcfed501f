// bindings/errors_py.cc — the one table that turns a tessel::Error into a Python exception
// (STYLE.md 18): the code picks the exception type, the message is passed unchanged.
//
//   kInvalidArgument → ValueError     kOutOfRange → IndexError     kUnimplemented → NotImplementedError
//   kDeadlineExceeded → TimeoutError  kNotFound → KeyError         everything else → RuntimeError
//
// Invariant: every bound call raises through this table; no binding builds its own exception from an Error.
#include "bindings/bind.h"
#include "core/base/error.h"

namespace tessel::bindings {

namespace {

PyObject* ExceptionFor(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return PyExc_ValueError;
    case ErrorCode::kOutOfRange: return PyExc_IndexError;
    case ErrorCode::kUnimplemented: return PyExc_NotImplementedError;
    case ErrorCode::kDeadlineExceeded: return PyExc_TimeoutError;
    case ErrorCode::kNotFound: return PyExc_KeyError;
    default: return PyExc_RuntimeError;
  }
}

}  // namespace

void BindErrors(py::module_& /*m*/) {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      PyErr_SetString(ExceptionFor(e.code()), e.what());
    }
  });
}

}  // namespace tessel::bindings
