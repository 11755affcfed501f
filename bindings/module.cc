// bindings/module.cc — the pybind11 module `tessel._C`: thin (DESIGN.md): convert arguments, release
// the GIL around everything that computes or communicates, translate errors. No logic lives here.
//
// Processes: under tessel-run, `init_process_group()` returns this process's gloo world, and the same
// calls (meshes, fully_shard, checkpoints) run across processes.
// Threads: `run_ranks(n, fn)` starts n rank threads (threads backend) and calls the Python `fn(world)`
// on each with the GIL held; every bound call that computes, waits or communicates releases it, so the
// ranks' C++ work runs in parallel and a rank blocked in a collective never holds the GIL its peers need.
// Errors: tessel::Error becomes the Python exception its code names (core/base/error.h): ValueError,
// RuntimeError, IndexError, NotImplementedError, TimeoutError, KeyError, with the same message.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/load.h"
#include "checkpoint/save.h"
#include "checkpoint/state_dict.h"
#include "comm/backends/gloo.h"
#include "comm/backends/threads.h"
#include "comm/tracer.h"
#include "core/autograd/engine.h"
#include "core/base/error.h"
#include "core/memory/allocator.h"
#include "core/nn/transformer.h"
#include "core/ops/elementwise.h"
#include "core/ops/matmul.h"
#include "core/ops/reduction.h"
#include "core/ops/view.h"
#include "core/optim/optimizer.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"
#include "dtensor/device_mesh.h"
#include "dtensor/dtensor.h"
#include "fsdp/clip_grad_norm.h"
#include "fsdp/fully_shard.h"

namespace py = pybind11;

