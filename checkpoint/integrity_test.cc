// checkpoint/integrity_test.cc — corruption, missing files, other versions, interrupted and racing saves,
// collective failures and key errors: each is a tessel::Error with the right code naming file and FQN,
// never a crash and never wrong data.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "checkpoint/load.h"
#include "checkpoint/metadata.h"
#include "checkpoint/save.h"
#include "checkpoint/storage.h"
#include "checkpoint/verify.h"
#include "checkpoint/testing/checkpoint_testing.h"
#include "checkpoint/testing/checkpoint_testing_ranks.h"
#include "core/base/error.h"
#include "dtensor/dtensor.h"
#include "core/base/testing/expect_error.h"

namespace tessel::checkpoint {
namespace {

using testing::FreshDir;
using testing::Layout;
using testing::MakeMesh;
using testing::Pattern;
using testing::Place;

using ::tessel::testing::ExpectErrorContains;

const Layout kTwoShards{2, {2}, "S(0)"};

// Saves {"w": [8, 16] float32 = Full(value), "b": [16]} from 2 ranks as [S(0)] (64-byte checksum blocks).
void SaveTwoRanks(const std::string& dir, double value, SaveOptions options = {}) {
  options.fsync = false;
  options.checksum_block_bytes = 64;
  comm::RunRanks(
      2,
      [&](comm::ProcessGroupPtr world) {
        const auto mesh = MakeMesh(world, kTwoShards);
        StateDict sd{{"w", Place(Full({8, 16}, value), mesh, kTwoShards)}, {"b", Full({16}, value + 1)}};
        Save(sd, dir, world, options);
      },
      testing::TestRanks());
}

StateDict DenseTarget() { return {{"w", Zeros({8, 16})}, {"b", Zeros({16})}}; }

void Overwrite(const std::string& path, int64_t offset, char byte) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(offset);
  f.put(byte);
}

TEST(IntegrityTest, FlippedByteIsDataLossNamingFileFqnChunkAndBlock) {
  const std::string dir = FreshDir("flip");
  SaveTwoRanks(dir, 1.0);
  const Metadata md = ReadMetadata(dir);
  const ChunkMeta& second = md.tensors.at("w").chunks.at(1);
  const std::string file = md.files[static_cast<size_t>(second.where.file)].name;
  Overwrite(JoinPath(dir, file), second.where.byte_offset + 70, 'X');  // inside block 1 of rows 4-7
  StateDict sd = DenseTarget();
  ExpectErrorContains([&] { Load(sd, dir); }, ErrorCode::kDataLoss,
              {"checksum mismatch", file, "'w' chunk [4:8, 0:16]", "block 1"});
  // A rank whose box avoids the corrupt block still loads (it never reads it).
  comm::RunRanks(
      2,
      [&](comm::ProcessGroupPtr world) {
        StateDict sd2{{"w", Place(Zeros({8, 16}), MakeMesh(world, kTwoShards), kTwoShards)}};
        if (world->rank() == 0) {
          Load(sd2, dir, {.strict = false});
        } else {
          ExpectErrorContains([&] { Load(sd2, dir, {.strict = false}); }, ErrorCode::kDataLoss, {"block 1"});
        }
      },
      testing::TestRanks());
}

TEST(IntegrityTest, TruncatedDataFileIsDataLoss) {
  const std::string dir = FreshDir("truncated");
  SaveTwoRanks(dir, 1.0);
  const std::string path = JoinPath(dir, DataFileName(1, 2));
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 5);
  StateDict sd = DenseTarget();
  ExpectErrorContains([&] { Load(sd, dir); }, ErrorCode::kDataLoss,
              {DataFileName(1, 2), "needed for 'w' chunk [4:8, 0:16]", Str("has ", size - 5, " bytes"), "truncated"});
}

TEST(IntegrityTest, MissingDataFileIsNotFound) {
  const std::string dir = FreshDir("missing_file");
  SaveTwoRanks(dir, 1.0);
  std::filesystem::remove(JoinPath(dir, DataFileName(0, 2)));
  StateDict sd = DenseTarget();
  ExpectErrorContains([&] { Load(sd, dir); }, ErrorCode::kNotFound, {DataFileName(0, 2), "is missing", "'"});
}

