// checkpoint/save_plan.h — the save planner (pure): every rank describes what it holds (LocalSavePlan),
// the plans are all-gathered, and PlanGlobalSave decides — identically on every rank — who writes what.
//
// Invariant (what PlanGlobalSave guarantees or refuses with kInvalidArgument naming FQNs and ranks):
//   - every non-empty chunk (fqn, box) is written by exactly one of the ranks holding it: replicated
//     chunks are de-duplicated, and balanced — a chunk only one rank holds stays there, then shared
//     chunks go, largest first, to the holder with the fewest bytes so far (ties: lowest rank);
//   - ranks agree on each FQN: same kind, dtype and global shape; bytes and values with one key hold the
//     same content on every rank (per-rank state needs per-rank keys);
//   - the written chunks of each tensor tile it exactly (no overlap, no hole), so a load is never short.
// Same role as PyTorch's create_default_global_save_plan + dedup_save_plans, with balancing by bytes.
//
// Example:
//   std::vector<LocalSavePlan> plans = /* all-gathered */;
//   GlobalSavePlan g = PlanGlobalSave(plans);
//   for (int i : g.writes[rank]) Write(plans[rank].items[i]);
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/box.h"
#include "checkpoint/metadata.h"
#include "core/tensor/dtype.h"

namespace tessel::checkpoint {

enum class ItemKind : uint8_t { kTensor, kBytes, kValue };

struct WriteItem {
  std::string fqn;
  ItemKind kind = ItemKind::kTensor;
  DType dtype = DType::kFloat32;  // kTensor
  Shape global_shape;             // kTensor
  Box box;                        // kTensor: the chunk this rank holds (may be empty)
  std::string layout;             // kTensor
  int64_t nbytes = 0;             // kTensor: box volume * element size; kBytes: length; kValue: 0
  uint64_t content_hash = 0;      // kBytes / kValue: ranks holding one key must agree
  ScalarValue value;              // kValue
};

struct LocalSavePlan {
  int rank = 0;
  std::vector<WriteItem> items;
  // Filled by the coordinator (rank 0) only.
  std::string save_id;
  // A rank that failed before the plan exchange says why here, so every rank fails together.
  std::string error;
};

struct GlobalSavePlan {
  std::vector<std::vector<int>> writes;  // writes[r]: indices into plans[r].items, in file order
  std::vector<int64_t> bytes_per_rank;
};

GlobalSavePlan PlanGlobalSave(std::span<const LocalSavePlan> plans);

std::string EncodeLocalPlan(const LocalSavePlan& plan);
LocalSavePlan DecodeLocalPlan(std::string_view text);

}  // namespace tessel::checkpoint
