// comm/backend_choice.h — which collective backend a job uses: gloo (host tensors) or nccl (CUDA
// tensors). Pure functions, no CUDA needed, so the choice is tested on any machine.
//
// Invariant: one rule, applied in two places. The launcher (tessel_run --backend=auto|gloo|nccl)
// picks nccl for "auto" exactly when the node has visible GPUs, refuses nccl with fewer visible GPUs
// than processes per node (NCCL needs one GPU per process), and exports TESSEL_BACKEND to every rank.
// A rank then takes TESSEL_BACKEND if set, else nccl when its tensors live on CUDA and gloo when they
// live on the host; a backend that cannot move the rank's tensors is an error, never a silent fallback.
//
// Example:
//   const int gpus = comm::CountVisibleGpus("/dev", std::getenv("CUDA_VISIBLE_DEVICES"));
//   comm::Backend b = comm::ChooseLauncherBackend("auto", gpus, /*nproc_per_node=*/8);   // kNccl if gpus >= 8
#pragma once

#include <string>
#include <string_view>

#include "core/tensor/device.h"

namespace tessel::comm {

enum class Backend { kGloo, kNccl };
std::string_view BackendName(Backend backend);  // "gloo", "nccl"

// Visible GPUs on this node, read without the CUDA runtime: the /dev/nvidia<N> device nodes under
// `dev_dir`, restricted by CUDA_VISIBLE_DEVICES (nullptr: unset; "" or "-1": none; a list: its
// entries up to the first invalid index, as CUDA does; GPU-/MIG- UUID entries count one each).
int CountVisibleGpus(const std::string& dev_dir, const char* cuda_visible_devices);

// flag: "auto", "gloo" or "nccl" (else kInvalidArgument listing them). Throws kInvalidArgument when
// nccl is chosen or asked for with fewer visible GPUs than processes per node.
Backend ChooseLauncherBackend(std::string_view flag, int visible_gpus, int nproc_per_node);

// env_backend: the value of TESSEL_BACKEND (nullptr or "": unset). Throws kInvalidArgument when the
// backend cannot move tensors on `device` (nccl with host tensors, gloo with CUDA tensors).
Backend ChooseRankBackend(const char* env_backend, Device device);

}  // namespace tessel::comm
