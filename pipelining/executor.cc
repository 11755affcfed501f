// pipelining/executor.cc — PipelineExecutor: one step of a lowered per-rank program.
#include "pipelining/executor.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <tuple>

#include "comm/future_work.h"
#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "core/memory/allocator.h"
#include "core/ops/view.h"
#include "pipelining/lowering.h"
#include "pipelining/microbatch.h"

namespace tessel::pipelining {

struct PipelineExecutor::Run {
  std::vector<Tensor> inputs, targets;
  std::map<std::tuple<int, bool, int>, comm::WorkPtr> recvs;  // (receiving stage, backward, microbatch)
  std::vector<comm::WorkPtr> sends;
  std::vector<int> peak_in_flight;
  std::vector<int64_t> bytes_per_microbatch;
  std::map<ActionKind, std::pair<double, int>> compute_seconds;
  // Set when a rank given no batch at its first step took every microbatch to have microbatch 0's rows: the
  // hint a failure of this step then carries.
  std::string assumed_sizes;
};

// Adds the wall time of its scope (the compute of one action, after its receives were waited on) to the
// step's seconds for `kind`.
class PipelineExecutor::Timed {
 public:
  Timed(Run& run, ActionKind kind) : slot_(run.compute_seconds[kind]), t0_(std::chrono::steady_clock::now()) {}
  ~Timed() {
    slot_.first += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    ++slot_.second;
  }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;

