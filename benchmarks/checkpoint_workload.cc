// benchmarks/checkpoint_workload.cc — MeasureCheckpointIo (see the header) and its three report
// figures. The report writes to a directory on the temp filesystem (durable storage, as checkpoints
// are: $TMPDIR or /tmp) and adds a note with the same figures on /dev/shm (tmpfs), where a write is a
// memcpy into page cache and fsync is free.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "benchmarks/checkpoint_workload.h"
#include "benchmarks/figure.h"

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

namespace tessel::bench {
namespace {

using namespace tessel::checkpoint;  // NOLINT: the workload is all checkpoint API

constexpr int kTensors = 16;
constexpr int64_t kCols = 4096;


double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int64_t Rows(const CheckpointBenchOptions& f) { return f.mib * (int64_t{1} << 20) / kTensors / (kCols * 4); }

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

void MeasureSave(const CheckpointBenchOptions& flags, Times& t, std::mutex& mu) {
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

// Asks the kernel to drop the cached pages of every file in `dir` (they are clean: the save fsynced).
void DropPageCache(const std::string& dir) {
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    const int fd = ::open(entry.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

void MeasureLoad(const CheckpointBenchOptions& flags, Times& t) {
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
    auto cold = [&] {  // both sides read the checkpoint's files: from the device, not the page cache
      if (flags.cold && world->rank() == 0) DropPageCache(ckpt);
    };
    for (int rep = 0; rep < flags.reps; ++rep) {
      cold();
      const double l = Timed(world, [&] { Load(sd, ckpt, {.verify_checksums = flags.verify}); });
      cold();
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

}  // namespace

std::string FileSystemName(const std::string& path) {
  struct statfs st {};
  if (statfs(path.c_str(), &st) != 0) return "unknown";
  switch (static_cast<uint64_t>(st.f_type)) {
    case 0xEF53: return "ext4";
    case 0x01021994: return "tmpfs";
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x794C7630: return "overlayfs";
    case 0x6969: return "nfs";
    default: return "unknown";
  }
}

CheckpointTimes MeasureCheckpointIo(const CheckpointBenchOptions& options) {
  // Everything goes into a fresh subdirectory of options.dir, and only that is removed.
  CheckpointBenchOptions flags = options;
  flags.reps = std::max(flags.reps, 1);
  flags.dir = JoinPath(options.dir, Str("tessel_ckpt_bench.", ::getpid()));
  std::filesystem::remove_all(flags.dir);
  MakeDirs(flags.dir);
  Times t;
  std::mutex mu;
  MeasureSave(flags, t, mu);
  MeasureLoad(flags, t);
  if (!flags.keep) std::filesystem::remove_all(flags.dir);
  CheckpointTimes r;
  r.work_dir = flags.dir;
  r.gib = static_cast<double>(Rows(flags) * kCols * 4 * kTensors) / (1 << 30);
  r.save_s = Median(t.save);
  r.raw_write_s = Median(t.raw_write);
  r.load_s = Median(t.load);
  r.raw_read_s = Median(t.raw_read);
  r.async_stall_s = Median(t.async_stall);
  r.sync_save_s = Median(t.sync_save);
  return r;
}

namespace {

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// One measurement shared by the three figures (the first figure measured runs it).
struct Shared {
  std::string dir, fs;
  CheckpointTimes disk;
  std::optional<CheckpointTimes> shm;  // when /dev/shm exists and the main dir is not tmpfs already
  bool done = false;
};

std::shared_ptr<Shared> SharedMeasurement() {
  static const std::shared_ptr<Shared> shared = std::make_shared<Shared>();
  return shared;
}

void EnsureMeasured(Shared& s) {
  if (s.done) return;
  const std::filesystem::path base = std::filesystem::temp_directory_path();
  s.dir = base.string();
  s.fs = FileSystemName(base.string());
  s.disk = MeasureCheckpointIo({.dir = s.dir});
  if (s.fs != "tmpfs" && std::filesystem::exists("/dev/shm")) {
    s.shm = MeasureCheckpointIo({.dir = "/dev/shm", .reps = 3});
  }
  s.done = true;
}

std::string Note(const Shared& s) {
  std::string note = Str(Fixed(s.disk.gib * 1024, 0), " MiB state dict in ", s.dir, " (", s.fs,
                         ", fsync, loads from a dropped page cache), W=4 [S(0)] save, W=2 [S(0)] load; seconds: save ", Fixed(s.disk.save_s, 3),
                         " raw write ", Fixed(s.disk.raw_write_s, 3), " load ", Fixed(s.disk.load_s, 3), " raw read ",
                         Fixed(s.disk.raw_read_s, 3), " async stall ", Fixed(s.disk.async_stall_s, 4), " sync save ",
                         Fixed(s.disk.sync_save_s, 3));
  if (s.shm) {
    note += Str("; on /dev/shm (tmpfs): save ratio ", Fixed(s.shm->raw_write_s / s.shm->save_s, 3), ", load ratio ",
                Fixed(s.shm->raw_read_s / s.shm->load_s, 3), ", async stall ratio ",
                Fixed(s.shm->async_stall_s / s.shm->sync_save_s, 3));
  }
  return note;
}

// A figure computed from the shared measurement: {value, baseline} in `unit`.
Figure SharedFigure(const std::string& name, const std::string& value_name, const std::string& baseline_name,
                    const std::string& unit, std::pair<double, double> (*pick)(const CheckpointTimes&)) {
  const std::shared_ptr<Shared> shared = SharedMeasurement();
  Figure f{name, {value_name, unit, 0, nullptr}, Throughput{baseline_name, unit, 0, nullptr}};
  f.precomputed = [shared, pick] {
    EnsureMeasured(*shared);
    return pick(shared->disk);
  };
  return f;
}

const bool kSave = RegisterFigure("dcp_save_vs_raw_write", [] {
  return SharedFigure("dcp_save_vs_raw_write", "dcp_save", "raw_write", "GiB/s", [](const CheckpointTimes& t) {
    return std::pair<double, double>{t.gib / t.save_s, t.gib / t.raw_write_s};
  });
});
const bool kLoad = RegisterFigure("dcp_load_resharded_vs_raw_read", [] {
  return SharedFigure("dcp_load_resharded_vs_raw_read", "dcp_load_resharded", "raw_read", "GiB/s",
                      [](const CheckpointTimes& t) {
                        return std::pair<double, double>{t.gib / t.load_s, t.gib / t.raw_read_s};
                      });
});
// Lower is better here: the ratio is the fraction of a synchronous save the loop stays blocked.
const bool kStall = RegisterFigure("async_save_stall_vs_sync", [] {
  Figure f = SharedFigure("async_save_stall_vs_sync", "async_save_stall", "sync_save", "s", [](const CheckpointTimes& t) {
    return std::pair<double, double>{t.async_stall_s, t.sync_save_s};
  });
  f.note = [shared = SharedMeasurement()] { return Note(*shared); };
  return f;
});

}  // namespace
}  // namespace tessel::bench
