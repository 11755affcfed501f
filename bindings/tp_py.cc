// bindings/tp_py.cc — tensor parallelism (tp/): the ParallelStyle value types, ParallelizeModule over a plan
// of FQN patterns, and the LossParallel scope. The package (tessel/distributed/tensor/parallel/) gives
// them torch's keyword names and defaults (input_layouts=None meaning the style's default, a single
// placement for a one-input module, ...) and builds these plain values.
//
// Invariant: thin — every style converts field by field into the C++ struct (placements go through the
// Shard/Replicate/Partial classes of distributed_py.cc); applying it is tp::ParallelizeModule with the GIL
// released. A plan is an ordered list of (pattern, style): the order of a Python dict is kept.
//
// Example (Python):
//   _C.parallelize_module(mlp, mesh, [("fc", _C.ColwiseParallel()), ("proj", _C.RowwiseParallel())], None)
//   with _C._LossParallel(): loss = F.cross_entropy(logits, targets); loss.backward()
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "bindings/bind.h"
#include "core/base/error.h"
#include "tp/loss_parallel.h"
#include "tp/parallel_style.h"
#include "tp/parallelize_module.h"

namespace tessel::bindings {
namespace {

using dtensor::Placement;
using tp::Layouts;

template <typename Style>
py::class_<Style> StyleClass(py::module_& m, const char* name) {
  py::class_<Style> c(m, name);
  c.def("__eq__", [](const Style& a, const Style& b) { return a == b; })
      .def("__repr__", [](const Style& s) { return tp::ToString(tp::ParallelStyle(s)); });
  return c;
}

void BindStyles(py::module_& m) {
  StyleClass<tp::ColwiseParallel>(m, "ColwiseParallel")
      .def(py::init([](Placement in, Placement out, bool local) { return tp::ColwiseParallel{in, out, local}; }),
           py::arg("input_layouts") = Placement(dtensor::Replicate{}),
           py::arg("output_layouts") = Placement(dtensor::Shard{-1}), py::arg("use_local_output") = true);
  StyleClass<tp::RowwiseParallel>(m, "RowwiseParallel")
      .def(py::init([](Placement in, Placement out, bool local) { return tp::RowwiseParallel{in, out, local}; }),
           py::arg("input_layouts") = Placement(dtensor::Shard{-1}),
           py::arg("output_layouts") = Placement(dtensor::Replicate{}), py::arg("use_local_output") = true);
  StyleClass<tp::SequenceParallel>(m, "SequenceParallel")
      .def(py::init([](int64_t dim, bool local) { return tp::SequenceParallel{dim, local}; }),
           py::arg("sequence_dim") = 1, py::arg("use_local_output") = false);
  StyleClass<tp::PrepareModuleInput>(m, "PrepareModuleInput")
      .def(py::init([](Layouts in, Layouts desired, bool local) {
             return tp::PrepareModuleInput{std::move(in), std::move(desired), local};
           }),
           py::arg("input_layouts"), py::arg("desired_input_layouts"), py::arg("use_local_output") = false);
  StyleClass<tp::PrepareModuleOutput>(m, "PrepareModuleOutput")
      .def(py::init([](Layouts out, Layouts desired, bool local) {
             return tp::PrepareModuleOutput{std::move(out), std::move(desired), local};
           }),
           py::arg("output_layouts"), py::arg("desired_output_layouts"), py::arg("use_local_output") = true);
  StyleClass<tp::PrepareModuleInputOutput>(m, "PrepareModuleInputOutput")
      .def(py::init([](Layouts in, Layouts desired_in, bool local_in, Layouts out, Layouts desired_out,
                       bool local_out) {
             return tp::PrepareModuleInputOutput{std::move(in), std::move(desired_in), local_in,
                                                 std::move(out), std::move(desired_out), local_out};
           }),
           py::arg("input_layouts"), py::arg("desired_input_layouts"), py::arg("use_local_input") = false,
           py::arg("output_layouts"), py::arg("desired_output_layouts"), py::arg("use_local_output") = true);
}

// A LossParallel scope as a Python context manager (per thread, like the C++ guard).
struct PyLossParallel {
  std::unique_ptr<tp::LossParallel> scope;
};

void BindParallelize(py::module_& m) {
  // PrepareModuleInput's per-input treatment and layout checks, for the Python face's with_kwargs hook.
  m.def("_tp_prepare_input", [](const Tensor& x, std::optional<Placement> layout, std::optional<Placement> desired,
                                bool use_local, const dtensor::DeviceMesh& mesh, const std::string& who) {
    return NoGil([&] { return tp::PrepareModuleInputValue(x, layout, desired, use_local, mesh, who); });
  });
  m.def("_tp_check_input_layouts", &tp::CheckPrepareInputLayouts);
  m.def("parallelize_module", [](nn::Module& module, const dtensor::DeviceMesh& mesh, const tp::ParallelizePlan& plan,
                                 std::optional<int> src_data_rank, const std::string& tp_axis) {
    tp::ParallelizeOptions options{tp_axis, src_data_rank};
    NoGil([&] { tp::ParallelizeModule(module, mesh, plan, options); });
  }, py::arg("module"), py::arg("mesh"), py::arg("plan"), py::arg("src_data_rank"), py::arg("tp_axis") = "tp",
        "tp::ParallelizeModule with a plan of (FQN pattern, style) pairs, applied in order");
  m.def("parallelize_module_with_style", [](nn::Module& module, const dtensor::DeviceMesh& mesh,
                                            const tp::ParallelStyle& style, std::optional<int> src_data_rank,
                                            const std::string& tp_axis, const std::string& fqn) {
    tp::ParallelizeOptions options{tp_axis, src_data_rank, fqn};
    NoGil([&] { tp::ParallelizeModule(module, mesh, style, options); });
  }, py::arg("module"), py::arg("mesh"), py::arg("style"), py::arg("src_data_rank"), py::arg("tp_axis") = "tp",
        py::arg("fqn") = "", "tp::ParallelizeModule with one style for the module itself (`fqn`: its path)");
  m.def("tp_match_modules", &tp::MatchModules, py::arg("root"), py::arg("pattern"),
        "FQNs of the submodules a plan pattern matches, pre-order");
  py::class_<PyLossParallel>(m, "_LossParallel")
      .def(py::init<>())
      .def("__enter__", [](PyLossParallel& s) {
        TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, s.scope == nullptr, "loss_parallel: already entered");
        s.scope = std::make_unique<tp::LossParallel>();
      })
      .def("__exit__", [](PyLossParallel& s, py::args) { s.scope.reset(); });
}

}  // namespace

void BindTensorParallel(py::module_& m) {
  BindStyles(m);
  BindParallelize(m);
}

}  // namespace tessel::bindings
