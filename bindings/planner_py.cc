// bindings/planner_py.cc — the ledger planner (planner/) for Python, as _C._planner: the model spec, the layout,
// the assumed hardware, one rank's plan, "which ledger blew up?" against a budget, the plan held against this
// rank's measured ledger, and the search over a world's layouts. The classes take keywords with the C++ defaults
// here; tessel/planner.py adds budgets as text ("80GiB"), argument checks and the docs.
//
// Invariant: thin — every value converts field by field into planner/'s structs and every call is the C++
// function of the same name (the command line //planner:plan prints the same numbers); a bad model or layout is
// Validate's / Verify's kInvalidArgument (ValueError naming the field).
//
// Example (Python):
//   spec = _C._planner.preset("llama-7b")
//   plan = _C._planner.plan_peak_rank(spec, _C._planner.Layout(dp_shard=8, zero_stage=3), -1)
//   _C._planner.exceeds_budget(plan, 80 << 30)   # None: it fits
#include <pybind11/stl.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings/bind.h"
#include "core/base/error.h"
#include "core/memory/allocator.h"
#include "core/tensor/device.h"
#include "planner/memory_plan.h"
#include "planner/planner.h"
#include "planner/roofline.h"

namespace tessel::bindings {
namespace {

using planner::Layout;
using planner::LedgerPlan;
using planner::ModelSpec;
using planner::RankPlan;

// {name: field} of a planner struct, in the listed order: the dicts the Python face shows (plan.coord,
// plan.ledgers, a step estimate).
template <typename T, typename V>
py::dict FieldDict(const T& value, std::initializer_list<std::pair<const char*, V T::*>> fields) {
  py::dict d;
  for (const auto& [name, member] : fields) d[name] = value.*member;
  return d;
}

py::dict CoordDict(const planner::MeshCoord& c) {
  using C = planner::MeshCoord;
  return FieldDict<C, int64_t>(c, {{"pp", &C::pp}, {"dp_replicate", &C::dp_replicate}, {"dp_shard", &C::dp_shard},
                                   {"tp", &C::tp}});
}

py::dict AxisBytesDict(const RankPlan& p) {
  py::dict d;
  for (int a = 0; a < planner::kNumMeshAxes; ++a) {
    d[py::str(std::string(planner::MeshAxisName(static_cast<planner::MeshAxis>(a))))] =
        p.axis_bytes[static_cast<size_t>(a)];
  }
  return d;
}

py::dict LedgerDict(const LedgerPlan& l) {
  return FieldDict<LedgerPlan, int64_t>(l, {{"params", &LedgerPlan::params}, {"grads", &LedgerPlan::grads},
                                            {"optim", &LedgerPlan::optim}, {"activations", &LedgerPlan::activations},
                                            {"comm", &LedgerPlan::comm}, {"total", &LedgerPlan::total}});
}

void BindSpec(py::module_& m) {
  py::class_<ModelSpec>(m, "ModelSpec")
      .def(py::init([](int64_t vocab_size, int64_t d_model, int64_t n_layers, int64_t n_heads,
                       std::optional<int64_t> ffn_hidden, int64_t max_seq_len, bool swiglu, bool rmsnorm, bool bias,
                       bool tie_embeddings, bool learned_positions, bool flash_attention, bool dropout,
                       std::string name) {
             ModelSpec s;
             s.name = std::move(name);
             s.vocab_size = vocab_size;
             s.d_model = d_model;
             s.n_layers = n_layers;
             s.n_heads = n_heads;
             s.ffn_hidden = ffn_hidden.value_or(4 * d_model);
             s.max_seq_len = max_seq_len;
             s.swiglu = swiglu;
             s.rmsnorm = rmsnorm;
             s.bias = bias;
             s.tie_embeddings = tie_embeddings;
             s.learned_positions = learned_positions;
             s.flash_attention = flash_attention;
             s.dropout = dropout;
             s.Validate();
             return s;
           }),
           py::kw_only(), py::arg("vocab_size"), py::arg("d_model"), py::arg("n_layers"), py::arg("n_heads"),
           py::arg("ffn_hidden") = py::none(), py::arg("max_seq_len") = 4096, py::arg("swiglu") = false,
           py::arg("rmsnorm") = false, py::arg("bias") = false, py::arg("tie_embeddings") = false,
           py::arg("learned_positions") = true, py::arg("flash_attention") = true, py::arg("dropout") = false,
           py::arg("name") = "custom")
      .def_readonly("name", &ModelSpec::name)
      .def_readonly("vocab_size", &ModelSpec::vocab_size)
      .def_readonly("d_model", &ModelSpec::d_model)
      .def_readonly("n_layers", &ModelSpec::n_layers)
      .def_readonly("n_heads", &ModelSpec::n_heads)
      .def_readonly("ffn_hidden", &ModelSpec::ffn_hidden)
      .def_readonly("max_seq_len", &ModelSpec::max_seq_len)
      .def_readonly("swiglu", &ModelSpec::swiglu)
      .def_readonly("rmsnorm", &ModelSpec::rmsnorm)
      .def_readonly("bias", &ModelSpec::bias)
      .def_readonly("tie_embeddings", &ModelSpec::tie_embeddings)
      .def_readonly("learned_positions", &ModelSpec::learned_positions)
      .def_readonly("flash_attention", &ModelSpec::flash_attention)
      .def_readonly("dropout", &ModelSpec::dropout)
      .def("parameter_shapes", &ModelSpec::ParameterShapes)
      .def("num_parameters", &ModelSpec::NumParameters)
      .def("__repr__", [](const ModelSpec& s) {
        return Str("ModelSpec(", s.name, ": ", s.NumParameters(), " parameters, vocab ", s.vocab_size, ", d_model ",
                   s.d_model, ", ", s.n_layers, " layers, ", s.n_heads, " heads, ffn ", s.ffn_hidden, ")");
      });
  m.def("preset", &planner::ModelPreset, py::arg("name"));
  m.def("preset_names", &planner::ModelPresetNames);
  m.def("from_gpt_config", [](const nn::GPTConfig& cfg) {
    ModelSpec s = planner::FromGptConfig(cfg);
    s.Validate();
    return s;
  }, py::arg("config"));
}

void BindLayout(py::module_& m) {
  py::class_<Layout>(m, "Layout")
      .def(py::init([](int64_t pp, int64_t dp_replicate, int64_t dp_shard, int64_t tp, std::optional<int> zero_stage,
                       const std::string& schedule, int64_t num_microbatches, bool sequence_parallel,
                       bool loss_parallel, const std::string& ac, DType param_dtype, DType reduce_dtype,
                       DType optim_dtype, bool master_weights, std::optional<int64_t> global_batch, int64_t seq_len,
                       int64_t grad_bucket_bytes) {
             return Layout{.pp = pp, .schedule = planner::ParseSchedule(schedule),
                           .num_microbatches = num_microbatches, .dp_replicate = dp_replicate,
                           .dp_shard = dp_shard, .zero_stage = zero_stage.value_or(dp_shard > 1 ? 3 : 0), .tp = tp,
                           .sequence_parallel = sequence_parallel, .loss_parallel = loss_parallel,
                           .ac = planner::ParseAc(ac), .param_dtype = param_dtype, .reduce_dtype = reduce_dtype,
                           .optim_dtype = optim_dtype, .master_weights = master_weights,
                           .global_batch = global_batch.value_or(dp_replicate * dp_shard * num_microbatches),
                           .seq_len = seq_len, .grad_bucket_bytes = grad_bucket_bytes};
           }),
           py::kw_only(), py::arg("pp") = 1, py::arg("dp_replicate") = 1, py::arg("dp_shard") = 1, py::arg("tp") = 1,
           py::arg("zero_stage") = py::none(), py::arg("schedule") = "1f1b", py::arg("num_microbatches") = 1,
           py::arg("sequence_parallel") = false, py::arg("loss_parallel") = false, py::arg("ac") = "none",
           py::arg("param_dtype") = DType::kBFloat16, py::arg("reduce_dtype") = DType::kBFloat16,
           py::arg("optim_dtype") = DType::kFloat32, py::arg("master_weights") = false,
           py::arg("global_batch") = py::none(), py::arg("seq_len") = 4096,
           py::arg("grad_bucket_bytes") = Layout{}.grad_bucket_bytes)
      .def_readonly("pp", &Layout::pp)
      .def_property_readonly("schedule", [](const Layout& l) { return std::string(ScheduleName(l.schedule)); })
      .def_readonly("num_microbatches", &Layout::num_microbatches)
      .def_readonly("dp_replicate", &Layout::dp_replicate)
      .def_readonly("dp_shard", &Layout::dp_shard)
      .def_readonly("zero_stage", &Layout::zero_stage)
      .def_readonly("tp", &Layout::tp)
      .def_readonly("sequence_parallel", &Layout::sequence_parallel)
      .def_readonly("loss_parallel", &Layout::loss_parallel)
      .def_property_readonly("ac", [](const Layout& l) { return std::string(AcName(l.ac)); })
      .def_readonly("param_dtype", &Layout::param_dtype)
      .def_readonly("reduce_dtype", &Layout::reduce_dtype)
      .def_readonly("optim_dtype", &Layout::optim_dtype)
      .def_readonly("master_weights", &Layout::master_weights)
      .def_readonly("global_batch", &Layout::global_batch)
      .def_readonly("seq_len", &Layout::seq_len)
      .def_readonly("grad_bucket_bytes", &Layout::grad_bucket_bytes)
      .def_property_readonly("world_size", &Layout::WorldSize)
      .def_property_readonly("micro_batch_size", &Layout::MicroBatchSize)
      .def("__str__", &Layout::ToString)
      .def("__repr__", [](const Layout& l) { return "Layout(" + l.ToString() + ")"; });
  const planner::Hardware defaults;
  py::class_<planner::Hardware>(m, "Hardware")
      .def(py::init([](double peak_flops, double intra, double inter, int64_t ranks_per_node) {
             TESSEL_CHECK(peak_flops > 0 && intra > 0 && inter > 0 && ranks_per_node >= 1, "Hardware: peak_flops, ",
                          "the bandwidths and ranks_per_node must be positive, got ", peak_flops, ", ", intra, ", ",
                          inter, ", ", ranks_per_node);
             return planner::Hardware{.peak_flops = peak_flops, .intra_node_bytes_per_s = intra,
                                      .inter_node_bytes_per_s = inter, .ranks_per_node = ranks_per_node};
           }),
           py::kw_only(), py::arg("peak_flops") = defaults.peak_flops,
           py::arg("intra_node_bytes_per_s") = defaults.intra_node_bytes_per_s,
           py::arg("inter_node_bytes_per_s") = defaults.inter_node_bytes_per_s,
           py::arg("ranks_per_node") = defaults.ranks_per_node)
      .def_readonly("peak_flops", &planner::Hardware::peak_flops)
      .def_readonly("intra_node_bytes_per_s", &planner::Hardware::intra_node_bytes_per_s)
      .def_readonly("inter_node_bytes_per_s", &planner::Hardware::inter_node_bytes_per_s)
      .def_readonly("ranks_per_node", &planner::Hardware::ranks_per_node);
  m.def("verify", [](const Layout& l, const ModelSpec& s, int64_t world) { planner::Verify(l, s, world); },
        py::arg("layout"), py::arg("model"), py::arg("world"));
}

void BindPlans(py::module_& m) {
  py::class_<RankPlan>(m, "RankPlan")
      .def_readonly("rank", &RankPlan::rank)
      .def_property_readonly("coord", [](const RankPlan& p) { return CoordDict(p.coord); })
      .def_property_readonly("ledgers", [](const RankPlan& p) { return LedgerDict(p.ledgers); })
      .def_property_readonly("axis_bytes", &AxisBytesDict)
      .def_readonly("flops", &RankPlan::flops)
      .def_readonly("exact", &RankPlan::exact)
      .def_readonly("activations_measured", &RankPlan::activations_measured);
  m.def("plan_rank", [](const ModelSpec& s, const Layout& l, int64_t rank, int64_t activations) {
    return planner::PlanRank(s, l, rank, activations);
  }, py::arg("model"), py::arg("layout"), py::arg("rank"), py::arg("measured_activations"));
  m.def("plan_peak_rank", [](const ModelSpec& s, const Layout& l, int64_t activations) {
    return planner::PlanPeakRank(s, l, activations);
  }, py::arg("model"), py::arg("layout"), py::arg("measured_activations"));
  // (ledger, bytes, alone) or None.
  m.def("exceeds_budget", [](const RankPlan& p, int64_t budget) -> std::optional<py::tuple> {
    const std::optional<planner::OverBudget> over = planner::ExceedsBudget(p.ledgers, budget);
    if (!over) return std::nullopt;
    return py::make_tuple(over->ledger, over->bytes, over->alone);
  }, py::arg("plan"), py::arg("budget_bytes"));
  m.def("format_rank_plan", &planner::FormatRankPlan, py::arg("plan"), py::arg("budget_bytes"));
  m.def("parse_bytes", [](const std::string& text, const std::string& what) { return planner::ParseBytes(text, what); },
        py::arg("text"), py::arg("what"));
  // The plan of `rank` against the measured ledger of CPU device `index` (this thread's, a rank's own, when -1).
  m.def("rank_plan_vs_measured", [](const ModelSpec& s, const Layout& l, int64_t rank, int index) {
    return planner::RankPlanVsMeasured(s, l, rank, memory::Stats(index < 0 ? CurrentDevice() : Device::Cpu(index)));
  }, py::arg("model"), py::arg("layout"), py::arg("rank"), py::arg("index"));
  m.def("measure_gpt_activations", [](const nn::GPTConfig& cfg, int64_t local_batch, const std::string& ac) {
    return NoGil([&] { return planner::MeasureGptActivations(cfg, local_batch, ac); });
  }, py::arg("config"), py::arg("local_batch"), py::arg("ac"));
  m.def("step_flops", &planner::StepFlops, py::arg("model"), py::arg("layout"), py::arg("stage"));
}

py::dict StepDict(const planner::StepEstimate& e) {
  using E = planner::StepEstimate;
  return FieldDict<E, double>(e, {{"step_s", &E::step_s}, {"compute_s", &E::compute_s}, {"bubble", &E::bubble},
                                  {"tp_s", &E::tp_s}, {"pp_s", &E::pp_s}, {"dp_s", &E::dp_s}});
}

void BindSearch(py::module_& m) {
  m.def("estimate_step", [](const RankPlan& p, const Layout& l, const planner::Hardware& hw) {
    return StepDict(planner::EstimateStep(p, l, hw));
  }, py::arg("plan"), py::arg("layout"), py::arg("hardware"));
  // [(layout, peak rank's plan, step estimate)], fastest first.
  m.def("rank_layouts", [](const ModelSpec& s, int64_t world, const Layout& base, int64_t micro_batch,
                           const planner::Hardware& hw, int64_t budget) {
    std::vector<planner::Candidate> fit =
        NoGil([&] { return planner::RankLayouts(s, world, base, micro_batch, hw, budget); });
    py::list out;
    for (planner::Candidate& c : fit) out.append(py::make_tuple(c.layout, c.peak, StepDict(c.step)));
    return out;
  }, py::arg("model"), py::arg("world"), py::arg("base"), py::arg("micro_batch"), py::arg("hardware"),
        py::arg("budget_bytes"));
}

}  // namespace

void BindPlanner(py::module_& m) {
  py::module_ p = m.def_submodule("_planner", "the ledger planner (planner/); tessel.planner wraps it");
  BindSpec(p);
  BindLayout(p);
  BindPlans(p);
  BindSearch(p);
}

}  // namespace tessel::bindings