 private:
  std::pair<double, int>& slot_;
  std::chrono::steady_clock::time_point t0_;
};

namespace {

// The program without the actions of the backward and of gradient communication (Eval): what is left keeps
// its order, so the forward's sends and receives still pair up across ranks as in the full program.
RankProgram ForwardOnly(const RankProgram& program) {
  RankProgram out;
  for (const auto& slot : program) {
    const ActionKind k = slot->kind;
    if (k == ActionKind::kFullBackward || k == ActionKind::kBackwardInput || k == ActionKind::kBackwardWeight ||
        k == ActionKind::kSendB || k == ActionKind::kRecvB || k == ActionKind::kReduceGrad) {
      continue;
    }
    out.push_back(slot);
  }
  return out;
}

// Appends the topmost scheduled-sharding states of `module`'s tree (none above them inside it that drives its
// submodules' states, as Replicate over fully_shard'ed blocks does not), in pre-order, each once (a module shared by
// two parents is visited twice).
void AppendTopShardingStates(nn::Module& module, std::vector<nn::ScheduledShardingState*>* out) {
  for (nn::ModuleState* state : module.ComposableStates()) {
    if (auto* sharding = dynamic_cast<nn::ScheduledShardingState*>(state)) {
      if (std::find(out->begin(), out->end(), sharding) == out->end()) out->push_back(sharding);
      if (sharding->DrivesSubmoduleStates()) return;  // the states below are its own to drive
    }
  }
  for (auto& [name, child] : module.NamedChildren()) AppendTopShardingStates(*child, out);
}

bool HasUnshard(const RankProgram& program) {
  return std::any_of(program.begin(), program.end(),
                     [](const auto& slot) { return slot->kind == ActionKind::kUnshard; });
}

}  // namespace

PipelineExecutor::PipelineExecutor(std::vector<PipelineStage*> stages, RankProgram program, int num_microbatches,
                                   ExecutorOptions options)
    : stages_(std::move(stages)),
      program_(WithoutIdle(program)),
      num_microbatches_(num_microbatches),
      options_(std::move(options)),
      caller_wired_(options_.unshard || options_.reshard || options_.reduce_grad) {
  TESSEL_CHECK(!stages_.empty(), "PipelineExecutor: no stages on this rank");
  TESSEL_CHECK(!drives_sharding() || options_.max_active_stages >= 1, "PipelineExecutor: max_active_stages must be ",
               ">= 1, got ", options_.max_active_stages);
  BuildDerivedPrograms();
  std::sort(stages_.begin(), stages_.end(),
            [](const PipelineStage* a, const PipelineStage* b) { return a->stage_index() < b->stage_index(); });
  for (size_t i = 1; i < stages_.size(); ++i) {
    TESSEL_CHECK(stages_[i]->stage_index() != stages_[i - 1]->stage_index(), "PipelineExecutor: stage ",
                 stages_[i]->stage_index(), " given twice");
  }
  for (const auto& slot : program_) {
    const Action& a = *slot;
    const bool local = std::any_of(stages_.begin(), stages_.end(),
                                   [&](const PipelineStage* s) { return s->stage_index() == a.stage; });
    TESSEL_CHECK(local, "PipelineExecutor: action ", ToString(a), " names stage ", a.stage,
                 ", which this rank (", stages_[0]->group().rank(), ") does not hold");
    TESSEL_CHECK(!a.microbatch || (*a.microbatch >= 0 && *a.microbatch < num_microbatches), "PipelineExecutor: "
                 "action ", ToString(a), " is outside the ", num_microbatches, " microbatches");
  }
  // Every local stage runs every microbatch exactly once forward and once backward (B, or I and W). A
  // program lowered for fewer microbatches than the executor splits the batch into would otherwise train
  // on part of the batch with the full batch's loss weights, and finish without an error.
  for (const PipelineStage* s : stages_) {
    std::vector<int> f(static_cast<size_t>(num_microbatches)), b(f.size()), in(f.size()), w(f.size());
    for (const auto& slot : program_) {
      const Action& a = *slot;
      if (a.stage != s->stage_index() || !a.microbatch) continue;
      const size_t mb = static_cast<size_t>(*a.microbatch);
      if (a.kind == ActionKind::kForward) ++f[mb];
      if (a.kind == ActionKind::kFullBackward) ++b[mb];
      if (a.kind == ActionKind::kBackwardInput) ++in[mb];
      if (a.kind == ActionKind::kBackwardWeight) ++w[mb];
    }
    for (size_t mb = 0; mb < f.size(); ++mb) {
      const bool ok = f[mb] == 1 && ((b[mb] == 1 && in[mb] == 0 && w[mb] == 0) || (b[mb] == 0 && in[mb] == 1 && w[mb] == 1));
      TESSEL_CHECK(ok, "PipelineExecutor: stage ", s->stage_index(), " runs microbatch ", mb, " ", f[mb], "x forward, ",
                   b[mb], "x B, ", in[mb], "x I and ", w[mb], "x W in this rank's program, but every one of the ",
                   num_microbatches, " microbatches needs one F and one B (or one I and one W). HINT: lower the ",
                   "schedule for the same number of microbatches the executor is given");
    }
  }
}

PipelineStage& PipelineExecutor::StageAt(int stage) const {
  for (PipelineStage* s : stages_) {
    if (s->stage_index() == stage) return *s;
  }
  TESSEL_INTERNAL_ASSERT(false, "no local stage ", stage);
  return *stages_[0];
}

PipelineStage& PipelineExecutor::StageOf(const Action& a) const { return StageAt(a.stage); }

namespace {

comm::WorkPtr TakeRecv(std::map<std::tuple<int, bool, int>, comm::WorkPtr>& recvs, int stage, bool backward, int mb,
                       const char* recv_name) {
  auto it = recvs.find({stage, backward, mb});
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, it != recvs.end(), "no ", stage, recv_name, mb,
                    " was posted before the compute that reads it (a malformed program)");
  comm::WorkPtr w = std::move(it->second);
  recvs.erase(it);
  return w;
}

void CopyInto(const TensorList& dst, const TensorList& src) {
  TESSEL_INTERNAL_ASSERT(dst.size() == src.size(), "local hand-off of ", src.size(), " tensors into ", dst.size());
  NoGradGuard no_grad;
  for (size_t i = 0; i < dst.size(); ++i) CopyInPlace(dst[i], src[i]);
}

// Posts program[begin, end) (all SEND/RECV) as one batch; the receives' keys go to `recv_keys`.
comm::WorkPtr PostBatch(const RankProgram& program, int begin, int end,
                               const std::function<PipelineStage&(const Action&)>& stage_of,
                               std::vector<std::tuple<int, bool, int>>* recv_keys) {
  std::vector<comm::P2POp> ops;
  comm::ProcessGroup* group = nullptr;
  for (int i = begin; i < end; ++i) {
    const Action& a = *program[i];
    PipelineStage& st = stage_of(a);
    group = &st.group();
    const int mb = *a.microbatch;
    using K = comm::P2POp::Kind;
    // One op per tensor of the boundary (per floating tensor for gradients), tagged by its index.
    auto add = [&](K kind, const TensorList& tensors, int peer, bool backward, int from_stage) {
      for (size_t t = 0; t < tensors.size(); ++t) {
        ops.push_back({kind, tensors[t], peer, P2PTag(backward, from_stage, mb, static_cast<int>(t))});
      }
    };
    switch (a.kind) {
      case ActionKind::kSendF:
        add(K::kSend, st.OutputsToSend(mb), st.next_rank(), false, a.stage);
        break;
      case ActionKind::kRecvF:
        add(K::kRecv, st.ActivationRecvBuffers(mb), st.prev_rank(), false, a.stage - 1);
        recv_keys->emplace_back(a.stage, false, mb);
        break;
      case ActionKind::kSendB:
        add(K::kSend, st.InputGradsToSend(mb), st.prev_rank(), true, a.stage);
        break;
      case ActionKind::kRecvB:
        add(K::kRecv, st.GradRecvBuffers(mb), st.next_rank(), true, a.stage + 1);
        recv_keys->emplace_back(a.stage, true, mb);
        break;
      default:
        TESSEL_INTERNAL_ASSERT(false, "not a comm action: ", ToString(a));
    }
  }
  // A boundary of integer tensors only has no gradients to move.
  if (ops.empty()) return comm::CompletedWork();
  return group->BatchP2P(ops);
}

}  // namespace

