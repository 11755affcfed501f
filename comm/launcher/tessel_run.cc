// comm/launcher/tessel_run.cc — `tessel-run`: starts the local ranks of a multi-process job, like torchrun.
//
//   tessel-run --nproc-per-node N [--nnodes M --node-rank R --master-addr A --master-port P]
//              [--max-restarts N] [--backend auto|gloo|nccl] prog args...
//
// Flags are absl flags spelled torchrun's way (--nproc-per-node or --nproc_per_node, `--flag value` or
// `--flag=value`); they end at the first argument that is not a flag (or at `--`): the rest is the program and
// its arguments. An unknown flag is a usage error (exit 2).
//
// Invariant: each rank runs `prog args...` with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// GROUP_RANK (= node rank), MASTER_ADDR, MASTER_PORT, GROUP_WORLD_SIZE, ROLE_*, TORCHELASTIC_RUN_ID /
// _RESTART_COUNT / _MAX_RESTARTS set as torchrun sets them; every line it writes
// to stdout/stderr comes out on the same stream prefixed "[rank r] " (unless the log flags below send it
// elsewhere). When a rank exits non-zero (or
// dies of a signal), the launcher terminates the others (SIGTERM, then SIGKILL after 5 s) and exits
// with that rank's code (128 + signal for a signal). A rank that exits with code 0 leaves the others running
// until they finish, as torchrun's (rank 0 often saves a checkpoint or writes a report after the others are
// done; peers blocked in a collective on it fail at once, the comm layer seeing its connection close); with
// --exit-grace-s G > 0 the others are stopped G s after such an exit and the launcher exits 1 (for jobs whose
// ranks must finish together).
// --max-restarts N (torchrun's name and semantics): when an attempt fails (any exit code other than 0, once
// the others are stopped as above), the launcher prints "[tessel-run] attempt A failed with exit code C;
// restarting ..." and starts every local rank again, up to N times; it exits with the last attempt's code.
// Each rank sees TESSEL_RESTART_COUNT (0 for the first attempt), like torchrun's TORCHELASTIC_RESTART_COUNT.
// The program resumes itself (examples/gpt/train.cc: from the newest complete checkpoint). Single node only:
// a node restarting alone could not rejoin peers that did not restart. A signal to the launcher never restarts.
// SIGINT/SIGTERM/SIGHUP/SIGQUIT to the launcher are forwarded.
// Error files (torchrun's): each rank gets its own TORCHELASTIC_ERROR_FILE path (in a directory the launcher
// creates and removes); a Python entry point decorated with torch's `record`
// (tessel.distributed.elastic.multiprocessing.errors.record) writes its uncaught exception there, and when that
// rank is the attempt's first failure the launcher prints it as the root cause ("[tessel-run] root cause (first
// observed failure): rank R ..." then the exception and its traceback), after the ranks' own output.
// `--master-port 0` picks a free port (single node only). torchrun's other flags run too: --standalone (one node,
// 127.0.0.1, a free port), -m / --module, --run-path and --no-python (a *.py program otherwise runs as
// `$PYTHON_EXEC -u prog.py`, python3 by default), --nproc-per-node auto / cpu / gpu, --nnodes N:N, --role,
// --monitor-interval (accepted). Logs as torchrun's: --redirects / -r and --tee / -t (3: stdout and stderr, 1:
// stdout, 2: stderr, or per local rank "0:1,1:2") write a rank's streams to
// <log-dir>/<run id>/attempt_<n>/<local rank>/{stdout,stderr}.log (a temporary --log-dir, printed, when none is
// given; the run id is --rdzv-id's, else random); --tee also writes them to the console, each line prefixed
// "[<role><local rank>]:" (--log-line-prefix-template with ${role_name}, ${local_rank}, ${rank}), --redirects
// only to the file; --local-ranks-filter 0,1 keeps the other local ranks' streams off the console (not out of
// their files). Streams neither redirected nor teed keep the "[rank r] " prefix.
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "comm/backend_choice.h"
#include "core/base/error.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(int, nproc_per_node, 1, "processes (ranks) to start on this node");
ABSL_FLAG(int, nnodes, 1, "nodes in the job (one launcher per node)");
ABSL_FLAG(int, node_rank, 0, "this node's index, 0..nnodes-1");
ABSL_FLAG(std::string, master_addr, "127.0.0.1", "node 0's address (rank 0 serves the rendezvous store there)");
ABSL_FLAG(int, master_port, 29500, "the rendezvous port (0: a free one, single node only)");
ABSL_FLAG(std::string, backend, "auto", "auto, gloo or nccl (exported as TESSEL_BACKEND)");
ABSL_FLAG(int, exit_grace_s, 0,
          "0: every rank may finish when it finishes (torchrun's); G > 0: the others are stopped G s after one "
          "exited with code 0");
