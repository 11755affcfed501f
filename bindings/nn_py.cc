// bindings/nn_py.cc — tessel.nn.Module (subclassable from Python through a trampoline), the C++ layers
// (Linear, Embedding, LayerNorm, RMSNorm) and the C++ GPT.
//
// A Python subclass of tessel.nn.Module *is* an nn::Module (PyModule below): its C++ Forward calls the
// Python `forward`, so fully_shard and every other primitive that works through nn::Module's parameters,
// hooks and composable state act on it unchanged. The package (tessel/nn/modules.py) adds torch's
// attribute registration and methods on top of the primitives bound here.
//
// [Note: module ownership across the boundary]
// nn::Module shares ownership of its children (shared_ptr), and pybind11's holder of every module class is
// a shared_ptr too: a module built in Python is owned by its Python object, and `_register_module(name,
// child)` gives the C++ parent one more owner, so a module may sit in several parents as in torch. The
// C++ object is freed when its last owner (Python object or C++ parent) lets go. A Python subclass's
// `forward` lives on its Python object, so that object must outlive every C++ parent that can call it:
// the parent's `_modules` dict holds it (an ordinary reference the garbage collector sees). Modules
// created by C++ (GPT's blocks) have no Python object until Python asks for one; nn::Module derives from
// enable_shared_from_this, so that object shares the C++ parent's ownership (pybind11 builds its holder
// from shared_from_this). Only a module C++ owns alone (a root held by unique_ptr, e.g. a pipeline
// stage) gets a non-owning object that keeps the module it was reached from alive (keep_alive), and
// cannot be registered into a Python-built parent (kInvalidArgument). Invariant: every Python module
// object either co-owns its C++ module or keeps alive an object whose C++ module outlives it.
// NOTE: tessel.nn.Module itself has no py::dynamic_attr: with pybind11 2.10 on Python 3.11 a Python
// subclass of a dynamic_attr class visits its managed __dict__ twice during garbage collection, which
// makes every cycle through such a module uncollectable (a leak the lifetime test caught). Python
// subclasses get their own __dict__ anyway; the C++ layers keep dynamic_attr (they are not subclassed).
//
// Example (Python):
//   class MLP(tessel.nn.Module):
//       def __init__(self): super().__init__(); self.fc = tessel.nn.Linear(4, 8)
//       def forward(self, x): return F.gelu(self.fc(x))
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings/bind.h"
#include "bindings/module_gc.h"
#include "core/base/error.h"
#include "core/autograd/checkpoint.h"
#include "core/nn/checkpoint_wrapper.h"
#include "core/nn/layers.h"
#include "core/nn/module.h"
#include "core/nn/transformer.h"
#include "core/ops/view.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"
#include "core/tensor/torch_random.h"
#include "core/tensor/tensor_impl.h"
#include "dtensor/dtensor.h"
#include "dtensor/layout.h"
#include "dtensor/random.h"

namespace tessel::bindings {

std::shared_ptr<py::object> ShareCallable(py::object fn) {
  return std::shared_ptr<py::object>(new py::object(std::move(fn)), [](py::object* p) {
    if (!Py_IsInitialized()) {  // interpreter gone: nothing left to release
      p->release();
      delete p;
      return;
    }
    // Held already (a Python caller, or a rank thread clearing its thread state at exit, which drops the modules
    // its locals held: a nested gil_scoped_acquire there makes and deletes a second thread state, a fatal error).
    if (PyGILState_Check()) {
      delete p;
      return;
    }
    py::gil_scoped_acquire gil;
    delete p;
  });
}

namespace {

// torch's normalized_shape: an int or a sequence of ints (the trailing dims LayerNorm / RMSNorm normalize).
Shape NormalizedShape(const py::object& shape, const char* op) {
  if (py::isinstance<py::int_>(shape)) return {shape.cast<int64_t>()};
  try {
    return shape.cast<Shape>();
  } catch (const py::cast_error&) {
    throw py::type_error(std::string(op) + ": normalized_shape must be an int or a sequence of ints, got " +
                         std::string(py::str(py::type::of(shape).attr("__name__"))));
  }
}

using nn::Module;

// The trampoline: a Python subclass's forward, called by Module::Call between the hooks.
class PyModule final : public Module {
 public:
  using Module::Module;
  TensorList Forward(const TensorList& inputs) override {
    py::gil_scoped_acquire gil;
    // `_forward_from_cpp` (tessel/nn/modules.py) rebuilds the Python call's arguments around the
    // (possibly hook-rewritten) tensors, runs `forward` and flattens its output.
    py::function fwd = py::get_override(static_cast<const Module*>(this), "_forward_from_cpp");
    TESSEL_INTERNAL_ASSERT(fwd, type_name(), ": tessel.nn.Module._forward_from_cpp is missing (import tessel.nn)");
    return fwd(inputs).cast<TensorList>();
  }
};

using ModuleClass = py::class_<Module, PyModule, std::shared_ptr<Module>>;

// [Note: Python subclasses of the C++ layers] `class LoRALinear(nn.Linear)` with its own forward (or
// `lin.forward = fn` on an instance) must run that forward wherever the layer is called, as torch's,
// including from a C++ parent and inside fully_shard's hooks. Every C++ layer Python constructs is a
// PyLayer: its Forward asks Python once whether the class or the instance overrides `forward` (and again
// after `forward` is assigned: ForwardChanged) and from then on calls the C++ forward without the GIL when
// nothing does. BaseForward is the layer's own forward, which `super().forward(x)` reaches (not Forward,
// which would call the override again).
class PyLayerBase {
 public:
  virtual ~PyLayerBase() = default;
  virtual TensorList BaseForward(const TensorList& inputs) = 0;
  // Whether Python overrides forward (evaluated with the GIL held, then cached).
  virtual bool OverridesForward() = 0;
  void ForwardChanged() { state_.store(kUnknown); }

