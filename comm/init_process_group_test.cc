// comm/init_process_group_test.cc — a rank's process group follows TESSEL_BACKEND and its device; nccl
// fails clearly where it cannot work (not compiled in, or no GPU), never by hanging.
#include "comm/init_process_group.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "comm/backend_choice.h"
#include "core/base/testing/expect_error.h"

namespace tessel::comm {
namespace {

using testing::ExpectErrorContains;

TEST(InitProcessGroupTest, NcclWithHostTensorsIsRejectedBeforeAnyRendezvous) {
  // The rule InitProcessGroupForDevice applies (comm/backend_choice.h): the environment names the backend.
  EXPECT_EQ(ChooseRankBackend("gloo", Device::Cpu(0)), Backend::kGloo);
  EXPECT_EQ(ChooseRankBackend(nullptr, Device::Cpu(0)), Backend::kGloo);
  ::setenv("TESSEL_BACKEND", "nccl", 1);
  ExpectErrorContains([] { InitProcessGroupForDevice(Device::Cpu(0)); }, ErrorCode::kInvalidArgument,
                      {"TESSEL_BACKEND=nccl", "cpu:0"});
  ::unsetenv("TESSEL_BACKEND");
}

TEST(InitProcessGroupTest, CudaTensorsDefaultToNcclWhichSaysWhyItCannotStartHere) {
  ::unsetenv("TESSEL_BACKEND");
  ::setenv("RANK", "0", 1);
  ::setenv("WORLD_SIZE", "1", 1);
  ::setenv("MASTER_PORT", "0", 1);
  if (NcclBuilt()) {
    // Built with the toolkit: on a machine without a GPU the nccl backend refuses before the store.
    ::setenv("CUDA_VISIBLE_DEVICES", "", 1);  // before the CUDA runtime's first use in this process
    ExpectErrorContains([] { InitProcessGroupForDevice(Device::Cuda(0)); }, ErrorCode::kFailedPrecondition,
                        {"nccl", "no CUDA device is visible"});
  } else {
    ExpectErrorContains([] { InitProcessGroupForDevice(Device::Cuda(0)); }, ErrorCode::kUnimplemented,
                        {"built without a CUDA toolkit", "cuda:0"});
  }
}

}  // namespace
}  // namespace tessel::comm
