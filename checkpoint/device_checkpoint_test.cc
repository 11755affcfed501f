// checkpoint/device_checkpoint_test.cc — checkpoints of "device" tensors through the fake device backend
// (core/memory/testing/fake_device_backend.h, host memory behind a stream-ordered device API): Save,
// AsyncSaver and Load move every device byte with the device-aware copy (counted by direction, pinned
// staging for tensors over 1 MiB) instead of reading or writing device memory as host memory, and the
// values equal a host save / host load bit for bit, in both directions.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "checkpoint/async_save.h"
#include "checkpoint/load.h"
#include "checkpoint/save.h"
#include "checkpoint/testing/checkpoint_testing.h"
#include "core/memory/testing/fake_device_backend.h"
#include "core/tensor/copy.h"
#include "core/tensor/device_copy.h"
#include "core/tensor/factory.h"

namespace tessel::checkpoint {
namespace {

using memory::CopyKind;
using memory::testing::FakeDeviceBackend;
using testing::DenseBytes;
using testing::FreshDir;
using testing::Pattern;

FakeDeviceBackend& Fake() {
  static FakeDeviceBackend* fake = [] {
    auto f = std::make_unique<FakeDeviceBackend>(1, int64_t{256} << 20);
    FakeDeviceBackend* raw = f.get();
    memory::InstallDeviceBackend(std::move(f));
    return raw;
  }();
  return *fake;
}

// 2.4 MB float32 (pinned staging), plus small bf16 and int64 tensors (direct copies).
std::map<std::string, Tensor> HostTensors() {
  return {{"w", Pattern({600, 1000}, DType::kFloat32, 1)},
          {"h", Pattern({7, 10}, DType::kBFloat16, 2)},
          {"idx", Pattern({9, 4}, DType::kInt64, 3)}};
}

int64_t TotalBytes(const std::map<std::string, Tensor>& ts) {
  int64_t n = 0;
  for (const auto& [k, t] : ts) n += t.numel() * ElementSize(t.dtype());
  return n;
}

struct Traffic {
  int64_t bytes = 0, pinned_bytes = 0;
};

// Bytes the fake backend copied in direction `kind` since copy record `from`.
Traffic CopiedSince(size_t from, CopyKind kind) {
  Traffic t;
  const auto& copies = Fake().copies;
  for (size_t i = from; i < copies.size(); ++i) {
    if (copies[i].kind != kind) continue;
    t.bytes += copies[i].nbytes;
    if (copies[i].pinned) t.pinned_bytes += copies[i].nbytes;
  }
  return t;
}

StateDict OnDevice(const std::map<std::string, Tensor>& ts, uint64_t seed_or_zero) {
  StateDict sd;
  for (const auto& [k, t] : ts) {
    sd[k] = (seed_or_zero == 0 ? t : Pattern(t.sizes(), t.dtype(), seed_or_zero)).To(Device::Cuda(0));
  }
  return sd;
}

void ExpectEqualsHost(const StateDict& sd, const std::map<std::string, Tensor>& want, bool on_device) {
  for (const auto& [k, t] : want) {
    const Tensor& got = std::get<Tensor>(sd.at(k));
    EXPECT_EQ(got.device(), on_device ? Device::Cuda(0) : Device::Cpu()) << k;
    EXPECT_TRUE(DenseBytes(got.To(Device::Cpu())) == DenseBytes(t)) << k;
  }
}

TEST(DeviceCheckpointTest, SaveFromDeviceTensorsStagesEveryByteAndLoadsOnTheHostBitwise) {
  Fake();
  const auto host = HostTensors();
  const StateDict device_sd = OnDevice(host, 0);
  const std::string dir = FreshDir("device_save");
  const size_t before = Fake().copies.size();
  Save(device_sd, dir, nullptr, {.fsync = false});
  const Traffic d2h = CopiedSince(before, CopyKind::kDeviceToHost);
  EXPECT_EQ(d2h.bytes, TotalBytes(host));       // every byte came over with a device copy, once
  EXPECT_EQ(d2h.pinned_bytes, 600 * 1000 * 4);  // the large one through pinned staging
  EXPECT_GT(PinnedStagingBytes(), 0);
  StateDict loaded;
  for (const auto& [k, t] : host) loaded[k] = Pattern(t.sizes(), t.dtype(), 99);
  Load(loaded, dir);
  ExpectEqualsHost(loaded, host, /*on_device=*/false);
}

TEST(DeviceCheckpointTest, LoadIntoDeviceTensorsLandsThroughDeviceCopiesBitwise) {
  Fake();
  const auto host = HostTensors();
  StateDict host_sd;
  for (const auto& [k, t] : host) host_sd[k] = t;
  const std::string dir = FreshDir("device_load");
  Save(host_sd, dir, nullptr, {.fsync = false});
  StateDict device_sd = OnDevice(host, 77);
  const size_t before = Fake().copies.size();
  const LoadResult r = Load(device_sd, dir);
  EXPECT_TRUE(r.missing_keys.empty() && r.unexpected_keys.empty());
  const Traffic h2d = CopiedSince(before, CopyKind::kHostToDevice);
  EXPECT_EQ(h2d.bytes, TotalBytes(host));
  EXPECT_EQ(h2d.pinned_bytes, 600 * 1000 * 4);
  ExpectEqualsHost(device_sd, host, /*on_device=*/true);
}

TEST(DeviceCheckpointTest, AsyncSaveSnapshotsDeviceTensorsThroughDeviceCopies) {
  Fake();
  const auto host = HostTensors();
  StateDict device_sd = OnDevice(host, 0);
  const std::string dir = FreshDir("device_async");
  AsyncSaver saver(nullptr);
  const size_t before = Fake().copies.size();
  saver.Save(device_sd, dir, {.fsync = false});
  EXPECT_EQ(CopiedSince(before, CopyKind::kDeviceToHost).bytes, TotalBytes(host));  // the snapshot, before return
  // Training goes on: the device tensors change in place; the checkpoint keeps the snapshot.
  for (auto& [k, v] : device_sd) CopyInto(std::get<Tensor>(v), Zeros(host.at(k).sizes(), host.at(k).dtype()));
  saver.Wait();
  StateDict loaded;
  for (const auto& [k, t] : host) loaded[k] = Pattern(t.sizes(), t.dtype(), 99);
  Load(loaded, dir);
  ExpectEqualsHost(loaded, host, /*on_device=*/false);
}

}  // namespace
}  // namespace tessel::checkpoint
