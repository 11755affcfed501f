// bindings/checkpoint_py.cc — sharded checkpoints (checkpoint/): save and load a model (and optimizer)
// in any layout and world size, and torch.distributed.checkpoint.state_dict's get/set.
//
// Invariant: a missing checkpoint directory is FileNotFoundError naming it (the one filesystem case
// Python users test for); every other problem is the checkpoint's own tessel::Error (errors_py.cc).
//
// Example (Python): _C.save(model, opt, "/tmp/ckpt", world); _C.load(model, opt, "/tmp/ckpt", strict=True)
#include <pybind11/stl.h>

#include <filesystem>
#include <string>

#include <chrono>
#include <future>
#include <memory>

#include "bindings/bind.h"
#include "checkpoint/async_save.h"
#include "checkpoint/export.h"
#include "checkpoint/load.h"
#include "checkpoint/save.h"
#include "checkpoint/metadata.h"
#include "checkpoint/state_dict.h"
#include "core/nn/module.h"
#include "core/optim/optimizer.h"

namespace tessel::bindings {
namespace {

// (Every checkpoint reader calls it: tessel.load, dcp.load, their metadata readers; the message names no one API.)
void RequireDirectory(const std::string& dir) {
  if (!std::filesystem::is_directory(dir)) {
    const std::string what = std::filesystem::exists(dir) ? "' is a file, not a checkpoint directory"
                                                           : "' does not exist";
    PyErr_SetObject(PyExc_FileNotFoundError,
                    py::make_tuple(2, "checkpoint load: no checkpoint directory '" + dir + what, dir).ptr());
    throw py::error_already_set();
  }
}

py::dict LoadResultDict(const checkpoint::LoadResult& r) {
  py::dict d;
  d["missing_keys"] = r.missing_keys;
  d["unexpected_keys"] = r.unexpected_keys;
  d["bytes_read"] = r.bytes_read;
  return d;
}

}  // namespace

void BindCheckpoint(py::module_& m) {
  m.def("save", [](const nn::Module& model, const optim::Optimizer* opt, const std::string& dir,
                   const comm::ProcessGroupPtr& world) {
    NoGil([&] { checkpoint::Save(checkpoint::GetStateDict(model, opt), dir, world); });
  }, py::arg("model"), py::arg("optimizer"), py::arg("dir"), py::arg("world") = nullptr,
        "Sharded checkpoint of the model (and optimizer) state; collective over world");
  m.def("load", [](nn::Module& model, optim::Optimizer* opt, const std::string& dir, bool strict) {
    RequireDirectory(dir);
    checkpoint::LoadResult r = NoGil([&] {
      checkpoint::StateDict sd = checkpoint::GetStateDict(model, opt);
      checkpoint::LoadResult res = checkpoint::Load(sd, dir, {.strict = strict});
      if (opt != nullptr) checkpoint::SetOptimizerStateDict(model, *opt, sd);
      return res;
    });
    return LoadResultDict(r);
  }, py::arg("model"), py::arg("optimizer"), py::arg("dir"), py::kw_only(), py::arg("strict") = true,
        "Loads a checkpoint saved in any layout or world size into the model (and optimizer), in place. "
        "strict=False returns the missing / unexpected keys instead of raising");

  // torch.distributed.checkpoint's pieces: state dicts as {fqn: Tensor | bytes | int | float | str}.
  py::class_<checkpoint::Bytes>(m, "_Bytes")
      .def(py::init([](py::bytes b) { return checkpoint::Bytes{std::string(b)}; }))
      .def("__bytes__", [](const checkpoint::Bytes& b) { return py::bytes(b.data); });
  m.def("_get_state_dict", [](const nn::Module& model, const optim::Optimizer* opt, bool full_state_dict) {
    return NoGil([&] { return checkpoint::GetStateDict(model, opt, {.full_state_dict = full_state_dict}); });
  }, py::arg("model"), py::arg("optimizer"), py::arg("full_state_dict") = false);
  // One C++ optimizer's entries (optim.state.*, optim.step.*, optim.hyper.*): a Python optimizer with several
  // parameter groups holds one C++ optimizer per group and merges them (tessel/optim/__init__.py).
  m.def("_get_optimizer_state_dict", [](const nn::Module& model, const optim::Optimizer& opt, bool full_state_dict) {
    return NoGil([&] { return checkpoint::GetOptimizerStateDict(model, opt, {.full_state_dict = full_state_dict}); });
  }, py::arg("model"), py::arg("optimizer"), py::arg("full_state_dict") = false);
  // Each optimizer parameter's FQN in `model`, matched by identity (checkpoint::OptimizerParamFqns).
  m.def("_optimizer_param_fqns", [](const nn::Module& model, const optim::Optimizer& opt) {
    return checkpoint::OptimizerParamFqns(model, opt);
  }, py::arg("model"), py::arg("optimizer"));
  m.def("_set_optimizer_state_dict", [](const nn::Module& model, optim::Optimizer& opt, const checkpoint::StateDict& sd) {
    NoGil([&] { checkpoint::SetOptimizerStateDict(model, opt, sd); });
  }, py::arg("model"), py::arg("optimizer"), py::arg("state_dict"));
  m.def("_set_state_dict", [](nn::Module& model, optim::Optimizer* opt, const checkpoint::StateDict& sd, bool strict) {
    nn::LoadResult r = NoGil([&] {
      nn::LoadResult res = checkpoint::SetModelStateDict(model, sd, strict);
      if (opt != nullptr) checkpoint::SetOptimizerStateDict(model, *opt, sd);
      return res;
    });
    return py::make_tuple(r.missing_keys, r.unexpected_keys);
  }, py::arg("model"), py::arg("optimizer"), py::arg("state_dict"), py::arg("strict") = true);
  // local_error: this rank failed before it could save (checkpoint/save.h SaveOptions::local_error).
  m.def("_dcp_save", [](const checkpoint::StateDict& sd, const std::string& dir, const comm::ProcessGroupPtr& world,
                        const std::string& local_error) {
    checkpoint::SaveOptions options;
    options.local_error = local_error;
    NoGil([&] { checkpoint::Save(sd, dir, world, options); });
  }, py::arg("state_dict"), py::arg("dir"), py::arg("world") = nullptr, py::arg("local_error") = "");
  // dcp.async_save: one AsyncSaver per process group (collective to make: it makes its own group);
  // save() returns once this rank's share is snapshotted, the future's result() once the checkpoint is
  // committed (rethrowing the save's error from any rank).
  using SaveFuture = std::shared_future<checkpoint::SaveResult>;
  py::class_<SaveFuture>(m, "_AsyncSaveFuture")
      .def("result", [](const SaveFuture& f) {
        const checkpoint::SaveResult r = NoGil([&] { return f.get(); });
        return py::dict(py::arg("save_id") = r.save_id, py::arg("bytes_written") = r.bytes_written,
                        py::arg("total_bytes") = r.total_bytes);
      })
      .def("done", [](const SaveFuture& f) { return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready; });
  py::class_<checkpoint::AsyncSaver, std::shared_ptr<checkpoint::AsyncSaver>>(m, "_AsyncSaver")
      .def(py::init([](const comm::ProcessGroupPtr& world) {
             return NoGil([&] { return std::make_shared<checkpoint::AsyncSaver>(world); });
           }),
           py::arg("world") = nullptr)
      .def("save", [](checkpoint::AsyncSaver& s, const checkpoint::StateDict& sd, const std::string& dir) {
        return NoGil([&] { return s.Save(sd, dir); });
      }, py::arg("state_dict"), py::arg("dir"))
      .def("wait", [](checkpoint::AsyncSaver& s) { NoGil([&] { s.Wait(); }); })
      .def_property_readonly("last_stall_seconds", &checkpoint::AsyncSaver::last_stall_seconds);
  // checkpoint::Load's recovery alone (a dead save's temporaries removed, its moved-aside index restored): the
  // Python loads run it before they read the metadata themselves; plain metadata readers do not (they stay
  // read-only: a process polling a trainer's checkpoints takes no lock and waits for no save).
  m.def("_dcp_recover", [](const std::string& dir) { NoGil([&] { checkpoint::RecoverBeforeLoad(dir); }); },
        py::arg("dir"));
  // The kind of every non-tensor entry of DIR ("bytes", "int64", "float64", "string"): DCP's load takes such
  // values from the checkpoint whatever the state dict held (tessel/distributed/checkpoint/__init__.py).
  m.def("_dcp_value_kinds", [](const std::string& dir) {
    RequireDirectory(dir);
    const checkpoint::Metadata md = NoGil([&] { return checkpoint::ReadMetadata(dir); });
    std::map<std::string, std::string> kinds;
    for (const auto& [key, range] : md.bytes) kinds[key] = "bytes";
    for (const auto& [key, v] : md.values) {
      kinds[key] = std::holds_alternative<int64_t>(v) ? "int64" : std::holds_alternative<double>(v) ? "float64" : "string";
    }
    return kinds;
  }, py::arg("dir"));
  // Every tensor entry of DIR: (dtype, global shape) by FQN (format_utils.dcp_to_torch_save builds its full
  // state dict from them).
  m.def("_dcp_tensor_specs", [](const std::string& dir) {
    RequireDirectory(dir);
    const checkpoint::Metadata md = NoGil([&] { return checkpoint::ReadMetadata(dir); });
    std::map<std::string, std::pair<DType, std::vector<int64_t>>> specs;
    for (const auto& [key, t] : md.tensors) {
      specs[key] = {t.dtype, std::vector<int64_t>(t.shape.begin(), t.shape.end())};
    }
    return specs;
  }, py::arg("dir"));
  // DIR's metadata.json for torch's FileSystemReader.read_metadata(): (tensors {fqn: (dtype, shape, layout,
  // [(offsets, sizes), ...])}, the keys of non-tensor values, save id, world size, format version).
  m.def("_dcp_metadata", [](const std::string& dir) {
    RequireDirectory(dir);
    const checkpoint::Metadata md = NoGil([&] { return checkpoint::ReadMetadata(dir); });
    py::dict tensors;
    for (const auto& [key, t] : md.tensors) {
      py::list chunks;
      for (const checkpoint::ChunkMeta& c : t.chunks) {
        chunks.append(py::make_tuple(py::tuple(py::cast(c.box.offsets)), py::tuple(py::cast(c.box.sizes))));
      }
      tensors[py::str(key)] = py::make_tuple(t.dtype, py::tuple(py::cast(t.shape)), t.layout, chunks);
    }
    py::list others;
    for (const auto& [key, range] : md.bytes) others.append(key);
    for (const auto& [key, v] : md.values) others.append(key);
    return py::make_tuple(tensors, others, md.save_id, md.world_size, md.version);
  }, py::arg("dir"));
  m.def("_dcp_load", [](checkpoint::StateDict sd, const std::string& dir, bool strict, bool allow_unexpected_keys) {
    RequireDirectory(dir);
    // DCP's semantics: the checkpoint may hold more than the state dict (a model-only state dict from a
    // training checkpoint); strict covers missing keys only. tessel.load passes false (as _C.load).
    checkpoint::LoadResult r = NoGil([&] {
      return checkpoint::Load(sd, dir, {.strict = strict, .allow_unexpected_keys = allow_unexpected_keys});
    });
    return py::make_tuple(sd, LoadResultDict(r));  // tensors were filled in place; other values are new
  }, py::arg("state_dict"), py::arg("dir"), py::arg("strict") = true, py::arg("allow_unexpected_keys") = true);
  // HuggingFaceStorageReader / Writer (tessel/distributed/checkpoint): one safetensors file into a state dict
  // of any layout (each rank reads its own boxes), and a tessel checkpoint out to one safetensors file.
  m.def("_import_safetensors", [](checkpoint::StateDict sd, const std::string& path) {
    checkpoint::LoadResult r = NoGil([&] {
      return checkpoint::ImportSafetensors(sd, path, {.strict = false, .allow_unexpected_keys = true});
    });
    return py::make_tuple(sd, LoadResultDict(r));
  }, py::arg("state_dict"), py::arg("path"));
  m.def("_export_safetensors", [](const std::string& dir, const std::string& out_path) {
    RequireDirectory(dir);
    const checkpoint::ExportResult r = NoGil([&] { return checkpoint::ExportToSafetensors(dir, out_path); });
    return py::dict(py::arg("num_tensors") = r.num_tensors, py::arg("tensor_bytes") = r.tensor_bytes);
  }, py::arg("dir"), py::arg("out_path"));
}

}  // namespace tessel::bindings
