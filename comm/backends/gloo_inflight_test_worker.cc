// Runs in every process of a tessel-run job (gloo_inflight_test.sh runs it once per scenario): the last
// rank's process dies (std::_Exit, no goodbye) while a large payload is in flight to or from it, and every
// other rank's call must fail at once with kAborted naming it, not wait out the 60 s group timeout.
// Scenarios (argv[1]): all_gather, broadcast, broadcast_from_dying, reduce_scatter, all_reduce, all_to_all,
// send (rank 0 sends to the dying rank, which never posts its receive), recv (rank 0 receives from the dying
// rank mid-payload; recv_small: 16 MB, death 20 ms in).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "comm/backends/gloo.h"
#include "core/base/error.h"
#include "core/base/testing/expect_error.h"
#include "core/tensor/factory.h"

namespace tessel::comm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string scenario;  // argv[1]
// 256 MB per rank, the death 150 ms in: the payload is still moving. broadcast_from_dying: the case that
// used to wait out the timeout inside gloo::broadcast (16 MB from the dying root, death 20 ms in).
bool Small() { return scenario == "broadcast_from_dying" || scenario == "recv_small"; }
int64_t Floats() { return Small() ? int64_t{4} << 20 : int64_t{64} << 20; }
int DeathMs() { return Small() ? 20 : 150; }

TEST(GlooInflightTest, PeerDyingMidPayloadFailsEveryWaitAtOnceNamingIt) {
  ProcessGroupPtr pg = InitProcessGroupFromEnv();
  pg->set_timeout(milliseconds(60000));
  ASSERT_GE(pg->size(), 2) << "needs 2 ranks";
  const int last = pg->size() - 1, w = pg->size();
  const int64_t kFloats = Floats();
  // Allocated before the clock starts. The call repeats until it fails, so the death lands in one of them
  // (mostly mid-payload: the transfers are nearly all of the time) whatever the machine's speed.
  const Tensor one = Ones({kFloats}), many = Ones({w * kFloats}), out_one = Zeros({kFloats}),
               out_many = Zeros({w * kFloats});
  pg->Barrier()->Wait();
  const bool p2p = scenario == "send" || scenario == "recv" || scenario == "recv_small";
  if (p2p && pg->rank() != 0 && pg->rank() != last) {  // not in the p2p: stay connected until it is over
    std::this_thread::sleep_for(milliseconds(3000));
    GTEST_SKIP() << "rank " << pg->rank() << " takes no part in the p2p scenario";
  }
  if (pg->rank() == last) {
    std::thread([] {
      std::this_thread::sleep_for(milliseconds(DeathMs()));
      std::_Exit(0);
    }).detach();
  }
  const auto start = Clock::now();
  auto once = [&] {
    if (scenario == "all_gather") {
      pg->AllGather(out_many, one)->Wait();
    } else if (scenario == "broadcast") {
      pg->Broadcast(one, 0)->Wait();
    } else if (scenario == "broadcast_from_dying") {
      pg->Broadcast(one, last)->Wait();
    } else if (scenario == "reduce_scatter") {
      pg->ReduceScatter(out_one, many, ReduceOp::kSum)->Wait();
    } else if (scenario == "all_to_all") {
      pg->AllToAll(out_many, many, {}, {})->Wait();
    } else if (scenario == "all_reduce") {
      pg->AllReduce(one, ReduceOp::kSum)->Wait();
    } else if (scenario == "send") {
      if (pg->rank() == 0) pg->Send(one, last, 3)->Wait();
      if (pg->rank() == last) std::this_thread::sleep_for(milliseconds(5000));  // never receives
    } else if (scenario == "recv" || scenario == "recv_small") {
      if (pg->rank() == 0) pg->Recv(out_one, last, 3)->Wait();
      if (pg->rank() == last) pg->Send(one, 0, 3)->Wait();
    } else {
      TESSEL_FAIL(ErrorCode::kInvalidArgument, "unknown scenario ", scenario);
    }
  };
  auto run = [&] {
    while (Clock::now() - start < std::chrono::seconds(30)) once();
  };
  ::tessel::testing::ExpectErrorContains(run, ErrorCode::kAborted,
                                         {Str(last, " (global ", last, ")"), "closed"});
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_LT(seconds, 10.0) << scenario << ": the 60 s timeout is what ended the wait";
  std::printf("%s: rank %d failed after %.2f s\n", scenario.c_str(), pg->rank(), seconds);
  // Still connected a moment, so a slower survivor finds the dead rank's connection closed, not this one's.
  std::this_thread::sleep_for(milliseconds(500));
}

}  // namespace
}  // namespace tessel::comm

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc > 1) tessel::comm::scenario = argv[1];
  return RUN_ALL_TESTS();
}
