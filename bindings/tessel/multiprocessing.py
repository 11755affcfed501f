"""tessel.multiprocessing: torch.multiprocessing.spawn for the mp.spawn launch of torch's tutorials.

spawn(fn, args, nprocs) starts nprocs fresh Python processes (the "spawn" start method) running
fn(i, *args) and joins them. When one fails, the others are terminated at once and the parent raises
ProcessRaisedException (the child's exception and traceback) or ProcessExitedException (a non-zero exit or
a signal), naming the rank, as torch does. Of several failures, a death by signal is reported first,
then the exception raised first (a rank whose gloo peer died fails too, after it). With it, the tutorial pattern
ports by its imports:

    def run(rank, world_size):
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29500")
        dist.init_process_group("gloo", rank=rank, world_size=world_size)   # gloo over TCP
        ...
    tessel.multiprocessing.spawn(run, args=(2,), nprocs=2)

(Threads in one process, tessel.run_ranks(n, fn), start faster and need no ports.)
"""
import multiprocessing as _mp
import multiprocessing.connection  # noqa: F401  (_mp.connection.wait)
from multiprocessing import *  # noqa: F401,F403 (torch.multiprocessing re-exports the standard module: Process,
# Queue, set_start_method, get_context, Pool, ...; tensors are not put in shared memory, see share_memory_)
import os
import pickle
import signal
import sys
import tempfile
import time
import warnings

_sharing_strategy = "file_descriptor"
_all_sharing_strategies = {"file_descriptor", "file_system"}


def set_sharing_strategy(new_strategy):
    """Recorded only: tessel's tensors are copied between processes, whatever the strategy."""
    global _sharing_strategy
    if new_strategy not in _all_sharing_strategies:
        raise AssertionError("invalid sharing strategy %r, expected one of %s" % (new_strategy,
                                                                                  _all_sharing_strategies))
    _sharing_strategy = new_strategy


def get_sharing_strategy():
    return _sharing_strategy


def get_all_sharing_strategies():
    return _all_sharing_strategies


class ProcessException(Exception):
    __slots__ = ["error_index", "error_pid"]

    def __init__(self, msg, error_index, error_pid):
        super().__init__(msg)
        self.msg, self.error_index, self.error_pid = msg, error_index, error_pid

    def __reduce__(self):  # the attributes are not Exception.args: pickling must pass them back in
        return type(self), (self.msg, self.error_index, self.error_pid)


class ProcessRaisedException(ProcessException):
    """A child raised: the message holds its traceback."""


class ProcessExitedException(ProcessException):
    """A child exited with a non-zero code or was killed by a signal."""
    __slots__ = ["exit_code"]

    def __init__(self, msg, error_index, error_pid, exit_code, signal_name=None):
        super().__init__(msg, error_index, error_pid)
        self.exit_code, self.signal_name = exit_code, signal_name

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.error_pid, self.exit_code, self.signal_name)