 protected:
  enum : int { kUnknown, kNo, kYes };
  std::atomic<int> state_{kUnknown};
};

template <typename Layer>
class PyLayer final : public Layer, public PyLayerBase {
 public:
  using Layer::Layer;
  TensorList Forward(const TensorList& inputs) override {
    if (state_.load() == kNo) return Layer::Forward(inputs);
    py::gil_scoped_acquire gil;
    if (!OverridesForward()) {
      py::gil_scoped_release release;
      return Layer::Forward(inputs);
    }
    py::function fwd = py::get_override(static_cast<const Layer*>(this), "_forward_from_cpp");
    TESSEL_INTERNAL_ASSERT(fwd, this->type_name(), ": tessel.nn.Module._forward_from_cpp is missing");
    return fwd(inputs).cast<TensorList>();
  }
  TensorList BaseForward(const TensorList& inputs) override { return Layer::Forward(inputs); }
  bool OverridesForward() override {
    const int state = state_.load();
    if (state != kUnknown) return state == kYes;
    const py::handle self = py::detail::get_object_handle(static_cast<const Layer*>(this),
                                                          py::detail::get_type_info(typeid(Layer)));
    bool overrides = false;
    if (self) {  // the class's forward is not the layer's, or the instance has its own
      overrides = !py::type::handle_of(self).attr("forward").is(py::type::of<Layer>().attr("forward"));
      const py::object dict = py::getattr(self, "__dict__", py::none());
      overrides = overrides || (py::isinstance<py::dict>(dict) && dict.cast<py::dict>().contains("forward"));
    }
    state_.store(overrides ? kYes : kNo);
    return overrides;
  }
};

template <typename Layer>
using LayerClass = py::class_<Layer, PyLayer<Layer>, Module, std::shared_ptr<Layer>>;

// The built-in layers' types: their dict and what their C++ side holds, seen by the cycle collector (module_gc.h).
py::custom_type_setup LayerTypeSetup() {
  return py::custom_type_setup([](PyHeapTypeObject* type) { SetUpModuleType(type, /*with_dict=*/true); });
}

py::object AsPython(Module& m) { return py::cast(&m, py::return_value_policy::reference); }

// A module of `owner`'s tree as a Python object: the existing one when Python already has it, else a
// new non-owning one that keeps `owner` (whose C++ tree holds its memory) alive. See [Note: module
// ownership across the boundary].
py::object AsPythonIn(Module& m, const py::handle& owner) {
  const py::detail::type_info* type = py::detail::get_type_info(typeid(m));
  if (type == nullptr) type = py::detail::get_type_info(typeid(Module));
  if (py::handle existing = py::detail::get_object_handle(&m, type)) {
    return py::reinterpret_borrow<py::object>(existing);
  }
  py::object obj = AsPython(m);
  if (!reinterpret_cast<py::detail::instance*>(obj.ptr())->get_value_and_holder().holder_constructed()) {
    py::detail::keep_alive_impl(obj, owner);  // no shared owner to join: keep the tree it came from
  }
  return obj;
}

// A hook's replacement value: a tuple/list of tensors or a single tensor.
TensorList AsTensorList(const py::handle& r) {
  if (py::isinstance<Tensor>(r)) return {r.cast<Tensor>()};
  return r.cast<TensorList>();
}

py::object OutputsForPython(const TensorList& outs) {
  if (outs.size() == 1) return py::cast(outs[0]);
  return py::tuple(py::cast(outs));
}

// `child` as one more owner of its C++ module (see [Note: module ownership across the boundary]).
std::shared_ptr<Module> SharedFromPython(Module& parent, const std::string& name, const py::handle& child) {
  auto* inst = reinterpret_cast<py::detail::instance*>(child.ptr());
  Module* raw = child.cast<Module*>();
  TESSEL_CHECK(inst->get_value_and_holder().holder_constructed(), parent.type_name(), ": cannot register ",
               raw->type_name(), " as '", name, "': C++ owns it alone (a pipeline stage's root), so no parent can ",
               "share it");
  return child.cast<std::shared_ptr<Module>>();
}

// The parent's C++ side keeps the child's Python object for as long as it is registered (a Python child's
// forward lives there), and the cycle collector counts on it (module_gc.h).
void AnchorRegistered(Module& parent, const std::string& name, const py::handle& child) {
  std::shared_ptr<py::object> anchor = ShareCallable(py::reinterpret_borrow<py::object>(child));
  NoteModuleAnchor(parent, anchor);
  parent.AnchorChild(name, std::move(anchor));
  NoteModuleParent(*child.cast<Module*>(), parent);
}

void TakeOwnership(Module& parent, const std::string& name, const py::handle& child) {
  for (const auto& [n, c] : parent.NamedChildren()) {
    TESSEL_CHECK(n != name, parent.type_name(), ": submodule '", name, "' is already registered");
  }
  parent.RegisterModule(name, SharedFromPython(parent, name, child));
  AnchorRegistered(parent, name, child);
}

// `parent.name = child` over an existing child (torch replaces it: a new head for fine-tuning,
// model.layers[i] = wrapped); the old one stays usable wherever else it is held, as in torch.
void ReplaceOwnership(Module& parent, const std::string& name, const py::handle& child) {
  parent.ReplaceChild(name, SharedFromPython(parent, name, child));
  AnchorRegistered(parent, name, child);
}

// `parent.name = None` / `del parent.name` over a child.
void RemoveOwnership(Module& parent, const std::string& name) { parent.RemoveChild(name); }

py::object Lookup(const py::object& self_obj, const std::string& name) {
  Module& self = self_obj.cast<Module&>();
  if (self.HasParam(name)) {
    const Tensor& p = self.Param(name);
    return p.defined() ? py::cast(p) : py::none();
  }
  if (self.HasComputedParameter(name)) {  // computed by ops (and maybe Python): without the GIL
    return py::cast(NoGil([&] { return Tensor(self.Param(name)); }));
  }
  for (const auto& [n, t] : self.NamedBuffers(/*recurse=*/false)) {
    if (n == name) return t.defined() ? py::cast(t) : py::none();
  }
  for (const auto& [n, c] : self.NamedChildren()) {
    if (n == name) return AsPythonIn(*c, self_obj);
  }
  return py::none();
}

py::list Named(const std::vector<std::pair<std::string, Module*>>& mods, const py::handle& owner) {
  py::list out;
  for (const auto& [n, mod] : mods) out.append(py::make_tuple(n, AsPythonIn(*mod, owner)));
  return out;
}

// A backward hook's return: None keeps the gradients; a tuple / list (None entries allowed) or one tensor
// replaces them (torch's rule; the module checks the count and shapes).
std::optional<TensorList> GradsFromPython(const py::object& r) {
  if (r.is_none()) return std::nullopt;
  TensorList out;
  if (py::isinstance<Tensor>(r)) {
    out.push_back(r.cast<Tensor>());
    return out;
  }
  for (const py::handle& g : r) out.push_back(g.is_none() ? Tensor() : g.cast<Tensor>());
  return out;
}

// Binds `name`(fn, prepend=False), which registers `wrap(fn)` (the C++ hook calling the shared Python
// callable) through Module::*`reg`.
template <typename Hook, typename Wrap>
void DefHook(ModuleClass& c, const char* name, int (Module::*reg)(Hook, bool), Wrap wrap) {
  c.def(
      name,
      [reg, wrap](Module& self, py::object fn, bool prepend) {
        std::shared_ptr<py::object> f = ShareCallable(std::move(fn));
        NoteModuleHolds(self, f);
        return (self.*reg)(wrap(std::move(f)), prepend);
      },
      py::arg("fn"), py::arg("prepend") = false);
}

void BindHooks(ModuleClass& c) {
  using Fn = std::shared_ptr<py::object>;
  DefHook(c, "_register_forward_pre_hook", &Module::RegisterForwardPreHook, [](Fn f) -> nn::ForwardPreHook {
    return [f](Module& m, TensorList& inputs) {
      py::gil_scoped_acquire gil;
      py::object r = (*f)(AsPython(m), py::tuple(py::cast(inputs)));
      if (!r.is_none()) inputs = AsTensorList(r);
    };
  });
  DefHook(c, "_register_forward_hook", &Module::RegisterForwardHook, [](Fn f) -> nn::ForwardHook {
    return [f](Module& m, const TensorList& inputs, TensorList& outputs) {
      py::gil_scoped_acquire gil;
      py::object r = (*f)(AsPython(m), py::tuple(py::cast(inputs)), OutputsForPython(outputs));
      if (!r.is_none()) outputs = AsTensorList(r);
    };
  });
  DefHook(c, "_register_full_backward_pre_hook", &Module::RegisterFullBackwardPreHook,
          [](Fn f) -> nn::BackwardPreHook {
            return [f](Module& m, const TensorList& grad_outputs) {
              py::gil_scoped_acquire gil;
              return GradsFromPython((*f)(AsPython(m), GradsForPython(grad_outputs)));
            };
          });
  DefHook(c, "_register_full_backward_hook", &Module::RegisterFullBackwardHook, [](Fn f) -> nn::BackwardHook {
    return [f](Module& m, const TensorList& grad_inputs, const TensorList& grad_outputs) {
      py::gil_scoped_acquire gil;
      return GradsFromPython((*f)(AsPython(m), GradsForPython(grad_inputs), GradsForPython(grad_outputs)));
    };
  });
  c.def("_remove_hook", &Module::RemoveHook);
  // A computed parameter (core/nn/module.h, [Note: computed parameters]): fn(module) returns its tensor;
  // None removes it. torch.nn.utils.parametrize and weight_norm build on it (nn/utils/parametrize.py).
  // The Python function is also kept in the module's __dict__ (_tessel_computed_fns: name -> fn), so that
  // copy.deepcopy can register it on the copy (nn/_copy.py): the functions read everything from the module.
  c.def("_set_computed_parameter", [](py::object self_obj, const std::string& name, py::object fn) {
    Module& self = self_obj.cast<Module&>();
    py::dict attrs = self_obj.attr("__dict__");
    if (!attrs.contains("_tessel_computed_fns")) attrs["_tessel_computed_fns"] = py::dict();
    py::dict fns = attrs["_tessel_computed_fns"];
    if (fn.is_none()) {
      if (fns.contains(name)) fns.attr("pop")(name);
      return self.SetComputedParameter(name, nullptr);
    }
    fns[py::str(name)] = fn;
    auto f = ShareCallable(std::move(fn));
    NoteModuleHolds(self, f);
    Module* m = &self;  // the module owns the function: the pointer outlives it
    self.SetComputedParameter(name, [f, m]() {
      py::gil_scoped_acquire gil;
      py::object r = (*f)(AsPython(*m));
      if (!py::isinstance<Tensor>(r)) {
        throw py::type_error(Str("parametrization of '", m->type_name(), "' returned ",
                                 py::str(py::type::of(r).attr("__name__")).cast<std::string>(), ", not a Tensor"));
      }
      return r.cast<Tensor>();
    });
  });
  c.def("_has_computed_parameter", &Module::HasComputedParameter);
  c.def("_computed_parameter_names", &Module::ComputedParameterNames);
  c.def("_in_forward", &Module::InForward);
  c.def("_remove_parameter", &Module::RemoveParameter);
  c.def("_remove_buffer", &Module::RemoveBuffer);
}

ModuleClass BindModule(py::module_& m) {
  ModuleClass c(m, "Module",
                "Base class of every module; subclass it in Python and define forward (torch.nn.Module)",
                py::custom_type_setup([](PyHeapTypeObject* type) { SetUpModuleType(type, /*with_dict=*/false); }));
  // __init__ by hand so the C++ type_name (used in every error message) is the Python class's name.
  c.def("__init__", [](py::detail::value_and_holder& v_h) {
    v_h.value_ptr() = static_cast<Module*>(new PyModule(Py_TYPE(v_h.inst)->tp_name));
  }, py::detail::is_new_style_constructor());
  c.def_property_readonly("_type_name", &Module::type_name)
      .def("_register_parameter", [](Module& self, const std::string& name, std::optional<Tensor> t) {
        self.RegisterParameter(name, t ? *t : Tensor());
      })
      .def("_set_parameter", [](Module& self, const std::string& fqn, std::optional<Tensor> t, bool allow_new_shape) {
        self.SetParameter(fqn, t ? *t : Tensor(), allow_new_shape);
      }, py::arg("fqn"), py::arg("value"), py::arg("allow_new_shape") = false)
      .def("_has_parameter", &Module::HasParam)
      // [Note: parameter host objects] in core/nn/module.h: the Python object of parameter `fqn` (tensor t), the one
      // the owning module holds while t is that parameter, else make(t), then held (when t is the parameter).
      // The object held for own parameter `name` while it is still that tensor, else None (attribute access's
      // first try: one call instead of the lookups below).
      .def("_held_parameter_object", [](const Module& self, const std::string& name) -> py::object {
        std::shared_ptr<void> held = self.ParameterHostObject(name);
        return held ? *std::static_pointer_cast<py::object>(held) : py::none();
      })
      .def("_host_parameter", [](Module& self, const std::string& fqn, const Tensor& t, const py::function& make) {
        const size_t dot = fqn.rfind('.');
        Module* owner = dot == std::string::npos ? &self : self.Submodule(fqn.substr(0, dot));
        const std::string local = dot == std::string::npos ? fqn : fqn.substr(dot + 1);
        if (std::shared_ptr<void> held = owner->ParameterHostObject(local)) {
          return *std::static_pointer_cast<py::object>(held);
        }
        py::object obj = make(t);
        if (owner->HasParam(local) && t.defined() && owner->Param(local).impl() == t.impl()) {
          std::shared_ptr<py::object> held_obj = ShareCallable(obj);
          NoteModuleHolds(*owner, held_obj);
          owner->SetParameterHostObject(local, std::move(held_obj));
        }
        return obj;
      }, py::arg("fqn"), py::arg("tensor"), py::arg("make"))
      .def("register_buffer", [](Module& self, const std::string& name, std::optional<Tensor> t, bool persistent) {
        self.RegisterBuffer(name, t ? *t : Tensor(), persistent);
      }, py::arg("name"), py::arg("tensor"), py::arg("persistent") = true)
      .def("_register_module", &TakeOwnership)
      .def("_replace_module", &ReplaceOwnership)
      .def("_remove_module", &RemoveOwnership)
      .def("_lookup", &Lookup, "This module's own parameter, buffer or child called `name`, or None")
      .def("_has_buffer", &Module::HasBuffer, "Whether `name` is a buffer of this module, registered as None included")
      .def("_buffer_is_persistent", &Module::BufferIsPersistent)
      .def("_registered", [](const Module& self, const std::string& name) {
        return self.HasParam(name) || self.HasBuffer(name);
      }, "Whether `name` is a parameter or buffer of this module, registered as None included")
      .def("_named_parameters", [](const Module& self, bool recurse, bool remove_duplicate) {
        nn::StateDict out;  // parameters registered as None are not parameters yet (torch skips them)
        for (auto& [n, t] : self.NamedParameters(recurse, remove_duplicate)) {
          if (t.defined()) out.emplace_back(n, t);
        }
        return out;
      }, py::arg("recurse"), py::arg("remove_duplicate") = false)
      // (name, the object the owning module holds for it or None, tensor) per parameter: named_parameters' walk
      // in one call ([Note: parameter host objects]; Python makes and hands over the missing objects).
      .def("_named_parameter_objects", [](Module& self, bool recurse, bool remove_duplicate) {
        py::list out;
        for (auto& [n, t] : self.NamedParameters(recurse, remove_duplicate)) {
          if (!t.defined()) continue;
          const size_t dot = n.rfind('.');
          Module* owner = dot == std::string::npos ? &self : self.Submodule(n.substr(0, dot));
          std::shared_ptr<void> held = owner->ParameterHostObject(dot == std::string::npos ? n : n.substr(dot + 1));
          out.append(py::make_tuple(n, held ? *std::static_pointer_cast<py::object>(held) : py::none(), t));
        }
        return out;
      }, py::arg("recurse"), py::arg("remove_duplicate") = false)
      .def("_named_buffers", [](const Module& self, bool recurse, bool remove_duplicate) {
        return self.NamedBuffers(recurse, remove_duplicate);
      }, py::arg("recurse"), py::arg("remove_duplicate") = false)
      .def("_named_modules", [](const py::object& self, bool remove_duplicate) {
        return Named(self.cast<Module&>().NamedModules(remove_duplicate), self);
      }, py::arg("remove_duplicate") = false)
      .def("_named_children", [](const py::object& self) { return Named(self.cast<Module&>().NamedChildren(), self); })
      .def("get_submodule", [](const py::object& self, const std::string& fqn) {
        return AsPythonIn(*self.cast<Module&>().Submodule(fqn), self);
      })
      .def("_call", [](Module& self, TensorList inputs) { return NoGil([&] { return self.Call(std::move(inputs)); }); },
           "Module::Call: forward pre-hooks, forward, forward hooks (GIL released; forward re-acquires it)")
      .def_property_readonly("_has_python_forward", [](Module& self) { return dynamic_cast<PyModule*>(&self) != nullptr; })
      .def("_forward_cpp", [](Module& self, TensorList inputs) {
        auto* layer = dynamic_cast<PyLayerBase*>(&self);  // a C++ layer's own forward, never a Python override
        return NoGil([&] { return layer != nullptr ? layer->BaseForward(inputs) : self.Forward(inputs); });
      }, "Forward without the hooks (torch's module.forward(x))")
      .def_property_readonly("_forward_overridden", [](Module& self) {
        auto* layer = dynamic_cast<PyLayerBase*>(&self);
        return layer != nullptr && layer->OverridesForward();
      }, "Whether Python overrides a C++ layer's forward ([Note: Python subclasses of the C++ layers])")
      .def_property_readonly("_constructed", [](const py::handle& self) {  // false while __init__ failed
        return reinterpret_cast<py::detail::instance*>(self.ptr())->get_value_and_holder().value_ptr() != nullptr;
      })
      .def("_forward_changed", [](Module& self) {
        if (auto* layer = dynamic_cast<PyLayerBase*>(&self)) layer->ForwardChanged();
      })
      .def("_state_dict", &Module::GetStateDict)
      .def("_load_state_dict", [](Module& self, const nn::StateDict& sd, bool strict) {
        nn::LoadResult r = NoGil([&] { return self.LoadStateDict(sd, strict); });
        return py::make_tuple(r.missing_keys, r.unexpected_keys);
      })
      .def("_train", &Module::Train, py::arg("mode"), py::arg("recurse") = true)
      // torch's self.training = mode sets this module's flag alone (a custom train() override writes it)
      .def_property("training", &Module::training, [](Module& self, bool mode) { self.Train(mode, false); })
      .def("_zero_grad", &Module::ZeroGrad);
  BindHooks(c);
  return c;
}

// torch's device= of the layer constructors: the CPU (None, "cpu", tessel.device("cpu")) or
// kUnimplemented, as everywhere in the Python face (tessel/_device.py).
void CheckCpuDevice(const py::object& device, const char* layer) {
  if (device.is_none()) return;
  const std::string d = py::str(device);
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, d == "cpu" || d.rfind("cpu:", 0) == 0, layer, ": device '", d,
                    "' is not available from Python (tessel's Python face computes on the CPU; "
                    "tessel.cuda.is_available() is False)");
}

// Linear.bias, LayerNorm.weight / bias: the Parameter (named for optimizers); None without one (bias=False,
// elementwise_affine=False, `lin.bias = None`), as torch's; else what the Python lookup finds, so a value prune,
// register_parametrization or weight_norm computed in its place reads as in torch (the property hid it).
py::object ParamOrAttribute(const py::object& self, const char* name) {
  const Module& m = self.cast<const Module&>();
  if (std::shared_ptr<void> held = m.ParameterHostObject(name)) return *std::static_pointer_cast<py::object>(held);
  py::module_ modules = py::module_::import("tessel.nn.modules");
  if (m.HasParam(name) && m.Param(name).defined()) {
    return modules.attr("_held_parameter")(self, name, m.Param(name));  // the object this module holds
  }
  // Parametrized, or deleted (`del lin.bias`: torch's AttributeError until a tensor is assigned): as _getattr says.
  if (m.HasComputedParameter(name)) return modules.attr("_getattr")(self, name);
  try {
    return modules.attr("_getattr")(self, name);
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_AttributeError)) throw;
    return py::none();
  }
}

}  // namespace

