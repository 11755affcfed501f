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
// object's holder or a parent whose C++ side anchors this very object (every registration made from Python
// anchors the child's object in the parent: TakeOwnership in nn_py.cc). A live parent then keeps the object,
// and so what it reports, reachable; a parent's dict is never trusted (Python code can edit it). Any other
// owner (a module C++ created, a registration made in C++) makes the module report nothing, so the objects
// look referenced from outside and stay: a leak, never a wrong free. The answer is computed once per
// collection (gc.callbacks brackets each one, and the cache is used only while that callback is still
// installed), so every traversal pass of a collection sees the same graph even while threads without the GIL
// copy or drop the modules' shared pointers. A held object whose last C++ copy another thread drops stays
// valid while this thread holds the GIL: ShareCallable's deleter takes the GIL to release it.
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
using Held = std::pair<std::weak_ptr<py::object>, py::object*>;
struct Holds {
  std::weak_ptr<const Module> module;
  std::vector<Held> objects;                                        // everything kept (anchors included)
  std::unordered_map<PyObject*, std::vector<Held>> anchors;         // a child's object -> its anchors here
  std::vector<std::weak_ptr<const Module>> parents;
};

struct GcState {
  std::unordered_map<const Module*, Holds> holds;
  size_t prune_at = 1024;
  bool collecting = false;  // between gc.callbacks' "start" and "stop"
  PyObject* callbacks = nullptr;  // gc.callbacks (a list) and our entry in it
  PyObject* callback = nullptr;
  // This collection's answers, by module address; the control block tells a module freed and another one
  // allocated at its address apart.
  std::unordered_map<const Module*, std::pair<std::weak_ptr<const Module>, bool>> decided;
};

// Every access holds the GIL. Never freed: the collector can run until the interpreter's last moment.
GcState& State() {
  static auto* state = new GcState;
  return *state;
}

bool SameControlBlock(const std::weak_ptr<const Module>& a, const std::weak_ptr<const Module>& b) {
  return !a.owner_before(b) && !b.owner_before(a);
}

bool Alive(const Held& h, PyObject* obj) { return !h.first.expired() && h.second->ptr() == obj; }

// Whether answers may be cached: inside a collection that our gc.callbacks entry bracketed and still brackets
// (code that removes it mid-collection would otherwise leave the cache standing for good). No allocation:
// the list is read in place.
bool Caching() {
  GcState& s = State();
  if (!s.collecting || s.callbacks == nullptr || !PyList_Check(s.callbacks)) return false;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(s.callbacks); ++i) {
    if (PyList_GET_ITEM(s.callbacks, i) == s.callback) return true;
  }
  return false;
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
  h = Holds{.module = self};
  return &h;
}

const Module* ModuleOf(PyObject* self) {
  auto* inst = reinterpret_cast<py::detail::instance*>(self);
  // tp_alloc tracks the object before pybind11 lays out its value and holder (zeroed memory: not simple, no
  // table), and that layout's own allocation (a weakref to a new type's cache) can run a collection that
  // traverses it: get_value_and_holder() read the null table and crashed.
  if (!inst->simple_layout && inst->nonsimple.values_and_holders == nullptr) return nullptr;
  const py::detail::value_and_holder v_h = inst->get_value_and_holder();
  if (v_h.value_ptr() == nullptr || !v_h.holder_constructed()) return nullptr;  // before __init__, non-owning
  try {
    return py::handle(self).cast<const Module*>();
  } catch (const py::cast_error&) {
    return nullptr;
  }
}