ABSL_FLAG(int, rendezvous_timeout_s, 300, "node rank > 0: how long to wait for node 0's rendezvous");
ABSL_FLAG(int, max_restarts, 0, "restart all local ranks up to N times when one fails (torchrun's --max-restarts)");
// torchrun's rendezvous flags, as its elastic tutorials pass them: the endpoint is the master address and port, the
// id becomes TORCHELASTIC_RUN_ID; the backend (c10d, static) changes nothing (one static rendezvous here).
ABSL_FLAG(std::string, rdzv_id, "none", "the job's id (TORCHELASTIC_RUN_ID)");
ABSL_FLAG(std::string, rdzv_backend, "static", "accepted for torchrun's command lines (c10d, static)");
ABSL_FLAG(std::string, rdzv_endpoint, "", "host:port of the rendezvous (sets --master-addr / --master-port)");
// torchrun's other flags, so its command lines run unchanged:
ABSL_FLAG(bool, standalone, false, "one node, a free port on 127.0.0.1 (torchrun's --standalone)");
ABSL_FLAG(bool, module, false, "run the program as `python -u -m prog` (torchrun's -m / --module)");
ABSL_FLAG(bool, no_python, false, "exec the program as given, even a *.py (torchrun's --no-python)");
ABSL_FLAG(bool, run_path, false, "run the program as a Python file (torchrun's --run-path)");
ABSL_FLAG(std::string, role, "default", "the workers' role (ROLE_NAME)");
ABSL_FLAG(double, monitor_interval, 0.1, "accepted for torchrun's command lines (the launcher polls every 50 ms)");
ABSL_FLAG(std::string, log_dir, "", "where --redirects / --tee write the ranks' log files (default: a new temp dir)");
ABSL_FLAG(std::string, redirects, "0", "std streams to log files only: 3 both, 1 stdout, 2 stderr, or '0:1,1:2'");
ABSL_FLAG(std::string, tee, "0", "std streams to log files and the console (values as --redirects)");
ABSL_FLAG(std::string, local_ranks_filter, "", "only these local ranks' streams reach the console, e.g. 0,1");
ABSL_FLAG(std::string, log_line_prefix_template, "",
          "the console prefix of teed lines (default [${role_name}${local_rank}]:)");

namespace {

struct Args {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool pick_port = false;  // --master-port 0: a fresh free port for every attempt
  std::string backend = "auto";  // resolved to gloo or nccl by ResolveBackend
  int exit_grace_s = 0;
  int rendezvous_timeout_s = 300;
  int max_restarts = 0;
  std::string run_id = "none";
  std::string role = "default";
  std::vector<char*> command;
  // Logs: per local rank, which streams (bit 1 stdout, bit 2 stderr) go to files (redirects | tee) and which
  // of those also to the console (tee); which local ranks reach the console at all.
  std::vector<int> to_file, teed;
  std::vector<bool> shown;
  std::string log_dir, log_run_id, prefix_template;
};

struct Stream {
  int fd = -1;        // read end of the child's pipe; -1 once closed
  int out_fd = 1;     // where prefixed lines go (1 or 2); -1: not to the console
  int log_fd = -1;    // the log file the stream's bytes also go to, or -1
  std::string prefix;  // of each console line
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

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "tessel-run: %s\nusage: tessel-run --nproc-per-node N [--nnodes M --node-rank R --master-addr A "
               "--master-port P --rendezvous-timeout-s T] [--exit-grace-s G] [--max-restarts N] "
               "[--backend auto|gloo|nccl] [--] prog args...\n(flags take '-' or '_' between words; --helpfull "
               "lists them)\n",
               why.c_str());
  std::exit(2);
}

