// bindings/distributed_py.cc — process groups (threads backend through run_ranks, gloo under tessel_run),
// DeviceMesh, placements and DTensor methods, the comm tracer, and fully_shard with its options and
// FSDPModule methods (torch.distributed's names).
//
// Threads: `run_ranks(n, fn)` starts n rank threads (threads backend) and calls the Python `fn(world)` on
// each with the GIL held; every bound call that computes, waits or communicates releases it, so the ranks'
// C++ work runs in parallel and a rank blocked in a collective never holds the GIL its peers need.
// Invariant: nothing here keeps a process-wide "current group"; the Python package keeps torch's default
// group per rank thread (tessel/distributed/__init__.py) and passes it in.
//
// Example (Python):
//   def fn(world): mesh = _C.init_device_mesh(world, [world.size], ["dp"]); _C.fully_shard(model, mesh)
//   _C.run_ranks(2, fn)
#include <pybind11/functional.h>
#include <pybind11/chrono.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "bindings/bind.h"
#include "core/dispatch/dispatcher.h"
#include "comm/backends/gloo.h"
#include "comm/backends/threads.h"
#include "comm/tracer.h"
#include "core/base/error.h"
#include "core/ops/unary.h"
#include "core/tensor/factory.h"
#include "core/tensor/shape.h"
#include "dtensor/device_mesh.h"
#include "dtensor/dispatch.h"
#include "dtensor/dtensor.h"
#include "dtensor/dtensor_impl.h"
#include "dtensor/layout.h"
#include "fsdp/clip_grad_norm.h"
#include "fsdp/state.h"
#include "fsdp/fully_shard.h"
#include "fsdp/replicate.h"

