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
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::pipelining {
namespace {

constexpr int kMaxHeaderDims = 8;
constexpr int kTagMicrobatchBits = 20;

enum class Phase { kIdle, kForwarded, kInputDone, kDone };

}  // namespace

int P2PTag(bool backward, int stage, int mb) {
  TESSEL_CHECK(mb + 1 < (1 << kTagMicrobatchBits), "pipelining: microbatch index ", mb, " too large for a p2p tag");
  return ((stage * 2 + (backward ? 1 : 0)) << kTagMicrobatchBits) + (mb + 1);
}

struct PipelineStage::MicrobatchState {
  Phase phase = Phase::kIdle;
  Tensor input;   // leaf that requires grad (non-first stages)
  Tensor output;  // with its graph, until the backward
  Tensor loss;    // last stage: weighted loss, the backward root
  double loss_value = 0.0;      // its value
  double unweighted_loss = 0.0;  // loss_fn's value (NaN with nothing to average over)
  Tensor input_grad;
  WeightGradTask weight_task;
};

PipelineStage::PipelineStage(nn::Module& module, int stage_index, int num_stages, comm::ProcessGroupPtr group,
                             LossFn loss_fn, std::vector<int> stage_to_rank)
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

void PipelineStage::SendHeader(const Tensor& output) {
  TESSEL_CHECK(output.dim() <= kMaxHeaderDims, "pipeline stage ", stage_index_, ": output of rank ", output.dim(),
               " exceeds the ", kMaxHeaderDims, " dims a shape header carries");
  std::vector<int64_t> h(2 + kMaxHeaderDims, 0);
  h[0] = output.dim();
  h[1] = static_cast<int64_t>(output.dtype());
  for (int64_t d = 0; d < output.dim(); ++d) h[2 + d] = output.size(d);
  group_->Send(FromVector<int64_t>(h), next_rank(), P2PTag(false, stage_index_, -1))->Wait();
}

Shape PipelineStage::RecvHeader(DType* dtype) {
  Tensor h = Zeros({2 + kMaxHeaderDims}, DType::kInt64);
  group_->Recv(h, prev_rank(), P2PTag(false, stage_index_ - 1, -1))->Wait();
  const std::vector<int64_t> v = h.ToVector<int64_t>();
  TESSEL_CHECK_CODE(ErrorCode::kDataLoss, v[0] >= 0 && v[0] <= kMaxHeaderDims && v[1] >= 0 && v[1] < kNumDTypes,
                    "pipeline stage ", stage_index_, ": corrupt shape header from stage ", stage_index_ - 1);
  *dtype = static_cast<DType>(v[1]);
  return Shape(v.begin() + 2, v.begin() + 2 + v[0]);
}

void PipelineStage::InferShapes(const Tensor& first_input, const std::optional<Shape>& expected_input,
                                const PipelineStage* local_prev) {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !inferred_, "pipeline stage ", stage_index_,
                    ": InferShapes called twice");
  NoGradGuard no_grad;
  const std::optional<Shape>& want_input = expected_input ? expected_input : expected_input_;
  Tensor x;
  if (is_first()) {
    TESSEL_CHECK(first_input.defined(), "pipeline stage 0: InferShapes needs microbatch 0 as input");
    TESSEL_CHECK(!expected_input_ || *expected_input_ == first_input.sizes(),
                 "pipeline stage 0: microbatch 0 has shape ", ShapeStr(first_input.sizes()),
                 " but the stage was built for input ", ShapeStr(*expected_input_), " (input_args)");
    x = first_input;
  } else {
    if (prev_is_local()) {
      TESSEL_INTERNAL_ASSERT(local_prev != nullptr && local_prev->stage_index() == stage_index_ - 1,
                             "InferShapes: stage ", stage_index_, " needs its local previous stage");
      input_shape_ = local_prev->output_shape();
      input_dtype_ = local_prev->output_dtype_;
    } else {
      input_shape_ = RecvHeader(&input_dtype_);
    }
    TESSEL_CHECK(!want_input || *want_input == input_shape_, "pipeline shape handshake: stage ",
                 stage_index_ - 1, " outputs ", ShapeStr(input_shape_), " but stage ", stage_index_,
                 " expects input ", ShapeStr(*want_input));
    x = Zeros(input_shape_, input_dtype_);
  }
  Tensor out;
  try {
    out = module_.Call({x}).at(0);
  } catch (const Error& e) {
    if (is_first()) throw;
    TESSEL_FAIL(ErrorCode::kInvalidArgument, "pipeline shape handshake: stage ", stage_index_,
                " cannot take the output of stage ", stage_index_ - 1, " (shape ", ShapeStr(input_shape_), " ",
                input_dtype_, "): ", e.what());
  }
  output_shape_ = out.sizes();
  output_dtype_ = out.dtype();
  TESSEL_CHECK(!expected_output_ || *expected_output_ == output_shape_, "pipeline stage ", stage_index_,
               ": outputs ", ShapeStr(output_shape_), " for microbatch 0 but was built for output ",
               ShapeStr(*expected_output_), " (output_args)");
  TESSEL_CHECK(output_shape_.size() >= 1 && output_shape_[0] == x.size(0), "pipeline stage ", stage_index_,
               ": output ", ShapeStr(output_shape_), " does not keep the batch dim 0 of its input ",
               ShapeStr(x.sizes()));
  if (!is_last() && !next_is_local()) SendHeader(out);
  inferred_ = true;
}

