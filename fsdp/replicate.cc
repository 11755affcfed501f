// fsdp/replicate.cc — Replicate's buckets, hooks and reductions, and ZeroOptimizer's step.
#include "fsdp/replicate.h"

#include <unordered_set>
#include <utility>

#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "core/memory/allocator.h"
#include "core/ops/elementwise.h"
#include "core/ops/view.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"
#include "dtensor/layout.h"
#include "fsdp/state.h"

namespace tessel::fsdp {
namespace {

constexpr const char* kKey = "replicate";

struct BucketParam {
  std::string fqn;
  Tensor param;
  int64_t row = 1;           // elements per dim-0 row
  int64_t rows = 1;          // dim-0 size
  int64_t full_offset = 0;   // in the all-reduce buffer (whole parameters, back to back)
  int64_t block_offset = 0;  // in one rank's block of the reduce-scatter / all-gather buffers
  int64_t padded_rows = 0;   // ceil(rows / n)
  Tensor piece;              // ZeRO: leaf view of this rank's rows (empty piece: undefined)
  bool ready = false;
  bool had_grad = false;     // this backward: a local gradient when the bucket was issued
};

struct Bucket {
  std::vector<BucketParam> params;
  int64_t full_numel = 0;   // all-reduce buffer
  int64_t block_numel = 0;  // one rank's block (ZeRO)
  int ready_count = 0;
  bool issued = false;
  comm::WorkPtr work;
  Tensor input, output;  // staging buffers (comm ledger) while issued
};

// A view of `numel` elements of flat `buf` at `offset`, shaped `shape`.
Tensor Slice(const Tensor& buf, int64_t offset, int64_t numel, const Shape& shape) {
  return View(Narrow(buf, 0, offset, numel), std::vector<int64_t>(shape.begin(), shape.end()));
}

Shape RowsShape(const Tensor& p, int64_t rows) {
  Shape s = p.sizes();
  s[0] = rows;
  return s;
}

// The parameters Replicate takes over, each tensor once under its first name (a tied weight is one parameter, as
// DDP's): all of `module`'s except those of submodules under fully_shard, which stay fully_shard's to reduce (torch's
// replicate leaves a fully_shard'ed submodule's parameters alone; a tensor tied inside the submodule is skipped
// under every name).
nn::StateDict ReplicatedParams(nn::Module& module) {
  std::unordered_set<const TensorImpl*> seen;
  for (auto& [fqn, sub] : module.NamedModules()) {
    if (sub == &module || FsdpState::Of(*sub) == nullptr) continue;
    for (auto& [name, p] : sub->NamedParameters()) seen.insert(p.impl());
  }
  nn::StateDict params;
  for (auto& [fqn, p] : module.NamedParameters()) {
    if (seen.insert(p.impl()).second) params.emplace_back(fqn, p);
  }
  return params;
}

}  // namespace

class ReplicateState final : public nn::ScheduledShardingState {
 public:
  ReplicateState(nn::Module* module, comm::ProcessGroupPtr group, ReplicateOptions options);
  void OnGradReady(size_t bucket, size_t index);
  void EndOfBackward();
  // nn::ScheduledShardingState (a pipeline schedule's actions, pipelining/executor.h): the parameters stay whole,
  // so UNSHARD and RESHARD do nothing; backward accumulates locally (torch's no_sync), and REDUCE_GRAD reduces
  // the sum once per bucket as a synced backward's end would (PyTorch's stage syncs DDP on the last backward);
  // released, the sync setting is back.
  void HoldForSchedule() override {
    if (!drivable_) return;
    if (!held_sync_) held_sync_ = sync_;
    sync_ = false;
  }
  void ReleaseFromSchedule() override {
    if (held_sync_) sync_ = *held_sync_;
    held_sync_.reset();
  }
  void UnshardForSchedule() override {}
  void ReshardForSchedule() override {}
  void ReduceGradForSchedule() override;
  // A fully_shard'ed submodule's states are its own to hold and drive (its parameters are not in the buckets).
  bool DrivesSubmoduleStates() const override { return false; }
  // kFailedPrecondition when a bucketed parameter is no longer the module's (fully_shard or parallelize_module
  // applied to a submodule after Replicate on its ancestor swapped it): its gradients would never reach the
  // buckets, and the stale full tensor would stay alive. `only_not_ready`: check just those whose gradient hook
  // did not fire in this backward (a live parameter's hook fired, so it is one of the module's).
  void CheckParametersLive(bool only_not_ready) const;
  void AllGatherParameters();  // ZeRO step: every rank's updated rows into every rank's parameters
  nn::StateDict Pieces() const;
  void SetPieceGradsFromFull();  // stage 1: the pieces' grads are views of the averaged .grad