namespace tessel::bindings {
namespace {

// torch's DeviceMesh.__getitem__ raises KeyError for a name the mesh lacks.
void CheckMeshDimNames(const dtensor::DeviceMesh& d, const std::vector<std::string>& names) {
  const std::vector<std::string>& axes = d.axis_names();
  const std::vector<std::string> flattened = d.FlattenedNames();
  for (const std::string& n : names) {
    if (std::find(axes.begin(), axes.end(), n) != axes.end()) continue;
    if (std::find(flattened.begin(), flattened.end(), n) != flattened.end()) continue;
    std::string valid;  // torch's list: the dims, then the flattened names
    for (const std::vector<std::string>* list : {&axes, &flattened}) {
      for (const std::string& v : *list) valid += Str(valid.empty() ? "" : ", ", "'", v, "'");
    }
    throw py::key_error(Str("Invalid mesh_dim_names ('", n, "',) specified. Valid mesh_dim_names are [", valid,
                            "]."));
  }
}

// A collective's Work: waited here unless async_op (then Python gets the handle and waits itself).
py::object Issue(bool async_op, const std::function<comm::WorkPtr()>& issue) {
  comm::WorkPtr work = NoGil([&] {
    comm::WorkPtr w = issue();
    if (!async_op) w->Wait();
    return w;
  });
  return async_op ? py::cast(work) : py::none();
}

void BindCollectives(py::class_<comm::ProcessGroup, comm::ProcessGroupPtr>& pg) {
  using PG = comm::ProcessGroup;
  pg.def("all_reduce", [](PG& g, const Tensor& t, comm::ReduceOp op, bool async_op) {
      return Issue(async_op, [&] { return g.AllReduce(t, op); });
    }, py::arg("tensor"), py::arg("op") = comm::ReduceOp::kSum, py::arg("async_op") = false, "In place")
      .def("all_gather_into_tensor", [](PG& g, const Tensor& out, const Tensor& in, bool async_op) {
        return Issue(async_op, [&] { return g.AllGather(out, in); });
      }, py::arg("output_tensor"), py::arg("input_tensor"), py::arg("async_op") = false)
      .def("reduce_scatter_tensor", [](PG& g, const Tensor& out, const Tensor& in, comm::ReduceOp op, bool async_op) {
        return Issue(async_op, [&] { return g.ReduceScatter(out, in, op); });
      }, py::arg("output"), py::arg("input"), py::arg("op") = comm::ReduceOp::kSum, py::arg("async_op") = false)
      .def("broadcast", [](PG& g, const Tensor& t, int src, bool async_op) {
        return Issue(async_op, [&] { return g.Broadcast(t, src); });
      }, py::arg("tensor"), py::arg("src"), py::arg("async_op") = false)
      .def("barrier", [](PG& g) { NoGil([&] { g.Barrier()->Wait(); }); })
      .def("_barrier_work", [](PG& g) { return Issue(true, [&] { return g.Barrier(); }); },
           "The group's barrier, its Work returned at once (torch's barrier(async_op=True))")
      .def("all_to_all_single", [](PG& g, const Tensor& out, const Tensor& in, std::vector<int64_t> out_splits,
                                   std::vector<int64_t> in_splits, bool async_op) {
        return Issue(async_op, [&] { return g.AllToAll(out, in, out_splits, in_splits); });
      }, py::arg("output"), py::arg("input"), py::arg("output_split_sizes") = std::vector<int64_t>{},
         py::arg("input_split_sizes") = std::vector<int64_t>{}, py::arg("async_op") = false)
      // Point to point, peers as ranks of this group (torch.distributed.send / recv / isend / irecv).
      .def("send", [](PG& g, const Tensor& t, int dst, int tag, bool async_op) {
        return Issue(async_op, [&] { return g.Send(t, dst, tag); });
      }, py::arg("tensor"), py::arg("dst"), py::arg("tag") = 0, py::arg("async_op") = false)
      .def("recv", [](PG& g, const Tensor& t, int src, int tag, bool async_op) {
        return Issue(async_op, [&] { return g.Recv(t, src, tag); });
      }, py::arg("tensor"), py::arg("src"), py::arg("tag") = 0, py::arg("async_op") = false)
      // torch's recv(src=None): the Work's _source_rank() is the sender (a rank of this group).
      .def("recv_any_source", [](PG& g, const Tensor& t, int tag) {
        return NoGil([&] { return g.RecvAnySource(t, tag); });
      }, py::arg("tensor"), py::arg("tag") = 0)
      // torch.distributed.batch_isend_irecv: every op in flight together (a ring of sends and receives
      // issued one by one would wait in a cycle); ops = (is_send, tensor, peer as a rank of this group, tag).
      .def("batch_p2p", [](PG& g, const std::vector<std::tuple<bool, Tensor, int, int>>& ops) {
        std::vector<comm::P2POp> batch;
        for (const auto& [is_send, t, peer, tag] : ops) {
          batch.push_back({is_send ? comm::P2POp::Kind::kSend : comm::P2POp::Kind::kRecv, t, peer, tag});
        }
        return NoGil([&] { return g.BatchP2P(batch); });
      }, py::arg("ops"))
      // Collective over this group: members get the new group, other ranks None.
      .def("new_group", [](PG& g, const std::vector<int>& ranks) {
        return NoGil([&] { return g.NewGroup(ranks); });
      }, py::arg("ranks"))
      // torch's use_local_synchronization=True: only the members call it.
      .def("new_group_among_members", [](PG& g, const std::vector<int>& ranks) {
        return NoGil([&] { return g.NewGroupAmongMembers(ranks); });
      }, py::arg("ranks"));
}

void BindProcessGroups(py::module_& m) {
  py::enum_<comm::ReduceOp>(m, "ReduceOp")
      .value("SUM", comm::ReduceOp::kSum)
      .value("AVG", comm::ReduceOp::kAvg)
      .value("MAX", comm::ReduceOp::kMax)
      .value("MIN", comm::ReduceOp::kMin)
      .value("PRODUCT", comm::ReduceOp::kProduct);
  py::class_<comm::Work, comm::WorkPtr>(m, "Work")
      .def("wait", [](comm::Work& w, const py::object&) {
        NoGil([&] { w.Wait(); });
        return true;  // torch's Work.wait()
      }, py::arg("timeout") = py::none())
      // torch's Work._source_rank(): the sender of a receive from any rank (waits for it).
      .def("_source_rank", [](comm::Work& w) {
        const int src = NoGil([&] { return w.SourceRank(); });
        if (src < 0) throw py::value_error("_source_rank: this work is not a receive from any rank (recv(src=None))");
        return src;
      })
      .def("is_completed", [](comm::Work& w) { return NoGil([&] { return w.IsCompleted(); }); });
  py::class_<comm::ProcessGroup, comm::ProcessGroupPtr> pg(m, "ProcessGroup");
  pg.def_property_readonly("rank", &comm::ProcessGroup::rank)
      .def_property_readonly("size", &comm::ProcessGroup::size)
      .def_property_readonly("global_ranks", &comm::ProcessGroup::global_ranks,
                             "Global (world) rank of each member, in group-rank order")
      .def_property_readonly("name", &comm::ProcessGroup::name)
      .def_property_readonly("backend", &comm::ProcessGroup::backend_name)
      .def_property("timeout", &comm::ProcessGroup::timeout, &comm::ProcessGroup::set_timeout,
                    "Each call's deadline (a datetime.timedelta); groups created from this one inherit it");
  BindCollectives(pg);
  m.def("run_ranks", [](int world_size, const std::function<void(comm::ProcessGroupPtr)>& fn) {
    NoGil([&] {
      comm::RunRanks(world_size, [&](comm::ProcessGroupPtr world) {
        py::gil_scoped_acquire gil;
        fn(std::move(world));
      });
    });
  }, py::arg("world_size"), py::arg("fn"),
        "Runs fn(world) on world_size in-process ranks (threads backend); rethrows the first failure");
  m.def("_threads_set_departed", [](const comm::ProcessGroupPtr& group, bool departed) {
    NoGil([&] { comm::SetThreadsRankDeparted(group, departed); });  // (joining again waits for the other ranks)
  }, py::arg("group"), py::arg("departed"),
        "destroy_process_group (True) / init_process_group (False) of a run_ranks rank: peers waiting for it "
        "fail at once while it is away");
  m.def("init_process_group", []() { return NoGil([] { return comm::InitProcessGroupFromEnv(); }); },
        "The gloo world of this process, from RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT as set by "
        "tessel-run (torchrun's variables); collective");
}

// A `mesh` argument (nested lists, a numpy array or a tensor of global ranks) as its shape and row-major ranks.
std::pair<std::vector<int64_t>, std::vector<int>> MeshLayout(const py::object& mesh) {
  const py::object values = py::hasattr(mesh, "tolist") ? mesh.attr("tolist")() : mesh;
  const py::object array = py::module_::import("numpy").attr("asarray")(values, "int64");
  return {array.attr("shape").cast<std::vector<int64_t>>(),
          array.attr("reshape")(-1).attr("tolist")().cast<std::vector<int>>()};
}

std::string RanksStr(const std::vector<int>& ranks) {
  return ShapeStr(std::vector<int64_t>(ranks.begin(), ranks.end()));
}

// torch's DeviceMesh.from_group. One group: the 1-D mesh over its ranks (`mesh`, if given, must be them),
// mesh_dim_names None unless given, as torch's. A list of groups: the N-D mesh `mesh` (required, as are
// mesh_dim_names: torch's ValueErrors) whose dim i is groups[i]; each group must hold this rank's ranks along
// its dim, in order (torch trusts the caller; a wrong group would give wrong collectives), and the mesh must
// span the default group (the DeviceMesh constructor also takes some of its ranks). Not collective: no group
// is created.
dtensor::DeviceMesh MeshFromGroups(const py::object& group, const std::string& device_type, const py::object& mesh,
                                   std::optional<std::vector<std::string>> mesh_dim_names) {
  TESSEL_CHECK(device_type == "cpu", "DeviceMesh.from_group: device_type '", device_type,
               "' is not available from Python (use 'cpu')");
  if (py::isinstance<comm::ProcessGroup>(group)) {
    const auto g = group.cast<comm::ProcessGroupPtr>();
    if (!mesh.is_none()) {
      const auto [shape, ranks] = MeshLayout(mesh);
      if (shape.size() != 1 || ranks != g->global_ranks()) {
        throw py::value_error(Str("Invalid mesh ", py::str(mesh).cast<std::string>(), " for ProcessGroup with ranks ",
                                  RanksStr(g->global_ranks())));
      }
    }
    TESSEL_CHECK(!mesh_dim_names || mesh_dim_names->size() == 1, "DeviceMesh.from_group: one mesh_dim_name for ",
                 "a 1-D mesh, got ", mesh_dim_names ? mesh_dim_names->size() : 0);
    // No names: the default one (mesh_dim_names None, as torch's), not the group's name.
    return dtensor::MeshOfGroup(g, mesh_dim_names ? (*mesh_dim_names)[0] : "axis0");
  }
  std::vector<comm::ProcessGroupPtr> groups;
  for (const py::handle& item : py::iter(group)) {
    if (!py::isinstance<comm::ProcessGroup>(item)) {
      throw py::type_error(Str("DeviceMesh.from_group: expected a ProcessGroup or a list of them, got an item of "
                               "type ", py::str(py::type::of(item).attr("__name__")).cast<std::string>()));
    }
    groups.push_back(item.cast<comm::ProcessGroupPtr>());
  }
  if (groups.empty()) throw py::value_error("Expects at least one ProcessGroup to be passed");
  if (mesh.is_none()) throw py::value_error("Must pass mesh if passing multiple ProcessGroups");
  if (!mesh_dim_names) throw py::value_error("Must pass mesh_dim_names if passing multiple ProcessGroups");
  auto [shape, ranks] = MeshLayout(mesh);
  if (shape.size() != groups.size()) {
    throw py::value_error(Str("Expects mesh with ndim equal to number of ProcessGroups but got mesh of shape ",
                              ShapeStr(shape), " and ", groups.size(), " ProcessGroups"));
  }
  if (mesh_dim_names->size() != groups.size()) {
    throw py::value_error(Str("DeviceMesh.from_group: ", mesh_dim_names->size(), " mesh_dim_names for ",
                              groups.size(), " ProcessGroups"));
  }
  const auto world = py::module_::import("tessel.distributed")
                         .attr("_default_group")("DeviceMesh.from_group").cast<comm::ProcessGroupPtr>();
  std::vector<int> sorted_mesh = ranks, sorted_world = world->global_ranks();
  std::sort(sorted_mesh.begin(), sorted_mesh.end());
  std::sort(sorted_world.begin(), sorted_world.end());
  if (sorted_mesh != sorted_world) {
    throw py::value_error(Str("DeviceMesh.from_group: the mesh's ranks ", RanksStr(ranks), " are not the default ",
                              "group's ranks ", RanksStr(sorted_world), " each once"));
  }
  auto topology = std::make_shared<const dtensor::MeshTopology>(std::move(shape), *mesh_dim_names, std::move(ranks));
  const int me = world->global_ranks()[static_cast<size_t>(world->rank())];
  const std::vector<int64_t> coordinate = *topology->CoordinateOf(me);
  for (int a = 0; a < topology->ndim(); ++a) {
    const std::vector<int> along = topology->AxisGroupRanks(a, coordinate);
    const std::vector<int>& have = groups[static_cast<size_t>(a)]->global_ranks();
    if (have != along) {
      throw py::value_error(Str("DeviceMesh.from_group: ProcessGroup ", a, " has ranks ", RanksStr(have),
                                " but rank ", me, "'s mesh dim ", a, " ('", topology->axis_name(a), "') of ",
                                topology->ToString(), " holds ", RanksStr(along)));
    }
  }
  return dtensor::DeviceMesh(topology, me, std::move(groups), world, topology);
}

void BindMesh(py::module_& m) {
  py::class_<dtensor::DeviceMesh>(m, "DeviceMesh")
      // torch's DeviceMesh(device_type, mesh, *, mesh_dim_names=None): `mesh` (nested lists or a tensor of global
      // ranks) lays the default group's ranks out in any order; collective over the default group. A mesh over
      // some of its ranks is collective over those only; the others get a mesh they are not part of (InitDeviceMesh).
      .def(py::init([](const std::string& device_type, const py::object& mesh,
                       std::optional<std::vector<std::string>> mesh_dim_names) {
             TESSEL_CHECK(device_type == "cpu", "DeviceMesh: device_type '", device_type,
                          "' is not available from Python (use 'cpu')");
             const auto [shape, ranks] = MeshLayout(mesh);
             const auto world = py::module_::import("tessel.distributed")
                                    .attr("_default_group")("DeviceMesh").cast<comm::ProcessGroupPtr>();
             return NoGil([&] {
               return dtensor::InitDeviceMesh(world, shape, mesh_dim_names.value_or(std::vector<std::string>{}),
                                              ranks);
             });
           }),
           py::arg("device_type"), py::arg("mesh"), py::kw_only(), py::arg("mesh_dim_names") = py::none())
      .def_property_readonly("shape", [](const dtensor::DeviceMesh& d) { return py::tuple(py::cast(d.shape())); })
      .def_property_readonly("ndim", &dtensor::DeviceMesh::ndim)
      // torch's None for a mesh built without names (tessel's axes are then named axis0, axis1, ...)
      .def_property_readonly("mesh_dim_names", [](const dtensor::DeviceMesh& d) -> py::object {
        if (d.topology().has_default_axis_names()) return py::none();
        return py::tuple(py::cast(d.axis_names()));
      })
      // torch's size(mesh_dim): a negative dim counts from the end (size(-1) is the last dim's)
      .def("size", [](const dtensor::DeviceMesh& d, std::optional<int> axis) {
        if (!axis) return d.size();
        TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, *axis >= -d.ndim() && *axis < d.ndim(), "DeviceMesh.size: ",
                          "mesh dim ", *axis, " out of range for a ", d.ndim(), "-D mesh");
        return d.size(*axis < 0 ? *axis + d.ndim() : *axis);
      }, py::arg("mesh_dim") = py::none())
      .def("get_rank", &dtensor::DeviceMesh::global_rank)
      .def("get_coordinate", [](const dtensor::DeviceMesh& d) -> py::object {  // None: not in the mesh (torch's)
        if (!d.is_member()) return py::none();
        return py::tuple(py::cast(d.coordinate()));
      })
      .def("get_local_rank", [](const dtensor::DeviceMesh& d, std::optional<std::string> axis) {
        TESSEL_CHECK(axis || d.ndim() == 1, "DeviceMesh.get_local_rank: name the mesh dim of a ", d.ndim(), "-D mesh");
        return axis ? d.local_rank(*axis) : d.local_rank(0);
      }, py::arg("mesh_dim") = py::none())
      .def("get_local_rank", [](const dtensor::DeviceMesh& d, int mesh_dim) {  // torch takes the dim's index too
        TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, mesh_dim >= -d.ndim() && mesh_dim < d.ndim(),
                          "DeviceMesh.get_local_rank: mesh dim ", mesh_dim, " out of range for a ", d.ndim(),
                          "-D mesh");
        return d.local_rank(mesh_dim < 0 ? mesh_dim + d.ndim() : mesh_dim);
      }, py::arg("mesh_dim"))
      .def("get_group", [](const dtensor::DeviceMesh& d, std::optional<std::string> axis) {
        TESSEL_CHECK(axis || d.ndim() == 1, "DeviceMesh.get_group: name the mesh dim of a ", d.ndim(), "-D mesh");
        return axis ? d.axis_group(*axis) : d.axis_group(0);
      }, py::arg("mesh_dim") = py::none())
      .def("get_group", [](const dtensor::DeviceMesh& d, int mesh_dim) {  // torch takes the dim's index too
        TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, mesh_dim >= -d.ndim() && mesh_dim < d.ndim(), "DeviceMesh.get_group: ",
                          "mesh dim ", mesh_dim, " out of range for a ", d.ndim(), "-D mesh");
        return d.axis_group(mesh_dim < 0 ? mesh_dim + d.ndim() : mesh_dim);
      }, py::arg("mesh_dim"))
      .def("__getitem__", [](const dtensor::DeviceMesh& d, const std::string& axis) {
        CheckMeshDimNames(d, {axis});
        return d[axis];
      })
      .def("__getitem__", [](const dtensor::DeviceMesh& d, const std::vector<std::string>& axes) {
        CheckMeshDimNames(d, axes);
        return d.Slice(axes);
      })
      // Named by the Python wrapper (tessel/distributed/device_mesh.py), which gives torch's default name.
      .def("_flatten", [](const dtensor::DeviceMesh& d, const std::string& name) {
        return NoGil([&] { return d.Flatten(d.axis_names(), name); });
      })
      .def("_flattened_names", &dtensor::DeviceMesh::FlattenedNames)
      .def_property_readonly("device_type", [](const dtensor::DeviceMesh&) { return "cpu"; })  // the Python face's
      // torch's DeviceMesh.mesh: the global ranks laid out in the mesh's shape (int32, as torch's torch.int).
      .def_property_readonly("mesh", [](const dtensor::DeviceMesh& d) {
        const std::vector<int>& ranks = d.topology().ranks();
        return FromVector(std::vector<int32_t>(ranks.begin(), ranks.end()), std::span<const int64_t>(d.shape()));
      })
      .def("get_all_groups", [](const dtensor::DeviceMesh& d) {
        std::vector<comm::ProcessGroupPtr> groups;
        for (int a = 0; a < d.ndim(); ++a) groups.push_back(d.axis_group(a));
        return groups;
      })
      .def("__eq__", [](const dtensor::DeviceMesh& a, const dtensor::DeviceMesh& b) { return a == b; }, py::is_operator())
      .def("__repr__", &dtensor::DeviceMesh::ToString)
      // torch's copy.copy / copy.deepcopy: an equal mesh over the same groups (torch's copy is another object
      // too, and process groups are not copied). Pickling: tessel/distributed/device_mesh.py.
      .def("__copy__", [](const dtensor::DeviceMesh& d) { return d; })
      .def("__deepcopy__", [](const dtensor::DeviceMesh& d, const py::object&) { return d; }, py::arg("memo"))
      // torch's DeviceMesh.from_group(group, device_type, mesh=None, *, mesh_dim_names=None): no new group.
      .def_static("from_group", &MeshFromGroups, py::arg("group"), py::arg("device_type"),
                  py::arg("mesh") = py::none(), py::kw_only(), py::arg("mesh_dim_names") = py::none());
  m.def("init_device_mesh", [](const comm::ProcessGroupPtr& world, std::vector<int64_t> shape,
                               std::vector<std::string> names) {
    return NoGil([&] { return dtensor::InitDeviceMesh(world, std::move(shape), std::move(names)); });
  }, py::arg("world"), py::arg("shape"), py::arg("axis_names"));
}