// Whether the module of `self` (m) is owned for the collector by `self`: its shared owners are self's holder and
// registrations in parents whose C++ side anchors `self` (one anchor per registration).
bool Decide(PyObject* self, const Module& m) {
  const long owners = m.weak_from_this().use_count();
  if (owners == 1) return true;  // this object's holder alone
  const Holds* h = Find(m, /*create=*/false);
  if (h == nullptr) return false;
  long anchored = 0;
  for (const std::weak_ptr<const Module>& weak : h->parents) {  // distinct parents (NoteModuleParent)
    const std::shared_ptr<const Module> parent = weak.lock();  // pinned: a thread without the GIL may drop it
    const Holds* ph = parent == nullptr ? nullptr : Find(*parent, /*create=*/false);
    if (ph == nullptr) continue;
    const auto it = ph->anchors.find(self);
    if (it == ph->anchors.end()) continue;
    anchored += std::count_if(it->second.begin(), it->second.end(), [&](const Held& a) { return Alive(a, self); });
  }
  return owners == 1 + anchored;
}

// self's module when `self` reports (and may clear) what the module's C++ side holds (the rule at the top),
// else null.
const Module* Owns(PyObject* self) {
  const Module* m = ModuleOf(self);
  if (m == nullptr) return nullptr;
  const bool caching = Caching();
  GcState& s = State();
  if (caching) {
    const auto it = s.decided.find(m);
    if (it != s.decided.end() && SameControlBlock(it->second.first, m->weak_from_this())) {
      return it->second.second ? m : nullptr;
    }
  }
  const bool owns = Decide(self, *m);
  if (caching) s.decided[m] = {m->weak_from_this(), owns};
  return owns ? m : nullptr;
}

int VisitHeld(PyObject* self, visitproc visit, void* arg) {
  const Module* m = Owns(self);
  const Holds* h = m == nullptr ? nullptr : Find(*m, /*create=*/false);
  if (h == nullptr) return 0;
  for (const auto& [weak, object] : h->objects) {
    if (!weak.expired()) Py_VISIT(object->ptr());
  }
  return 0;
}

void ClearHeld(PyObject* self) {
  const Module* m = Owns(self);
  Holds* h = m == nullptr ? nullptr : Find(*m, /*create=*/false);
  if (h == nullptr) return;
  std::vector<py::object> dropped;  // released after the registry is consistent: a release can run Python
  for (auto& [weak, object] : h->objects) {
    if (!weak.expired()) dropped.push_back(std::exchange(*object, py::none()));
  }
  h->objects.clear();
  h->anchors.clear();
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

void NoteModuleAnchor(const Module& parent, const std::shared_ptr<py::object>& child) {
  NoteModuleHolds(parent, child);
  Holds* h = Find(parent, /*create=*/false);
  if (h == nullptr) return;
  std::vector<Held>& anchors = h->anchors[child->ptr()];
  std::erase_if(anchors, [](const auto& e) { return e.first.expired(); });
  anchors.emplace_back(child, child.get());
}

void NoteModuleParent(const Module& child, const Module& parent) {
  Holds* h = Find(child, /*create=*/true);
  if (h == nullptr) return;
  std::erase_if(h->parents, [](const auto& e) { return e.expired(); });
  const std::weak_ptr<const Module> self = parent.weak_from_this();
  const auto is_parent = [&](const auto& e) { return SameControlBlock(e, self); };
  if (std::none_of(h->parents.begin(), h->parents.end(), is_parent)) h->parents.push_back(self);
}

void SetUpModuleType(PyHeapTypeObject* heap_type, bool with_dict) {
  PyTypeObject* type = &heap_type->ht_type;
  type->tp_flags |= Py_TPFLAGS_HAVE_GC;
  type->tp_traverse = with_dict ? LayerTraverse : ModuleTraverse;
  type->tp_clear = with_dict ? LayerClear : ModuleClear;
  type->tp_dealloc = ModuleDealloc;
}

void InstallModuleGc() {
  auto phase = [](const std::string& name, const py::dict&) {
    GcState& s = State();
    s.decided.clear();
    s.collecting = name == "start";
  };
  GcState& s = State();
  py::object callbacks = py::module_::import("gc").attr("callbacks");
  py::object callback = py::cpp_function(phase);
  callbacks.attr("append")(callback);
  s.callbacks = callbacks.release().ptr();  // kept for good, as the state is
  s.callback = callback.release().ptr();
}

}  // namespace tessel::bindings
