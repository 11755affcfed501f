// bindings/tensor_attrs.cc — torch's Python state on tensors: a tensor carries attributes (`x.tag = 1`,
// `x.__dict__`, `vars(x)`, `del x.tag`) that every Python object of it sees, and `.grad` hands out the same
// Python object while one is alive (`p.grad is p.grad`; after `p.grad = g`, `p.grad is g`).
//
// Why by hand: tessel._C.Tensor is a pybind11 value type, so each return makes a new Python object; an attribute
// set on one of them was refused (no __dict__), and `p.grad` was a new object at every read. torch keeps one
// PyObject per TensorImpl, whose __dict__ is the tensor's. Here the attributes live with the impl
// (TensorImpl::binding_state) and the type's getattr / setattr slots read and write them, so all objects of one
// tensor share them as torch's one object would. pybind11's py::dynamic_attr would give each object a dict of
// its own (lost at the next `p.grad`) and trips pybind11 2.10's managed-dict bug for Python subclasses on Python
// 3.11 (nn_py.cc). A Python subclass instance (Parameter) keeps its own __dict__, as before.
//
// Lifetime: an impl can die on any thread (the autograd engine, a rank thread, a comm thread). Its state's Python
// objects are queued and released by the next thread that reads or writes a tensor attribute here, or by a pending
// call (Py_AddPendingCall): a thread never waits for the GIL in a destructor (it could be one another thread holding
// the GIL is waiting for), and no finalizer runs inside the C++ code that dropped the impl. A tensor that holds
// itself in its attributes (`x.me = x`) is a cycle the collector does not see and is never freed.
//
// Example (Python):
//   x = tessel.ones(2); x.tag = "input"; y = f(x)   # f sees x.tag
//   g = p.grad; g.scale = 2; p.grad.scale          # 2: the same tensor
#include <Python.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "bindings/bind.h"
#include "core/tensor/tensor.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::bindings {
namespace {

struct PyState {
  PyObject* dict = nullptr;     // owned: the tensor's attributes, made on the first write
  PyObject* wrapper = nullptr;  // owned weak reference: the Python object last handed out as this tensor
};

void Free(PyState* s) {
  Py_XDECREF(s->dict);
  Py_XDECREF(s->wrapper);
  delete s;
}

// States released on threads without the GIL, waiting for one that holds it. Never destroyed: an impl may die
// during static destruction.
struct Pending {
  std::mutex mu;
  std::vector<PyState*> states;
};
Pending& PendingStates() {
  static auto* pending = new Pending();
  return *pending;
}
std::atomic<bool> any_pending{false}, drain_scheduled{false};

// With the GIL held: releases the states queued by threads that did not hold it.
int DrainPending(void* /*unused*/) {
  drain_scheduled = false;
  if (!any_pending.exchange(false)) return 0;
  std::vector<PyState*> states;
  {
    std::lock_guard<std::mutex> lock(PendingStates().mu);
    states.swap(PendingStates().states);
  }
  for (PyState* s : states) Free(s);
  return 0;
}

// Always deferred, even on a thread that holds the GIL: an attribute's finalizer (__del__, or more tensors
// released through it) must not run inside the C++ code that dropped the impl (a container being mutated, a
// mutex held).
void Release(PyState* s) {
  if (!Py_IsInitialized()) {  // interpreter gone: nothing left to release
    delete s;
    return;
  }
  {
    std::lock_guard<std::mutex> lock(PendingStates().mu);
    PendingStates().states.push_back(s);
  }
  any_pending = true;
  if (!drain_scheduled.exchange(true) && Py_AddPendingCall(DrainPending, nullptr) != 0) drain_scheduled = false;
}

PyState* StateOf(const TensorImpl* impl) {
  return impl == nullptr ? nullptr : static_cast<PyState*>(impl->binding_state().get());
}

PyState& EnsureState(TensorImpl* impl) {
  if (PyState* s = StateOf(impl)) return *s;
  auto* s = new PyState();
  impl->set_binding_state(std::shared_ptr<void>(s, [](void* p) { Release(static_cast<PyState*>(p)); }));
  return *s;
}

// The tessel Tensor inside a Python object of the Tensor type (or a subclass), or nullptr.
const Tensor* TensorOf(PyObject* obj) {
  static const py::detail::type_info* info = py::detail::get_type_info(typeid(Tensor));
  if (!PyObject_TypeCheck(obj, info->type)) return nullptr;
  auto* inst = reinterpret_cast<py::detail::instance*>(obj);
  py::detail::value_and_holder vh = inst->get_value_and_holder(info, /*throw_if_missing=*/false);
  return vh && vh.value_ptr() != nullptr ? vh.value_ptr<Tensor>() : nullptr;
}

TensorImpl* ImplOf(PyObject* obj) {
  const Tensor* t = TensorOf(obj);
  return t == nullptr ? nullptr : t->impl();
}

bool IsDictName(PyObject* name) {
  return PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, "__dict__") == 0;
}

// A data descriptor of the type (a property: grad, requires_grad, data), which wins over the attributes.
bool IsDataDescriptor(PyObject* self, PyObject* name) {
  PyObject* descr = PyUnicode_Check(name) ? _PyType_Lookup(Py_TYPE(self), name) : nullptr;  // borrowed
  return descr != nullptr && Py_TYPE(descr)->tp_descr_set != nullptr;
}

