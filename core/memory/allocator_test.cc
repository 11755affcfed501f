#include "core/memory/allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "core/base/error.h"
#include "core/base/testing/expect_error.h"

namespace tessel::memory {
namespace {

// Each test uses its own cpu slot so counts are exact regardless of order.
TEST(AllocatorTest, LiveAndPeakFollowAllocationsPerLedger) {
  const Device d = Device::Cpu(100);
  ResetPeaks(d);
  const DeviceStats before = Stats(d);
  {
    LedgerScope s(Ledger::kParams);
    auto a = Allocate(1000, d);
    EXPECT_EQ(Stats(d)[Ledger::kParams].live - before[Ledger::kParams].live, 1000);
    {
      LedgerScope s2(Ledger::kOptimState);
      auto b = Allocate(24, d);
      EXPECT_EQ(b->ledger(), Ledger::kOptimState);
      EXPECT_EQ(Stats(d)[Ledger::kOptimState].live, 24);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 64, 0u);
    }
    EXPECT_EQ(Stats(d)[Ledger::kOptimState].live, 0);
    EXPECT_EQ(Stats(d)[Ledger::kOptimState].peak, 24);
    EXPECT_EQ(Stats(d).total.peak, 1024);
  }
  EXPECT_EQ(Stats(d).total.live, 0);
  EXPECT_EQ(Stats(d)[Ledger::kParams].peak, 1000);
  ResetPeaks(d);
  EXPECT_EQ(Stats(d)[Ledger::kParams].peak, 0);
}

TEST(AllocatorTest, RetagMovesBytesBetweenLedgers) {
  const Device d = Device::Cpu(101);
  auto a = Allocate(512, d);  // default ledger: other
  EXPECT_EQ(Stats(d)[Ledger::kOther].live, 512);
  a->Retag(Ledger::kGrads);
  EXPECT_EQ(Stats(d)[Ledger::kOther].live, 0);
  EXPECT_EQ(Stats(d)[Ledger::kGrads].live, 512);
  EXPECT_EQ(Stats(d)[Ledger::kGrads].peak, 512);
  EXPECT_EQ(Stats(d).total.live, 512);
}

TEST(AllocatorTest, ReportNamesEveryLedger) {
  const Device d = Device::Cpu(102);
  auto a = Allocate(1 << 20, d);
  const std::string r = Report(d);
  for (const char* name : {"params", "grads", "optim", "activations", "comm", "other", "total", "cpu:102"}) {
    EXPECT_NE(r.find(name), std::string::npos) << name << "\n" << r;
  }
  EXPECT_NE(r.find("1.000"), std::string::npos) << r;
}

TEST(AllocatorTest, LargeFreedBlocksAreReusedAndNotCounted) {
  const Device d = Device::Cpu(103);
  EmptyCache();
  void* first = nullptr;
  {
    auto a = Allocate(3 << 20, d);
    first = a->data();
  }
  EXPECT_EQ(CachedHostBytes(), 3 << 20);
  EXPECT_EQ(Stats(d).total.live, 0);
  auto b = Allocate((3 << 20) - 100, d);  // same 1 MiB size class
  EXPECT_EQ(b->data(), first);
  EXPECT_EQ(CachedHostBytes(), 0);
  EXPECT_EQ(Stats(d).total.live, (3 << 20) - 100);
  EmptyCache();
}

TEST(AllocatorTest, MidSizeBlocksAreCachedIn64KiBClassesAndSmallOnesAreNot) {
  const Device d = Device::Cpu(104);
  EmptyCache();
  void* first = nullptr;
  {
    auto a = Allocate(200 << 10, d);  // 200 KiB: the 256 KiB class
    first = a->data();
    auto small = Allocate(60 << 10, d);  // below 64 KiB: straight to glibc
  }
  EXPECT_EQ(CachedHostBytes(), 256 << 10);
  auto b = Allocate((192 << 10) + 1, d);  // same class
  EXPECT_EQ(b->data(), first);
  EXPECT_EQ(CachedHostBytes(), 0);
  EXPECT_EQ(Stats(d).total.live, (192 << 10) + 1);
  EmptyCache();
}

// The kernel's transparent-huge-page mode: "always", "madvise" or "never" (the bracketed word of
// /sys/kernel/mm/transparent_hugepage/enabled), or "" where the file is missing.
std::string ThpMode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(in, line);
  const size_t open = line.find('['), close = line.find(']');
  return open == std::string::npos || close == std::string::npos ? "" : line.substr(open + 1, close - open - 1);
}

// The "THPeligible:" value of the /proc/self/smaps mapping that contains p, or -1 if none is found.
int ThpEligible(const void* p) {
  std::ifstream in("/proc/self/smaps");
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= a && a < hi;
    } else if (inside && line.rfind("THPeligible:", 0) == 0) {
      return std::stoi(line.substr(std::strlen("THPeligible:")));
    }
  }
  return -1;
}

TEST(AllocatorTest, BlocksOfTwoMiBAndMoreStartOnA2MiBBoundaryAndMayUseHugePages) {
  if (const char* env = std::getenv("TESSEL_THP_MEM_ALLOC_ENABLE"); env != nullptr && std::atoi(env) == 0) {
    GTEST_SKIP() << "TESSEL_THP_MEM_ALLOC_ENABLE=0 in this environment";
  }
  const Device d = Device::Cpu(105);
  EmptyCache();
  auto big = Allocate((3 << 20) + 7, d);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big->data()) % (uintptr_t{2} << 20), 0u);
  auto mid = Allocate(1 << 20, d);  // below 2 MiB: 64-byte alignment only
  EXPECT_EQ(reinterpret_cast<uintptr_t>(mid->data()) % 64, 0u);
  const std::string mode = ThpMode();
  if (mode != "always" && mode != "madvise") GTEST_SKIP() << "transparent huge pages are '" << mode << "' here";
  // In "madvise" mode only the allocator's MADV_HUGEPAGE makes the mapping eligible.
  EXPECT_EQ(ThpEligible(big->data()), 1) << "mode " << mode;
  big.reset();
  mid.reset();
  EmptyCache();
}

TEST(AllocatorTest, CudaWithoutBackendIsUnimplemented) {
  try {
    Allocate(16, Device::Cuda(0));
    FAIL();
  } catch (const tessel::Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos);
  }
}

// This binary installs no device backend: a CUDA allocation says how to get one.
TEST(AllocatorTest, CudaAllocationWithoutBackendIsUnimplementedNamingTheDevice) {
  tessel::testing::ExpectErrorContains([] { Allocate(16, Device::Cuda(3)); }, ErrorCode::kUnimplemented,
                                       {"no allocator registered for cuda:3", "CUDA"});
}

}  // namespace
}  // namespace tessel::memory
