// fsdp/collectives_device_test.cc — fsdp/collectives.cc's device path (IssueAllGather / FinishAllGather /
// IssueReduceScatter / FinishReduceScatter with CommStreams) on "device" tensors of the fake device
// backend, rank 0 of a fake two-rank group whose collectives are stream-ordered copies on the caller's
// current stream (what NCCL does after Work::BlockStream): every copy runs on the stream FSDP2 assigns it
// (copy-in on the copy-in stream, the all-gather on the all-gather stream, the copy-out on compute, the
// reduce-scatter on the reduce-scatter stream), each collective's Work blocks the stream it ran on, and
// the unsharded parameter and the sharded gradient hold the right values when the streams are drained
// producers first. The fake group's reduce-scatter returns this rank's block unchanged (a sum with a peer
// contributing zeros).
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/memory/testing/fake_device_backend.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"
#include "dtensor/dtensor.h"
#include "dtensor/dtensor_impl.h"
#include "fsdp/collectives.h"
#include "fsdp/fsdp_param.h"

namespace tessel::fsdp {
namespace {

using memory::testing::FakeDeviceBackend;

FakeDeviceBackend& Fake() { return memory::testing::InstallFakeDeviceBackendOnce(); }

const Device kGpu = Device::Cuda(0);

// Records which stream BlockStream made wait.
struct BlockLog {
  std::vector<memory::StreamHandle> blocked;
};

class StreamWork final : public comm::Work {
 public:
  explicit StreamWork(BlockLog* log) : log_(log) {}
  void Wait() override { TESSEL_FAIL(ErrorCode::kInternal, "device collectives are waited on a stream"); }
  bool IsCompleted() override { return true; }
  void BlockStream(void* stream) override { log_->blocked.push_back(stream); }

 private:
  BlockLog* log_;
};

// Rank 0 of two. AllGather writes `peer` (rank 1's block) into block 1; ReduceScatter copies block 0.
class FakeGroup final : public comm::ProcessGroup, public std::enable_shared_from_this<FakeGroup> {
 public:
  FakeGroup(Tensor peer, BlockLog* log) : peer_(std::move(peer)), log_(log) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  const std::vector<int>& global_ranks() const override { return ranks_; }
  std::string backend_name() const override { return "fake"; }
  comm::WorkPtr AllGather(const Tensor& out, const Tensor& in) override {
    const int64_t n = in.numel();
    CopyInto(MakeView(out, {n}, {1}, out.storage_offset() + n), peer_);
    return std::make_shared<StreamWork>(log_);
  }
  comm::WorkPtr ReduceScatter(const Tensor& out, const Tensor& in, comm::ReduceOp) override {
    CopyInto(out, MakeView(in, {out.numel()}, {1}, in.storage_offset()));
    return std::make_shared<StreamWork>(log_);
  }
  comm::WorkPtr AllReduce(const Tensor&, comm::ReduceOp) override { return Unused("all_reduce"); }
  comm::WorkPtr AllToAll(const Tensor&, const Tensor&, const std::vector<int64_t>&,
                         const std::vector<int64_t>&) override {
    return Unused("all_to_all");
  }
  comm::WorkPtr Broadcast(const Tensor&, int) override { return Unused("broadcast"); }
  comm::WorkPtr Barrier() override { return Unused("barrier"); }
  std::shared_ptr<ProcessGroup> NewGroup(const std::vector<int>&) override { return shared_from_this(); }