  nn::Module* module_;
  comm::ProcessGroupPtr group_;
  ReplicateOptions options_;
  std::vector<Bucket> buckets_;
  bool sync_ = true;
  std::optional<bool> held_sync_;  // sync_ before a pipeline schedule held it
  bool drivable_ = true;           // ReplicateModule::SetPipelineDrivable
  std::vector<std::string> unused_;  // UnusedInLastBackward()
  bool checked_at_forward_ = false;  // CheckParametersLive ran at the first forward

 private:
  void Broadcast();
  void AllReduceUsedFlags();
  // An exception escaped the backward pass that queued EndOfBackward: wait for the buckets it issued
  // (every rank issued them) and drop them, and forget which gradients were ready.
  void AbortIteration();
  void Issue(size_t b);
  // Waits for an issued bucket's collective and frees its buffers; with `copy_out` the result reaches .grad.
  void Complete(Bucket& b, bool copy_out);
  // Every bucket unready and unissued: the state a backward starts from.
  void ClearIteration();
  void CopyOut(Bucket& bucket);
  int64_t n() const { return group_->size(); }
  int64_t me() const { return group_->rank(); }

  std::vector<Tensor> frozen_;  // parameters that do not require grad: broadcast only
  size_t next_to_issue_ = 0;
  bool callback_queued_ = false;
  uint64_t callback_pass_ = 0;  // the backward pass EndOfBackward was queued in (BackwardPassId)
};

ReplicateState::ReplicateState(nn::Module* module, comm::ProcessGroupPtr group, ReplicateOptions options)
    : module_(module), group_(std::move(group)), options_(options) {
  const nn::StateDict params = ReplicatedParams(*module);
  TESSEL_CHECK(!params.empty(), "Replicate: ", module->type_name(), " has no parameters",
               module->NamedParameters().empty() ? "" : " outside its fully_shard'ed submodules");
  int64_t bytes = 0;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {  // reverse registration order
    const auto& [fqn, p] = *it;
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !p.is_distributed(), "Replicate: parameter '", fqn,
                      "' is a DTensor; Replicate keeps plain replicated parameters (use fully_shard for DTensors)");
    if (!p.requires_grad()) {
      frozen_.push_back(p);
      continue;
    }
    if (buckets_.empty()) buckets_.emplace_back();
    TESSEL_CHECK(options_.zero_stage == 0 || p.dim() > 0, "Replicate(zero_stage=", options_.zero_stage,
                 "): parameter '", fqn, "' is a scalar; ZeRO shards dim 0");
    const int64_t nbytes = p.numel() * ElementSize(p.dtype());
    // A bucket is one flat buffer of its first parameter's dtype: a parameter of another dtype starts a new
    // one (as DDP buckets per dtype). Mixed, fp32 values were rounded through bf16 by the initial broadcast,
    // on every rank, and their gradients all-reduced in bf16.
    const bool other_dtype = !buckets_.back().params.empty() && buckets_.back().params[0].param.dtype() != p.dtype();
    if ((bytes > 0 && bytes + nbytes > options_.bucket_cap_bytes) || other_dtype) {
      buckets_.emplace_back();
      bytes = 0;
    }
    bytes += nbytes;
    Bucket& b = buckets_.back();
    BucketParam bp{.fqn = fqn, .param = p};
    bp.rows = p.dim() > 0 ? p.size(0) : 1;
    bp.row = bp.rows > 0 ? p.numel() / bp.rows : 0;
    bp.full_offset = b.full_numel;
    bp.padded_rows = (bp.rows + n() - 1) / n();
    bp.block_offset = b.block_numel;
    b.full_numel += p.numel();
    b.block_numel += bp.padded_rows * bp.row;
    if (options_.zero_stage > 0) {
      const dtensor::ChunkPiece piece = dtensor::ChunkPieceOf(bp.rows, n(), me());
      if (piece.size > 0) bp.piece = Detach(Narrow(Detach(p), 0, piece.offset, piece.size)).set_requires_grad(true);
    }
    b.params.push_back(std::move(bp));
  }
  if (options_.init_sync) Broadcast();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (size_t i = 0; i < buckets_[b].params.size(); ++i) {
      RegisterPostAccumulateGradHook(buckets_[b].params[i].param, [this, b, i](const Tensor&) { OnGradReady(b, i); });
    }
  }
  module_->RegisterForwardPreHook([this](nn::Module&, TensorList&) {
    if (checked_at_forward_) return;
    CheckParametersLive(/*only_not_ready=*/false);
    checked_at_forward_ = true;
  });
}

