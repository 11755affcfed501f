// bindings/pipelining_py.cc — pipelining/: the action IR (parse / format, CSV), schedules by name, the
// lowering passes and verifier, the simulator and its SVG timeline, PipelineStage + PipelineExecutor over
// any module (a Python-defined module is an nn::Module, so it can be a stage), and the whole GPT pipeline
// (pipeline_gpt.h). The package (tessel/distributed/pipelining/) names the schedules as torch does.
//
// Invariant: thin — schedules are passed by their C++ names ("1F1B", "ZBVZeroBubble", ...; parsing and its
// errors are pipelining's), programs cross as lists of lists of Action-or-None; every call that computes or
// communicates releases the GIL (a Python loss_fn or forward re-acquires it).
//
// Example (Python):
//   prog = _C.generate_schedule("1F1B", 2, 2, 4); where = _C.stage_to_rank_map("1F1B", 2, 2)
//   lowered = _C.lower_program(prog, where, 4); r = _C.simulate(lowered, where); r.bubble
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings/bind.h"
#include "core/base/error.h"
#include "pipelining/action.h"
#include "pipelining/executor.h"
#include "pipelining/lowering.h"
#include "pipelining/pipeline_gpt.h"
#include "pipelining/schedule_csv.h"
#include "pipelining/schedules.h"
#include "pipelining/simulator.h"
#include "pipelining/timeline_svg.h"
#include "pipelining/verifier.h"

