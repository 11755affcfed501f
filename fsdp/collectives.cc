// fsdp/collectives.cc — copy-in / all-gather / copy-out and reduce-scatter / all-reduce / view-out.
#include "fsdp/collectives.h"

#include <cmath>
#include <functional>

#include "comm/collective.h"
#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/memory/allocator.h"
#include "core/memory/stream.h"
#include "core/ops/elementwise.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::fsdp {

FlatLayout FlatLayout::Of(std::span<FsdpParam* const> params) {
  FlatLayout layout;
  for (const FsdpParam* p : params) {
    layout.offsets.push_back(layout.shard_numel);
    layout.shard_numel += p->padded_shard_numel();
  }
  return layout;
}

namespace {

// One in-place all-gather of `block_numel` elements per rank of `group`: copy_in(input) writes this rank's
// block (a view of the output), then the collective fills the others.
AllGatherResult IssueFlatAllGather(int64_t block_numel, DType dtype, Device device, const comm::ProcessGroupPtr& group,
                                   CommStreams* streams, const std::function<void(const Tensor&)>& copy_in) {
  AllGatherResult r;
  NoGradGuard no_grad;
  memory::LedgerScope ledger(memory::Ledger::kCommBuffers);
  // In place (as FSDP2 does): the input is this rank's block of the output, so the copy-in writes
  // straight into the gathered buffer and no separate input buffer or self-copy exists.
  auto stage = [&] {
    r.output = Empty({group->size() * block_numel}, dtype, device);
    r.input = MakeView(r.output, {block_numel}, {1}, group->rank() * block_numel);
    copy_in(r.input);
  };
  if (streams == nullptr) {
    stage();
    r.work = group->AllGather(r.output, r.input);
    return r;
  }
  r.gathered = streams->IssueAllGather(stage, [&] { return r.work = group->AllGather(r.output, r.input); });
  return r;
}

}  // namespace

AllGatherResult IssueAllGather(std::span<FsdpParam* const> params, const FlatLayout& layout, DType dtype,
                               const comm::ProcessGroupPtr& group, CommStreams* streams) {
  if (group->size() == 1) return AllGatherResult();  // FinishAllGather copies the shards directly
  const Device device = params.empty() ? CurrentDevice() : params[0]->sharded_param().device();
  return IssueFlatAllGather(layout.shard_numel, dtype, device, group, streams, [&](const Tensor& input) {
    for (size_t i = 0; i < params.size(); ++i) params[i]->CopyShardInto(input, layout.offsets[i]);
  });
}

AllGatherResult IssueAllGatherOfPiece(const Tensor& piece, const comm::ProcessGroupPtr& group, CommStreams* streams) {
  AllGatherResult r = IssueFlatAllGather(piece.numel(), piece.dtype(), piece.device(), group, streams,
                                         [&](const Tensor& input) { CopyInto(input, piece); });
  r.source = piece;
  return r;
}

void FinishAllGather(AllGatherResult& result, std::span<FsdpParam* const> params, const FlatLayout& layout,
                     CommStreams* streams, bool defer_release) {
  if (streams != nullptr && result.gathered) {
    if (defer_release) streams->FlushHeldAllGather();  // the previous group's output (PyTorch's order)
    streams->ComputeWaitFor(*result.gathered);
  } else if (result.work) {
    result.work->Wait();
  }
  result.input = Tensor();  // a view of the output: dropping it frees nothing
  for (FsdpParam* p : params) p->AllocateUnsharded();
  if (!result.output.defined()) {
    for (FsdpParam* p : params) p->CopyShardToUnsharded();
    return;
  }
  if (streams != nullptr) {
    // Device copies are enqueued on the thread's current (compute) stream: one thread issues them all.
    for (size_t i = 0; i < params.size(); ++i) params[i]->CopyOutFrom(result.output, layout.offsets[i], layout.shard_numel);
    streams->ReleaseAfterCopyOut(std::move(result.output), defer_release);
    result = AllGatherResult();
    return;
  }
  // Copy-out, one parameter per task: each writes only its own unsharded bytes.
  ParallelFor(0, static_cast<int64_t>(params.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      params[static_cast<size_t>(i)]->CopyOutFrom(result.output, layout.offsets[static_cast<size_t>(i)],
                                                  layout.shard_numel);
    }
  });
  result = AllGatherResult();
}