// "--nproc-per-node=4" -> "--nproc_per_node=4": torchrun spells its flags both ways; absl names are identifiers.
std::string NormalizeFlag(const std::string& arg) {
  std::string out = arg;
  const size_t stop = std::min(out.find('='), out.size());
  for (size_t i = 2; i < stop; ++i) {
    if (out[i] == '-') out[i] = '_';
  }
  return out;
}

// Splits argv at the program: the launcher's flags (normalized, checked against the registered absl flags so an
// unknown one is a usage error, exit 2) go to absl, the first argument that is not a flag or a flag's value (or
// everything after "--") is the command. Flags after the program belong to the program.
// GPUs of this node the ranks may use: /dev/nvidia<N> ($TESSEL_DEV_DIR overrides /dev) and CUDA_VISIBLE_DEVICES.
int VisibleGpus() {
  const char* dev = std::getenv("TESSEL_DEV_DIR");
  return tessel::comm::CountVisibleGpus(dev != nullptr ? dev : "/dev", std::getenv("CUDA_VISIBLE_DEVICES"));
}

// torchrun's symbolic values as numbers: --nproc-per-node auto (this node's GPUs, else its CPUs), cpu, gpu;
// --nnodes MIN:MAX with MIN == MAX (an elastic range is refused).
std::string FlagValue(const std::string& name, const std::string& value) {
  if (name == "nproc_per_node" && (value == "auto" || value == "cpu" || value == "gpu")) {
    const int gpus = VisibleGpus();
    const int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    if (value == "gpu" && gpus == 0) Usage("--nproc-per-node gpu: this node has no visible GPU");
    return std::to_string(value == "cpu" || (value == "auto" && gpus == 0) ? cpus : gpus);
  }
  if (name == "nnodes" && value.find(':') != std::string::npos) {
    const std::string lo = value.substr(0, value.find(':')), hi = value.substr(value.find(':') + 1);
    if (lo != hi) Usage("--nnodes " + value + ": elastic node ranges are not supported; give one count");
    return lo;
  }
  return value;
}

int SplitAtProgram(int argc, char** argv, std::vector<std::string>* flags) {
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") return i + 1;
    if (arg == "-m") arg = "--module";  // torchrun's short flags
    if (arg == "-r") arg = "--redirects";
    if (arg == "-t") arg = "--tee";
    if (arg.size() < 3 || arg.rfind("--", 0) != 0) break;
    std::string normalized = NormalizeFlag(arg);
    const size_t eq = normalized.find('=');
    const std::string name = normalized.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    if (eq != std::string::npos) normalized = "--" + name + "=" + FlagValue(name, normalized.substr(eq + 1));
    flags->push_back(normalized);
    if (name == "help" || name == "helpfull" || name == "helpshort" || name == "version") continue;  // absl's own
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) Usage("unknown flag --" + name);
    if (eq != std::string::npos || flag->IsOfType<bool>()) continue;
    if (i + 1 >= argc) Usage(arg + " needs a value");
    flags->push_back(FlagValue(name, argv[++i]));
  }
  return i;
}

// --redirects / --tee: the streams (bit 1 stdout, bit 2 stderr) of each of `nproc` local ranks: "3" for all, or
// "local_rank:code" pairs ("0:1,1:2"; ranks not named get 0).
std::vector<int> StreamCodes(const std::string& flag, const std::string& spec, int nproc) {
  auto bad = [&] { Usage("--" + flag + " " + spec + ": expected 0-3 or local_rank:code pairs like 0:1,1:2"); };
  int code = 0;
  if (spec.find(':') == std::string::npos) {
    if (!absl::SimpleAtoi(spec, &code) || code < 0 || code > 3) bad();
    return std::vector<int>(nproc, code);
  }
  std::vector<int> out(nproc, 0);
  for (const absl::string_view item : absl::StrSplit(spec, ',')) {
    const std::vector<absl::string_view> kv = absl::StrSplit(item, ':');
    int rank = 0;
    if (kv.size() != 2 || !absl::SimpleAtoi(kv[0], &rank) || !absl::SimpleAtoi(kv[1], &code) || code < 0 ||
        code > 3 || rank < 0) {
      bad();
    }
    if (rank < nproc) out[rank] = code;
  }
  return out;
}

