// pipelining/stage.cc — PipelineStage: shape handshake, reusable p2p buffers, per-microbatch F/B/I/W.
#include "pipelining/stage.h"

#include <limits>
#include <utility>

#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "core/memory/allocator.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/tensor/dtype.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::pipelining {
namespace {

constexpr int kMaxHeaderDims = 8;
constexpr int kHeaderFieldsPerTensor = 2 + kMaxHeaderDims;  // ndim, dtype, dims
constexpr int kTagMicrobatchBits = 16;

enum class Phase { kIdle, kForwarded, kInputDone, kDone };

std::string ShapesStr(const std::vector<Shape>& shapes) {
  std::string out;
  for (size_t i = 0; i < shapes.size(); ++i) out += (i ? ", " : "") + ShapeStr(shapes[i]);
  return out;
}

std::vector<Shape> SizesOf(const TensorList& tensors) {
  std::vector<Shape> out;
  for (const Tensor& t : tensors) out.push_back(t.sizes());
  return out;
}

}  // namespace

int P2PTag(bool backward, int stage, int mb, int index) {
  TESSEL_CHECK(mb + 1 < (1 << kTagMicrobatchBits), "pipelining: microbatch index ", mb, " too large for a p2p tag");
  TESSEL_INTERNAL_ASSERT(index >= 0 && index < kMaxStageTensors, "p2p tag index ", index);
  const int64_t tag = ((static_cast<int64_t>(stage) * 2 + (backward ? 1 : 0)) * kMaxStageTensors + index)
                          << kTagMicrobatchBits;
  TESSEL_CHECK(tag < (int64_t{1} << 30), "pipelining: stage index ", stage, " too large for a p2p tag");
  return static_cast<int>(tag) + (mb + 1);
}

struct PipelineStage::MicrobatchState {
  Phase phase = Phase::kIdle;
  TensorList inputs;   // received (non-first stages); the floating ones are leaves that require grad
  TensorList outputs;  // with their graph, until the backward (non-last stages)
  Tensor loss;         // last stage: weighted loss, the backward root
  double loss_value = 0.0;      // its value
  double unweighted_loss = 0.0;  // loss_fn's value (NaN with nothing to average over)
  TensorList input_grads;  // one per floating input; undefined where no output depends on it
  WeightGradTask weight_task;       // pending after an I whose roots required grad
  std::function<void()> dw_runner;  // with a dw_builder: what W runs

  // Drops the microbatch's activations and graph (after its backward, or a forward-only step).
  void Release() {
    inputs.clear();
    outputs.clear();
    loss = Tensor();
  }
};

namespace {

// The floating-point members of `tensors`: what carries a gradient across a stage boundary.
TensorList Floating(const TensorList& tensors) {
  TensorList out;
  for (const Tensor& t : tensors) {
    if (IsFloating(t.dtype())) out.push_back(t);
  }
  return out;
}

}  // namespace

PipelineStage::PipelineStage(nn::Module& module, int stage_index, int num_stages, comm::ProcessGroupPtr group,
                             LossFn loss_fn, std::vector<int> stage_to_rank)
    : PipelineStage(module, stage_index, num_stages, std::move(group),
                    loss_fn == nullptr ? MultiOutputLossFn()
                                       : MultiOutputLossFn([loss_fn, stage_index](const TensorList& outputs,
                                                                                  const Tensor& target) {
                                           TESSEL_CHECK(outputs.size() == 1, "pipeline stage ", stage_index,
                                                        ": the loss function takes one output but the stage module "
                                                        "returned ", outputs.size(), " tensors");
                                           return loss_fn(outputs[0], target);
                                         }),
                    std::move(stage_to_rank)) {}

