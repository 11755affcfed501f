"""torch.utils.benchmark.utils.timer for tessel: Timer runs a Python statement in blocks of runs under the Timer's
thread budget and returns Measurements.

Statements are compiled and looped by the standard library's timeit.Timer; what this module adds is the policy
around it, with the decisions torch makes (so the same clock readings give the same block sizes and block
counts): how many runs a block gets, when to stop adding blocks, how much warm-up precedes a single block.

`torch` inside a statement names the tessel module unless globals binds it, so a ported `"torch.mm(a, b)"` times
tessel's op. language="cpp" is accepted, as torch accepts it, but cannot run: torch compiles the snippet against
its own C++ headers, a toolchain tessel does not ship.
"""
import enum
import shutil
import textwrap
import timeit

from . import common

__all__ = ["Timer", "timer", "Language"]

# A block taking less than this is reported as taking this: clock readings that coincide would otherwise give a
# zero, and the ratios below divide by block times.
_SHORTEST_BLOCK = 1e-9
# The block-size search wants the clock's own cost to be at most this share of a block ...
_CLOCK_SHARE = 1e-4
# ... and a block to last at least this share of min_run_time.
_BLOCK_SHARE = 1e-3
# torch's C++ timers count runs in an int32, so no block size may exceed it.
_MOST_RUNS = 2 ** 31 - 1


def timer():
    """The default clock. tessel runs every op synchronously on the host, so there is no device to wait for."""
    return timeit.default_timer()


class Language(enum.Enum):
    PYTHON = 0
    CPP = 1


_LANGUAGE_NAMES = {Language.PYTHON: Language.PYTHON, "py": Language.PYTHON, "python": Language.PYTHON,
                   Language.CPP: Language.CPP, "cpp": Language.CPP, "c++": Language.CPP}


class _NoCppToolchain:
    """Stands where timeit.Timer stands for a C++ statement: the Timer is built as torch builds it (torch, too,
    compiles nothing before the first run) and refuses at the first block."""

    def timeit(self, number):
        raise NotImplementedError("tessel cannot time C++ statements: torch compiles them against its own headers "
                                  "(torch.utils.cpp_extension), which tessel does not ship; time the Python call")


def _source(code):
    """A statement as the TaskSpec records it: dedented, without the line break a triple-quoted string opens with,
    without trailing whitespace."""
    code = textwrap.dedent(code)
    if code.startswith("\n"):
        code = code[1:]
    return code.rstrip()