const Shape& PipelineStage::input_shape() const {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, inferred_ && !is_first(), "pipeline stage ", stage_index_,
                    ": no input shape (", is_first() ? "the first stage reads microbatches" : "run InferShapes first",
                    ")");
  return input_shape_;
}

const Shape& PipelineStage::output_shape() const {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, inferred_, "pipeline stage ", stage_index_,
                    ": run InferShapes first");
  return output_shape_;
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
  weights_ = weights;
  grad_weights_ = grad_weights;
  states_.clear();
  for (size_t mb = 0; mb < rows_.size(); ++mb) states_.push_back(std::make_unique<MicrobatchState>());
}

PipelineStage::MicrobatchState& PipelineStage::State(int mb, const char* what) {
  TESSEL_CHECK(mb >= 0 && mb < num_microbatches(), "pipeline stage ", stage_index_, ": ", what, " of microbatch ",
               mb, " but this step has ", num_microbatches(), " microbatches");
  return *states_[mb];
}

Tensor PipelineStage::BufferFor(std::vector<Tensor>& buffers, int mb, const Shape& shape, DType dtype) {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, inferred_, Where(mb), ": p2p buffer before InferShapes");
  State(mb, "buffer");
  Shape want = shape;
  want[0] = rows_[mb];
  if (buffers.size() <= static_cast<size_t>(mb)) buffers.resize(mb + 1);
  if (!buffers[mb].defined() || buffers[mb].sizes() != want) {
    memory::LedgerScope ledger(memory::Ledger::kCommBuffers);
    buffers[mb] = Empty(want, dtype);
  }
  return buffers[mb];
}

Tensor PipelineStage::ActivationRecvBuffer(int mb) {
  TESSEL_INTERNAL_ASSERT(!is_first(), "activation buffer of the first stage");
  return BufferFor(act_buffers_, mb, input_shape_, input_dtype_);
}

Tensor PipelineStage::GradRecvBuffer(int mb) {
  TESSEL_INTERNAL_ASSERT(!is_last(), "gradient buffer of the last stage");
  return BufferFor(grad_buffers_, mb, output_shape_, output_dtype_);
}

// ---- compute --------------------------------------------------------------------------------------------