namespace {
bool AnyPartial(const dtensor::DTensor& d) {
  const auto& placements = d.spec().placements();
  return std::any_of(placements.begin(), placements.end(), [](const dtensor::Placement& p) {
    return dtensor::IsPartial(p);
  });
}
}  // namespace

void AssignFull(const Tensor& p, const Tensor& full) {
  if (!p.is_distributed()) {
    CopyInto(p, full);
    return;
  }
  // This rank's box of `full` (every rank holds the same full), in the spec's shard order: FSDP over TP
  // (_StridedShard) holds its rows in tensor-parallel-major order, which DistributeTensor's default order permuted.
  const dtensor::DTensor d(p);
  // A Partial DTensor has no piece of a whole value (each rank's copy would be summed): refused, as DistributeTensor.
  TESSEL_CHECK(!AnyPartial(d), "assigning a whole tensor to a DTensor with placements ",
               dtensor::PlacementsToString(d.spec().placements()), " on ", d.mesh().ToString(),
               ": a Partial placement holds no piece of it (redistribute to Replicate or Shard first)");
  if (!d.mesh().is_member()) return;
  Tensor piece = full;
  const std::vector<dtensor::DimInterval> box = dtensor::GlobalIntervals(d.spec(), d.mesh().coordinate());
  for (size_t dim = 0; dim < box.size(); ++dim) {
    piece = Narrow(piece, static_cast<int64_t>(dim), box[dim].offset, box[dim].length);
  }
  CopyInto(d.ToLocal(), piece);
}

