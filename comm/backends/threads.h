// comm/backends/threads.h — the in-process `threads` backend: ranks are threads of one process.
//
// Invariant: RunRanks starts `world_size` threads, gives thread r a ProcessGroup of rank r (plus
// DeviceGuard(Device::Cpu(r)) so the memory ledger is per rank, and an intra-op thread budget of
// max(1, cores / world_size)), joins them all, and rethrows the first failure. A rank that throws
// aborts the group so peers blocked in collectives fail fast instead of waiting for the timeout.
// Collectives move data directly between the ranks' buffers (no bounce buffer), except small all_reduce /
// all_gather / reduce_scatter, which stage one copy of each input to save the completion barrier.
// Collectives issued on different groups in different orders (rank 0 waits on a sub-group while rank 1
// waits on the world) are a certain deadlock once every rank involved is blocked in Work::Wait: it is
// detected then and every rank waiting in those calls raises kAborted naming each call, group and rank
// (threads_rendezvous.h), instead of waiting out the timeout.
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

// The in-process form of `tessel-run --max-restarts` (torchrun's semantics): runs RunRanks(world_size, ...)
// and, when it fails, runs every rank again on a fresh world, up to `max_restarts` times; `fn` gets the
// attempt (0 first) and resumes from its own checkpoints. Each restart is announced on stdout ("restarting
// all N ranks after attempt A failed: <error>"); the last attempt's error is rethrown. Returns the number
// of restarts used.
// Marks the rank of `group` (one of a RunRanks world's groups; no effect on another backend's) as having left
// every group of its world (destroy_process_group: `departed` true) or joined them again (false): while it is
// away, a peer's collective or p2p op waiting for it fails at once, naming it and saying so, as gloo peers
// fail when a destroyed group's connections close, instead of waiting until its thread returns. Joining again
// is a rendezvous of the whole world, as torch's init_process_group: it returns once every rank has joined
// (ThreadsWorld::Rejoin), so no rank's next call finds a peer still away.
void SetThreadsRankDeparted(const ProcessGroupPtr& group, bool departed);

int RunRanksWithRestarts(int world_size, int max_restarts,
                         const std::function<void(ProcessGroupPtr world, int attempt)>& fn,
                         const RunRanksOptions& options = {});

}  // namespace tessel::comm
