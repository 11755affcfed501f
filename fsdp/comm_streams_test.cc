// fsdp/comm_streams_test.cc — CommStreams' ordering through the fake device backend, whose streams run
// their work only when something waits for them: the exact record/wait sequence of a forward and a
// backward (PyTorch FSDP2's order), and the values a consumer reads when the streams are drained in an
// adversarial order (the producer's stream first). The negative controls run the same steps with the
// buffer released without its event and show the fake turning that race into wrong values, so the
// positive tests would catch a missing wait.
//
// The collectives are simulated on the stream they run on (one rank of a world of two): the all-gather
// "sends" this rank's block (copied into `sent`) and "receives" the peer's block; the reduce-scatter
// copies this rank's block out. Real collectives need a GPU (fsdp_cuda tests on the bundle).
#include "fsdp/comm_streams.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/memory/device_backend.h"
#include "core/memory/caching_allocator.h"
#include "core/memory/testing/fake_device_backend.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::fsdp {
namespace {

using memory::EventHandle;
using memory::StreamHandle;

// The fake backend, logging every event record and stream wait with readable names.
class LoggingBackend final : public memory::testing::FakeDeviceBackend {
 public:
  LoggingBackend() : FakeDeviceBackend(1, int64_t{64} << 20) {}
  void RecordEvent(int device, EventHandle event, StreamHandle stream) override {
    if (!event_names.count(event)) event_names[event] = "e" + std::to_string(event_names.size() + 1);
    log.push_back("record " + event_names[event] + " on " + Name(stream));
    FakeDeviceBackend::RecordEvent(device, event, stream);
  }
  void StreamWaitEvent(int device, StreamHandle stream, EventHandle event) override {
    log.push_back("wait " + Name(stream) + " on " + event_names[event]);
    FakeDeviceBackend::StreamWaitEvent(device, stream, event);
  }
  std::string Name(StreamHandle s) { return stream_names.count(s) ? stream_names[s] : "?"; }

  std::vector<std::string> log;
  std::map<StreamHandle, std::string> stream_names;
  std::map<EventHandle, std::string> event_names;
};

LoggingBackend& Fake() {
  static LoggingBackend* fake = [] {
    auto f = std::make_unique<LoggingBackend>();
    LoggingBackend* raw = f.get();
    memory::InstallDeviceBackend(std::move(f));
    return raw;
  }();
  return *fake;
}

// A collective's Work: BlockStream is logged (it must target the stream the collective ran on).
class LoggedWork final : public comm::Work {
 public:
  void Wait() override { Fake().log.push_back("host wait"); }
  bool IsCompleted() override { return true; }
  void BlockStream(void* stream) override { Fake().log.push_back("block " + Fake().Name(stream) + " on work"); }
};

constexpr int64_t kN = 4;  // elements per rank block
const Device kGpu = Device::Cuda(0);

Tensor OnDevice(std::vector<float> values) { return FromVector<float>(values, {int64_t(values.size())}).To(kGpu); }
Tensor Block(const Tensor& flat, int64_t j) { return MakeView(flat, {kN}, {1}, j * kN); }
std::vector<float> Host(const Tensor& t) { return t.To(Device::Cpu()).ToVector<float>(); }
std::vector<float> Iota(float first) { return {first, first + 1, first + 2, first + 3}; }

// One parameter group of the simulated world of two (this is rank 0).
struct Group {
  explicit Group(float base) : shard(OnDevice(Iota(base))), peer(OnDevice(Iota(base + 100))) {}
  Tensor shard, peer;  // this rank's shard; what rank 1 contributes
  Tensor output, sent, unsharded;
  EventPtr gathered;
  std::vector<float> expected() const {
    std::vector<float> v = Iota(Host(shard)[0]);
    for (float x : Iota(Host(shard)[0] + 100)) v.push_back(x);
    return v;
  }
};

class CommStreamsTest : public ::testing::Test {
 protected:
  // A fresh compute stream per test (its own allocator pool, so block reuse does not depend on what
  // earlier tests left behind).
  void SetUp() override {
    Fake();
    compute_ = std::make_unique<memory::Stream>(kGpu);
    compute_guard_ = std::make_unique<memory::StreamGuard>(*compute_);
    streams_ = std::make_unique<CommStreams>(kGpu);
    Fake().log.clear();
    Fake().event_names.clear();
    Fake().stream_names = {{compute_->handle(), "compute"},
                           {streams_->copy_in_stream().handle(), "copy_in"},
                           {streams_->all_gather_stream().handle(), "all_gather"},
                           {streams_->reduce_scatter_stream().handle(), "reduce_scatter"}};
  }
  void Drain() {
    // Producers first: a missing wait lets a later producer overwrite what a consumer reads.
    streams_->copy_in_stream().Synchronize();
    streams_->all_gather_stream().Synchronize();
    streams_->reduce_scatter_stream().Synchronize();
    compute_->Synchronize();
  }

