"""torch.utils.benchmark.Timer over tessel: timeit.Timer's statement compilation and loop, run under the Timer's
thread budget (tessel.set_num_threads(num_threads), restored afterwards), with torch's block-size search,
replicate loops and Measurement results.

The statement and setup are Python source; `torch` in them is the tessel module unless globals names another,
so a ported benchmark's `"torch.mm(a, b)"` times tessel's op. language="cpp" is accepted as torch accepts it
but cannot run: torch compiles the C++ snippet against its own headers, and tessel ships no such toolchain.
"""
import enum
import shutil
import textwrap
import timeit

from . import common

__all__ = ["Timer", "timer", "Language"]


def timer():
    """The default clock: tessel runs every op synchronously on the host, so nothing needs waiting for."""
    return timeit.default_timer()


class Language(enum.Enum):
    PYTHON = 0
    CPP = 1


class _CppTimer:
    """Keeps a C++ Timer's arguments, as torch's does until the first run, and refuses to run."""

    def __init__(self, stmt, setup, global_setup, timer, globals):
        if globals:
            raise ValueError("C++ timing does not support globals.")
        self._stmt, self._setup = textwrap.dedent(stmt), textwrap.dedent(setup)
        self._global_setup = textwrap.dedent(global_setup)

    def timeit(self, number):
        raise NotImplementedError("tessel cannot time C++ statements: torch compiles them against its own headers "
                                  "(torch.utils.cpp_extension), which tessel does not ship; time the Python call")


def _tidy(code):
    """Dedented, without the newline that opens a triple-quoted block, without trailing whitespace."""
    code = textwrap.dedent(code)
    return (code[1:] if code[:1] == "\n" else code).rstrip()