void ReplicateState::CheckParametersLive(bool only_not_ready) const {
  std::vector<const BucketParam*> candidates;
  for (const Bucket& b : buckets_) {
    for (const BucketParam& p : b.params) {
      if (!only_not_ready || !p.ready) candidates.push_back(&p);
    }
  }
  if (candidates.empty()) return;
  std::unordered_set<const TensorImpl*> live;
  for (auto& [fqn, p] : module_->NamedParameters()) live.insert(p.impl());
  for (const BucketParam* p : candidates) {
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, live.count(p->param.impl()) > 0, "Replicate(",
                      module_->type_name(), "): parameter '", p->fqn, "' is no longer the module's: it was ",
                      "replaced after Replicate (fully_shard or parallelize_module applied to a submodule of a ",
                      "replicated module), so its gradients would never be averaged; apply fully_shard to the ",
                      "submodules first, then Replicate the root (it leaves their parameters to fully_shard, as ",
                      "torch's replicate)");
  }
}

void ReplicateState::Broadcast() {
  NoGradGuard no_grad;
  for (const Tensor& p : frozen_) group_->Broadcast(p, 0)->Wait();
  for (Bucket& b : buckets_) {
    Tensor flat;
    {
      memory::LedgerScope comm(memory::Ledger::kCommBuffers);
      flat = Zeros({b.full_numel}, b.params[0].param.dtype());
    }
    for (const BucketParam& p : b.params)
      CopyInto(Slice(flat, p.full_offset, p.param.numel(), p.param.sizes()), p.param);
    group_->Broadcast(flat, 0)->Wait();
    for (const BucketParam& p : b.params)
      CopyInto(p.param, Slice(flat, p.full_offset, p.param.numel(), p.param.sizes()));
  }
}

void ReplicateState::OnGradReady(size_t b, size_t i) {
  if (!sync_) return;
  // The average would overwrite a .grad that carries its own graph (create_graph), leaving that graph
  // describing the local gradient only; PyTorch's DDP does not support double backward either.
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, !CreatingGraph(), "Replicate: backward with create_graph ",
                    "(higher-order gradients) cannot average gradients that carry a graph across ranks; take the ",
                    "inner gradient with Grad(..., create_graph=true) of the inputs, then run the synchronized ",
                    "backward without create_graph");
  // Queued in another pass that never ran it: that pass raised midway, leaving buckets half issued.
  if (callback_queued_ && callback_pass_ != BackwardPassId()) AbortIteration();
  if (!callback_queued_) {
    callback_queued_ = true;
    callback_pass_ = BackwardPassId();
    QueueCallback([this] { EndOfBackward(); });
  }
  BucketParam& p = buckets_[b].params[i];
  if (p.ready) return;
  p.ready = true;
  ++buckets_[b].ready_count;
  while (next_to_issue_ < buckets_.size() &&
         buckets_[next_to_issue_].ready_count == static_cast<int>(buckets_[next_to_issue_].params.size())) {
    Issue(next_to_issue_++);
  }
}