void DropAllGather(AllGatherResult& result, CommStreams* streams) {
  if (streams != nullptr && result.gathered) {
    if (result.source.defined()) streams->ComputeWaitFor(*result.gathered);  // then the piece may be reused
    result.input = Tensor();
    streams->DropAllGather(std::move(result.output), *result.gathered);
  } else if (result.work) {
    result.work->Wait();
  }
  result = AllGatherResult();
}

int64_t GradFlagNumel(int64_t num_params) { return (num_params + 15) / 16 * 16; }

namespace {

// kAvg on the wire unless a divide factor (pre-divided, then summed) or force_sum (summed, divided after).
comm::ReduceOp WireOp(const ReduceSpec& spec) {
  return spec.divide_factor || spec.force_sum ? comm::ReduceOp::kSum : comm::ReduceOp::kAvg;
}

}  // namespace

ReduceScatterResult IssueReduceScatter(Tensor flat_input, ReduceTargets targets, const ReduceSpec& spec,
                                       CommStreams* streams) {
  NoGradGuard no_grad;
  ReduceScatterResult r;
  r.targets = std::move(targets);
  const int64_t block_numel = r.targets.block_numel;
  const comm::ReduceOp op = WireOp(spec);
  auto reduce = [&]() -> comm::WorkPtr {
    if (spec.divide_factor && !spec.force_sum) MulScalarInPlace(flat_input, 1.0 / *spec.divide_factor);
    if (spec.shard_group->size() == 1) {
      r.output = std::move(flat_input);  // one rank: the input already is this rank's block
      return nullptr;
    }
    {
      memory::LedgerScope ledger(memory::Ledger::kCommBuffers);
      r.output = Empty({block_numel}, flat_input.dtype(), flat_input.device());
    }
    r.input = std::move(flat_input);
    comm::CollectiveLabel label(spec.label);
    return r.work = spec.shard_group->ReduceScatter(r.output, r.input, op);
  };
  if (streams == nullptr) {
    reduce();
  } else {
    r.reduced = streams->IssueReduceScatter(reduce);
  }
  return r;
}

