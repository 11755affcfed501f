"""torch.utils.benchmark.utils.common for tessel: what a Timer runs (TaskSpec), what it hands back (Measurement),
and the display rules Measurement and Compare share (select_unit, trim_sigfig, unit_to_english), with
ordered_unique and set_torch_threads.

Why numpy scalars appear below: torch evaluates several of these rules on 0-dim tensors of the default dtype
(float32 unless changed), so that precision decides which unit a time lands in and how many digits survive. The
same arithmetic in the same precision keeps tessel's tables equal to torch's for a time that sits on a decade's
edge. The quartiles are double precision in torch as well, so they stay Python floats here.
"""
import contextlib
import dataclasses
import math
import statistics
import textwrap
from typing import NamedTuple, Optional

import numpy as np

__all__ = ["TaskSpec", "Measurement", "select_unit", "unit_to_english", "trim_sigfig", "ordered_unique",
           "set_torch_threads"]

# Above this IQR / median a Measurement warns of fluctuation (also meets_confidence's default threshold) ...
_NOISY = 0.1
# ... and above this one of outside interference.
_VERY_NOISY = 0.25
# The clock's own jitter: no confidence interval is taken to be narrower than 25 ns.
_CLOCK_RESOLUTION = 25e-9
_MOST_DIGITS = 4
_Z_90 = 1.645  # two-sided 90% normal quantile


def _default_float():
    """numpy's counterpart of tessel's default dtype: the precision torch.tensor(some_float) is computed in."""
    import tessel
    return np.float64 if tessel.get_default_dtype() == tessel.float64 else np.float32


def _decade(x):
    """log10(x) the way a 0-dim tensor of the default dtype computes it: x rounded first, the result rounded after.
    math.log10 is correctly rounded, which torch's kernel matches and numpy's float32 one does not (it puts
    exactly 1e-6 s below a microsecond)."""
    ftype = _default_float()
    x = float(ftype(x))
    if 0 < x < math.inf:
        return float(ftype(math.log10(x)))
    # the domain's edges, where math.log10 raises instead of answering as a tensor does
    if x == 0:
        return -math.inf
    return math.inf if x == math.inf else math.nan


@dataclasses.dataclass(frozen=True, repr=False)
class TaskSpec:
    """Everything a Timer was built with except its globals. Frozen and hashable: replicates of one task (the same
    spec) are pooled by Measurement.merge and land in one cell of a Compare table."""
    stmt: str
    setup: str
    global_setup: str = ""
    label: Optional[str] = None
    sub_label: Optional[str] = None
    description: Optional[str] = None
    env: Optional[str] = None
    num_threads: int = 1

    @property
    def title(self):
        """The heading of a result: its label, else its statement, carrying the sub_label."""
        if self.label is None and "\n" in self.stmt:
            # a statement of several lines cannot share a line with the sub_label, so it goes below, indented
            aside = " (%s)" % self.sub_label if self.sub_label else ""
            return "stmt:%s\n%s" % (aside, textwrap.indent(self.stmt, "  "))
        head = self.stmt if self.label is None else self.label
        return "%s: %s" % (head, self.sub_label) if self.sub_label else head

    def setup_str(self):
        if (self.setup or "pass") == "pass":  # an empty setup and timeit's "pass" both mean none was given
            return ""
        if "\n" in self.setup:
            return "setup:\n" + textwrap.indent(self.setup, "  ")
        return "setup: " + self.setup

    def summarize(self):
        """title, description and setup, a line each when present; a part spanning several lines gets a blank
        line after it, so Measurement's repr sets it off from the numbers that follow."""
        parts = []
        for part in (self.title, self.description or "", self.setup_str()):
            if part:
                parts.append(part + "\n" if "\n" in part else part)
        return "\n".join(parts)


_SPEC_FIELDS = frozenset(field.name for field in dataclasses.fields(TaskSpec))


class _Summary(NamedTuple):
    ascending: tuple  # the per-run times, sorted
    median: float
    mean: float
    q1: float
    q3: float
    notes: tuple  # the WARNING lines of the repr (none or one)


# What a Measurement without times reports (torch's placeholders, not statistics).
_NO_SUMMARY = _Summary((), -1.0, -1.0, -1.0, -1.0, ())


def _quantile(ascending, q):
    """torch.quantile's linear interpolation. The blend is evaluated from the nearer neighbour, as torch's lerp
    kernel does; the two algebraically equal forms differ in the last bit, and a median's last bit shows in
    Measurement's equality and in select_unit on a decade's edge."""
    position = q * (len(ascending) - 1)
    lower, upper = ascending[math.floor(position)], ascending[math.ceil(position)]
    frac = position - math.floor(position)
    if frac >= 0.5:
        return upper - (upper - lower) * (1 - frac)
    return lower + frac * (upper - lower)


def _summarize(per_run):
    ascending = tuple(sorted(per_run))
    median = _quantile(ascending, 0.5)
    q1, q3 = _quantile(ascending, 0.25), _quantile(ascending, 0.75)
    spread = (q3 - q1) / median
    notes = ()
    # negated comparisons, so that a NaN spread (a NaN or infinite time) warns as well
    if not spread < _VERY_NOISY:
        reason = "This suggests significant environmental influence."
    elif not spread < _NOISY:
        reason = "This could indicate system fluctuation."
    else:
        reason = None
    if reason:
        notes = ("  WARNING: Interquartile range is %.1f%% of the median measurement.\n           %s"
                 % (spread * 100, reason),)
    # torch averages in vector lanes; an exactly rounded mean is within an ulp of it
    return _Summary(ascending, median, statistics.fmean(ascending), q1, q3, notes)