void PipelineExecutor::RunCompute(const Action& a, Run& run) {
  const int mb = a.microbatch.value_or(-1);
  PipelineStage& s = StageOf(a);
  switch (a.kind) {
    case ActionKind::kForward: {
      if (s.prev_is_local()) {
        CopyInto(s.ActivationRecvBuffers(mb), StageAt(a.stage - 1).OutputsToSend(mb));
      } else if (!s.is_first()) {
        TakeRecv(run.recvs, a.stage, false, mb, "RECV_F")->Wait();
      }
      const int64_t before = memory::Stats(CurrentDevice())[memory::Ledger::kActivations].live;
      if (options_.before_forward) options_.before_forward(a.stage, mb);
      Timed timed(run, a.kind);
      s.Forward(mb, s.is_first() ? run.inputs.at(mb) : Tensor(),
                s.is_last() && !run.targets.empty() ? run.targets.at(mb) : Tensor());
      const size_t index = std::find(stages_.begin(), stages_.end(), &s) - stages_.begin();
      run.peak_in_flight[index] = std::max(run.peak_in_flight[index], s.num_in_flight());
      if (mb == 0) {
        run.bytes_per_microbatch[index] = memory::Stats(CurrentDevice())[memory::Ledger::kActivations].live - before;
      }
      return;
    }
    case ActionKind::kFullBackward:
    case ActionKind::kBackwardInput:
      if (s.next_is_local()) {
        CopyInto(s.GradRecvBuffers(mb), StageAt(a.stage + 1).InputGradsToSend(mb));
      } else if (!s.is_last()) {
        TakeRecv(run.recvs, a.stage, true, mb, "RECV_B")->Wait();
      }
      {
        Timed timed(run, a.kind);
        if (a.kind == ActionKind::kFullBackward) {
          s.BackwardFull(mb);
        } else {
          s.BackwardInput(mb);
        }
      }
      return;
    case ActionKind::kBackwardWeight: {
      Timed timed(run, a.kind);
      s.BackwardWeight(mb);
      return;
    }
    case ActionKind::kUnshard:
      if (options_.unshard) options_.unshard(a.stage);
      return;
    case ActionKind::kReshard:
      if (options_.reshard) options_.reshard(a.stage);
      return;
    case ActionKind::kReduceGrad:
      if (options_.reduce_grad && finalize_gradients_) options_.reduce_grad(a.stage);
      return;
    default:
      TESSEL_INTERNAL_ASSERT(false, "comm action ", ToString(a), " outside a comm batch");
  }
}

