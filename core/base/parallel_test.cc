// core/base/parallel_test.cc — ParallelFor: every index once in contiguous ranges of >= grain, the
// thread budget, each thread's own slice first (locality), nested calls inline, exceptions rethrown after
// all ranges, many concurrent callers; ParallelForClaimAhead: ranges of exactly grain, each thread told
// the range it runs next, single ranges stolen from a stalled thread, concurrent callers.
#include "core/base/parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <tuple>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace tessel {
namespace {

TEST(ParallelForTest, VisitsEveryIndexOnceInContiguousRangesOfAtLeastGrain) {
  for (int threads : {1, 2, 4}) {
    const NumThreadsGuard guard(threads);
    for (int64_t n : {1, 7, 100, 1001}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::mutex mu;
      std::vector<std::pair<int64_t, int64_t>> ranges;
      ParallelFor(5, 5 + n, 10, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i - 5)];
        std::lock_guard<std::mutex> lock(mu);
        ranges.emplace_back(b, e);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "index " << i;
      std::sort(ranges.begin(), ranges.end());
      for (size_t r = 0; r + 1 < ranges.size(); ++r) {
        EXPECT_EQ(ranges[r].second, ranges[r + 1].first);
        EXPECT_GE(ranges[r].second - ranges[r].first, 10) << "only the last range may be shorter than grain";
      }
    }
  }
}

TEST(ParallelForTest, EachThreadStartsOnItsOwnSliceAndStealsTheRest) {
  if (HardwareConcurrency() < 2) GTEST_SKIP() << "needs a pool worker (one core here)";
  // 8 chunks of 100 on 2 threads: the caller's slice is chunks 0-3, the worker's 4-7. Each thread holds
  // its first chunk until the other has started one (else one thread may run everything before the
  // other arrives), so both first claims are observed.
  const NumThreadsGuard guard(2);
  const std::thread::id caller = std::this_thread::get_id();
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> caller_ranges, worker_ranges;
  std::atomic<bool> caller_started{false}, worker_started{false};
  ParallelFor(0, 800, 1, [&](int64_t b, int64_t e) {
    const bool on_caller = std::this_thread::get_id() == caller;
    {
      std::lock_guard<std::mutex> lock(mu);
      (on_caller ? caller_ranges : worker_ranges).emplace_back(b, e);
    }
    std::atomic<bool>& mine = on_caller ? caller_started : worker_started;
    const std::atomic<bool>& other = on_caller ? worker_started : caller_started;
    if (!mine.exchange(true)) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!other && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    }
  });
  ASSERT_TRUE(worker_started.load()) << "no pool worker joined within 10 s";
  ASSERT_FALSE(caller_ranges.empty());
  EXPECT_EQ(caller_ranges.front(), std::make_pair(int64_t{0}, int64_t{100}));
  EXPECT_EQ(worker_ranges.front(), std::make_pair(int64_t{400}, int64_t{500}));
  for (const auto& [b, e] : worker_ranges) EXPECT_EQ(e - b, 100);
  EXPECT_EQ(caller_ranges.size() + worker_ranges.size(), 8u);
}

TEST(ParallelForTest, OneThreadBudgetRunsEverythingInlineOnTheCaller) {
  const NumThreadsGuard guard(1);
  int calls = 0;
  const std::thread::id self = std::this_thread::get_id();
  ParallelFor(0, 1 << 20, 1, [&](int64_t b, int64_t e) {
    ++calls;
    EXPECT_EQ(std::this_thread::get_id(), self);
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 1 << 20);
  });
  EXPECT_EQ(calls, 1);
}

TEST(ParallelForTest, NestedCallsRunInlineWithABudgetOfOne) {
  const NumThreadsGuard guard(2);
  std::atomic<int64_t> sum{0};
  std::atomic<int> inner_budget_above_one{0};
  ParallelFor(0, 64, 1, [&](int64_t b, int64_t e) {
    if (NumThreads() != 1) ++inner_budget_above_one;
    for (int64_t i = b; i < e; ++i) {
      ParallelFor(0, 100, 1, [&](int64_t ib, int64_t ie) { sum += ie - ib; });
    }
  });
  EXPECT_EQ(sum.load(), 64 * 100);
  EXPECT_EQ(inner_budget_above_one.load(), 0);
  EXPECT_EQ(NumThreads(), 2) << "the caller's budget is restored";
}

TEST(ParallelForTest, AnExceptionInOneRangeIsRethrownAfterEveryRangeRan) {
  const NumThreadsGuard guard(2);
  std::atomic<int64_t> visited{0};
  try {
    ParallelFor(0, 1000, 10, [&](int64_t b, int64_t e) {
      visited += e - b;
      if (b <= 500 && 500 < e) throw std::runtime_error("range holding 500");
    });
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& err) {
    EXPECT_STREQ(err.what(), "range holding 500");
  }
  EXPECT_EQ(visited.load(), 1000);
  EXPECT_EQ(NumThreads(), 2);
}