namespace tessel::bindings {
namespace {

namespace pp = pipelining;

void BindActions(py::module_& m) {
  py::class_<pp::Action>(m, "_Action")
      .def_readonly("stage", &pp::Action::stage)
      .def_property_readonly("kind", [](const pp::Action& a) { return std::string(pp::ActionKindName(a.kind)); })
      .def_readonly("microbatch", &pp::Action::microbatch)
      .def("__eq__", [](const pp::Action& a, const pp::Action& b) { return a == b; })
      .def("__hash__", [](const pp::Action& a) { return pp::ActionHash{}(a); })
      .def("__str__", [](const pp::Action& a) { return pp::ToString(a); })
      .def("__repr__", [](const pp::Action& a) { return pp::ToString(a); });
  m.def("parse_action", [](const std::string& text) { return pp::ParseAction(text); }, py::arg("text"),
        "\"1F0\", \"2SEND_B2\", \"1UNSHARD\" -> Action (ValueError naming the text otherwise)");
  m.def("parse_rank_program", [](const std::string& text) { return pp::ParseRankProgram(text); }, py::arg("text"),
        "\"0F0,0F1,,0B0\" -> [Action | None] (an empty slot is idle)");
  m.def("format_rank_program", [](const pp::RankProgram& r) { return pp::ToString(r); }, py::arg("program"));
  m.def("format_program", [](const pp::Program& p) { return pp::FormatProgram(p); }, py::arg("program"),
        "The step x rank grid");
  m.def("dump_csv", &pp::DumpCsv, py::arg("program"), "PyTorch's _dump_csv layout: one row per rank");
  m.def("parse_csv", [](const std::string& text) { return pp::ParseCsv(text); }, py::arg("text"));
}

void BindSchedules(py::module_& m) {
  m.def("schedule_names", [] {
    std::vector<std::string> out;
    for (pp::ScheduleKind k : pp::AllScheduleKinds()) out.emplace_back(pp::ScheduleName(k));
    return out;
  });
  m.def("generate_schedule", [](const std::string& name, int num_ranks, int num_stages, int num_microbatches) {
    return NoGil([&] { return pp::GenerateSchedule(pp::ParseScheduleKind(name), num_ranks, num_stages, num_microbatches); });
  }, py::arg("schedule"), py::arg("num_ranks"), py::arg("num_stages"), py::arg("num_microbatches"),
        "The compute-only program (F, B, I, W and idle slots), index = rank");
  m.def("stage_to_rank_map", [](const std::string& name, int num_ranks, int num_stages) {
    return pp::StageToRankMap(pp::ParseScheduleKind(name), num_ranks, num_stages);
  }, py::arg("schedule"), py::arg("num_ranks"), py::arg("num_stages"));
  m.def("lower_program", [](const pp::Program& compute, const std::vector<int>& stage_to_rank, int num_microbatches,
                            bool fsdp, int max_active_stages, bool reduce_grad, bool merge_backward) {
    pp::LowerOptions options{fsdp, max_active_stages, reduce_grad, merge_backward};
    return NoGil([&] { return pp::LowerProgram(compute, stage_to_rank, num_microbatches, options); });
  }, py::arg("program"), py::arg("stage_to_rank"), py::arg("num_microbatches"), py::arg("fsdp") = false,
        py::arg("max_active_stages") = 3, py::arg("reduce_grad") = true, py::arg("merge_backward") = false);
  m.def("verify_compute_program", &pp::VerifyComputeProgram, py::arg("program"), py::arg("num_stages"),
        py::arg("num_microbatches"), "Returns the stage -> rank map; ValueError with the grid otherwise");
  m.def("verify_lowered_program", [](const pp::Program& p, const std::vector<int>& stage_to_rank, int m) {
    NoGil([&] { pp::VerifyLoweredProgram(p, stage_to_rank, m); });
  }, py::arg("program"), py::arg("stage_to_rank"), py::arg("num_microbatches"));
}

void BindSimulator(py::module_& m) {
  py::class_<pp::SimulationResult>(m, "SimulationResult")
      .def_readonly("makespan", &pp::SimulationResult::makespan)
      .def_readonly("busy", &pp::SimulationResult::busy)
      .def_readonly("idle_fraction", &pp::SimulationResult::idle_fraction)
      .def_readonly("bubble", &pp::SimulationResult::bubble)
      .def_readonly("peak_in_flight", &pp::SimulationResult::peak_in_flight)
      .def("timeline", [](const pp::SimulationResult& r) {
        py::list out;
        for (const pp::TimedAction& t : r.timeline) out.append(py::make_tuple(t.rank, t.action, t.start, t.end));
        return out;
      }, "[(rank, action, start, end)] in (rank, program order)");
  m.def("simulate", [](const pp::Program& p, const std::vector<int>& stage_to_rank, double forward,
                       double backward_input, double backward_weight, double transfer) {
    pp::ActionCosts costs{.forward = forward, .backward_input = backward_input, .backward_weight = backward_weight,
                          .transfer = transfer};
    return NoGil([&] { return pp::Simulate(p, stage_to_rank, costs); });
  }, py::arg("program"), py::arg("stage_to_rank"), py::arg("forward") = 1.0, py::arg("backward_input") = 1.0,
        py::arg("backward_weight") = 1.0, py::arg("transfer") = 0.0);
  m.def("simulate_lockstep", [](const pp::Program& lowered, const std::vector<int>& stage_to_rank) {
    return NoGil([&] { return pp::SimulateLockstep(lowered, stage_to_rank); });
  }, py::arg("program"), py::arg("stage_to_rank"), "PyTorch's _simulate_comms_compute: the per-rank step grid");
  m.def("timeline_svg", &pp::TimelineSvg, py::arg("result"), py::arg("title"));
}

py::object StepLoss(const pp::StepStats& st) { return st.loss ? py::cast(*st.loss) : py::none(); }

void BindRuntime(py::module_& m) {
  py::class_<pp::PipelineStage>(m, "_PipelineStage")
      .def(py::init([](nn::Module& module, int stage_index, int num_stages, comm::ProcessGroupPtr group,
                       std::optional<pp::MultiOutputLossFn> loss_fn, std::vector<int> stage_to_rank) {
             return std::make_unique<pp::PipelineStage>(module, stage_index, num_stages, std::move(group),
                                                        loss_fn.value_or(nullptr), std::move(stage_to_rank));
           }),
           py::arg("module"), py::arg("stage_index"), py::arg("num_stages"), py::arg("group"), py::arg("loss_fn"),
           py::arg("stage_to_rank"), py::keep_alive<1, 2>())
      .def_property_readonly("stage_index", &pp::PipelineStage::stage_index)
      .def_property_readonly("is_first", &pp::PipelineStage::is_first)
      .def_property_readonly("is_last", &pp::PipelineStage::is_last)
      .def("set_expected_shapes", &pp::PipelineStage::SetExpectedShapes, py::arg("input"), py::arg("output"),
           "torch's input_args / output_args as microbatch-0 shapes (one per tensor) the shape handshake checks")
      .def("set_dw_builder", &pp::PipelineStage::SetDwBuilder, py::arg("builder"),
           "torch's dw_builder: B / I run the module's whole backward, then builder() gives the runner W calls");
  // The executor drives the stages' fully_shard and Replicate states itself, as for C++ callers
  // (pipelining/executor.h: held for each step, released after a reducing one, windows of max_active_stages);
  // a DistributedDataParallel stage's sync setting decides whether a step reduces, and one with a communication
  // hook is not drivable (the schedule runs the hook).
  py::class_<pp::PipelineExecutor>(m, "_PipelineExecutor")
      .def(py::init([](std::vector<pp::PipelineStage*> stages, pp::RankProgram program, int num_microbatches,
                       bool scale_grads, std::optional<std::function<void(int, int)>> before_forward,
                       int max_active_stages) {
             pp::ExecutorOptions options;
             options.scale_grads = scale_grads;
             if (before_forward) options.before_forward = std::move(*before_forward);  // takes the GIL to call
             options.max_active_stages = max_active_stages;
             return std::make_unique<pp::PipelineExecutor>(std::move(stages), std::move(program), num_microbatches,
                                                           std::move(options));
           }),
           py::arg("stages"), py::arg("program"), py::arg("num_microbatches"), py::arg("scale_grads") = true,
           py::arg("before_forward") = py::none(), py::arg("max_active_stages") = 3, py::keep_alive<1, 2>())
      .def("step", [](pp::PipelineExecutor& e, std::optional<Tensor> inputs, std::optional<Tensor> targets) {
        pp::StepStats st = NoGil([&] { return e.Step(inputs.value_or(Tensor()), targets.value_or(Tensor())); });
        return StepLoss(st);
      }, py::arg("inputs"), py::arg("targets"), "One step; the full-batch loss on the last stage's rank, else None")
      .def("set_scale_grads", &pp::PipelineExecutor::set_scale_grads, py::arg("scale"))
      .def("step_with_losses", [](pp::PipelineExecutor& e, std::optional<Tensor> inputs, std::optional<Tensor> targets,
                                  bool finalize_gradients) {
        e.set_finalize_gradients(finalize_gradients);
        pp::StepStats st = NoGil([&] { return e.Step(inputs.value_or(Tensor()), targets.value_or(Tensor())); });
        return py::make_tuple(StepLoss(st), st.microbatch_losses);
      }, py::arg("inputs"), py::arg("targets"), py::arg("finalize_gradients") = true,
           "One step; (the full-batch loss, each microbatch's loss) on the last stage's rank, else (None, [])")
      .def("eval_with_losses", [](pp::PipelineExecutor& e, std::optional<Tensor> inputs, std::optional<Tensor> targets,
                                  bool targets_optional) {
        e.set_targets_optional(targets_optional);
        pp::StepStats st = NoGil([&] { return e.Eval(inputs.value_or(Tensor()), targets.value_or(Tensor())); });
        return py::make_tuple(StepLoss(st), st.microbatch_losses);
      }, py::arg("inputs"), py::arg("targets"), py::arg("targets_optional") = false,
           "A forward-only step (no backward, no gradient touched); as step_with_losses. targets_optional: a "
           "schedule without a loss function (its last stage runs without targets)");
}

// The whole GPT pipeline of one rank (pipeline_gpt.h), kept together: the executor refers to the stages,
// which refer to the modules.
void BindPipelineGPT(py::module_& m) {
  py::class_<pp::RankPipeline>(m, "RankPipeline")
      .def_readonly("stage_to_rank", &pp::RankPipeline::stage_to_rank)
      .def_readonly("num_stages", &pp::RankPipeline::num_stages)
      .def_readonly("lowered", &pp::RankPipeline::lowered)
      .def("named_parameters", &pp::RankPipeline::NamedParameters, "This rank's parameters, full-model FQNs")
      .def("step", [](pp::RankPipeline& r, std::optional<Tensor> idx, std::optional<Tensor> targets) {
        pp::StepStats st = NoGil([&] { return r.executor->Step(idx.value_or(Tensor()), targets.value_or(Tensor())); });
        return StepLoss(st);
      }, py::arg("idx"), py::arg("targets"), "One training step's forward and backward (no optimizer step)");
  m.def("pipeline_gpt", [](const nn::GPTConfig& cfg, uint64_t seed, comm::ProcessGroupPtr group,
                           const std::string& schedule, int num_microbatches, int stages_per_rank) {
    pp::PipelineGPTOptions options{.kind = pp::ParseScheduleKind(schedule), .num_microbatches = num_microbatches,
                                   .stages_per_rank = stages_per_rank};
    return NoGil([&] { return pp::PipelineGPT(cfg, seed, std::move(group), options); });
  }, py::arg("config"), py::arg("seed"), py::arg("group"), py::arg("schedule"), py::arg("num_microbatches"),
        py::arg("stages_per_rank") = 0, "This rank's stages of GPT(config, seed) under the schedule (collective)");
}

}  // namespace

void BindPipelining(py::module_& m) {
  BindActions(m);
  BindSchedules(m);
  BindSimulator(m);
  BindRuntime(m);
  BindPipelineGPT(m);
}

}  // namespace tessel::bindings