void ReplicateState::Issue(size_t index) {
  if (index >= 2 && buckets_[index - 2].issued) Complete(buckets_[index - 2], /*copy_out=*/true);  // two in flight
  NoGradGuard no_grad;
  Bucket& b = buckets_[index];
  const DType dtype = b.params[0].param.dtype();
  memory::LedgerScope comm(memory::Ledger::kCommBuffers);
  for (BucketParam& p : b.params) p.had_grad = p.param.grad().defined();
  if (options_.zero_stage < 2) {
    b.input = Zeros({b.full_numel}, dtype);
    for (const BucketParam& p : b.params) {
      if (p.had_grad)
        CopyInto(Slice(b.input, p.full_offset, p.param.numel(), p.param.sizes()), p.param.grad());
    }
    b.work = group_->AllReduce(b.input, comm::ReduceOp::kAvg);
  } else {
    b.input = Zeros({n() * b.block_numel}, dtype);
    b.output = Zeros({b.block_numel}, dtype);
    for (BucketParam& p : b.params) {
      const Tensor g = p.param.grad();
      if (!g.defined()) continue;
      for (int64_t k = 0; k < n(); ++k) {
        const dtensor::ChunkPiece piece = dtensor::ChunkPieceOf(p.rows, n(), k);
        if (piece.size == 0) continue;
        CopyInto(Slice(b.input, k * b.block_numel + p.block_offset, piece.size * p.row, RowsShape(g, piece.size)),
                 Narrow(g, 0, piece.offset, piece.size));
      }
      p.param.set_grad(Tensor());  // the full gradient is freed: only the rank's rows stay (ZeRO-2)
    }
    b.work = group_->ReduceScatter(b.output, b.input, comm::ReduceOp::kAvg);
  }
  b.issued = true;
}

void ReplicateState::Complete(Bucket& b, bool copy_out) {
  b.work->Wait();
  if (copy_out) CopyOut(b);
  b.work = nullptr;
  b.input = Tensor();
  b.output = Tensor();
  b.issued = false;
}

void ReplicateState::ClearIteration() {
  for (Bucket& b : buckets_) {
    b.ready_count = 0;
    for (BucketParam& p : b.params) p.ready = false;
  }
  next_to_issue_ = 0;
  callback_queued_ = false;
}

void ReplicateState::CopyOut(Bucket& b) {
  NoGradGuard no_grad;
  memory::LedgerScope grads(memory::Ledger::kGrads);
  for (BucketParam& p : b.params) {
    if (options_.zero_stage < 2) {
      const Tensor avg = Slice(b.input, p.full_offset, p.param.numel(), p.param.sizes());
      if (p.param.grad().defined()) {
        CopyInto(p.param.grad(), avg);
      } else {
        p.param.set_grad(Clone(avg));
      }
      continue;
    }
    if (!p.piece.defined()) continue;
    const Tensor mine = Slice(b.output, p.block_offset, p.piece.numel(), p.piece.sizes());
    if (p.piece.grad().defined()) {
      AddInPlace(p.piece.grad(), mine);
    } else {
      p.piece.set_grad(Clone(mine));
    }
  }
}

void ReplicateState::AbortIteration() {
  for (Bucket& b : buckets_) {
    if (b.issued) Complete(b, /*copy_out=*/false);
  }
  ClearIteration();
}

void ReplicateState::EndOfBackward() {
  // Parameters without a gradient this backward contribute zeros: every rank issues every bucket.
  CheckParametersLive(/*only_not_ready=*/true);  // before any more collectives: every rank fails alike
  while (next_to_issue_ < buckets_.size()) Issue(next_to_issue_++);
  for (Bucket& b : buckets_) {
    if (b.issued) Complete(b, /*copy_out=*/true);
  }
  unused_.clear();
  for (const Bucket& b : buckets_) {
    for (const BucketParam& p : b.params) {
      if (!p.had_grad) unused_.push_back(p.fqn);
    }
  }
  if (options_.find_unused_parameters) AllReduceUsedFlags();
  ClearIteration();
}

