// checkpoint/async_save_test.cc — AsyncSaver: snapshot semantics, one save in flight, errors on the
// future, and background collectives that never collide with the training's.
#include "checkpoint/async_save.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "checkpoint/load.h"
#include "checkpoint/metadata.h"
#include "checkpoint/storage.h"
#include "checkpoint/testing/checkpoint_testing.h"
#include "checkpoint/testing/checkpoint_testing_ranks.h"
#include "core/base/error.h"
#include "core/base/testing/expect_error.h"
#include "dtensor/dtensor_impl.h"

namespace tessel::checkpoint {
namespace {

using testing::FreshDir;
using testing::Layout;
using testing::MakeMesh;
using testing::Place;

const Layout kTwoShards{2, {2}, "S(0)"};

TEST(AsyncSaveTest, SavesTheSnapshotTakenWhenSaveReturned) {
  const std::string dir = FreshDir("async_snapshot");
  comm::RunRanks(
      2,
      [&](comm::ProcessGroupPtr world) {
        const auto mesh = MakeMesh(world, kTwoShards);
        StateDict sd{{"w", Place(Full({6, 4}, 1.0), mesh, kTwoShards)}, {"b", Full({5}, 2.0)}, {"step", int64_t{7}}};
        AsyncSaver saver(world);
        SaveOptions slow{.fsync = false};
        slow.on_stage = [](SaveStage s) {
          if (s == SaveStage::kDataWritten) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        };
        std::shared_future<SaveResult> f = saver.Save(sd, dir, slow);
        // Training goes on: change everything in place while the writer is still busy.
        FillInPlace(dtensor::GetDTensorImpl(std::get<Tensor>(sd["w"]), "test").local(), -1.0);
        FillInPlace(std::get<Tensor>(sd["b"]), -2.0);
        world->AllReduce(Full({3}, 1.0), comm::ReduceOp::kSum)->Wait();  // the training's own collectives
        EXPECT_EQ(f.get().total_bytes, 6 * 4 * 4 + 5 * 4);
      },
      testing::TestRanks());
  StateDict back{{"w", Zeros({6, 4})}, {"b", Zeros({5})}, {"step", int64_t{0}}};
  Load(back, dir);
  EXPECT_EQ(std::get<Tensor>(back["w"]).ToVector<float>(), std::vector<float>(24, 1.0f));
  EXPECT_EQ(std::get<Tensor>(back["b"]).ToVector<float>(), std::vector<float>(5, 2.0f));
  EXPECT_EQ(std::get<int64_t>(back["step"]), 7);
}

TEST(AsyncSaveTest, ASecondSaveWaitsForTheFirst) {
  const std::string dir1 = FreshDir("async_first"), dir2 = FreshDir("async_second");
  AsyncSaver saver(nullptr);
  SaveOptions slow{.fsync = false};
  slow.on_stage = [](SaveStage s) {
    if (s == SaveStage::kDataWritten) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  };
  StateDict sd{{"b", Full({5}, 2.0)}};
  std::shared_future<SaveResult> first = saver.Save(sd, dir1, slow);
  EXPECT_EQ(first.wait_for(std::chrono::seconds(0)), std::future_status::timeout);  // still writing
  std::shared_future<SaveResult> second = saver.Save(sd, dir2, {.fsync = false});
  EXPECT_EQ(first.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_GE(saver.last_stall_seconds(), 0.05);  // the second call waited for the first
  saver.Wait();
  EXPECT_EQ(second.get().total_bytes, 20);
}

TEST(AsyncSaveTest, WriterErrorsSurfaceOnTheFutureOfEveryRank) {
  const std::string dir = FreshDir("async_error");
  comm::RunRanks(
      2,
      [&](comm::ProcessGroupPtr world) {
        AsyncSaver saver(world);
        StateDict sd{{"b", Full({64}, 1.0)}};
        SaveOptions failing{.fsync = false};
        failing.on_stage = [rank = world->rank()](SaveStage s) {
          if (s == SaveStage::kDataWritten && rank == 0) TESSEL_FAIL(ErrorCode::kFailedPrecondition, "disk full");
        };
        sd["c"] = Full({64}, 1.0);                                        // two tensors: both ranks write a file
        std::shared_future<SaveResult> f = saver.Save(sd, dir, failing);  // returns: the failure is later
        try {
          f.get();
          ADD_FAILURE() << "expected the save to fail";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), world->rank() == 0 ? ErrorCode::kFailedPrecondition : ErrorCode::kAborted) << e.what();
          EXPECT_NE(std::string(e.what()).find("disk full"), std::string::npos) << e.what();
        }
        EXPECT_EQ(saver.Save(sd, dir, {.fsync = false}).get().total_bytes, 512);  // the saver still works
      },
      testing::TestRanks());
  StateDict back{{"b", Zeros({64})}, {"c", Zeros({64})}};
  Load(back, dir);
}

// A snapshot that fails on one rank (out of memory for its staging) fails Save on every rank at once, with
// the previous checkpoint still loadable; it used to throw on that rank only while the others' workers
// waited for it until the timeout, with metadata.json moved aside.
TEST(AsyncSaveTest, ASnapshotFailureOnOneRankFailsSaveOnEveryRankAndKeepsThePreviousCheckpoint) {
  const std::string dir = FreshDir("async_snapshot_error");
  comm::RunRanks(
      2,
      [&](comm::ProcessGroupPtr world) {
        AsyncSaver saver(world);
        StateDict sd{{"b", Full({64}, 1.0)}, {"c", Full({64}, 1.0)}};
        saver.Save(sd, dir, {.fsync = false}).get();
        SaveOptions failing{.fsync = false};
        failing.on_stage = [rank = world->rank()](SaveStage s) {
          if (s == SaveStage::kSnapshotted && rank == 1) TESSEL_FAIL(ErrorCode::kFailedPrecondition, "staging: out of memory");
        };
        StateDict twos{{"b", Full({64}, 2.0)}, {"c", Full({64}, 2.0)}};
        ::tessel::testing::ExpectErrorContains(
            [&] { saver.Save(twos, dir, failing); },
            world->rank() == 1 ? ErrorCode::kFailedPrecondition : ErrorCode::kAborted,
            {"staging: out of memory"});
        world->Barrier()->Wait();
        EXPECT_TRUE(PathExists(JoinPath(dir, kMetadataFileName)));  // the previous index was put back
        StateDict ones{{"b", Zeros({64})}, {"c", Zeros({64})}};
        Load(ones, dir);
        EXPECT_EQ(std::get<Tensor>(ones["b"]).ToVector<float>(), std::vector<float>(64, 1.0f));
        world->Barrier()->Wait();
        EXPECT_EQ(saver.Save(twos, dir, {.fsync = false}).get().total_bytes, 512);  // the saver still works
      },
      testing::TestRanks());
  StateDict back{{"b", Zeros({64})}, {"c", Zeros({64})}};
  Load(back, dir);
  EXPECT_EQ(std::get<Tensor>(back["b"]).ToVector<float>(), std::vector<float>(64, 2.0f));
}

TEST(AsyncSaveTest, PlanningErrorsAreThrownBySaveItself) {
  const std::string dir = FreshDir("async_plan_error");
  AsyncSaver saver(nullptr);
  StateDict sd{{"b", Tensor()}};
  try {
    saver.Save(sd, dir);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'b' is an undefined tensor"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessel::checkpoint
