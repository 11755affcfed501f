// comm/launcher/tessel_run.cc — `tessel-run`: starts the local ranks of a multi-process job, like torchrun.
//
//   tessel-run --nproc-per-node N [--nnodes M --node-rank R --master-addr A --master-port P]
//              [--backend auto|gloo|nccl] prog args...
//
// Invariant: each rank runs `prog args...` with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// GROUP_RANK (= node rank), MASTER_ADDR, MASTER_PORT set as torchrun sets them; every line it writes
// to stdout/stderr comes out on the same stream prefixed "[rank r] ". When a rank exits non-zero (or
// dies of a signal), the launcher terminates the others (SIGTERM, then SIGKILL after 5 s) and exits
// with that rank's code (128 + signal for a signal). A rank that exits with code 0 while others still
// run ends the job too, after a short grace for the usual skew of a clean shutdown (--exit-grace-s,
// default 2): peers waiting for it would otherwise wait out the comm timeout (the comm layer also fails
// their collectives at once when its connection closes); the launcher then exits 1. A job whose ranks
// legitimately finish far apart (rank 0 writes a report alone) passes a larger --exit-grace-s.
// SIGINT/SIGTERM to the launcher are forwarded. `--master-port 0` picks a free port (single node only).
// `--backend` (default auto: nccl when this
// node has a visible GPU for every local process, else gloo; rule in comm/backend_choice.h) is
// exported to every rank as TESSEL_BACKEND. GPUs are counted from /dev/nvidia<N> ($TESSEL_DEV_DIR
// overrides /dev, for tests) and CUDA_VISIBLE_DEVICES, without loading the CUDA runtime.
//
// Multi-node: run one launcher per node with the same --nnodes, --master-addr (node 0's address,
// reachable from every node) and --master-port, and --node-rank 0..M-1. Rank 0 (on node 0) serves
// the rendezvous store at MASTER_ADDR:MASTER_PORT. Set GLOO_SOCKET_IFNAME if the hostname does not
// resolve to the interface the nodes share. A launcher with --node-rank > 0 first waits until something
// accepts connections at MASTER_ADDR:MASTER_PORT, saying so, and gives up with exit code 3 at a stated
// deadline (--rendezvous-timeout-s, default 300).
//
// Slurm (one launcher per node: `srun --ntasks-per-node=1`; one command line, wrapped here):
//   head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
//   srun --ntasks-per-node=1 tessel-run --nproc-per-node "$SLURM_GPUS_ON_NODE" --nnodes "$SLURM_NNODES"
//        --node-rank "$SLURM_NODEID" --master-addr "$head" --master-port 29500 prog args...
// (or skip the launcher: `srun --ntasks-per-node=N` and export RANK=$SLURM_PROCID,
//  WORLD_SIZE=$SLURM_NTASKS, LOCAL_RANK=$SLURM_LOCALID, MASTER_ADDR=$head, MASTER_PORT=29500).
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "comm/backend_choice.h"
#include "core/base/error.h"

namespace {

struct Args {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string backend = "auto";  // resolved to gloo or nccl by ResolveBackend
  int exit_grace_s = 2;
  int rendezvous_timeout_s = 300;
  std::vector<char*> command;
};

struct Stream {
  int fd = -1;        // read end of the child's pipe; -1 once closed
  int out_fd = 1;     // where prefixed lines go (1 or 2)
  std::string partial;
};

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  Stream streams[2];
};

volatile sig_atomic_t g_signal = 0;
void OnSignal(int sig) { g_signal = sig; }

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "tessel-run: %s\nusage: tessel-run --nproc-per-node N [--nnodes M --node-rank R --master-addr A "
               "--master-port P --rendezvous-timeout-s T] [--exit-grace-s G] [--backend auto|gloo|nccl] [--] prog args...\n",
               why);
  std::exit(2);
}

int ParseInt(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < 0) Usage((flag + " needs a non-negative integer, got '" + v + "'").c_str());
  return static_cast<int>(x);
}

Args Parse(int argc, char** argv) {
  Args a;
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.rfind("--", 0) != 0) break;
    std::string value;
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1), arg = arg.substr(0, eq);
    } else {
      if (i + 1 >= argc) Usage((arg + " needs a value").c_str());
      value = argv[++i];
    }
    if (arg == "--nproc-per-node" || arg == "--nproc_per_node") {
      a.nproc_per_node = ParseInt(arg, value);
    } else if (arg == "--nnodes") {
      a.nnodes = ParseInt(arg, value);
    } else if (arg == "--node-rank" || arg == "--node_rank") {
      a.node_rank = ParseInt(arg, value);
    } else if (arg == "--master-addr" || arg == "--master_addr") {
      a.master_addr = value;
    } else if (arg == "--master-port" || arg == "--master_port") {
      a.master_port = ParseInt(arg, value);
    } else if (arg == "--backend") {
      a.backend = value;
    } else if (arg == "--exit-grace-s") {
      a.exit_grace_s = ParseInt(arg, value);
    } else if (arg == "--rendezvous-timeout-s") {
      a.rendezvous_timeout_s = ParseInt(arg, value);
    } else {
      Usage(("unknown flag " + arg).c_str());
    }
  }
  for (; i < argc; ++i) a.command.push_back(argv[i]);
  a.command.push_back(nullptr);
  if (a.command.size() == 1) Usage("no program given");
  if (a.nproc_per_node < 1 || a.nnodes < 1) Usage("--nproc-per-node and --nnodes must be >= 1");
  if (a.node_rank >= a.nnodes) Usage("--node-rank must be < --nnodes");
  if (a.master_port == 0 && a.nnodes > 1) Usage("--master-port 0 (pick a free port) works on a single node only");
  return a;
}