class Timer:
    """Times `stmt` (after `setup`) in blocks of runs; see blocked_autorange (the usual entry),
    adaptive_autorange and timeit. label, sub_label, description and env only name the result (Compare
    groups tables by label, rows by sub_label, columns by description); num_threads is tessel's thread budget
    while the statement runs (1 by default, as torch's)."""

    _timer_cls = timeit.Timer

    def __init__(self, stmt="pass", setup="pass", global_setup="", timer=timer, globals=None, label=None,
                 sub_label=None, description=None, env=None, num_threads=1, language=Language.PYTHON):
        if not isinstance(stmt, str):
            raise ValueError("Currently only a `str` stmt is supported.")
        self._globals = dict(globals or {})  # a copy: exec adds __builtins__, which must not reach the caller
        extra = {}
        if language in (Language.PYTHON, "py", "python"):
            import tessel
            self._globals.setdefault("torch", tessel)
            self._language = Language.PYTHON
            if global_setup:
                raise ValueError("global_setup is C++ only, got `%s`. Most likely this code can simply be moved "
                                 "to `setup`." % global_setup)
        elif language in (Language.CPP, "cpp", "c++"):
            if self._timer_cls is not timeit.Timer:
                raise AssertionError("_timer_cls has already been swapped.")
            self._timer_cls = _CppTimer
            setup = "" if setup == "pass" else setup
            self._language = Language.CPP
            extra["global_setup"] = global_setup
        else:
            raise ValueError("Invalid language `%s`." % (language,))
        stmt, setup = _tidy(stmt), _tidy(setup)
        # the statement runs in a copy of the globals (torch's unwraps its CopyIfCallgrind values into one)
        self._timer = self._timer_cls(stmt=stmt, setup=setup, timer=timer, globals=dict(self._globals), **extra)
        self._task_spec = common.TaskSpec(stmt=stmt, setup=setup, global_setup=global_setup, label=label,
                                          sub_label=sub_label, description=description, env=env,
                                          num_threads=num_threads)

    def _timeit(self, number):
        # a floor of 1 ns: no real block is faster than the clock reads around it, and a zero would divide
        return max(self._timer.timeit(number), 1e-9)

    def timeit(self, number=1000000):
        """One block of `number` runs (after a warm-up block of number // 100, at least 2) as a Measurement."""
        with common.set_torch_threads(self._task_spec.num_threads):
            self._timeit(number=max(int(number // 100), 2))
            return common.Measurement(number_per_run=number, raw_times=[self._timeit(number=number)],
                                      task_spec=self._task_spec)

    def repeat(self, repeat=-1, number=-1):
        raise NotImplementedError("See `Timer.blocked_autorange.`")

    def autorange(self, callback=None):
        raise NotImplementedError("See `Timer.blocked_autorange.`")

    def _measurement_loop(self, number, stop_hook, min_run_time, max_run_time=None, callback=None):
        """Blocks of `number` runs until min_run_time is spent and stop_hook(times) agrees, or past
        max_run_time."""
        total, can_stop, times = 0.0, False, []
        with common.set_torch_threads(self._task_spec.num_threads):
            while total < min_run_time or not can_stop:
                spent = self._timeit(number)
                times.append(spent)
                total += spent
                if callback:
                    callback(number, spent)
                can_stop = stop_hook(times)
                if max_run_time and total > max_run_time:
                    break
        return times

    def _estimate_block_size(self, min_run_time):
        """The runs per block: powers of ten until the clock's own cost (the median of five empty blocks) is at
        most 1e-4 of a block lasting min_run_time / 1000, or one block outlasts min_run_time (these first blocks
        warm the statement up)."""
        with common.set_torch_threads(self._task_spec.num_threads):
            empty = sorted(self._timeit(0) for _ in range(5))
            # torch takes the median of a float32 tensor (the lower middle value)
            overhead = float(common._scalar_dtype()(empty[(len(empty) - 1) // 2]))
            number = 1
            while True:
                taken = self._timeit(number)
                if overhead / taken <= 1e-4 and taken >= min_run_time / 1000:
                    break
                if taken > min_run_time or number * 10 > 2147483647:  # torch's C++ timers take an int32
                    break
                number *= 10
        return number

    def blocked_autorange(self, callback=None, min_run_time=0.2):
        """Blocks of the estimated size until min_run_time seconds are spent; callback(number, seconds) after
        each block."""
        number = self._estimate_block_size(min_run_time)
        times = self._measurement_loop(number, lambda times: True, min_run_time=min_run_time, callback=callback)
        return common.Measurement(number_per_run=number, raw_times=times, task_spec=self._task_spec)

    def adaptive_autorange(self, threshold=0.1, *, min_run_time=0.01, max_run_time=10.0, callback=None):
        """As blocked_autorange (block size found for 0.05 s), then more blocks until there are more than three,
        min_run_time is spent and IQR / median is under threshold, or max_run_time is spent."""
        number = self._estimate_block_size(min_run_time=0.05)

        def confident(times):
            return len(times) > 3 and common.Measurement(
                number_per_run=number, raw_times=times, task_spec=self._task_spec).meets_confidence(threshold)
        times = self._measurement_loop(number, confident, min_run_time, max_run_time, callback=callback)
        return common.Measurement(number_per_run=number, raw_times=times, task_spec=self._task_spec)

    def collect_callgrind(self, number=100, *, repeats=None, collect_baseline=True, retain_out_file=False):
        """torch runs the statement under valgrind's callgrind and reads instruction counts; tessel's extension
        has no callgrind toggles, so this checks what torch checks first (the statement runs, valgrind's tools
        are installed: torch's errors) and then refuses."""
        if not isinstance(self._task_spec.stmt, str):
            raise ValueError("`collect_callgrind` currently only supports string `stmt`")
        if repeats is not None and repeats < 1:
            raise ValueError("If specified, `repeats` must be >= 1")
        self._timeit(1)
        missing = [c for c in ("valgrind", "callgrind_control", "callgrind_annotate") if shutil.which(c) is None]
        if missing:
            raise OSError("Missing: " + ", ".join(missing))
        raise NotImplementedError("collect_callgrind: tessel's extension has no callgrind bindings (torch's "
                                  "_valgrind_toggle); use blocked_autorange for wall times")

