// checkpoint/checkpoint_bench.cc — checkpoint I/O figures against plain file I/O of the same bytes in
// the same run (the dcp_save_vs_raw_write, dcp_load_resharded_vs_raw_read and
// async_save_stall_vs_sync), printed in the //benchmarks:report line format.
//
// What it measures: a state dict of `--mib` MiB (16 float32 tensors [rows, 4096]) held by W=4 ranks as
// [S(0)] DTensors is saved (checksums, safetensors files, metadata, commit) and compared with each rank
// write()-ing its shards to one file; it is then loaded at W=2 as [S(0)] (resharded, verified) and
// compared with each rank pread()-ing the same byte ranges; finally the time AsyncSaver::Save blocks
// the caller is compared with a synchronous Save. Medians of `--reps` alternating runs.
// Usage: bazel run -c opt //checkpoint:checkpoint_bench -- [--dir=/dev/shm/x] [--mib=256] [--reps=5] [--fsync=1]
//        [--verify=1] [--keep=0] [--stages=0]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint/async_save.h"
#include "checkpoint/load.h"
#include "checkpoint/metadata.h"
#include "checkpoint/save.h"
#include "checkpoint/storage.h"
#include "comm/backends/threads.h"
#include "core/base/error.h"
#include "core/tensor/factory.h"
#include "dtensor/device_mesh.h"
#include "dtensor/dtensor.h"
#include "dtensor/dtensor_impl.h"

namespace tessel::checkpoint {
namespace {

constexpr int kTensors = 16;
constexpr int64_t kCols = 4096;

struct Flags {
  std::string dir = std::filesystem::exists("/dev/shm") ? "/dev/shm/tessel_ckpt_bench" : "/tmp/tessel_ckpt_bench";
  int64_t mib = 256;
  int reps = 5;
  bool fsync = true;
  bool verify = true;
  bool keep = false;    // leave the checkpoint in DIR/ckpt (e.g. for tessel-ckpt inspect)
  bool stages = false;  // print rank 0's time to each SaveStage of the last synchronous save
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int64_t Rows(const Flags& f) { return f.mib * (int64_t{1} << 20) / kTensors / (kCols * 4); }

// This rank's [S(0)] shards of the 16 tensors.
StateDict ShardedState(const dtensor::DeviceMesh& mesh, int64_t rows, int world) {
  StateDict sd;
  for (int i = 0; i < kTensors; ++i) {
    Tensor local = Full({rows / world, kCols}, 0.25 * (i + 1) + mesh.global_rank());
    sd[Str("layers.", i, ".weight")] = dtensor::DTensor::FromLocal(local, mesh, {dtensor::Shard{0}}).tensor();
  }
  return sd;
}

// Times `fn` between two barriers (every rank), returning rank 0's seconds.
template <typename Fn>
double Timed(const comm::ProcessGroupPtr& world, Fn fn) {
  world->Barrier()->Wait();
  const double t0 = Now();
  fn();
  world->Barrier()->Wait();
  return Now() - t0;
}

void RawWrite(const StateDict& sd, const std::string& path, bool sync) {
  File f = File::Create(path);
  for (const auto& [fqn, v] : sd) {
    const Tensor& local = dtensor::GetDTensorImpl(std::get<Tensor>(v), "bench").local();
    f.Write(local.raw_data(), local.numel() * 4);
  }
  if (sync) f.Sync();
  f.Close();
}

struct Times {
  std::vector<double> save, raw_write, load, raw_read, sync_save, async_stall;
};

void MeasureSave(const Flags& flags, Times& t, std::mutex& mu) {
  const std::string ckpt = flags.dir + "/ckpt", raw = flags.dir + "/raw";
  MakeDirs(raw);
  comm::RunRanks(4, [&](comm::ProcessGroupPtr world) {
    const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {4}, {"dp"});
    const StateDict sd = ShardedState(mesh, Rows(flags), 4);
    AsyncSaver saver(world);
    std::vector<std::pair<int, double>> stages;  // (stage, seconds since the save began), rank 0
    double start = 0;
    SaveOptions opts{.fsync = flags.fsync};
    if (flags.stages && world->rank() == 0) {
      opts.on_stage = [&](SaveStage st) { stages.push_back({static_cast<int>(st), Now() - start}); };
    }
    for (int rep = 0; rep < flags.reps; ++rep) {
      stages.clear();
      const double s = Timed(world, [&] {
        start = Now();
        Save(sd, ckpt, world, opts);
      });
      const double w = Timed(world, [&] { RawWrite(sd, JoinPath(raw, Str("rank", world->rank())), flags.fsync); });
      double stall = 0;
      const double a = Timed(world, [&] {
        auto f = saver.Save(sd, flags.dir + "/async", {.fsync = flags.fsync});
        stall = saver.last_stall_seconds();
        f.get();
      });
      (void)a;
      std::lock_guard<std::mutex> lock(mu);
      if (world->rank() == 0) {
        t.save.push_back(s);
        t.raw_write.push_back(w);
        t.sync_save.push_back(s);
      }
      t.async_stall.push_back(stall);  // every rank's stall; the report takes the median
    }
    for (const auto& [st, sec] : stages) std::printf("# save stage %d reached at %.4f s\n", st, sec);
  });
}

void MeasureLoad(const Flags& flags, Times& t) {
  const std::string ckpt = flags.dir + "/ckpt";
  const Metadata md = ReadMetadata(ckpt);
  comm::RunRanks(2, [&](comm::ProcessGroupPtr world) {
    const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2}, {"tp"});
    StateDict sd = ShardedState(mesh, Rows(flags), 2);
    // The raw baseline reads the same byte ranges: the chunks whose rows this rank now holds.
    std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> ranges;
    for (const auto& [fqn, tm] : md.tensors) {
      for (const ChunkMeta& c : tm.chunks) {
        if (c.box.offsets[0] / (Rows(flags) / 2) == world->rank()) {
          ranges.push_back({JoinPath(ckpt, md.files[c.where.file].name), {c.where.byte_offset, c.where.byte_length}});
        }
      }
    }
    std::vector<char> buf(static_cast<size_t>(Rows(flags) / 2 * kCols * 4 * kTensors));
    for (int rep = 0; rep < flags.reps; ++rep) {
      const double l = Timed(world, [&] { Load(sd, ckpt, {.verify_checksums = flags.verify}); });
      const double r = Timed(world, [&] {
        std::map<std::string, File> files;
        int64_t at = 0;
        for (const auto& [path, range] : ranges) {
          if (!files.count(path)) files.emplace(path, File::OpenForRead(path));
          files.at(path).ReadAt(range.first, buf.data() + at, range.second);
          at += range.second;
        }
      });
      if (world->rank() == 0) {
        t.load.push_back(l);
        t.raw_read.push_back(r);
      }
    }
  });
}

