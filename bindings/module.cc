// bindings/module.cc — the pybind11 module `tessel._C`: registers each area's bindings (bind.h) in
// dependency order. Thin by design (DESIGN.md): convert arguments, release the GIL around everything
// that computes or communicates, translate errors (errors_py.cc). No logic lives in bindings/.
//
// Example (Python): from tessel import _C; _C.Tensor, _C.Module, _C.fully_shard
#include <pybind11/stl.h>

#include "bindings/bind.h"
#include "core/memory/allocator.h"

namespace tessel::bindings {

PYBIND11_MODULE(_C, m) {
  m.doc() = "tessel: DTensor-style composable sharding (C++ core)";
  BindErrors(m);
  BindTensor(m);  // dtype and Tensor first: everything below takes or returns them
  BindTensorOps(m);
  BindFunctional(m);
  BindModules(m);
  BindOptim(m);
  BindDistributed(m);
  BindCheckpoint(m);
  BindTensorParallel(m);  // after BindDistributed: styles take its placements and meshes
  BindPipelining(m);
  m.def("memory_report", []() { return memory::Report(); });
}

}  // namespace tessel::bindings
