// fsdp/fsdp_device_test.cc — FsdpParam's copies into the unsharded parameter on "device" tensors, through
// the fake device backend (core/memory/testing/fake_device_backend.h): the all-gather copy-out and the
// one-rank shard copy run as device copies (counted: one device-to-device copy per chunk, no host round
// trip), leave the unsharded handle's version counter alone, and give the values the host path gives.
// One rank (the fake backend is single-threaded), so CopyOutFrom runs its one-chunk case.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "comm/backends/threads.h"
#include "core/memory/testing/fake_device_backend.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"
#include "dtensor/dtensor.h"
#include "fsdp/fsdp_param.h"

namespace tessel::fsdp {
namespace {

using memory::CopyKind;
using memory::testing::FakeDeviceBackend;

FakeDeviceBackend& Fake() { return memory::testing::InstallFakeDeviceBackendOnce(); }

class OneParam final : public nn::Module {
 public:
  OneParam() : Module("OneParam") {
    RegisterParameter("a", FromVector<float>({1, 2, 3, 4, 5, 6}, {3, 2}).To(Device::Cuda(0)));
  }
  TensorList Forward(const TensorList& in) override { return in; }
};

// Runs fn(param) on one rank with "a" sharded over a one-rank mesh and its unsharded buffer allocated.
void WithShardedParam(const std::function<void(FsdpParam&)>& fn) {
  Fake();
  comm::RunRanks(1, [&](comm::ProcessGroupPtr world) {
    OneParam module;
    const FsdpMeshInfo info{
        .mesh = dtensor::InitDeviceMesh(world, {1}, {"dp"}), .shard_axis = 0, .replicate_axis = std::nullopt};
    FsdpParam p(&module, {"a"}, module.Param("a"), info, MixedPrecisionPolicy{});
    p.ToSharded();
    p.AllocateUnsharded();
    fn(p);
  });
}

// Device-to-device copies (and their bytes) recorded since copy record `from`; -1 if any other kind ran.
std::pair<int, int64_t> DeviceCopiesSince(size_t from) {
  int n = 0;
  int64_t bytes = 0;
  for (size_t i = from; i < Fake().copies.size(); ++i) {
    if (Fake().copies[i].kind != CopyKind::kDeviceToDevice) return {-1, 0};
    ++n;
    bytes += Fake().copies[i].nbytes;
  }
  return {n, bytes};
}

TEST(FsdpDeviceTest, ShardCopyIntoTheUnshardedDeviceParamIsOneDeviceCopyAndKeepsTheVersion) {
  WithShardedParam([](FsdpParam& p) {
    EXPECT_EQ(p.unsharded_param().device(), Device::Cuda(0));
    const uint32_t version = p.unsharded_param().impl()->version();
    const size_t before = Fake().copies.size();
    p.CopyShardToUnsharded();
    EXPECT_EQ(DeviceCopiesSince(before), std::make_pair(1, int64_t{6 * 4}));
    EXPECT_EQ(p.unsharded_param().impl()->version(), version);
    EXPECT_EQ(p.unsharded_param().To(Device::Cpu()).ToVector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  });
}

TEST(FsdpDeviceTest, AllGatherCopyOutFromADeviceBufferIsADeviceCopyPerChunk) {
  WithShardedParam([](FsdpParam& p) {
    // A group buffer holding another parameter's 2 elements first, then this one's padded shard.
    const Tensor output = FromVector<float>({9, 9, 6, 5, 4, 3, 2, 1}, {8}).To(Device::Cuda(0));
    const uint32_t version = p.unsharded_param().impl()->version();
    const size_t before = Fake().copies.size();
    p.CopyOutFrom(output, /*offset=*/2, /*group_shard_numel=*/8);
    EXPECT_EQ(DeviceCopiesSince(before), std::make_pair(1, int64_t{6 * 4}));
    EXPECT_EQ(p.unsharded_param().impl()->version(), version);
    EXPECT_EQ(p.unsharded_param().To(Device::Cpu()).ToVector<float>(), (std::vector<float>{6, 5, 4, 3, 2, 1}));
  });
}

}  // namespace
}  // namespace tessel::fsdp
