// benchmarks/checkpoint_workload.h — checkpoint I/O against plain file I/O of the same bytes, measured
// in one run: the dcp_save_vs_raw_write, dcp_load_resharded_vs_raw_read and
// async_save_stall_vs_sync (registered as report figures in checkpoint_workload.cc; the
// //benchmarks:checkpoint_bench binary runs the same measurement with flags).
//
// What it measures: a state dict of `mib` MiB (16 float32 tensors [rows, 4096]) held by W=4 ranks as
// [S(0)] DTensors is saved (checksums, safetensors files, metadata, fsync, commit) and compared with
// each rank write()-ing (and fsync-ing) its shards to one file; it is then loaded at W=2 as [S(0)]
// (resharded, checksums verified) and compared with each rank pread()-ing the same byte ranges, both
// after dropping the files' page cache (posix_fadvise DONTNEED; a no-op on tmpfs); finally
// the time AsyncSaver::Save blocks the caller (snapshot into reused staging buffers) is compared with a
// synchronous Save. Medians of `reps` alternating runs; the first AsyncSaver::Save of a run allocates
// its staging buffers, later ones reuse them, as in training.
//
// Example:
//   CheckpointTimes t = MeasureCheckpointIo({.dir = "/tmp/tessel_ckpt_bench", .mib = 64, .reps = 3});
//   double save_ratio = t.raw_write_s / t.save_s;
#pragma once

#include <cstdint>
#include <string>

namespace tessel::bench {

struct CheckpointBenchOptions {
  std::string dir;       // parent of the scratch directory <dir>/tessel_ckpt_bench.<pid> (removed after unless keep)
  int64_t mib = 256;     // state dict size
  int reps = 5;
  bool fsync = true;     // Save's durability; the raw baseline fsyncs too
  bool verify = true;    // Load verifies checksums
  bool cold = true;      // drop the checkpoint files' page cache before each timed load / raw read
  bool keep = false;     // leave the checkpoint in DIR/ckpt (e.g. for tessel-ckpt inspect)
  bool stages = false;   // print rank 0's time to each SaveStage of the last synchronous save
};

// Medians, seconds (rank 0's, between barriers; the stall is the median over every rank's).
struct CheckpointTimes {
  std::string work_dir;  // where the checkpoint was written (kept there when options.keep)
  double gib = 0;        // state dict size
  double save_s = 0, raw_write_s = 0, load_s = 0, raw_read_s = 0, async_stall_s = 0, sync_save_s = 0;
};

CheckpointTimes MeasureCheckpointIo(const CheckpointBenchOptions& options);

// "ext4", "tmpfs", "xfs", ... (statfs magic), "unknown" otherwise.
std::string FileSystemName(const std::string& path);

}  // namespace tessel::bench
