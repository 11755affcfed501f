// core/dispatch/profiler_test.cc — OpProfiler's rows and, with record_events, its per-call timeline: one
// event per kernel call in call order, each inside the wall-clock window around its Dispatch, with the
// durations the rows add up; nothing recorded without record_events or outside the profiler's scope.
#include "core/dispatch/profiler.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "core/dispatch/dispatcher.h"
#include "core/dispatch/op.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

// Sleeps for the number of milliseconds in attr "ms": a kernel of known, distinct duration.
const OpDef& kSleep = RegisterOp({
    .name = "test_profiler_sleep",
    .cpu = [](std::span<const Tensor> in, const Attrs& attrs) -> TensorList {
      std::this_thread::sleep_for(std::chrono::milliseconds(attrs.GetInt("ms")));
      return {in[0]};
    },
});

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

TEST(OpProfilerTest, RecordsOneEventPerCallInsideItsDispatchWindow) {
  const Tensor x = Zeros({2});
  std::vector<std::pair<int64_t, int64_t>> windows;
  OpProfiler prof(nullptr, /*by_shape=*/false, /*record_events=*/true);
  for (int64_t ms : {3, 1, 2}) {
    Attrs attrs;
    attrs.Set("ms", ms);
    const int64_t before = NowNs();
    Dispatch(kSleep, std::vector<Tensor>{x}, attrs);
    windows.emplace_back(before, NowNs());
  }
  const auto& events = prof.events();
  ASSERT_EQ(events.size(), 3u);
  double total = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].op, "test_profiler_sleep");
    EXPECT_GE(events[i].start_ns, windows[i].first);
    EXPECT_LE(events[i].start_ns + events[i].duration_ns, windows[i].second);
    total += events[i].duration_ns / 1e9;
  }
  // each call at least its own sleep (3, 1, 2 ms), in call order
  EXPECT_GE(events[0].duration_ns, 3'000'000);
  EXPECT_GE(events[1].duration_ns, 1'000'000);
  EXPECT_GE(events[2].duration_ns, 2'000'000);
  EXPECT_EQ(prof.rows().at("test_profiler_sleep").calls, 3);
  EXPECT_NEAR(prof.rows().at("test_profiler_sleep").seconds, total, 1e-6);
}

TEST(OpProfilerTest, KeepsNoEventsUnlessAsked) {
  const Tensor x = Zeros({2});
  Attrs attrs;
  attrs.Set("ms", int64_t{0});
  OpProfiler prof;
  Dispatch(kSleep, std::vector<Tensor>{x}, attrs);
  EXPECT_EQ(prof.rows().at("test_profiler_sleep").calls, 1);
  EXPECT_TRUE(prof.events().empty());
}

}  // namespace
}  // namespace tessel