class Timer:
    """Times `stmt` after `setup`, in blocks of runs. blocked_autorange is the usual entry; adaptive_autorange adds
    blocks until the spread is small; timeit runs one block. label, sub_label, description and env only name the
    result (Compare makes a table per label, a row per sub_label, a column per description). num_threads is tessel's
    thread budget while the statement runs: 1 unless given, as in torch, so a number means the same on any host."""

    def __init__(self, stmt="pass", setup="pass", global_setup="", timer=timer, globals=None, label=None,
                 sub_label=None, description=None, env=None, num_threads=1, language=Language.PYTHON):
        if not isinstance(stmt, str):
            raise ValueError("Currently only a `str` stmt is supported.")
        try:
            self._language = _LANGUAGE_NAMES[language]
        except (KeyError, TypeError):  # TypeError: an unhashable language
            raise ValueError("Invalid language `%s`." % (language,)) from None
        if self._language is Language.PYTHON:
            if global_setup:
                raise ValueError("global_setup is C++ only, got `%s`. Most likely this code can simply be moved "
                                 "to `setup`." % global_setup)
            import tessel
            # exec adds __builtins__ to the namespace it is given; a copy keeps the caller's dict as it was
            namespace = dict(globals or {})
            namespace.setdefault("torch", tessel)
            stmt, setup = _source(stmt), _source(setup)
            self._statement = timeit.Timer(stmt=stmt, setup=setup, timer=timer, globals=namespace)
        else:
            if globals:
                raise ValueError("C++ timing does not support globals.")
            # timeit's "pass" is no C++ statement; the spec records the C++ setup as empty
            stmt, setup = _source(stmt), _source("" if setup == "pass" else setup)
            self._statement = _NoCppToolchain()
        self._task_spec = common.TaskSpec(stmt=stmt, setup=setup, global_setup=global_setup, label=label,
                                          sub_label=sub_label, description=description, env=env,
                                          num_threads=num_threads)

    def _block(self, runs):
        """Seconds one block of `runs` runs took."""
        return max(self._statement.timeit(runs), _SHORTEST_BLOCK)

    def _result(self, runs, blocks):
        return common.Measurement(number_per_run=runs, raw_times=blocks, task_spec=self._task_spec)

    def _budget(self):
        return common.set_torch_threads(self._task_spec.num_threads)

    def timeit(self, number=1000000):
        """One block of `number` runs, after a warm-up block of a hundredth of that (two runs at least)."""
        with self._budget():
            self._block(max(int(number // 100), 2))
            return self._result(number, [self._block(number)])

    def repeat(self, repeat=-1, number=-1):
        raise NotImplementedError("See `Timer.blocked_autorange.`")

    def autorange(self, callback=None):
        raise NotImplementedError("See `Timer.blocked_autorange.`")

    def _runs_per_block(self, min_run_time):
        """Tries 1, 10, 100, ... runs until a block is long enough to measure (the clock's own cost, the middle of
        five empty blocks, is a negligible share of it, and it lasts a thousandth of min_run_time), or until one
        block already outlasts min_run_time. The tries double as the statement's warm-up."""
        with self._budget():
            empty = sorted(self._block(0) for _ in range(5))
            # the middle of five, as a tensor of the default dtype holds it
            clock_cost = common._default_float()(empty[2]).item()
            runs = 1
            while True:
                took = self._block(runs)
                measurable = clock_cost / took <= _CLOCK_SHARE and took >= min_run_time * _BLOCK_SHARE
                if measurable or took > min_run_time or runs * 10 > _MOST_RUNS:
                    return runs
                runs *= 10

    def _blocks(self, runs, min_run_time, enough, max_run_time=None, callback=None):
        """Blocks of `runs` runs, at least one, until min_run_time is spent and enough(blocks) agrees, or until
        max_run_time (if set) is exceeded. callback(runs, seconds) follows every block."""
        blocks, spent = [], 0.0
        with self._budget():
            while True:
                took = self._block(runs)
                blocks.append(took)
                spent += took
                if callback:
                    callback(runs, took)
                done = enough(blocks)
                if max_run_time and spent > max_run_time:
                    return blocks
                if spent >= min_run_time and done:
                    return blocks

    def blocked_autorange(self, callback=None, min_run_time=0.2):
        """Blocks of a searched size until min_run_time seconds are spent; callback(number, seconds) after each."""
        runs = self._runs_per_block(min_run_time)
        return self._result(runs, self._blocks(runs, min_run_time, lambda blocks: True, callback=callback))

    def adaptive_autorange(self, threshold=0.1, *, min_run_time=0.01, max_run_time=10.0, callback=None):
        """Like blocked_autorange (block size searched for 0.05 s), adding blocks until there are more than three,
        min_run_time is spent and IQR / median is under threshold; or until max_run_time is spent."""
        runs = self._runs_per_block(0.05)

        def steady(blocks):
            return len(blocks) > 3 and self._result(runs, list(blocks)).meets_confidence(threshold)
        return self._result(runs, self._blocks(runs, min_run_time, steady, max_run_time, callback))

    def collect_callgrind(self, number=100, *, repeats=None, collect_baseline=True, retain_out_file=False):
        """torch runs the statement under valgrind's callgrind and reports instruction counts. tessel's extension
        has no callgrind toggles, so this goes as far as torch's own preconditions (the statement runs; valgrind's
        tools are installed: torch's errors when not) and then refuses."""
        if repeats is not None and repeats < 1:
            raise ValueError("If specified, `repeats` must be >= 1")
        self._block(1)
        missing = [tool for tool in ("valgrind", "callgrind_control", "callgrind_annotate") if not shutil.which(tool)]
        if missing:
            raise OSError("Missing: " + ", ".join(missing))
        raise NotImplementedError("collect_callgrind: tessel's extension has no callgrind bindings (torch's "
                                  "_valgrind_toggle); use blocked_autorange for wall times")