// The log flags into `a` (see the header comment).
void ParseLogs(Args& a) {
  const std::vector<int> redirects = StreamCodes("redirects", absl::GetFlag(FLAGS_redirects), a.nproc_per_node);
  a.teed = StreamCodes("tee", absl::GetFlag(FLAGS_tee), a.nproc_per_node);
  a.to_file.resize(a.nproc_per_node);
  bool any_file = false;
  for (int r = 0; r < a.nproc_per_node; ++r) a.to_file[r] = redirects[r] | a.teed[r], any_file |= a.to_file[r] != 0;
  a.shown.assign(a.nproc_per_node, true);
  if (const std::string filter = absl::GetFlag(FLAGS_local_ranks_filter); !filter.empty()) {
    a.shown.assign(a.nproc_per_node, false);
    for (const absl::string_view item : absl::StrSplit(filter, ',')) {
      int r = 0;
      if (!absl::SimpleAtoi(item, &r)) {
        Usage("--local-ranks-filter must be a comma-separated list of integers e.g. --local-ranks-filter=0,1,2");
      }
      if (r >= 0 && r < a.nproc_per_node) a.shown[r] = true;
    }
  }
  const std::string tmpl = absl::GetFlag(FLAGS_log_line_prefix_template);
  a.prefix_template = tmpl.empty() ? "[${role_name}${local_rank}]:" : tmpl;
  if (!any_file) return;
  a.log_run_id = a.run_id;
  if (a.log_run_id == "none") {  // torchrun's folders carry a random run id when the job has none
    std::random_device rd;
    char hex[9];
    std::snprintf(hex, sizeof(hex), "%08x", rd());
    a.log_run_id = hex;
  }
  a.log_dir = absl::GetFlag(FLAGS_log_dir);
  if (a.log_dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    a.log_dir = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/tessel_run_logs_XXXXXX";
    if (::mkdtemp(a.log_dir.data()) == nullptr) Usage("cannot create a log directory under " + a.log_dir);
    std::fprintf(stderr, "[tessel-run] log directory: %s\n", a.log_dir.c_str());
  }
}

// mkdir -p; exits 2 naming the path when it cannot.
void MakeDirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i < path.size() && path[i] != '/') continue;
    const std::string part = path.substr(0, i);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
      std::fprintf(stderr, "tessel-run: cannot create %s: %s\n", part.c_str(), std::strerror(errno));
      std::exit(2);
    }
  }
}

// The console prefix of a teed line: the template with ${role_name}, ${local_rank} and ${rank} filled in.
std::string TeePrefix(const Args& a, int local_rank, int rank) {
  return absl::StrReplaceAll(a.prefix_template, {{"${role_name}", a.role},
                                                 {"${local_rank}", std::to_string(local_rank)},
                                                 {"${rank}", std::to_string(rank)}});
}

