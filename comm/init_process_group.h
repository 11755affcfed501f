// comm/init_process_group.h — one call for a rank started by tessel-run: the process group of the
// backend the launcher chose (TESSEL_BACKEND), checked against where this rank's tensors live.
//
// Invariant: the backend is ChooseRankBackend(TESSEL_BACKEND, device) (comm/backend_choice.h); nccl
// is used only when tessel was built with the CUDA toolkit (else kUnimplemented saying so), and its
// communicator creation, like gloo's rendezvous, fails after TESSEL_COMM_TIMEOUT_MS instead of hanging.
//
// Example (every rank, under `tessel-run --nproc-per-node 8 prog`):
//   const Device dev = Device::Cuda(std::atoi(std::getenv("LOCAL_RANK")));
//   comm::ProcessGroupPtr world = comm::InitProcessGroupForDevice(dev);   // nccl
#pragma once

#include "comm/process_group.h"
#include "core/tensor/device.h"

namespace tessel::comm {

// True when this build links the nccl backend (a CUDA toolkit was found at build time).
bool NcclBuilt();
ProcessGroupPtr InitProcessGroupForDevice(Device device);

}  // namespace tessel::comm
