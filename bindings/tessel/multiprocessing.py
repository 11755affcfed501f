"""tessel.multiprocessing: torch.multiprocessing.spawn for the mp.spawn launch of torch's tutorials.

spawn(fn, args, nprocs) starts nprocs fresh Python processes (the "spawn" start method) running
fn(i, *args) and joins them. When one fails, the others are terminated at once and the parent raises
ProcessRaisedException (the child's exception and traceback) or ProcessExitedException (a non-zero exit or
a signal), naming the rank, as torch does. Of several failures, a death by signal is reported first,
then the exception raised first (a rank whose gloo peer died fails too, after it). With it, the tutorial pattern ports by its imports:

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
import time
import traceback


class ProcessException(Exception):
    def __init__(self, msg, error_index, pid):
        super().__init__(msg)
        self.error_index, self.pid = error_index, pid


class ProcessRaisedException(ProcessException):
    """A child raised: the message holds its traceback."""


class ProcessExitedException(ProcessException):
    """A child exited with a non-zero code or was killed by a signal."""

    def __init__(self, msg, error_index, pid, exit_code, signal_name=None):
        super().__init__(msg, error_index, pid)
        self.exit_code, self.signal_name = exit_code, signal_name


def _wrap(fn, i, args, errors):
    try:
        fn(i, *args)
    except KeyboardInterrupt:
        pass
    except BaseException:
        # With the time it was raised: CLOCK_MONOTONIC is one clock for every process on Linux.
        errors.put((time.monotonic(), traceback.format_exc()))
        raise SystemExit(1)


class ProcessContext:
    def __init__(self, processes, error_queues):
        self.processes, self.error_queues = processes, error_queues

    def pids(self):
        return [p.pid for p in self.processes]

    def join(self, timeout=None):
        """Waits for the processes; True once all exited with 0. The first failure terminates the rest and
        raises. With a timeout, False while some still run."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            failed = [i for i, p in enumerate(self.processes) if p.exitcode is not None and p.exitcode != 0]
            if failed:
                self._fail(failed)
            if all(p.exitcode == 0 for p in self.processes):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            _mp.connection.wait([p.sentinel for p in self.processes if p.exitcode is None], timeout=0.1)

    def _fail(self, failed):
        for p in self.processes:
            if p.is_alive():
                p.terminate()
        for p in self.processes:
            p.join()
        # The cause, not its echoes: a rank whose peer died raises too (gloo reports the connection it
        # lost), often by the time the parent looks. A rank killed by a signal before the parent looked
        # (the OOM killer, a user) is the cause; else the exception raised first. Only processes that
        # exited on their own are read (one terminated inside its put could leave the queue half written).
        killed = [i for i in failed if self.processes[i].exitcode < 0]
        raised = {i: q.get() for i, q in enumerate(self.error_queues)
                  if self.processes[i].exitcode > 0 and not q.empty()}
        if raised and not killed:
            i = min(raised, key=lambda k: raised[k][0])
            raise ProcessRaisedException("\n\n-- Process %d terminated with the following error:\n%s"
                                         % (i, raised[i][1]), i, self.processes[i].pid)
        i = killed[0] if killed else failed[0]
        code = self.processes[i].exitcode
        if code < 0:
            import signal
            name = signal.Signals(-code).name
            raise ProcessExitedException("process %d terminated with signal %s" % (i, name), i,
                                         self.processes[i].pid, code, name)
        raise ProcessExitedException("process %d terminated with exit code %d" % (i, code), i,
                                     self.processes[i].pid, code)


def start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    ctx = _mp.get_context(start_method)
    error_queues, processes = [], []
    for i in range(nprocs):
        q = ctx.SimpleQueue()
        p = ctx.Process(target=_wrap, args=(fn, i, args, q), daemon=daemon)
        p.start()
        error_queues.append(q)
        processes.append(p)
    context = ProcessContext(processes, error_queues)
    if not join:
        return context
    context.join()
    return None


def spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """torch.multiprocessing.spawn: fn(i, *args) in nprocs processes."""
    return start_processes(fn, args, nprocs, join, daemon, start_method)
