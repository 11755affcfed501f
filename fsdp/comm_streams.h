// fsdp/comm_streams.h — CommStreams: the streams and events that let fully_shard's collectives on a
// CUDA device overlap compute, as PyTorch's FSDP2 does (_fsdp_param_group.py, _fsdp_collectives.py).
// Used only when a root's parameters are CUDA tensors; CPU tensors never create one, so their path is
// untouched. Written against the DeviceBackend interface: the ordering is tested on the CPU with the
// fake backend (comm_streams_test.cc); on a GPU it is compiled and run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
//
// Streams (one set per root): copy-in, all-gather, reduce-scatter; "compute" is the thread's current
// stream of the device (memory::CurrentStream).
//
// Invariant (no record_stream anywhere): a buffer allocated on one stream and read on another is
// released only after the stream that owns its block (the one it was allocated on, whose later
// allocations may reuse it) waits for an event recorded behind its last reader:
//   all-gather output   allocated and filled on copy-in; gathered on all-gather; copied out on compute.
//                       Released after the copy-in and all-gather streams wait for the copy-out event;
//                       in forward the release is deferred to the next group's wait-for-unshard (or the
//                       end of forward) so the next copy-in need not wait for this copy-out.
//   reduce-scatter in   allocated and filled (gradient copy-in) on compute; reduced on reduce-scatter.
//                       Released at the next reduce (or end of backward) after compute waits for the
//                       reduce-scatter event.
// and a consumer stream waits for the producer's event before its first use:
//   root pre-forward    copy-in and all-gather streams wait for compute (the optimizer wrote the shards)
//   unshard             all-gather waits for the copy-in event; the collective blocks the all-gather
//                       stream (comm::Work::BlockStream); the all-gather event is recorded behind it
//   wait-for-unshard    compute waits for the all-gather event before the copy-out
//   reduce              reduce-scatter waits for compute (gradients folded there); post-reduce work
//                       (HSDP all-reduce, view-out into .grad) runs on reduce-scatter; end of backward:
//                       compute waits for the post-reduce event before the optimizer reads .grad.
//
// Example (what ParamGroup does for one group):
//   CommStreams s(Device::Cuda(0));
//   s.AllGatherStreamsWaitForCompute();                              // root pre-forward
//   EventPtr gathered = s.IssueAllGather(copy_in, collective);       // unshard
//   s.ComputeWaitFor(*gathered);  copy_out();                        // wait-for-unshard
//   s.ReleaseAfterCopyOut(std::move(output), /*defer=*/true);
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "comm/work.h"
#include "core/memory/stream.h"
#include "core/tensor/tensor.h"

namespace tessel::fsdp {

using EventPtr = std::shared_ptr<memory::Event>;

class CommStreams {
 public:
  // REQUIRES: device.is_cuda() and a device backend installed (else the Stream constructor's error).
  explicit CommStreams(Device device);
  CommStreams(const CommStreams&) = delete;
  CommStreams& operator=(const CommStreams&) = delete;

  Device device() const { return device_; }
  memory::StreamHandle compute() const { return memory::CurrentStream(device_); }
  const memory::Stream& copy_in_stream() const { return copy_in_; }
  const memory::Stream& all_gather_stream() const { return all_gather_; }
  const memory::Stream& reduce_scatter_stream() const { return reduce_scatter_; }

  // A new event recorded now on `stream`.
  EventPtr RecordOn(memory::StreamHandle stream) const;
  // `stream` waits (on the device) for `event`.
  void StreamWaitFor(memory::StreamHandle stream, const memory::Event& event) const;
  void ComputeWaitFor(const memory::Event& event) const { StreamWaitFor(compute(), event); }

  // Root pre-forward: the copy-in and all-gather streams wait for the work queued so far on compute.
  void AllGatherStreamsWaitForCompute() const;

  // Unshard: runs `copy_in` with the copy-in stream current (the all-gather output is allocated and
  // filled there), makes the all-gather stream wait for it, runs `collective` with the all-gather
  // stream current and makes that stream wait for the returned Work (none: the collective itself was
  // stream-ordered there). Returns the all-gather event, recorded behind it.
  EventPtr IssueAllGather(const std::function<void()>& copy_in, const std::function<comm::WorkPtr()>& collective);
  // Wait-for-unshard, after the copy-out on compute: releases `output` (allocated on the copy-in
  // stream) behind a copy-out event recorded now. defer: held until the next call or
  // FlushHeldAllGather (forward; PyTorch's AllGatherState), else released before returning. Either
  // way a previously held output is released first.
  void ReleaseAfterCopyOut(Tensor output, bool defer);
  // Releases the held all-gather output, if any (end of forward / backward).
  void FlushHeldAllGather();
  bool holds_all_gather_output() const { return held_all_gather_.has_value(); }
  // An all-gather nobody copied out (a dropped prefetch): released after both all-gather streams
  // wait for its all-gather event.
  void DropAllGather(Tensor output, const memory::Event& gathered) const;

  // Reduce: the reduce-scatter stream waits for compute (the gradients were folded into the input
  // there), runs `collective` with it current and waits for the returned Work. Returns the
  // reduce-scatter event.
  EventPtr IssueReduceScatter(const std::function<comm::WorkPtr()>& collective);
  // Finish of a reduce: compute waits for `reduced` and then `input` (allocated on compute) is
  // released; `post_reduce` (HSDP all-reduce, view-out) runs with the reduce-scatter stream current.
  // Returns the post-reduce event: compute waits for it at the end of backward.
  EventPtr FinishReduceScatter(Tensor input, const memory::Event& reduced, const std::function<void()>& post_reduce);

  // Runs `fn` with `stream` current and makes `stream` wait for the Work it returns (if any).
  static void RunCollectiveOn(const memory::Stream& stream, const std::function<comm::WorkPtr()>& fn);

 private:
  struct Held {
    Tensor buffer;
    EventPtr event;
  };
  void ReleaseHeld(Held held) const;

  Device device_;
  memory::Stream copy_in_;
  memory::Stream all_gather_;
  memory::Stream reduce_scatter_;
  std::optional<Held> held_all_gather_;
};

}  // namespace tessel::fsdp