PipelineStage::PipelineStage(nn::Module& module, int stage_index, int num_stages, comm::ProcessGroupPtr group,
                             MultiOutputLossFn loss_fn, std::vector<int> stage_to_rank)
    : module_(module),
      stage_index_(stage_index),
      num_stages_(num_stages),
      group_(std::move(group)),
      loss_fn_(std::move(loss_fn)),
      stage_to_rank_(std::move(stage_to_rank)) {
  TESSEL_CHECK(group_ != nullptr, "PipelineStage: null process group");
  TESSEL_CHECK(num_stages >= 1 && stage_index >= 0 && stage_index < num_stages, "PipelineStage: stage index ",
               stage_index, " out of range for ", num_stages, " stages");
  if (stage_to_rank_.empty()) {
    for (int s = 0; s < num_stages; ++s) stage_to_rank_.push_back(s % group_->size());
  }
  TESSEL_CHECK(static_cast<int>(stage_to_rank_.size()) == num_stages, "PipelineStage: stage_to_rank has ",
               stage_to_rank_.size(), " entries for ", num_stages, " stages");
  TESSEL_CHECK(stage_to_rank_[stage_index] == group_->rank(), "PipelineStage: stage ", stage_index,
               " belongs to pipeline rank ", stage_to_rank_[stage_index], ", not to this rank ", group_->rank());
  TESSEL_CHECK(!is_last() || loss_fn_ != nullptr, "PipelineStage: the last stage (", stage_index,
               ") needs a loss function");
}

PipelineStage::~PipelineStage() = default;

int PipelineStage::prev_rank() const {
  TESSEL_INTERNAL_ASSERT(!is_first(), "prev_rank of the first stage");
  return stage_to_rank_[stage_index_ - 1];
}

int PipelineStage::next_rank() const {
  TESSEL_INTERNAL_ASSERT(!is_last(), "next_rank of the last stage");
  return stage_to_rank_[stage_index_ + 1];
}

std::string PipelineStage::Where(int mb) const {
  return Str("pipeline stage ", stage_index_, " (rank ", group_->rank(), ") microbatch ", mb);
}

// ---- shape handshake ----------------------------------------------------------------------------------

void PipelineStage::SendHeader(const TensorList& outputs) {
  std::vector<int64_t> h(1 + kMaxStageTensors * kHeaderFieldsPerTensor, 0);
  h[0] = static_cast<int64_t>(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& t = outputs[i];
    TESSEL_CHECK(t.dim() <= kMaxHeaderDims, "pipeline stage ", stage_index_, ": output ", i, " of rank ", t.dim(),
                 " exceeds the ", kMaxHeaderDims, " dims a shape header carries");
    int64_t* f = h.data() + 1 + i * kHeaderFieldsPerTensor;
    f[0] = t.dim();
    f[1] = static_cast<int64_t>(t.dtype());
    for (int64_t d = 0; d < t.dim(); ++d) f[2 + d] = t.size(d);
  }
  group_->Send(FromVector<int64_t>(h), next_rank(), P2PTag(false, stage_index_, -1))->Wait();
}

std::vector<Shape> PipelineStage::RecvHeader(std::vector<DType>* dtypes) {
  Tensor h = Zeros({1 + kMaxStageTensors * kHeaderFieldsPerTensor}, DType::kInt64);
  group_->Recv(h, prev_rank(), P2PTag(false, stage_index_ - 1, -1))->Wait();
  const std::vector<int64_t> v = h.ToVector<int64_t>();
  auto corrupt = [&](bool ok) {
    TESSEL_CHECK_CODE(ErrorCode::kDataLoss, ok, "pipeline stage ", stage_index_, ": corrupt shape header from stage ",
                      stage_index_ - 1);
  };
  corrupt(v[0] >= 1 && v[0] <= kMaxStageTensors);
  std::vector<Shape> shapes;
  dtypes->clear();
  for (int64_t i = 0; i < v[0]; ++i) {
    const int64_t* f = v.data() + 1 + i * kHeaderFieldsPerTensor;
    corrupt(f[0] >= 0 && f[0] <= kMaxHeaderDims && f[1] >= 0 && f[1] < kNumDTypes);
    dtypes->push_back(static_cast<DType>(f[1]));
    shapes.emplace_back(f + 2, f + 2 + f[0]);
  }
  return shapes;
}