  void Unshard(Group& g) {
    g.gathered = streams_->IssueAllGather(
        [&] {
          g.output = Empty({2 * kN}, DType::kFloat32, kGpu);  // on the copy-in stream
          CopyInto(Block(g.output, 0), g.shard);
        },
        [&] {
          g.sent = Empty({kN}, DType::kFloat32, kGpu);
          CopyInto(g.sent, Block(g.output, 0));
          CopyInto(Block(g.output, 1), g.peer);
          return std::make_shared<LoggedWork>();
        });
  }
  // Wait-for-unshard in forward: flush the held output, compute waits, copy-out, hold this output.
  void WaitForUnshard(Group& g, bool defer) {
    if (defer) streams_->FlushHeldAllGather();
    streams_->ComputeWaitFor(*g.gathered);
    g.unsharded = Empty({2 * kN}, DType::kFloat32, kGpu);
    CopyInto(g.unsharded, g.output);
    streams_->ReleaseAfterCopyOut(std::move(g.output), defer);
    g.output = Tensor();
  }

  std::unique_ptr<memory::Stream> compute_;
  std::unique_ptr<memory::StreamGuard> compute_guard_;
  std::unique_ptr<CommStreams> streams_;
};

TEST_F(CommStreamsTest, ForwardRecordsAndWaitsInFsdp2Order) {
  Group a(1), b(11);
  streams_->AllGatherStreamsWaitForCompute();
  Unshard(a);
  WaitForUnshard(a, /*defer=*/true);
  Unshard(b);  // prefetch: issued before a's output is released
  WaitForUnshard(b, /*defer=*/true);
  streams_->FlushHeldAllGather();  // end of forward
  const std::vector<std::string> expected = {
      "record e1 on compute",   "wait copy_in on e1",        "wait all_gather on e1",  // root pre-forward
      "record e2 on copy_in",   "wait all_gather on e2",     "block all_gather on work",
      "record e3 on all_gather",                                                        // a: unshard
      "wait compute on e3",     "record e4 on compute",                                 // a: copy-out
      "record e5 on copy_in",   "wait all_gather on e5",     "block all_gather on work",
      "record e6 on all_gather",                                                        // b: unshard
      "wait copy_in on e4",     "wait all_gather on e4",                                // a's output released
      "wait compute on e6",     "record e7 on compute",                                 // b: copy-out
      "wait copy_in on e7",     "wait all_gather on e7",                                // end of forward
  };
  EXPECT_EQ(Fake().log, expected);
  Drain();
  EXPECT_EQ(Host(a.unsharded), a.expected());
  EXPECT_EQ(Host(b.unsharded), b.expected());
}

TEST_F(CommStreamsTest, HeldAllGatherOutputStaysAllocatedUntilTheNextGroupReleasesIt) {
  Group a(1), b(11);
  Unshard(a);
  const int64_t with_output = memory::DeviceCacheStats(0).allocated_bytes;
  WaitForUnshard(a, /*defer=*/true);
  EXPECT_TRUE(streams_->holds_all_gather_output());
  const int64_t unsharded_bytes = memory::CachingAllocator::kRound;  // a.unsharded (32 B rounded up)
  EXPECT_EQ(memory::DeviceCacheStats(0).allocated_bytes, with_output + unsharded_bytes);
  streams_->FlushHeldAllGather();
  EXPECT_FALSE(streams_->holds_all_gather_output());
  EXPECT_EQ(memory::DeviceCacheStats(0).allocated_bytes, with_output + unsharded_bytes - memory::CachingAllocator::kRound);
  Unshard(b);
  WaitForUnshard(b, /*defer=*/false);  // backward: released at once, nothing held
  EXPECT_FALSE(streams_->holds_all_gather_output());
  Drain();
}

// Three groups: c's all-gather output reuses a's block. Draining the copy-in stream first would run
// c's copy-in before a's copy-out without the copy-out event.
TEST_F(CommStreamsTest, ReusedAllGatherBlockIsWrittenOnlyAfterTheCopyOutReadIt) {
  Group a(1), b(11), c(21);
  streams_->AllGatherStreamsWaitForCompute();
  Unshard(a);
  const void* a_block = a.output.raw_data();
  WaitForUnshard(a, true);
  Unshard(b);
  WaitForUnshard(b, true);
  Unshard(c);
  EXPECT_EQ(c.output.raw_data(), a_block);
  WaitForUnshard(c, true);
  streams_->FlushHeldAllGather();
  Drain();
  EXPECT_EQ(Host(a.unsharded), a.expected());
  EXPECT_EQ(Host(b.unsharded), b.expected());
  EXPECT_EQ(Host(c.unsharded), c.expected());
  EXPECT_EQ(Host(a.sent), Iota(1));
  EXPECT_EQ(Host(c.sent), Iota(21));
}

TEST_F(CommStreamsTest, NegativeControlReleasingWithoutTheEventLetsTheNextCopyInOverwrite) {
  Group a(1), c(21);
  Unshard(a);
  const void* a_block = a.output.raw_data();
  streams_->ComputeWaitFor(*a.gathered);
  a.unsharded = Empty({2 * kN}, DType::kFloat32, kGpu);
  CopyInto(a.unsharded, a.output);
  a.output = Tensor();  // the bug the protocol prevents: no copy-out event, no wait
  Unshard(c);
  ASSERT_EQ(c.output.raw_data(), a_block);
  Drain();
  // The copy-in and all-gather streams ran c's copy-in and collective over a's buffer before a's
  // copy-out read it: a's unsharded parameter holds c's values.
  EXPECT_EQ(Host(a.unsharded), c.expected());
  c.output = Tensor();
}

TEST_F(CommStreamsTest, ComputeReadsTheGatheredValuesOnlyAfterTheAllGatherEvent) {
  Group a(1);
  Unshard(a);
  a.unsharded = Empty({2 * kN}, DType::kFloat32, kGpu);
  // Without ComputeWaitFor the copy-out would run on compute before the copy-in and the collective.
  streams_->ComputeWaitFor(*a.gathered);
  CopyInto(a.unsharded, a.output);
  compute_->Synchronize();  // compute alone: its wait pulls the other streams along
  EXPECT_EQ(Host(a.unsharded), a.expected());
  streams_->ReleaseAfterCopyOut(std::move(a.output), false);
}

TEST_F(CommStreamsTest, DroppedPrefetchIsReleasedAfterBothAllGatherStreamsWaitForIt) {
  Group a(1);
  Unshard(a);
  Fake().log.clear();
  streams_->DropAllGather(std::move(a.output), *a.gathered);
  EXPECT_EQ(Fake().log, (std::vector<std::string>{"wait copy_in on e2", "wait all_gather on e2"}));
  Drain();
}

// Backward: x's reduce-scatter input is freed at y's post-backward; y's input reuses its block.
struct Reduce {
  Tensor grad;  // the unsharded gradient [2 * kN] on compute
  Tensor input, output, sharded_grad;
  EventPtr reduced, post_reduce;
};

void Fold(Reduce& r) {
  r.input = Empty({2 * kN}, DType::kFloat32, kGpu);  // on compute
  CopyInto(r.input, r.grad);
}

void IssueReduce(CommStreams& s, Reduce& r) {
  r.reduced = s.IssueReduceScatter([&] {
    r.output = Empty({kN}, DType::kFloat32, kGpu);  // on the reduce-scatter stream
    CopyInto(r.output, Block(r.input, 0));
    return std::make_shared<LoggedWork>();
  });
}

void FinishReduce(CommStreams& s, Reduce& r) {
  r.post_reduce = s.FinishReduceScatter(std::move(r.input), *r.reduced, [&] {
    r.sharded_grad = Empty({kN}, DType::kFloat32, kGpu);
    CopyInto(r.sharded_grad, r.output);
  });
  r.input = Tensor();
}

TEST_F(CommStreamsTest, BackwardReduceScatterOrderAndInputReuseAfterTheEvent) {
  Reduce x{OnDevice({1, 2, 3, 4, 5, 6, 7, 8})}, y{OnDevice({9, 10, 11, 12, 13, 14, 15, 16})};
  Fold(x);
  const void* x_block = x.input.raw_data();
  IssueReduce(*streams_, x);
  FinishReduce(*streams_, x);  // at y's post-backward
  Fold(y);
  EXPECT_EQ(y.input.raw_data(), x_block);
  IssueReduce(*streams_, y);
  FinishReduce(*streams_, y);  // end of backward
  streams_->ComputeWaitFor(*x.post_reduce);
  streams_->ComputeWaitFor(*y.post_reduce);
  const std::vector<std::string> expected = {
      "record e1 on compute",    "wait reduce_scatter on e1", "block reduce_scatter on work",
      "record e2 on reduce_scatter",                                            // x: reduce-scatter
      "wait compute on e2",      "record e3 on reduce_scatter",                 // x: input freed, view-out
      "record e4 on compute",    "wait reduce_scatter on e4", "block reduce_scatter on work",
      "record e5 on reduce_scatter",                                            // y: reduce-scatter
      "wait compute on e5",      "record e6 on reduce_scatter",                 // y: finish
      "wait compute on e3",      "wait compute on e6",                          // end of backward
  };
  EXPECT_EQ(Fake().log, expected);
  // Compute first: without "wait compute on e2", y's gradient copy-in would overwrite x's input
  // before x's reduce-scatter read it.
  compute_->Synchronize();
  Drain();
  EXPECT_EQ(Host(x.sharded_grad), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(Host(y.sharded_grad), (std::vector<float>{9, 10, 11, 12}));
}

TEST_F(CommStreamsTest, NegativeControlFreeingTheReduceInputWithoutTheEventCorruptsTheGradient) {
  Reduce x{OnDevice({1, 2, 3, 4, 5, 6, 7, 8})}, y{OnDevice({9, 10, 11, 12, 13, 14, 15, 16})};
  Fold(x);
  IssueReduce(*streams_, x);
  x.input = Tensor();  // the bug: no wait on the reduce-scatter event
  Fold(y);
  compute_->Synchronize();
  Drain();
  EXPECT_EQ(Host(x.output), (std::vector<float>{9, 10, 11, 12}));  // y's values, read through x's block
}

}  // namespace
}  // namespace tessel::fsdp
