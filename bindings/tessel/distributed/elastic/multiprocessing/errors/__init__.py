"""tessel.distributed.elastic.multiprocessing.errors: torch's ``record`` decorator for a job's entry point.

    from tessel.distributed.elastic.multiprocessing.errors import record

    @record
    def main(): ...

An exception escaping the decorated function is written, in torch's JSON layout, to the file named by
TORCHELASTIC_ERROR_FILE (tessel-run gives each rank one, as torchrun does) and re-raised; the launcher then
prints the first failed rank's exception and traceback as the job's root cause. ``SystemExit(0)`` returns None
(a clean ``sys.exit()``); without TORCHELASTIC_ERROR_FILE nothing is written (the exception still propagates).
"""
import dataclasses
import faulthandler
import functools
import json
import os
import time
import traceback

__all__ = ["record", "ErrorHandler", "get_error_handler", "ChildFailedError", "ProcessFailure"]


@dataclasses.dataclass
class ProcessFailure:
    """torch's: one failed worker (local_rank, pid, exitcode, error_file); message and timestamp come from the
    JSON error file @record wrote (the message dict, with the traceback under extraInfo.py_callstack), else a
    signal's name or a hint."""
    local_rank: int
    pid: int
    exitcode: int
    error_file: str
    error_file_data: dict = dataclasses.field(init=False)
    message: object = dataclasses.field(init=False)
    timestamp: int = dataclasses.field(init=False)

    def __post_init__(self):
        self.error_file_data, self.message, self.timestamp = {"message": ""}, "", int(time.time())
        if self.error_file and os.path.isfile(self.error_file):
            with open(self.error_file) as f:
                self.error_file_data = json.load(f)
            message = self.error_file_data["message"]
            self.message = message
            self.timestamp = int(message["extraInfo"]["timestamp"]) if isinstance(message, dict) else \
                int(self.error_file_data.get("timestamp", self.timestamp))
        else:
            self.error_file = "<N/A>"
        if not self.message:
            self.message = ("Signal %d (%s) received by PID %d" % (-self.exitcode, self.signal_name(), self.pid)
                            if self.exitcode < 0 else
                            "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html")

    def signal_name(self):
        import signal
        try:
            return signal.Signals(-self.exitcode).name if self.exitcode < 0 else "<N/A>"
        except ValueError:
            return "<N/A>"

    def timestamp_isoformat(self):
        import datetime
        return datetime.datetime.fromtimestamp(self.timestamp).isoformat(sep="_")


class ChildFailedError(Exception):
    """torch's: raised by an agent (tessel.distributed.launcher.api.elastic_launch) when workers failed;
    failures maps global ranks to ProcessFailures, get_first_failure() is the earliest, the message lists them
    with the root cause first."""

    def __init__(self, name, failures):
        if not failures:
            raise AssertionError("ChildFailedError needs at least one failure")
        self.name, self.failures = name, failures
        super().__init__(self.format_msg())

    def get_first_failure(self):
        rank = min(self.failures, key=lambda r: getattr(self.failures[r], "timestamp", 0))
        return rank, self.failures[rank]

    def _format(self, idx, rank, failure):
        """One failure as torch prints it: a traceback from the error file (else its message), the signal's name
        after the exit code of a signalled process."""
        import socket
        message = failure.message
        if isinstance(message, dict):
            message = message.get("extraInfo", {}).get("py_callstack", message.get("message", "<N/A>"))
        message = str(message).replace("\n", "\n  ")
        name = failure.signal_name()
        return ("[%d]:\n  time      : %s\n  host      : %s\n  rank      : %s (local_rank: %s)\n"
                "  exitcode  : %s (pid: %s) %s\n  error_file: %s\n  traceback : %s"
                % (idx, failure.timestamp_isoformat(), socket.getfqdn(), rank, failure.local_rank, failure.exitcode,
                   failure.pid, " (%s)" % name if name != "<N/A>" else "", failure.error_file, message))

    def format_msg(self, boarder_delim="=", section_delim="-"):
        root, _ = self.get_first_failure()
        title = "%s FAILED" % self.name
        root_text, others, width = "", [], len(title)
        for idx, (rank, failure) in enumerate(self.failures.items()):
            text = (self._format(idx, rank, failure) if isinstance(failure, ProcessFailure)
                    else "[%d]:\n  rank      : %s\n  traceback : %s" % (idx, rank, failure))
            width = max([width] + [len(line) for line in text.split("\n")])
            if rank == root:
                root_text = text
            else:
                others.append(text)
        width = min(width, 60)
        return "\n".join(["", boarder_delim * width, title, section_delim * width, "Failures:",
                          "\n".join(others or ["  <NO_OTHER_FAILURES>"]), section_delim * width,
                          "Root Cause (first observed failure):", root_text, boarder_delim * width])


class ErrorHandler:
    """torch's ErrorHandler: initialize() turns on faulthandler (a crash dumps every thread's stack),
    record_exception(e) writes e to TORCHELASTIC_ERROR_FILE."""

    def _get_error_file_path(self):
        return os.environ.get("TORCHELASTIC_ERROR_FILE")

    def initialize(self):
        try:
            faulthandler.enable(all_threads=True)
        except Exception:  # noqa: BLE001 (no usable stderr: keep running without it, as torch)
            pass

    def record_exception(self, e):
        path = self._get_error_file_path()
        if not path:
            return
        data = {"message": {"message": "%s: %s" % (type(e).__name__, e),
                            "extraInfo": {"py_callstack": traceback.format_exc(), "timestamp": str(int(time.time())),
                                          "timestamp_ns": str(time.time_ns())}}}
        with open(path, "w") as f:
            json.dump(data, f)


def get_error_handler():
    return ErrorHandler()


def record(fn=None, error_handler=None):
    """Decorates a job's entry point (``@record`` or ``record(fn)``): see the module's docstring."""
    handler = error_handler if error_handler is not None else get_error_handler()

    def wrap(f):
        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            handler.initialize()
            try:
                return f(*args, **kwargs)
            except SystemExit as se:
                if se.code == 0:  # (torch's: sys.exit() with no code still exits, so code after main() does not run)
                    return None
                raise
            except Exception as e:
                handler.record_exception(e)
                raise
        return wrapper

    return wrap if fn is None else wrap(fn)