// Splits the batch, runs the shape handshake once, and resets the stages for a step.
void PipelineExecutor::StartStep(const Tensor& inputs, const Tensor& targets, Run& run) {
  const int rank = stages_[0]->group().rank();
  const Tensor& rows_from = inputs.defined() ? inputs : targets;
  // Inputs and targets are split along dim 0 separately (as torch's): on the last stage each microbatch's targets
  // must be its inputs' rows, in proportion (targets [B * T] beside inputs [B, T] are), else a loss that broadcasts
  // or only reduces pairs outputs with other rows' targets without an error.
  if (stages_.back()->is_last() && inputs.defined() && targets.defined() && inputs.dim() > 0 && targets.dim() > 0 &&
      inputs.size(0) >= num_microbatches_ && targets.size(0) >= num_microbatches_) {
    const std::vector<int64_t> in = MicrobatchSizes(inputs.size(0), num_microbatches_);
    const std::vector<int64_t> tg = MicrobatchSizes(targets.size(0), num_microbatches_);
    for (size_t i = 0; i < in.size(); ++i) {
      TESSEL_CHECK(tg[i] * inputs.size(0) == in[i] * targets.size(0), "pipeline rank ", rank, ": the inputs ",
                   ShapeStr(inputs.sizes()), " split into microbatches of ", ShapeStr(in), " rows and the targets ",
                   ShapeStr(targets.sizes()), " into ", ShapeStr(tg), ": microbatch ", i, "'s targets are not its ",
                   "inputs' rows; give targets whose dim 0 is the inputs' rows (or a multiple splitting alike)");
    }
  }
  if (stages_.front()->is_first()) {
    TESSEL_CHECK(inputs.defined(), "pipeline rank ", rank, " holds stage 0 and needs the inputs");
    run.inputs = SplitMicrobatches(inputs, num_microbatches_);
  }
  if (stages_.back()->is_last() && (targets.defined() || !targets_optional_)) {
    TESSEL_CHECK(targets.defined(), "pipeline rank ", rank, " holds the last stage and needs the targets");
    run.targets = SplitMicrobatches(targets, num_microbatches_);
  }
  for (size_t i = 0; i < stages_.size(); ++i) {
    PipelineStage& s = *stages_[i];
    if (s.shapes_inferred()) continue;
    const PipelineStage* local_prev = i > 0 && s.prev_is_local() ? stages_[i - 1] : nullptr;
    if (options_.before_forward) options_.before_forward(s.stage_index(), 0);
    s.InferShapes(s.is_first() ? run.inputs.at(0) : Tensor(), std::nullopt, local_prev);
  }
  std::vector<int64_t> sizes;
  std::vector<double> weights;
  if (rows_from.defined()) {
    sizes = MicrobatchSizes(rows_from.size(0), num_microbatches_);
    weights = MicrobatchLossWeights(rows_from.size(0), num_microbatches_);
  } else if (!last_sizes_.empty()) {
    // A middle rank called with no batch (torch's step() there): the last step's microbatch sizes.
    sizes = last_sizes_;
  } else {
    // ... and at the first step, microbatch 0's rows from the shape handshake for every microbatch (what
    // torch's stages assume). A batch that does not split evenly then fails the first receive of a
    // smaller microbatch as a p2p mismatch naming both sides; pass the batch on such ranks.
    sizes.assign(static_cast<size_t>(num_microbatches_), stages_.front()->input_shape().at(0));
    run.assumed_sizes = Str(" (this rank got no batch at its first step, so it took each of the ", num_microbatches_,
                            " microbatches to have ", sizes.front(), " rows, as microbatch 0 of the shape handshake; ",
                            "a batch that does not split evenly needs step(x) or step(target=...) with the batch on "
                            "every rank)");
  }
  if (weights.empty()) weights.assign(sizes.size(), 1.0 / static_cast<double>(sizes.size()));  // unused off the last stage
  if (options_.loss_denominator && stages_.back()->is_last()) {
    std::vector<int64_t> counts;
    for (const Tensor& t : run.targets) counts.push_back(options_.loss_denominator(t));
    weights = MicrobatchLossWeightsFromCounts(counts, weights);
  }
  const std::vector<double> grad_weights =
      options_.scale_grads ? std::vector<double>{} : std::vector<double>(sizes.size(), 1.0);
  for (PipelineStage* s : stages_) s->PrepareStep(sizes, weights, grad_weights);
  last_sizes_ = sizes;
  run.peak_in_flight.assign(stages_.size(), 0);
  run.bytes_per_microbatch.assign(stages_.size(), 0);
}

void PipelineExecutor::AdoptStageSharding() {
  if (!drives_sharding()) return;
  std::map<int, std::vector<nn::ScheduledShardingState*>> found;
  for (PipelineStage* s : stages_) {
    std::vector<nn::ScheduledShardingState*> states;
    AppendTopShardingStates(s->module(), &states);
    if (!states.empty()) found[s->stage_index()] = std::move(states);
  }
  // Held for this step, every state (a no-op for one still held; one applied after an earlier step is driven from
  // this one, as PyTorch's stage checks for an FSDPModule at each backward).
  for (const auto& [stage, states] : found) {
    for (nn::ScheduledShardingState* state : states) state->HoldForSchedule();
  }
  if (found == *stage_sharding_) return;  // as at the last step (none: nothing to drive)
  *stage_sharding_ = std::move(found);
  if (!options_.unshard) {
    auto each = [states = stage_sharding_](void (nn::ScheduledShardingState::*action)()) {
      return [states, action](int stage) {
        auto it = states->find(stage);
        if (it == states->end()) return;
        for (nn::ScheduledShardingState* state : it->second) (state->*action)();
      };
    };
    options_.unshard = each(&nn::ScheduledShardingState::UnshardForSchedule);
    options_.reshard = each(&nn::ScheduledShardingState::ReshardForSchedule);
    options_.reduce_grad = each(&nn::ScheduledShardingState::ReduceGradForSchedule);
  }
  if (!HasUnshard(program_)) {
    program_ = AddUnshardReshard(program_, options_.max_active_stages);
    BuildDerivedPrograms();
  }
}

