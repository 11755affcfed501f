// benchmarks/checkpoint_bench.cc — the checkpoint figures of //benchmarks:report with flags (directory,
// size, reps, fsync, ...): see checkpoint_workload.h for what is measured.
// Usage: bazel run //benchmarks:checkpoint_bench -- [--dir=/dev/shm/x] [--mib=256] [--reps=5] [--fsync=1]
//        [--verify=1] [--cold=1] [--keep=0] [--stages=0]     (--dir: the parent of a fresh scratch directory)
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "benchmarks/checkpoint_workload.h"

using Options = tessel::bench::CheckpointBenchOptions;
ABSL_FLAG(std::string, dir, "", "parent of a fresh scratch directory (default: the system temp directory)");
ABSL_FLAG(int64_t, mib, Options{}.mib, "state dict size, MiB");
ABSL_FLAG(int, reps, Options{}.reps, "timed repetitions (median)");
ABSL_FLAG(bool, fsync, Options{}.fsync, "Save's durability (the raw baseline fsyncs too)");
ABSL_FLAG(bool, verify, Options{}.verify, "Load verifies checksums");
ABSL_FLAG(bool, cold, Options{}.cold, "drop the checkpoint files' page cache before each timed load / raw read");
ABSL_FLAG(bool, keep, Options{}.keep, "leave the checkpoint in DIR/ckpt");
ABSL_FLAG(bool, stages, Options{}.stages, "print rank 0's time to each SaveStage of the last synchronous save");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("checkpoint_bench: the checkpoint figures of //benchmarks:report with flags");
  const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);  // unknown flags are errors
  if (rest.size() > 1) {
    std::fprintf(stderr, "checkpoint_bench: unexpected argument '%s'\n", rest[1]);
    return 2;
  }
  Options o;
  o.dir = absl::GetFlag(FLAGS_dir).empty() ? std::filesystem::temp_directory_path().string() : absl::GetFlag(FLAGS_dir);
  o.mib = absl::GetFlag(FLAGS_mib);
  o.reps = absl::GetFlag(FLAGS_reps);
  o.fsync = absl::GetFlag(FLAGS_fsync);
  o.verify = absl::GetFlag(FLAGS_verify);
  o.cold = absl::GetFlag(FLAGS_cold);
  o.keep = absl::GetFlag(FLAGS_keep);
  o.stages = absl::GetFlag(FLAGS_stages);
  const tessel::bench::CheckpointTimes t = tessel::bench::MeasureCheckpointIo(o);
  std::printf("# %.0f MiB state dict, W=4 [S(0)] save, W=2 [S(0)] load, in %s (%s%s), fsync %d, cold loads %d, "
              "median of %d\n",
              t.gib * 1024, t.work_dir.c_str(), tessel::bench::FileSystemName(o.dir).c_str(), o.keep ? ", kept" : "",
              o.fsync, o.cold, o.reps);
  std::printf("dcp_save_vs_raw_write: %.3f GiB/s vs raw_write: %.3f GiB/s ratio %.3f\n", t.gib / t.save_s,
              t.gib / t.raw_write_s, t.raw_write_s / t.save_s);
  std::printf("dcp_load_resharded_vs_raw_read: %.3f GiB/s vs raw_read: %.3f GiB/s ratio %.3f\n", t.gib / t.load_s,
              t.gib / t.raw_read_s, t.raw_read_s / t.load_s);
  std::printf("async_save_stall_vs_sync: %.4f s vs sync_save: %.4f s ratio %.3f\n", t.async_stall_s, t.sync_save_s,
              t.async_stall_s / t.sync_save_s);
  return 0;
}
