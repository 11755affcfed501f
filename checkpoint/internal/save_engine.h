// checkpoint/internal/save_engine.h — the two halves of a save, shared by Save and AsyncSaver:
// PrepareSave (lock, clean, plan exchange: on the caller's thread) and FinishSave (write this rank's
// file, exchange results, commit: on any thread, with its own process group for async saves).
//
// Invariant: FinishSave writes exactly the items GlobalSavePlan assigns to this rank, from
// `entries`, which must still hold (or have been snapshotted from) the values planned.
// Not a public header: use save.h / async_save.h.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "checkpoint/local_shard.h"
#include "checkpoint/save.h"
#include "checkpoint/save_plan.h"
#include "checkpoint/storage.h"

namespace tessel::checkpoint::internal {

struct SaveEntry {
  std::string fqn;
  ItemKind kind = ItemKind::kTensor;
  LocalShard shard;   // kTensor
  std::string bytes;  // kBytes
  ScalarValue value;  // kValue
};

struct PreparedSave {
  std::string dir;
  int rank = 0;
  int world_size = 1;
  std::string save_id;
  SaveOptions options;
  std::vector<SaveEntry> entries;    // this rank's, in plans[rank].items order
  std::vector<LocalSavePlan> plans;  // every rank's
  GlobalSavePlan global;
  std::optional<DirLock> lock;  // held by rank 0 until the commit
};

// Collective over `pg` (nullptr: one rank).
PreparedSave PrepareSave(const StateDict& state_dict, const std::string& dir, const comm::ProcessGroupPtr& pg,
                         const SaveOptions& options);
// Collective over `pg`. Consumes `p` (releases the lock at the end).
SaveResult FinishSave(PreparedSave& p, const comm::ProcessGroupPtr& pg);

// Collective over `pg`: every rank reports whether its part between PrepareSave and FinishSave (the async
// saver's snapshot) succeeded (`mine`: its exception, or null). If any failed, the coordinator restores the
// previous metadata.json, the lock is released, and every rank throws (the failing rank its own error, the
// others kAborted naming it); else returns.
void AgreeBeforeWriting(PreparedSave& p, const comm::ProcessGroupPtr& pg, std::exception_ptr mine);

// Every rank's string, in rank order (two all_gathers: lengths, then padded payloads).
std::vector<std::string> AllGatherStrings(const comm::ProcessGroupPtr& pg, const std::string& mine);

}  // namespace tessel::checkpoint::internal
