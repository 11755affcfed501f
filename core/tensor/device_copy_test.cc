// core/tensor/device_copy_test.cc — Tensor::To / CopyInto across host and device, and the CUDA
// factories, through the fake device backend: its copies run late (only when waited for), so a copy
// path that reuses a staging buffer or returns before its copy ran produces wrong values here.
#include "core/tensor/device_copy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/base/testing/expect_error.h"
#include "core/memory/allocator.h"
#include "core/memory/testing/fake_device_backend.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

using memory::CopyKind;
using memory::testing::FakeDeviceBackend;
using testing::ExpectErrorContains;

FakeDeviceBackend& Fake() {
  static FakeDeviceBackend* fake = [] {
    auto f = std::make_unique<FakeDeviceBackend>(2, int64_t{256} << 20);
    FakeDeviceBackend* raw = f.get();
    memory::InstallDeviceBackend(std::move(f));
    return raw;
  }();
  return *fake;
}

// Values i * 0.5 - 3 as float32, computed independently of any copy path.
std::vector<float> Pattern(int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 1000) * 0.5f - 3.0f;
  return v;
}

Tensor HostTensor(const std::vector<float>& v, std::vector<int64_t> shape) {
  return FromBuffer(v.data(), static_cast<int64_t>(v.size() * sizeof(float)), shape, DType::kFloat32);
}

TEST(DeviceCopyTest, SmallTensorRoundTripsThroughOneDirectCopyEachWay) {
  FakeDeviceBackend& f = Fake();
  const std::vector<float> v = Pattern(12);
  const Tensor host = HostTensor(v, {3, 4});
  const size_t before = f.copies.size();
  const Tensor g = host.To(Device::Cuda(0));
  EXPECT_EQ(g.device(), Device::Cuda(0));
  EXPECT_EQ(g.sizes(), (Shape{3, 4}));
  ASSERT_EQ(f.copies.size(), before + 1);
  EXPECT_EQ(f.copies.back().kind, CopyKind::kHostToDevice);
  EXPECT_EQ(f.copies.back().nbytes, 48);
  EXPECT_FALSE(f.copies.back().pinned);
  const Tensor back = g.To(Device::Cpu());
  EXPECT_EQ(f.copies.back().kind, CopyKind::kDeviceToHost);
  EXPECT_EQ(back.ToVector<float>(), v);
  EXPECT_EQ(g.ToVector<float>(), v);  // ToVector of a device tensor copies to the host first
}

TEST(DeviceCopyTest, LargeCopiesStageThroughTwoReusedPinnedChunksAndKeepEveryValue) {
  FakeDeviceBackend& f = Fake();
  const int64_t n = (kStagingChunkBytes / 4) * 2 + (kStagingChunkBytes / 8) + 3;  // 2.5 chunks + 12 bytes
  const std::vector<float> v = Pattern(n);
  const Tensor host = HostTensor(v, {n});
  const size_t before = f.copies.size();
  const Tensor g = host.To(Device::Cuda(1));
  ASSERT_EQ(f.copies.size(), before + 3);
  for (size_t i = before; i < before + 3; ++i) {
    EXPECT_EQ(f.copies[i].kind, CopyKind::kHostToDevice);
    EXPECT_TRUE(f.copies[i].pinned);
  }
  EXPECT_EQ(f.copies[before + 2].nbytes, n * 4 - 2 * kStagingChunkBytes);
  EXPECT_EQ(PinnedStagingBytes(), 2 * kStagingChunkBytes);
  const int64_t pinned_allocs = f.num_malloc_host;
  const Tensor back = g.To(Device::Cpu());
  EXPECT_EQ(f.copies.back().kind, CopyKind::kDeviceToHost);
  EXPECT_TRUE(f.copies.back().pinned);
  EXPECT_EQ(f.num_malloc_host, pinned_allocs);  // the same two buffers, no new pinned memory
  const std::vector<float> got = back.ToVector<float>();
  ASSERT_EQ(got.size(), v.size());
  EXPECT_EQ(std::memcmp(got.data(), v.data(), v.size() * sizeof(float)), 0);
}

