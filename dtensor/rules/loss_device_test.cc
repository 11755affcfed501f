// dtensor/rules/loss_device_test.cc — the vocab-sharded (loss parallel) cross-entropy computes on the
// host, so device logits (here: the fake device backend, one rank) fail with kUnimplemented naming the op,
// shape and device instead of the host reading device memory.
#include <gtest/gtest.h>

#include <memory>

#include "core/base/testing/expect_error.h"
#include "core/memory/testing/fake_device_backend.h"
#include "core/ops/loss.h"
#include "dtensor/testing/rules_testing.h"

namespace tessel::dtensor {
namespace {

TEST(LossDeviceTest, LossParallelOnDeviceLogitsFailsNamingTheDevice) {
  memory::InstallDeviceBackend(std::make_unique<memory::testing::FakeDeviceBackend>(1, int64_t{16} << 20));
  testing::OnMesh1D(1, [](const DeviceMesh& mesh) {
    const Tensor logits = testing::Values({3, 5}).To(Device::Cuda(0));
    const Tensor target = FromVector(std::vector<int64_t>{0, 4, 2}, Shape{3}).To(Device::Cuda(0));
    DTensor l = DistributeTensor(logits, mesh, ParsePlacements("S(1)"));
    DTensor t = DistributeTensor(target, mesh, ParsePlacements("R"));
    // The premise: the shards really live on the (fake) device, so the host loop would read device memory.
    ASSERT_EQ(l.ToLocal().device(), Device::Cuda(0));
    ASSERT_EQ(t.ToLocal().device(), Device::Cuda(0));
    tessel::testing::ExpectErrorContains(
        [&] { CrossEntropy(l, t); }, ErrorCode::kUnimplemented,
        "cross_entropy: the vocab-sharded (loss parallel) form runs on the host; logits [3, 5] on cuda:0");
  });
}

}  // namespace
}  // namespace tessel::dtensor