// torch's Partial.reduce_op string: "sum", "avg", "max", "min".
std::string PartialOpName(const dtensor::Partial& p) {
  switch (p.reduce_op) {
    case comm::ReduceOp::kSum: return "sum";
    case comm::ReduceOp::kAvg: return "avg";
    case comm::ReduceOp::kMax: return "max";
    case comm::ReduceOp::kMin: return "min";
    default: return "product";
  }
}

// torch's _StridedShard(dim, split_factor): how torch 2.15 prints a Shard axis applied out of mesh order
// (FSDP over TP: [_StridedShard(0, sf=2), Shard(0)]). tessel keeps that as the spec's shard order
// (dtensor/shard_order.h); placements are read out with these and accepted back (ParsePlacements).
struct StridedShardPlacement {
  int64_t dim;
  int64_t split_factor;
};

void BindPlacements(py::module_& m) {
  py::class_<StridedShardPlacement>(m, "_StridedShard")
      .def(py::init([](int64_t dim, int64_t split_factor) {
             TESSEL_CHECK(split_factor >= 1, "_StridedShard: split_factor must be >= 1, got ", split_factor);
             return StridedShardPlacement{dim, split_factor};
           }), py::arg("dim"), py::arg("split_factor"))
      .def_readonly("dim", &StridedShardPlacement::dim)
      .def_readonly("split_factor", &StridedShardPlacement::split_factor)
      .def("__eq__", [](const StridedShardPlacement& a, const StridedShardPlacement& b) {
        return a.dim == b.dim && a.split_factor == b.split_factor;
      }, py::is_operator())
      .def("__hash__", [](const StridedShardPlacement& a) { return py::hash(py::make_tuple(a.dim, a.split_factor)); })
      .def("__repr__", [](const StridedShardPlacement& a) {
        return Str("_StridedShard(dim=", a.dim, ", sf=", a.split_factor, ")");
      })
      .def("__str__", [](const StridedShardPlacement& a) { return Str("_S(", a.dim, ", ", a.split_factor, ")"); })
      // torch 2.15: not a Shard (isinstance and is_shard are False)
      .def("is_shard", [](const StridedShardPlacement&, const py::object&) { return false; },
           py::arg("dim") = py::none())
      .def("is_replicate", [](const StridedShardPlacement&) { return false; })
      .def("is_partial", [](const StridedShardPlacement&, const py::object&) { return false; },
           py::arg("reduce_op") = py::none())
      // Picklable, as torch's dataclasses (all_gather_object of placements, torch.save / deepcopy of plans).
      .def(py::pickle([](const StridedShardPlacement& a) { return py::make_tuple(a.dim, a.split_factor); },
                      [](const py::tuple& t) {
                        return StridedShardPlacement{t[0].cast<int64_t>(), t[1].cast<int64_t>()};
                      }));
  py::class_<dtensor::Shard>(m, "Shard")
      .def(py::init([](int64_t dim) { return dtensor::Shard{dim}; }), py::arg("dim"))
      .def_readonly("dim", &dtensor::Shard::dim)
      .def(py::pickle([](const dtensor::Shard& a) { return py::make_tuple(a.dim); },
                      [](const py::tuple& t) { return dtensor::Shard{t[0].cast<int64_t>()}; }))
      // py::is_operator: another type compares unequal (NotImplemented), as torch's Shard(0) == Replicate();
      // hashable like torch's placements (sets, dict keys).
      .def("__eq__", [](const dtensor::Shard& a, const dtensor::Shard& b) { return a == b; }, py::is_operator())
      .def("__hash__", [](const dtensor::Shard& a) { return py::hash(py::make_tuple("Shard", a.dim)); })
      .def("__repr__", &dtensor::Shard::ToLongString)
      .def("__str__", &dtensor::Shard::ToString)  // torch's short form "S(0)"
      .def("is_shard", [](const dtensor::Shard& a, std::optional<int64_t> dim) { return !dim || *dim == a.dim; },
           py::arg("dim") = py::none())
      .def("is_replicate", [](const dtensor::Shard&) { return false; })
      .def("is_partial", [](const dtensor::Shard&, const py::object&) { return false; },
           py::arg("reduce_op") = py::none())
      // torch.chunk's piece `rank` of `num_chunks` along a dim of size curr_local_size: (size, offset).
      .def_static("local_shard_size_and_offset", [](int64_t curr_local_size, int64_t num_chunks, int64_t rank) {
        TESSEL_CHECK(num_chunks > 0 && rank >= 0 && rank < num_chunks && curr_local_size >= 0,
                     "local_shard_size_and_offset: expected 0 <= rank < num_chunks and a size >= 0, got size ",
                     curr_local_size, ", num_chunks ", num_chunks, ", rank ", rank);
        const int64_t full = (curr_local_size + num_chunks - 1) / num_chunks, start = full * rank;
        if (start >= curr_local_size) return py::make_tuple(0, curr_local_size);
        return py::make_tuple(std::min(curr_local_size, start + full) - start, start);
      }, py::arg("curr_local_size"), py::arg("num_chunks"), py::arg("rank"));
  py::class_<dtensor::Replicate>(m, "Replicate")
      .def(py::init<>())
      .def(py::pickle([](const dtensor::Replicate&) { return py::tuple(); },
                      [](const py::tuple&) { return dtensor::Replicate{}; }))
      .def("__eq__", [](const dtensor::Replicate&, const dtensor::Replicate&) { return true; }, py::is_operator())
      .def("__hash__", [](const dtensor::Replicate&) { return py::hash(py::str("Replicate")); })
      .def("__repr__", &dtensor::Replicate::ToLongString)
      .def("__str__", &dtensor::Replicate::ToString)
      .def("is_shard", [](const dtensor::Replicate&, const py::object&) { return false; }, py::arg("dim") = py::none())
      .def("is_replicate", [](const dtensor::Replicate&) { return true; })
      .def("is_partial", [](const dtensor::Replicate&, const py::object&) { return false; },
           py::arg("reduce_op") = py::none());
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
      .def(py::pickle([](const dtensor::Partial& a) { return py::make_tuple(static_cast<int>(a.reduce_op)); },
                      [](const py::tuple& t) {
                        return dtensor::Partial{static_cast<comm::ReduceOp>(t[0].cast<int>())};
                      }))
      .def("__eq__", [](const dtensor::Partial& a, const dtensor::Partial& b) { return a == b; }, py::is_operator())
      .def("__hash__", [](const dtensor::Partial& a) {
        return py::hash(py::make_tuple("Partial", static_cast<int>(a.reduce_op)));
      })
      .def("__repr__", &dtensor::Partial::ToLongString)
      .def("__str__", &dtensor::Partial::ToString)
      .def_property_readonly("reduce_op", [](const dtensor::Partial& a) { return PartialOpName(a); })
      .def("is_shard", [](const dtensor::Partial&, const py::object&) { return false; }, py::arg("dim") = py::none())
      .def("is_replicate", [](const dtensor::Partial&) { return false; })
      .def("is_partial", [](const dtensor::Partial& a, std::optional<std::string> op) {
        return !op || *op == PartialOpName(a);
      }, py::arg("reduce_op") = py::none());
}

