// core/ops/concat_device_test.cc — cat / stack on device tensors through the fake device backend (no
// GPU): along dim 0 (and any dim with outer size 1) each input is one device-to-device copy into its
// contiguous slab, no host round trip, values equal the CPU op; along an inner dim the slab is strided
// and needs the CUDA strided copy kernel, so on the fake backend it fails with kUnimplemented naming the
// devices (on a GPU, concat_cuda_test.cc in extra_ops_cuda_test covers every dim); inputs on two devices
// fail naming both.
#include <gtest/gtest.h>

#include <memory>
#include <utility>
#include <vector>

#include "core/base/testing/expect_error.h"
#include "core/memory/testing/fake_device_backend.h"
#include "core/ops/concat.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

using memory::CopyKind;
using memory::testing::FakeDeviceBackend;

FakeDeviceBackend& Fake() { return memory::testing::InstallFakeDeviceBackendOnce(2, int64_t{64} << 20); }

const Device kGpu = Device::Cuda(0);

Tensor Seq(std::vector<int64_t> shape, float first) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = first + static_cast<float>(i);
  return FromVector<float>(v, shape);
}

// Device-to-device copies recorded since copy record `from` (-1 if a host copy ran in between).
int DeviceCopiesSince(size_t from) {
  int n = 0;
  for (size_t i = from; i < Fake().copies.size(); ++i) {
    if (Fake().copies[i].kind != CopyKind::kDeviceToDevice) return -1;
    ++n;
  }
  return n;
}

TEST(ConcatDeviceTest, CatAlongDimZeroIsOneDeviceCopyPerInputAndEqualsCpu) {
  Fake();
  const Tensor a = Seq({2, 3}, 0), b = Seq({1, 3}, 10), c = Seq({3, 3}, 20);
  const Tensor ga = a.To(kGpu), gb = b.To(kGpu), gc = c.To(kGpu);
  const size_t before = Fake().copies.size();
  const Tensor out = Cat({ga, gb, gc}, 0);
  EXPECT_EQ(DeviceCopiesSince(before), 3);
  EXPECT_EQ(out.device(), kGpu);
  EXPECT_EQ(out.sizes(), (Shape{6, 3}));
  EXPECT_EQ(out.To(Device::Cpu()).ToVector<float>(), Cat({a, b, c}, 0).ToVector<float>());
}

TEST(ConcatDeviceTest, StackAlongDimZeroAndCatOfOuterSizeOneAreDeviceCopies) {
  Fake();
  const Tensor a = Seq({2, 3}, 0), b = Seq({2, 3}, 50);
  const Tensor ga = a.To(kGpu), gb = b.To(kGpu);
  size_t before = Fake().copies.size();
  const Tensor s = Stack({ga, gb}, 0);
  EXPECT_EQ(DeviceCopiesSince(before), 2);
  EXPECT_EQ(s.sizes(), (Shape{2, 2, 3}));
  EXPECT_EQ(s.To(Device::Cpu()).ToVector<float>(), Stack({a, b}, 0).ToVector<float>());
  // [1, 2, 3] along dim 1: the dims before it have size 1, so each slab is contiguous.
  const Tensor x = Seq({1, 2, 3}, 0), y = Seq({1, 4, 3}, 100);
  const Tensor gx = x.To(kGpu), gy = y.To(kGpu);
  before = Fake().copies.size();
  const Tensor c = Cat({gx, gy}, 1);
  EXPECT_EQ(DeviceCopiesSince(before), 2);
  EXPECT_EQ(c.To(Device::Cpu()).ToVector<float>(), Cat({x, y}, 1).ToVector<float>());
}

TEST(ConcatDeviceTest, StridedSlabWithoutTheCudaCopyKernelFailsNamingTheDevices) {
  Fake();
  const Tensor ga = Seq({2, 3}, 0).To(kGpu), gb = Seq({2, 1}, 9).To(kGpu);
  testing::ExpectErrorContains([&] { Cat({ga, gb}, 1); }, ErrorCode::kUnimplemented, "cuda:0");
}

TEST(ConcatDeviceTest, InputsOnTwoDevicesFailNamingBoth) {
  Fake();
  const Tensor ga = Seq({2, 3}, 0).To(kGpu), gb = Seq({2, 3}, 0).To(Device::Cuda(1));
  testing::ExpectErrorContains([&] { Cat({ga, gb}, 0); }, ErrorCode::kInvalidArgument,
                               "cat: expected all tensors on one device, got tensor 0 on cuda:0 and tensor 1 on cuda:1");
  testing::ExpectErrorContains([&] { Stack({ga, gb}, 0); }, ErrorCode::kInvalidArgument,
                               "stack: expected all tensors on one device");
}

}  // namespace
}  // namespace tessel