TEST(IntegrityTest, MetadataOfAnotherVersionIsFailedPrecondition) {
  const std::string dir = FreshDir("version");
  SaveTwoRanks(dir, 1.0);
  const std::string path = JoinPath(dir, kMetadataFileName);
  std::string text = ReadWholeFile(path);
  text.replace(text.find("\"version\": 2"), 12, "\"version\": 3");
  std::ofstream(path, std::ios::trunc) << text;
  StateDict sd = DenseTarget();
  ExpectErrorContains([&] { Load(sd, dir); }, ErrorCode::kFailedPrecondition,
              {"metadata.json", "format version 3", "reads versions 1 to 2", "HINT"});
}

TEST(IntegrityTest, OneBitEditOfTheIndexFailsVerifyAndLoad) {
  const std::string dir = FreshDir("index_bit");
  SaveTwoRanks(dir, 1.0);
  const std::string path = JoinPath(dir, kMetadataFileName);
  const std::string good = ReadWholeFile(path);
  // "offsets": [0, 0] → [1, 0] on rank 0's chunk of w: one bit, still inside the shape (rows 1-4 now
  // overlap rank 1's chunk and row 0 is not covered; the old checks loaded shifted rows).
  std::string text = good;
  const size_t at = text.find("0,", text.find("\"offsets\"", text.find("\"w\": {")));
  ASSERT_NE(at, std::string::npos) << good;
  text[at] = '1';
  std::ofstream(path, std::ios::trunc) << text;
  StateDict sd = DenseTarget();
  ExpectErrorContains([&] { Load(sd, dir); }, ErrorCode::kDataLoss, {"metadata.json", "is corrupt"});
  const VerifyReport r = VerifyCheckpoint(dir);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find("is corrupt"), std::string::npos) << r.problems[0];
  std::ofstream(path, std::ios::trunc) << good;
  Load(sd, dir);  // the original index loads again
  EXPECT_EQ(std::get<Tensor>(sd["w"]).ToVector<float>(), std::vector<float>(128, 1.0f));
}

// A real crash: a child process runs a 2-rank save of 2.0 and _exit()s when a rank reaches `stage`
// (no destructor, no cleanup, no error handling runs).
void CrashDuringSave(const std::string& dir, SaveStage stage) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    SaveOptions crash;
    crash.on_stage = [stage](SaveStage s) {
      if (s == stage) ::_exit(3);
    };
    SaveTwoRanks(dir, 2.0, crash);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);
}

std::vector<float> LoadW(const std::string& dir) {
  StateDict sd = DenseTarget();
  Load(sd, dir);
  return std::get<Tensor>(sd["w"]).ToVector<float>();
}

// Editing "version" down to 1 (whose indexes carry no checksum) does not switch the index checksum off, so
// an edit that still tiles, or a negative file size that would skip the truncation check, is still caught.
TEST(IntegrityTest, DowngradingTheVersionDoesNotSkipTheIndexChecksum) {
  const std::string dir = FreshDir("index_downgrade");
  SaveTwoRanks(dir, 1.0);
  const std::string path = JoinPath(dir, kMetadataFileName);
  const std::string good = ReadWholeFile(path);
  std::string text = good;
  text.replace(text.find("\"version\": 2"), 12, "\"version\": 1");
  std::ofstream(path, std::ios::trunc) << text;
  StateDict sd = DenseTarget();
  ExpectErrorContains([&] { Load(sd, dir); }, ErrorCode::kDataLoss, {"metadata.json", "index checksum mismatch"});
  text = good;
  const size_t size_at = text.find("\"size\": ");
  ASSERT_NE(size_at, std::string::npos) << good;
  text.replace(size_at, text.find_first_of(",\n}", size_at) - size_at, "\"size\": -1");
  std::ofstream(path, std::ios::trunc) << text;
  ExpectErrorContains([&] { Load(sd, dir); }, ErrorCode::kDataLoss, {"has size -1"});
  std::ofstream(path, std::ios::trunc) << good;
  Load(sd, dir);
}