TEST(ParallelForTest, ConcurrentCallersFromRankThreadsEachGetTheirOwnResult) {
  std::vector<std::thread> ranks;
  std::vector<int64_t> sums(4, 0);
  for (int r = 0; r < 4; ++r) {
    ranks.emplace_back([r, &sums] {
      const NumThreadsGuard guard(2);
      for (int rep = 0; rep < 200; ++rep) {
        std::atomic<int64_t> sum{0};
        ParallelFor(0, 1000, 16, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) sum += i * (r + 1);
        });
        sums[static_cast<size_t>(r)] += sum.load();
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < 4; ++r) EXPECT_EQ(sums[static_cast<size_t>(r)], 200 * 499500 * (r + 1)) << "rank " << r;
}

TEST(ParallelForClaimAheadTest, RunsEveryRangeOnceAndNamesTheRangeEachThreadRunsNext) {
  for (int threads : {1, 2, 4}) {
    const NumThreadsGuard guard(threads);
    for (int64_t n : {1, 7, 100, 1001}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::mutex mu;
      std::map<std::thread::id, std::vector<std::tuple<int64_t, int64_t, int64_t>>> runs;  // per thread, in order
      ParallelForClaimAhead(5, 5 + n, 10, [&](int64_t b, int64_t e, int64_t next) {
        for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i - 5)];
        std::lock_guard<std::mutex> lock(mu);
        runs[std::this_thread::get_id()].emplace_back(b, e, next);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "index " << i;
      for (const auto& [id, seq] : runs) {
        for (size_t r = 0; r < seq.size(); ++r) {
          const auto [b, e, next] = seq[r];
          EXPECT_EQ(e - b, std::min<int64_t>(10, 5 + n - b)) << "every range is exactly grain but the last";
          EXPECT_EQ(next, r + 1 < seq.size() ? std::get<0>(seq[r + 1]) : 5 + n)
              << "threads " << threads << ", n " << n << ", range [" << b << ", " << e << ")";
        }
      }
    }
  }
}

TEST(ParallelForClaimAheadTest, AnIdleThreadStealsSingleRangesFromAStalledOne) {
  if (HardwareConcurrency() < 2) GTEST_SKIP() << "needs a pool worker (one core here)";
  // 32 ranges of 1 on 2 threads: the caller's slice is [0, 16), the worker's [16, 32). The caller stalls
  // in range 0, having claimed range 1 ahead, until the worker has run everything else: its own 16 and,
  // one at a time from the back, the caller's 15..2 (ParallelFor would hand it 4-range chunks).
  const NumThreadsGuard guard(2);
  const std::thread::id caller = std::this_thread::get_id();
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> caller_runs, worker_runs;  // (range, next)
  std::atomic<int> worker_done{0};
  std::atomic<bool> caller_started{false};
  ParallelForClaimAhead(0, 32, 1, [&](int64_t b, int64_t e, int64_t next) {
    EXPECT_EQ(e, b + 1);
    const bool on_caller = std::this_thread::get_id() == caller;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    if (on_caller && b == 0) {
      caller_started = true;
      while (worker_done.load() < 30 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    }
    // A worker that arrives before the caller's first claim must not steal its ranges 0 and 1.
    while (!on_caller && !caller_started && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    std::lock_guard<std::mutex> lock(mu);
    (on_caller ? caller_runs : worker_runs).emplace_back(b, next);
    if (!on_caller) ++worker_done;
  });
  ASSERT_EQ(worker_runs.size(), 30u) << "no pool worker joined within 10 s, or it did not steal";
  EXPECT_EQ(caller_runs, (std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {1, 32}}));
  for (int i = 0; i < 16; ++i) EXPECT_EQ(worker_runs[static_cast<size_t>(i)].first, 16 + i) << "its own slice first";
  for (int i = 16; i < 30; ++i) {
    EXPECT_EQ(worker_runs[static_cast<size_t>(i)].first, 31 - i) << "then the caller's, from the back";
  }
  EXPECT_EQ(worker_runs.back().second, 32);
}

TEST(ParallelForClaimAheadTest, ConcurrentCallersEachRunTheirOwnRangesInTheirOwnChains) {
  std::vector<std::thread> ranks;
  std::vector<int64_t> sums(4, 0), broken_chains(4, 0);
  for (int r = 0; r < 4; ++r) {
    ranks.emplace_back([r, &sums, &broken_chains] {
      const NumThreadsGuard guard(2);
      for (int rep = 0; rep < 200; ++rep) {
        std::atomic<int64_t> sum{0};
        std::mutex mu;
        std::map<std::thread::id, std::vector<std::pair<int64_t, int64_t>>> runs;  // (begin, next) per thread
        ParallelForClaimAhead(0, 1000, 16, [&](int64_t b, int64_t e, int64_t next) {
          for (int64_t i = b; i < e; ++i) sum += i * (r + 1);
          std::lock_guard<std::mutex> lock(mu);
          runs[std::this_thread::get_id()].emplace_back(b, next);
        });
        sums[static_cast<size_t>(r)] += sum.load();
        for (const auto& [id, seq] : runs) {
          for (size_t i = 0; i < seq.size(); ++i) {
            const int64_t successor = i + 1 < seq.size() ? seq[i + 1].first : 1000;
            if (seq[i].second != successor) ++broken_chains[static_cast<size_t>(r)];
          }
        }
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(sums[static_cast<size_t>(r)], 200 * 499500 * (r + 1)) << "rank " << r;
    EXPECT_EQ(broken_chains[static_cast<size_t>(r)], 0)
        << "rank " << r << ": a range named a successor its thread did not run next";
  }
}

TEST(ParallelForClaimAheadTest, AnExceptionIsRethrownAfterEveryRangeRan) {
  const NumThreadsGuard guard(2);
  std::atomic<int64_t> visited{0};
  try {
    ParallelForClaimAhead(0, 100, 3, [&](int64_t b, int64_t e, int64_t) {
      visited += e - b;
      if (b <= 50 && 50 < e) throw std::runtime_error("range holding 50");
    });
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& err) {
    EXPECT_STREQ(err.what(), "range holding 50");
  }
  EXPECT_EQ(visited.load(), 100);
}

}  // namespace
}  // namespace tessel
