// comm/backends/gloo.h — the `gloo` backend: multi-process CPU collectives on Gloo's TCP transport,
// with rendezvous through comm/store.h (TcpStore at MASTER_ADDR:MASTER_PORT, or a FileStore).
//
// Invariant: same contract as every ProcessGroup (process_group.h): calls return a Work at once and
// run in issue order on one communication thread per group; before each collective the members
// exchange a small header (sequence number, kind, dtype, bytes, op, root, splits), so a mismatch
// raises kAborted on every rank naming both calls, and a member that never arrives raises
// kDeadlineExceeded naming it. After a timeout or a transport error the group is unusable (Gloo
// closes its connections) and later calls fail at once with kAborted.
//
// Collectives issued on different groups in different orders (rank 0 blocked on a sub-group while rank 1
// is blocked on the world) are detected across processes through the store within about a second and
// raised as kAborted on every rank involved, naming each call, group and rank (gloo_wait_monitor.h).
//
// Cost of the header: one extra round of 2·(W−1) messages of (8 + 2W)·8 bytes per collective, i.e.
// one loopback/network latency (~50–100 µs on loopback); negligible against the 64 MiB collectives
// of FSDP, visible on tiny ones.
//
// Semantics on top of Gloo: avg = sum then divide; bf16/fp16 all_reduce converts to an fp32 staging
// buffer (memory ledger "comm buffers"), reduces in fp32 and rounds once; reduce_scatter = Gloo
// all_to_all into a staging buffer + a local reduction in rank order (same bytes on the wire as a
// ring reduce-scatter); all_to_all = Gloo alltoallv; send/recv = Gloo unbound buffers, all ops of a
// batch posted before any wait.
//
// Example (each process, started by comm/launcher `tessel-run --nproc-per-node 4 prog`):
//   comm::ProcessGroupPtr pg = comm::InitProcessGroupFromEnv();   // RANK, WORLD_SIZE, MASTER_*
//   pg->AllReduce(grad, comm::ReduceOp::kAvg)->Wait();
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "comm/process_group.h"
#include "comm/store.h"

namespace tessel::comm {

struct GlooOptions {
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // Non-empty: rendezvous through a FileStore in this directory (shared filesystem) instead of TCP.
  std::string store_dir;
  // Where this rank's transport listens. `iface` (like GLOO_SOCKET_IFNAME) wins, then `hostname`;
  // when both are empty: 127.0.0.1 if master_addr is a loopback address, else this host's name.
  std::string iface;
  std::string hostname;
  std::chrono::milliseconds timeout = kDefaultTimeout;
  // Intra-op threads of the comm thread (local reductions, copies); 0: the caller's NumThreads().
  int num_threads = 0;
  // The launcher serves the TcpStore at master_addr:master_port (torchrun's agent store, TORCHELASTIC_USE_AGENT_STORE):
  // every rank is a client, under "/worker/attempt_<restart_count>/", so rank 0 exiting first cannot take the store
  // away from ranks still rendezvousing.
  bool agent_store = false;
  int restart_count = 0;
  // Where the launcher records a worker process that exited ("<departed_prefix><global rank>" = "exit code N"; set
  // with agent_store): a rendezvous still waiting for that rank fails at once, naming it, instead of waiting out the
  // timeout. Empty: not recorded.
  std::string departed_prefix;
};

// The key prefix of this process's next world in the launcher's store: "/worker/attempt_<restart_count>", then
// ".../world_<k>" for the k-th later world (after a destroy; every rank makes the same sequence of worlds). One count
// for the C++ rendezvous and the Python one (tessel.distributed's init_process_group with rank= / world_size=).
std::string NextAgentStorePrefix(int restart_count);

// Collective over all `world_size` processes: rank 0 serves the TcpStore (unless store_dir or agent_store is set).
ProcessGroupPtr InitGlooProcessGroup(int rank, int world_size, const GlooOptions& options = {});

// Over a store the caller made; `prefix` separates groups (and jobs) sharing one store.
ProcessGroupPtr NewGlooProcessGroup(std::shared_ptr<Store> store, const std::string& prefix, int rank, int world_size,
                                    const GlooOptions& options = {});

// torchrun-style: RANK, WORLD_SIZE (required), MASTER_ADDR (default 127.0.0.1), MASTER_PORT
// (default 29500); optional TESSEL_STORE_DIR (FileStore), GLOO_SOCKET_IFNAME, TESSEL_COMM_TIMEOUT_MS,
// TORCHELASTIC_USE_AGENT_STORE=True with TORCHELASTIC_RESTART_COUNT (the launcher serves the store).
// Throws kInvalidArgument naming a missing or malformed variable. InitProcessGroupFromEnv also sets
// the calling thread's intra-op budget to max(1, cores / LOCAL_WORLD_SIZE) when that is > 1.
GlooOptions GlooOptionsFromEnv(int* rank, int* world_size);
ProcessGroupPtr InitProcessGroupFromEnv();

// Sets the calling thread's intra-op budget to max(1, cores / local ranks) when that is > 1, the local ranks
// being LOCAL_WORLD_SIZE or, unset, `default_local_ranks` (gloo_init.cc; processes of one node share its cores).
void ShareCoresWithLocalRanks(int default_local_ranks);

}  // namespace tessel::comm
