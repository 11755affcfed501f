// checkpoint/save.h — Save: write a sharded state dict as a checkpoint directory (collective), with an
// atomic commit. Same semantics as PyTorch's torch.distributed.checkpoint.save.
//
// Layout of DIR after a committed save from W ranks:
//   data-00000-of-0000W.safetensors ...  one per rank that wrote data: a valid safetensors file holding
//                                        that rank's chunks ("<fqn>" for a whole tensor, "<fqn>[0:4, 0:8]"
//                                        for a piece) and bytes entries (U8)
//   metadata.json                        the index (metadata.h); written last
//   .tessel-ckpt.lock                    the save lock (empty when idle)
//
// Invariant (atomic commit): DIR loads as a complete checkpoint only if metadata.json exists, and
// metadata.json is renamed into place only after every rank's data file is fully written, fsynced and
// renamed from its temporary name. The coordinator moves an older metadata.json aside (to
// metadata.json.prev-<save id>) before any new data file appears, and no rank renames its data file
// before every rank has written its own. So:
//   - a save that fails before the renames (bad input on any rank, a write error, a full disk) puts the
//     old metadata.json back: the previous checkpoint loads exactly as before;
//   - a crash (or a failure) at any later point leaves DIR without metadata.json: it never loads as a
//     mix of two saves. A crash before the renames also leaves the old data files intact beside
//     metadata.json.prev-<id>, which can be renamed back by hand (the load error says so).
// Two saves racing into one directory cannot both proceed (DirLock, kAborted), and every data file
// carries the save id the metadata names, so a file from another save is caught on load (kDataLoss).
//
// Errors are collective: a rank that fails (bad input, disk full, ...) makes every rank throw — the
// failing rank its own error, the others kAborted naming it — and nothing is committed.
//
// Example:
//   comm::RunRanks(4, [&](comm::ProcessGroupPtr world) {
//     StateDict sd = GetModelStateDict(model_of_this_rank);
//     SaveResult r = Save(sd, "/ckpt/step_100", world);   // r.bytes_written: this rank's share
//   });
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "checkpoint/checksum.h"
#include "checkpoint/state_dict.h"
#include "comm/process_group.h"

namespace tessel::checkpoint {

// The commit steps, in order (SaveOptions::on_stage).
enum class SaveStage {
  kPlanned,          // plans exchanged; the old metadata.json moved aside
  kSnapshotted,      // AsyncSaver only: this rank's tensors copied into its staging buffers
  kDataWritten,      // this rank's data file written (and fsynced) under its temporary name
  kDataRenamed,      // every rank wrote its file; this rank's file renamed to its final name
  kMetadataWritten,  // coordinator only: metadata written under its temporary name
  kCommitted,        // metadata.json in place (every rank, after the final status exchange)
};

struct SaveOptions {
  // fsync data files, metadata and the directory (durability across power loss). Off only for tests
  // and benchmarks on throwaway directories.
  bool fsync = true;
  // Checksum granularity (a multiple of 8): a loader verifies whole blocks, so this bounds the extra
  // bytes a partial read costs. Recorded in the metadata.
  int64_t checksum_block_bytes = kDefaultChecksumBlockBytes;
  // Called on every rank at each stage it reaches (tests inject crashes by throwing here).
  std::function<void(SaveStage)> on_stage;
  // A failure this rank met while building its state dict (the Python face's Stateful.state_dict()):
  // non-empty, Save fails in planning with it (kAborted), so every rank raises there instead of the others
  // waiting in the plan exchange for this one.
  std::string local_error;
};

struct SaveResult {
  std::string save_id;
  std::string data_file;      // this rank's data file name ("" when it had nothing to write)
  int64_t bytes_written = 0;  // this rank's tensor/bytes payload
  int64_t total_bytes = 0;    // all ranks' payload
};

// Collective over `world` (every rank calls it with the same `dir`; nullptr = a single process).
// REQUIRES: no Partial DTensor in `state_dict` (kInvalidArgument naming the FQN).
SaveResult Save(const StateDict& state_dict, const std::string& dir, const comm::ProcessGroupPtr& world = nullptr,
                const SaveOptions& options = {});

}  // namespace tessel::checkpoint
