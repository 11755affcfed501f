// pipelining/simulator_test.cc — the simulated bubble, makespan and in-flight activations against the closed
// forms of the papers (simulator.h), computed independently here; the timeline against the dependencies.
#include "pipelining/simulator.h"

#include <gtest/gtest.h>

#include "core/base/testing/expect_error.h"
#include "pipelining/lowering.h"
#include "pipelining/schedules.h"

namespace tessel::pipelining {
namespace {

using ::tessel::testing::ExpectErrorContains;

SimulationResult SimulateKind(ScheduleKind k, int p, int v, int m, const ActionCosts& costs = {}) {
  return Simulate(GenerateSchedule(k, p, p * v, m), StageToRankMap(k, p, p * v), costs);
}

// p in {2, 4, 8}, m in {p, 2p, 4p}: the acceptance grid of the issue.
template <typename Fn>
void ForAcceptanceGrid(Fn&& fn) {
  for (int p : {2, 4, 8}) {
    for (int m : {p, 2 * p, 4 * p}) {
      SCOPED_TRACE(Str("p=", p, " m=", m));
      fn(p, m);
    }
  }
}

TEST(SimulatorTest, OneFOneBBubbleIsTheClosedForm) {
  ForAcceptanceGrid([](int p, int m) {
    const SimulationResult r = SimulateKind(ScheduleKind::k1F1B, p, 1, m);
    EXPECT_NEAR(r.bubble, static_cast<double>(p - 1) / (m + p - 1), 1e-12);
    EXPECT_NEAR(r.bubble, BubbleFraction1F1B(p, m), 1e-12);
    EXPECT_DOUBLE_EQ(r.makespan, (m + p - 1) * 3.0);  // (m + p - 1)(F + B), B = I + W
    for (double idle : r.idle_fraction) EXPECT_NEAR(idle, r.bubble, 1e-12);
  });
}

TEST(SimulatorTest, GPipeHasTheSameBubbleAsOneFOneB) {
  ForAcceptanceGrid([](int p, int m) {
    EXPECT_NEAR(SimulateKind(ScheduleKind::kGPipe, p, 1, m).bubble, static_cast<double>(p - 1) / (m + p - 1), 1e-12);
  });
}

TEST(SimulatorTest, InterleavedBubbleShrinksByTheStagesPerRank) {
  for (int v : {2, 3, 4}) {
    ForAcceptanceGrid([v](int p, int m) {
      SCOPED_TRACE(Str("v=", v));
      const SimulationResult r = SimulateKind(ScheduleKind::kInterleaved1F1B, p, v, m);
      EXPECT_NEAR(r.bubble, static_cast<double>(p - 1) / (v * m + p - 1), 1e-12);
      EXPECT_NEAR(r.bubble, BubbleFractionInterleaved(p, v, m), 1e-12);
    });
  }
}

TEST(SimulatorTest, ZeroBubbleH1BubbleIsTheClosedFormAndAThirdOfOneFOneBs) {
  ForAcceptanceGrid([](int p, int m) {
    const SimulationResult zb = SimulateKind(ScheduleKind::kInterleavedZeroBubble, p, 1, m);
    const SimulationResult ob = SimulateKind(ScheduleKind::k1F1B, p, 1, m);
    EXPECT_NEAR(zb.bubble, static_cast<double>(p - 1) / (3 * m + p - 1), 1e-12);
    EXPECT_NEAR(zb.bubble, BubbleFractionZeroBubbleH1(p, m), 1e-12);
    // Qi et al. 2023: idle time (p-1)(F+I-W) against 1F1B's (p-1)(F+I+W), i.e. a third with unit costs.
    const double work = 3.0 * m;
    EXPECT_DOUBLE_EQ(zb.makespan - work, (p - 1) * 1.0);
    EXPECT_DOUBLE_EQ(ob.makespan - work, (p - 1) * 3.0);
    EXPECT_LT(zb.bubble, ob.bubble);
  });
}

TEST(SimulatorTest, ClosedFormsHoldForUnequalCosts) {
  for (ActionCosts c : {ActionCosts{.forward = 2, .backward_input = 1, .backward_weight = 1},
                        ActionCosts{.forward = 1, .backward_input = 3, .backward_weight = 0.5},
                        ActionCosts{.forward = 2, .backward_input = 3, .backward_weight = 1}}) {
    ForAcceptanceGrid([&](int p, int m) {
      SCOPED_TRACE(Str("F=", c.forward, " I=", c.backward_input, " W=", c.backward_weight));
      const double step = c.forward + c.backward_input + c.backward_weight;
      EXPECT_DOUBLE_EQ(SimulateKind(ScheduleKind::k1F1B, p, 1, m, c).makespan, (m + p - 1) * step);
      const SimulationResult zb = SimulateKind(ScheduleKind::kInterleavedZeroBubble, p, 1, m, c);
      EXPECT_DOUBLE_EQ(zb.makespan, m * step + (p - 1) * (c.forward + c.backward_input - c.backward_weight));
      EXPECT_NEAR(zb.bubble, BubbleFractionZeroBubbleH1(p, m, c), 1e-12);
    });
  }
}

TEST(SimulatorTest, TransferLatencyAddsTwoHopsPerBoundaryToGPipe) {
  for (double t : {0.5, 2.0}) {
    const int p = 4, m = 8;
    const Program compute = GenerateSchedule(ScheduleKind::kGPipe, p, p, m);
    const std::vector<int> where = StageToRankMap(ScheduleKind::kGPipe, p, p);
    const ActionCosts c{.transfer = t};
    const double expected = (m + p - 1) * 3.0 + 2 * (p - 1) * t;  // forward and backward cross p-1 boundaries
    EXPECT_DOUBLE_EQ(Simulate(compute, where, c).makespan, expected) << "t=" << t;
    EXPECT_DOUBLE_EQ(Simulate(LowerProgram(compute, where, m, {}), where, c).makespan, expected) << "t=" << t;
  }
}

TEST(SimulatorTest, LoweredProgramsCostTheSameAsTheirComputeOrder) {
  for (ScheduleKind k : AllScheduleKinds()) {
    const int v = (k == ScheduleKind::kGPipe || k == ScheduleKind::k1F1B) ? 1 : 2, p = 4, m = 8;
    const Program compute = GenerateSchedule(k, p, p * v, m);
    const std::vector<int> where = StageToRankMap(k, p, p * v);
    EXPECT_DOUBLE_EQ(Simulate(LowerProgram(compute, where, m, {.fsdp = true}), where).makespan,
                     Simulate(compute, where).makespan)
        << ScheduleName(k);
  }
}

TEST(SimulatorTest, PeakInFlightActivationsAreTheClosedForms) {
  ForAcceptanceGrid([](int p, int m) {
    EXPECT_EQ(SimulateKind(ScheduleKind::kGPipe, p, 1, m).peak_in_flight, std::vector<int>(p, m));
    std::vector<int> one_f_one_b;
    for (int s = 0; s < p; ++s) one_f_one_b.push_back(p - s);
    EXPECT_EQ(SimulateKind(ScheduleKind::k1F1B, p, 1, m).peak_in_flight, one_f_one_b);
  });
}

TEST(SimulatorTest, TimelineRespectsProgramOrderAndDependencies) {
  const int p = 4, m = 8;
  const Program compute = GenerateSchedule(ScheduleKind::kZBVZeroBubble, p, 2 * p, m);
  const std::vector<int> where = StageToRankMap(ScheduleKind::kZBVZeroBubble, p, 2 * p);
  const ActionCosts c{.forward = 1, .backward_input = 2, .backward_weight = 1, .transfer = 0.25};
  const SimulationResult r = Simulate(compute, where, c);
  ASSERT_EQ(r.timeline.size(), static_cast<size_t>(2 * p * m * 3));
  std::map<Action, TimedAction> at;
  std::vector<double> last_end(p, 0);
  for (const TimedAction& t : r.timeline) {
    EXPECT_GE(t.start, last_end[t.rank]) << ToString(t.action);  // one action at a time, in order
    EXPECT_DOUBLE_EQ(t.end - t.start, c.Of(t.action.kind));
    last_end[t.rank] = t.end;
    at[t.action] = t;
  }
  for (const auto& [a, t] : at) {
    const int s = a.stage, mb = *a.microbatch;
    auto hop = [&](int other) { return where[other] != where[s] ? c.transfer : 0.0; };
    if (a.kind == ActionKind::kForward && s > 0) EXPECT_GE(t.start, at[F(s - 1, mb)].end + hop(s - 1)) << ToString(a);
    if (a.kind == ActionKind::kBackwardInput && s + 1 < 2 * p) {
      EXPECT_GE(t.start, at[I(s + 1, mb)].end + hop(s + 1)) << ToString(a);
    }
    if (a.kind == ActionKind::kBackwardWeight) EXPECT_GE(t.start, at[I(s, mb)].end) << ToString(a);
  }
  double busy0 = 0;
  for (const TimedAction& t : r.timeline) busy0 += t.rank == 0 ? t.end - t.start : 0;
  EXPECT_DOUBLE_EQ(r.busy[0], busy0);
  EXPECT_DOUBLE_EQ(r.busy[0], 2.0 * m * (1 + 2 + 1));
}

TEST(SimulatorTest, ProgramThatCannotFinishIsRejected) {
  const Program crossed = {ParseRankProgram("0F0,0B0,0F1,0B1"), ParseRankProgram("1F1,1B1,1F0,1B0")};
  ExpectErrorContains([&] { Simulate(crossed, std::vector<int>{0, 1}); }, ErrorCode::kInvalidArgument,
                      {"the program cannot finish", "rank 0, action 1: 0B0", "rank 1, action 0: 1F1"});
  ExpectErrorContains([&] { Simulate(crossed, std::vector<int>{0}); }, ErrorCode::kInvalidArgument,
                      "action on stage 1 but stage_to_rank has 1 stages");
}

TEST(SimulatorTest, LockstepRejectsACycleOfBlockingRecvs) {
  const Program stuck = {ParseRankProgram("0RECV_B0,0F0,0SEND_F0,0B0"), ParseRankProgram("1RECV_F0,1F0,1B0,1SEND_B0")};
  ExpectErrorContains([&] { SimulateLockstep(stuck, std::vector<int>{0, 1}); }, ErrorCode::kInvalidArgument,
                      {"no rank can progress", "rank 0, action 0: 0RECV_B0", "rank 1, action 0: 1RECV_F0"});
}

}  // namespace
}  // namespace tessel::pipelining
