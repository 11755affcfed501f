// bindings/errors_py.cc — the one table that turns a tessel::Error into a Python exception
// (STYLE.md 18): the code picks the exception type, the message is passed unchanged.
//
//   kInvalidArgument → InvalidArgumentError, a subclass of both ValueError and RuntimeError (torch raises
//   RuntimeError for bad shapes and autograd misuse; a port's `except RuntimeError` must still catch it)
//   kOutOfRange → IndexError     kUnimplemented → NotImplementedError     kNotFound → KeyError
//   kDeadlineExceeded → DistTimeoutError: a subclass of torch's DistBackendError (an NCCL watchdog's
//     timeout), DistStoreError (a store wait's) and TimeoutError; every one is a RuntimeError, as gloo's
//     timeouts are in torch, so `except RuntimeError`, `except dist.DistError` and `except TimeoutError` all
//     catch it (the code alone does not say whether a store or a collective timed out)
//   kAborted (a peer failed, ranks disagreed) → DistBackendError     everything else → RuntimeError
// torch's hierarchy is kept: DistError(RuntimeError) with DistBackendError, DistNetworkError and
// DistStoreError under it, QueueEmptyError under DistStoreError (tessel.distributed exports them).
//
// Invariant: every bound call raises through this table; no binding builds its own exception from an Error.
#include "bindings/bind.h"
#include "core/base/error.h"

namespace tessel::bindings {

namespace {

PyObject* g_invalid_argument = nullptr;  // tessel.InvalidArgumentError (BindErrors)
PyObject* g_dist_backend = nullptr;      // DistBackendError
PyObject* g_dist_timeout = nullptr;      // DistTimeoutError

PyObject* ExceptionFor(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return g_invalid_argument != nullptr ? g_invalid_argument : PyExc_ValueError;
    case ErrorCode::kOutOfRange: return PyExc_IndexError;
    case ErrorCode::kUnimplemented: return PyExc_NotImplementedError;
    case ErrorCode::kDeadlineExceeded: return g_dist_timeout != nullptr ? g_dist_timeout : PyExc_TimeoutError;
    case ErrorCode::kNotFound: return PyExc_KeyError;
    case ErrorCode::kAborted: return g_dist_backend != nullptr ? g_dist_backend : PyExc_RuntimeError;
    default: return PyExc_RuntimeError;
  }
}

// A new exception class tessel._C.<name> with `bases`, kept for the process's lifetime (the module attribute
// holds a reference).
PyObject* NewException(py::module_& m, const char* name, const py::tuple& bases) {
  const std::string qualified = std::string("tessel._C.") + name;
  PyObject* cls = PyErr_NewException(qualified.c_str(), bases.ptr(), nullptr);
  if (cls == nullptr) throw py::error_already_set();
  m.attr(name) = py::reinterpret_steal<py::object>(cls);
  return cls;
}

}  // namespace

void BindErrors(py::module_& m) {
  const auto h = [](PyObject* cls) { return py::handle(cls); };
  g_invalid_argument =
      NewException(m, "InvalidArgumentError", py::make_tuple(h(PyExc_ValueError), h(PyExc_RuntimeError)));
  PyObject* dist = NewException(m, "DistError", py::make_tuple(h(PyExc_RuntimeError)));
  g_dist_backend = NewException(m, "DistBackendError", py::make_tuple(h(dist)));
  NewException(m, "DistNetworkError", py::make_tuple(h(dist)));
  PyObject* store = NewException(m, "DistStoreError", py::make_tuple(h(dist)));
  NewException(m, "QueueEmptyError", py::make_tuple(h(store)));
  g_dist_timeout =
      NewException(m, "DistTimeoutError", py::make_tuple(h(g_dist_backend), h(store), h(PyExc_TimeoutError)));
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      PyErr_SetString(ExceptionFor(e.code()), e.what());
    }
  });
}

}  // namespace tessel::bindings