void PipelineStage::InferShapes(const Tensor& first_input, const std::optional<std::vector<Shape>>& expected_inputs,
                                const PipelineStage* local_prev) {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !inferred_, "pipeline stage ", stage_index_,
                    ": InferShapes called twice");
  NoGradGuard no_grad;
  const std::optional<std::vector<Shape>>& want_inputs = expected_inputs ? expected_inputs : expected_inputs_;
  TensorList xs;
  if (is_first()) {
    TESSEL_CHECK(first_input.defined(), "pipeline stage 0: InferShapes needs microbatch 0 as input");
    TESSEL_CHECK(!expected_inputs_ || expected_inputs_->empty() || expected_inputs_->front() == first_input.sizes(),
                 "pipeline stage 0: microbatch 0 has shape ", ShapeStr(first_input.sizes()),
                 " but the stage was built for input ", ShapeStr(expected_inputs_->front()), " (input_args)");
    xs = {first_input};
  } else {
    if (prev_is_local()) {
      TESSEL_INTERNAL_ASSERT(local_prev != nullptr && local_prev->stage_index() == stage_index_ - 1,
                             "InferShapes: stage ", stage_index_, " needs its local previous stage");
      input_shapes_ = local_prev->output_shapes();
      input_dtypes_ = local_prev->output_dtypes_;
    } else {
      input_shapes_ = RecvHeader(&input_dtypes_);
    }
    TESSEL_CHECK(!want_inputs || *want_inputs == input_shapes_, "pipeline shape handshake: stage ",
                 stage_index_ - 1, " outputs ", ShapesStr(input_shapes_), " but stage ", stage_index_,
                 " expects input ", ShapesStr(*want_inputs));
    for (size_t i = 0; i < input_shapes_.size(); ++i) xs.push_back(Zeros(input_shapes_[i], input_dtypes_[i]));
  }
  // The forward runs for its shapes only: the buffers it updates (batch norm's running statistics, a counter
  // of tokens per expert) get their values back afterwards, as torch's stage restores them; stages after the
  // first ran it on zeros.
  nn::StateDict saved_buffers = module_.NamedBuffers();
  for (auto& [name, t] : saved_buffers) t = t.defined() ? Clone(t) : t;
  struct RestoreBuffers {
    nn::Module& module;
    const nn::StateDict& saved;
    ~RestoreBuffers() {
      try {
        const nn::StateDict now = module.NamedBuffers();
        for (const auto& [name, value] : saved) {
          for (const auto& [current_name, current] : now) {
            if (current_name == name && current.defined() && value.defined() && current.sizes() == value.sizes() &&
                current.dtype() == value.dtype()) {
              CopyInto(current, value);
            }
          }
        }
      } catch (...) {  // (a destructor must not throw; the handshake's own error is the one to report)
      }
    }
  } restore{module_, saved_buffers};
  TensorList outs;
  try {
    outs = module_.Call(xs);
  } catch (const Error& e) {
    if (is_first()) throw;
    std::string got;
    for (size_t i = 0; i < xs.size(); ++i) got += Str(i ? ", " : "", ShapeStr(input_shapes_[i]), " ", input_dtypes_[i]);
    TESSEL_FAIL(ErrorCode::kInvalidArgument, "pipeline shape handshake: stage ", stage_index_,
                " cannot take the output of stage ", stage_index_ - 1, " (shape ", got, "): ", e.what());
  }
  TESSEL_CHECK(!outs.empty(), "pipeline stage ", stage_index_, ": its module returned no tensor");
  output_shapes_ = SizesOf(outs);
  output_dtypes_.clear();
  for (const Tensor& t : outs) output_dtypes_.push_back(t.dtype());
  TESSEL_CHECK(!expected_outputs_ || *expected_outputs_ == output_shapes_, "pipeline stage ", stage_index_,
               ": outputs ", ShapesStr(output_shapes_), " for microbatch 0 but was built for output ",
               ShapesStr(*expected_outputs_), " (output_args)");
  if (!is_last()) {
    TESSEL_CHECK(outs.size() <= static_cast<size_t>(kMaxStageTensors), "pipeline stage ", stage_index_,
                 ": its module returned ", outs.size(), " tensors; a stage boundary carries at most ",
                 kMaxStageTensors);
    if (!next_is_local()) SendHeader(outs);
  }
  inferred_ = true;
}

