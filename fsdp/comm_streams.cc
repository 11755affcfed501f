// fsdp/comm_streams.cc — CommStreams: FSDP2's stream/event protocol over the DeviceBackend interface.
#include "fsdp/comm_streams.h"

#include <utility>

#include "core/base/error.h"

namespace tessel::fsdp {

CommStreams::CommStreams(Device device)
    : device_(device), copy_in_(device), all_gather_(device), reduce_scatter_(device) {}

EventPtr CommStreams::RecordOn(memory::StreamHandle stream) const {
  auto event = std::make_shared<memory::Event>(device_);
  event->Record(stream);
  return event;
}

void CommStreams::StreamWaitFor(memory::StreamHandle stream, const memory::Event& event) const {
  event.Block(stream);
}

void CommStreams::AllGatherStreamsWaitForCompute() const {
  const EventPtr compute_done = RecordOn(compute());
  StreamWaitFor(copy_in_.handle(), *compute_done);
  StreamWaitFor(all_gather_.handle(), *compute_done);
}

void CommStreams::RunCollectiveOn(const memory::Stream& stream, const std::function<comm::WorkPtr()>& fn) {
  memory::StreamGuard guard(stream);
  comm::WorkPtr work = fn();
  if (work) work->BlockStream(stream.handle());
}

EventPtr CommStreams::IssueAllGather(const std::function<void()>& copy_in,
                                     const std::function<comm::WorkPtr()>& collective) {
  {
    memory::StreamGuard guard(copy_in_);
    copy_in();
  }
  const EventPtr copied_in = RecordOn(copy_in_.handle());
  StreamWaitFor(all_gather_.handle(), *copied_in);
  RunCollectiveOn(all_gather_, collective);
  return RecordOn(all_gather_.handle());
}

void CommStreams::ReleaseHeld(Held held) const {
  // The output's block belongs to the copy-in stream's pool: once that stream (and the all-gather
  // stream, which writes the next output) waits for the copy-out, reusing the block is safe.
  StreamWaitFor(copy_in_.handle(), *held.event);
  StreamWaitFor(all_gather_.handle(), *held.event);
  held.buffer = Tensor();
}

void CommStreams::ReleaseAfterCopyOut(Tensor output, bool defer) {
  FlushHeldAllGather();
  Held held{std::move(output), RecordOn(compute())};
  if (defer) {
    held_all_gather_ = std::move(held);
  } else {
    ReleaseHeld(std::move(held));
  }
}

void CommStreams::FlushHeldAllGather() {
  if (!held_all_gather_) return;
  Held held = std::move(*held_all_gather_);
  held_all_gather_.reset();
  ReleaseHeld(std::move(held));
}

void CommStreams::DropAllGather(Tensor output, const memory::Event& gathered) const {
  StreamWaitFor(copy_in_.handle(), gathered);
  StreamWaitFor(all_gather_.handle(), gathered);
  output = Tensor();
}

EventPtr CommStreams::IssueReduceScatter(const std::function<comm::WorkPtr()>& collective) {
  const EventPtr grads_folded = RecordOn(compute());
  StreamWaitFor(reduce_scatter_.handle(), *grads_folded);
  RunCollectiveOn(reduce_scatter_, collective);
  return RecordOn(reduce_scatter_.handle());
}

EventPtr CommStreams::FinishReduceScatter(Tensor input, const memory::Event& reduced,
                                          const std::function<void()>& post_reduce) {
  // The input's block belongs to compute's pool: compute's next allocation may reuse it.
  ComputeWaitFor(reduced);
  input = Tensor();
  {
    memory::StreamGuard guard(reduce_scatter_);
    post_reduce();
  }
  return RecordOn(reduce_scatter_.handle());
}

}  // namespace tessel::fsdp
