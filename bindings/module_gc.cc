// bindings/module_gc.cc — the cycle collector's view of the Python objects a module's C++ side holds.
//
// A module's Python hooks, computed-parameter functions, Parameter objects and anchored children are held by
// its C++ object (nn::Module), which Python's collector cannot see. A hook that reaches back to its module (a
// bound method of the model, a closure over it, `p._owner = m`) then made a cycle no collection could find,
// and the model lived until exit; torch frees it. Here the module's Python type traverses what its C++ side
// holds (tp_traverse) and, once the collector finds the object unreachable, lets go of it (tp_clear).
//
// The rule that keeps this sound: a module object reports its C++ side's references only while it owns that
// C++ side for the collector's purposes, i.e. while every shared owner of the nn::Module is either this
// object's holder or a parent that registered it from Python and itself keeps this object reachable (its
// C++ anchors hold the object, or its Python object has the child in its dict and owns its own C++ side by
// the same rule). Then the held objects are reachable exactly when this object is. Any other owner (a
// module C++ created, a registration made in C++) makes the module report nothing, so the objects look
// referenced from outside and stay: a leak, never a wrong free. The answer is computed once per collection
// (gc.callbacks brackets each one), so every traversal pass of a collection sees the same graph even while
// threads without the GIL copy or drop the modules' shared pointers.
//
// Written here and not taken from pybind11: pybind11 2.10 offers custom_type_setup, the hook this uses,
// but no model of objects owned through C++ shared pointers.
#include "bindings/module_gc.h"

#include <algorithm>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tessel::bindings {
namespace {

using nn::Module;

// What Python asked `module`'s C++ side to keep, and the parents that took it from Python. Weak pointers
// only: an entry never keeps anything alive, and a freed module's address can be reused (`module` tells).
struct Holds {
  std::weak_ptr<const Module> module;
  std::vector<std::pair<std::weak_ptr<py::object>, py::object*>> objects;
  std::vector<std::pair<std::weak_ptr<const Module>, const Module*>> parents;
};

struct GcState {
  std::unordered_map<const Module*, Holds> holds;
  size_t prune_at = 1024;
  bool collecting = false;                            // between gc.callbacks' "start" and "stop"
  std::unordered_map<const Module*, bool> decided;    // this collection's answers
  PyTypeObject* module_type = nullptr;                // tessel.nn.Module
};

// Every access holds the GIL. Never freed: the collector can run until the interpreter's last moment.
GcState& State() {
  static auto* state = new GcState;
  return *state;
}

bool SameControlBlock(const std::weak_ptr<const Module>& a, const std::weak_ptr<const Module>& b) {
  return !a.owner_before(b) && !b.owner_before(a);
}

// m's entry, or null; a stale entry (another module once at this address) is reset when `create`.
Holds* Find(const Module& m, bool create) {
  const std::weak_ptr<const Module> self = m.weak_from_this();
  if (self.expired()) return nullptr;  // no shared owner (a root C++ holds alone): nothing to report
  GcState& s = State();
  auto it = s.holds.find(&m);
  if (it != s.holds.end() && SameControlBlock(it->second.module, self)) return &it->second;
  if (!create) return nullptr;
  if (s.holds.size() >= s.prune_at) {  // drop the entries of freed modules now and then
    std::erase_if(s.holds, [](const auto& e) { return e.second.module.expired(); });
    s.prune_at = std::max<size_t>(1024, 2 * s.holds.size());
  }
  Holds& h = s.holds[&m];
  h = Holds{self, {}, {}};
  return &h;
}

const Module* ModuleOf(PyObject* self) {
  auto* inst = reinterpret_cast<py::detail::instance*>(self);
  const py::detail::value_and_holder v_h = inst->get_value_and_holder();
  if (v_h.value_ptr() == nullptr || !v_h.holder_constructed()) return nullptr;  // before __init__, non-owning
  try {
    return py::handle(self).cast<const Module*>();
  } catch (const py::cast_error&) {
    return nullptr;
  }
}

// The Python object that co-owns `m` (holder constructed), or null.
PyObject* OwningObjectOf(const Module* m) {
  auto& instances = py::detail::get_internals().registered_instances;
  const auto range = instances.equal_range(static_cast<const void*>(m));
  for (auto it = range.first; it != range.second; ++it) {
    PyObject* obj = reinterpret_cast<PyObject*>(it->second);
    if (it->second->get_value_and_holder().holder_constructed() &&
        PyObject_TypeCheck(obj, State().module_type)) {
      return obj;
    }
  }
  return nullptr;
}

bool HasDict(PyObject* obj) {
  const PyTypeObject* t = Py_TYPE(obj);
  return t->tp_dictoffset != 0 || (t->tp_flags & Py_TPFLAGS_MANAGED_DICT) != 0;
}

// Whether parent's C++ side holds `obj` itself (an anchor, or anything else it keeps).
bool CppHolds(const Module& parent, PyObject* obj) {
  const Holds* h = Find(parent, /*create=*/false);
  if (h == nullptr) return false;
  return std::any_of(h->objects.begin(), h->objects.end(),
                     [&](const auto& e) { return !e.first.expired() && e.second->ptr() == obj; });
}

const Module* Owns(PyObject* self, int depth);

bool Decide(PyObject* self, const Module& m, int depth) {
  const long owners = m.weak_from_this().use_count();
  if (owners == 1) return true;  // this object's holder alone
  const Holds* h = Find(m, /*create=*/false);
  if (h == nullptr) return false;
  long shadowed = 0;
  std::vector<const Module*> seen;
  for (const auto& [weak, parent] : h->parents) {
    if (weak.expired() || std::find(seen.begin(), seen.end(), parent) != seen.end()) continue;
    seen.push_back(parent);
    long registrations = 0;  // NamedChildren only reads; it is non-const because it hands out Module*
    for (const auto& [name, child] : const_cast<Module*>(parent)->NamedChildren()) registrations += child == &m;
    if (registrations == 0) continue;
    bool keeps_self = CppHolds(*parent, self);
    if (!keeps_self) {
      PyObject* parent_obj = OwningObjectOf(parent);
      keeps_self = parent_obj != nullptr && HasDict(parent_obj) && Owns(parent_obj, depth + 1) != nullptr;
    }
    if (!keeps_self) return false;
    shadowed += registrations;
  }
  return owners == 1 + shadowed;
}

// self's module when `self` reports (and may clear) what the module's C++ side holds (the rule at the top),
// else null.
const Module* Owns(PyObject* self, int depth) {
  const Module* m = depth > 64 ? nullptr : ModuleOf(self);
  if (m == nullptr) return nullptr;
  GcState& s = State();
  if (s.collecting) {
    const auto it = s.decided.find(m);
    if (it != s.decided.end()) return it->second ? m : nullptr;
  }
  const bool owns = Decide(self, *m, depth);
  if (s.collecting) s.decided.emplace(m, owns);
  return owns ? m : nullptr;
}

int VisitHeld(PyObject* self, visitproc visit, void* arg) {
  const Module* m = Owns(self, 0);
  const Holds* h = m == nullptr ? nullptr : Find(*m, /*create=*/false);
  if (h == nullptr) return 0;
  for (const auto& [weak, object] : h->objects) {
    if (!weak.expired()) Py_VISIT(object->ptr());
  }
  return 0;
}

void ClearHeld(PyObject* self) {
  const Module* m = Owns(self, 0);
  Holds* h = m == nullptr ? nullptr : Find(*m, /*create=*/false);
  if (h == nullptr) return;
  std::vector<py::object> dropped;  // released after the registry is consistent: a release can run Python
  for (auto& [weak, object] : h->objects) {
    if (!weak.expired()) dropped.push_back(std::exchange(*object, py::none()));
  }
  h->objects.clear();
}

extern "C" int ModuleTraverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));  // a heap type's instances reference it (Python 3.9+)
  return VisitHeld(self, visit, arg);
}