void Print(const char* name, const char* unit, double value, const char* base_name, double base) {
  std::printf("%s: %.3f %s vs %s: %.3f %s ratio %.3f\n", name, value, unit, base_name, base, unit, value / base);
}

int Main(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const std::string v = a.substr(a.find('=') + 1);
    if (a.rfind("--dir=", 0) == 0) flags.dir = v;
    if (a.rfind("--mib=", 0) == 0) flags.mib = std::stoll(v);
    if (a.rfind("--reps=", 0) == 0) flags.reps = std::stoi(v);
    if (a.rfind("--fsync=", 0) == 0) flags.fsync = v != "0";
    if (a.rfind("--verify=", 0) == 0) flags.verify = v != "0";
    if (a.rfind("--keep=", 0) == 0) flags.keep = v != "0";
    if (a.rfind("--stages=", 0) == 0) flags.stages = v != "0";
  }
  std::filesystem::remove_all(flags.dir);
  MakeDirs(flags.dir);
  Times t;
  std::mutex mu;
  MeasureSave(flags, t, mu);
  MeasureLoad(flags, t);
  const double gib = static_cast<double>(Rows(flags) * kCols * 4 * kTensors) / (1 << 30);
  std::printf("# %.0f MiB state dict, W=4 [S(0)] save, W=2 [S(0)] load, dir %s, fsync %d, median of %d\n", gib * 1024,
              flags.dir.c_str(), flags.fsync, flags.reps);
  Print("dcp_save_vs_raw_write", "GiB/s", gib / Median(t.save), "raw_write", gib / Median(t.raw_write));
  Print("dcp_load_resharded_vs_raw_read", "GiB/s", gib / Median(t.load), "raw_read", gib / Median(t.raw_read));
  std::printf("async_save_stall_vs_sync: %.4f s vs sync_save: %.4f s ratio %.3f\n", Median(t.async_stall),
              Median(t.sync_save), Median(t.async_stall) / Median(t.sync_save));
  if (!flags.keep) std::filesystem::remove_all(flags.dir);
  return 0;
}

}  // namespace
}  // namespace tessel::checkpoint

int main(int argc, char** argv) { return tessel::checkpoint::Main(argc, argv); }
