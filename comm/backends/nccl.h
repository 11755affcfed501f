// comm/backends/nccl.h — the `nccl` backend: GPU collectives on NCCL, one communicator and one CUDA
// stream per group, ncclUniqueId shared through comm/store.h (the same TcpStore as gloo).
//
// Invariant: same contract as every ProcessGroup (process_group.h) for CUDA tensors: each call is
// enqueued on the group's stream after the work already queued on the default stream (an event
// dependency), so calls on one group complete in issue order; the returned Work's Wait() blocks the
// host until the collective finished, and never longer than the group's timeout: past it, or on an
// asynchronous NCCL error, the communicator is aborted and Wait throws (kDeadlineExceeded /
// kAborted); the group is then unusable. Communicator creation is bounded by the same timeout
// (kDeadlineExceeded naming rank, world and device; see [Note: NCCL init deadline] in nccl.cc). Tensors are kept alive until their collective completed.
//
// Differences from threads/gloo (documented gaps): no cross-rank mismatch check (NCCL has no cheap
// header channel; a mismatch ends in the timeout); bf16/fp16 reduce in NCCL's native arithmetic
// (per-hop rounding, like PyTorch), not fp32-then-round-once; bool reduces as uint8 max/min
// (sum/max = or, product/min = and). One process per GPU (NCCL rejects two ranks on one device).
//
// Example (one process per GPU, started by tessel-run):
//   comm::ProcessGroupPtr pg = comm::InitNcclProcessGroupFromEnv();   // device = LOCAL_RANK
//   pg->AllReduce(grad_on_gpu, comm::ReduceOp::kAvg)->Wait();
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "comm/process_group.h"
#include "comm/store.h"

namespace tessel::comm {

// Number of CUDA devices; 0 when there is no GPU or no usable driver (never throws).
int CudaDeviceCount();

struct NcclOptions {
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int device_index = -1;  // -1: LOCAL_RANK if set, else rank % CudaDeviceCount()
  std::chrono::milliseconds timeout = kDefaultTimeout;
};

// Collective over all processes: rank 0 serves the TcpStore and publishes the ncclUniqueId.
ProcessGroupPtr InitNcclProcessGroup(int rank, int world_size, const NcclOptions& options = {});
// Over an existing store; `prefix` separates jobs sharing it.
ProcessGroupPtr NewNcclProcessGroup(std::shared_ptr<Store> store, const std::string& prefix, int rank, int world_size,
                                    const NcclOptions& options = {});
// torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, TESSEL_COMM_TIMEOUT_MS).
ProcessGroupPtr InitNcclProcessGroupFromEnv();

}  // namespace tessel::comm