TEST(IntegrityTest, CrashAtAnyStageNeverLeavesALoadableMixOfTwoSaves) {
  for (SaveStage stage :
       {SaveStage::kPlanned, SaveStage::kDataWritten, SaveStage::kDataRenamed, SaveStage::kMetadataWritten}) {
    SCOPED_TRACE(static_cast<int>(stage));
    const std::string dir = FreshDir("crash");
    SaveTwoRanks(dir, 1.0);  // a complete older checkpoint in the same directory
    CrashDuringSave(dir, stage);
    bool left_temporaries = false;
    for (const std::string& name : ListDir(dir)) left_temporaries |= name.find(".tmp-") != std::string::npos;
    if (stage == SaveStage::kPlanned || stage == SaveStage::kDataWritten) {
      // Old data untouched: the load itself restores the moved-aside index (no manual rename).
      EXPECT_EQ(LoadW(dir), std::vector<float>(128, 1.0f));
    } else {
      StateDict sd = DenseTarget();
      ExpectErrorContains([&] { Load(sd, dir); }, ErrorCode::kNotFound,
                          {"is not a complete checkpoint", "metadata.json.prev-"});
    }
    // Either way the load removed the dead writer's temporaries (the lock was free).
    if (stage == SaveStage::kDataWritten) EXPECT_TRUE(left_temporaries);
    for (const std::string& name : ListDir(dir)) EXPECT_EQ(name.find(".tmp-"), std::string::npos) << name;
    SaveTwoRanks(dir, 3.0);  // the next save cleans up and commits
    EXPECT_EQ(LoadW(dir), std::vector<float>(128, 3.0f));
    for (const std::string& name : ListDir(dir)) {
      EXPECT_TRUE(name.find(".tmp-") == std::string::npos && name.find(".prev-") == std::string::npos) << name;
    }
  }
}

TEST(IntegrityTest, LoadLeavesTheFilesOfALiveWriterAlone) {
  const std::string dir = FreshDir("live_writer");
  SaveTwoRanks(dir, 1.0);
  const std::string tmp = JoinPath(dir, DataFileName(0, 2) + ".tmp-0123456789abcdef");
  std::ofstream(tmp) << "partial";
  {
    DirLock writer = DirLock::Acquire(dir, "save 0123456789abcdef (pid 1)");  // a save in progress
    EXPECT_EQ(LoadW(dir), std::vector<float>(128, 1.0f));
    EXPECT_TRUE(PathExists(tmp));
  }
  EXPECT_EQ(LoadW(dir), std::vector<float>(128, 1.0f));  // the writer is gone: its temporary goes
  EXPECT_FALSE(PathExists(tmp));
}

// A load that finds the index moved aside while another process holds the lock (a peer rank restoring it
// from a shared file system, slowly) waits for the index or the lock instead of 2 s: it used to throw
// kNotFound while the restoring rank loaded, and the job split at its next collective.
TEST(IntegrityTest, ALoadWaitsForAPeersRestoreOfAMovedAsideIndex) {
  const std::string dir = FreshDir("slow_restore");
  SaveTwoRanks(dir, 1.0);
  const std::string id = ReadMetadata(dir).save_id;
  std::filesystem::rename(JoinPath(dir, kMetadataFileName), JoinPath(dir, std::string(kMetadataFileName) + ".prev-" + id));
  std::atomic<bool> locked{false};
  std::thread peer([&] {
    DirLock held = DirLock::Acquire(dir, "load (pid 2)");  // a peer that takes 2.5 s to restore
    locked = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  });
  while (!locked) std::this_thread::yield();
  std::vector<float> got;
  try {
    got = LoadW(dir);  // restored here once the peer let go
  } catch (const Error& e) {
    ADD_FAILURE() << e.what();
  }
  peer.join();
  EXPECT_EQ(got, std::vector<float>(128, 1.0f));
  EXPECT_TRUE(PathExists(JoinPath(dir, kMetadataFileName)));
}

