// fsdp/param_group.cc — ParamGroup: unshard/reshard, the forward/backward hooks' group logic, prefetch,
// gradient reduction and local accumulation.
#include "fsdp/param_group.h"

#include <algorithm>

#include "absl/strings/str_join.h"
#include "comm/collective.h"
#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "core/memory/allocator.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::fsdp {

void CommContext::Log(const std::string& kind, const std::string& fqn) const {
  if (event_log != nullptr) event_log->push_back(kind + " " + (fqn.empty() ? "<root>" : fqn));
}

CommStreams* CommContext::StreamsFor(Device device) {
  if (!device.is_cuda()) return nullptr;
  if (!streams) {
    streams = std::make_unique<CommStreams>(device);
    streams->AllGatherStreamsWaitForCompute();
  }
  TESSEL_CHECK(streams->device() == device, "fully_shard: one root's parameters live on ", streams->device(),
               " and ", device, "; a root moves its parameters on one device");
  return streams.get();
}

CommStreams* ParamGroup::streams() { return ctx_->StreamsFor(raw_params_[0]->sharded_param().device()); }

ParamGroup::ParamGroup(std::vector<std::unique_ptr<FsdpParam>> params, FsdpMeshInfo mesh_info, std::string fqn)
    : params_(std::move(params)), mesh_info_(std::move(mesh_info)), fqn_(std::move(fqn)) {
  TESSEL_INTERNAL_ASSERT(!params_.empty(), "fully_shard: a parameter group needs parameters");
  for (auto& p : params_) raw_params_.push_back(p.get());
  layout_ = FlatLayout::Of(raw_params_);
  if (ReducesAcrossRanks()) flag_numel_ = GradFlagNumel(static_cast<int64_t>(raw_params_.size()));
  SetDTypesFromParams();
  for (FsdpParam* p : raw_params_) p->ToSharded();
}

std::string ParamGroup::CollectiveName() const { return Str("fully_shard '", fqn_.empty() ? "<root>" : fqn_, "'"); }

void ParamGroup::SetDTypesFromParams() {
  const DType param_dtype = raw_params_[0]->param_dtype(), reduce_dtype = raw_params_[0]->reduce_dtype();
  for (const FsdpParam* p : raw_params_) {
    TESSEL_CHECK(p->param_dtype() == param_dtype, "fully_shard: one all-gather needs one dtype, but parameter '",
                 raw_params_[0]->fqn(), "' is gathered as ", DTypeName(param_dtype), " and '", p->fqn(), "' as ",
                 DTypeName(p->param_dtype()), "; wrap them with separate fully_shard calls");
    TESSEL_CHECK(!p->requires_grad() || p->reduce_dtype() == reduce_dtype, "fully_shard: one reduce-scatter needs ",
                 "one dtype, but '", raw_params_[0]->fqn(), "' reduces in ", DTypeName(reduce_dtype), " and '",
                 p->fqn(), "' in ", DTypeName(p->reduce_dtype()));
  }
  param_dtype_ = param_dtype;
  reduce_dtype_ = reduce_dtype;
}

void ParamGroup::ResetShardedParams() {
  CheckParamsChangeable();
  post_forward_piece_ = Tensor();
  for (FsdpParam* p : raw_params_) p->ResetShardedParam();
  SetDTypesFromParams();
}

void ParamGroup::CheckParamsChangeable() const {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition,
                    training_state_ == TrainingState::kIdle && !unsharded_ && !pending_unshard_ && !pending_reduce_,
                    "fully_shard: the parameters of '", fqn_, "' changed (Module.to) during forward or backward, or "
                    "while unsharded or with a reduction in flight; change them between iterations, resharded");
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !accumulated_grads_.defined() && !partial_reduce_output_.defined(),
                    "fully_shard: the parameters of '", fqn_, "' changed (Module.to) while gradients of earlier ",
                    "backwards wait for their reduction (set_requires_gradient_sync(False) or ",
                    "set_requires_all_reduce(False)); run the synced backward first");
}

ParamGroup::~ParamGroup() {
  // Never let a collective write into buffers that are about to be freed; errors were already reported
  // (or will be) on the thread that issued the collective.
  try {
    if (pending_unshard_ && pending_unshard_->work) pending_unshard_->work->Wait();
    if (pending_reduce_ && pending_reduce_->work) pending_reduce_->work->Wait();
  } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): destructor must not throw
  }
}