// A fresh draw of `dist` for t's (global) shape written into t, outside autograd. A dense CPU tensor takes a
// uniform or normal draw as torch's CPU kernels make it from the generator's host stream (torch_random.h), so a
// seeded torch script's tensors and initial weights are torch's; a DTensor draws only this rank's piece
// (dtensor/random.h's FillRandomDTensor) on the counter-based stream, with the values the whole draw gives it, so
// every sharding of a deferred init agrees. Under deferred (meta) init nothing is drawn, as Random.
void FillRandomAny(const Tensor& t, Generator& gen, Distribution dist) {
  if (DeferredInitEnabled()) return;
  const bool torch_kind = dist.kind == Distribution::Kind::kUniform || dist.kind == Distribution::Kind::kNormal;
  if (t.is_distributed()) {
    const dtensor::DTensor d(t);
    if (torch_kind && !AnyPartial(d) && d.ToLocal().device().is_cpu()) {
      // The whole tensor's torch draw on every rank (so all generators stay in step), this rank keeping its
      // piece: the values one rank gives the unsharded model (torchtitan's init_weights after parallelizing).
      // Costs one whole parameter of memory and time per rank while it lasts.
      const Tensor full = Empty(d.spec().shape(), d.spec().dtype());
      FillRandomAny(full, gen, dist);
      AssignFull(t, full);
      return;
    }
    dtensor::FillRandomDTensor(d, gen, dist);
  } else if (t.device().is_cpu() && dist.kind == Distribution::Kind::kUniform) {
    TorchUniform(t, gen, dist.a, dist.b);
  } else if (t.device().is_cpu() && dist.kind == Distribution::Kind::kNormal) {
    TorchNormal(t, gen, dist.a, dist.b);
  } else {
    FillRandom(t, gen, dist);
  }
}