TEST(IntegrityTest, AFailedSaveLeavesThePreviousCheckpointLoadable) {
  const std::string dir = FreshDir("failed_save");
  SaveTwoRanks(dir, 1.0);
  SaveOptions disk_full;
  disk_full.on_stage = [](SaveStage s) {
    if (s == SaveStage::kDataWritten) TESSEL_FAIL(ErrorCode::kFailedPrecondition, "no space left on device");
  };
  ::tessel::testing::ExpectErrorContains([&] { SaveTwoRanks(dir, 2.0, disk_full); }, ErrorCode::kFailedPrecondition,
                                         "no space left on device");
  EXPECT_EQ(LoadW(dir), std::vector<float>(128, 1.0f));
  comm::RunRanks(
      2,
      [&](comm::ProcessGroupPtr world) {  // a planning failure (a Partial DTensor on one rank) too
        const auto mesh = MakeMesh(world, kTwoShards);
        StateDict sd{{"w", Place(Full({8, 16}, 2.0), mesh, kTwoShards)}, {"b", Full({16}, 3.0)}};
        if (world->rank() == 1) sd["g"] = dtensor::DTensor::FromLocal(Ones({4}), *mesh, {dtensor::Partial{}}).tensor();
        // Rank 1 holds the Partial tensor and raises kInvalidArgument; rank 0 learns of it and aborts.
        ::tessel::testing::ExpectErrorContains([&] { Save(sd, dir, world, {.fsync = false}); },
                                               world->rank() == 1 ? ErrorCode::kInvalidArgument : ErrorCode::kAborted,
                                               "'g' is a DTensor with placements [P(sum)]");
      },
      testing::TestRanks());
  EXPECT_EQ(LoadW(dir), std::vector<float>(128, 1.0f));
  for (const std::string& name : ListDir(dir)) EXPECT_EQ(name.find(".tmp-"), std::string::npos) << name;
}

TEST(IntegrityTest, ASaveIntoADirectoryBeingSavedIsAbortedOnEveryRank) {
  const std::string dir = FreshDir("locked");
  MakeDirs(dir);
  DirLock other = DirLock::Acquire(dir, "save 1234 (pid 1)");
  comm::RunRanks(
      2,
      [&](comm::ProcessGroupPtr world) {
        StateDict sd{{"b", Zeros({4})}};
        ExpectErrorContains([&] { Save(sd, dir, world, {.fsync = false}); }, ErrorCode::kAborted,
                    {"another save is writing into", "save 1234 (pid 1)"});
      },
      testing::TestRanks());
}

TEST(IntegrityTest, DataFileOfAnotherSaveIsDataLoss) {
  const std::string dir = FreshDir("mixed");
  SaveTwoRanks(dir, 1.0);
  const std::string old_id = ReadMetadata(dir).save_id;
  const std::string stash = JoinPath(FreshDir("mixed_stash"), "old");
  std::filesystem::copy_file(JoinPath(dir, DataFileName(1, 2)), stash);
  SaveTwoRanks(dir, 2.0);
  std::filesystem::copy_file(stash, JoinPath(dir, DataFileName(1, 2)),
                             std::filesystem::copy_options::overwrite_existing);
  StateDict sd = DenseTarget();
  ExpectErrorContains([&] { Load(sd, dir); }, ErrorCode::kDataLoss,
              {DataFileName(1, 2), "written by save " + old_id, "two saves raced"});
}

TEST(IntegrityTest, ConcurrentSavesIntoOneDirectoryLeaveOneConsistentCheckpoint) {
  const std::string dir = FreshDir("race");
  std::atomic<int> committed{0}, aborted{0};
  auto saver = [&](double value) {
    for (int i = 0; i < 15; ++i) {
      StateDict sd{{"w", Full({64, 16}, value)}, {"b", Full({256}, value)}};
      try {
        Save(sd, dir, nullptr, {.fsync = false});
        ++committed;
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kAborted) << e.what();
        ++aborted;
      }
    }
  };
  std::thread a(saver, 1.0), b(saver, 2.0);
  a.join();
  b.join();
  EXPECT_EQ(committed + aborted, 30);
  EXPECT_GE(committed.load(), 1);
  StateDict sd{{"w", Zeros({64, 16})}, {"b", Zeros({256})}};
  Load(sd, dir);
  const float v = std::get<Tensor>(sd["w"]).ToVector<float>()[0];
  EXPECT_TRUE(v == 1.0f || v == 2.0f);
  EXPECT_EQ(std::get<Tensor>(sd["w"]).ToVector<float>(), std::vector<float>(1024, v));
  EXPECT_EQ(std::get<Tensor>(sd["b"]).ToVector<float>(), std::vector<float>(256, v));
}