const std::vector<Shape>& PipelineStage::input_shapes() const {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, inferred_ && !is_first(), "pipeline stage ", stage_index_,
                    ": no input shape (", is_first() ? "the first stage reads microbatches" : "run InferShapes first",
                    ")");
  return input_shapes_;
}

const std::vector<Shape>& PipelineStage::output_shapes() const {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, inferred_, "pipeline stage ", stage_index_,
                    ": run InferShapes first");
  return output_shapes_;
}

// ---- per-step state -------------------------------------------------------------------------------------

void PipelineStage::PrepareStep(const std::vector<int64_t>& microbatch_rows, const std::vector<double>& weights,
                                const std::vector<double>& grad_weights) {
  TESSEL_CHECK(microbatch_rows.size() == weights.size() && !microbatch_rows.empty(), "pipeline stage ",
               stage_index_, ": ", microbatch_rows.size(), " microbatch sizes but ", weights.size(), " loss weights");
  TESSEL_CHECK(grad_weights.empty() || grad_weights.size() == weights.size(), "pipeline stage ", stage_index_, ": ",
               microbatch_rows.size(), " microbatch sizes but ", grad_weights.size(), " gradient weights");
  for (size_t mb = 0; mb < states_.size(); ++mb) {
    const Phase p = states_[mb]->phase;
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, p == Phase::kIdle || p == Phase::kDone, Where(mb),
                      ": the last step left it without ", p == Phase::kInputDone ? "W" : "backward",
                      " (a step that raised midway cannot be run again: its peers are still inside it)");
  }
  rows_ = microbatch_rows;
  if (handshake_rows_ == 0) handshake_rows_ = rows_[0];  // the first step's microbatch 0: the handshake's
  weights_ = weights;
  grad_weights_ = grad_weights;
  states_.clear();
  for (size_t mb = 0; mb < rows_.size(); ++mb) states_.push_back(std::make_unique<MicrobatchState>());
}

Shape PipelineStage::ShapeAt(Shape handshake, int mb) const {
  if (!handshake.empty() && handshake[0] == handshake_rows_) handshake[0] = rows_[mb];
  return handshake;
}

PipelineStage::MicrobatchState& PipelineStage::State(int mb, const char* what) {
  TESSEL_CHECK(mb >= 0 && mb < num_microbatches(), "pipeline stage ", stage_index_, ": ", what, " of microbatch ",
               mb, " but this step has ", num_microbatches(), " microbatches");
  return *states_[mb];
}

TensorList PipelineStage::BuffersFor(std::vector<TensorList>& buffers, int mb, const std::vector<Shape>& shapes,
                                     const std::vector<DType>& dtypes) {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, inferred_, Where(mb), ": p2p buffer before InferShapes");
  State(mb, "buffer");
  if (buffers.size() <= static_cast<size_t>(mb)) buffers.resize(mb + 1);
  TensorList& mine = buffers[mb];
  mine.resize(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape want = ShapeAt(shapes[i], mb);
    if (!mine[i].defined() || mine[i].sizes() != want) {
      memory::LedgerScope ledger(memory::Ledger::kCommBuffers);
      mine[i] = Empty(want, dtypes[i]);
    }
  }
  return mine;
}

TensorList PipelineStage::ActivationRecvBuffers(int mb) {
  TESSEL_INTERNAL_ASSERT(!is_first(), "activation buffers of the first stage");
  return BuffersFor(act_buffers_, mb, input_shapes_, input_dtypes_);
}

TensorList PipelineStage::GradRecvBuffers(int mb) {
  TESSEL_INTERNAL_ASSERT(!is_last(), "gradient buffers of the last stage");
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (size_t i = 0; i < output_shapes_.size(); ++i) {
    if (!IsFloating(output_dtypes_[i])) continue;
    shapes.push_back(output_shapes_[i]);
    dtypes.push_back(output_dtypes_[i]);
  }
  return BuffersFor(grad_buffers_, mb, shapes, dtypes);
}

