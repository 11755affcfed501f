// benchmarks/checkpoint_bench.cc — the checkpoint figures of //benchmarks:report with flags (directory,
// size, reps, fsync, ...): see checkpoint_workload.h for what is measured.
// Usage: bazel run //benchmarks:checkpoint_bench -- [--dir=/dev/shm/x] [--mib=256] [--reps=5] [--fsync=1]
//        [--verify=1] [--cold=1] [--keep=0] [--stages=0]     (--dir: the parent of a fresh scratch directory)
#include <cstdio>
#include <filesystem>
#include <string>

#include "benchmarks/checkpoint_workload.h"

int main(int argc, char** argv) {
  tessel::bench::CheckpointBenchOptions o;
  o.dir = std::filesystem::temp_directory_path().string();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const std::string v = a.substr(a.find('=') + 1);
    if (a.rfind("--dir=", 0) == 0) {
      o.dir = v;
    } else if (a.rfind("--mib=", 0) == 0) {
      o.mib = std::stoll(v);
    } else if (a.rfind("--reps=", 0) == 0) {
      o.reps = std::stoi(v);
    } else if (a.rfind("--fsync=", 0) == 0) {
      o.fsync = v != "0";
    } else if (a.rfind("--verify=", 0) == 0) {
      o.verify = v != "0";
    } else if (a.rfind("--cold=", 0) == 0) {
      o.cold = v != "0";
    } else if (a.rfind("--keep=", 0) == 0) {
      o.keep = v != "0";
    } else if (a.rfind("--stages=", 0) == 0) {
      o.stages = v != "0";
    } else {
      std::fprintf(stderr, "checkpoint_bench: unknown flag '%s'\n", a.c_str());
      return 2;
    }
  }
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