namespace {

// Writes a fresh draw of `dist` into the module's parameter `name` (its storage, so handles optimizers or
// hooks hold see it), outside autograd. A DTensor parameter draws its piece alone (FillRandomAny).
void Redraw(Module& module, const char* name, Generator& gen, Distribution dist) {
  if (!module.HasParam(name)) return;
  FillRandomAny(module.Param(name), gen, dist);
}

// make() with no parameter drawn (deferred init for the constructor alone; the bindings then draw them as
// torch's reset_parameters does, on the host stream: FillRandomAny) and draw(module). Under an enclosing deferred
// init (tessel.device("meta")) the parameters stay undrawn and meta; else they are ordinary tensors.
template <typename Make, typename Draw>
auto MadeThenDrawn(Make&& make, Draw&& draw) {
  const bool outer = SetDeferredInit(true);
  auto module = [&] {
    struct Restore {
      bool outer;
      ~Restore() { SetDeferredInit(outer); }
    } restore{outer};
    return make();
  }();
  if (!outer) {
    for (auto& [name, p] : module->NamedParameters()) p.impl()->storage().set_deferred_init(false);
    draw(*module);
  }
  return module;
}

// torch's nn.Linear.reset_parameters: kaiming_uniform_(a=sqrt(5)) for the weight, U(-b, b) with b =
// sqrt(3)·gain/sqrt(fan_in), gain = sqrt(2/(1 + a²)) (about 1/sqrt(in_features), but in float64 these are the
// bits the draw scales by), and the bias U(-1/sqrt(in_features), ·), drawn in that order.
Distribution TorchLinearWeightUniform(int64_t in_features) {
  const double a = std::sqrt(5.0);
  const double gain = std::sqrt(2.0 / (1 + a * a));
  const double bound = std::sqrt(3.0) * (gain / std::sqrt(static_cast<double>(in_features)));
  return Distribution::Uniform(-bound, bound);
}
Distribution TorchLinearUniform(int64_t in_features) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  return Distribution::Uniform(-bound, bound);
}
void TorchLinearInit(nn::Linear& lin, Generator& gen) {
  Redraw(lin, "weight", gen, TorchLinearWeightUniform(lin.in_features()));
  Redraw(lin, "bias", gen, TorchLinearUniform(lin.in_features()));
}

