"""python -m tessel.distributed.run: torchrun for tessel's Python face (torch.distributed.run's command line).

    python -m tessel.distributed.run --standalone --nproc-per-node 2 train.py --lr 3e-4
    python -m tessel.distributed.run --nnodes 2 --node-rank 0 --master-addr host0 --master-port 29500 \\
        --nproc-per-node 8 train.py                                  # static multi-node

Each worker is `python script args` (or `python -m module`, or the command itself with --no-python) with
torchrun's variables: RANK, LOCAL_RANK, GROUP_RANK, ROLE_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_WORLD_SIZE,
ROLE_WORLD_SIZE, ROLE_NAME, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT,
TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_ERROR_FILE (one per rank: @record writes the exception there), and
OMP_NUM_THREADS=1 when it is unset and there are several workers (torchrun's default). The workers'
init_process_group() reads them. When a worker fails, the others are stopped at once (a failed peer is an error
now, not after the collective timeout), the group is restarted up to --max-restarts times, and then main() raises
torch's ChildFailedError: every rank that ended non-zero (those the stop ended too), the first failure's exception
and traceback as the root cause (the launcher exits 1 with it). A "${local_rank}" in an argument becomes the
worker's local rank (torch's macro; python -m tessel.distributed.launch, the legacy launcher, passes
--local-rank=${local_rank} unless --use-env). Rendezvous is static (the
node count fixed, --node-rank given for more than one node): elastic membership changes are not supported.
The launcher is Python so that a pip-installed tessel has one (the C++ tessel-run of the repository is the same
protocol).

Logs, as torchrun's: --redirects / --tee (3: stdout and stderr, 1: stdout, 2: stderr, or per local rank
"0:1,1:2") send a worker's streams to <log-dir>/<run id>/attempt_<n>/<local rank>/{stdout,stderr}.log (a
temporary --log-dir when none is given), --tee also to the console with a "[<role><local rank>]:" prefix
(--log-line-prefix-template, with ${role_name}, ${local_rank}, ${rank}); --local-ranks-filter 0,1 keeps the
other ranks' streams off the console (not out of the files).

Accepted so that torchrun command lines run, and changing nothing here: --start-method and --run-path (workers are
always fresh processes running the script), --rdzv-backend / --rdzv-conf / --local-addr (the rendezvous is the
static one above; --rdzv-endpoint gives its address and port).
"""
import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

from .elastic.utils import macros

__all__ = ["main", "run", "parse_args", "config_from_args", "get_args_parser", "run_workers"]


