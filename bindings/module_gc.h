// bindings/module_gc.h — lets Python's cycle collector see the Python objects a module's C++ side holds
// (its Python hooks, computed-parameter functions, Parameter objects and anchored children), so a model
// caught in a reference cycle through them is freed as torch's would be (module_gc.cc has the rules).
//
// Invariant: every Python object a module's C++ side keeps for Python is shared through ShareCallable and
// noted here (NoteModuleHolds, NoteModuleAnchor); every child registration made from Python anchors the child's
// object in the parent and is noted (NoteModuleParent).
// A missed note only keeps objects alive (the collector then sees an outside reference): never a
// wrong free.
//
// Example (nn_py.cc):
//   auto f = ShareCallable(std::move(fn));
//   NoteModuleHolds(self, f);
//   self.RegisterForwardHook(Wrap(f));
#pragma once

#include <Python.h>

#include <memory>
#include <string>

#include "bindings/bind.h"
#include "core/nn/module.h"

namespace tessel::bindings {

// `object` (a ShareCallable result) is kept by `module`'s C++ side for as long as it lives.
void NoteModuleHolds(const nn::Module& module, const std::shared_ptr<py::object>& object);
// `child` (a ShareCallable result: a child module's Python object) is anchored by `parent`'s C++ side for one
// registration of it (Module::AnchorChild).
void NoteModuleAnchor(const nn::Module& parent, const std::shared_ptr<py::object>& child);
// Python registered `child` into `parent` (and anchored its object there).
void NoteModuleParent(const nn::Module& child, const nn::Module& parent);
// pybind11 custom_type_setup for tessel.nn.Module (with_dict false) and its dynamic-attribute C++ layers.
void SetUpModuleType(PyHeapTypeObject* heap_type, bool with_dict);
// Appends the collection-phase callback to gc.callbacks (once, at import).
void InstallModuleGc();

}  // namespace tessel::bindings