// torch's nn.Embedding.reset_parameters: N(0, 1), the padding row zero.
void TorchEmbeddingInit(nn::Embedding& emb, Generator& gen) {
  const Tensor w = emb.Param("weight");
  if (!w.is_distributed()) {  // torch's own draw (FillRandomAny)
    FillRandomAny(w, gen, Distribution::Normal(0.0, 1.0));
    if (emb.padding_idx() && !DeferredInitEnabled()) {
      CopyInto(Select(w, 0, *emb.padding_idx()), Zeros({w.size(1)}, w.dtype()));
    }
    return;
  }
  const Tensor full = Empty(w.sizes(), w.dtype());  // the whole table's draw; this rank keeps its piece
  FillRandomAny(full, gen, Distribution::Normal(0.0, 1.0));
  if (emb.padding_idx()) CopyInto(Select(full, 0, *emb.padding_idx()), Zeros({w.size(1)}, w.dtype()));
  AssignFull(w, full);
}

// LayerNorm / RMSNorm.reset_parameters: weight 1, bias 0.
void OnesAndZeros(Module& norm) {
  if (norm.HasParam("weight")) {
    const Tensor w = norm.Param("weight");
    AssignFull(w, Ones(w.sizes(), w.dtype()));
  }
  if (norm.HasParam("bias")) {
    const Tensor b = norm.Param("bias");
    AssignFull(b, Zeros(b.sizes(), b.dtype()));
  }
}