void ParamGroup::Unshard(bool /*async_op*/) {
  if (unsharded_ || pending_unshard_) return;
  if (post_forward_piece_.defined()) {
    ctx_->Log("unshard_post_forward", fqn_);
    comm::CollectiveLabel label(CollectiveName());
    pending_unshard_ = IssueAllGatherOfPiece(post_forward_piece_, post_forward_group_, streams());
    post_forward_piece_ = Tensor();  // copied into the all-gather buffer
    return;
  }
  // torch's _validate_no_meta_params: a parameter built under tessel.device("meta") holds no values until
  // to_empty (its all-gather would train on zeros).
  std::vector<std::string> on_meta;
  for (const FsdpParam* p : raw_params_) {
    p->CheckStillRegistered();
    if (p->on_meta()) on_meta.push_back(Str("'", p->fqn(), "'"));
  }
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, on_meta.empty(), "FSDP parameters should be materialized from ",
                    "meta device before training, but the following were still on meta device: [",
                    absl::StrJoin(on_meta, ", "), "]\nFor example, call module.to_empty(device) to materialize to ",
                    "device and call module.reset_parameters() on each module to initialize values.");
  ctx_->Log("unshard", fqn_);
  comm::CollectiveLabel label(CollectiveName());
  pending_unshard_ = IssueAllGather(raw_params_, layout_, param_dtype_, mesh_info_.shard_group(), streams());
}

void ParamGroup::WaitForUnshard() {
  if (!pending_unshard_) return;
  // Device tensors in forward: the output is released at the next group's copy-out (PyTorch's
  // AllGatherState), so that group's copy-in does not wait for this copy-out.
  FinishAllGather(*pending_unshard_, raw_params_, layout_, streams(),
                  /*defer_release=*/training_state_ == TrainingState::kForward);
  pending_unshard_.reset();
  for (FsdpParam* p : raw_params_) p->ToUnsharded();
  unsharded_ = true;
}

void ParamGroup::SetPostForwardGroup(comm::ProcessGroupPtr group) {
  if (group != post_forward_group_) post_forward_piece_ = Tensor();
  post_forward_group_ = std::move(group);
}

void ParamGroup::ReshardPostForward() {
  const int64_t w = mesh_info_.shard_size(), r = post_forward_group_->size(), j = post_forward_group_->rank();
  const int64_t blocks = w / r;  // each of the r members keeps `blocks` whole rank blocks
  {
    NoGradGuard no_grad;
    memory::LedgerScope ledger(memory::Ledger::kParams);
    post_forward_piece_ = Empty({blocks * layout_.shard_numel}, param_dtype_, raw_params_[0]->sharded_param().device());
    for (int64_t b = 0; b < blocks; ++b) {
      for (size_t i = 0; i < raw_params_.size(); ++i) {
        raw_params_[i]->CopyUnshardedChunkInto(j * blocks + b, post_forward_piece_,
                                               b * layout_.shard_numel + layout_.offsets[i]);
      }
    }
  }
  ctx_->Log("reshard_post_forward", fqn_);
  ToShardedAndFree();
}

void ParamGroup::ToShardedAndFree() {
  for (FsdpParam* p : raw_params_) {
    p->ToSharded();
    p->FreeUnsharded();
  }
  unsharded_ = false;
}

void ParamGroup::Reshard() {
  post_forward_piece_ = Tensor();
  if (pending_unshard_) {
    DropAllGather(*pending_unshard_, streams());
    pending_unshard_.reset();
  }
  if (!unsharded_) return;
  ctx_->Log("reshard", fqn_);
  ToShardedAndFree();
}

void ParamGroup::PreForward() {
  training_state_ = TrainingState::kForward;
  Unshard(false);
  WaitForUnshard();
}

void ParamGroup::PostForward() {
  if (reshard_after_forward) {
    // The piece is kept only for a backward to use: after a no-grad forward none follows, and a piece
    // held past the optimizer step would gather stale parameters in the next forward.
    if (post_forward_group_ && unsharded_ && !pending_unshard_ && GradModeEnabled()) {
      ReshardPostForward();
    } else {
      Reshard();
    }
  }
  // Only a forward that builds a graph is followed by a backward that prefetches in reverse.
  if (GradModeEnabled()) {
    post_forward_indices_.push_back(ctx_->post_forward_order.size());
    ctx_->post_forward_order.push_back(this);
  }
  training_state_ = TrainingState::kIdle;
}

void ParamGroup::PreBackward(bool implicit_prefetch) {
  if (training_state_ == TrainingState::kPreBackward) return;  // several outputs: once per backward
  training_state_ = TrainingState::kPreBackward;
  if (unshard_in_backward) {
    Unshard(false);
    WaitForUnshard();
  }
  if (implicit_prefetch) BackwardPrefetch();
}