// ---- compute --------------------------------------------------------------------------------------------

void PipelineStage::Forward(int mb, const Tensor& input, const Tensor& target) {
  MicrobatchState& s = State(mb, "F");
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, s.phase == Phase::kIdle, Where(mb), ": forward ran twice");
  TensorList xs{input};
  if (!is_first()) {
    xs.clear();
    for (const Tensor& buffer : ActivationRecvBuffers(mb)) {
      Tensor x = Detach(buffer);
      if (IsFloating(x.dtype())) x.set_requires_grad(true);
      xs.push_back(x);
    }
    s.inputs = xs;
  }
  TESSEL_CHECK(!is_first() || (xs[0].defined() && xs[0].dim() >= 1 && xs[0].size(0) == rows_[mb]), Where(mb),
               ": input has ", xs[0].defined() ? ShapeStr(xs[0].sizes()) : std::string("no tensor"), ", expected ",
               rows_[mb], " rows");
  TensorList outs = module_.Call(xs);
  std::vector<Shape> want = output_shapes();
  if (!is_last()) {
    for (Shape& shape : want) shape = ShapeAt(shape, mb);
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, SizesOf(outs) == want, Where(mb), ": output shape ",
                      ShapesStr(SizesOf(outs)), " differs from the handshake's ", ShapesStr(want));
    for (size_t i = 0; i < outs.size(); ++i) {
      TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, outs[i].dtype() == output_dtypes_[i], Where(mb),
                        ": output ", i, " is ", outs[i].dtype(), " but the handshake's is ", output_dtypes_[i]);
    }
    s.outputs = outs;
  } else {
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, outs.size() == want.size(), Where(mb), ": the module returned ",
                      outs.size(), " tensors but ", want.size(), " at the handshake");
    // Weight 0 (microbatch.h: none of its targets count) backpropagates zeros: its own loss is a 0/0 mean,
    // and NaN · 0 would still be NaN.
    if (weights_[mb] == 0.0) {
      Tensor zero;
      for (const Tensor& out : outs) {
        if (!out.requires_grad()) continue;
        const Tensor term = MulScalar(Sum(out), 0.0);
        zero = zero.defined() ? Add(zero, term) : term;
      }
      s.loss = zero.defined() ? zero : MulScalar(Sum(outs[0]), 0.0);
      s.unweighted_loss = std::numeric_limits<double>::quiet_NaN();
    } else {
      const Tensor raw = loss_fn_(outs, target);
      s.unweighted_loss = raw.item<double>();
      s.loss = MulScalar(raw, grad_weights_.empty() ? weights_[mb] : grad_weights_[mb]);
    }
    s.loss_value = grad_weights_.empty() || weights_[mb] == 0.0 ? s.loss.item<double>()
                                                                 : s.unweighted_loss * weights_[mb];
  }
  s.phase = Phase::kForwarded;
}

TensorList PipelineStage::OutputsToSend(int mb) const {
  TESSEL_INTERNAL_ASSERT(!is_last() && mb >= 0 && mb < num_microbatches(), "OutputsToSend(", mb, ")");
  const MicrobatchState& s = *states_[mb];
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !s.outputs.empty(), Where(mb), ": SEND_F before F");
  TensorList out;
  for (const Tensor& t : s.outputs) out.push_back(Detach(t));
  return out;
}

void PipelineStage::BackwardRoots(MicrobatchState& s, int mb, TensorList* roots, TensorList* grads) {
  if (is_last()) {
    roots->push_back(s.loss);
    grads->push_back(Tensor());
    return;
  }
  const TensorList received = GradRecvBuffers(mb);
  size_t k = 0;
  for (const Tensor& out : s.outputs) {
    if (!IsFloating(out.dtype())) continue;
    const Tensor& grad = received[k++];
    // An output computed without any parameter or input that requires grad (a constant) has no graph to
    // backpropagate through: its gradient is dropped, as torch's stage_backward drops it.
    if (!out.requires_grad()) continue;
    roots->push_back(out);
    grads->push_back(grad);
  }
}

