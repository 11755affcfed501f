// comm/backends/gloo_init.cc — the gloo world of a rank from its environment: torchrun's variables (RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_WORLD_SIZE), the default rendezvous store (rank 0's TcpStore, the
// launcher's, or a FileStore), and the node's cores shared among its ranks. The group itself is gloo.cc's.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>

#include "comm/backends/gloo.h"
#include "core/base/error.h"
#include "core/base/parallel.h"

namespace tessel::comm {
namespace {

using std::chrono::milliseconds;

int EnvInt(const char* name, std::optional<int> fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    TESSEL_CHECK(fallback.has_value(), "InitProcessGroupFromEnv: ", name,
                 " is not set; start the processes with tessel-run (comm/launcher) or set RANK, WORLD_SIZE, ",
                 "MASTER_ADDR, MASTER_PORT like torchrun");
    return *fallback;
  }
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  TESSEL_CHECK(end != v && *end == '\0', "InitProcessGroupFromEnv: ", name, "='", v, "' is not an integer");
  return static_cast<int>(x);
}

}  // namespace

void ShareCoresWithLocalRanks(int default_local_ranks) {
  // Processes of one node share its cores (DESIGN.md "Threads and cores"): never oversubscribe.
  const int local_world = EnvInt("LOCAL_WORLD_SIZE", default_local_ranks);
  if (local_world > 1) SetNumThreads(std::max(1, HardwareConcurrency() / local_world));
}

std::string NextAgentStorePrefix(int restart_count) {
  // The launcher's store outlives a group: a later world of this process needs keys of its own.
  static std::atomic<int> worlds{0};
  const int world = worlds.fetch_add(1);
  return Str("/worker/attempt_", restart_count, world == 0 ? "" : Str("/world_", world));
}

ProcessGroupPtr InitGlooProcessGroup(int rank, int world_size, const GlooOptions& options) {
  TESSEL_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "gloo: rank ", rank,
               " is not in a world of size ", world_size);
  std::shared_ptr<Store> store;
  std::string prefix = "tessel/";
  GlooOptions opts = options;
  if (options.store_dir.empty()) {
    const bool serve = rank == 0 && !options.agent_store;
    store = std::make_shared<TcpStore>(options.master_addr, options.master_port, serve, options.timeout);
    if (options.agent_store) {
      prefix = NextAgentStorePrefix(options.restart_count) + "/tessel/";
      // (tessel/distributed/run.py's AgentStore.note_exit writes these)
      if (opts.departed_prefix.empty()) {
        opts.departed_prefix = Str("/worker/attempt_", options.restart_count, "/exited/");
      }
    }
  } else {
    store = std::make_shared<FileStore>(options.store_dir);
    prefix = Str("tessel/", options.master_port, "/");  // jobs sharing a directory need distinct ports
  }
  return NewGlooProcessGroup(std::move(store), prefix, rank, world_size, opts);
}

GlooOptions GlooOptionsFromEnv(int* rank, int* world_size) {
  GlooOptions options;
  *rank = EnvInt("RANK", std::nullopt);
  *world_size = EnvInt("WORLD_SIZE", std::nullopt);
  if (const char* a = std::getenv("MASTER_ADDR"); a != nullptr && *a != '\0') options.master_addr = a;
  options.master_port = EnvInt("MASTER_PORT", 29500);
  if (const char* d = std::getenv("TESSEL_STORE_DIR"); d != nullptr) options.store_dir = d;
  if (const char* i = std::getenv("GLOO_SOCKET_IFNAME"); i != nullptr) options.iface = i;
  if (const char* a = std::getenv("TORCHELASTIC_USE_AGENT_STORE"); a != nullptr && std::string(a) == "True") {
    options.agent_store = true;
    options.restart_count = EnvInt("TORCHELASTIC_RESTART_COUNT", 0);
  }
  options.timeout = milliseconds(EnvInt("TESSEL_COMM_TIMEOUT_MS", static_cast<int>(kDefaultTimeout.count())));
  return options;
}

ProcessGroupPtr InitProcessGroupFromEnv() {
  int rank = 0, world_size = 0;
  const GlooOptions options = GlooOptionsFromEnv(&rank, &world_size);
  ShareCoresWithLocalRanks(1);
  return InitGlooProcessGroup(rank, world_size, options);
}

}  // namespace tessel::comm