void BindLayers(py::module_& m) {
  LayerClass<nn::Linear> lin(m, "Linear", py::dynamic_attr(), LayerTypeSetup());
  // Initialized as torch's nn.Linear (uniform, bound 1/sqrt(in_features)) unless init_std asks for the
  // C++ layer's GPT-2 style N(0, init_std) weight and zero bias.
  lin.def(py::init([](int64_t in, int64_t out, bool bias, const py::object& device, std::optional<DType> dtype,
                      Generator* gen,
                      std::optional<double> init_std) {
            CheckCpuDevice(device, "Linear");
            const DType dt = dtype.value_or(DefaultFloatDType());
            if (init_std) return new PyLayer<nn::Linear>(in, out, bias, GenOrDefault(gen), *init_std, dt);
            TESSEL_CHECK(in > 0, "Linear: features must be positive, got in=", in, " out=", out);
            return MadeThenDrawn([&] {
              return new PyLayer<nn::Linear>(in, out, bias, GenOrDefault(gen), TorchLinearUniform(in),
                                             TorchLinearUniform(in), dt);
            }, [&](nn::Linear& layer) { TorchLinearInit(layer, GenOrDefault(gen)); });
          }),
          py::arg("in_features"), py::arg("out_features"), py::arg("bias") = true, py::kw_only(),
          py::arg("device") = py::none(), py::arg("dtype") = py::none(), py::arg("generator") = nullptr,
          py::arg("init_std") = py::none())
      .def("reset_parameters", [](nn::Linear& self) { TorchLinearInit(self, DefaultGenerator()); })
      .def_property_readonly("in_features", &nn::Linear::in_features)
      .def_property_readonly("out_features", &nn::Linear::out_features)
      // torch's Linear(bias=False).bias is None (code tests `if self.bias is not None`); the C++ Linear
      // registers no bias then. With one, the Parameter the attribute lookup gives (named for optimizers).
      .def_property_readonly("bias", [](const py::object& self) { return ParamOrAttribute(self, "bias"); });
  LayerClass<nn::Embedding> emb(m, "Embedding", py::dynamic_attr(), LayerTypeSetup());
  emb.def(py::init([](int64_t num, int64_t dim, std::optional<int64_t> padding_idx, const py::object& max_norm,
                      double norm_type, bool scale_grad_by_freq, bool sparse, std::optional<Tensor> weight, bool freeze,
                      const py::object& device, std::optional<DType> dtype, Generator* gen,
                      std::optional<double> init_std) {
            CheckCpuDevice(device, "Embedding");
            TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, !sparse,
                              "Embedding: sparse gradients are not supported (tessel has no sparse tensors)");
            const std::optional<double> limit =
                max_norm.is_none() ? std::nullopt : std::optional<double>(max_norm.cast<double>());
            // torch's N(0, 1) (its reset_parameters: torch_random.h's draw) unless init_std asks for the C++
            // layer's N(0, init_std); none with given values
            const auto make = [&] {
              return std::make_unique<PyLayer<nn::Embedding>>(
                  num, dim, GenOrDefault(gen), init_std.value_or(1.0),
                  weight ? weight->dtype() : dtype.value_or(DefaultFloatDType()), padding_idx, limit, norm_type);
            };
            auto m = init_std || weight ? make() : MadeThenDrawn(make, [&](nn::Embedding& layer) {
              TorchEmbeddingInit(layer, GenOrDefault(gen));
            });
            m->set_scale_grad_by_freq(scale_grad_by_freq);
            if (weight) {
              // torch: Parameter(_weight) — the given values as the weight, its storage shared (no copy), the
              // padding row left as given; _freeze: no gradient.
              TESSEL_CHECK(weight->sizes() == Shape({num, dim}), "Embedding: Shape of weight does not match "
                           "num_embeddings and embedding_dim: _weight ", ShapeStr(weight->sizes()), ", expected ",
                           ShapeStr(Shape({num, dim})));
              Tensor w = Detach(*weight);
              w.set_requires_grad(!freeze);
              m->SetParameter("weight", w);
            } else if (freeze) {
              Tensor w = m->Param("weight");  // a handle: the flag is the parameter's
              w.set_requires_grad(false);
            }
            return m.release();
          }),
          py::arg("num_embeddings"), py::arg("embedding_dim"), py::arg("padding_idx") = py::none(),
          py::arg("max_norm") = py::none(), py::arg("norm_type") = 2.0, py::arg("scale_grad_by_freq") = false,
          py::arg("sparse") = false, py::arg("_weight") = py::none(), py::arg("_freeze") = false, py::kw_only(),
          py::arg("device") = py::none(), py::arg("dtype") = py::none(),
          py::arg("generator") = nullptr, py::arg("init_std") = py::none());
  emb.def("reset_parameters", [](nn::Embedding& self) { TorchEmbeddingInit(self, DefaultGenerator()); });
  // torch.nn.Embedding.from_pretrained: the given table as the weight (frozen by default).
  emb.def_static("from_pretrained", [](const py::object& embeddings, bool freeze, const py::object& padding_idx,
                                        const py::object& max_norm, double norm_type, bool scale_grad_by_freq,
                                        bool sparse) {
    const Tensor t = embeddings.cast<Tensor>();
    TESSEL_CHECK(t.dim() == 2, "Embeddings parameter is expected to be 2-dimensional, got ", ShapeStr(t.sizes()));
    return py::module_::import("tessel._C").attr("Embedding")(
        t.size(0), t.size(1), padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse, embeddings, freeze);
  }, py::arg("embeddings"), py::arg("freeze") = true, py::arg("padding_idx") = py::none(),
     py::arg("max_norm") = py::none(), py::arg("norm_type") = 2.0, py::arg("scale_grad_by_freq") = false,
     py::arg("sparse") = false);
  // Assignable, as torch's attributes (`emb.padding_idx = None`, `ln.eps = 1e-12`): the next forward uses them.
  emb.def_property("padding_idx", &nn::Embedding::padding_idx, &nn::Embedding::set_padding_idx);
  emb.def_property("max_norm", &nn::Embedding::max_norm, &nn::Embedding::set_max_norm);
  emb.def_property("norm_type", &nn::Embedding::norm_type, &nn::Embedding::set_norm_type);
  emb.def_property("scale_grad_by_freq", &nn::Embedding::scale_grad_by_freq, &nn::Embedding::set_scale_grad_by_freq);
  LayerClass<nn::LayerNorm> ln(m, "LayerNorm", py::dynamic_attr(), LayerTypeSetup());
  ln.def(py::init([](const py::object& shape, double eps, bool affine, bool bias, const py::object& device,
                     std::optional<DType> dtype) {
           CheckCpuDevice(device, "LayerNorm");
           return new PyLayer<nn::LayerNorm>(NormalizedShape(shape, "LayerNorm"), eps, affine,
                                             dtype.value_or(DefaultFloatDType()), bias);
         }),
         py::arg("normalized_shape"), py::arg("eps") = 1e-5, py::arg("elementwise_affine") = true,
         py::arg("bias") = true, py::kw_only(), py::arg("device") = py::none(), py::arg("dtype") = py::none());
  // As Linear's: None without one (bias=False or elementwise_affine=False), as torch's.
  for (const char* name : {"weight", "bias"}) {
    ln.def_property_readonly(name, [name](const py::object& self) { return ParamOrAttribute(self, name); });
  }
  ln.def_property_readonly("normalized_shape", [](const nn::LayerNorm& self) {
    return py::tuple(py::cast(self.normalized_shape()));
  });
  ln.def_property("eps", &nn::LayerNorm::eps, &nn::LayerNorm::set_eps);
  ln.def("reset_parameters", [](nn::LayerNorm& self) { OnesAndZeros(self); });
  ln.def_property_readonly("elementwise_affine", [](const nn::LayerNorm& self) { return self.HasParam("weight"); });
  LayerClass<nn::RMSNorm> rms(m, "RMSNorm", py::dynamic_attr(), LayerTypeSetup());
  rms.def(py::init([](const py::object& shape, std::optional<double> eps, bool affine, const py::object& device,
                      std::optional<DType> dtype_arg) {
            CheckCpuDevice(device, "RMSNorm");
            const DType dtype = dtype_arg.value_or(DefaultFloatDType());
            // torch: eps=None is finfo(input dtype).eps at each call (1.2e-7 in float32), not 1e-6: 38% apart
            // on small inputs; kept None so a module moved to float64 takes float64's.
            return new PyLayer<nn::RMSNorm>(NormalizedShape(shape, "RMSNorm"), eps, dtype, affine);
          }),
          py::arg("normalized_shape"), py::arg("eps") = py::none(), py::arg("elementwise_affine") = true,
          py::kw_only(), py::arg("device") = py::none(), py::arg("dtype") = py::none());
  rms.def_property_readonly("normalized_shape", [](const nn::RMSNorm& self) {
    return py::tuple(py::cast(self.normalized_shape()));
  });
  rms.def_property_readonly("elementwise_affine", [](const nn::RMSNorm& self) { return self.HasParam("weight"); });
  rms.def_property("eps", &nn::RMSNorm::eps, &nn::RMSNorm::set_eps);  // None for torch's default
  rms.def("reset_parameters", [](nn::RMSNorm& self) { OnesAndZeros(self); });
}