Args Parse(int argc, char** argv) {
  std::vector<std::string> flags;
  const int program = SplitAtProgram(argc, argv, &flags);
  std::vector<char*> absl_argv = {argv[0]};
  for (std::string& f : flags) absl_argv.push_back(f.data());
  absl::SetProgramUsageMessage("starts the local ranks of a job, like torchrun: tessel-run --nproc-per-node N "
                               "[--max-restarts N] ... prog args... (comm/launcher/tessel_run.cc)");
  absl::ParseCommandLine(static_cast<int>(absl_argv.size()), absl_argv.data());
  Args a;
  for (const auto& [v, flag] : {std::pair{&a.nproc_per_node, &FLAGS_nproc_per_node}, {&a.nnodes, &FLAGS_nnodes},
                                {&a.node_rank, &FLAGS_node_rank}, {&a.master_port, &FLAGS_master_port},
                                {&a.exit_grace_s, &FLAGS_exit_grace_s},
                                {&a.rendezvous_timeout_s, &FLAGS_rendezvous_timeout_s},
                                {&a.max_restarts, &FLAGS_max_restarts}}) {
    *v = absl::GetFlag(*flag);
    if (*v < 0) Usage("--" + std::string(absl::GetFlagReflectionHandle(*flag).Name()) + " must be >= 0");
  }
  a.master_addr = absl::GetFlag(FLAGS_master_addr);
  a.backend = absl::GetFlag(FLAGS_backend);
  a.run_id = absl::GetFlag(FLAGS_rdzv_id);
  a.role = absl::GetFlag(FLAGS_role);
  if (const std::string endpoint = absl::GetFlag(FLAGS_rdzv_endpoint); !endpoint.empty()) {
    const size_t colon = endpoint.rfind(':');
    a.master_addr = endpoint.substr(0, colon);
    if (colon != std::string::npos && !absl::SimpleAtoi(endpoint.substr(colon + 1), &a.master_port)) {
      Usage("--rdzv-endpoint must be host:port, got " + endpoint);
    }
  }
  if (program >= argc) Usage("no program given");
  // The command as torchrun builds it: python -u [-m] prog for a module, a --run-path file or a *.py program
  // (unless --no-python); PYTHON_EXEC names the interpreter (python3 by default).
  const std::string prog = argv[program];
  const bool py_file = prog.size() > 3 && prog.compare(prog.size() - 3, 3, ".py") == 0;
  if (!absl::GetFlag(FLAGS_no_python) && (absl::GetFlag(FLAGS_module) || absl::GetFlag(FLAGS_run_path) || py_file)) {
    static std::string python;  // outlives Parse: a.command points into it
    const char* exec = std::getenv("PYTHON_EXEC");
    python = exec != nullptr && *exec ? exec : "python3";
    a.command = {python.data(), const_cast<char*>("-u")};
    if (absl::GetFlag(FLAGS_module)) a.command.push_back(const_cast<char*>("-m"));
  } else if (absl::GetFlag(FLAGS_module)) {
    Usage("--module and --no-python cannot be used together");
  }
  for (int i = program; i < argc; ++i) a.command.push_back(argv[i]);
  a.command.push_back(nullptr);
  if (absl::GetFlag(FLAGS_standalone)) {
    if (a.nnodes != 1) Usage("--standalone is one node");
    a.master_addr = "127.0.0.1";
    a.master_port = 0;
  }
  if (a.nproc_per_node < 1 || a.nnodes < 1) Usage("--nproc-per-node and --nnodes must be >= 1");
  if (a.node_rank >= a.nnodes) Usage("--node-rank must be < --nnodes");
  if (a.master_port == 0 && a.nnodes > 1) Usage("--master-port 0 (pick a free port) works on a single node only");
  if (a.max_restarts > 0 && a.nnodes > 1) {
    Usage("--max-restarts needs --nnodes 1: a node that restarts alone cannot rejoin peers that did not");
  }
  a.pick_port = a.master_port == 0;
  ParseLogs(a);
  return a;
}

// Turns --backend into "gloo" or "nccl" (usage error, exit 2, when it cannot work on this node).
void ResolveBackend(Args& a) {
  const int gpus = VisibleGpus();
  try {
    a.backend = tessel::comm::BackendName(tessel::comm::ChooseLauncherBackend(a.backend, gpus, a.nproc_per_node));
  } catch (const tessel::Error& e) {
    Usage(std::string(e.what()));
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

// Emits the complete lines of `s` (all of it when `flush`) to the console, each with the stream's prefix.
void EmitLines(Stream& s, bool flush) {
  size_t start = 0, nl;
  std::string out;
  while ((nl = s.partial.find('\n', start)) != std::string::npos) {
    out += s.prefix + s.partial.substr(start, nl - start + 1);
    start = nl + 1;
  }
  s.partial.erase(0, start);
  if (flush && !s.partial.empty()) out += s.prefix + s.partial + "\n", s.partial.clear();
  if (!out.empty()) WriteAll(s.out_fd, out);
}

// Where rank `rank` of attempt `attempt` writes its error file (TORCHELASTIC_ERROR_FILE).
std::string ErrorFile(const std::string& dir, int attempt, int rank) {
  return dir + "/attempt_" + std::to_string(attempt) + "_rank_" + std::to_string(rank) + ".json";
}

// Prints the failed rank's error file (torch's format: {"message": {"message": "Type: text", "extraInfo":
// {"py_callstack": "...", "timestamp": "..."}}}) as the attempt's root cause; a rank that wrote none gets a
// one-line hint. Removes the file.
void ReportRootCause(const std::string& path, int rank, int local_rank, int code) {
  std::fprintf(stderr, "[tessel-run] root cause (first observed failure): rank %d (local_rank %d), exit code %d\n",
               rank, local_rank, code);
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "[tessel-run]   no error file: decorate the entry point with "
                         "torch.distributed.elastic.multiprocessing.errors.record to report its exception here\n");
    return;
  }
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  std::string message = "(an error file that is not torch's JSON)", callstack;
  if (j.is_object() && j.contains("message") && j["message"].is_object()) {
    const nlohmann::json& m = j["message"];
    if (m.contains("message") && m["message"].is_string()) message = m["message"].get<std::string>();
    if (m.contains("extraInfo") && m["extraInfo"].is_object() && m["extraInfo"].contains("py_callstack") &&
        m["extraInfo"]["py_callstack"].is_string()) {
      callstack = m["extraInfo"]["py_callstack"].get<std::string>();
    }
  } else if (j.is_object() && j.contains("message") && j["message"].is_string()) {
    message = j["message"].get<std::string>();
  }
  std::string out = "[tessel-run]   " + message + "\n";
  size_t start = 0, nl;
  while (start < callstack.size()) {
    nl = callstack.find('\n', start);
    if (nl == std::string::npos) nl = callstack.size();
    out += "[tessel-run]   " + callstack.substr(start, nl - start) + "\n";
    start = nl + 1;
  }
  std::fputs(out.c_str(), stderr);
  ::unlink(path.c_str());
}