// Turns --backend into "gloo" or "nccl" (usage error, exit 2, when it cannot work on this node).
void ResolveBackend(Args& a) {
  const char* dev = std::getenv("TESSEL_DEV_DIR");
  const int gpus = tessel::comm::CountVisibleGpus(dev != nullptr ? dev : "/dev", std::getenv("CUDA_VISIBLE_DEVICES"));
  try {
    a.backend = tessel::comm::BackendName(tessel::comm::ChooseLauncherBackend(a.backend, gpus, a.nproc_per_node));
  } catch (const tessel::Error& e) {
    Usage(e.what());
  }
}

// Binds port 0 to learn a free port, then releases it for rank 0's store (a small race, single node).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("tessel-run: cannot find a free port");
    std::exit(2);
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

bool TryConnect(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return false;
  bool ok = false;
  for (addrinfo* a = res; a != nullptr && !ok; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    ok = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;  // the store closes a connection that sends nothing
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return ok;
}

std::string UtcAfter(int seconds) {
  const std::time_t t = std::time(nullptr) + seconds;
  char buf[32];
  std::strftime(buf, sizeof(buf), "%H:%M:%S UTC", std::gmtime(&t));
  return buf;
}

// Node rank > 0: waits, saying so, until node 0's rank 0 serves the rendezvous store; exits 3 at the
// stated deadline (or on SIGINT/SIGTERM) instead of letting every rank wait silently.
void WaitForRendezvous(const Args& a) {
  const std::string where = a.master_addr + ":" + std::to_string(a.master_port);
  std::fprintf(stderr,
               "[tessel-run] node %d of %d: waiting for the rendezvous at %s (rank 0 on node 0) until %s "
               "(%d s, --rendezvous-timeout-s)\n",
               a.node_rank, a.nnodes, where.c_str(), UtcAfter(a.rendezvous_timeout_s).c_str(), a.rendezvous_timeout_s);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::seconds(a.rendezvous_timeout_s);
  auto next_note = start + std::chrono::seconds(30);
  while (!TryConnect(a.master_addr, a.master_port)) {
    if (g_signal != 0) std::exit(128 + g_signal);
    if (Clock::now() >= deadline) {
      std::fprintf(stderr,
                   "[tessel-run] node %d: gave up after %d s: nothing accepted a connection at %s. Is node 0's "
                   "launcher running with --master-addr %s --master-port %d, and is that address reachable from "
                   "here?\n",
                   a.node_rank, a.rendezvous_timeout_s, where.c_str(), a.master_addr.c_str(), a.master_port);
      std::exit(3);
    }
    if (Clock::now() >= next_note) {
      const long waited = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - start).count();
      std::fprintf(stderr, "[tessel-run] node %d: still waiting for %s (%ld s of %d s)\n", a.node_rank, where.c_str(),
                   waited, a.rendezvous_timeout_s);
      next_note += std::chrono::seconds(30);
    }
    ::poll(nullptr, 0, 200);
  }
  std::fprintf(stderr, "[tessel-run] node %d: the rendezvous at %s answered\n", a.node_rank, where.c_str());
}

void WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

// Emits the complete lines of `s` (all of it when `flush`), each prefixed by the rank.
void EmitLines(Stream& s, int rank, bool flush) {
  size_t start = 0, nl;
  std::string out;
  const std::string prefix = "[rank " + std::to_string(rank) + "] ";
  while ((nl = s.partial.find('\n', start)) != std::string::npos) {
    out += prefix + s.partial.substr(start, nl - start + 1);
    start = nl + 1;
  }
  s.partial.erase(0, start);
  if (flush && !s.partial.empty()) out += prefix + s.partial + "\n", s.partial.clear();
  if (!out.empty()) WriteAll(s.out_fd, out);
}