void BindGPT(py::module_& m) {
  py::class_<nn::GPTConfig>(m, "GPTConfig")
      .def(py::init([](int64_t vocab_size, int64_t d_model, int64_t n_layers, int64_t n_heads, int64_t seq_len,
                       std::string mlp, std::string norm, bool bias, bool tie_embeddings) {
             return nn::GPTConfig{.vocab_size = vocab_size, .d_model = d_model, .n_layers = n_layers,
                                  .n_heads = n_heads, .seq_len = seq_len, .mlp = std::move(mlp),
                                  .norm = std::move(norm), .bias = bias, .tie_embeddings = tie_embeddings};
           }),
           py::arg("vocab_size") = 256, py::arg("d_model") = 256, py::arg("n_layers") = 4, py::arg("n_heads") = 8,
           py::arg("seq_len") = 128, py::arg("mlp") = "gelu", py::arg("norm") = "layernorm", py::arg("bias") = false,
           py::arg("tie_embeddings") = false)
      .def_readonly("vocab_size", &nn::GPTConfig::vocab_size)
      .def_readonly("d_model", &nn::GPTConfig::d_model)
      .def_readonly("n_layers", &nn::GPTConfig::n_layers)
      .def_readonly("n_heads", &nn::GPTConfig::n_heads)
      .def_readonly("seq_len", &nn::GPTConfig::seq_len)
      .def("num_parameters", &nn::GPTConfig::NumParameters);
  py::class_<nn::GPT, Module, std::shared_ptr<nn::GPT>> gpt(m, "GPT", py::dynamic_attr(), LayerTypeSetup());
  gpt.def(py::init([](const nn::GPTConfig& cfg, uint64_t seed) {
             Generator gen(seed);
             return NoGil([&] { return std::make_unique<nn::GPT>(cfg, gen); });
           }),
           py::arg("config"), py::arg("seed") = 0)
      .def("loss", [](nn::GPT& g, const Tensor& idx, const Tensor& tgt) { return NoGil([&] { return g.Loss(idx, tgt); }); },
           py::arg("idx"), py::arg("targets"), "Mean cross-entropy of next-token logits; idx, targets: int64 [B, T]")
      .def_property_readonly("layers", [](const py::object& self) {
        nn::ModuleList& layers = self.cast<nn::GPT&>().layers();
        py::list out;
        for (size_t i = 0; i < layers.size(); ++i) out.append(AsPythonIn(*layers.at(i), self));
        return out;
      }, "The transformer blocks (a list; each keeps the model alive)");
}

}  // namespace

// torch.utils.checkpoint's core (tessel/utils/checkpoint.py adds torch's argument handling): fn maps the
// list of input tensors to a list of output tensors and runs under autograd::Checkpoint; policy None is
// full checkpointing, a list of op names keeps those ops' outputs (selective), a callable policy(op_name,
// inputs, outputs) -> bool decides per op call in the forward; preserve_rng replays the thread's default
// generator in the recompute; early_stop ends the recompute once every saved tensor is back.
void BindActivationCheckpoint(py::module_& m) {
  m.def("_checkpoint", [](py::object fn, const TensorList& inputs, py::object policy, bool preserve_rng,
                          bool allow_cache_entry_mutation, bool early_stop, bool determinism_check) {
    auto f = ShareCallable(std::move(fn));
    autograd::CheckpointOptions options;
    options.allow_cache_entry_mutation = allow_cache_entry_mutation;
    options.early_stop = early_stop;
    options.check_metadata = determinism_check;
    if (preserve_rng) options.generators = {&DefaultGenerator()};
    if (py::isinstance<py::list>(policy) || py::isinstance<py::tuple>(policy)) {
      options.save_outputs = autograd::SaveOutputsOf(policy.cast<std::vector<std::string>>());
    } else if (!policy.is_none()) {
      auto p = ShareCallable(std::move(policy));
      options.save_outputs = [p](const OpDef& op, const TensorList& inputs, const TensorList* outputs) {
        py::gil_scoped_acquire gil;
        py::object out = outputs == nullptr ? py::object(py::none()) : py::object(py::cast(*outputs));
        return py::bool_((*p)(op.name, py::cast(inputs), out)).cast<bool>();
      };
    }
    autograd::CheckpointFunction run = [f](const TensorList& in) {
      py::gil_scoped_acquire gil;
      return (*f)(in).cast<TensorList>();
    };
    return autograd::Checkpoint(std::move(run), inputs, std::move(options));
  }, py::arg("fn"), py::arg("inputs"), py::arg("policy"), py::arg("preserve_rng"),
     py::arg("allow_cache_entry_mutation") = false, py::arg("early_stop") = true, py::arg("determinism_check") = true);
  m.def("_in_checkpoint_recompute", &autograd::InCheckpointRecompute);
  // checkpoint_wrapper of a C++ layer (nn.Linear, ...): core/nn/checkpoint_wrapper.h's in-place wrapper, so
  // each call of the layer runs under autograd::Checkpoint (names and state-dict keys unchanged).
  m.def("_checkpoint_layer", [](Module& module, bool preserve_rng) {
    autograd::CheckpointOptions options;
    if (preserve_rng) options.generators = {&DefaultGenerator()};
    nn::ApplyActivationCheckpointing(module, std::move(options));
  }, py::arg("module"), py::arg("preserve_rng"));
  m.def("_is_checkpoint_wrapped", [](const Module& module) { return nn::CheckpointWrapper::Of(module) != nullptr; },
        py::arg("module"));
}

void BindModules(py::module_& m) {
  InstallModuleGc();
  m.def("_assign_full", [](const Tensor& p, const Tensor& full) { NoGil([&] { AssignFull(p, full); }); },
        py::arg("param"), py::arg("full"), "p = full outside autograd; a DTensor p gets its piece (AssignFull)");
  m.def("_fill_random_", [](const Tensor& t, const std::string& kind, double a, double b, Generator* gen,
                            double lower, double upper) {
    Distribution dist = Distribution::Uniform(a, b);
    if (kind == "normal") {
      dist = Distribution::Normal(a, b);
    } else if (kind == "trunc_normal") {
      dist = Distribution::TruncatedNormal(a, b, lower, upper);
    } else {
      TESSEL_CHECK(kind == "uniform", "_fill_random_: kind ", kind, " is not uniform, normal or trunc_normal");
    }
    NoGil([&] { FillRandomAny(t, GenOrDefault(gen), dist); });
  }, py::arg("tensor"), py::arg("kind"), py::arg("a"), py::arg("b"), py::arg("generator"), py::arg("lower") = 0.0,
        py::arg("upper") = 0.0,
        "uniform_ / normal_ / trunc_normal_ in place, outside autograd: a DTensor draws only its own piece");
  BindModule(m);
  BindLayers(m);
  BindGPT(m);
  BindActivationCheckpoint(m);
}

}  // namespace tessel::bindings
