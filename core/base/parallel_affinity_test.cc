// core/base/parallel_affinity_test.cc — the thread budget follows the process's CPU affinity mask, not
// the machine: a process confined to one CPU (taskset -c N, a one-CPU cpuset) gets a default budget of 1
// and runs ParallelFor inline. Its own main(): the mask is narrowed before anything in tessel counts CPUs
// (HardwareConcurrency() counts once).
#include <gtest/gtest.h>
#include <sched.h>

#include <thread>
#include <vector>

#include "core/base/parallel.h"

namespace tessel {
namespace {

int machine_cpus = 0;  // online CPUs, as std::thread counts them

TEST(ParallelAffinityTest, DefaultBudgetIsTheAffinityMaskNotTheMachine) {
  if (machine_cpus < 2) GTEST_SKIP() << "one CPU here: the mask and the machine agree";
  EXPECT_EQ(HardwareConcurrency(), 1);
  EXPECT_EQ(NumThreads(), 1);
  const std::thread::id self = std::this_thread::get_id();
  int calls = 0;
  ParallelFor(0, 1 << 16, 1, [&](int64_t b, int64_t e) {
    ++calls;
    EXPECT_EQ(std::this_thread::get_id(), self);
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 1 << 16);
  });
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace tessel

int main(int argc, char** argv) {
  tessel::machine_cpus = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (!CPU_ISSET(c, &set)) continue;
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(c, &one);
      if (sched_setaffinity(0, sizeof(one), &one) != 0) tessel::machine_cpus = 1;  // cannot narrow: skip
      break;
    }
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
