// comm/backends/threads.h — the in-process `threads` backend: ranks are threads of one process.
//
// Invariant: RunRanks starts `world_size` threads, gives thread r a ProcessGroup of rank r (plus
// DeviceGuard(Device::Cpu(r)) so the memory ledger is per rank, and an intra-op thread budget of
// max(1, cores / world_size)), joins them all, and rethrows the first failure. A rank that throws
// aborts the group so peers blocked in collectives fail fast instead of waiting for the timeout.
// Collectives move data directly between the ranks' buffers (no bounce buffer), except small all_reduce /
// all_gather / reduce_scatter, which stage one copy of each input to save the completion barrier.
//
// Example:
//   comm::RunRanks(4, [](comm::ProcessGroupPtr pg) {
//     Tensor t = Full({8}, pg->rank());
//     pg->AllReduce(t, comm::ReduceOp::kSum)->Wait();   // every element == 0+1+2+3
//   });
#pragma once

#include <chrono>
#include <functional>

#include "comm/process_group.h"

namespace tessel::comm {

struct RunRanksOptions {
  std::chrono::milliseconds timeout = kDefaultTimeout;
  int threads_per_rank = 0;  // 0: max(1, cores / world_size)
};

void RunRanks(int world_size, const std::function<void(ProcessGroupPtr world)>& fn,
              const RunRanksOptions& options = {});

}  // namespace tessel::comm