void PipelineExecutor::BuildDerivedPrograms() {
  comm_batches_ = CommBatches(program_);
  // Eval's program: the forward's actions, with UNSHARD / RESHARD placed for them alone when the executor drives
  // the sharding (those of the full program, placed for its backward too, would gather stages the forward
  // switches past without computing); a caller's own wiring keeps the program's, placed with its own window.
  eval_program_ = ForwardOnly(program_);
  if (drives_sharding() && HasUnshard(eval_program_)) {
    RankProgram bare;
    for (const auto& slot : eval_program_) {
      if (slot->kind != ActionKind::kUnshard && slot->kind != ActionKind::kReshard) bare.push_back(slot);
    }
    eval_program_ = AddUnshardReshard(bare, options_.max_active_stages);
  }
  eval_batches_ = CommBatches(eval_program_);
}

void PipelineExecutor::ReleaseStageSharding() {
  for (const auto& [stage, states] : *stage_sharding_) {
    for (nn::ScheduledShardingState* state : states) state->ReleaseFromSchedule();
  }
}

StepStats PipelineExecutor::Step(const Tensor& inputs, const Tensor& targets) {
  AdoptStageSharding();
  StepStats stats = RunProgram(program_, comm_batches_, inputs, targets, /*forward_only=*/false);
  if (finalize_gradients_) ReleaseStageSharding();  // accumulating (finalize off): held until a reducing step
  return stats;
}

StepStats PipelineExecutor::Eval(const Tensor& inputs, const Tensor& targets) {
  NoGradGuard no_grad;
  AdoptStageSharding();
  StepStats stats = RunProgram(eval_program_, eval_batches_, inputs, targets, /*forward_only=*/true);
  ReleaseStageSharding();  // gradients a non-finalizing step accumulated stay; the next Step holds again
  return stats;
}

StepStats PipelineExecutor::RunProgram(const RankProgram& program, const std::vector<std::pair<int, int>>& batches,
                                       const Tensor& inputs, const Tensor& targets, bool forward_only) {
  const int rank = stages_[0]->group().rank();
  Run run;
  StartStep(inputs, targets, run);
  const Device device = CurrentDevice();
  memory::ResetPeaks(device);
  StepStats stats;
  stats.activation_bytes_at_start = memory::Stats(device)[memory::Ledger::kActivations].live;

  auto stage_of = [this](const Action& a) -> PipelineStage& { return StageOf(a); };
  size_t next_batch = 0;
  for (int i = 0; i < static_cast<int>(program.size());) {
    const Action& a = *program[i];
    try {
      if (next_batch < batches.size() && batches[next_batch].first == i) {
        const auto [begin, end] = batches[next_batch++];
        std::vector<std::tuple<int, bool, int>> keys;
        comm::WorkPtr w = PostBatch(program, begin, end, stage_of, &keys);
        for (const auto& k : keys) run.recvs[k] = w;
        run.sends.push_back(w);
        i = end;
        continue;
      }
      RunCompute(a, run);
    } catch (const Error& e) {
      TESSEL_FAIL(e.code(), "pipeline rank ", rank, ", action ", ToString(a), ": ", e.what(), run.assumed_sizes);
    }
    ++i;
  }
  try {
    for (const comm::WorkPtr& w : run.sends) w->Wait();
  } catch (const Error& e) {
    TESSEL_FAIL(e.code(), "pipeline rank ", rank, ", waiting for the step's sends: ", e.what(), run.assumed_sizes);
  }
  for (size_t i = 0; i < stages_.size(); ++i) {
    if (forward_only) stages_[i]->EndForwardOnly();
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, stages_[i]->num_in_flight() == 0, "pipeline rank ", rank,
                      ": stage ", stages_[i]->stage_index(), " ended the step with ", stages_[i]->num_in_flight(),
                      " microbatches without backward (the program is incomplete)");
    if (stages_[i]->is_last()) {
      stats.loss = stages_[i]->StepLoss();
      stats.microbatch_losses = stages_[i]->MicrobatchLosses();
    }
  }
  stats.peak_in_flight = run.peak_in_flight;
  stats.activation_bytes_per_microbatch = run.bytes_per_microbatch;
  stats.compute_seconds = run.compute_seconds;
  stats.peak_activation_bytes = memory::Stats(device)[memory::Ledger::kActivations].peak;
  return stats;
}

}  // namespace tessel::pipelining