TEST(DeviceCopyTest, ConversionBroadcastAndStridesAreResolvedOnTheHost) {
  Fake();
  const Tensor g = Empty({2, 3}, DType::kFloat32, Device::Cuda(0));
  CopyInto(g, FromDoubles({1.5, -2.0, 4.25}, std::vector<int64_t>{3}));  // float64 row broadcast over 2 rows
  EXPECT_EQ(g.ToVector<double>(), (std::vector<double>{1.5, -2.0, 4.25, 1.5, -2.0, 4.25}));
  // A transposed host view (strides 1, 2) into a contiguous device tensor.
  const Tensor h = FromDoubles({0, 1, 2, 3, 4, 5}, std::vector<int64_t>{3, 2}, DType::kFloat32);
  const Tensor ht = MakeDense(h.impl()->storage(), {2, 3}, {1, 2}, 0, DType::kFloat32);
  CopyInto(g, ht);
  EXPECT_EQ(g.ToVector<double>(), (std::vector<double>{0, 2, 4, 1, 3, 5}));
  // Device -> host into a bfloat16 destination converts on the host.
  const Tensor b = Empty({2, 3}, DType::kBFloat16);
  CopyInto(b, g);
  EXPECT_EQ(b.ToVector<double>(), (std::vector<double>{0, 2, 4, 1, 3, 5}));
}

TEST(DeviceCopyTest, FactoriesFillCudaTensors) {
  FakeDeviceBackend& f = Fake();
  const int64_t memsets = f.num_memset;
  EXPECT_EQ(Zeros({5}, DType::kFloat32, Device::Cuda(0)).ToVector<double>(), std::vector<double>(5, 0.0));
  EXPECT_EQ(f.num_memset, memsets + 1);
  EXPECT_EQ(Full({2, 2}, 7.5, DType::kFloat32, Device::Cuda(0)).ToVector<double>(), std::vector<double>(4, 7.5));
  EXPECT_EQ(Ones({3}, DType::kInt64, Device::Cuda(1)).ToVector<int64_t>(), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(Arange(0, 4, 1, DType::kFloat32, Device::Cuda(0)).ToVector<double>(),
            (std::vector<double>{0, 1, 2, 3}));
  const Tensor a = Arange(0, 4, 1, DType::kFloat32, Device::Cuda(0));
  EXPECT_EQ(a.device(), Device::Cuda(0));
}

TEST(DeviceCopyTest, DeviceToDeviceCopiesAcrossDevicesAndToSameDeviceIsIdentity) {
  FakeDeviceBackend& f = Fake();
  const Tensor g0 = HostTensor(Pattern(6), {6}).To(Device::Cuda(0));
  EXPECT_TRUE(g0.To(Device::Cuda(0)).is_same(g0));
  const Tensor g1 = g0.To(Device::Cuda(1));
  EXPECT_EQ(f.copies.back().kind, CopyKind::kDeviceToDevice);
  EXPECT_EQ(g1.device(), Device::Cuda(1));
  EXPECT_EQ(g1.ToVector<float>(), Pattern(6));
}

TEST(DeviceCopyTest, DeviceBytesCountInTheCurrentLedgerOfTheDevice) {
  Fake();
  const Device d = Device::Cuda(1);
  const int64_t live = memory::Stats(d)[memory::Ledger::kParams].live;
  memory::LedgerScope s(memory::Ledger::kParams);
  const Tensor g = HostTensor(Pattern(100), {100}).To(d);
  EXPECT_EQ(memory::Stats(d)[memory::Ledger::kParams].live - live, 400);
}

TEST(DeviceCopyTest, StridedDeviceSourceFailsNamingTheCopyAndDevices) {
  Fake();
  const Tensor g = Zeros({3, 4}, DType::kFloat32, Device::Cuda(0));
  const Tensor gt = MakeDense(g.impl()->storage(), {4, 3}, {1, 4}, 0, DType::kFloat32);
  ExpectErrorContains([&] { (void)gt.To(Device::Cpu()); }, ErrorCode::kUnimplemented,
                      {"copy_", "[4, 3] float32 on cuda:0 (strided)", "cpu:0", "CUDA copy kernel"});
  ExpectErrorContains([&] { CopyInto(Zeros({4, 3}, DType::kFloat32, Device::Cuda(1)), gt); },
                      ErrorCode::kUnimplemented, {"copy_", "cuda:0 (strided)", "cuda:1"});
}

}  // namespace
}  // namespace tessel