 private:
  static comm::WorkPtr Unused(const char* what) {
    TESSEL_FAIL(ErrorCode::kInternal, "FakeGroup: ", what, " is not used by these tests");
  }
  Tensor peer_;
  BlockLog* log_;
  std::vector<int> ranks_ = {0, 1};
};

class OneParam final : public nn::Module {
 public:
  OneParam() : Module("OneParam") {
    RegisterParameter("a", FromVector<float>({1, 2, 3, 4, 5, 6}, {3, 2}).To(kGpu));
  }
  TensorList Forward(const TensorList& in) override { return in; }
};

std::vector<float> Host(const Tensor& t) { return t.To(Device::Cpu()).ToVector<float>(); }

class CollectivesDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Fake();
    module_ = std::make_unique<OneParam>();
    compute_ = std::make_unique<memory::Stream>(kGpu);
    guard_ = std::make_unique<memory::StreamGuard>(*compute_);
    streams_ = std::make_unique<CommStreams>(kGpu);
    // Rank 1 holds row 2 of "a" and one zero-padded row: its padded shard.
    group_ = std::make_shared<FakeGroup>(FromVector<float>({5, 6, 0, 0}, {4}).To(kGpu), &log_);
    info_ = std::make_unique<FsdpMeshInfo>(FsdpMeshInfo{
        .mesh = dtensor::InitDeviceMesh(group_, {2}, {"dp"}), .shard_axis = 0, .replicate_axis = std::nullopt});
    param_ = std::make_unique<FsdpParam>(module_.get(), std::vector<std::string>{"a"}, module_->Param("a"), *info_,
                                         MixedPrecisionPolicy{});
    param_->ToSharded();
    params_ = {param_.get()};
    layout_ = FlatLayout::Of(params_);
  }
  // Producers first, so a missing wait would let a consumer read stale or overwritten bytes.
  void Drain() {
    streams_->copy_in_stream().Synchronize();
    streams_->all_gather_stream().Synchronize();
    streams_->reduce_scatter_stream().Synchronize();
    compute_->Synchronize();
  }
  // The streams of the device copies recorded since `from`.
  std::vector<memory::StreamHandle> CopyStreamsSince(size_t from) {
    std::vector<memory::StreamHandle> s;
    for (size_t i = from; i < Fake().copies.size(); ++i) s.push_back(Fake().copies[i].stream);
    return s;
  }

  std::unique_ptr<OneParam> module_;
  BlockLog log_;
  std::unique_ptr<memory::Stream> compute_;
  std::unique_ptr<memory::StreamGuard> guard_;
  std::unique_ptr<CommStreams> streams_;
  std::shared_ptr<FakeGroup> group_;
  std::unique_ptr<FsdpMeshInfo> info_;
  std::unique_ptr<FsdpParam> param_;
  std::vector<FsdpParam*> params_;
  FlatLayout layout_;
};