namespace tessel::bindings {
namespace {

using Release = py::call_guard<py::gil_scoped_release>;

DType FromNumpy(const py::dtype& dt) {
  if (dt.is(py::dtype::of<float>())) return DType::kFloat32;
  if (dt.is(py::dtype::of<double>())) return DType::kFloat64;
  if (dt.is(py::dtype::of<int64_t>())) return DType::kInt64;
  if (dt.is(py::dtype::of<int32_t>())) return DType::kInt32;
  if (dt.is(py::dtype("float16"))) return DType::kFloat16;
  if (dt.is(py::dtype::of<bool>())) return DType::kBool;
  throw py::type_error("tessel.tensor: unsupported numpy dtype " + py::cast<std::string>(py::str(static_cast<const py::handle&>(dt))) +
                       " (float32, float64, float16, int64, int32, bool)");
}

py::dtype ToNumpy(DType d) {
  switch (d) {
    case DType::kFloat32: return py::dtype::of<float>();
    case DType::kFloat64: return py::dtype::of<double>();
    case DType::kInt64: return py::dtype::of<int64_t>();
    case DType::kInt32: return py::dtype::of<int32_t>();
    case DType::kFloat16: return py::dtype("float16");
    case DType::kBool: return py::dtype::of<bool>();
    default: break;
  }
  throw py::type_error("Tensor.numpy: no numpy dtype for " + std::string(DTypeName(d)));
}

// A copy of a C-contiguous numpy array as a dense tensor.
Tensor FromArray(const py::array& in) {
  const py::array a = py::array::ensure(in, py::array::c_style);
  const DType dtype = FromNumpy(a.dtype());
  Shape shape(a.shape(), a.shape() + a.ndim());
  Tensor t = Empty(shape, dtype);
  std::memcpy(t.raw_data(), a.data(), static_cast<size_t>(a.nbytes()));
  return t;
}

// A copy of the full value (a DTensor is gathered: collective) as a numpy array.
py::array ToArray(const Tensor& t) {
  Tensor dense;
  {
    py::gil_scoped_release release;
    dense = Contiguous(t.impl()->MaterializeFull(t));
  }
  py::array out(ToNumpy(dense.dtype()), std::vector<py::ssize_t>(dense.sizes().begin(), dense.sizes().end()));
  std::memcpy(out.mutable_data(), dense.raw_data(), static_cast<size_t>(out.nbytes()));
  return out;
}

std::string Repr(const Tensor& t) {
  if (!t.defined()) return "tessel.Tensor(undefined)";
  return Str("tessel.Tensor(", ShapeStr(t.sizes()), ", ", DTypeName(t.dtype()), t.is_distributed() ? ", DTensor" : "",
             t.requires_grad() ? ", requires_grad" : "", ")");
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "tessel: DTensor-style composable sharding (C++ core)";

  // Errors: the exception each ErrorCode names.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      switch (e.code()) {
        case ErrorCode::kInvalidArgument: PyErr_SetString(PyExc_ValueError, e.what()); return;
        case ErrorCode::kOutOfRange: PyErr_SetString(PyExc_IndexError, e.what()); return;
        case ErrorCode::kUnimplemented: PyErr_SetString(PyExc_NotImplementedError, e.what()); return;
        case ErrorCode::kDeadlineExceeded: PyErr_SetString(PyExc_TimeoutError, e.what()); return;
        case ErrorCode::kNotFound: PyErr_SetString(PyExc_KeyError, e.what()); return;
        default: PyErr_SetString(PyExc_RuntimeError, e.what()); return;
      }
    }
  });

  py::class_<Tensor>(m, "Tensor")
      .def_property_readonly("shape", [](const Tensor& t) { return std::vector<int64_t>(t.sizes().begin(), t.sizes().end()); })
      .def_property_readonly("dtype", [](const Tensor& t) { return std::string(DTypeName(t.dtype())); })
      .def_property_readonly("is_distributed", &Tensor::is_distributed)
      .def_property("requires_grad", &Tensor::requires_grad, [](Tensor& t, bool v) { t.set_requires_grad(v); })
      .def_property_readonly("grad", [](const Tensor& t) -> std::optional<Tensor> {
        Tensor g = t.grad();
        return g.defined() ? std::optional<Tensor>(g) : std::nullopt;
      })
      .def("numpy", &ToArray, "A copy of the full value (a DTensor is gathered: collective)")
      .def("__add__", [](const Tensor& a, const Tensor& b) { return Add(a, b); }, Release())
      .def("__mul__", [](const Tensor& a, const Tensor& b) { return Mul(a, b); }, Release())
      .def("__mul__", [](const Tensor& a, double v) { return MulScalar(a, v); }, Release())
      .def("__matmul__", [](const Tensor& a, const Tensor& b) { return Matmul(a, b); }, Release())
      .def("sum", [](const Tensor& t) { return Sum(t); }, Release())
      // DTensor (torch.distributed.tensor names)
      .def_property_readonly("placements", [](const Tensor& t) {
        TESSEL_CHECK(t.is_distributed(), "placements: not a DTensor");
        return dtensor::DTensor(t).placements();
      })
      .def_property_readonly("device_mesh", [](const Tensor& t) {
        TESSEL_CHECK(t.is_distributed(), "device_mesh: not a DTensor");
        return dtensor::DTensor(t).mesh();
      })
      .def("to_local", [](const Tensor& t) { return dtensor::DTensor(t).ToLocal(); }, Release())
      .def("full_tensor", [](const Tensor& t) { return dtensor::DTensor(t).FullTensor(); }, Release(),
           "The whole global tensor on every rank (collective)")
      .def("redistribute", [](const Tensor& t, const dtensor::DeviceMesh& mesh, std::vector<dtensor::Placement> p) {
        return dtensor::DTensor(t).Redistribute(mesh, std::move(p)).tensor();
      }, py::arg("device_mesh"), py::arg("placements"), Release(), "Differentiable; collective over the mesh")
      .def("item", [](const Tensor& t) { return t.item<double>(); }, Release())
      .def("backward", [](const Tensor& t) { Backward(t); }, Release())
      .def("__repr__", &Repr);
  m.def("tensor", &FromArray, py::arg("array"), "A tessel Tensor holding a copy of a numpy array");

  // Placements (torch.distributed.tensor.{Shard, Replicate, Partial}).
  py::class_<dtensor::Shard>(m, "Shard")
      .def(py::init([](int64_t dim) { return dtensor::Shard{dim}; }), py::arg("dim"))
      .def_readonly("dim", &dtensor::Shard::dim)
      .def("__eq__", [](const dtensor::Shard& a, const dtensor::Shard& b) { return a == b; })
      .def("__repr__", &dtensor::Shard::ToLongString);
  py::class_<dtensor::Replicate>(m, "Replicate")
      .def(py::init<>())
      .def("__eq__", [](const dtensor::Replicate&, const dtensor::Replicate&) { return true; })
      .def("__repr__", &dtensor::Replicate::ToLongString);
  py::class_<dtensor::Partial>(m, "Partial")
      .def(py::init([](const std::string& op) {
             static const std::map<std::string, comm::ReduceOp> kOps = {
                 {"sum", comm::ReduceOp::kSum}, {"avg", comm::ReduceOp::kAvg}, {"max", comm::ReduceOp::kMax},
                 {"min", comm::ReduceOp::kMin}};
             auto it = kOps.find(op);
             TESSEL_CHECK(it != kOps.end(), "Partial: reduce op must be sum, avg, max or min, got '", op, "'");
             return dtensor::Partial{it->second};
           }),
           py::arg("reduce_op") = "sum")
      .def("__eq__", [](const dtensor::Partial& a, const dtensor::Partial& b) { return a == b; })
      .def("__repr__", &dtensor::Partial::ToLongString);

  py::class_<nn::Module>(m, "Module")
      .def("named_parameters", [](const nn::Module& mod) {
        py::dict out;  // FQN -> Tensor, in registration order
        for (const auto& [fqn, p] : mod.NamedParameters()) out[py::str(fqn)] = py::cast(p);
        return out;
      })
      .def("parameters", [](const nn::Module& mod) { return mod.Parameters(); });

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
      .def_readonly("seq_len", &nn::GPTConfig::seq_len)
      .def("num_parameters", &nn::GPTConfig::NumParameters);

  py::class_<nn::GPT, nn::Module>(m, "GPT")
      .def(py::init([](const nn::GPTConfig& cfg, uint64_t seed) {
             Generator gen(seed);
             return std::make_unique<nn::GPT>(cfg, gen);
           }),
           py::arg("config"), py::arg("seed") = 0, Release())
      .def("loss", &nn::GPT::Loss, py::arg("idx"), py::arg("targets"), Release(),
           "Mean cross-entropy of next-token logits; idx, targets: int64 [B, T]")
      .def_property_readonly("layers", [](nn::GPT& g) {
        std::vector<nn::Module*> out;
        for (size_t i = 0; i < g.layers().size(); ++i) out.push_back(g.layers().at(i));
        return out;
      }, py::return_value_policy::reference_internal);

  py::class_<optim::Optimizer>(m, "Optimizer")
      .def("step", &optim::Optimizer::Step, Release())
      .def("zero_grad", &optim::Optimizer::ZeroGrad)
      .def_property("lr", &optim::Optimizer::lr, &optim::Optimizer::set_lr);
  py::class_<optim::AdamW, optim::Optimizer>(m, "AdamW")
      .def(py::init([](const nn::Module& model, double lr, double weight_decay, double beta1, double beta2,
                       double eps) {
             return std::make_unique<optim::AdamW>(
                 model.NamedParameters(),
                 optim::AdamWOptions{.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = weight_decay});
           }),
           py::arg("model"), py::arg("lr") = 1e-3, py::arg("weight_decay") = 1e-2, py::arg("beta1") = 0.9,
           py::arg("beta2") = 0.999, py::arg("eps") = 1e-8, py::keep_alive<1, 2>());

  m.def("clip_grad_norm", [](const nn::Module& model, double max_norm) {
    return optim::ClipGradNorm(model.Parameters(), max_norm);
  }, py::arg("model"), py::arg("max_norm"), Release(),
        "Scales gradients so their global L2 norm is at most max_norm; returns the norm before clipping");

  // ---- distributed ----
  py::class_<comm::ProcessGroup, comm::ProcessGroupPtr>(m, "ProcessGroup")
      .def_property_readonly("rank", &comm::ProcessGroup::rank)
      .def_property_readonly("size", &comm::ProcessGroup::size)
      .def("barrier", [](comm::ProcessGroup& pg) { pg.Barrier()->Wait(); }, Release());

  m.def("run_ranks", [](int world_size, const std::function<void(comm::ProcessGroupPtr)>& fn) {
    comm::RunRanks(world_size, [&](comm::ProcessGroupPtr world) {
      py::gil_scoped_acquire gil;
      fn(std::move(world));
    });
  }, py::arg("world_size"), py::arg("fn"), Release(),
        "Runs fn(world) on world_size in-process ranks (threads backend); rethrows the first failure");

  m.def("init_process_group", []() { return comm::InitProcessGroupFromEnv(); }, Release(),
        "The gloo world of this process, from RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT as set by "
        "tessel-run (torchrun's variables); collective");

  py::class_<dtensor::DeviceMesh>(m, "DeviceMesh")
      .def_property_readonly("shape", [](const dtensor::DeviceMesh& d) { return d.shape(); })
      .def("__repr__", &dtensor::DeviceMesh::ToString);
  m.def("init_device_mesh", [](const comm::ProcessGroupPtr& world, std::vector<int64_t> shape,
                               std::vector<std::string> names) {
    return dtensor::InitDeviceMesh(world, std::move(shape), std::move(names));
  }, py::arg("world"), py::arg("shape"), py::arg("axis_names"), Release());

  m.def("distribute_tensor", [](const Tensor& t, const dtensor::DeviceMesh& mesh, std::vector<dtensor::Placement> p) {
    return dtensor::DistributeTensor(t, mesh, std::move(p)).tensor();
  }, py::arg("tensor"), py::arg("device_mesh"), py::arg("placements"), Release(),
        "This rank's piece of a full tensor (every rank passes the same value; no communication)");
  m.def("from_local", [](const Tensor& local, const dtensor::DeviceMesh& mesh, std::vector<dtensor::Placement> p) {
    return dtensor::DTensor::FromLocal(local, mesh, std::move(p)).tensor();
  }, py::arg("local_tensor"), py::arg("device_mesh"), py::arg("placements"), Release(),
        "DTensor.from_local: wraps each rank's local piece (even shards assumed, as in PyTorch)");

  // Counts the collectives this rank issues inside `with CommTracer() as t:`; t.summary().
  struct PyTracer {
    std::unique_ptr<comm::CommTracer> tracer;
    std::string last_summary;
    int last_total = 0;
  };
  py::class_<PyTracer>(m, "CommTracer")
      .def(py::init<>())
      .def("__enter__", [](PyTracer& t) -> PyTracer& {
        t.tracer = std::make_unique<comm::CommTracer>();
        return t;
      }, py::return_value_policy::reference)
      .def("__exit__", [](PyTracer& t, py::args) {
        t.last_summary = t.tracer->Summary();
        t.last_total = t.tracer->Total();
        t.tracer.reset();
      })
      .def("summary", [](const PyTracer& t) { return t.tracer ? t.tracer->Summary() : t.last_summary; },
           "\"all_gather(tp) x2, reduce_scatter(dp) x1\"")
      .def("total", [](const PyTracer& t) { return t.tracer ? t.tracer->Total() : t.last_total; });

  py::class_<fsdp::FSDPModule>(m, "FSDPModule");
  m.def("fully_shard", [](nn::Module& module, const dtensor::DeviceMesh& mesh) {
    return fsdp::FullyShard(module, mesh);
  }, py::arg("module"), py::arg("mesh"), Release(), py::keep_alive<0, 1>(),
        "FSDP2 fully_shard: shards module's parameters over mesh (wrap blocks first, then the root)");
  m.def("clip_grad_norm_fsdp", [](const fsdp::FSDPModule& root, double max_norm) {
    return fsdp::ClipGradNorm(root, max_norm);
  }, py::arg("root"), py::arg("max_norm"), Release());

  // ---- checkpoint ----
  m.def("save", [](const nn::Module& model, const optim::Optimizer* opt, const std::string& dir,
                   const comm::ProcessGroupPtr& world) {
    checkpoint::Save(checkpoint::GetStateDict(model, opt), dir, world);
  }, py::arg("model"), py::arg("optimizer"), py::arg("dir"), py::arg("world") = nullptr, Release(),
        "Sharded checkpoint of the model (and optimizer) state; collective over world");
  m.def("load", [](const nn::Module& model, optim::Optimizer* opt, const std::string& dir) {
    checkpoint::StateDict sd = checkpoint::GetStateDict(model, opt);
    checkpoint::Load(sd, dir);
    if (opt != nullptr) checkpoint::SetOptimizerStateDict(model, *opt, sd);
  }, py::arg("model"), py::arg("optimizer"), py::arg("dir"), Release(),
        "Loads a checkpoint saved in any layout or world size into the model (and optimizer), in place");

  m.def("memory_report", []() { return memory::Report(); });
}

}  // namespace tessel::bindings