TEST(IntegrityTest, OneRanksBadInputFailsEveryRankAndCommitsNothing) {
  const std::string dir = FreshDir("partial");
  comm::RunRanks(
      2,
      [&](comm::ProcessGroupPtr world) {
        const auto mesh = MakeMesh(world, kTwoShards);
        StateDict sd{{"w", Place(Full({8, 16}, 1.0), mesh, kTwoShards)}};
        if (world->rank() == 1) {
          sd["g"] = dtensor::DTensor::FromLocal(Ones({4}), *mesh, {dtensor::Partial{}}).tensor();
          ExpectErrorContains([&] { Save(sd, dir, world); }, ErrorCode::kInvalidArgument,
                      {"'g' is a DTensor with placements [P(sum)]", "Redistribute it to Replicate or Shard"});
        } else {
          ExpectErrorContains([&] { Save(sd, dir, world); }, ErrorCode::kAborted, {"rank 1 failed while planning", "'g'"});
        }
      },
      testing::TestRanks());
  EXPECT_FALSE(PathExists(JoinPath(dir, kMetadataFileName)));
}

// A rank that failed before it could build its state dict passes SaveOptions::local_error: it fails in
// planning with it and its peer learns it there (instead of waiting for its plan); nothing is committed.
TEST(IntegrityTest, ALocalErrorFailsEveryRankInPlanning) {
  const std::string dir = FreshDir("local_error");
  comm::RunRanks(
      2,
      [&](comm::ProcessGroupPtr world) {
        SaveOptions options;
        StateDict sd{{"w", Full({4}, 1.0)}};
        if (world->rank() == 1) {
          options.local_error = "ValueError: boom in state_dict()";
          sd.clear();
          ExpectErrorContains([&] { Save(sd, dir, world, options); }, ErrorCode::kAborted,
                              {"ValueError: boom in state_dict()"});
        } else {
          ExpectErrorContains([&] { Save(sd, dir, world, options); }, ErrorCode::kAborted,
                              {"checkpoint save: rank 1 failed while planning (this is rank 0; ",
                               "ValueError: boom in state_dict()"});
        }
      },
      testing::TestRanks());
  EXPECT_FALSE(PathExists(JoinPath(dir, kMetadataFileName)));
}

TEST(IntegrityTest, KeyProblemsAreListedByFqnAndNonStrictReportsThem) {
  const std::string dir = FreshDir("keys");
  SaveTwoRanks(dir, 1.0);
  StateDict missing{{"w", Zeros({8, 16})}, {"b", Zeros({16})}, {"extra.weight", Zeros({2})}};
  ExpectErrorContains([&] { Load(missing, dir); }, ErrorCode::kNotFound, {"1 missing ['extra.weight']"});
  StateDict unexpected{{"w", Zeros({8, 16})}};
  ExpectErrorContains([&] { Load(unexpected, dir, {.allow_unexpected_keys = false}); }, ErrorCode::kInvalidArgument,
                      {"1 unexpected ['b']"});
  StateDict shape{{"w", Zeros({8, 4})}, {"b", Zeros({16}, DType::kFloat64)}};
  ExpectErrorContains([&] { Load(shape, dir); }, ErrorCode::kInvalidArgument,
              {"w: checkpoint float32 [8, 16], state dict float32 [8, 4]",
               "b: checkpoint float32 [16], state dict float64 [16]"});
  StateDict lenient{{"w", Zeros({8, 16})}, {"extra", Zeros({1})}};
  const LoadResult r = Load(lenient, dir, {.strict = false, .allow_unexpected_keys = false});
  EXPECT_EQ(r.missing_keys, std::vector<std::string>{"extra"});
  EXPECT_EQ(r.unexpected_keys, std::vector<std::string>{"b"});
  EXPECT_EQ(std::get<Tensor>(lenient["w"]).ToVector<float>(), std::vector<float>(128, 1.0f));
  EXPECT_EQ(std::get<Tensor>(lenient["extra"]).ToVector<float>(), std::vector<float>{0.0f});  // left as it was
}