void PipelineStage::BackwardFull(int mb) {
  MicrobatchState& s = State(mb, "B");
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, s.phase == Phase::kForwarded, Where(mb),
                    ": B needs a finished F and no earlier backward");
  WholeBackward(s, mb);
  if (dw_builder_) dw_builder_()();
  s.phase = Phase::kDone;
}

void PipelineStage::WholeBackward(MicrobatchState& s, int mb) {
  if (is_last()) {
    Backward(s.loss);
  } else {
    TensorList roots, grads;
    BackwardRoots(s, mb, &roots, &grads);
    if (!roots.empty()) Backward(roots, grads);
  }
  for (const Tensor& x : Floating(s.inputs)) s.input_grads.push_back(x.grad());
  s.Release();
}

void PipelineStage::BackwardInput(int mb) {
  MicrobatchState& s = State(mb, "I");
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, s.phase == Phase::kForwarded, Where(mb),
                    ": I needs a finished F and no earlier backward");
  if (dw_builder_) {
    WholeBackward(s, mb);
    s.dw_runner = dw_builder_();
    TESSEL_CHECK(s.dw_runner != nullptr, Where(mb), ": dw_builder returned no runner for W");
    s.phase = Phase::kInputDone;
    return;
  }
  const TensorList inputs = Floating(s.inputs);
  TensorList roots, grads;
  BackwardRoots(s, mb, &roots, &grads);
  if (!roots.empty()) {
    SplitBackwardResult r = tessel::BackwardInput(roots, grads, inputs);
    s.input_grads = std::move(r.input_grads);
    s.weight_task = std::move(r.weight_task);
  } else {
    s.input_grads.assign(inputs.size(), Tensor());
  }
  s.Release();
  s.phase = Phase::kInputDone;
}

void PipelineStage::BackwardWeight(int mb) {
  MicrobatchState& s = State(mb, "W");
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, s.phase == Phase::kInputDone, Where(mb),
                    ": W needs the I of the same microbatch first (W before I)");
  if (s.dw_runner) {
    std::function<void()> run = std::move(s.dw_runner);
    s.dw_runner = nullptr;
    run();
  } else if (s.weight_task.pending()) {
    tessel::BackwardWeight(s.weight_task);
  }
  s.phase = Phase::kDone;
}

TensorList PipelineStage::InputGradsToSend(int mb) const {
  TESSEL_INTERNAL_ASSERT(!is_first() && mb >= 0 && mb < num_microbatches(), "InputGradsToSend(", mb, ")");
  const MicrobatchState& s = *states_[mb];
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, s.phase == Phase::kInputDone || s.phase == Phase::kDone,
                    Where(mb), ": SEND_B before B or I");
  TensorList out;
  size_t k = 0;
  for (size_t i = 0; i < input_shapes_.size(); ++i) {
    if (!IsFloating(input_dtypes_[i])) continue;
    const Tensor& g = s.input_grads.at(k++);
    if (g.defined()) {
      out.push_back(g);
      continue;
    }
    out.push_back(Zeros(ShapeAt(input_shapes_[i], mb), input_dtypes_[i]));  // the outputs do not depend on it
  }
  return out;
}

double PipelineStage::StepLoss() const {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, is_last(), "pipeline stage ", stage_index_,
                    ": only the last stage computes the loss");
  double total = 0.0;
  for (const auto& s : states_) total += s->loss_value;
  return total;
}

std::vector<double> PipelineStage::MicrobatchLosses() const {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, is_last(), "pipeline stage ", stage_index_,
                    ": only the last stage computes the loss");
  std::vector<double> out;
  for (const auto& s : states_) out.push_back(s->unweighted_loss);
  return out;
}

void PipelineStage::EndForwardOnly() {
  for (const auto& s : states_) {
    if (s->phase != Phase::kForwarded) continue;
    s->Release();
    s->phase = Phase::kDone;
  }
}

int PipelineStage::num_in_flight() const {
  int n = 0;
  for (const auto& s : states_) n += s->phase == Phase::kForwarded || s->phase == Phase::kInputDone;
  return n;
}

}  // namespace tessel::pipelining