void Spawn(Rank& r, const Args& a, int local_rank) {
  int pipes[2][2];
  for (auto& p : pipes) {
    if (::pipe(p) != 0) {
      std::perror("tessel-run: pipe");
      std::exit(2);
    }
  }
  const int world = a.nproc_per_node * a.nnodes;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);  // its own process group, so termination reaches its children too
    ::dup2(pipes[0][1], 1);
    ::dup2(pipes[1][1], 2);
    for (auto& p : pipes) ::close(p[0]), ::close(p[1]);
    ::setenv("RANK", std::to_string(r.rank).c_str(), 1);
    ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
    ::setenv("LOCAL_RANK", std::to_string(local_rank).c_str(), 1);
    ::setenv("LOCAL_WORLD_SIZE", std::to_string(a.nproc_per_node).c_str(), 1);
    ::setenv("GROUP_RANK", std::to_string(a.node_rank).c_str(), 1);
    ::setenv("MASTER_ADDR", a.master_addr.c_str(), 1);
    ::setenv("MASTER_PORT", std::to_string(a.master_port).c_str(), 1);
    ::setenv("TESSEL_BACKEND", a.backend.c_str(), 1);
    ::execvp(a.command[0], a.command.data());
    std::fprintf(stderr, "tessel-run: cannot execute %s: %s\n", a.command[0], std::strerror(errno));
    std::_Exit(127);
  }
  if (pid < 0) {
    std::perror("tessel-run: fork");
    std::exit(2);
  }
  r.pid = pid;
  r.running = true;
  for (int k = 0; k < 2; ++k) {
    ::close(pipes[k][1]);
    r.streams[k].fd = pipes[k][0];
    r.streams[k].out_fd = k + 1;
  }
}

void SignalAll(std::vector<Rank>& ranks, int sig) {
  for (Rank& r : ranks) {
    if (r.running) ::kill(-r.pid, sig);
  }
}

// Reads what is available on every open stream (waits up to `timeout_ms`).
void Pump(std::vector<Rank>& ranks, int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<std::pair<Rank*, Stream*>> owners;
  for (Rank& r : ranks) {
    for (Stream& s : r.streams) {
      if (s.fd >= 0) fds.push_back({s.fd, POLLIN, 0}), owners.emplace_back(&r, &s);
    }
  }
  if (fds.empty()) {
    ::poll(nullptr, 0, timeout_ms);
    return;
  }
  if (::poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
  char buf[65536];
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    auto [r, s] = owners[i];
    const ssize_t n = ::read(s->fd, buf, sizeof(buf));
    if (n > 0) {
      s->partial.append(buf, static_cast<size_t>(n));
      EmitLines(*s, r->rank, false);
    } else if (n == 0 || errno != EINTR) {
      EmitLines(*s, r->rank, true);
      ::close(s->fd);
      s->fd = -1;
    }
  }
}

bool AnyOpen(const std::vector<Rank>& ranks) {
  for (const Rank& r : ranks) {
    if (r.running || r.streams[0].fd >= 0 || r.streams[1].fd >= 0) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  Args args = Parse(argc, argv);
  ResolveBackend(args);
  if (args.master_port == 0) args.master_port = FreePort();
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  if (args.node_rank > 0) WaitForRendezvous(args);
  std::vector<Rank> ranks(args.nproc_per_node);
  for (int lr = 0; lr < args.nproc_per_node; ++lr) {
    ranks[lr].rank = args.node_rank * args.nproc_per_node + lr;
    Spawn(ranks[lr], args, lr);
  }
  using Clock = std::chrono::steady_clock;
  int exit_code = 0;
  bool terminating = false;
  Clock::time_point kill_at{};
  int early_rank = -1;  // a rank that exited 0 while others ran
  Clock::time_point early_deadline{};
  while (AnyOpen(ranks)) {
    Pump(ranks, 50);
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      for (Rank& r : ranks) {
        if (r.pid != pid) continue;
        r.running = false;
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (code != 0 && !terminating) {
          std::fprintf(stderr, "[tessel-run] rank %d exited with code %d; terminating the other ranks\n", r.rank, code);
          exit_code = code;
        } else if (code == 0 && early_rank < 0) {
          early_rank = r.rank;
          early_deadline = Clock::now() + std::chrono::seconds(args.exit_grace_s);
        }
      }
    }
    bool others_run = false;
    for (const Rank& r : ranks) others_run = others_run || r.running;
    if (!terminating && exit_code == 0 && early_rank >= 0 && others_run && Clock::now() >= early_deadline) {
      std::string still;
      for (const Rank& r : ranks) {
        if (r.running) still += (still.empty() ? "" : ", ") + std::to_string(r.rank);
      }
      std::fprintf(stderr,
                   "[tessel-run] rank %d exited with code 0 but rank(s) %s still run %d s later (they may be waiting "
                   "for it); terminating them (--exit-grace-s sets the grace)\n",
                   early_rank, still.c_str(), args.exit_grace_s);
      exit_code = 1;
    }
    if (!terminating && (exit_code != 0 || g_signal != 0)) {
      if (g_signal != 0 && exit_code == 0) exit_code = 128 + g_signal;
      terminating = true;
      SignalAll(ranks, SIGTERM);
      kill_at = Clock::now() + std::chrono::seconds(5);
    }
    if (terminating && Clock::now() >= kill_at) SignalAll(ranks, SIGKILL);
  }
  return exit_code;
}
