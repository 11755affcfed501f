"""tessel.distributed.elastic.multiprocessing.errors: torch's ``record`` decorator for a job's entry point.

    from tessel.distributed.elastic.multiprocessing.errors import record

    @record
    def main(): ...

An exception escaping the decorated function is written, in torch's JSON layout, to the file named by
TORCHELASTIC_ERROR_FILE (tessel-run gives each rank one, as torchrun does) and re-raised; the launcher then
prints the first failed rank's exception and traceback as the job's root cause. ``SystemExit(0)`` returns None
(a clean ``sys.exit()``); without TORCHELASTIC_ERROR_FILE nothing is written (the exception still propagates).
"""
import faulthandler
import functools
import json
import os
import time
import traceback

__all__ = ["record", "ErrorHandler", "get_error_handler", "ChildFailedError"]


class ChildFailedError(Exception):
    """torch's: raised by an elastic agent when a child failed (tessel-run reports it instead; kept so that
    scripts that catch it import)."""

    def __init__(self, name, failures):
        self.name, self.failures = name, failures
        super().__init__("%s FAILED: %s" % (name, failures))


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
                            "extraInfo": {"py_callstack": traceback.format_exc(), "timestamp": str(int(time.time()))}}}
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
                if se.code == 0 or se.code is None:
                    return None
                raise
            except Exception as e:
                handler.record_exception(e)
                raise
        return wrapper

    return wrap if fn is None else wrap(fn)