void ParamGroup::BackwardPrefetch() {
  if (post_forward_indices_.empty()) return;
  const size_t index = post_forward_indices_.back();
  post_forward_indices_.pop_back();
  if (index == 0) return;
  // The group whose forward ran just before this one runs its backward right after it.
  ParamGroup* next = ctx_->post_forward_order[index - 1];
  if (next->unshard_in_backward) next->Unshard(/*async_op=*/true);
}

bool ParamGroup::ReducesAcrossRanks() const {
  return mesh_info_.shard_size() > 1 || (mesh_info_.is_hsdp() && mesh_info_.replicate_group()->size() > 1);
}

ReduceSpec ParamGroup::MakeReduceSpec() {
  ReduceSpec spec{.dtype = reduce_dtype_, .divide_factor = gradient_divide_factor,
                  .shard_group = reduce_scatter_group ? reduce_scatter_group : mesh_info_.shard_group(),
                  .replicate_group = nullptr,
                  .force_sum = force_sum_reduction, .hook = &all_reduce_hook, .label = CollectiveName()};
  if (mesh_info_.is_hsdp()) {
    spec.replicate_group = mesh_info_.replicate_group();
    spec.all_reduce = requires_all_reduce;
    spec.partial_output = &partial_reduce_output_;
  }
  return spec;
}

void ParamGroup::AccumulateLocally(const std::vector<Tensor>& grads) {
  if (!accumulated_grads_.defined()) {
    memory::LedgerScope ledger(memory::Ledger::kGrads);
    accumulated_grads_ = Zeros({mesh_info_.shard_size() * reduce_block_numel()}, reduce_dtype_,
                               raw_params_[0]->sharded_param().device());
    accumulated_has_grad_.assign(raw_params_.size(), false);
  }
  for (size_t i = 0; i < raw_params_.size(); ++i) {
    if (!grads[i].defined()) continue;
    raw_params_[i]->FoldGradInto(grads[i], accumulated_grads_, layout_.offsets[i], reduce_block_numel(), true);
    accumulated_has_grad_[i] = true;
  }
}

void ParamGroup::PostBackward() {
  training_state_ = TrainingState::kPostBackward;
  post_backward_pending = false;  // whichever runs it: the backward's node or manual finalization
  ctx_->Log("post_backward", fqn_);
  std::vector<Tensor> grads(raw_params_.size());
  bool any = false;
  for (size_t i = 0; i < raw_params_.size(); ++i) {
    if (raw_params_[i]->requires_grad()) grads[i] = raw_params_[i]->TakeUnshardedGrad();
    any = any || grads[i].defined();
  }
  if (!requires_gradient_sync) {
    if (any) AccumulateLocally(grads);
    if (reshard_after_backward) Reshard();
    return;
  }
  // One reduce-scatter in flight per root: finish the previous group's (it overlapped this group's
  // backward compute) before staging this one, so at most two groups' staging buffers are alive.
  if (ctx_->pending_reduce != nullptr && ctx_->pending_reduce != this) ctx_->pending_reduce->FinishReduce();
  FinishReduce();
  std::vector<bool> has_grad;
  Tensor input = StageReduceInput(std::move(grads), any, &has_grad);
  if (reshard_after_backward) Reshard();
  if (!input.defined()) return;
  ReduceTargets targets{.block_numel = reduce_block_numel()};
  if (flag_numel_ > 0) {
    targets.params = raw_params_;  // flag i is parameter i's (WriteGradFlags)
    targets.offsets = layout_.offsets;
    targets.flag_offset = layout_.shard_numel;
  } else {
    for (size_t i = 0; i < raw_params_.size(); ++i) {
      if (!has_grad[i]) continue;
      targets.params.push_back(raw_params_[i]);
      targets.offsets.push_back(layout_.offsets[i]);
    }
  }
  pending_reduce_ = IssueReduceScatter(std::move(input), std::move(targets), MakeReduceSpec(), streams());
  ctx_->pending_reduce = this;
}

