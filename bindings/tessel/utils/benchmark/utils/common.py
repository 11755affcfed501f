"""torch.utils.benchmark.utils.common: TaskSpec (what a Timer runs and how it is labelled), Measurement (the
replicate times of one task, their statistics and torch's repr), select_unit / trim_sigfig (the display rules
Compare uses) and set_torch_threads (the thread budget of a timed region).

torch computes several of these rules on scalar tensors of the default dtype (float32): the unit of a time, the
significant figures of a measurement, the trimmed digits. They are reproduced here in numpy's float32, so a
value on a decade's edge picks the same unit and digits as torch's. The quartiles are float64, as torch's.
"""
import collections
import contextlib
import dataclasses
import math
import textwrap

import numpy as np

__all__ = ["TaskSpec", "Measurement", "select_unit", "unit_to_english", "trim_sigfig", "ordered_unique",
           "set_torch_threads"]

_MAX_SIGNIFICANT_FIGURES = 4
_MIN_CONFIDENCE_INTERVAL = 25e-9  # a 25 ns floor: no measurement is trusted below the timer's own noise
# IQR / median above which a Measurement carries a warning; above the gross one the wording is stronger
_IQR_WARN_THRESHOLD = 0.1
_IQR_GROSS_WARN_THRESHOLD = 0.25


def _scalar_dtype():
    """The dtype torch.tensor(python_float) gets: the default dtype (float32 unless set to float64)."""
    import tessel
    return np.float64 if tessel.get_default_dtype() == tessel.float64 else np.float32


def _log10(x):
    """torch.tensor(x).log10().item(): x rounded to the default dtype, its log10 rounded to it as well (torch's
    kernels are within an ulp; numpy's float32 log10 is not, and put 1e-6 s below the microsecond)."""
    dtype = _scalar_dtype()
    x = float(dtype(x))
    if x > 0 and math.isfinite(x):
        return float(dtype(math.log10(x)))
    return -math.inf if x == 0 else math.inf if x == math.inf else math.nan


@dataclasses.dataclass(init=True, repr=False, eq=True, frozen=True)
class TaskSpec:
    """What a Timer measures (every constructor argument but globals); hashable, so Measurement.merge and
    Compare group replicates of one task by it."""
    stmt: str
    setup: str
    global_setup: str = ""
    label: str = None
    sub_label: str = None
    description: str = None
    env: str = None
    num_threads: int = 1

    @property
    def title(self):
        """The label (else the one-line stmt, else the indented stmt), with the sub_label."""
        sub = self.sub_label
        if self.label is not None:
            return self.label + (": %s" % sub if sub else "")
        if "\n" not in self.stmt:
            return self.stmt + (": %s" % sub if sub else "")
        return "stmt:%s\n%s" % (" (%s)" % sub if sub else "", textwrap.indent(self.stmt, "  "))

    def setup_str(self):
        if not self.setup or self.setup == "pass":
            return ""
        if "\n" in self.setup:
            return "setup:\n" + textwrap.indent(self.setup, "  ")
        return "setup: " + self.setup

    def summarize(self):
        """The task's lines of a repr: title, description and setup, a multi-line one followed by a blank."""
        parts = [p for p in (self.title, self.description or "", self.setup_str()) if p]
        return "\n".join(p + "\n" if "\n" in p else p for p in parts)


_TASKSPEC_FIELDS = tuple(f.name for f in dataclasses.fields(TaskSpec))


def _quantile(ordered, q):
    """torch.quantile's linear interpolation on sorted float64 values (its lerp: from the lower neighbour
    below weight 0.5, from the upper one from 0.5 on)."""
    rank = q * (len(ordered) - 1)
    lo = int(rank)
    hi = int(math.ceil(rank))
    weight = rank - lo
    below, above = ordered[lo], ordered[hi]
    if weight < 0.5:
        return below + weight * (above - below)
    return above - (above - below) * (1 - weight)