// Placements from Python, _StridedShard included: the plain placements (a _StridedShard is a Shard of its
// dim) and, when any split factor is > 1, the shard order they describe.
struct ParsedPlacements {
  std::vector<dtensor::Placement> placements;
  std::optional<dtensor::ShardOrder> order;
};

// torch's public redistribute moves a placement to a Partial one only from Shard to Partial(sum) (the
// others are for its sharding rules; tessel's C++ Redistribute also does Replicate -> Partial exactly).
void CheckPublicPartialTargets(const std::vector<dtensor::Placement>& from, const std::vector<dtensor::Placement>& to) {
  for (size_t i = 0; i < to.size() && i < from.size(); ++i) {
    if (!dtensor::IsPartial(to[i]) || to[i] == from[i]) continue;
    TESSEL_CHECK_CODE(ErrorCode::kInvalidArgument,
                      dtensor::IsShard(from[i]) && std::get<dtensor::Partial>(to[i]).reduce_op == comm::ReduceOp::kSum,
                      "Can not redistribute from ", dtensor::ToString(from[i]), " to ", dtensor::ToString(to[i]),
                      ", only Shard to Partial(sum) redistribution is supported!");
  }
}

ParsedPlacements ParsePlacements(const py::sequence& given, const dtensor::DeviceMesh& mesh, int64_t ndim) {
  ParsedPlacements out;
  std::vector<int64_t> factors;
  bool strided = false;
  for (const py::handle item : given) {
    if (py::isinstance<StridedShardPlacement>(item)) {
      const auto& s = item.cast<const StridedShardPlacement&>();
      out.placements.emplace_back(dtensor::Shard{s.dim < 0 ? s.dim + ndim : s.dim});
      factors.push_back(s.split_factor);
      strided = strided || s.split_factor > 1;
    } else {
      out.placements.push_back(item.cast<dtensor::Placement>());
      factors.push_back(1);
    }
  }
  if (strided && static_cast<int>(out.placements.size()) == mesh.ndim()) {
    out.order = dtensor::ShardOrderFromSplitFactors(out.placements, factors, mesh.shape(), ndim);
  }
  return out;
}