void Spawn(Rank& r, const Args& a, int attempt, int local_rank, const std::string& error_file) {
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
    // torchrun's role variables (one role, "default", holding every rank) and elastic ones: torch's
    // is_torchelastic_launched() reads TORCHELASTIC_RUN_ID ("none" without a rendezvous id, as torchrun's).
    ::setenv("GROUP_WORLD_SIZE", std::to_string(a.nnodes).c_str(), 1);
    ::setenv("ROLE_NAME", a.role.c_str(), 1);
    ::setenv("ROLE_RANK", std::to_string(r.rank).c_str(), 1);
    ::setenv("ROLE_WORLD_SIZE", std::to_string(world).c_str(), 1);
    ::setenv("TORCHELASTIC_RUN_ID", a.run_id.c_str(), 1);
    ::setenv("TORCHELASTIC_MAX_RESTARTS", std::to_string(a.max_restarts).c_str(), 1);
    ::setenv("MASTER_ADDR", a.master_addr.c_str(), 1);
    ::setenv("MASTER_PORT", std::to_string(a.master_port).c_str(), 1);
    ::setenv("TESSEL_BACKEND", a.backend.c_str(), 1);
    if (!error_file.empty()) ::setenv("TORCHELASTIC_ERROR_FILE", error_file.c_str(), 1);
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
  const std::string folder = a.to_file[local_rank] == 0 ? "" : a.log_dir + "/" + a.log_run_id + "/attempt_" +
                                                                  std::to_string(attempt) + "/" +
                                                                  std::to_string(local_rank);
  if (!folder.empty()) MakeDirs(folder);
  for (int k = 0; k < 2; ++k) {
    ::close(pipes[k][1]);
    Stream& s = r.streams[k];
    s.fd = pipes[k][0];
    const int bit = k + 1;
    const bool to_file = (a.to_file[local_rank] & bit) != 0;
    s.out_fd = a.shown[local_rank] && (!to_file || (a.teed[local_rank] & bit) != 0) ? k + 1 : -1;
    s.prefix = to_file ? TeePrefix(a, local_rank, r.rank) : "[rank " + std::to_string(r.rank) + "] ";
    if (to_file) {
      const std::string path = folder + (k == 0 ? "/stdout.log" : "/stderr.log");
      s.log_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (s.log_fd < 0) std::fprintf(stderr, "tessel-run: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    }
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
  std::vector<Stream*> owners;
  for (Rank& r : ranks) {
    for (Stream& s : r.streams) {
      if (s.fd >= 0) fds.push_back({s.fd, POLLIN, 0}), owners.push_back(&s);
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
    Stream* s = owners[i];
    const ssize_t n = ::read(s->fd, buf, sizeof(buf));
    if (n > 0) {
      if (s->log_fd >= 0) WriteAll(s->log_fd, std::string(buf, static_cast<size_t>(n)));
      if (s->out_fd < 0) continue;
      s->partial.append(buf, static_cast<size_t>(n));
      EmitLines(*s, false);
    } else if (n == 0 || errno != EINTR) {
      if (s->out_fd >= 0) EmitLines(*s, true);
      ::close(s->fd);
      s->fd = -1;
      if (s->log_fd >= 0) ::close(s->log_fd), s->log_fd = -1;
    }
  }
}

bool AnyOpen(const std::vector<Rank>& ranks) {
  for (const Rank& r : ranks) {
    if (r.running || r.streams[0].fd >= 0 || r.streams[1].fd >= 0) return true;
  }
  return false;
}

// Reaps exited ranks: records the first failure in `exit_code` (a non-zero code, or 128 + signal) and the
// first rank that exited 0 while others may still need it.
void Reap(std::vector<Rank>& ranks, bool terminating, int* exit_code, int* failed_rank, int* early_rank,
          std::chrono::steady_clock::time_point* early_deadline, int grace_s) {
  int status = 0;
  pid_t pid;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    for (Rank& r : ranks) {
      if (r.pid != pid) continue;
      r.running = false;
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (code != 0 && !terminating && *exit_code == 0) {
        std::fprintf(stderr, "[tessel-run] rank %d exited with code %d; terminating the other ranks\n", r.rank, code);
        *exit_code = code;
        *failed_rank = r.rank;
      } else if (code == 0 && grace_s > 0 && *early_rank < 0) {
        *early_rank = r.rank;
        *early_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(grace_s);
      }
    }
  }
}

// One attempt: starts every local rank (TESSEL_RESTART_COUNT = `attempt`), forwards their output, and returns
// the job's exit code once every rank is gone.
// `error_dir` (may be empty: no error files) holds the ranks' TORCHELASTIC_ERROR_FILEs.
int RunAttempt(const Args& args, int attempt, const std::string& error_dir) {
  ::setenv("TESSEL_RESTART_COUNT", std::to_string(attempt).c_str(), 1);
  ::setenv("TORCHELASTIC_RESTART_COUNT", std::to_string(attempt).c_str(), 1);
  std::vector<Rank> ranks(args.nproc_per_node);
  for (int lr = 0; lr < args.nproc_per_node; ++lr) {
    ranks[lr].rank = args.node_rank * args.nproc_per_node + lr;
    Spawn(ranks[lr], args, attempt, lr, error_dir.empty() ? "" : ErrorFile(error_dir, attempt, ranks[lr].rank));
  }
  using Clock = std::chrono::steady_clock;
  int exit_code = 0, failed_rank = -1;
  bool terminating = false;
  Clock::time_point kill_at{};
  int early_rank = -1;  // a rank that exited 0 while others ran
  Clock::time_point early_deadline{};
  while (AnyOpen(ranks)) {
    Pump(ranks, 50);
    Reap(ranks, terminating, &exit_code, &failed_rank, &early_rank, &early_deadline, args.exit_grace_s);
    std::string still;
    for (const Rank& r : ranks) {
      if (r.running) still += (still.empty() ? "" : ", ") + std::to_string(r.rank);
    }
    if (!terminating && exit_code == 0 && early_rank >= 0 && !still.empty() && Clock::now() >= early_deadline) {
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
  if (failed_rank >= 0 && !error_dir.empty()) {
    ReportRootCause(ErrorFile(error_dir, attempt, failed_rank), failed_rank,
                    failed_rank - args.node_rank * args.nproc_per_node, exit_code);
  }
  for (const Rank& r : ranks) {
    if (!error_dir.empty()) ::unlink(ErrorFile(error_dir, attempt, r.rank).c_str());
  }
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  Args args = Parse(argc, argv);
  ResolveBackend(args);
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  // torchrun's set: SIGHUP (a closed ssh session) and SIGQUIT killed the launcher and orphaned the workers
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) ::sigaction(sig, &sa, nullptr);
  if (args.node_rank > 0) WaitForRendezvous(args);
  const char* tmp = std::getenv("TMPDIR");
  std::string error_dir = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/tessel_run_XXXXXX";
  if (::mkdtemp(error_dir.data()) == nullptr) error_dir.clear();  // no error files, the job still runs
  for (int attempt = 0;; ++attempt) {
    if (args.pick_port) args.master_port = FreePort();
    const int code = RunAttempt(args, attempt, error_dir);
    if (code == 0 || g_signal != 0 || attempt >= args.max_restarts) {
      if (!error_dir.empty()) ::rmdir(error_dir.c_str());
      return code;
    }
    std::fprintf(stderr,
                 "[tessel-run] attempt %d failed with exit code %d; restarting all %d local ranks (restart %d of "
                 "--max-restarts %d)\n",
                 attempt, code, args.nproc_per_node, attempt + 1, args.max_restarts);
  }
}