def get_args_parser():
    p = argparse.ArgumentParser(prog="python -m tessel.distributed.run", description=__doc__.split("\n\n")[0],
                                allow_abbrev=False)
    a = p.add_argument
    a("--nnodes", default="1", help="number of nodes, or MIN:MAX (static: both equal)")
    a("--nproc-per-node", "--nproc_per_node", dest="nproc_per_node", default="1",
      help="workers per node: a number, or 'cpu' / 'auto' (the CPU count)")
    a("--node-rank", "--node_rank", dest="node_rank", type=int, default=None)
    a("--master-addr", "--master_addr", dest="master_addr", default="127.0.0.1")
    a("--master-port", "--master_port", dest="master_port", type=int, default=None,
      help="default: a free port on one node (as torch's, so concurrent jobs do not collide), else 29500")
    a("--standalone", action="store_true", help="one node, localhost and a free port")
    a("--rdzv-backend", "--rdzv_backend", dest="rdzv_backend", default="static")
    a("--rdzv-endpoint", "--rdzv_endpoint", dest="rdzv_endpoint", default="")
    a("--rdzv-id", "--rdzv_id", dest="rdzv_id", default="none")
    a("--rdzv-conf", "--rdzv_conf", dest="rdzv_conf", default="")
    a("--max-restarts", "--max_restarts", dest="max_restarts", type=int, default=0)
    a("--monitor-interval", "--monitor_interval", dest="monitor_interval", type=float, default=0.1)
    a("--start-method", "--start_method", dest="start_method", default="spawn")
    a("--role", default="default")
    a("-m", "--module", action="store_true", help="run the script argument as a module (python -m)")
    a("--no-python", "--no_python", dest="no_python", action="store_true",
      help="run the script argument as a command, without python")
    a("--run-path", "--run_path", dest="run_path", action="store_true")
    a("--log-dir", "--log_dir", dest="log_dir", default=None)
    a("-r", "--redirects", default="0", help="std streams to log files: 3, 1, 2, or per local rank '0:1,1:2'")
    a("-t", "--tee", default="0", help="std streams to log files and the console (as --redirects)")
    a("--log-line-prefix-template", "--log_line_prefix_template", dest="log_line_prefix_template", default="")
    a("--local-ranks-filter", "--local_ranks_filter", dest="local_ranks_filter", default="",
      help="only these local ranks' streams reach the console, e.g. 0,1")
    a("--local-addr", "--local_addr", dest="local_addr", default=None)
    a("--shutdown-timeout", "--shutdown_timeout", dest="shutdown_timeout", type=float,
      default=float(os.environ.get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", 30)),
      help="seconds the workers get between SIGTERM and SIGKILL when the job stops (torch's 30)")
    a("--signals-to-handle", "--signals_to_handle", dest="signals_to_handle", default="SIGTERM,SIGINT,SIGHUP,SIGQUIT",
      help="signals to the launcher that stop the workers (torch's default set)")
    a("training_script")
    a("training_script_args", nargs=argparse.REMAINDER)
    for action in p._actions:  # torchrun's environment defaults: PET_<FLAG> (Kubeflow's PyTorchJob sets them)
        env = "PET_" + action.dest.upper()
        if action.option_strings and env in os.environ and action.dest != "help":
            value = os.environ[env]
            if isinstance(action, argparse._StoreTrueAction):
                action.default = value.lower() in ("1", "true", "yes")
            else:
                action.default = action.type(value) if action.type else value
    return p


def _free_port(addr):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def _nodes(text):
    lo, _, hi = str(text).partition(":")
    lo, hi = int(lo), int(hi or lo)
    if lo != hi:
        raise SystemExit("tessel.distributed.run: --nnodes %s: elastic node counts are not supported (static "
                         "rendezvous: give one number)" % text)
    return lo


def _nproc(text):
    if str(text) in ("cpu", "auto"):
        return os.cpu_count() or 1
    if str(text) == "gpu":
        raise SystemExit("tessel.distributed.run: --nproc-per-node gpu: tessel's Python face runs on the CPU")
    n = int(text)
    if n < 1:  # (it started nothing and returned 0)
        raise SystemExit("tessel.distributed.run: --nproc-per-node must be at least 1, got %d" % n)
    return n


def _command(args):
    # the legacy launcher (tessel.distributed.launch) without --use-env: each worker also gets --local-rank=<its>
    local = [] if getattr(args, "use_env", True) else ["--local-rank=${local_rank}"]
    if args.no_python:
        if args.module:
            raise SystemExit("tessel.distributed.run: --no-python and --module are exclusive")
        return [args.training_script] + local + args.training_script_args
    if args.module:
        return [sys.executable, "-u", "-m", args.training_script] + local + args.training_script_args
    return [sys.executable, "-u", args.training_script] + local + args.training_script_args


def _streams(spec, nproc, what):
    """--redirects / --tee: {local rank: code} (1 stdout, 2 stderr, 3 both)."""
    text = str(spec).strip()
    try:
        if ":" not in text:
            return {r: int(text) for r in range(nproc)}
        out = {r: 0 for r in range(nproc)}
        for item in text.split(","):
            r, code = item.split(":")
            out[int(r)] = int(code)
        return out
    except ValueError:
        raise SystemExit("tessel.distributed.run: --%s %r: expected 0-3 or local_rank:code pairs like 0:1,1:2"
                         % (what, spec)) from None


class _Logs:
    """Where each worker's stdout / stderr go (files, console with a prefix, both, or nowhere)."""

    def __init__(self, log_dir, redirects, tee, ranks_filter, template, role):
        self.log_dir, self.redirects, self.tee = log_dir, redirects, tee
        self.ranks_filter, self.template, self.role = ranks_filter, template, role
        self.threads, self.files = [], []

    def _prefix(self, local, rank):
        template = self.template or "[${role_name}${local_rank}]:"
        return (template.replace("${role_name}", self.role).replace("${local_rank}", str(local))
                .replace("${rank}", str(rank)))

    def popen_kwargs(self, attempt, run_id, local, rank):
        import subprocess
        kwargs, pumps = {}, []
        for bit, name, console in ((1, "stdout", sys.stdout), (2, "stderr", sys.stderr)):
            redirect = self.redirects.get(local, 0) & bit or self.tee.get(local, 0) & bit
            shown = self.ranks_filter is None or local in self.ranks_filter
            if not redirect:
                if not shown:
                    kwargs[name] = subprocess.DEVNULL
                continue
            folder = os.path.join(self.log_dir, run_id, "attempt_%d" % attempt, str(local))
            os.makedirs(folder, exist_ok=True)
            f = open(os.path.join(folder, "%s.log" % name), "w")
            self.files.append(f)
            if self.tee.get(local, 0) & bit:
                kwargs[name] = subprocess.PIPE
                pumps.append((name, f, console if shown else None, self._prefix(local, rank)))
            else:
                kwargs[name] = f
        return kwargs, pumps

    def start(self, proc, pumps):
        import threading

        def pump(stream, f, console, prefix):
            for line in iter(stream.readline, b""):
                text = line.decode(errors="replace")
                f.write(text)
                f.flush()
                if console is not None:
                    console.write(prefix + text)
                    console.flush()
        for name, f, console, prefix in pumps:
            t = threading.Thread(target=pump, args=(getattr(proc, name), f, console, prefix), daemon=True)
            t.start()
            self.threads.append(t)

    def close(self):
        for t in self.threads:
            t.join(5)
        for f in self.files:
            f.close()
        self.threads, self.files = [], []


# What a surviving rank's error says when a peer's process is gone (comm/backends/gloo.cc): the peers it names are the
# failure it reports, not this rank's own.
_PEER_GONE = re.compile(r"the connection to rank\(s\) (.*?) closed")


def _first_failure(procs, files, seen, first_rank=0):
    """Of the workers failed by now: one killed by a signal (a crash writes no error file, and its peers' errors
    about it, written later, named them instead), else a failed one that a peer's error names as gone (os._exit or
    a crash in native code also writes no file, and the peer that saw its connection close did), else the one
    whose error file records the earliest time (torch's first observed failure; two that fail within one poll were
    told apart by list order), else `seen`. first_rank: the global rank of procs[0]."""
    import json
    crashed = [i for i, p in enumerate(procs) if p.poll() is not None and p.returncode < 0]
    if crashed:
        return seen if seen in crashed else crashed[0]
    times, blamed = {}, []
    for i, p in enumerate(procs):
        if p.poll() in (None, 0):
            continue
        try:
            with open(files[i]) as f:
                record = json.load(f)["message"]
            info = record["extraInfo"]
            # tessel's record adds nanoseconds (torch's seconds tie for failures that follow each other)
            times[i] = int(info.get("timestamp_ns", int(info["timestamp"]) * 10 ** 9))
            for named in _PEER_GONE.findall(str(record.get("message", ""))):
                blamed += [int(g) - first_rank for g in re.findall(r"\(global (\d+)\)", named)]
        except (OSError, ValueError, KeyError, TypeError):
            pass
    gone = [j for j in blamed if 0 <= j < len(procs) and procs[j].poll() not in (None, 0) and j not in times]
    if gone:
        return gone[0]
    return min(times, key=lambda i: (times[i], i)) if times else seen


def _root_cause(local, proc, error_file):
    """(message, traceback) of a failed worker's @record file, read as torch's ProcessFailure reads it; (None,
    "") when it wrote none or an unreadable one (the launcher still reports the exit code)."""
    from .elastic.multiprocessing.errors import ProcessFailure
    try:
        message = ProcessFailure(local, proc.pid, proc.returncode, error_file).message
    except (OSError, ValueError, KeyError, TypeError):
        return None, ""
    if not isinstance(message, dict):
        return None, ""
    return message["message"], message.get("extraInfo", {}).get("py_callstack", "")


def _failures(procs, files, root, first_rank):
    """{global rank: ProcessFailure} of the workers that ended non-zero (the root cause first, then those the stop
    ended, as torch's agent lists them); read while the error files still exist. The root cause carries the
    earliest time of them all, so ChildFailedError's first failure is the one the launcher chose (a crash writes
    no error file, and its peers' later files would otherwise predate it)."""
    from .elastic.multiprocessing.errors import ProcessFailure

    def failure(i):
        p = procs[i]
        try:
            return ProcessFailure(i, p.pid, p.returncode, files[i])
        except (OSError, ValueError, KeyError, TypeError):  # (a torn error file: reported without it)
            return ProcessFailure(i, p.pid, p.returncode, "")
    out = {first_rank + root: failure(root)}
    for i, p in enumerate(procs):
        if i != root and p.returncode not in (None, 0):
            out[first_rank + i] = failure(i)
    out[first_rank + root].timestamp = min(f.timestamp for f in out.values())
    return out


def _signal_group(p, signum):
    """signum to worker p and the processes it started (each worker leads its own session, as torch's; Linux does
    not reuse a pid while a live process still has it as its group id)."""
    try:
        os.killpg(p.pid, signum)
    except (ProcessLookupError, PermissionError):
        if p.poll() is None:
            p.send_signal(signum)


def _stop(procs, grace=30.0, signum=signal.SIGTERM):
    """Stops the workers and their children: `signum` (torch passes on the signal it received), then SIGKILL
    after `grace` seconds (torch's --shutdown-timeout, 30 s)."""
    for p in procs:
        _signal_group(p, signum)
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:  # (the worker's own children too, alive or not the worker)
        _signal_group(p, signal.SIGKILL)
        try:
            p.wait(5.0)
        except subprocess.TimeoutExpired:  # (unkillable: uninterruptible sleep; reported by the caller's exit)
            pass


def worker_env(local, nproc, *, nnodes, node_rank, role, master_addr, master_port, run_id, restart, max_restarts,
               agent_store=False):
    """torchrun's variables for local rank `local` of node `node_rank` (nproc workers per node); agent_store: node
    0's launcher serves the rendezvous store (AgentStore)."""
    rank, world = node_rank * nproc + local, nnodes * nproc
    return dict(RANK=str(rank), LOCAL_RANK=str(local), GROUP_RANK=str(node_rank), ROLE_RANK=str(rank),
                ROLE_NAME=role, WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(nproc), GROUP_WORLD_SIZE=str(nnodes),
                ROLE_WORLD_SIZE=str(world), MASTER_ADDR=master_addr, MASTER_PORT=str(master_port),
                TORCHELASTIC_RUN_ID=run_id, TORCHELASTIC_RESTART_COUNT=str(restart),
                TORCHELASTIC_MAX_RESTARTS=str(max_restarts), TORCHELASTIC_USE_AGENT_STORE=str(bool(agent_store)))


class AgentStore:
    """torchrun's agent store: node 0's launcher serves the rendezvous TCP store of the whole job for as long as it
    runs, and every worker is a client (TORCHELASTIC_USE_AGENT_STORE=True; each restart under its own key prefix).
    When rank 0 served it, a rank 0 that finished first took it away from ranks still rendezvousing (2 of 5 runs of
    a script whose rank 0 initialized last and exited at once failed: "lost the connection to the store server").
    `enabled` is False under TESSEL_STORE_DIR (the files rendezvous), or where a forked worker would inherit the
    server; only node 0 serves, the other nodes' workers are its clients.

        with AgentStore(node_rank, addr, port, env) as agent:  # agent.enabled goes to worker_env
            ...
    """

    def __init__(self, node_rank, master_addr, master_port, env, allowed=True):
        self.enabled = bool(allowed) and not env.get("TESSEL_STORE_DIR")
        self._serve = self.enabled and node_rank == 0
        self._addr, self._port, self._store = master_addr, int(master_port), None

    def __enter__(self):
        if self._serve:
            from ._store import TCPStore
            self._store = TCPStore(self._addr, self._port, is_master=True)
        return self

    def note_exit(self, restart, rank, code):
        """Records that worker `rank` of attempt `restart` exited (comm/backends/gloo.h's departed_prefix): a peer
        still waiting for it in a rendezvous fails at once, naming it, instead of waiting out the timeout (a worker
        that returned before init_process_group, exit code 0, left its peers waiting 300 s)."""
        if self._store is not None:
            self._store.set("/worker/attempt_%d/exited/%d" % (restart, rank), "exit code %d" % code)

    def __exit__(self, *exc):
        self._store = None  # (its server stops once every worker has exited)
        return False


class _LauncherSignal(Exception):
    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def run_workers(command, nproc, **kwargs):
    """Runs the local workers of this node until all exit 0 (returns 0) or one fails after max_restarts
    restarts (stops the others, prints the root cause, returns 1). SIGINT, SIGTERM, SIGHUP or SIGQUIT to the
    launcher (torch's --signals-to-handle) stop the workers and the processes they started (each worker leads its
    own session): the signal received (SIGINT, SIGTERM; SIGTERM for the others), then SIGKILL after
    shutdown_timeout seconds (torch's 30), further signals ignored meanwhile; the launcher returns 128 + the signal
    (torchrun's agent returns 1). logs: a _Logs (stream destinations)."""
    import threading
    running = []  # the current attempt's workers
    grace = kwargs.get("shutdown_timeout", 30.0)
    handled = kwargs.pop("signals", (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT))
    # The command line exits after a signal: restoring the handlers then let a second signal, sent while it exits,
    # kill it (SIGINT's default action once Python finalizes) instead of being ignored
    keep_ignoring = kwargs.pop("keep_ignoring_after_signal", False)

    def on_signal(signum, frame):
        for s in handled:  # a second signal while the workers stop would cut the shutdown short (and orphan them)
            signal.signal(s, signal.SIG_IGN)
        raise _LauncherSignal(signum)
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {s: signal.signal(s, on_signal) for s in handled}
    try:
        return _run_attempts(command, nproc, running, **kwargs)
    except _LauncherSignal as e:
        print("[tessel.distributed.run] received signal %d: stopping the workers" % e.signum, file=sys.stderr,
              flush=True)
        _stop(running, grace, e.signum)
        if keep_ignoring:
            previous.clear()
        return 128 + e.signum
    except BaseException:  # (a KeyboardInterrupt where SIGINT is not handled, any launcher error): the workers
        _stop(running, grace)  # lead their own sessions, so nothing else would stop them
        raise
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _run_attempts(command, nproc, running, *, nnodes=1, node_rank=0, master_addr="127.0.0.1", master_port=29500,
                  max_restarts=0, monitor_interval=0.1, run_id=None, role="default", env=None, log=sys.stderr,
                  logs=None, shutdown_timeout=30.0, omp_banner=False, failures=None):
    run_id = run_id or uuid.uuid4().hex[:8]
    logs = logs or _Logs(None, {}, {}, None, "", role)
    base = dict(os.environ if env is None else env)
    if nproc > 1 and "OMP_NUM_THREADS" not in base:
        base["OMP_NUM_THREADS"] = "1"  # torchrun's default for several workers on one node, with its warning
        if omp_banner:  # (the command line's, as torchrun's)
            print("*****************************************\nSetting OMP_NUM_THREADS environment variable for each "
                  "process to be 1 in default, to avoid your system being overloaded, please further tune the "
                  "variable for optimal performance in your application as needed. \n"
                  "*****************************************", file=log, flush=True)
    with AgentStore(node_rank, master_addr, master_port, base) as agent:  # serves the store for every attempt
        for restart in range(max_restarts + 1):
            with tempfile.TemporaryDirectory(prefix="tessel_run_") as errors:
                procs, files = [], []
                running[:] = []
                for local in range(nproc):
                    rank = node_rank * nproc + local
                    files.append(os.path.join(errors, "error_%d.json" % rank))
                    env_r = dict(base, **worker_env(local, nproc, nnodes=nnodes, node_rank=node_rank, role=role,
                                                    master_addr=master_addr, master_port=master_port, run_id=run_id,
                                                    restart=restart, max_restarts=max_restarts,
                                                    agent_store=agent.enabled),
                                 TORCHELASTIC_ERROR_FILE=files[-1])
                    kwargs, pumps = logs.popen_kwargs(restart, run_id, local, rank)
                    # ${local_rank} in an argument is the worker's (torch's macro: the legacy launcher's --local-rank)
                    argv = macros.substitute(command, str(local))
                    # its own session: a stop reaches the processes it starts too (torch's start_new_session)
                    procs.append(subprocess.Popen(argv, env=env_r, start_new_session=True, **kwargs))
                    running.append(procs[-1])
                    logs.start(procs[-1], pumps)
                failed = None
                exited = set()
                while failed is None and any(p.poll() is None for p in procs):
                    for local, p in enumerate(procs):
                        if p.poll() not in (None, 0):
                            failed = local
                            break
                        if p.poll() == 0 and local not in exited:  # done: its peers may still wait for it
                            exited.add(local)
                            agent.note_exit(restart, node_rank * nproc + local, 0)
                    else:
                        time.sleep(monitor_interval)
                if failed is None:
                    failed = next((i for i, p in enumerate(procs) if p.returncode != 0), None)
                if failed is None:
                    logs.close()
                    return 0
                failed = _first_failure(procs, files, failed, node_rank * nproc)
                code = procs[failed].returncode
                _stop(procs, shutdown_timeout)
                logs.close()
                rank = node_rank * nproc + failed
                message, _ = _root_cause(failed, procs[failed], files[failed])
                if restart < max_restarts:
                    print("[tessel.distributed.run] rank %d failed (exit code %d); restarting the workers (%d of %d)"
                          % (rank, code, restart + 1, max_restarts), file=log, flush=True)
                    continue
                how = "exit code %d" % code
                if code < 0:
                    how = "killed by signal %s (%d)" % (signal.Signals(-code).name if -code in signal.valid_signals()
                                                        else "?", -code)
                print("[tessel.distributed.run] root cause (first observed failure): rank %d (local_rank %d), %s"
                      % (rank, failed, how), file=log)
                if message:  # (its traceback: in the ChildFailedError the caller raises)
                    print("[tessel.distributed.run]   " + message, file=log)
                log.flush()
                if failures is not None:
                    failures.update(_failures(procs, files, failed, node_rank * nproc))
                return 1
    return 1


def parse_args(args):
    return get_args_parser().parse_args(args)


def entrypoint_name(entrypoint, args):
    """What ChildFailedError calls the job (torch's rule): a function's name; for the Python interpreter the
    first argument that is not an option (the script, or the module after -m); else the command."""
    if callable(entrypoint):
        return entrypoint.__name__
    if isinstance(entrypoint, str):
        return next((a for a in args if not a.startswith("-")), "") if entrypoint == sys.executable else entrypoint
    return ""


def run_script_path(training_script, *training_script_args):
    """Runs the script in this interpreter as __main__ with the given argv (torch's --run-path entry point)."""
    import runpy
    sys.argv = [training_script] + list(training_script_args)
    runpy.run_path(sys.argv[0], run_name="__main__")


def _rdzv_conf(text):
    conf = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError("The rendezvous configuration string must be in format "
                             "<key1>=<value1>,...,<keyN>=<valueN>.")
        conf[key.strip()] = value.strip()
    return conf


def config_from_args(args):
    """(LaunchConfig, entrypoint, entrypoint args) for parse_args' result, as torch's: the entrypoint is the
    interpreter (args "-u", ["-m"], the script, ...), the command itself with --no-python, or run_script_path
    with --run-path; the static rendezvous' node rank is in rdzv_configs["rank"]."""
    from .launcher.api import LaunchConfig
    lo, _, hi = str(args.nnodes).partition(":")
    min_nodes, max_nodes = int(lo), int(hi or lo)
    if not 0 < min_nodes <= max_nodes:
        raise AssertionError("min_nodes must be > 0 and <= max_nodes, got min_nodes=%d, max_nodes=%d"
                             % (min_nodes, max_nodes))
    if args.max_restarts < 0:
        raise AssertionError("max_restarts must be >= 0")
    conf = _rdzv_conf(args.rdzv_conf)
    if args.rdzv_backend == "static":
        conf["rank"] = args.node_rank or 0
    endpoint = args.rdzv_endpoint
    if args.rdzv_backend == "static" and not endpoint:
        endpoint = "%s:%s" % (args.master_addr, args.master_port)  # (run() gives torch's the port 29500 first)
    config = LaunchConfig(min_nodes=min_nodes, max_nodes=max_nodes, nproc_per_node=_nproc(args.nproc_per_node),
                          run_id=args.rdzv_id, role=args.role, rdzv_endpoint=endpoint, rdzv_backend=args.rdzv_backend,
                          rdzv_configs=conf, max_restarts=args.max_restarts, monitor_interval=args.monitor_interval,
                          start_method=args.start_method, log_line_prefix_template=args.log_line_prefix_template or
                          os.environ.get("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"), local_addr=args.local_addr)
    if args.run_path:
        entrypoint, entry_args = run_script_path, [args.training_script]
        if not getattr(args, "use_env", True):
            entry_args.append("--local-rank=${local_rank}")
        return config, entrypoint, entry_args + args.training_script_args
    if args.no_python and args.module:
        raise ValueError("Don't use both the '--no-python' flag and the '--module' flag at the same time.")
    command = _command(args)
    if not args.no_python:
        command[0] = os.environ.get("PYTHON_EXEC", sys.executable)
    return config, command[0], command[1:]


def run(args):
    """Runs the job that parse_args(argv) describes; returns None once every worker exited 0. A worker that
    failed (after --max-restarts restarts) raises ChildFailedError: each failed rank, the root cause first
    (torch's text; python -m tessel.distributed.run then exits 1 with it). A signal to the launcher stops the
    workers and exits 128 + the signal (SystemExit)."""
    from .elastic.multiprocessing.errors import ChildFailedError
    node_rank_given = args.node_rank is not None  # (PET_NODE_RANK sets the flag's default)
    if not node_rank_given:
        args.node_rank = 0
    nnodes, nproc = _nodes(args.nnodes), _nproc(args.nproc_per_node)
    addr, port = args.master_addr, args.master_port
    if args.rdzv_endpoint:
        host, colon, p = args.rdzv_endpoint.rpartition(":")
        if not colon:  # a host alone: torch's default port
            host, p = args.rdzv_endpoint, "29400"
        addr, port = (host or addr), int(p) if p else port
    if args.standalone:
        if nnodes != 1:
            raise SystemExit("tessel.distributed.run: --standalone is one node, got --nnodes %d" % nnodes)
        addr = "127.0.0.1"
        port = _free_port(addr)
    elif port == 0 or (port is None and nnodes == 1 and not args.rdzv_endpoint):
        port = _free_port(addr)  # (torch 2.15 rendezvouses one node at localhost:0 unless a port is given)
    elif port is None:
        port = 29500
    if nnodes > 1 and not node_rank_given:
        # (every node took node_rank 0: one failed to bind the store's port, the other waited out its timeout)
        raise SystemExit("tessel.distributed.run: --nnodes %d needs --node-rank on each node (0 to %d): the launcher "
                         "rendezvouses statically, it does not assign node ranks as torch's c10d backend does"
                         % (nnodes, nnodes - 1))
    if not 0 <= args.node_rank < nnodes:
        raise SystemExit("tessel.distributed.run: --node-rank %d is not a node of --nnodes %d"
                         % (args.node_rank, nnodes))
    redirects, tee = _streams(args.redirects, nproc, "redirects"), _streams(args.tee, nproc, "tee")
    log_dir = args.log_dir
    if log_dir is None and any(redirects.values()) or log_dir is None and any(tee.values()):
        log_dir = tempfile.mkdtemp(prefix="tessel_run_logs_")
        print("[tessel.distributed.run] log directory: %s" % log_dir, file=sys.stderr, flush=True)
    try:
        ranks_filter = ({int(r) for r in args.local_ranks_filter.split(",")} if args.local_ranks_filter else None)
    except ValueError:
        raise SystemExit("tessel.distributed.run: --local_ranks_filter must be a comma-separated list of integers "
                         "e.g. --local_ranks_filter=0,1,2") from None
    logs = _Logs(log_dir, redirects, tee, ranks_filter, args.log_line_prefix_template, args.role)
    run_id = None if args.rdzv_id == "none" else args.rdzv_id
    signals = []
    for name in filter(None, (x.strip() for x in args.signals_to_handle.split(","))):
        if not hasattr(signal, name):  # (torch warns and goes on)
            print("[tessel.distributed.run] --signals-to-handle: unknown signal %s, ignored" % name, file=sys.stderr)
            continue
        signals.append(getattr(signal, name))
    command, failures = _command(args), {}
    code = run_workers(command, nproc, nnodes=nnodes, node_rank=args.node_rank, master_addr=addr,
                       master_port=port, max_restarts=args.max_restarts, monitor_interval=args.monitor_interval,
                       run_id=run_id, role=args.role, logs=logs, shutdown_timeout=args.shutdown_timeout,
                       signals=tuple(signals), omp_banner=True, failures=failures,
                       keep_ignoring_after_signal=_COMMAND_LINE)
    if failures:
        raise ChildFailedError(entrypoint_name(command[0], command[1:]), failures)
    if code:
        raise SystemExit(code)


def main(args=None):
    """python -m tessel.distributed.run's entry point: run(parse_args(args))."""
    run(parse_args(args))


_COMMAND_LINE = False  # python -m tessel.distributed.run (or .launch): the process ends with the job

if __name__ == "__main__":
    _COMMAND_LINE = True
    main()