@dataclasses.dataclass(repr=False)
class Measurement:
    """The times of one task. raw_times holds the seconds of whole blocks of number_per_run runs; times, median,
    mean and iqr are per run. The task's fields read through (m.label, m.stmt, m.num_threads, ...). metadata is
    the caller's, carried along and compared, never read."""
    number_per_run: int
    raw_times: list
    task_spec: TaskSpec
    metadata: Optional[dict] = None

    def __post_init__(self):
        self._summary = None

    def __getattr__(self, name):
        # only reached once ordinary lookup has failed
        if name in _SPEC_FIELDS:
            return getattr(self.task_spec, name)
        return object.__getattribute__(self, name)  # the standard AttributeError

    def _stats(self):
        # computed on first use and kept; not while there are no times, so times appended later still count
        if self._summary is None:
            if not self.raw_times:
                return _NO_SUMMARY
            self._summary = _summarize(self.times)
        return self._summary

    @property
    def times(self):
        return [block / self.number_per_run for block in self.raw_times]

    @property
    def median(self):
        return self._stats().median

    @property
    def mean(self):
        return self._stats().mean

    @property
    def iqr(self):
        stats = self._stats()
        return stats.q3 - stats.q1

    @property
    def has_warnings(self):
        return bool(self._stats().notes)

    def meets_confidence(self, threshold=_NOISY):
        stats = self._stats()
        return (stats.q3 - stats.q1) / stats.median < threshold

    @property
    def significant_figures(self):
        """How many leading digits of the median its noise supports: the half-width of a 90% confidence interval
        for the mean of the middle half of the times (at least the clock's 25 ns) against the median, between 1
        and 4. Evaluated in the default dtype's precision, where torch evaluates it."""
        stats = self._stats()
        ftype = _default_float()
        count = len(stats.ascending)
        # the middle half: from the first quartile's index up to the third's, rounded up
        middle = np.asarray(stats.ascending[count // 4:(3 * count + 3) // 4], dtype=ftype)
        if middle.size:
            # a population deviation around a mean kept in the tensor's dtype, the squares summed in double
            centre = np.float64(middle.mean(dtype=ftype))
            spread = float(ftype(math.sqrt(float(np.square(middle.astype(np.float64) - centre).sum()) / middle.size)))
        else:
            spread = math.nan
        half_width = max(_Z_90 * spread / float(np.sqrt(ftype(middle.size))), _CLOCK_RESOLUTION)
        return max(1, min(_MOST_DIGITS, math.floor(_decade(stats.median / half_width))))

    @property
    def title(self):
        return self.task_spec.title

    @property
    def env(self):
        # torch's own property fails on a misspelt attribute and Python then falls back to its __getattr__, so what
        # torch users see is the spec's env, None included; that is what this returns directly
        return self.task_spec.env

    @property
    def as_row_name(self):
        spec = self.task_spec
        return spec.sub_label or spec.stmt or "[Unknown]"

    def __repr__(self):
        stats = self._stats()
        count = len(stats.ascending)
        unit, scale = select_unit(stats.median)
        several = count > 1
        lines = [object.__repr__(self)]
        lines += self.task_spec.summarize().split("\n")
        lines.append("  %s%.2f %s" % ("Median: " if several else "", stats.median / scale, unit))
        if count >= 4:
            lines.append("  IQR:    %.2f %s (%.2f to %.2f)"
                         % ((stats.q3 - stats.q1) / scale, unit, stats.q1 / scale, stats.q3 / scale))
        threads = self.num_threads
        runs = "runs per measurement," if several else "runs ,"
        lines.append("  %d measurement%s, %d %s %d thread%s"
                     % (count, "s" * several, self.number_per_run, runs, threads, "s" * (threads > 1)))
        lines.extend(stats.notes)
        return "\n".join(lines)

    @staticmethod
    def merge(measurements):
        """Replicates pooled: one Measurement per distinct TaskSpec (first-seen order) whose raw_times are every
        replicate's per-run times, so number_per_run is 1. metadata is dropped; replicates may disagree on it."""
        pooled = {}
        for measurement in measurements:
            pooled.setdefault(measurement.task_spec, []).extend(measurement.times)
        return [Measurement(number_per_run=1, raw_times=times, task_spec=spec) for spec, times in pooled.items()]


_UNIT_BY_THOUSANDS = {-3: ("ns", 1e-9), -2: ("us", 1e-6), -1: ("ms", 1e-3)}
_ENGLISH = {"ns": "nanosecond", "us": "microsecond", "ms": "millisecond", "s": "second"}


def select_unit(t):
    """(unit, seconds per unit) showing t with one to three integer digits; seconds at and above one second, and
    below a nanosecond too."""
    # floor division keeps a NaN for 0 seconds (log10 -inf), which int() then refuses as torch's does
    return _UNIT_BY_THOUSANDS.get(int(_decade(t) // 3), ("s", 1))


def unit_to_english(u):
    return _ENGLISH[u]


def trim_sigfig(x, n):
    """x rounded to n significant figures; half to even, and in the default dtype, as torch rounds it."""
    if int(n) != n:
        raise AssertionError("Number of significant figures must be an integer")
    ftype = _default_float()
    step = 10 ** (math.ceil(_decade(abs(x))) - n)
    return float(np.round(ftype(x / step)) * ftype(step))


def ordered_unique(elements):
    return list(dict.fromkeys(elements))


@contextlib.contextmanager
def set_torch_threads(n):
    """tessel's intra-op thread budget is n inside the block and what it was afterwards, exceptions included."""
    import tessel
    saved = tessel.get_num_threads()
    tessel.set_num_threads(n)
    try:
        yield
    finally:
        tessel.set_num_threads(saved)
