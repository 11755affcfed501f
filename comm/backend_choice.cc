// comm/backend_choice.cc — launcher and rank backend choice; GPU counting from /dev and CUDA_VISIBLE_DEVICES.
#include "comm/backend_choice.h"

#include <cctype>
#include <filesystem>
#include <sstream>

#include "core/base/error.h"

namespace tessel::comm {
namespace {

bool IsIndex(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

Backend Parse(std::string_view name, std::string_view where) {
  if (name == "gloo") return Backend::kGloo;
  if (name == "nccl") return Backend::kNccl;
  TESSEL_FAIL(ErrorCode::kInvalidArgument, where, ": unknown backend '", name, "' (expected gloo or nccl)");
}

}  // namespace

std::string_view BackendName(Backend backend) { return backend == Backend::kNccl ? "nccl" : "gloo"; }

int CountVisibleGpus(const std::string& dev_dir, const char* cuda_visible_devices) {
  int nodes = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dev_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("nvidia", 0) == 0 && IsIndex(name.substr(6))) ++nodes;
  }
  if (cuda_visible_devices == nullptr) return nodes;
  int visible = 0;
  std::stringstream list(cuda_visible_devices);
  std::string item;
  while (std::getline(list, item, ',')) {
    if (item.rfind("GPU-", 0) == 0 || item.rfind("MIG-", 0) == 0) {
      ++visible;
    } else if (IsIndex(item) && std::stoi(item) < nodes) {
      ++visible;
    } else {
      break;  // CUDA ignores everything from the first invalid entry on ("-1" hides all)
    }
  }
  return visible;
}

Backend ChooseLauncherBackend(std::string_view flag, int visible_gpus, int nproc_per_node) {
  if (flag == "auto") return visible_gpus > 0 && visible_gpus >= nproc_per_node ? Backend::kNccl : Backend::kGloo;
  const Backend b = Parse(flag, "tessel-run --backend (auto, gloo or nccl)");
  TESSEL_CHECK(b != Backend::kNccl || visible_gpus >= nproc_per_node, "tessel-run --backend=nccl: ", nproc_per_node,
               " processes per node need one GPU each, but ", visible_gpus,
               " are visible (check CUDA_VISIBLE_DEVICES, or use --backend=gloo for host tensors)");
  return b;
}

Backend ChooseRankBackend(const char* env_backend, Device device) {
  const bool unset = env_backend == nullptr || *env_backend == '\0';
  const Backend b = unset ? (device.is_cuda() ? Backend::kNccl : Backend::kGloo) : Parse(env_backend, "TESSEL_BACKEND");
  TESSEL_CHECK(b != Backend::kNccl || device.is_cuda(), "TESSEL_BACKEND=nccl but this rank's tensors are on ", device,
               ": nccl moves CUDA tensors only (use --backend=gloo for host tensors)");
  TESSEL_CHECK(b != Backend::kGloo || !device.is_cuda(), "backend gloo cannot move tensors on ", device,
               ": CUDA tensors need --backend=nccl");
  return b;
}

}  // namespace tessel::comm
