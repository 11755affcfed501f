// comm/backend_choice_test.cc — the launcher's --backend rule, GPU counting from a fake /dev and
// CUDA_VISIBLE_DEVICES, and each rank's backend/device check.
#include "comm/backend_choice.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/base/testing/expect_error.h"

namespace tessel::comm {
namespace {

using testing::ExpectErrorContains;

// A /dev with GPU nodes nvidia0..nvidia{n-1} plus the control nodes every driver install has.
std::string FakeDev(const std::string& name, int n) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
  std::filesystem::create_directories(dir);
  for (int i = 0; i < n; ++i) std::ofstream(dir + "/nvidia" + std::to_string(i)).put('x');
  for (const char* other : {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvme0"}) std::ofstream(dir + "/" + other).put('x');
  return dir;
}

TEST(BackendChoiceTest, CountsGpuNodesAndHonoursCudaVisibleDevices) {
  const std::string dev = FakeDev("dev4", 4);
  EXPECT_EQ(CountVisibleGpus(dev, nullptr), 4);
  EXPECT_EQ(CountVisibleGpus(dev, "2"), 1);
  EXPECT_EQ(CountVisibleGpus(dev, "3,1"), 2);
  EXPECT_EQ(CountVisibleGpus(dev, ""), 0);
  EXPECT_EQ(CountVisibleGpus(dev, "-1"), 0);
  EXPECT_EQ(CountVisibleGpus(dev, "0,7,1"), 1);  // CUDA stops at the first invalid index
  EXPECT_EQ(CountVisibleGpus(dev, "GPU-8f6c1d2e,MIG-1a2b"), 2);
  EXPECT_EQ(CountVisibleGpus(FakeDev("dev0", 0), nullptr), 0);
  EXPECT_EQ(CountVisibleGpus("/nonexistent/dev", nullptr), 0);
}

TEST(BackendChoiceTest, AutoPicksNcclOnlyWithAGpuPerLocalProcess) {
  EXPECT_EQ(ChooseLauncherBackend("auto", 0, 1), Backend::kGloo);
  EXPECT_EQ(ChooseLauncherBackend("auto", 8, 8), Backend::kNccl);
  EXPECT_EQ(ChooseLauncherBackend("auto", 8, 1), Backend::kNccl);
  EXPECT_EQ(ChooseLauncherBackend("auto", 2, 4), Backend::kGloo);
  EXPECT_EQ(ChooseLauncherBackend("gloo", 8, 8), Backend::kGloo);
  EXPECT_EQ(ChooseLauncherBackend("nccl", 4, 4), Backend::kNccl);
  EXPECT_EQ(BackendName(Backend::kNccl), "nccl");
}

TEST(BackendChoiceTest, ExplicitNcclWithoutEnoughGpusAndUnknownNamesAreRejected) {
  ExpectErrorContains([] { ChooseLauncherBackend("nccl", 2, 4); }, ErrorCode::kInvalidArgument,
                      {"--backend=nccl", "4 processes per node need one GPU each", "2 are visible"});
  ExpectErrorContains([] { ChooseLauncherBackend("mpi", 0, 1); }, ErrorCode::kInvalidArgument,
                      {"unknown backend 'mpi'", "gloo or nccl"});
}

TEST(BackendChoiceTest, RankDefaultsFollowTheTensorsDeviceAndMismatchesFail) {
  EXPECT_EQ(ChooseRankBackend(nullptr, Device::Cuda(0)), Backend::kNccl);
  EXPECT_EQ(ChooseRankBackend("", Device::Cpu(0)), Backend::kGloo);
  EXPECT_EQ(ChooseRankBackend("nccl", Device::Cuda(3)), Backend::kNccl);
  EXPECT_EQ(ChooseRankBackend("gloo", Device::Cpu(0)), Backend::kGloo);
  ExpectErrorContains([] { ChooseRankBackend("nccl", Device::Cpu(0)); }, ErrorCode::kInvalidArgument,
                      {"TESSEL_BACKEND=nccl", "cpu:0", "CUDA tensors only"});
  ExpectErrorContains([] { ChooseRankBackend("gloo", Device::Cuda(1)); }, ErrorCode::kInvalidArgument,
                      {"gloo cannot move tensors on cuda:1"});
  ExpectErrorContains([] { ChooseRankBackend("ucc", Device::Cuda(1)); }, ErrorCode::kInvalidArgument,
                      {"TESSEL_BACKEND", "unknown backend 'ucc'"});
}

}  // namespace
}  // namespace tessel::comm
