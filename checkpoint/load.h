// checkpoint/load.h — Load: fill a caller's state dict, in place, from a checkpoint directory saved in
// any layout (torch.distributed.checkpoint.load semantics, resharding included).
//
// Invariant: after a successful Load every tensor entry holds, on every rank, exactly the saved values
// of its own box (a dense tensor: the whole tensor; a DTensor: its local shard), bit for bit, whatever
// the saved world size, mesh, placements or shard order were; bytes and small values are replaced by
// the saved ones. Each rank reads only the checksum blocks that overlap its boxes (chunks found through
// a per-tensor ChunkIndex, never a scan of every chunk), verifies them, and copies straight into the
// destination when the overlap is contiguous on both sides. Load needs no collective.
//
// Errors: key problems are listed by FQN — shape/dtype/kind mismatches (kInvalidArgument, always: a
// mismatched entry is never skipped, as torch's load_state_dict and DCP raise on a size mismatch
// whatever their strictness), then missing keys (kNotFound), then, when asked for (`allow_unexpected_keys =
// false`), unexpected keys (kInvalidArgument); `strict = false` reports missing and unexpected keys in the result
// instead and loads the rest. By default a checkpoint may hold more than the state dict, as DCP's load: a
// model-only state dict from a training checkpoint, one pipeline stage's keys from the whole model's; the keys
// it skipped are in LoadResult::unexpected_keys. Storage problems follow chunk_reader.h: kNotFound for a
// missing file, kDataLoss for corruption, kFailedPrecondition for another format version. On an error
// the contents of the state dict are unspecified (never silently wrong: the error is the answer).
//
// Example:
//   comm::RunRanks(2, [&](comm::ProcessGroupPtr world) {
//     DeviceMesh mesh = InitDeviceMesh(world, {2}, {"tp"});
//     StateDict sd = {{"w", DistributeTensor(Zeros({8, 16}), mesh, {Shard{1}}).tensor()}};
//     LoadResult r = Load(sd, "/ckpt/step_100");   // saved from 4 ranks as [S(0)]: each rank reads its columns
//   });
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/state_dict.h"

namespace tessel::checkpoint {

struct LoadOptions {
  bool strict = true;
  // Keys of the checkpoint that the state dict lacks are reported (LoadResult::unexpected_keys), not an
  // error, even when strict (torch.distributed.checkpoint.load's semantics). False: they are an error too
  // (module.load_state_dict(strict=True)'s).
  bool allow_unexpected_keys = true;
  // Verify block checksums of everything read. Off: read exactly the needed runs (no block rounding).
  bool verify_checksums = true;
  // Bound of the staging buffer of one strided copy (a slab of an overlap).
  int64_t max_staging_bytes = int64_t{64} << 20;
};

struct LoadResult {
  std::vector<std::string> missing_keys;     // in the state dict, not in the checkpoint
  std::vector<std::string> unexpected_keys;  // in the checkpoint, not in the state dict
  int64_t bytes_read = 0;                    // by this rank
  int64_t chunks_read = 0;                   // (chunk, target) overlaps copied by this rank
};

LoadResult Load(StateDict& state_dict, const std::string& dir, const LoadOptions& options = {});

// The recovery a Load runs first ([Note: load-time recovery] in load.cc): with no live writer holding `dir`, a dead
// save's temporaries are removed and its moved-aside metadata.json restored when every data file it names is
// still that save's. A reader of the metadata alone (the Python face reads the value kinds before its load) calls
// it first, or it finds no metadata.json where Load would have restored it. Nothing when dir is not a directory.
void RecoverBeforeLoad(const std::string& dir);

}  // namespace tessel::checkpoint