void ReplicateState::ReduceGradForSchedule() {
  // Not driven (SetPipelineDrivable(false)), or sync turned off for this step (torch's no_sync): accumulate only.
  if (!held_sync_ || !*held_sync_) return;
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !InBackward(), "Replicate(", module_->type_name(),
                    "): a pipeline's REDUCE_GRAD inside a backward");
  EndOfBackward();
}

// One flag per bucketed parameter, summed over the ranks after every bucket: a parameter no rank had a
// gradient for had none here either (its .grad was undefined before CopyOut made it the zero average), so
// undefining it again restores it.
void ReplicateState::AllReduceUsedFlags() {
  NoGradGuard no_grad;
  int64_t count = 0;
  for (const Bucket& b : buckets_) count += static_cast<int64_t>(b.params.size());
  Tensor flags;
  {
    memory::LedgerScope comm(memory::Ledger::kCommBuffers);
    flags = Zeros({count}, DType::kFloat32);
  }
  float* f = static_cast<float*>(flags.raw_data());
  int64_t i = 0;
  for (const Bucket& b : buckets_) {
    for (const BucketParam& p : b.params) f[i++] = p.had_grad ? 1.0f : 0.0f;
  }
  group_->AllReduce(flags, comm::ReduceOp::kSum)->Wait();
  i = 0;
  for (Bucket& b : buckets_) {
    for (BucketParam& p : b.params) {
      if (f[i++] == 0.0f) p.param.set_grad(Tensor());
    }
  }
}

nn::StateDict ReplicateState::Pieces() const {
  nn::StateDict out;
  for (const Bucket& b : buckets_) {
    for (const BucketParam& p : b.params) {
      if (p.piece.defined()) out.emplace_back(p.fqn, p.piece);
    }
  }
  return out;
}

void ReplicateState::SetPieceGradsFromFull() {
  NoGradGuard no_grad;
  for (Bucket& b : buckets_) {
    for (BucketParam& p : b.params) {
      if (!p.piece.defined() || !p.param.grad().defined()) continue;
      const dtensor::ChunkPiece piece = dtensor::ChunkPieceOf(p.rows, n(), me());
      p.piece.set_grad(Detach(Narrow(p.param.grad(), 0, piece.offset, piece.size)));
    }
  }
}

void ReplicateState::AllGatherParameters() {
  NoGradGuard no_grad;
  for (Bucket& b : buckets_) {
    const DType dtype = b.params[0].param.dtype();
    Tensor input, output;
    {
      memory::LedgerScope comm(memory::Ledger::kCommBuffers);
      output = Zeros({n() * b.block_numel}, dtype);
      input = Narrow(output, 0, me() * b.block_numel, b.block_numel);
    }
    for (const BucketParam& p : b.params) {
      if (p.piece.defined()) CopyInto(Slice(input, p.block_offset, p.piece.numel(), p.piece.sizes()), p.piece);
    }
    group_->AllGather(output, input)->Wait();
    for (const BucketParam& p : b.params) {
      for (int64_t k = 0; k < n(); ++k) {
        const dtensor::ChunkPiece piece = dtensor::ChunkPieceOf(p.rows, n(), k);
        if (piece.size == 0 || k == me()) continue;
        CopyInto(Narrow(p.param, 0, piece.offset, piece.size),
                 Slice(output, k * b.block_numel + p.block_offset, piece.size * p.row, RowsShape(p.param, piece.size)));
      }
    }
  }
}