// A DTensor's placements as torch 2.15 prints them: an axis applied out of mesh order is a _StridedShard.
py::tuple PlacementsForPython(const dtensor::DTensor& d) {
  const std::vector<int64_t> factors = dtensor::StridedShardSplitFactors(d.spec().shard_order(), d.mesh().shape());
  py::list out;
  for (size_t a = 0; a < d.placements().size(); ++a) {
    if (factors[a] > 1) {
      out.append(py::cast(StridedShardPlacement{std::get<dtensor::Shard>(d.placements()[a]).dim, factors[a]}));
    } else {
      out.append(py::cast(d.placements()[a]));
    }
  }
  return py::tuple(out);
}

void BindDTensor(py::module_& m) {
  auto t = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  // A tuple, as torch's (compared with tuples, usable as a dict key); on a dense tensor an AttributeError,
  // so hasattr(x, "placements") and getattr(x, "device_mesh", None) work as with torch.Tensor.
  t.def_property_readonly("placements", [](const Tensor& x) {
     if (!x.is_distributed()) throw py::attribute_error("'Tensor' object has no attribute 'placements' (not a DTensor)");
     return PlacementsForPython(dtensor::DTensor(x));
   })
      .def_property_readonly("device_mesh", [](const Tensor& x) {
        if (!x.is_distributed()) {
          throw py::attribute_error("'Tensor' object has no attribute 'device_mesh' (not a DTensor)");
        }
        return dtensor::DTensor(x).mesh();
      })
      // The view op whose copy this DTensor is (dtensor::DTensorImpl::view_copy_of), "" otherwise; the Python
      // in-place paths refuse such a tensor as the dispatcher does. _set_view_copy_of marks one made in Python
      // (split / chunk of a DTensor gathered along the split dim first).
      .def_property_readonly("_view_copy_of", [](const Tensor& x) {
        const dtensor::DTensorImpl* d = dtensor::AsDTensorImpl(x);
        return d == nullptr ? std::string() : d->view_copy_of();
      })
      .def("_set_view_copy_of", [](const Tensor& x, std::string op) {
        auto* d = const_cast<dtensor::DTensorImpl*>(dtensor::AsDTensorImpl(x));
        if (d != nullptr) d->set_view_copy_of(std::move(op));
      })
      .def("_check_writes_through", [](const Tensor& x, const std::string& op) { dtensor::CheckWritesThrough(x, op); })
      .def("to_local", [](const Tensor& x, std::optional<std::vector<dtensor::Placement>> grad_placements) {
        return NoGil([&] { return dtensor::DTensor(x).ToLocal(std::move(grad_placements)); });
      }, py::kw_only(), py::arg("grad_placements") = py::none(),
           "This rank's piece (differentiable); grad_placements: the layout the local gradient will have "
           "(default: this tensor's placements), as torch's")
      .def("full_tensor", [](const Tensor& x, std::optional<std::vector<dtensor::Placement>> grad_placements) {
        return NoGil([&] { return dtensor::DTensor(x).FullTensor(std::move(grad_placements)); });
      }, py::kw_only(), py::arg("grad_placements") = py::none(),
           "The whole global tensor on every rank (collective); grad_placements: the layout the gradient of the "
           "result is taken in (default Replicate), as torch's")
      .def("redistribute", [](const Tensor& x, std::optional<dtensor::DeviceMesh> mesh,
                              std::optional<py::sequence> p, bool async_op,
                              std::optional<DType> forward_dtype, const py::object& backward_dtype) {
        (void)async_op;  // accepted for torch's signature; the redistribute completes before returning
        const dtensor::DTensor d(x);
        const dtensor::DeviceMesh target = mesh ? *mesh : d.mesh();
        TESSEL_CHECK_CODE(ErrorCode::kInvalidArgument, p.has_value(), "placements is needed for redistribute!");
        const ParsedPlacements parsed = ParsePlacements(*p, target, x.dim());
        CheckPublicPartialTargets(d.placements(), parsed.placements);
        // torch's forward_dtype / backward_dtype: the dtypes the collectives run in (dtensor/redistribute.h).
        dtensor::RedistributeOptions options;
        options.forward_dtype = forward_dtype;
        if (!backward_dtype.is_none()) options.backward_dtype = backward_dtype.cast<DType>();
        return NoGil([&] { return d.Redistribute(target, parsed.placements, parsed.order, options).tensor(); });
      }, py::arg("device_mesh") = py::none(), py::arg("placements") = py::none(), py::kw_only(),
         py::arg("async_op") = false, py::arg("forward_dtype") = py::none(), py::arg("backward_dtype") = py::none(),
         "Differentiable; collective over the mesh. As torch: device_mesh defaults to the tensor's own; placements "
         "are required; a Partial target only from Shard to Partial(sum)");
  // PyTorch's cost model of moving a DTensor to `placements` (mesh order), in microseconds; inf where torch's model
  // forbids the move (a Partial changing its reduce op, a Shard padded into a Partial). register_sharding's choice.
  m.def("_dtensor_redistribute_cost", [](const Tensor& x, const py::sequence& given) {
    const dtensor::DTensor d(x);
    ParsedPlacements p = ParsePlacements(given, d.mesh(), x.dim());
    TESSEL_CHECK_CODE(ErrorCode::kInvalidArgument, static_cast<int>(p.placements.size()) == d.mesh().ndim(),
                      "_dtensor_redistribute_cost: ", p.placements.size(), " placements for a mesh of ",
                      d.mesh().ndim(), " dims");
    dtensor::ShardingState want{p.placements, p.order.value_or(dtensor::DefaultShardOrder(p.placements, x.dim()))};
    const std::optional<double> micros = dtensor::RedistributeMicros(d.spec(), want, dtensor::DevicesPerHost(x));
    return micros.value_or(std::numeric_limits<double>::infinity());
  }, py::arg("dtensor"), py::arg("placements"));
  // A strategy's input move (register_sharding): any target, Replicate -> Partial included (the public
  // redistribute refuses it, as torch's; torch's own strategies make it). Differentiable.
  m.def("_dtensor_redistribute_for_strategy", [](const Tensor& x, const py::sequence& given) {
    const dtensor::DTensor d(x);
    const ParsedPlacements parsed = ParsePlacements(given, d.mesh(), x.dim());
    return NoGil([&] { return d.Redistribute(d.mesh(), parsed.placements, parsed.order, {}).tensor(); });
  }, py::arg("dtensor"), py::arg("placements"));
  // The global shape the ranks' `local` pieces form under `placements` (collective: one small all_gather per mesh
  // axis; the same error on every rank when the pieces do not fit). register_sharding's outputs.
  m.def("_dtensor_global_shape", [](const Tensor& local, const dtensor::DeviceMesh& mesh,
                                    std::vector<dtensor::Placement> placements) {
    return NoGil([&] { return dtensor::GlobalShapeOfLocals(local, mesh, std::move(placements)); });
  }, py::arg("local"), py::arg("device_mesh"), py::arg("placements"));
  // Every rank's box of the global tensor (visualize_sharding): [(rank, coordinate, [(offset, length), ...])].
  m.def("_rank_regions", [](const Tensor& x) {
    py::list out;
    for (const dtensor::RankRegion& r : dtensor::AllRankRegions(dtensor::DTensor(x).spec())) {
      py::list box;
      for (const dtensor::DimInterval& d : r.intervals) box.append(py::make_tuple(d.offset, d.length));
      out.append(py::make_tuple(r.rank, py::tuple(py::cast(r.coordinate)), box));
    }
    return out;
  }, py::arg("dtensor"));
  m.def("distribute_tensor", [](const Tensor& x, const dtensor::DeviceMesh& mesh, const py::sequence& given,
                                std::optional<int> src_data_rank) {
    ParsedPlacements p = ParsePlacements(given, mesh, x.dim());
    dtensor::DistributeOptions options;
    options.shard_order = std::move(p.order);
    if (src_data_rank) {
      // torch: group rank src_data_rank on every mesh dim scatters / broadcasts its tensor, i.e. the rank at
      // coordinate (k, ..., k) is the source (a whole-tensor broadcast here, then each rank slices).
      const int k = *src_data_rank;
      for (int a = 0; a < mesh.ndim(); ++a) {
        TESSEL_CHECK(k >= 0 && k < mesh.size(a), "distribute_tensor: src_data_rank ", k, " is not a rank of mesh dim ",
                     a, " (size ", mesh.size(a), ") of ", mesh.ToString());
      }
      options.src_rank = mesh.topology().RankAt(std::vector<int64_t>(static_cast<size_t>(mesh.ndim()), k));
    } else {
      options.replicas = dtensor::ReplicaSource::kLocal;  // torch's None: each rank's own values, no communication
    }
    return NoGil([&] { return dtensor::DistributeTensor(x, mesh, std::move(p.placements), options).tensor(); });
  }, py::arg("tensor"), py::arg("device_mesh"), py::arg("placements"), py::arg("src_data_rank") = 0,
        "This rank's piece of a full tensor: the tensor of src_data_rank (a rank on every mesh dim, torch's "
        "default 0) is broadcast first; None: every rank's own value, no communication");
  m.def("from_local", [](const Tensor& local, const dtensor::DeviceMesh& mesh, const py::sequence& given,
                         std::optional<Shape> shape, std::optional<Shape> stride, bool run_check,
                         std::optional<std::vector<dtensor::Placement>> grad_placements) {
    ParsedPlacements p = ParsePlacements(given, mesh, local.dim());
    const dtensor::FromLocalOptions options{.shape = std::move(shape), .stride = std::move(stride),
                                            .shard_order = std::move(p.order), .run_check = run_check,
                                            .grad_placements = std::move(grad_placements)};
    return NoGil([&] { return dtensor::DTensor::FromLocal(local, mesh, std::move(p.placements), options).tensor(); });
  }, py::arg("local_tensor"), py::arg("device_mesh"), py::arg("placements"), py::arg("shape") = py::none(),
        py::arg("stride") = py::none(), py::arg("run_check") = false, py::arg("grad_placements") = py::none(),
        "DTensor.from_local: wraps each rank's local piece; the global shape is `shape`, else derived from every "
        "rank's piece (run_check), else even shards (as in PyTorch)");
}