@dataclasses.dataclass(init=True, repr=False)
class Measurement:
    """One task's timings: raw_times are the seconds of blocks of number_per_run runs each; times, median,
    mean and iqr are per run. TaskSpec's fields read through (m.label, m.num_threads, ...)."""
    number_per_run: int
    raw_times: list
    task_spec: TaskSpec
    metadata: dict = None  # the caller's own payload, carried along untouched

    def __post_init__(self):
        self._sorted_times = ()
        self._warnings = ()
        self._median = self._mean = self._p25 = self._p75 = -1.0

    def __getattr__(self, name):
        if name in _TASKSPEC_FIELDS:
            return getattr(self.task_spec, name)
        return super().__getattribute__(name)

    @property
    def times(self):
        return [t / self.number_per_run for t in self.raw_times]

    @property
    def median(self):
        self._lazy_init()
        return self._median

    @property
    def mean(self):
        self._lazy_init()
        return self._mean

    @property
    def iqr(self):
        self._lazy_init()
        return self._p75 - self._p25

    @property
    def significant_figures(self):
        """How many digits of the median the spread of the middle half supports (a 90% interval, z = 1.645),
        between 1 and 4; torch computes it in float32 and so does this."""
        self._lazy_init()
        n = len(self._sorted_times)
        dtype = _scalar_dtype()
        middle = self._sorted_times[n // 4:int(math.ceil(dtype(3 * n / 4)))]
        values = np.array(middle, dtype=dtype)  # torch.tensor(tuple): the default dtype
        # torch's std of the whole tensor: a float32 mean, squared deviations summed in double, rounded once
        mean = np.float64(values.mean(dtype=dtype))
        std = float(dtype(math.sqrt(float(((values.astype(np.float64) - mean) ** 2).sum()) / len(middle))))
        sqrt_n = float(np.sqrt(dtype(len(middle))))  # an integer tensor's sqrt has the default dtype
        interval = max(1.645 * std / sqrt_n, _MIN_CONFIDENCE_INTERVAL)
        digits = int(math.floor(_log10(self._median / interval)))
        return min(max(digits, 1), _MAX_SIGNIFICANT_FIGURES)

    @property
    def has_warnings(self):
        self._lazy_init()
        return bool(self._warnings)

    def _lazy_init(self):
        if not self.raw_times or self._sorted_times:
            return
        self._sorted_times = tuple(sorted(self.times))
        ordered = [float(t) for t in self._sorted_times]
        self._median = _quantile(ordered, 0.5)
        self._mean = math.fsum(ordered) / len(ordered)  # torch sums in vector lanes; this is within an ulp
        self._p25 = _quantile(ordered, 0.25)
        self._p75 = _quantile(ordered, 0.75)
        for threshold, why in ((_IQR_GROSS_WARN_THRESHOLD, "This suggests significant environmental influence."),
                               (_IQR_WARN_THRESHOLD, "This could indicate system fluctuation.")):
            if not self.meets_confidence(threshold):
                self._warnings += ("  WARNING: Interquartile range is %.1f%% of the median measurement.\n"
                                   "           %s" % (self.iqr / self.median * 100, why),)
                break

    def meets_confidence(self, threshold=_IQR_WARN_THRESHOLD):
        return self.iqr / self.median < threshold

    @property
    def title(self):
        return self.task_spec.title

    @property
    def env(self):
        # torch's property reads a misspelt attribute, fails, and Python falls back to __getattr__, which
        # forwards TaskSpec.env: the value is the spec's env (None when unset), never "Unspecified env".
        return self.task_spec.env

    @property
    def as_row_name(self):
        return self.sub_label or self.stmt or "[Unknown]"

    def __repr__(self):
        self._lazy_init()
        n = len(self._sorted_times)
        unit, scale = select_unit(self._median)
        lines = [object.__repr__(self)]
        lines += self.task_spec.summarize().split("\n")  # a multi-line part keeps its blank line after
        lines.append("  %s%.2f %s" % ("Median: " if n > 1 else "", self._median / scale, unit))
        if n >= 4:
            lines.append("  IQR:    %.2f %s (%.2f to %.2f)" % (self.iqr / scale, unit, self._p25 / scale,
                                                             self._p75 / scale))
        threads = self.num_threads
        lines.append("  %d measurement%s, %d runs %s %d thread%s" % (
            n, "s" if n > 1 else "", self.number_per_run, "per measurement," if n > 1 else ",", threads,
            "s" if threads > 1 else ""))
        lines += self._warnings
        return "\n".join(lines).strip()

    @staticmethod
    def merge(measurements):
        """One Measurement per distinct TaskSpec, in first-seen order, holding every replicate's per-run
        times (number_per_run 1; metadata dropped, as it may differ between replicates)."""
        groups = collections.defaultdict(list)
        for m in measurements:
            groups[m.task_spec].extend(m.times)
        return [Measurement(number_per_run=1, raw_times=times, task_spec=spec, metadata=None)
                for spec, times in groups.items()]


_UNITS = {-3: "ns", -2: "us", -1: "ms"}
_SCALES = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1}


def select_unit(t):
    """(unit, scale) that shows t seconds with one to three integer digits."""
    unit = _UNITS.get(int(_log10(t) // 3), "s")
    return unit, _SCALES[unit]


def unit_to_english(u):
    return {"ns": "nanosecond", "us": "microsecond", "ms": "millisecond", "s": "second"}[u]


def trim_sigfig(x, n):
    """x rounded to n significant figures (rounded half to even, in float32 as torch's)."""
    if n != int(n):
        raise AssertionError("Number of significant figures must be an integer")
    dtype = _scalar_dtype()
    magnitude = int(math.ceil(_log10(abs(x))))
    scale = 10 ** (magnitude - n)
    return float(np.round(dtype(x / scale)) * dtype(scale))


def ordered_unique(elements):
    return list(dict.fromkeys(elements))


@contextlib.contextmanager
def set_torch_threads(n):
    """tessel's intra-op thread budget (tessel.set_num_threads) is n inside, and what it was after."""
    import tessel
    prior = tessel.get_num_threads()
    try:
        tessel.set_num_threads(n)
        yield
    finally:
        tessel.set_num_threads(prior)