TEST_F(CollectivesDeviceTest, AllGatherRunsEachCopyOnItsStreamAndUnshardsTheRightValues) {
  ASSERT_EQ(layout_.shard_numel, 4);
  // The shard was written on compute (sharding in SetUp): the all-gather streams wait for it, as at the
  // root's pre-forward. Without this wait the drain below runs the copy-in first and gathers zeros.
  streams_->AllGatherStreamsWaitForCompute();
  const size_t before = Fake().copies.size();
  AllGatherResult r = IssueAllGather(params_, layout_, DType::kFloat32, group_, streams_.get());
  ASSERT_TRUE(r.gathered);
  EXPECT_EQ(log_.blocked, std::vector<memory::StreamHandle>{streams_->all_gather_stream().handle()});
  FinishAllGather(r, params_, layout_, streams_.get(), /*defer_release=*/true);
  EXPECT_TRUE(streams_->holds_all_gather_output());
  const memory::StreamHandle in = streams_->copy_in_stream().handle(), ag = streams_->all_gather_stream().handle();
  const memory::StreamHandle compute = compute_->handle();
  // copy-in of the shard; the fake all-gather; the copy-out of each rank's chunk.
  EXPECT_EQ(CopyStreamsSince(before), (std::vector<memory::StreamHandle>{in, ag, compute, compute}));
  streams_->FlushHeldAllGather();
  Drain();
  param_->ToUnsharded();
  EXPECT_EQ(Host(param_->unsharded_param()), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST_F(CollectivesDeviceTest, ReduceScatterRunsOnItsStreamAndViewsOutThisRanksRows) {
  // The flat reduce-scatter input: rank 0's block (rows 0-1 of the gradient), then rank 1's.
  Tensor input = FromVector<float>({10, 20, 30, 40, 50, 60, 0, 0}, {8}).To(kGpu);
  const ReduceSpec spec{.dtype = DType::kFloat32, .divide_factor = std::nullopt, .shard_group = group_,
                        .replicate_group = nullptr};
  const size_t before = Fake().copies.size();
  ReduceScatterResult r = IssueReduceScatter(
      std::move(input), {.params = params_, .offsets = {0}, .block_numel = layout_.shard_numel}, spec, streams_.get());
  ASSERT_TRUE(r.reduced);
  EXPECT_EQ(log_.blocked, std::vector<memory::StreamHandle>{streams_->reduce_scatter_stream().handle()});
  const EventPtr post_reduce = FinishReduceScatter(r, spec, streams_.get());
  ASSERT_TRUE(post_reduce);
  EXPECT_EQ(CopyStreamsSince(before), std::vector<memory::StreamHandle>{streams_->reduce_scatter_stream().handle()});
  streams_->ComputeWaitFor(*post_reduce);
  Drain();
  const Tensor grad = dtensor::GetDTensorImpl(param_->sharded_param().grad(), "test").local();
  EXPECT_EQ(Host(grad), (std::vector<float>{10, 20, 30, 40}));
}

TEST_F(CollectivesDeviceTest, GradientFlagsAreReadAfterTheComputeStreamWaitedNotOnTheReduceStream) {
  // [Note: FSDP gradient flags] on a device: FinishReduceScatter gives the target its rows and defers the
  // flags (no copy to the host inside the reduce-scatter stream's work); ResolveGradFlags, after the
  // compute stream waited, drops the .grad of a parameter no rank had a gradient for.
  const ReduceSpec spec{.dtype = DType::kFloat32, .divide_factor = std::nullopt, .shard_group = group_,
                        .replicate_group = nullptr};
  for (float flag : {0.0f, 1.0f}) {
    SCOPED_TRACE(flag);
    Tensor p = param_->sharded_param();
    p.set_grad(Tensor());
    std::vector<float> host(40, 0.0f);  // two rank blocks of 4 rows + 16 flags
    for (int i = 0; i < 4; ++i) host[i] = 10.0f * (i + 1);
    host[4] = flag;
    Tensor input = FromVector<float>(host, {40}).To(kGpu);
    const size_t before = Fake().copies.size();
    ReduceScatterResult r = IssueReduceScatter(
        std::move(input), {.params = params_, .offsets = {0}, .block_numel = 20, .flag_offset = 4}, spec,
        streams_.get());
    std::optional<DeferredGradFlags> deferred;
    const EventPtr post_reduce = FinishReduceScatter(r, spec, streams_.get(), &deferred);
    ASSERT_TRUE(post_reduce && deferred.has_value());
    EXPECT_EQ(CopyStreamsSince(before), std::vector<memory::StreamHandle>{streams_->reduce_scatter_stream().handle()});
    EXPECT_TRUE(param_->sharded_param().grad().defined());  // given its rows until resolved
    streams_->ComputeWaitFor(*post_reduce);
    Drain();
    ResolveGradFlags(*deferred);
    EXPECT_EQ(param_->sharded_param().grad().defined(), flag != 0.0f);
  }
}

TEST_F(CollectivesDeviceTest, DeferredFlagsOfTwoReductionsInOneBackwardAreResolvedTogether) {
  // A module run twice in one forward reduces its group twice before the end of backward: a flag set in
  // either reduction keeps the .grad; the parameter had none before the first.
  const ReduceSpec spec{.dtype = DType::kFloat32, .divide_factor = std::nullopt, .shard_group = group_,
                        .replicate_group = nullptr};
  for (auto [first, second] : {std::pair{0.0f, 0.0f}, std::pair{1.0f, 0.0f}, std::pair{0.0f, 1.0f}}) {
    SCOPED_TRACE(::testing::Message() << first << " " << second);
    Tensor p = param_->sharded_param();
    p.set_grad(Tensor());
    std::optional<DeferredGradFlags> deferred;
    EventPtr post_reduce;
    for (int k = 0; k < 2; ++k) {
      const float flag = k == 0 ? first : second;
      std::vector<float> host(40, 0.0f);
      host[4] = flag;
      ReduceScatterResult r = IssueReduceScatter(
          FromVector<float>(host, {40}).To(kGpu),
          {.params = params_, .offsets = {0}, .block_numel = 20, .flag_offset = 4}, spec, streams_.get());
      post_reduce = FinishReduceScatter(r, spec, streams_.get(), &deferred);
      // (The fake backend has no add_ kernel to accumulate the second view-out into the first: start the
      // second from no .grad; what is tested is that both reductions' flags are kept.)
      if (k == 0) p.set_grad(Tensor());
    }
    ASSERT_EQ(deferred->flags.size(), 2u);
    streams_->ComputeWaitFor(*post_reduce);
    Drain();
    ResolveGradFlags(*deferred);
    EXPECT_EQ(param_->sharded_param().grad().defined(), first + second != 0.0f);
  }
}

}  // namespace
}  // namespace tessel::fsdp