// Counts the collectives this rank issues inside `with CommTracer() as t:`; t.summary().
struct PyTracer {
  std::unique_ptr<comm::CommTracer> tracer;
  std::string last_summary;
  int last_total = 0;
  std::vector<comm::CollectiveRecord> last_records;
};

void BindTracer(py::module_& m) {
  py::class_<PyTracer>(m, "CommTracer")
      .def(py::init<>())
      .def("__enter__", [](PyTracer& t) -> PyTracer& {
        TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, t.tracer == nullptr, "CommTracer: already entered");
        t.tracer = std::make_unique<comm::CommTracer>();
        return t;
      }, py::return_value_policy::reference)
      .def("__exit__", [](PyTracer& t, py::args) {
        TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, t.tracer != nullptr,
                          "CommTracer.__exit__ without __enter__ (use `with CommTracer() as t:`)");
        t.last_summary = t.tracer->Summary();
        t.last_total = t.tracer->Total();
        t.last_records = t.tracer->records();
        t.tracer.reset();
      })
      // The collectives from the start-th on, in issue order: (kind, group name, bytes this rank contributed).
      .def("records", [](const PyTracer& t, size_t start) {
        const std::vector<comm::CollectiveRecord>& all = t.tracer ? t.tracer->records() : t.last_records;
        std::vector<std::tuple<std::string, std::string, int64_t>> out;
        for (size_t i = start; i < all.size(); ++i) {
          out.emplace_back(std::string(comm::CollectiveKindName(all[i].kind)), all[i].group, all[i].bytes);
        }
        return out;
      }, py::arg("start") = 0)
      .def("summary", [](const PyTracer& t) { return t.tracer ? t.tracer->Summary() : t.last_summary; },
           "\"all_gather(tp) x2, reduce_scatter(dp) x1\"")
      .def("total", [](const PyTracer& t) { return t.tracer ? t.tracer->Total() : t.last_total; });
}

// torch's shard_placement_fn as FullyShardOptions': the callable gets each managed parameter and returns a
// Shard or None (TypeError otherwise). FullyShard calls it without the GIL, so the call takes it, and so
// does the release of the last copy of the callable, wherever that happens.
std::function<std::optional<dtensor::Shard>(const Tensor&)> ShardPlacementFn(const py::object& fn) {
  if (fn.is_none()) return nullptr;
  if (!PyCallable_Check(fn.ptr())) {
    throw py::type_error(Str("fully_shard: shard_placement_fn must be callable, got ",
                             py::str(py::type::of(fn).attr("__name__")).cast<std::string>()));
  }
  std::shared_ptr<py::object> held = ShareCallable(fn);
  return [held](const Tensor& param) -> std::optional<dtensor::Shard> {
    py::gil_scoped_acquire gil;
    const py::object r = (*held)(param);
    if (r.is_none()) return std::nullopt;
    if (!py::isinstance<dtensor::Shard>(r)) {
      throw py::type_error(Str("fully_shard: shard_placement_fn must return a Shard or None, got ",
                               py::repr(r).cast<std::string>()));
    }
    return r.cast<dtensor::Shard>();
  };
}

// FSDPModule.set_all_reduce_hook's callable, called (with the GIL) with each reduced gradient block; None
// removes the hook.
std::function<void(const Tensor&)> AllReduceHook(const py::object& fn) {
  if (fn.is_none()) return nullptr;
  if (!PyCallable_Check(fn.ptr())) {
    throw py::type_error(Str("set_all_reduce_hook: hook must be callable, got ",
                             py::str(py::type::of(fn).attr("__name__")).cast<std::string>()));
  }
  std::shared_ptr<py::object> held = ShareCallable(fn);
  return [held](const Tensor& reduce_output) {
    py::gil_scoped_acquire gil;
    (*held)(reduce_output);
  };
}