extern "C" int ModuleClear(PyObject* self) {
  ClearHeld(self);
  return 0;
}

// The C++ layers (dynamic attributes): pybind11's own dict traversal and clearing, then the held objects.
extern "C" int LayerTraverse(PyObject* self, visitproc visit, void* arg) {
  if (const int r = py::detail::pybind11_traverse(self, visit, arg)) return r;
  return VisitHeld(self, visit, arg);
}

extern "C" int LayerClear(PyObject* self) {
  py::detail::pybind11_clear(self);
  ClearHeld(self);
  return 0;
}

// pybind11's dealloc destroys the C++ object before freeing the Python one; untracked first, the collector
// never traverses a module half destroyed.
extern "C" void ModuleDealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  py::detail::pybind11_object_dealloc(self);
}

}  // namespace

void NoteModuleHolds(const Module& module, const std::shared_ptr<py::object>& object) {
  Holds* h = Find(module, /*create=*/true);
  if (h == nullptr) return;
  std::erase_if(h->objects, [](const auto& e) { return e.first.expired(); });
  h->objects.emplace_back(object, object.get());
}

void NoteModuleParent(const Module& child, const Module& parent) {
  Holds* h = Find(child, /*create=*/true);
  if (h == nullptr) return;
  std::erase_if(h->parents, [](const auto& e) { return e.first.expired(); });
  const auto is_parent = [&](const auto& e) { return e.second == &parent; };
  if (std::none_of(h->parents.begin(), h->parents.end(), is_parent)) {
    h->parents.emplace_back(parent.weak_from_this(), &parent);
  }
}

void SetUpModuleType(PyHeapTypeObject* heap_type, bool with_dict) {
  PyTypeObject* type = &heap_type->ht_type;
  type->tp_flags |= Py_TPFLAGS_HAVE_GC;
  type->tp_traverse = with_dict ? LayerTraverse : ModuleTraverse;
  type->tp_clear = with_dict ? LayerClear : ModuleClear;
  type->tp_dealloc = ModuleDealloc;
  if (!with_dict) State().module_type = type;
}

void InstallModuleGc() {
  auto phase = [](const std::string& name, const py::dict&) {
    GcState& s = State();
    s.decided.clear();
    s.collecting = name == "start";
  };
  py::module_::import("gc").attr("callbacks").attr("append")(py::cpp_function(phase));
}

}  // namespace tessel::bindings