nn::Module& ReplicateModule::module() const { return *state_->module_; }
const ReplicateOptions& ReplicateModule::options() const { return state_->options_; }
int64_t ReplicateModule::num_buckets() const { return static_cast<int64_t>(state_->buckets_.size()); }
void ReplicateModule::SetRequiresGradientSync(bool sync) const {
  (state_->held_sync_ ? *state_->held_sync_ : state_->sync_) = sync;  // held: the step's and the restored setting
}
void ReplicateModule::SetPipelineDrivable(bool drivable) const { state_->drivable_ = drivable; }
const std::vector<std::string>& ReplicateModule::UnusedInLastBackward() const { return state_->unused_; }

void ReplicateModule::ShadowBackward() const {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !InBackward(), "Replicate: ShadowBackward inside a backward");
  for (Bucket& b : state_->buckets_) {
    for (BucketParam& p : b.params) {  // this rank contributes zeros
      p.param.set_grad(Tensor());
      if (p.piece.defined()) p.piece.set_grad(Tensor());
    }
  }
  state_->EndOfBackward();
  state_->unused_.clear();  // nothing here was "unused": this rank had no input
}

std::vector<std::vector<std::string>> ReplicateModule::BucketFqns() const {
  std::vector<std::vector<std::string>> out;
  for (const Bucket& b : state_->buckets_) {
    out.emplace_back();
    for (const BucketParam& p : b.params) out.back().push_back(p.fqn);
  }
  return out;
}

ReplicateModule Replicate(nn::Module& module, const dtensor::DeviceMesh& mesh, const ReplicateOptions& options) {
  TESSEL_CHECK(mesh.ndim() == 1, "Replicate: expected a 1-D mesh, got ", mesh.ndim(), " axes; pass the dp sub-mesh");
  TESSEL_CHECK(options.zero_stage >= 0 && options.zero_stage <= 2, "Replicate: zero_stage must be 0, 1 or 2, got ",
               options.zero_stage, " (stage 3 is fully_shard)");
  TESSEL_CHECK(options.bucket_cap_bytes >= 1, "Replicate: bucket_cap_bytes must be >= 1, got ",
               options.bucket_cap_bytes);
  TESSEL_CHECK(!options.find_unused_parameters || options.zero_stage < 2, "Replicate: find_unused_parameters ",
               "needs zero_stage 0 or 1 (stage 2 frees the full gradients at the reduce-scatter), got zero_stage ",
               options.zero_stage);
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, module.GetComposableState(kKey) == nullptr,
                    "Replicate: ", module.type_name(), " is already replicated");
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, module.GetComposableState("fully_shard") == nullptr,
                    "Replicate: ", module.type_name(), " is already fully_shard'ed");
  auto state = std::make_unique<ReplicateState>(&module, mesh.axis_group(0), options);
  ReplicateState* raw = state.get();
  module.SetComposableState(kKey, std::move(state));
  return ReplicateModule(raw);
}

std::optional<ReplicateModule> AsReplicateModule(nn::Module& module) {
  auto* state = dynamic_cast<ReplicateState*>(module.GetComposableState(kKey));
  if (state == nullptr) return std::nullopt;
  return ReplicateModule(state);
}

ZeroOptimizer::ZeroOptimizer(ReplicateModule replicated, const Factory& make) : state_(&replicated.state()) {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, state_->options_.zero_stage >= 1,
                    "ZeroOptimizer: the module was replicated with zero_stage 0; pass ReplicateOptions{.zero_stage = 1 "
                    "or 2}, or use a plain optimizer");
  state_->CheckParametersLive(/*only_not_ready=*/false);
  pieces_ = state_->Pieces();
  inner_ = make(pieces_);
  TESSEL_CHECK(inner_ != nullptr, "ZeroOptimizer: the factory returned no optimizer");
}

ZeroOptimizer::~ZeroOptimizer() = default;

void ZeroOptimizer::Step() {
  if (state_->options_.zero_stage == 1) state_->SetPieceGradsFromFull();
  inner_->Step();
  state_->AllGatherParameters();
}

void ZeroOptimizer::ZeroGrad() {
  inner_->ZeroGrad();
  state_->module_->ZeroGrad();
}

}  // namespace tessel::fsdp