void BindFsdp(py::module_& m) {
  py::class_<fsdp::MixedPrecisionPolicy>(m, "MixedPrecisionPolicy")
      .def(py::init([](std::optional<DType> param_dtype, std::optional<DType> reduce_dtype,
                       std::optional<DType> output_dtype, bool cast_forward_inputs) {
             return fsdp::MixedPrecisionPolicy{param_dtype, reduce_dtype, output_dtype, cast_forward_inputs};
           }),
           py::arg("param_dtype") = py::none(), py::arg("reduce_dtype") = py::none(),
           py::arg("output_dtype") = py::none(), py::arg("cast_forward_inputs") = true)
      .def_readonly("param_dtype", &fsdp::MixedPrecisionPolicy::param_dtype)
      .def_readonly("reduce_dtype", &fsdp::MixedPrecisionPolicy::reduce_dtype)
      .def_readonly("output_dtype", &fsdp::MixedPrecisionPolicy::output_dtype)
      .def_readonly("cast_forward_inputs", &fsdp::MixedPrecisionPolicy::cast_forward_inputs);
  py::class_<fsdp::CPUOffloadPolicy>(m, "CPUOffloadPolicy")
      .def(py::init([](bool pin_memory) { return fsdp::CPUOffloadPolicy{pin_memory}; }), py::arg("pin_memory") = true);
  using F = fsdp::FSDPModule;
  py::class_<F>(m, "FSDPState", "The handle fully_shard returns in C++ (tessel.distributed.fsdp.FSDPModule wraps it)")
      .def("unshard", [](const F& f, bool async_op) { NoGil([&] { f.Unshard(async_op); }); }, py::arg("async_op") = false)
      .def("wait_for_unshard", [](const F& f) { NoGil([&] { f.WaitForUnshard(); }); })
      .def("reshard", [](const F& f) { NoGil([&] { f.Reshard(); }); })
      .def("reset_iter_state", [](const F& f) { NoGil([&] { f.ResetIterState(); }); })
      .def("is_unsharded", &F::is_unsharded)
      .def("set_requires_gradient_sync", &F::SetRequiresGradientSync, py::arg("requires_gradient_sync"),
           py::arg("recurse") = true)
      .def("set_requires_all_reduce", &F::SetRequiresAllReduce, py::arg("requires_all_reduce"),
           py::arg("recurse") = true)
      .def("set_reshard_after_forward", &F::SetReshardAfterForward, py::arg("reshard_after_forward"),
           py::arg("recurse") = true)
      .def("set_reshard_after_backward", &F::SetReshardAfterBackward, py::arg("reshard_after_backward"),
           py::arg("recurse") = true)
      .def("set_modules_to_forward_prefetch", &F::SetModulesToForwardPrefetch, py::arg("modules"))
      .def("set_modules_to_backward_prefetch", &F::SetModulesToBackwardPrefetch, py::arg("modules"))
      .def("set_gradient_divide_factor", &F::SetGradientDivideFactor, py::arg("factor"))
      .def("set_force_sum_reduction_for_comms", &F::SetForceSumReductionForComms, py::arg("enable"))
      .def("set_separate_reduce_scatter_group", [](const F& f, bool enable, bool recurse) {
        NoGil([&] { f.SetSeparateReduceScatterGroup(enable, recurse); });  // collective the first time
      }, py::arg("enable") = true, py::arg("recurse") = true)
      .def("set_unshard_in_backward", &F::SetUnshardInBackward, py::arg("unshard_in_backward"))
      .def("_reset_sharded_params", &F::ResetShardedParams)
      .def("_check_params_changeable", &F::CheckParamsChangeable)
      .def("set_is_last_backward", &F::SetIsLastBackward, py::arg("is_last_backward"))
      .def("set_manual_backward_finalization", &F::SetManualBackwardFinalization, py::arg("enabled"))
      .def("finish_pending_backward", [](const F& f) { NoGil([&] { f.FinishPendingBackward(); }); })
      .def("wait_for_gradient_reduction", [](const F& f) { NoGil([&] { f.WaitForGradientReduction(); }); })
      .def("set_all_reduce_hook", [](const F& f, const py::object& hook) { f.SetAllReduceHook(AllReduceHook(hook)); },
           py::arg("hook"))
      // register_fsdp_forward_method: `method` (tensors in, tensors out) runs as this module's forward.
      .def("call_as_forward", [](const F& f, TensorList inputs, const py::function& method) {
        return NoGil([&] {
          return f.state().CallAsForward(std::move(inputs), [&](const TensorList& in) {
            py::gil_scoped_acquire gil;
            return method(in).cast<TensorList>();
          });
        });
      })
      // The dtype forward inputs are cast to (MixedPrecisionPolicy's param_dtype with cast_forward_inputs), or
      // None: Python casts keyword-argument tensors with it, which the C++ hooks do not see.
      .def_property_readonly("forward_input_cast_dtype", [](const F& f) -> std::optional<DType> {
        const fsdp::MixedPrecisionPolicy& mp = f.state().options().mp_policy;
        return mp.cast_forward_inputs ? mp.param_dtype : std::nullopt;
      });
  // One module, or a list of modules sharing one group (PyTorch 2.6's fully_shard([m1, m2])); the handle
  // returned is the (first) module's.
  m.def("fully_shard", [](const py::object& module, const dtensor::DeviceMesh& mesh,
                          const py::object& reshard_after_forward, std::optional<fsdp::MixedPrecisionPolicy> mp_policy,
                          std::optional<fsdp::CPUOffloadPolicy> offload_policy, std::optional<std::string> shard_axis,
                          std::optional<std::string> replicate_axis, std::vector<Tensor> ignored_params,
                          const py::object& shard_placement_fn) {
    // None, a bool, or an int: the group size to reshard to after forward (torch's Union[bool, int]).
    std::optional<bool> reshard;
    std::optional<int64_t> reshard_size;
    if (py::isinstance<py::bool_>(reshard_after_forward)) {
      reshard = reshard_after_forward.cast<bool>();
    } else if (py::isinstance<py::int_>(reshard_after_forward)) {
      reshard_size = reshard_after_forward.cast<int64_t>();
    } else if (!reshard_after_forward.is_none()) {
      throw py::value_error(Str("reshard_after_forward should be a bool or an int representing the group size to ",
                                "reshard to, not ", py::repr(reshard_after_forward).cast<std::string>()));
    }
    const fsdp::FullyShardOptions options{.reshard_after_forward = reshard,
                                          .reshard_after_forward_size = reshard_size,
                                          .shard_axis = std::move(shard_axis),
                                          .replicate_axis = std::move(replicate_axis),
                                          .mp_policy = mp_policy.value_or(fsdp::MixedPrecisionPolicy{}),
                                          .offload_policy = offload_policy,
                                          .ignored_params = std::move(ignored_params),
                                          .shard_placement_fn = ShardPlacementFn(shard_placement_fn)};
    std::vector<nn::Module*> modules;
    auto add = [&](const py::handle& m) {
      if (!py::isinstance<nn::Module>(m)) {
        throw py::type_error(Str("fully_shard: expected a Module or a list of Modules, got ",
                                 py::str(py::type::of(m).attr("__name__")).cast<std::string>()));
      }
      modules.push_back(&m.cast<nn::Module&>());
    };
    if (py::isinstance<py::list>(module) || py::isinstance<py::tuple>(module)) {
      for (const py::handle& m : module) add(m);
    } else {
      add(module);
    }
    return NoGil([&] { return fsdp::FullyShard(modules, mesh, options); });
  }, py::arg("module"), py::arg("mesh"), py::arg("reshard_after_forward") = py::none(), py::arg("mp_policy") = py::none(),
        py::arg("offload_policy") = py::none(), py::arg("shard_axis") = py::none(),
        py::arg("replicate_axis") = py::none(), py::arg("ignored_params") = std::vector<Tensor>{},
        py::arg("shard_placement_fn") = py::none(), py::keep_alive<0, 1>(),
        "FSDP2 fully_shard: shards module's parameters over mesh (wrap blocks first, then the root)");
  m.def("_fsdp_state", [](nn::Module& module) { return fsdp::AsFSDPModule(module); }, py::keep_alive<0, 1>());
  // fsdp::Replicate (DDP's buckets, overlapped with backward): tessel.nn.parallel.DistributedDataParallel's engine.
  py::class_<fsdp::ReplicateModule>(m, "ReplicateState")
      .def("set_requires_gradient_sync", &fsdp::ReplicateModule::SetRequiresGradientSync,
           py::arg("requires_gradient_sync"))
      .def("set_pipeline_drivable", &fsdp::ReplicateModule::SetPipelineDrivable, py::arg("drivable"))
      .def_property_readonly("num_buckets", &fsdp::ReplicateModule::num_buckets)
      .def("bucket_fqns", &fsdp::ReplicateModule::BucketFqns)
      .def("unused_in_last_backward", &fsdp::ReplicateModule::UnusedInLastBackward)
      .def("shadow_backward", [](const fsdp::ReplicateModule& r) { NoGil([&] { r.ShadowBackward(); }); });
  m.def("replicate", [](nn::Module& module, const dtensor::DeviceMesh& mesh, int64_t bucket_cap_bytes,
                        bool find_unused_parameters, bool init_sync) {
    return NoGil([&] {
      return fsdp::Replicate(module, mesh, {.bucket_cap_bytes = bucket_cap_bytes,
                                            .find_unused_parameters = find_unused_parameters,
                                            .init_sync = init_sync});
    });
  }, py::arg("module"), py::arg("mesh"), py::arg("bucket_cap_bytes"), py::arg("find_unused_parameters"),
        py::arg("init_sync") = true, py::keep_alive<0, 1>());
  m.def("clip_grad_norm_fsdp", [](const F& root, double max_norm) {
    return NoGil([&] { return fsdp::ClipGradNorm(root, max_norm); });
  }, py::arg("root"), py::arg("max_norm"));
  m.def("_clip_grad_norm_sharded", [](const TensorList& params, double max_norm, const comm::ProcessGroupPtr& world) {
    return NoGil([&] { return fsdp::ClipGradNorm(params, max_norm, world); });
  }, py::arg("parameters"), py::arg("max_norm"), py::arg("world"), "One all-reduce over world for the whole norm");
  // torch.distributed.tensor.experimental.implicit_replication: `with` holds the thread's guard.
  struct PyImplicitReplication {
    std::unique_ptr<ImplicitReplicationGuard> guard;
  };
  py::class_<PyImplicitReplication>(m, "_ImplicitReplication")
      .def(py::init([] { return PyImplicitReplication{}; }))
      .def("__enter__", [](PyImplicitReplication& g) {
        TESSEL_CHECK(g.guard == nullptr, "implicit_replication entered twice");
        g.guard = std::make_unique<ImplicitReplicationGuard>();
      })
      .def("__exit__", [](PyImplicitReplication& g, py::args) { g.guard.reset(); });
  m.def("_implicit_replication_enabled", [] { return ImplicitReplicationEnabled(); },
        "Whether this thread is inside implicit_replication() (or a composed function's constants scope)");
}

}  // namespace

