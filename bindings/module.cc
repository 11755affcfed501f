// bindings/module.cc — the pybind11 module `tessel._C`: registers each area's bindings (bind.h) in
// dependency order. Thin by design (DESIGN.md): convert arguments, release the GIL around everything
// that computes or communicates, translate errors (errors_py.cc). No logic lives in bindings/.
//
// Example (Python): from tessel import _C; _C.Tensor, _C.Module, _C.fully_shard
#include <pybind11/stl.h>

#include "bindings/bind.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/memory/allocator.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::bindings {

PYBIND11_MODULE(_C, m) {
  m.doc() = "tessel: DTensor-style composable sharding (C++ core)";
  BindErrors(m);
  BindTensor(m);  // dtype and Tensor first: everything below takes or returns them
  BindTensorOps(m);
  BindFastInPlace(m);
  BindFunctional(m);
  BindModules(m);
  BindOptim(m);
  BindDistributed(m);
  BindCheckpoint(m);
  BindTensorParallel(m);  // after BindDistributed: styles take its placements and meshes
  BindPipelining(m);
  BindPlanner(m);
  m.def("memory_report", []() { return memory::Report(); });
  // The ledger in bytes: {ledger: (live, peak)} plus "total", for CPU device `index` (this thread's device, a
  // run_ranks rank's own, when -1); reset_peaks sets every peak there to its live value.
  m.def("_memory_stats", [](int index) {
    const Device device = index < 0 ? CurrentDevice() : Device::Cpu(index);
    const memory::DeviceStats stats = memory::Stats(device);
    py::dict out;
    for (int l = 0; l < memory::kNumLedgers; ++l) {
      const memory::Counter& c = stats.ledger[static_cast<size_t>(l)];
      out[py::str(std::string(memory::LedgerName(static_cast<memory::Ledger>(l))))] = py::make_tuple(c.live, c.peak);
    }
    out["total"] = py::make_tuple(stats.total.live, stats.total.peak);
    return out;
  }, py::arg("index") = -1);
  m.def("_reset_peak_memory", [](int index) { memory::ResetPeaks(index < 0 ? CurrentDevice() : Device::Cpu(index)); },
        py::arg("index") = -1);
  // Moves a dense tensor's bytes to the named ledger ("params", "grads", "optim", ...): what the Python layer
  // makes that C++ does not see being made (a Parameter wrapping a tensor, a Python optimizer's state).
  m.def("_retag_memory", [](const Tensor& t, const std::string& ledger) {
    for (int l = 0; l < memory::kNumLedgers; ++l) {
      const auto which = static_cast<memory::Ledger>(l);
      if (memory::LedgerName(which) != ledger) continue;
      if (t.defined() && !t.is_distributed()) t.impl()->RetagMemory(which);
      return;
    }
    TESSEL_FAIL(ErrorCode::kInvalidArgument, "_retag_memory: no ledger named '", ledger, "'");
  }, py::arg("tensor"), py::arg("ledger"));
  // torch.set_num_threads / get_num_threads: the calling thread's intra-op budget (core/base/parallel.h;
  // per thread, so each rank thread of run_ranks keeps its own).
  m.def("set_num_threads", [](int n) {
    TESSEL_CHECK(n >= 1, "set_num_threads: expected a positive integer, got ", n);
    SetNumThreads(n);
  });
  m.def("get_num_threads", []() { return NumThreads(); });
  // torch's argument parser also takes numpy's names, axis for dim and keepdims for keepdim
  // (probs.sum(axis=1, keepdims=True)), and out= on its functions. The bound function `fn` gets one more
  // overload, appended to its chain in place, that renames them (and writes the result into out=) and calls `fn`
  // again. pybind11 reaches it only when no earlier overload accepts the call as given, and it declines
  // (reference_cast_error: "try the next overload") when there is nothing to handle, so ordinary calls, and
  // calls that need a conversion (pybind11's second pass), run as before.
  m.def("_add_numpy_arg_names", [](py::object fn) {
    py::handle self = PyCFunction_Check(fn.ptr()) ? PyCFunction_GET_SELF(fn.ptr()) : nullptr;
    TESSEL_CHECK(self && py::isinstance<py::capsule>(self) &&
                     py::detail::is_function_record_capsule(py::reinterpret_borrow<py::capsule>(self)),
                 "_add_numpy_arg_names: not a pybind11 function");
    const auto* record = py::reinterpret_borrow<py::capsule>(self).get_pointer<py::detail::function_record>();
    const std::string name = record->name;
    const py::object scope = py::reinterpret_borrow<py::object>(record->scope);
    auto renaming = [fn](py::args args, py::kwargs kwargs) -> py::object {
      py::dict renamed;
      py::object out = py::none();
      bool changed = false;
      for (auto [key, value] : kwargs) {
        const std::string k = py::cast<std::string>(key);
        if (k == "out") {  // torch's out=: the result written into the given tensor (tessel/_out.py)
          out = py::reinterpret_borrow<py::object>(value);
          changed = true;
          continue;
        }
        const char* to = k == "axis" ? "dim" : k == "keepdims" ? "keepdim" : nullptr;
        changed |= to != nullptr;
        renamed[py::str(to ? std::string(to) : k)] = value;
      }
      if (!changed) throw py::reference_cast_error();
      py::object result = fn(*args, **renamed);
      if (out.is_none()) return result;
      return py::module_::import("tessel._out").attr("write_out")(result, out);
    };
    if (record->is_method) {
      py::cpp_function(renaming, py::name(name.c_str()), py::is_method(scope), py::sibling(fn));
    } else {
      py::cpp_function(renaming, py::name(name.c_str()), py::scope(scope), py::sibling(fn));
    }
  }, py::arg("fn"));
}

}  // namespace tessel::bindings
