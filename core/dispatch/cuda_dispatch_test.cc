// core/dispatch/cuda_dispatch_test.cc — CUDA tensors (made by the fake device backend, no GPU) go to
// the op's cuda slot; an op without one fails with kUnimplemented naming the op and the device; mixed
// host/device inputs are rejected; an OpProfiler with a device synchronization runs it around each kernel.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/base/testing/expect_error.h"
#include "core/dispatch/dispatcher.h"
#include "core/dispatch/op.h"
#include "core/dispatch/profiler.h"
#include "core/memory/testing/fake_device_backend.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

using testing::ExpectErrorContains;

void InstallFake() {
  static const bool installed = [] {
    memory::InstallDeviceBackend(std::make_unique<memory::testing::FakeDeviceBackend>(2, int64_t{64} << 20));
    return true;
  }();
  (void)installed;
}

struct Calls {
  int cpu = 0;
  int cuda = 0;
  Device cuda_device;
};
Calls calls;

// Both kernels return a tensor on their inputs' device; the CUDA one is a stand-in for a .cu launcher.
const OpDef& kBothDevices = RegisterOp({
    .name = "test_both_devices",
    .cpu = [](std::span<const Tensor> in, const Attrs&) -> TensorList {
      ++calls.cpu;
      return {Zeros({1}, DType::kFloat32, in[0].device())};
    },
    .cuda = [](std::span<const Tensor> in, const Attrs&) -> TensorList {
      ++calls.cuda;
      calls.cuda_device = in[0].device();
      return {Zeros({1}, DType::kFloat32, in[0].device())};
    },
});
const OpDef& kCpuOnly = RegisterOp({
    .name = "test_cpu_only",
    .cpu = [](std::span<const Tensor> in, const Attrs&) -> TensorList { return {in[0]}; },
});

// A CUDA kernel library may initialize before or after the op's own file: both orders fill the slot.
Kernel CountingCudaKernel(int* count) {
  return [count](std::span<const Tensor> in, const Attrs&) -> TensorList {
    ++*count;
    return {in[0]};
  };
}
int early_calls = 0, late_calls = 0;
const bool kEarly = (SetCudaKernel("test_cuda_set_early", CountingCudaKernel(&early_calls)), true);
const OpDef& kEarlyOp = RegisterOp({.name = "test_cuda_set_early", .cpu = kCpuOnly.cpu});
const OpDef& kLateOp = RegisterOp({.name = "test_cuda_set_late", .cpu = kCpuOnly.cpu});
const bool kLate = (SetCudaKernel("test_cuda_set_late", CountingCudaKernel(&late_calls)), true);

TEST(CudaDispatchTest, SetCudaKernelFillsTheSlotBeforeOrAfterRegistration) {
  InstallFake();
  const Tensor g = Zeros({2}, DType::kFloat32, Device::Cuda(0));
  Dispatch(kEarlyOp, std::vector<Tensor>{g}, Attrs());
  Dispatch(kLateOp, std::vector<Tensor>{g}, Attrs());
  EXPECT_EQ(early_calls, 1);
  EXPECT_EQ(late_calls, 1);
  ExpectErrorContains([] { SetCudaKernel("test_cuda_set_late", CountingCudaKernel(&late_calls)); },
                      ErrorCode::kInternal, "has a CUDA kernel twice");
  (void)kEarly, (void)kLate;
}

TEST(CudaDispatchTest, CudaTensorsRunTheCudaKernelOnTheirDevice) {
  InstallFake();
  calls = {};
  const Tensor g = Zeros({2, 3}, DType::kFloat32, Device::Cuda(1));
  const TensorList out = Dispatch(kBothDevices, std::vector<Tensor>{g, g}, Attrs());
  EXPECT_EQ(calls.cuda, 1);
  EXPECT_EQ(calls.cpu, 0);
  EXPECT_EQ(calls.cuda_device, Device::Cuda(1));
  EXPECT_EQ(out[0].device(), Device::Cuda(1));
  Dispatch(kBothDevices, std::vector<Tensor>{Zeros({2})}, Attrs());
  EXPECT_EQ(calls.cpu, 1);
}

// An OpProfiler built with a device synchronization drains the device before and after each kernel, so
// the row of an asynchronous device op holds its device time; a plain one never synchronizes.
std::vector<std::string> event_log;
const OpDef& kLoggedOp = RegisterOp({
    .name = "test_logged_op",
    .cpu = [](std::span<const Tensor> in, const Attrs&) -> TensorList {
      event_log.push_back("kernel");
      return {in[0]};
    },
});

TEST(CudaDispatchTest, ProfilerWithDeviceSyncSynchronizesAroundEachKernel) {
  event_log.clear();
  {
    OpProfiler prof([] { event_log.push_back("sync"); });
    Dispatch(kLoggedOp, std::vector<Tensor>{Zeros({2})}, Attrs());
    Dispatch(kLoggedOp, std::vector<Tensor>{Zeros({2})}, Attrs());
    EXPECT_EQ(prof.rows().at("test_logged_op").calls, 2);
  }
  EXPECT_EQ(event_log, (std::vector<std::string>{"sync", "kernel", "sync", "sync", "kernel", "sync"}));
  event_log.clear();
  {
    OpProfiler plain;
    Dispatch(kLoggedOp, std::vector<Tensor>{Zeros({2})}, Attrs());
    EXPECT_EQ(plain.rows().at("test_logged_op").calls, 1);
  }
  EXPECT_EQ(event_log, (std::vector<std::string>{"kernel"}));
  OpProfiler shapes([] {}, /*by_shape=*/true);
  Dispatch(kLoggedOp, std::vector<Tensor>{Zeros({2, 3})}, Attrs());
  ASSERT_EQ(shapes.rows().size(), 1u);
  EXPECT_EQ(shapes.rows().begin()->first, "test_logged_op " + DescribeInputs(std::vector<Tensor>{Zeros({2, 3})}));
}

TEST(CudaDispatchTest, OpWithoutCudaKernelFailsNamingOpAndDevice) {
  InstallFake();
  const Tensor g = Zeros({2, 3}, DType::kBFloat16, Device::Cuda(0));
  ExpectErrorContains([&] { Dispatch(kCpuOnly, std::vector<Tensor>{g}, Attrs()); }, ErrorCode::kUnimplemented,
                      {"test_cpu_only: no CUDA kernel is registered", "cannot run on cuda:0", "[2, 3] bfloat16",
                       "it has a CPU kernel"});
}

TEST(CudaDispatchTest, MixedHostAndDeviceInputsAreRejectedWithBothDevices) {
  InstallFake();
  const Tensor g = Zeros({2}, DType::kFloat32, Device::Cuda(1));
  ExpectErrorContains([&] { Dispatch(kBothDevices, std::vector<Tensor>{Zeros({2}), g}, Attrs()); },
                      ErrorCode::kInvalidArgument, {"test_both_devices", "one device type", "cpu:0", "cuda:1"});
}

}  // namespace
}  // namespace tessel
