// core/tensor/device_strided_copy_test.cc — with a device strided-copy kernel installed
// (SetDeviceStridedCopy; here a host emulation over the fake device backend, counting its calls), CopyInto
// and Tensor::To route strided and broadcast device copies through it: device to device in one call,
// device to host by densifying on the device first, host into a strided device view by landing contiguous
// and scattering; values equal the host copies. (device_copy_test covers the same copies failing cleanly
// when no kernel is installed: a separate binary, since the hook is process-wide.)
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/memory/stream.h"
#include "core/memory/testing/fake_device_backend.h"
#include "core/tensor/copy.h"
#include "core/tensor/device_copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/strided_loop.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

using memory::CopyKind;
using memory::testing::FakeDeviceBackend;

int g_kernel_calls = 0;

// The kernel's contract on host memory: drain dst's stream (queued copies may still write src), then copy
// element by element with src's strides broadcast to dst's shape.
void EmulatedStridedCopy(const Tensor& dst, const Tensor& src) {
  ++g_kernel_calls;
  memory::RequireDeviceBackend("test", dst.device().index)
      .SynchronizeStream(dst.device().index, memory::CurrentStream(dst.device()));
  Shape ss(dst.dim(), 0);
  const int64_t lead = dst.dim() - src.dim();
  for (int64_t i = 0; i < src.dim(); ++i) ss[lead + i] = src.size(i) == 1 ? 0 : src.stride(i);
  const int64_t es = ElementSize(dst.dtype());
  char* d = static_cast<char*>(dst.raw_data());
  const char* s = static_cast<const char*>(src.raw_data());
  ForEachStrided<2>(dst.sizes(), {std::span<const int64_t>(dst.strides()), std::span<const int64_t>(ss)},
                    [&](const int64_t* off) { std::memcpy(d + off[0] * es, s + off[1] * es, es); });
}

FakeDeviceBackend& Fake() {
  static FakeDeviceBackend* fake = [] {
    auto f = std::make_unique<FakeDeviceBackend>(1, int64_t{64} << 20);
    FakeDeviceBackend* raw = f.get();
    memory::InstallDeviceBackend(std::move(f));
    SetDeviceStridedCopy(EmulatedStridedCopy);
    return raw;
  }();
  return *fake;
}

Tensor Host34() { return FromVector<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4}); }
Tensor Transposed(const Tensor& t) { return MakeDense(t.impl()->storage(), {4, 3}, {1, 4}, 0, t.dtype()); }
const std::vector<float> kTransposed = {0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11};

TEST(DeviceStridedCopyTest, StridedDeviceToDeviceCopyRunsTheKernelOnce) {
  Fake();
  const Tensor g = Host34().To(Device::Cuda(0));
  const Tensor dst = Empty({4, 3}, DType::kFloat32, Device::Cuda(0));
  const int before = g_kernel_calls;
  CopyInto(dst, Transposed(g));
  EXPECT_EQ(g_kernel_calls, before + 1);
  EXPECT_EQ(dst.To(Device::Cpu()).ToVector<float>(), kTransposed);
}

TEST(DeviceStridedCopyTest, StridedDeviceTensorToHostDensifiesOnTheDeviceThenCopiesOnce) {
  Fake();
  const Tensor g = Host34().To(Device::Cuda(0));
  const int before = g_kernel_calls;
  const size_t copies = Fake().copies.size();
  EXPECT_EQ(Transposed(g).To(Device::Cpu()).ToVector<float>(), kTransposed);
  EXPECT_EQ(g_kernel_calls, before + 1);
  ASSERT_EQ(Fake().copies.size(), copies + 1);
  EXPECT_EQ(Fake().copies.back().kind, CopyKind::kDeviceToHost);
  EXPECT_EQ(Fake().copies.back().nbytes, 48);
}

TEST(DeviceStridedCopyTest, HostIntoStridedDeviceViewLandsContiguousThenScatters) {
  Fake();
  const Tensor g = Zeros({3, 4}, DType::kFloat32, Device::Cuda(0));
  const Tensor host_t = FromVector<float>(kTransposed, {4, 3});
  const int before = g_kernel_calls;
  CopyInto(Transposed(g), host_t);  // writes g's storage through the transposed view
  EXPECT_EQ(g_kernel_calls, before + 1);
  EXPECT_EQ(Fake().copies.back().kind, CopyKind::kHostToDevice);
  EXPECT_EQ(g.To(Device::Cpu()).ToVector<float>(), Host34().ToVector<float>());
}

TEST(DeviceStridedCopyTest, BroadcastDeviceSourceAndContiguousCopiesTakeTheRightPath) {
  Fake();
  const Tensor row = FromVector<float>({1, 2, 3, 4}, {4}).To(Device::Cuda(0));
  const Tensor dst = Empty({3, 4}, DType::kFloat32, Device::Cuda(0));
  int before = g_kernel_calls;
  CopyInto(dst, row);  // broadcast over rows: the kernel
  EXPECT_EQ(g_kernel_calls, before + 1);
  EXPECT_EQ(dst.To(Device::Cpu()).ToVector<float>(), (std::vector<float>{1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4}));
  before = g_kernel_calls;
  const size_t copies = Fake().copies.size();
  CopyInto(Empty({3, 4}, DType::kFloat32, Device::Cuda(0)), dst);  // contiguous: one device memcpy, no kernel
  EXPECT_EQ(g_kernel_calls, before);
  ASSERT_EQ(Fake().copies.size(), copies + 1);
  EXPECT_EQ(Fake().copies.back().kind, CopyKind::kDeviceToDevice);
}

}  // namespace
}  // namespace tessel
