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
  pg->Barrier()->Wait();
  if (pg->rank() == last) {
    std::thread([] {
      std::this_thread::sleep_for(milliseconds(DeathMs()));
      std::_Exit(0);
    }).detach();
  }
  const int64_t kFloats = Floats();
  const auto start = Clock::now();
  auto run = [&] {
    if (scenario == "all_gather") {
      pg->AllGather(Zeros({w * kFloats}), Ones({kFloats}))->Wait();
    } else if (scenario == "broadcast") {
      pg->Broadcast(Ones({kFloats}), 0)->Wait();
    } else if (scenario == "broadcast_from_dying") {
      pg->Broadcast(Ones({kFloats}), last)->Wait();
    } else if (scenario == "reduce_scatter") {
      pg->ReduceScatter(Zeros({kFloats}), Ones({w * kFloats}), ReduceOp::kSum)->Wait();
    } else if (scenario == "all_to_all") {
      pg->AllToAll(Zeros({w * kFloats}), Ones({w * kFloats}), {}, {})->Wait();
    } else if (scenario == "all_reduce") {
      pg->AllReduce(Ones({kFloats}), ReduceOp::kSum)->Wait();
    } else if (scenario == "send") {
      if (pg->rank() == 0) pg->Send(Ones({kFloats}), last, 3)->Wait();
      if (pg->rank() == last) std::this_thread::sleep_for(milliseconds(5000));  // never receives
      if (pg->rank() != 0) pg->Barrier()->Wait();  // the others: their next call meets the death
    } else if (scenario == "recv" || scenario == "recv_small") {
      if (pg->rank() == 0) pg->Recv(Zeros({kFloats}), last, 3)->Wait();
      if (pg->rank() == last) pg->Send(Ones({kFloats}), 0, 3)->Wait();
      if (pg->rank() != 0) pg->Barrier()->Wait();
    } else {
      FAIL() << "unknown scenario " << scenario;
    }
  };
  ::tessel::testing::ExpectErrorContains(run, ErrorCode::kAborted,
                                         {Str(last, " (global ", last, ")"), "closed"});
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_LT(seconds, 10.0) << scenario << ": the 60 s timeout is what ended the wait";
  std::printf("%s: rank %d failed after %.2f s\n", scenario.c_str(), pg->rank(), seconds);
}

}  // namespace
}  // namespace tessel::comm

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc > 1) tessel::comm::scenario = argv[1];
  return RUN_ALL_TESTS();
}