PyObject* NoAttribute(PyObject* self, PyObject* name) {
  PyErr_Format(PyExc_AttributeError, "'%.100s' object has no attribute '%U'", Py_TYPE(self)->tp_name, name);
  return nullptr;
}

// Python's lookup order, with the tensor's attributes where an instance __dict__ would be: data descriptors,
// then the attributes, then methods and class attributes. A subclass instance (its own __dict__ first) falls
// back to the tensor's attributes.
PyObject* TensorGetAttro(PyObject* self, PyObject* name) {
  if (any_pending) DrainPending(nullptr);
  TensorImpl* impl = ImplOf(self);
  PyState* s = StateOf(impl);
  const bool own_dict = Py_TYPE(self)->tp_dictoffset != 0;
  if (s != nullptr && s->dict != nullptr && !own_dict && !IsDataDescriptor(self, name)) {
    if (PyObject* v = PyDict_GetItemWithError(s->dict, name)) return Py_NewRef(v);
    if (PyErr_Occurred()) return nullptr;
  }
  PyObject* r = PyObject_GenericGetAttr(self, name);
  if (r != nullptr || impl == nullptr || !PyErr_ExceptionMatches(PyExc_AttributeError)) return r;
  if (s != nullptr && s->dict != nullptr && own_dict) {
    PyObject *type, *value, *trace;
    PyErr_Fetch(&type, &value, &trace);  // (a lookup may run a key's __eq__: no exception may be pending)
    if (PyObject* v = PyDict_GetItemWithError(s->dict, name)) {
      Py_XDECREF(type), Py_XDECREF(value), Py_XDECREF(trace);
      return Py_NewRef(v);
    }
    if (PyErr_Occurred()) {
      Py_XDECREF(type), Py_XDECREF(value), Py_XDECREF(trace);
      return nullptr;
    }
    PyErr_Restore(type, value, trace);
  }
  if (own_dict || !IsDictName(name)) return nullptr;
  PyErr_Clear();  // a plain tensor's __dict__: its attributes (made empty on first read, as torch's)
  PyState& st = EnsureState(impl);
  if (st.dict == nullptr && (st.dict = PyDict_New()) == nullptr) return nullptr;
  return Py_NewRef(st.dict);
}

int TensorSetAttro(PyObject* self, PyObject* name, PyObject* value) {
  if (any_pending) DrainPending(nullptr);
  TensorImpl* impl = ImplOf(self);
  if (Py_TYPE(self)->tp_dictoffset != 0 || impl == nullptr || !PyUnicode_Check(name) ||
      IsDataDescriptor(self, name)) {
    return PyObject_GenericSetAttr(self, name, value);
  }
  PyState& s = EnsureState(impl);
  if (IsDictName(name)) {
    if (value == nullptr || !PyDict_Check(value)) {
      PyErr_Format(PyExc_TypeError, "__dict__ must be set to a dictionary, not a '%.200s'",
                   value == nullptr ? "NoneType" : Py_TYPE(value)->tp_name);
      return -1;
    }
    Py_XSETREF(s.dict, Py_NewRef(value));
    return 0;
  }
  if (value == nullptr) {
    if (s.dict != nullptr && PyDict_DelItem(s.dict, name) == 0) return 0;
    if (s.dict != nullptr && !PyErr_ExceptionMatches(PyExc_KeyError)) return -1;
    PyErr_Clear();
    NoAttribute(self, name);
    return -1;
  }
  if (s.dict == nullptr && (s.dict = PyDict_New()) == nullptr) return -1;
  return PyDict_SetItem(s.dict, name, value);
}

}  // namespace

py::object TensorObject(const Tensor& t) {
  if (!t.defined()) return py::none();
  if (PyState* s = StateOf(t.impl()); s != nullptr && s->wrapper != nullptr) {
    PyObject* obj = PyWeakref_GetObject(s->wrapper);  // borrowed; None once it died
    if (obj != Py_None && ImplOf(obj) == t.impl()) return py::reinterpret_borrow<py::object>(obj);
  }
  py::object obj = py::cast(t);
  RememberTensorObject(obj);
  return obj;
}

void RememberTensorObject(py::handle obj) {
  TensorImpl* impl = ImplOf(obj.ptr());
  if (impl == nullptr) return;
  PyObject* ref = PyWeakref_NewRef(obj.ptr(), nullptr);
  if (ref == nullptr) {
    PyErr_Clear();
    return;
  }
  Py_XSETREF(EnsureState(impl).wrapper, ref);
}

void CarryTensorAttributes(const Tensor& from, const Tensor& to) {
  if (from.impl() == nullptr || to.impl() == nullptr || from.impl() == to.impl()) return;
  const PyState* s = StateOf(from.impl());
  if (s == nullptr || s->dict == nullptr) return;
  PyState& dst = EnsureState(to.impl());
  Py_XSETREF(dst.dict, Py_NewRef(s->dict));
}

py::object TensorAttributes(const Tensor& t) {
  const PyState* s = StateOf(t.impl());
  return s == nullptr || s->dict == nullptr ? py::object(py::none()) : py::reinterpret_borrow<py::object>(s->dict);
}

void InstallTensorAttributes(py::handle tensor_type) {
  auto* type = reinterpret_cast<PyTypeObject*>(tensor_type.ptr());
  type->tp_getattro = TensorGetAttro;
  type->tp_setattro = TensorSetAttro;
  PyType_Modified(type);
}

}  // namespace tessel::bindings