def _die_with_parent():
    """A child outlives a parent killed by SIGKILL unless the kernel signals it (torch's pdeathsig: SIGINT)."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGINT), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # (not Linux: children may outlive the parent, as torch's there)
        pass


def _write_error(error_file):
    import traceback
    with open(error_file, "wb") as f:
        pickle.dump(traceback.format_exc(), f)


def _wrap(fn, i, args, error_file):
    _die_with_parent()
    parent = os.getppid()
    try:
        fn(i, *args)
    except KeyboardInterrupt:
        # The parent's death arrives as SIGINT (pdeathsig): leave quietly then; any other interrupt is a failure
        # the parent must hear of, not a success.
        if os.getppid() == parent:
            _write_error(error_file)
            sys.exit(128 + signal.SIGINT)
    except Exception:
        # SystemExit passes through: sys.exit(0) is a success, sys.exit(3) a ProcessExitedException (as torch's)
        _write_error(error_file)
        sys.exit(1)


class ProcessContext:
    def __init__(self, processes, error_files):
        self.error_files, self.processes = error_files, processes
        self.sentinels = {p.sentinel: i for i, p in enumerate(processes)}

    def pids(self):
        return [int(p.pid) for p in self.processes]

    def _join_procs_with_timeout(self, timeout):
        end = time.monotonic() + timeout
        for p in self.processes:
            p.join(max(0.0, end - time.monotonic()))

    def join(self, timeout=None, grace_period=None):
        """Waits up to `timeout` for a process to end; True once all exited with 0, False while some still run.
        The first failure stops the rest (after grace_period seconds for them to end on their own; SIGTERM, and
        SIGKILL after another grace_period, 30 s by default) and raises."""
        if not self.sentinels:
            return True
        ready = _mp.connection.wait(list(self.sentinels), timeout=timeout)
        failed = None
        for sentinel in ready:
            i = self.sentinels.pop(sentinel)
            self.processes[i].join()
            if self.processes[i].exitcode != 0:
                failed = i
                break
        if failed is None:
            return not self.sentinels
        if grace_period is not None:
            self._join_procs_with_timeout(grace_period)
        for p in self.processes:
            if p.is_alive():
                p.terminate()
        self._join_procs_with_timeout(30 if grace_period is None else grace_period)
        for p in self.processes:
            if p.is_alive():
                p.kill()
            p.join()
        self._raise(self._root_cause(failed))

    def _root_cause(self, seen):
        """The cause, not its echoes: a rank whose peer died fails too (gloo reports the connection it lost),
        often by the time the parent looks. A rank killed by a signal (the OOM killer, a user; not this
        context's SIGTERM) is the cause; else the rank whose error file was written first; else the one seen."""
        codes = [p.exitcode for p in self.processes]
        killed = [i for i, c in enumerate(codes) if c is not None and c < 0 and c != -signal.SIGTERM]
        if killed:
            return seen if seen in killed else killed[0]
        written = {}
        for i, path in enumerate(self.error_files):
            try:
                written[i] = os.stat(path).st_mtime_ns
            except OSError:
                pass
        return min(written, key=lambda i: (written[i], i)) if written else seen

    def _raise(self, i):
        p = self.processes[i]
        if not os.access(self.error_files[i], os.R_OK):
            code = p.exitcode
            if code < 0:
                try:
                    name = signal.Signals(-code).name
                except ValueError:
                    name = "<Unknown signal %d>" % -code
                raise ProcessExitedException("process %d terminated with signal %s" % (i, name), error_index=i,
                                             error_pid=p.pid, exit_code=code, signal_name=name)
            raise ProcessExitedException("process %d terminated with exit code %d" % (i, code), error_index=i,
                                         error_pid=p.pid, exit_code=code)
        with open(self.error_files[i], "rb") as f:
            trace = pickle.load(f)
        raise ProcessRaisedException("\n\n-- Process %d terminated with the following error:\n%s" % (i, trace),
                                     i, p.pid)


class SpawnContext(ProcessContext):
    def __init__(self, processes, error_files):
        warnings.warn("SpawnContext is renamed to ProcessContext since 1.4 release.", stacklevel=2)
        super().__init__(processes, error_files)


def start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    ctx = _mp.get_context(start_method)
    error_files, processes = [], []
    for i in range(nprocs):
        # An error file per process, absent until its process fails (a queue can deadlock a child that dies
        # while writing to it)
        f = tempfile.NamedTemporaryFile(prefix="pytorch-errorfile-", suffix=".pickle", delete=False)
        f.close()
        os.unlink(f.name)
        p = ctx.Process(target=_wrap, args=(fn, i, args, f.name), daemon=daemon)
        p.start()
        error_files.append(f.name)
        processes.append(p)
    context = ProcessContext(processes, error_files)
    if not join:
        return context
    while not context.join():
        pass
    return None


def spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """torch.multiprocessing.spawn: fn(i, *args) in nprocs processes, always started by "spawn" (another
    start_method warns, as torch's; start_processes takes any)."""
    if start_method != "spawn":
        warnings.warn("This method only supports start_method=spawn (got: %s).\nTo use a different start_method "
                      "use:\n\t\t torch.multiprocessing.start_processes(...)" % start_method, FutureWarning,
                      stacklevel=2)
    return start_processes(fn, args, nprocs, join, daemon, start_method="spawn")