void PipelineStage::Forward(int mb, const Tensor& input, const Tensor& target) {
  MicrobatchState& s = State(mb, "F");
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, s.phase == Phase::kIdle, Where(mb), ": forward ran twice");
  Tensor x = input;
  if (!is_first()) {
    x = Detach(ActivationRecvBuffer(mb));
    x.set_requires_grad(true);
    s.input = x;
  }
  TESSEL_CHECK(x.defined() && x.size(0) == rows_[mb], Where(mb), ": input has ",
               x.defined() ? ShapeStr(x.sizes()) : std::string("no tensor"), ", expected ", rows_[mb], " rows");
  Tensor out = module_.Call({x}).at(0);
  Shape want = output_shape();
  want[0] = rows_[mb];
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, out.sizes() == want, Where(mb), ": output shape ",
                    ShapeStr(out.sizes()), " differs from the handshake's ", ShapeStr(want));
  if (is_last()) {
    // Weight 0 (microbatch.h: none of its targets count) backpropagates zeros: its own loss is a 0/0 mean,
    // and NaN · 0 would still be NaN.
    if (weights_[mb] == 0.0) {
      s.loss = MulScalar(Sum(out), 0.0);
      s.unweighted_loss = std::numeric_limits<double>::quiet_NaN();
    } else {
      const Tensor raw = loss_fn_(out, target);
      s.unweighted_loss = raw.item<double>();
      s.loss = MulScalar(raw, grad_weights_.empty() ? weights_[mb] : grad_weights_[mb]);
    }
    s.loss_value = grad_weights_.empty() || weights_[mb] == 0.0 ? s.loss.item<double>()
                                                                 : s.unweighted_loss * weights_[mb];
  } else {
    s.output = out;
  }
  s.phase = Phase::kForwarded;
}

Tensor PipelineStage::OutputToSend(int mb) const {
  TESSEL_INTERNAL_ASSERT(!is_last() && mb >= 0 && mb < num_microbatches(), "OutputToSend(", mb, ")");
  const MicrobatchState& s = *states_[mb];
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, s.output.defined(), Where(mb), ": SEND_F before F");
  return Detach(s.output);
}

void PipelineStage::BackwardFull(int mb) {
  MicrobatchState& s = State(mb, "B");
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, s.phase == Phase::kForwarded, Where(mb),
                    ": B needs a finished F and no earlier backward");
  if (is_last()) {
    Backward(s.loss);
  } else {
    Backward({s.output}, {GradRecvBuffer(mb)});
  }
  if (!is_first()) s.input_grad = s.input.grad();
  s.input = s.output = s.loss = Tensor();
  s.phase = Phase::kDone;
}

void PipelineStage::BackwardInput(int mb) {
  MicrobatchState& s = State(mb, "I");
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, s.phase == Phase::kForwarded, Where(mb),
                    ": I needs a finished F and no earlier backward");
  const TensorList inputs = is_first() ? TensorList{} : TensorList{s.input};
  SplitBackwardResult r = is_last() ? tessel::BackwardInput({s.loss}, {Tensor()}, inputs)
                                    : tessel::BackwardInput({s.output}, {GradRecvBuffer(mb)}, inputs);
  if (!is_first()) s.input_grad = r.input_grads.at(0);
  s.weight_task = std::move(r.weight_task);
  s.input = s.output = s.loss = Tensor();
  s.phase = Phase::kInputDone;
}

void PipelineStage::BackwardWeight(int mb) {
  MicrobatchState& s = State(mb, "W");
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, s.phase == Phase::kInputDone, Where(mb),
                    ": W needs the I of the same microbatch first (W before I)");
  tessel::BackwardWeight(s.weight_task);
  s.phase = Phase::kDone;
}

Tensor PipelineStage::InputGradToSend(int mb) const {
  TESSEL_INTERNAL_ASSERT(!is_first() && mb >= 0 && mb < num_microbatches(), "InputGradToSend(", mb, ")");
  const MicrobatchState& s = *states_[mb];
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, s.phase == Phase::kInputDone || s.phase == Phase::kDone,
                    Where(mb), ": SEND_B before B or I");
  if (s.input_grad.defined()) return s.input_grad;
  Shape shape = input_shape_;
  shape[0] = rows_[mb];
  return Zeros(shape, input_dtype_);  // the stage's output does not depend on its input
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
    s->input = s->output = s->loss = Tensor();
    s->phase = Phase::kDone;
  }
}

int PipelineStage::num_in_flight() const {
  int n = 0;
  for (const auto& s : states_) n += s->phase == Phase::kForwarded || s->phase == Phase::kInputDone;
  return n;
}

}  // namespace tessel::pipelining
