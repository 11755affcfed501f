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
  // torch.set_num_threads / get_num_threads: the calling thread's intra-op budget (core/base/parallel.h;
  // per thread, so each rank thread of run_ranks keeps its own).
  m.def("set_num_threads", [](int n) {
    TESSEL_CHECK(n >= 1, "set_num_threads: expected a positive integer, got ", n);
    SetNumThreads(n);
  });
  m.def("get_num_threads", []() { return NumThreads(); });
}

}  // namespace tessel::bindings
