// core/memory/testing/gpu_test.h — the fixture of every GPU test: installs the CUDA backend and skips
// the test when no device is usable (the bundle's cuda_probe prints why).
//
// Invariant: a test body deriving from GpuTest runs only with the CUDA backend installed.
//
// Example:
//   class ElementwiseCudaTest : public memory::testing::GpuTest {};
//   TEST_F(ElementwiseCudaTest, AddEqualsCpu) { ... Device::Cuda(0) ... }
#pragma once

#include <gtest/gtest.h>

#include "core/memory/cuda_backend.h"

namespace tessel::memory::testing {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!InstallCudaBackend()) GTEST_SKIP() << "no CUDA device visible";
  }
};

}  // namespace tessel::memory::testing