Tensor ParamGroup::StageReduceInput(std::vector<Tensor> grads, bool any, std::vector<bool>* has_grad) {
  Tensor input;
  has_grad->assign(raw_params_.size(), false);
  const bool from_buffer = accumulated_grads_.defined();
  if (from_buffer) {
    input = std::move(accumulated_grads_);
    *has_grad = std::move(accumulated_has_grad_);
    accumulated_grads_ = Tensor();
  } else if (any || (flag_numel_ > 0 && std::any_of(raw_params_.begin(), raw_params_.end(),
                                                      [](const FsdpParam* p) { return p->requires_grad(); }))) {
    // With flags, a rank with no gradient still joins the reduction: another rank may have one
    // ([Note: FSDP gradient flags]); its rows and flags are all zero.
    memory::LedgerScope ledger(memory::Ledger::kCommBuffers);
    const Device device = raw_params_[0]->sharded_param().device();
    const int64_t numel = mesh_info_.shard_size() * reduce_block_numel();
    const bool all = std::all_of(grads.begin(), grads.end(), [](const Tensor& g) { return g.defined(); });
    // Parameters without a gradient must contribute zeros; the others' regions are fully written.
    input = all ? Empty({numel}, reduce_dtype_, device) : Zeros({numel}, reduce_dtype_, device);
  }
  for (size_t i = 0; i < raw_params_.size(); ++i) {
    if (!grads[i].defined()) continue;
    raw_params_[i]->FoldGradInto(grads[i], input, layout_.offsets[i], reduce_block_numel(), from_buffer);
    grads[i] = Tensor();  // each unsharded gradient is free once folded into the flat buffer
    (*has_grad)[i] = true;
  }
  if (input.defined() && flag_numel_ > 0) WriteGradFlags(input, *has_grad);
  return input;
}

void ParamGroup::WriteGradFlags(const Tensor& input, const std::vector<bool>& has_grad) const {
  NoGradGuard no_grad;
  const int64_t n = static_cast<int64_t>(has_grad.size());
  const int64_t block = reduce_block_numel(), base = input.storage_offset() + layout_.shard_numel;
  auto flag = [&](int64_t i) { return i < n && has_grad[i]; };  // the padding flags are 0
  for (int64_t j = 0; j < mesh_info_.shard_size(); ++j) {
    // One fill per run of equal flags (usually one run of ones: every parameter has a gradient).
    for (int64_t i = 0, end = 0; i < flag_numel_; i = end) {
      for (end = i + 1; end < flag_numel_ && flag(end) == flag(i);) ++end;
      FillInPlace(MakeView(input, {end - i}, {1}, base + j * block + i), flag(i) ? 1.0 : 0.0);
    }
  }
}

void ParamGroup::FinishReduce() {
  if (!pending_reduce_) return;
  if (EventPtr e = FinishReduceScatter(*pending_reduce_, MakeReduceSpec(), streams(), &deferred_flags_)) {
    post_reduce_event_ = e;
  }
  pending_reduce_.reset();
  if (ctx_->pending_reduce == this) ctx_->pending_reduce = nullptr;
}

void ParamGroup::AbortIteration() {
  if (pending_reduce_) {
    DropReduceScatter(*pending_reduce_, streams());
    pending_reduce_.reset();
  }
  if (ctx_ != nullptr && ctx_->pending_reduce == this) ctx_->pending_reduce = nullptr;
  if (post_reduce_event_) {
    streams()->ComputeWaitFor(*post_reduce_event_);
    post_reduce_event_.reset();
  }
  if (deferred_flags_) {  // completed reductions: their .grad stays, without the zeros no rank asked for
    ResolveGradFlags(*deferred_flags_);
    deferred_flags_.reset();
  }
  accumulated_grads_ = Tensor();
  accumulated_has_grad_.clear();
  partial_reduce_output_ = Tensor();
  post_backward_pending = false;
  // Gradients autograd accumulated on the unsharded parameters before the exception: the next post-backward
  // would reduce them with its own (the next iteration's gradient doubled), as torch drops them.
  for (FsdpParam* p : raw_params_) p->DropUnshardedGrad();
  Reshard();
  if (ctx_ != nullptr && ctx_->streams) ctx_->streams->FlushHeldAllGather();
  post_forward_indices_.clear();
  training_state_ = TrainingState::kIdle;
}

void ParamGroup::FinalizeBackward() {
  FinishReduce();
  EndBackwardInFlight();
}

void ParamGroup::EndBackwardInFlight() {
  if (post_reduce_event_) {
    // The optimizer reads .grad on the compute stream.
    streams()->ComputeWaitFor(*post_reduce_event_);
    post_reduce_event_.reset();
  }
  if (deferred_flags_) {  // after the wait above: the flags are read on the compute stream
    ResolveGradFlags(*deferred_flags_);
    deferred_flags_.reset();
  }
  if (pending_unshard_ && !unsharded_) {
    // A prefetch for a group that did not run backward: wait and drop it.
    DropAllGather(*pending_unshard_, streams());
    pending_unshard_.reset();
  }
  post_forward_piece_ = Tensor();  // a group that took no part in this backward (its shards are current)
  if (ctx_->streams) ctx_->streams->FlushHeldAllGather();
  post_forward_indices_.clear();
  training_state_ = TrainingState::kIdle;
}

}  // namespace tessel::fsdp