// torch.distributed's stores (TCPStore, FileStore, HashStore, PrefixStore; tessel/distributed/__init__.py wraps
// them) and init_process_group(store=...): the gloo world over a store the caller made.
void BindStores(py::module_& m) {
  using comm::Store;
  using std::chrono::milliseconds;
  py::class_<Store, std::shared_ptr<Store>>(m, "_Store")
      .def("set", [](Store& s, const std::string& key, const py::bytes& value) {
        const std::string v = value;
        NoGil([&] { s.Set(key, std::vector<char>(v.begin(), v.end())); });
      }, py::arg("key"), py::arg("value"))
      .def("get", [](Store& s, const std::string& key, milliseconds timeout) {
        const std::vector<char> v = NoGil([&] { return s.Get(key, timeout); });
        return py::bytes(v.data(), v.size());
      }, py::arg("key"), py::arg("timeout"))
      .def("add", [](Store& s, const std::string& key, int64_t delta) {
        return NoGil([&] { return s.Add(key, delta); });
      }, py::arg("key"), py::arg("amount"))
      .def("check", [](Store& s, const std::vector<std::string>& keys) {
        return NoGil([&] {
          return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return s.Check(k); });
        });
      }, py::arg("keys"))
      .def("wait", [](Store& s, const std::vector<std::string>& keys, milliseconds timeout) {
        NoGil([&] { s.Wait(keys, timeout); });
      }, py::arg("keys"), py::arg("timeout"))
      .def("compare_set", [](Store& s, const std::string& key, const py::bytes& expected, const py::bytes& desired) {
        const std::string e = expected, d = desired;
        const std::vector<char> v = NoGil([&] {
          return s.CompareSet(key, std::vector<char>(e.begin(), e.end()), std::vector<char>(d.begin(), d.end()));
        });
        return py::bytes(v.data(), v.size());
      }, py::arg("key"), py::arg("expected_value"), py::arg("desired_value"))
      .def("delete_key", [](Store& s, const std::string& key) { return NoGil([&] { return s.DeleteKey(key); }); },
           py::arg("key"))
      .def("num_keys", [](Store& s) { return NoGil([&] { return s.NumKeys(); }); })
      .def("__repr__", &Store::Describe);
  // (store, the port it serves or reaches: 0 asks the server for a free one)
  m.def("_tcp_store", [](const std::string& host, int port, bool is_master, milliseconds timeout) {
    auto store = NoGil([&] { return std::make_shared<comm::TcpStore>(host, port, is_master, timeout); });
    return py::make_tuple(std::shared_ptr<Store>(store), store->port());
  }, py::arg("host"), py::arg("port"), py::arg("is_master"), py::arg("timeout"));
  m.def("_file_store", [](const std::string& dir) -> std::shared_ptr<Store> {
    return std::make_shared<comm::FileStore>(dir);
  }, py::arg("dir"));
  m.def("_hash_store", []() -> std::shared_ptr<Store> { return std::make_shared<comm::HashStore>(); });
  m.def("_next_agent_store_prefix", &comm::NextAgentStorePrefix, py::arg("restart_count"),
        "The key prefix of this process's next world in the launcher's store (comm/backends/gloo.h)");
  m.def("_prefix_store", [](const std::string& prefix, std::shared_ptr<Store> inner) -> std::shared_ptr<Store> {
    return std::make_shared<comm::PrefixStore>(prefix, std::move(inner));
  }, py::arg("prefix"), py::arg("store"));
  // Collective over the world_size processes: the gloo world rendezvousing through `store` (under
  // "tessel/"); `host`: the TCP store's address (its loopback-ness picks the transport's), else "". The
  // calling thread's budget becomes its share of the node's cores (LOCAL_WORLD_SIZE, else world_size ranks).
  m.def("_init_process_group_with_store", [](std::shared_ptr<Store> store, int rank, int world_size,
                                             milliseconds timeout, const std::string& host) {
    comm::GlooOptions options;
    options.timeout = timeout;
    if (!host.empty()) options.master_addr = host;
    if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME"); iface != nullptr) options.iface = iface;
    comm::ShareCoresWithLocalRanks(world_size);  // one node's processes share its cores, as under tessel_run
    return NoGil([&] { return comm::NewGlooProcessGroup(std::move(store), "tessel/", rank, world_size, options); });
  }, py::arg("store"), py::arg("rank"), py::arg("world_size"), py::arg("timeout"), py::arg("host"));
}

void BindDistributed(py::module_& m) {
  BindStores(m);
  BindProcessGroups(m);
  BindMesh(m);
  BindPlacements(m);
  BindDTensor(m);
  BindTracer(m);
  BindFsdp(m);
}

}  // namespace tessel::bindings
