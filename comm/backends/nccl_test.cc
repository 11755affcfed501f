// The nccl backend on one GPU (world size 1: NCCL allows one rank per device). Skips cleanly when
// no CUDA device or driver is present.
#include "comm/backends/nccl.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "comm/tracer.h"
#include "core/memory/allocator.h"
#include "core/tensor/factory.h"

namespace tessel::comm {
namespace {

Tensor ToGpu(const std::vector<float>& v, Shape shape) {
  Tensor t = Empty(shape, DType::kFloat32, Device::Cuda(0));
  cudaMemcpy(t.raw_data(), v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice);
  return t;
}

std::vector<float> ToHost(const Tensor& t) {
  std::vector<float> v(t.numel());
  cudaMemcpy(v.data(), t.raw_data(), v.size() * sizeof(float), cudaMemcpyDeviceToHost);
  return v;
}

TEST(NcclTest, SingleRankCollectivesRunOnTheGpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount failed or returned 0)";
  memory::RegisterDeviceAllocator(DeviceType::kCuda,
                                  {[](int64_t n, int index) {
                                     void* p = nullptr;
                                     cudaSetDevice(index);
                                     cudaMalloc(&p, std::max<int64_t>(n, 1));
                                     return p;
                                   },
                                   [](void* p, int) { cudaFree(p); }});
  auto store = std::make_shared<TcpStore>("127.0.0.1", 0, true, std::chrono::seconds(10));
  NcclOptions options;
  options.device_index = 0;
  options.timeout = std::chrono::seconds(30);
  ProcessGroupPtr pg = NewNcclProcessGroup(store, "test/", 0, 1, options);
  EXPECT_EQ(pg->backend_name(), "nccl");
  CommTracer tracer;
  Tensor a = ToGpu({1, 2, 3, 4}, {4});
  pg->AllReduce(a, ReduceOp::kSum)->Wait();
  EXPECT_EQ(ToHost(a), (std::vector<float>{1, 2, 3, 4}));
  Tensor out = ToGpu({0, 0, 0, 0}, {4});
  pg->AllGather(out, a)->Wait();
  EXPECT_EQ(ToHost(out), (std::vector<float>{1, 2, 3, 4}));
  Tensor rs = ToGpu({0, 0, 0, 0}, {4});
  pg->ReduceScatter(rs, a, ReduceOp::kAvg)->Wait();
  EXPECT_EQ(ToHost(rs), (std::vector<float>{1, 2, 3, 4}));
  Tensor a2a = ToGpu({0, 0, 0, 0}, {2, 2});
  pg->AllToAll(a2a, ToGpu({5, 6, 7, 8}, {2, 2}), {}, {})->Wait();
  EXPECT_EQ(ToHost(a2a), (std::vector<float>{5, 6, 7, 8}));
  pg->Broadcast(a, 0)->Wait();
  WorkPtr w = pg->Barrier();
  w->Wait();
  EXPECT_TRUE(w->IsCompleted());
  EXPECT_EQ(tracer.Total(), 6);
  EXPECT_EQ(tracer.Count(CollectiveKind::kAllGather), 1);
}

// run_gpu.sh (the GPU bundle) exports nvidia-smi's GPU count: the runtime must see exactly those devices,
// so "the driver is there and CUDA did not find it" fails instead of skipping every GPU test.
TEST(NcclTest, DeviceCountMatchesNvidiaSmi) {
  const char* expected = std::getenv("TESSEL_EXPECT_GPUS");
  if (expected == nullptr || *expected == '\0') GTEST_SKIP() << "TESSEL_EXPECT_GPUS is not set (run_gpu.sh sets it)";
  EXPECT_EQ(CudaDeviceCount(), std::atoi(expected));
}

}  // namespace
}  // namespace tessel::comm
