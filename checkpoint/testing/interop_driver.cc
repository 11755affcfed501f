// checkpoint/testing/interop_driver.cc — the tessel side of safetensors_interop_test.py, which checks
// tessel checkpoints with the official `safetensors` and `xxhash` Python packages (no tessel code on
// that side):
//   interop_driver save DIR     4 ranks, mesh 2x2 ("dp", "tp"), save a state dict of known values in
//                               several layouts and dtypes to DIR, then export DIR.full.safetensors
//                               (beside DIR: an export never writes into a checkpoint directory)
//   interop_driver import FILE  2 ranks, import FILE (written by the Python package) into sharded
//                               tensors and check every local value; prints "import OK" or exits 1
// The values are the functions below; the Python test computes the same ones with numpy.
#include <atomic>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "checkpoint/export.h"
#include "checkpoint/save.h"
#include "comm/backends/threads.h"
#include "core/base/error.h"
#include "core/tensor/factory.h"
#include "dtensor/device_mesh.h"
#include "dtensor/dtensor.h"

namespace tessel::checkpoint {
namespace {

// Full tensor of `shape` whose flat element k is value(k).
template <typename F>
Tensor Pattern(const Shape& shape, DType dtype, F value) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) v[static_cast<size_t>(k)] = value(k);
  return FromDoubles(v, shape, dtype);
}

// The saved state: name -> (full value, placements on the 2x2 mesh).
struct Item {
  std::string fqn;
  Tensor full;
  std::string placements;
};

std::vector<Item> SavedItems() {
  return {
      {"w", Pattern({6, 5}, DType::kFloat32, [](int64_t k) { return k * 0.5 - 3; }), "S(0), S(1)"},
      {"h", Pattern({7}, DType::kFloat16, [](int64_t k) { return k * 0.25; }), "S(0), R"},
      {"ids", Pattern({3, 4}, DType::kInt64, [](int64_t k) { return k * 1000003 - 7; }), "R, S(0)"},
      {"rep", Pattern({2, 3}, DType::kFloat64, [](int64_t k) { return std::sqrt(2.0) * k; }), "R, R"},
  };
}

int SaveMode(const std::string& dir) {
  comm::RunRanks(4, [&](comm::ProcessGroupPtr world) {
    const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2, 2}, {"dp", "tp"});
    StateDict sd;
    for (const Item& it : SavedItems()) {
      sd[it.fqn] = dtensor::DistributeTensor(it.full, mesh, dtensor::ParsePlacements(it.placements)).tensor();
    }
    sd["step"] = int64_t{42};
    checkpoint::Save(sd, dir, world);
  });
  ExportToSafetensors(dir, dir + ".full.safetensors");
  std::printf("save OK\n");
  return 0;
}

int ImportMode(const std::string& path) {
  // What the Python side wrote: a float32 [5, 3] = k - 1.5, b float16 [4] = k / 4, c int32 [2, 2] = k + 1.
  const Tensor a = Pattern({5, 3}, DType::kFloat32, [](int64_t k) { return k - 1.5; });
  const Tensor b = Pattern({4}, DType::kFloat16, [](int64_t k) { return k / 4.0; });
  const Tensor c = Pattern({2, 2}, DType::kInt32, [](int64_t k) { return k + 1.0; });
  std::atomic<bool> ok{true};
  comm::RunRanks(2, [&](comm::ProcessGroupPtr world) {
    const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2}, {"tp"});
    StateDict sd = {
        {"a", dtensor::DistributeTensor(Zeros({5, 3}), mesh, dtensor::ParsePlacements("S(1)")).tensor()},
        {"b", dtensor::DistributeTensor(Zeros({4}, DType::kFloat16), mesh, dtensor::ParsePlacements("S(0)")).tensor()},
        {"c", dtensor::DistributeTensor(Zeros({2, 2}, DType::kInt32), mesh, dtensor::ParsePlacements("R")).tensor()},
    };
    ImportSafetensors(sd, path);
    const std::vector<std::pair<std::string, Tensor>> want = {{"a", a}, {"b", b}, {"c", c}};
    for (const auto& [fqn, full] : want) {
      const dtensor::DTensor got(std::get<Tensor>(sd.at(fqn)));
      const dtensor::DTensor expect = dtensor::DistributeTensor(full, mesh, got.placements());
      if (got.ToLocal().ToDoubleVector() != expect.ToLocal().ToDoubleVector()) {
        std::fprintf(stderr, "rank %d: %s differs from the Python-written values\n", world->rank(), fqn.c_str());
        ok = false;
      }
    }
  });
  if (!ok) return 1;
  std::printf("import OK\n");
  return 0;
}

}  // namespace
}  // namespace tessel::checkpoint

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("interop_driver save DIR | import FILE");
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);  // unknown --flags are errors
  if (args.size() != 3) {
    std::fprintf(stderr, "usage: interop_driver save DIR | import FILE\n");
    return 2;
  }
  try {
    const std::string mode = args[1];
    if (mode == "save") return tessel::checkpoint::SaveMode(args[2]);
    if (mode == "import") return tessel::checkpoint::ImportMode(args[2]);
  } catch (const tessel::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "unknown mode %s\n", args[1]);
  return 2;
}