// strict = false relaxes missing and unexpected keys only: a mismatched entry still fails the load (torch's
// load_state_dict(strict=False) and DCP raise on a size mismatch too), so a model built with the wrong
// config never trains on from its initial values.
TEST(IntegrityTest, MismatchedEntriesFailEvenWhenNotStrict) {
  const std::string dir = FreshDir("mismatch_lenient");
  SaveTwoRanks(dir, 1.0);
  StateDict shape{{"w", Zeros({8, 4})}};
  ExpectErrorContains([&] { Load(shape, dir, {.strict = false}); }, ErrorCode::kInvalidArgument,
                      {"1 mismatched [w: checkpoint float32 [8, 16], state dict float32 [8, 4]]",
                       "a mismatched entry is never skipped"});
  StateDict kind{{"w", Zeros({8, 16})}, {"b", int64_t{0}}};
  ExpectErrorContains([&] { Load(kind, dir, {.strict = false, .allow_unexpected_keys = true}); },
                      ErrorCode::kInvalidArgument, {"b: checkpoint tensor, state dict int64"});
}

// DCP's load, by default: the state dict may name a subset of the checkpoint (a model-only state dict from a
// training checkpoint); keys it names still have to be there.
TEST(IntegrityTest, AllowUnexpectedKeysLoadsASubsetAndStillRequiresEveryKeyItNames) {
  const std::string dir = FreshDir("subset");
  SaveTwoRanks(dir, 1.0);
  StateDict subset{{"w", Zeros({8, 16})}};
  const LoadResult r = Load(subset, dir);
  EXPECT_EQ(r.unexpected_keys, std::vector<std::string>{"b"});
  EXPECT_EQ(std::get<Tensor>(subset["w"]).ToVector<float>(), std::vector<float>(128, 1.0f));
  StateDict missing{{"w", Zeros({8, 16})}, {"extra", Zeros({1})}};
  ExpectErrorContains([&] { Load(missing, dir, {.allow_unexpected_keys = true}); }, ErrorCode::kNotFound,
                      {"1 missing ['extra']"});
}

// Keys and string values go into JSON (the plan exchange, metadata.json): text that is not UTF-8 is a
// clear error on every rank before the directory is touched, and the previous checkpoint stays loadable.
TEST(IntegrityTest, TextThatIsNotUtf8IsInvalidArgumentAndKeepsThePreviousCheckpoint) {
  const std::string dir = FreshDir("utf8");
  SaveTwoRanks(dir, 1.0);
  StateDict bad_value{{"w", Full({8, 16}, 2.0)}, {"tok", std::string("a\x80" "b")}};
  ExpectErrorContains([&] { Save(bad_value, dir, nullptr, {.fsync = false}); }, ErrorCode::kInvalidArgument,
                      {"the string value of 'tok' (\"a\\x80b\") is not valid UTF-8", "checkpoint::Bytes"});
  StateDict bad_key{{"w", Full({8, 16}, 2.0)}, {std::string("k\xff"), int64_t{1}}};
  ExpectErrorContains([&] { Save(bad_key, dir, nullptr, {.fsync = false}); }, ErrorCode::kInvalidArgument,
                      {"the key 'k\\xff' is not valid UTF-8"});
  EXPECT_TRUE(PathExists(JoinPath(dir, kMetadataFileName)));
  EXPECT_EQ(LoadW(dir), std::vector<float>(128, 1.0f));
  comm::RunRanks(
      2,
      [&](comm::ProcessGroupPtr world) {  // only rank 1 holds the bad value: rank 0 aborts, no hang
        StateDict sd{{"b", Zeros({4})}};
        if (world->rank() == 1) sd["tok"] = std::string("\xc3");
        ExpectErrorContains([&] { Save(sd, dir, world, {.fsync = false}); },
                            world->rank() == 1 ? ErrorCode::kInvalidArgument : ErrorCode::kAborted, "'tok'");
      },
      testing::TestRanks());
  EXPECT_EQ(LoadW(dir), std::vector<float>(128, 1.0f));
}

}  // namespace
}  // namespace tessel::checkpoint