namespace {

// The HSDP all-reduce and the view-out into the sharded .grads.
void PostReduce(ReduceScatterResult& result, const ReduceSpec& spec, bool on_stream,
                std::optional<DeferredGradFlags>* deferred) {
  if (spec.partial_output != nullptr) {  // PyTorch's partial_reduce_output (set_requires_all_reduce)
    Tensor& partial = *spec.partial_output;
    if (!spec.all_reduce) {
      if (partial.defined()) {
        AddInPlace(partial, result.output);
      } else {
        partial = result.output;
        partial.impl()->RetagMemory(memory::Ledger::kGrads);
      }
      return;
    }
    if (partial.defined()) {
      AddInPlace(result.output, partial);
      partial = Tensor();
    }
  }
  if (spec.replicate_group && spec.replicate_group->size() > 1) {
    comm::WorkPtr work = [&] {
      comm::CollectiveLabel label(spec.label);
      return spec.replicate_group->AllReduce(result.output, WireOp(spec));
    }();
    if (on_stream) {
      work->BlockStream(memory::CurrentStream(result.output.device()));
    } else {
      work->Wait();
    }
  }
  const ReduceTargets& t = result.targets;
  if ((spec.hook != nullptr && *spec.hook) || spec.force_sum) {
    // The gradient rows of the block (the flags after them are not the hook's), as PyTorch's
    // foreach_reduce: the hook, then the post-divide.
    const int64_t rows = t.flag_offset >= 0 ? t.flag_offset : result.output.numel();
    const Tensor grads = MakeView(result.output, {rows}, {1}, result.output.storage_offset());
    if (spec.hook != nullptr && *spec.hook) (*spec.hook)(grads);
    if (spec.force_sum) {
      const int64_t ranks = spec.shard_group->size() * (spec.replicate_group ? spec.replicate_group->size() : 1);
      MulScalarInPlace(grads, 1.0 / spec.divide_factor.value_or(static_cast<double>(ranks)));
    }
  }
  std::vector<double> flags;  // [Note: FSDP gradient flags]
  if (t.flag_offset >= 0) {
    const Tensor view = MakeView(result.output, {static_cast<int64_t>(t.params.size())}, {1},
                                 result.output.storage_offset() + t.flag_offset);
    if (on_stream && deferred != nullptr) {
      if (!deferred->has_value()) {
        DeferredGradFlags& d = deferred->emplace();
        d.params = t.params;
        for (const FsdpParam* p : t.params) d.had_grad.push_back(p->sharded_param().grad().defined());
      }
      (*deferred)->flags.push_back(view);  // keeps the output's block alive until resolved
    } else {
      flags = view.ToDoubleVector();
    }
  }
  bool adopted = false;
  std::vector<size_t> updated;
  for (size_t i = 0; i < t.params.size(); ++i) {
    if (!flags.empty() && flags[i] == 0.0) continue;
    adopted = t.params[i]->SetShardedGradFrom(result.output, t.offsets[i]) || adopted;
    updated.push_back(i);
  }
  // The sharded .grads that are views of the output keep its block alive: it now holds gradients.
  if (adopted) result.output.impl()->RetagMemory(memory::Ledger::kGrads);
  // The sharded parameters' post-accumulate-grad hooks, now that their .grad holds this backward's reduced
  // gradient (PyTorch's FSDP2 runs them here: optimizer-in-backward steps each shard as it is ready). The
  // sharded parameter is not in the autograd graph (the unsharded one is), so its AccumulateGrad never runs
  // them. On the stream path the flags are not known yet, so every parameter of the block counts as updated.
  for (size_t i : updated) {
    const Tensor& param = t.params[i]->sharded_param();
    const AutogradMeta* meta = param.impl()->autograd_meta();
    if (meta == nullptr || meta->post_accumulate_grad_hooks.empty() || !param.grad().defined()) continue;
    meta->post_accumulate_grad_hooks.ForEach([&](const PostAccumulateGradHook& hook) {  // (a hook may add one)
      hook(param);
      return true;
    });
  }
}

}  // namespace

EventPtr FinishReduceScatter(ReduceScatterResult& result, const ReduceSpec& spec, CommStreams* streams,
                             std::optional<DeferredGradFlags>* deferred) {
  EventPtr post_reduce;
  if (streams != nullptr && result.reduced) {
    post_reduce = streams->FinishReduceScatter(std::move(result.input), *result.reduced,
                                               [&] { PostReduce(result, spec, /*on_stream=*/true, deferred); });
  } else {
    if (result.work) result.work->Wait();
    result.input = Tensor();
    PostReduce(result, spec, /*on_stream=*/false, nullptr);
  }
  result = ReduceScatterResult();
  return post_reduce;
}

void DropReduceScatter(ReduceScatterResult& result, CommStreams* streams) {
  if (streams != nullptr && result.reduced) {
    streams->ComputeWaitFor(*result.reduced);
  } else if (result.work) {
    result.work->Wait();
  }
  result = ReduceScatterResult();
}

void ResolveGradFlags(DeferredGradFlags& deferred) {
  std::vector<double> flags(deferred.params.size(), 0.0);  // nonzero: some rank had a gradient in some reduction
  for (const Tensor& f : deferred.flags) {
    const std::vector<double> one = f.ToDoubleVector();
    for (size_t i = 0; i < flags.size(); ++i) flags[i] += std::abs(one[i]);
  }
  for (size_t i = 0; i < deferred.params.size(); ++i) {
    if (flags[i] != 0.0 || deferred.had_grad[i]) continue;
    Tensor p = deferred.params[i]->sharded_param();  // a handle: clears the parameter's own .grad
    p.set_grad(Tensor());
  }
  deferred = DeferredGradFlags();
}

}  // namespace tessel::fsdp
