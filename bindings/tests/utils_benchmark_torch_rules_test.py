"""torch.utils.benchmark as torch 2.15 has it, on tessel (tessel.utils.benchmark): Timer's block-size search,
replicate loops, warm-up and thread budget, Measurement's statistics, warnings and repr, Compare's tables (plain,
trimmed to significant figures, with warnings, coloured), select_unit / trim_sigfig, the Fuzzer's draws and
torch's errors. The expected values were printed by torch 2.15 running the same code: a fake clock (timer=)
makes every block time exact, and Measurements built from fixed raw_times make every table exact."""
import os
import re
import subprocess
import sys

import pytest

import tessel
from tessel.utils import benchmark


class Clock:
    """A deterministic clock: each read advances `over` seconds, each clock.work() `tick` seconds times a
    repeating factor (1.0, 1.1, ... up to jitter - 1 tenths), so the Timer's block sizes and times are exact."""

    def __init__(self, tick=1e-6, over=50e-9, jitter=7):
        self.t, self.tick, self.over, self.k, self.jitter = 0.0, tick, over, 0, jitter

    def now(self):
        self.t += self.over
        return self.t

    def work(self):
        self.k += 1
        self.t += self.tick * (1 + (self.k % self.jitter) / 10)


def _lines(m):
    """The repr without its first line (object.__repr__'s address; torch's names torch.utils.benchmark)."""
    text = repr(m)
    first, _, rest = text.partition("\n")
    assert re.fullmatch(r"<tessel\.utils\.benchmark\.utils\.common\.Measurement object at 0x[0-9a-f]+>", first)
    return rest


def M(raw, number=10, **kw):
    spec = dict(stmt=kw.pop("stmt", "f(x)"), setup="pass")
    spec.update(kw)
    return benchmark.Measurement(number, raw, benchmark.TaskSpec(**spec))


def test_blocked_autorange_picks_torchs_block_size_and_replicates_on_a_fake_clock():
    c, calls = Clock(), []
    t = benchmark.Timer("clock.work()", globals={"clock": c}, timer=c.now, label="fake", sub_label="sub",
                        description="d")
    m = t.blocked_autorange(callback=lambda n, s: calls.append((n, s)), min_run_time=0.01)
    # torch 2.15 with the same clock: 1000 runs per block, 8 blocks, 9111 statement runs in all (the block
    # search's 1 + 10 + 100 + 1000, then the 8 blocks)
    assert (m.number_per_run, len(m.raw_times), c.k) == (1000, 8, 9111)
    assert m.raw_times[:3] == [0.001299850000000012, 0.0012999500000000302, 0.0013000500000000855]
    assert m.raw_times[-1] == 0.0012998499999997137
    assert calls[:2] == [(1000, 0.001299850000000012), (1000, 0.0012999500000000302)] and len(calls) == 8
    assert (m.median, m.iqr) == (1.3000000000000579e-06, 3.2500000013814373e-10)  # torch's
    assert m.mean == pytest.approx(1.3000249999999254e-06, rel=1e-14)  # torch's (its sum's lane order: an ulp)
    assert (m.significant_figures, m.has_warnings, m.title) == (1, False, "fake: sub")
    assert _lines(m) == ("fake: sub\nd\n  Median: 1.30 us\n  IQR:    0.00 us (1.30 to 1.30)\n"
                         "  8 measurements, 1000 runs per measurement, 1 thread")  # torch's repr


def test_timeit_warms_up_then_times_one_block_as_torch():
    c = Clock()
    m = benchmark.Timer("clock.work()", globals={"clock": c}, timer=c.now).timeit(100)
    # torch: a warm-up of max(100 // 100, 2) runs, then 100: 102 runs, one raw time
    assert (c.k, m.number_per_run, m.raw_times) == (102, 100, [0.00013014999999999997])
    assert _lines(m) == "clock.work()\n  1.30 us\n  1 measurement, 100 runs , 1 thread"  # torch's, its odd space


def test_adaptive_autorange_stops_on_confidence_and_keeps_the_setup_in_the_repr():
    c = Clock(jitter=3)
    t = benchmark.Timer("clock.work()", setup="x = 1\ny = 2", globals={"clock": c}, timer=c.now, num_threads=2)
    m = t.adaptive_autorange(threshold=0.05, max_run_time=0.5)
    # torch 2.15: blocks of 1000 (searched for 0.05 s), 10 of them (> 3, min_run_time 0.01 spent, IQR small)
    assert (m.number_per_run, len(m.raw_times), c.k) == (1000, 10, 11111)
    assert m.raw_times[:3] == [0.0011001499999999727, 0.0010999499999999728, 0.0011000500000000533]
    assert (m.median, m.iqr) == (1.100050000000084e-06, 1.7499999978290802e-10)
    assert _lines(m) == ("clock.work()\nsetup:\n  x = 1\n  y = 2\n\n  Median: 1.10 us\n"
                         "  IQR:    0.00 us (1.10 to 1.10)\n  10 measurements, 1000 runs per measurement, 2 threads")


def test_multiline_statement_and_slow_blocks_as_torch():
    c = Clock(tick=1e-3, over=1e-6, jitter=2)
    t = benchmark.Timer("""
        clock.work()
        clock.work()
    """, globals={"clock": c}, timer=c.now)
    m = t.blocked_autorange()
    # torch: the block search stops at 10 runs (2 ms each, overhead / time <= 1e-4), 10 blocks fill 0.2 s
    assert (m.number_per_run, len(m.raw_times), c.k) == (10, 10, 222)
    assert (m.median, m.significant_figures) == (0.0021000999999999945, 4)
    assert m.task_spec.stmt == "clock.work()\nclock.work()"
    assert _lines(m) == ("stmt:\n  clock.work()\n  clock.work()\n\n  Median: 2.10 ms\n"
                         "  IQR:    0.00 ms (2.10 to 2.10)\n  10 measurements, 10 runs per measurement, 1 thread")


def test_a_noisy_statement_carries_torchs_iqr_warning():
    class Noisy:
        t, k = 0.0, 0

        def now(self):
            return self.t

        def work(self):
            self.k += 1
            self.t += 1e-6 if self.k % 4 else 8e-6
    n = Noisy()
    m = benchmark.Timer("n.work()", globals={"n": n}, timer=n.now, env="A").blocked_autorange(min_run_time=0.001)
    assert (m.number_per_run, len(m.raw_times), n.k) == (10, 37, 381)  # torch's
    assert (m.median, m.iqr, m.has_warnings) == (3.0999999999999343e-06, 6.99999999999995e-07, True)
    assert _lines(m) == ("n.work()\n  Median: 3.10 us\n  IQR:    0.70 us (2.40 to 3.10)\n"
                         "  37 measurements, 10 runs per measurement, 1 thread\n"
                         "  WARNING: Interquartile range is 22.6% of the median measurement.\n"
                         "           This could indicate system fluctuation.")


def test_measurement_statistics_and_repr_from_fixed_times_as_torch():
    TS = benchmark.TaskSpec
    m = benchmark.Measurement(1, [1e-6, 1e-6, 1e-6, 2e-6, 3e-6, 1e-6, 5e-6], TS("f()", "pass", sub_label="big"))
    assert (m.median, m.iqr, m.significant_figures, m.has_warnings) == (1e-06, 1.4999999999999998e-06, 1, True)
    assert _lines(m) == ("f(): big\n  Median: 1.00 us\n  IQR:    1.50 us (1.00 to 2.50)\n"
                         "  7 measurements, 1 runs per measurement, 1 thread\n"
                         "  WARNING: Interquartile range is 150.0% of the median measurement.\n"
                         "           This suggests significant environmental influence.")
    m = benchmark.Measurement(100, [2e-3, 3e-3], TS("a\nb", "import x\nx.init()", label="L", description="desc"))
    assert m.times == [2e-05, 3e-05] and (m.median, m.iqr) == (2.5e-05, 4.9999999999999996e-06)
    assert _lines(m) == ("L\ndesc\nsetup:\n  import x\n  x.init()\n\n  Median: 25.00 us\n"
                         "  2 measurements, 100 runs per measurement, 1 thread\n"
                         "  WARNING: Interquartile range is 20.0% of the median measurement.\n"
                         "           This could indicate system fluctuation.")  # no IQR line under 4 times
    m = benchmark.Measurement(4, [4e-9, 4.4e-9, 4.2e-9, 4.1e-9], TS("a", "y = 1", num_threads=8))
    assert (m.median, m.iqr) == (1.0375000000000002e-09, 4.374999999999998e-11)
    assert _lines(m) == ("a\nsetup: y = 1\n  Median: 1.04 ns\n  IQR:    0.04 ns (1.02 to 1.06)\n"
                         "  4 measurements, 4 runs per measurement, 8 threads")
    m = benchmark.Measurement(1, [12.5, 13.0, 12.0, 12.75, 12.25], TS("a\nb", "pass", sub_label="s"))
    assert _lines(m) == ("stmt: (s)\n  a\n  b\n\n  Median: 12.50 s\n  IQR:    0.50 s (12.25 to 12.75)\n"
                         "  5 measurements, 1 runs per measurement, 1 thread")
    # TaskSpec's fields read through; env is the spec's (None when unset: torch's property falls through)
    m = benchmark.Measurement(1, [1e-6, 2e-6], TS("s", "pass"))
    assert (m.env, m.title, m.stmt, m.num_threads, m.metadata) == (None, "s", "s", 1, None)
    assert benchmark.Measurement(1, [1e-6], TS("s", "pass", env="E")).env == "E"
    with pytest.raises(AttributeError, match="'Measurement' object has no attribute 'nothing'"):
        m.nothing


def test_merge_pools_replicates_per_task_spec():
    a = M([2e-3, 2.2e-3], number=2, label="mm", sub_label="small", description="n=1")
    b = M([2e-3, 2.4e-3], number=2, label="mm", sub_label="small", description="n=1")
    a.metadata = {"run": 1}
    merged = benchmark.Measurement.merge([a, b, M([1.0], label="other")])
    # torch: one Measurement per TaskSpec, per-run times, number_per_run 1, no metadata
    assert len(merged) == 2
    assert (merged[0].number_per_run, merged[0].raw_times, merged[0].metadata) == (1, [0.001, 0.0011, 0.001,
                                                                                        0.0012], None)
    # dataclass equality over number_per_run, raw_times, task_spec and metadata, as torch's
    assert a != M([2e-3, 2.2e-3], number=2, label="mm", sub_label="small", description="n=1")
    assert M([1e-6], label="x") == M([1e-6], label="x") and M([1e-6], label="x") != M([2e-6], label="x")


def test_select_unit_and_trim_sigfig_round_in_float32_as_torch():
    units = [benchmark.select_unit(t) for t in (1e-6, 999e-9, 1e-3, 5.0, 1e-10)]
    assert units == [("us", 1e-06), ("ns", 1e-09), ("ms", 0.001), ("s", 1), ("s", 1)]  # torch's
    trimmed = [benchmark.trim_sigfig(x, n) for x, n in ((3.14159, 2), (123456.0, 3), (0.00123456, 2), (1000.0, 1),
                                                         (2.5, 1), (0.035, 1))]
    # torch's: float32 products, rounding half to even
    assert trimmed == [3.1000001430511475, 123000.0, 0.0011999999405816197, 1000.0, 2.0, 0.03999999910593033]
    with pytest.raises(ValueError, match="cannot convert float NaN to integer"):
        benchmark.select_unit(0.0)
    with pytest.raises(AssertionError, match="Number of significant figures must be an integer"):
        benchmark.trim_sigfig(1.5, 1.5)


def _table_measurements():
    base = [1.0e-5, 1.1e-5, 1.05e-5, 0.98e-5, 1.02e-5]
    noisy = [1e-5, 2e-5, 1.2e-5, 3e-5, 0.9e-5, 1.5e-5]
    ms = []
    for threads in (1, 4):
        for sub, f in (("float", 1.0), ("int", 2.3)):
            for desc, g in (("n=1", 1.0), ("n=16", 7.7), ("n=256", 130.0)):
                raw = [t * f * g / threads for t in (noisy if (sub == "int" and desc == "n=16") else base)]
                ms.append(M(raw, label="add", sub_label=sub, description=desc, num_threads=threads))
    ms.append(M([3e-3, 3.1e-3, 2.9e-3, 3.05e-3], number=1, label="mm", sub_label="big", description="n=16"))
    ms.append(M([2e-3, 2.2e-3], number=2, label="mm", sub_label="small", description="n=1"))
    ms.append(M([2e-3, 2.4e-3], number=2, label="mm", sub_label="small", description="n=1"))  # a replicate
    return ms


# str(Compare(_table_measurements())) printed by torch 2.15, then after trim_significant_figures(),
# highlight_warnings(), colorize() and colorize(rowwise=True) in turn
PLAIN = (
    '[-------------------- add --------------------]\n'
    '             |   n=1    |    n=16   |   n=256  \n'
    '1 threads: ------------------------------------\n'
    '      float  |  1020.0  |   7854.0  |  132600.0\n'
    '      int    |  2346.0  |  23908.5  |  304980.0\n'
    '4 threads: ------------------------------------\n'
    '      float  |   255.0  |   1963.5  |   33150.0\n'
    '      int    |   586.5  |   5977.1  |   76245.0\n'
    '\n'
    'Times are in nanoseconds (ns).\n'
    '\n'
    '[----------- mm -----------]\n'
    '             |  n=16  |  n=1\n'
    '1 threads: -----------------\n'
    '      big    |  3.0   |     \n'
    '      small  |        |  1.1\n'
    '\n'
    'Times are in milliseconds (ms).\n'
)
TRIMMED = (
    '[----------------- add -----------------]\n'
    '             |  n=1   |   n=16  |  n=256 \n'
    '1 threads: ------------------------------\n'
    '      float  |  1000  |   8000  |  100000\n'
    '      int    |  2000  |  20000  |  300000\n'
    '4 threads: ------------------------------\n'
    '      float  |   300  |   2000  |   30000\n'
    '      int    |   600  |   6000  |   80000\n'
    '\n'
    'Times are in nanoseconds (ns).\n'
    '\n'
    '[----------- mm -----------]\n'
    '             |  n=16  |  n=1\n'
    '1 threads: -----------------\n'
    '      big    |  3.0   |     \n'
    '      small  |        |   1 \n'
    '\n'
    'Times are in milliseconds (ms).\n'
)
HIGHLIGHTED = (
    '[--------------------- add ---------------------]\n'
    '             |  n=1   |       n=16      |  n=256 \n'
    '1 threads: --------------------------------------\n'
    '      float  |  1000  |    8000         |  100000\n'
    '      int    |  2000  |  20000 (! 61%)  |  300000\n'
    '4 threads: --------------------------------------\n'
    '      float  |   300  |    2000         |   30000\n'
    '      int    |   600  |   6000 (! 61%)  |   80000\n'
    '\n'
    'Times are in nanoseconds (ns).\n'
    '(! XX%) Measurement has high variance, where XX is the IQR / median * 100.\n'
    '\n'
    '[-------------- mm --------------]\n'
    '             |  n=16  |     n=1   \n'
    '1 threads: -----------------------\n'
    '      big    |  3.0   |           \n'
    '      small  |        |  1 (! 12%)\n'
    '\n'
    'Times are in milliseconds (ms).\n'
    '(! XX%) Measurement has high variance, where XX is the IQR / median * 100.\n'
)
COLUMNWISE = (
    '[--------------------- add ---------------------]\n'
    '             |  n=1   |       n=16      |  n=256 \n'
    '1 threads: --------------------------------------\n'
    '      float  |  \x1b[92m\x1b[1m1000\x1b[0m\x1b[0m  |  \x1b[92m\x1b[1m  8000       \x1b[0m\x1b[0m  '
    '|  \x1b[92m\x1b[1m100000\x1b[0m\x1b[0m\n'
    '      int    |  \x1b[2m\x1b[91m2000\x1b[0m\x1b[0m  |  \x1b[2m\x1b[91m20000 (! 61%)\x1b[0m\x1b[0m  '
    '|  \x1b[2m\x1b[91m300000\x1b[0m\x1b[0m\n'
    '4 threads: --------------------------------------\n'
    '      float  |  \x1b[92m\x1b[1m 300\x1b[0m\x1b[0m  |  \x1b[92m\x1b[1m  2000       \x1b[0m\x1b[0m  '
    '|  \x1b[92m\x1b[1m 30000\x1b[0m\x1b[0m\n'
    '      int    |  \x1b[2m\x1b[91m 600\x1b[0m\x1b[0m  |  \x1b[2m\x1b[91m 6000 (! 61%)\x1b[0m\x1b[0m  '
    '|  \x1b[2m\x1b[91m 80000\x1b[0m\x1b[0m\n'
    '\n'
    'Times are in nanoseconds (ns).\n'
    '(! XX%) Measurement has high variance, where XX is the IQR / median * 100.\n'
    '\n'
    '[-------------- mm --------------]\n'
    '             |  n=16  |     n=1   \n'
    '1 threads: -----------------------\n'
    '      big    |  \x1b[92m\x1b[1m3.0 \x1b[0m\x1b[0m  |           \n'
    '      small  |        |  \x1b[92m\x1b[1m1 (! 12%)\x1b[0m\x1b[0m\n'
    '\n'
    'Times are in milliseconds (ms).\n'
    '(! XX%) Measurement has high variance, where XX is the IQR / median * 100.\n'
)
ROWWISE = (
    '[--------------------- add ---------------------]\n'
    '             |  n=1   |       n=16      |  n=256 \n'
    '1 threads: --------------------------------------\n'
    '      float  |  \x1b[92m\x1b[1m1000\x1b[0m\x1b[0m  |  \x1b[31m\x1b[1m  8000       \x1b[0m\x1b[0m  '
    '|  \x1b[31m\x1b[1m100000\x1b[0m\x1b[0m\n'
    '      int    |  \x1b[92m\x1b[1m2000\x1b[0m\x1b[0m  |  \x1b[31m\x1b[1m20000 (! 61%)\x1b[0m\x1b[0m  '
    '|  \x1b[31m\x1b[1m300000\x1b[0m\x1b[0m\n'
    '4 threads: --------------------------------------\n'
    '      float  |  \x1b[92m\x1b[1m 300\x1b[0m\x1b[0m  |  \x1b[31m\x1b[1m  2000       \x1b[0m\x1b[0m  '
    '|  \x1b[31m\x1b[1m 30000\x1b[0m\x1b[0m\n'
    '      int    |  \x1b[92m\x1b[1m 600\x1b[0m\x1b[0m  |  \x1b[31m\x1b[1m 6000 (! 61%)\x1b[0m\x1b[0m  '
    '|  \x1b[31m\x1b[1m 80000\x1b[0m\x1b[0m\n'
    '\n'
    'Times are in nanoseconds (ns).\n'
    '(! XX%) Measurement has high variance, where XX is the IQR / median * 100.\n'
    '\n'
    '[-------------- mm --------------]\n'
    '             |  n=16  |     n=1   \n'
    '1 threads: -----------------------\n'
    '      big    |  \x1b[92m\x1b[1m3.0 \x1b[0m\x1b[0m  |           \n'
    '      small  |        |  \x1b[92m\x1b[1m1 (! 12%)\x1b[0m\x1b[0m\n'
    '\n'
    'Times are in milliseconds (ms).\n'
    '(! XX%) Measurement has high variance, where XX is the IQR / median * 100.\n'
)
ENVS = (
    '[-------- e ---------]\n'
    '              |    d  \n'
    '1 threads: -----------\n'
    '  (new)  x+y  |  120.0\n'
    '  (old)  x+y  |  120.0\n'
    '\n'
    'Times are in nanoseconds (ns).\n'
)


def test_compare_renders_torchs_tables():
    c = benchmark.Compare(_table_measurements())
    assert str(c) == PLAIN
    c.trim_significant_figures()
    assert str(c) == TRIMMED
    c.highlight_warnings()
    assert str(c) == HIGHLIGHTED
    c.colorize()
    assert str(c) == COLUMNWISE
    c.colorize(rowwise=True)
    assert str(c) == ROWWISE
    envs = [M([1e-6 * (1 + i / 10) for i in range(5)], label="e", env=e, stmt="x+y", description="d")
            for e in ("old", "new")]
    assert str(benchmark.Compare(envs)) == ENVS


def test_compare_print_extend_and_errors_as_torch(capsys):
    c = benchmark.Compare(_table_measurements()[:6])
    c.extend_results(_table_measurements()[6:])
    c.print()
    assert capsys.readouterr().out == PLAIN + "\n"
    with pytest.raises(ValueError, match="Expected an instance of `Measurement`, got <class 'int'> instead."):
        c.extend_results([1])
    with pytest.raises(TypeError, match="object of type 'NoneType' has no len()"):  # torch's: no description
        str(benchmark.Compare([M([1e-6], label="x")]))


def test_timer_errors_as_torch(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="^Currently only a `str` stmt is supported.$"):
        benchmark.Timer(lambda: 1)
    with pytest.raises(ValueError, match=re.escape("global_setup is C++ only, got `#include <x>`. Most likely "
                                                   "this code can simply be moved to `setup`.")):
        benchmark.Timer("x", global_setup="#include <x>")
    with pytest.raises(ValueError, match="^Invalid language `java`.$"):
        benchmark.Timer("x", language="java")
    for method in ("repeat", "autorange"):
        with pytest.raises(NotImplementedError, match=r"^See `Timer.blocked_autorange.`$"):
            getattr(benchmark.Timer("x"), method)()
    with pytest.raises(ValueError, match="^C\\+\\+ timing does not support globals.$"):
        benchmark.Timer("x;", language="cpp", globals={"a": 1})
    t = benchmark.Timer("x;", language="c++")
    assert (t._task_spec.setup, t._language) == ("", benchmark.Language.CPP)  # torch's: "pass" means none
    with pytest.raises(NotImplementedError, match="tessel cannot time C\\+\\+ statements"):
        t.timeit(1)
    with pytest.raises(ValueError, match="If specified, `repeats` must be >= 1"):
        benchmark.Timer("1").collect_callgrind(repeats=0)
    with pytest.raises(NameError, match="name 'undefined_name' is not defined"):  # the statement runs first
        benchmark.Timer("undefined_name").collect_callgrind()
    monkeypatch.setenv("PATH", str(tmp_path))  # no valgrind on the PATH: torch's error
    with pytest.raises(OSError, match="^Missing: valgrind, callgrind_control, callgrind_annotate$"):
        benchmark.Timer("1").collect_callgrind()


def test_num_threads_sets_tessels_budget_for_the_timed_region_and_restores_it():
    before = tessel.get_num_threads()
    try:
        tessel.set_num_threads(2)
        seen = []
        t = benchmark.Timer("seen.append(torch.get_num_threads())", globals={"seen": seen})
        t.timeit(5)
        assert set(seen) == {1} and tessel.get_num_threads() == 2  # torch's default num_threads is 1
        seen.clear()
        m = benchmark.Timer("seen.append(torch.get_num_threads())", globals={"seen": seen},
                            num_threads=3).blocked_autorange(min_run_time=0.001)
        assert set(seen) == {3} and tessel.get_num_threads() == 2 and m.num_threads == 3
        with pytest.raises(ZeroDivisionError):
            benchmark.Timer("1 / 0", num_threads=1).timeit(3)
        assert tessel.get_num_threads() == 2  # restored on an error too
        with benchmark.set_torch_threads(1):
            assert tessel.get_num_threads() == 1
        assert tessel.get_num_threads() == 2
    finally:
        tessel.set_num_threads(before)


def test_timer_over_a_tensor_op_measures_real_time():
    x, y = tessel.ones(32, 32), tessel.ones(32, 32)
    t = benchmark.Timer("x @ y", globals={"x": x, "y": y}, label="mm", sub_label="32", description="cpu")
    m = t.blocked_autorange(min_run_time=0.05)
    assert isinstance(m, benchmark.Measurement) and m.task_spec.label == "mm"
    number = m.number_per_run
    assert number >= 1 and str(number).strip("0") == "1"  # a power of ten (torch's block search)
    assert all(r > 0 for r in m.raw_times) and sum(m.raw_times) >= 0.05  # min_run_time was spent
    assert 0 < m.median < 0.05 and m.times == [r / number for r in m.raw_times]
    assert "Median: " in repr(m) or len(m.raw_times) == 1
    # `torch` in a statement is tessel, as torch's Timer puts torch there
    m = benchmark.Timer("torch.ones(3).sum()").timeit(10)
    assert m.number_per_run == 10 and m.raw_times[0] > 0
    assert "mm" in str(benchmark.Compare([t.timeit(10)]))


def _fuzzer():
    FP, FT = benchmark.FuzzedParameter, benchmark.FuzzedTensor
    return benchmark.Fuzzer(
        parameters=[FP("n", 4, 64, distribution="loguniform"), FP("m", 1, 8, distribution="uniform"),
                    FP("a", 0.5, 2.5, distribution="uniform"), FP("dim", 1, 3, distribution="uniform", strict=True),
                    FP("s", 1, 2, distribution="uniform")],
        tensors=[FT("x", size=("n", "m", 3), steps=("s", 1, 1), dim_parameter="dim", probability_contiguous=0.5,
                    max_elements=200),
                 FT("y", size=("m", "n"), dtype=tessel.int32)],
        constraints=[lambda params: params["n"] != 8], seed=123)


def test_fuzzer_draws_torchs_parameters_shapes_and_layouts_for_a_seed():
    f = _fuzzer()
    steps = list(f.take(6))
    # torch 2.15, seed 123: the parameters of each step, then x's and y's shape, stride and properties
    assert [p for _, _, p in steps] == [
        {"n": 15, "m": 2, "a": 2.461528396769231, "dim": 2, "s": 1},
        {"n": 30, "m": 4, "a": 0.9895185539078397, "dim": 1, "s": 1},
        {"n": 5, "m": 3, "a": 1.5636551741937321, "dim": 1, "s": 2},
        {"n": 7, "m": 2, "a": 2.4759905730333345, "dim": 3, "s": 2},
        {"n": 13, "m": 3, "a": 0.8081644836936934, "dim": 3, "s": 1},
        {"n": 14, "m": 3, "a": 0.7312367901585914, "dim": 3, "s": 2}]
    layouts = [(tuple(ts["x"].shape), ts["x"].stride(), [int(i) for i in ps["x"]["order"]], ps["x"]["steps"],
                ps["x"]["is_contiguous"], ps["x"]["numel"]) for ts, ps, _ in steps]
    assert layouts == [((15, 2), (1, 15), [1, 0], (1, 1), False, 30), ((30,), (1,), [0], (1,), True, 30),
                       ((5,), (2,), [0], (2,), False, 5), ((7, 2, 3), (12, 3, 1), [0, 1, 2], (2, 1, 1), False, 42),
                       ((13, 3, 3), (3, 1, 39), [2, 0, 1], (1, 1, 1), False, 117),
                       ((14, 3, 3), (18, 3, 1), [0, 1, 2], (2, 1, 1), False, 126)]
    ys = [(tuple(ts["y"].shape), ts["y"].stride(), ps["y"]["is_contiguous"]) for ts, ps, _ in steps]
    assert ys == [((2, 15), (15, 1), True), ((4, 30), (1, 4), False), ((3, 5), (1, 3), False),
                  ((2, 7), (7, 1), True), ((3, 13), (1, 3), False), ((3, 14), (1, 3), False)]
    assert f.rejection_rate == 0.25  # torch's
    assert steps[0][0]["y"].dtype == tessel.int32 and steps[0][1]["y"]["dtype"] == str(tessel.int32)
    x = steps[0][0]["x"]
    assert float(x.min()) >= 0 and float(x.max()) < 1  # rand's range (values are tessel's stream, not torch's)
    y = steps[0][0]["y"]
    assert int(y.min()) >= 1 and int(y.max()) < 127
    again = [ts["x"].tolist() for ts, _, _ in _fuzzer().take(6)]
    assert again == [ts["x"].tolist() for ts, _, _ in steps]  # one seed, the same tensors


def test_fuzzer_errors_as_torch():
    # torch 2.15's normalization check is inverted: a table summing to one is refused
    with pytest.raises(AssertionError, match="^Distribution is not normalized$"):
        benchmark.FuzzedParameter("k", distribution={1: 0.5, 2: 0.5})
    assert benchmark.FuzzedParameter("k", distribution={1: 0.3, 2: 0.3}).name == "k"
    with pytest.raises(AssertionError, match="^Unknown distribution: normal$"):
        benchmark.FuzzedParameter("q", 1, 2, distribution="normal")
    with pytest.raises(ValueError, match=re.escape("Duplicate names in parameters and tensors: {'x'}")):
        benchmark.Fuzzer(parameters=[benchmark.FuzzedParameter("x", 1, 2, distribution="uniform")],
                         tensors=[benchmark.FuzzedTensor("x", size=(1,))])
    assert repr(benchmark.ParameterAlias("n")) == "ParameterAlias[alias_to: n]"


def test_task_spec_headings_and_edge_reprs_as_torch():
    # (title, setup_str(), summarize()) as torch 2.15 prints them for the same specs
    cases = [(dict(), ("f(x)", "", "f(x)")), (dict(label="L"), ("L", "", "L")),
             (dict(label="", sub_label="s"), (": s", "", ": s")),
             (dict(stmt="a\nb", description="d"), ("stmt:\n  a\n  b", "", "stmt:\n  a\n  b\n\nd")),
             (dict(stmt="a\nb", setup="x\ny", description="d\ne"),
              ("stmt:\n  a\n  b", "setup:\n  x\n  y", "stmt:\n  a\n  b\n\nd\ne\n\nsetup:\n  x\n  y\n")),
             (dict(setup="q", sub_label="", description=""), ("f(x)", "setup: q", "f(x)\nsetup: q"))]
    for kw, expected in cases:
        spec = M([1.0], **kw).task_spec
        assert (spec.title, spec.setup_str(), spec.summarize()) == expected, kw
    # torch's repr of an empty statement: its heading is a blank line
    assert _lines(M([1e-6, 2e-6], stmt="")) == (
        "\n  Median: 150.00 ns\n  2 measurements, 10 runs per measurement, 1 thread\n"
        "  WARNING: Interquartile range is 33.3% of the median measurement.\n"
        "           This suggests significant environmental influence.")
    assert M([1.0], stmt="", sub_label="").as_row_name == "[Unknown]"  # torch's


def test_measurement_without_times_and_with_degenerate_times_as_torch():
    m = benchmark.Measurement(1, [], benchmark.TaskSpec("a", "pass"))
    # torch's placeholders while there are no times
    assert (m.median, m.mean, m.iqr, m.has_warnings, m.times, m.meets_confidence()) == (-1.0, -1.0, 0.0, False,
                                                                                          [], True)
    with pytest.raises(ZeroDivisionError, match="float division by zero"):
        m.significant_figures
    m.raw_times.append(1.0)
    assert (m.median, m.significant_figures) == (1.0, 4)  # torch's: times added later count
    with pytest.raises(ZeroDivisionError, match="float division by zero"):  # torch's: the warning check divides
        M([0.0, 0.0]).median
    m = benchmark.Measurement(1, [1e-6, float("inf"), 2e-6, 3e-6, 1e-6], benchmark.TaskSpec("a", "pass"))
    assert (m.median, m.iqr, m.has_warnings, m.significant_figures) == (2e-06, 2.0000000000000003e-06, True, 1)
    assert _lines(m) == ("a\n  Median: 2.00 us\n  IQR:    2.00 us (1.00 to 3.00)\n"
                         "  5 measurements, 1 runs per measurement, 1 thread\n"
                         "  WARNING: Interquartile range is 100.0% of the median measurement.\n"
                         "           This suggests significant environmental influence.")  # torch's
    m = benchmark.Measurement(1, [1e-6, float("nan"), 2e-6, 3e-6], benchmark.TaskSpec("a", "pass"))
    assert m.has_warnings and m.median != m.median  # torch's: a NaN median, and a warning
    with pytest.raises(ValueError, match="cannot convert float NaN to integer"):
        repr(m)
    # torch's rounding at the edges
    assert benchmark.trim_sigfig(-3.14159, 2) == -3.1000001430511475 and benchmark.trim_sigfig(5, 2.0) == 5.0
    with pytest.raises(OverflowError, match="cannot convert float infinity to integer"):
        benchmark.trim_sigfig(0.0, 2)
    with pytest.raises(ValueError, match="cannot convert float NaN to integer"):
        benchmark.select_unit(float("inf"))
    assert benchmark.ordered_unique([3, 1, 3, 2, 1]) == [3, 1, 2]


def test_compare_edge_layouts_as_torch():
    # torch 2.15: no label gives an empty title; a band of num_threads=None gets no "threads:" rule
    one = M([1e-6, 1.1e-6], description="d", num_threads=None)
    assert str(benchmark.Compare([one])) == ('[--------  --------]\n            |    d  \n      f(x)  |  105.0\n\n'
                                             'Times are in nanoseconds (ns).\n')
    # torch's: an env is shown where it changes within a band, and "" counts as no change at a band's start
    rows = [M([1e-6], description="d", env=""), M([2e-6], description="d", env="xy", stmt="g"),
            M([2e-6], description="d", env="", stmt="h")]
    assert str(benchmark.Compare(rows)) == (
        '[---------  ---------]\n              |    d  \n1 threads: -----------\n        f(x)  |  100.0\n'
        '        h     |  200.0\n  (xy)  g     |  200.0\n\nTimes are in nanoseconds (ns).\n')
    # torch checks the results and then extends by the same iterable, so a generator adds nothing
    assert str(benchmark.Compare(m for m in [M([1e-6], label="g", description="d")])) == ""
    with pytest.raises(TypeError, match="'<' not supported between instances of 'NoneType' and 'str'"):
        str(benchmark.Compare([M([1e-6], label="e", description="d", env="x"),
                               M([1e-6], label="e", description="d", stmt="g")]))  # torch's: envs sort


def test_timer_records_its_sources_as_torch():
    t = benchmark.Timer("\n    x = 1  \n    y = 2   \n\n  ", setup="\n  a=1\n")
    assert (t._task_spec.stmt, t._task_spec.setup) == ("x = 1  \ny = 2", "a=1")  # torch's
    t = benchmark.Timer("\n  x;\n", setup="\n  y;\n", global_setup="\n  #include <a>\n", language="cpp")
    # torch's: C++ stmt and setup tidied, global_setup kept verbatim
    assert (t._task_spec.stmt, t._task_spec.setup, t._task_spec.global_setup) == ("x;", "y;", "\n  #include <a>\n")
    assert benchmark.Timer("x;", language="cpp", globals={})._language == benchmark.Language.CPP
    # torch checks the statement first, then the language, then global_setup
    with pytest.raises(ValueError, match="^Currently only a `str` stmt is supported.$"):
        benchmark.Timer(1, language="java")
    with pytest.raises(ValueError, match="^Invalid language `java`.$"):
        benchmark.Timer("x", language="java", global_setup="y")
    with pytest.raises(ValueError, match="^If specified, `repeats` must be >= 1$"):  # before the statement runs
        benchmark.Timer("undefined_name").collect_callgrind(repeats=0)


class _Fixed(benchmark.FuzzedParameter):
    """A parameter that always draws `value` (draws nothing from the state): the only way to reach an alias in
    torch 2.15, whose inverted normalization check makes custom distributions undrawable."""

    def __init__(self, name, value):
        super().__init__(name, 1, 2, distribution="uniform")
        self.value = value

    def sample(self, state):
        return self.value


def test_fuzzer_aliases_and_constraint_iterables_as_torch():
    PA = benchmark.ParameterAlias
    f = benchmark.Fuzzer([_Fixed("a", PA("b")), _Fixed("b", PA("c")), _Fixed("c", PA("d")), _Fixed("d", 7),
                          benchmark.FuzzedParameter("e", 1, 9, distribution="uniform")], [], seed=0)
    assert [p for _, _, p in f.take(1)] == [{"a": 7, "b": 7, "c": 7, "d": 7, "e": 6}]  # torch's
    f = benchmark.Fuzzer([_Fixed("a", PA("b")), _Fixed("b", PA("a")), _Fixed("c", PA("d")), _Fixed("d", 5)], [],
                         seed=0)
    # torch's message shows the values as the sweep that made no progress left them
    with pytest.raises(ValueError, match=re.escape("ParameterAlias cycle detected\n{'a': ParameterAlias[alias_to: "
                                                   "a], 'b': ParameterAlias[alias_to: a], 'c': 5, 'd': 5}")):
        list(f.take(1))
    with pytest.raises(KeyError, match="'zz'"):
        list(benchmark.Fuzzer([_Fixed("a", PA("zz"))], [], seed=0).take(1))
    # torch walks `constraints` itself at every attempt: a generator binds only the first attempt
    f = benchmark.Fuzzer([benchmark.FuzzedParameter("n", 1, 3, distribution="uniform")], [],
                         constraints=(c for c in [lambda p: p["n"] != 1]), seed=5)
    assert [p["n"] for _, _, p in f.take(30)] == [2, 3, 3, 1, 2, 1, 1, 3, 1, 3, 1, 1, 2, 2, 1, 1, 2, 2, 3, 1, 3, 2,
                                                  3, 3, 2, 2, 3, 2, 2, 3]  # torch's
    with pytest.raises(ValueError, match="^invalid literal for int\\(\\) with base 10: 'nope'$"):  # torch's
        benchmark.FuzzedTensor("x", size=("nope",)).satisfies_constraints({})
    assert benchmark.FuzzedTensor("x", size=(2, 3), steps=(2,)).satisfies_constraints({})


def test_benchmark_loads_lazily_by_torchs_paths():
    code = ("import sys, tessel; before = [m for m in ('tessel.utils.benchmark', 'tessel.utils.collect_env', "
            "'tessel.__config__') if m in sys.modules]; b = tessel.utils.benchmark; "
            "from tessel.utils import benchmark; import tessel.utils.benchmark as bb; "
            "from tessel.utils.benchmark.utils.common import Measurement; "
            "from tessel.utils.benchmark.utils.timer import Timer; "
            "print(before, b is benchmark is bb, Measurement is b.Measurement, Timer is b.Timer)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))  # as this test finds tessel
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[] True True True"
    assert "benchmark" in dir(tessel.utils)
    with pytest.raises(AttributeError, match="module 'tessel.utils' has no attribute 'nothing'"):
        tessel.utils.nothing


def _build_settings(text):
    line = re.search(r"^  - Build settings: (.*)$", text, re.M).group(1)
    assert line.endswith(", ")  # torch's line ends so too
    return [item.split("=", 1) for item in line[:-2].split(", ")]


def test_config_show_describes_the_build_in_torchs_layout():
    text = tessel.__config__.show()
    lines = text.split("\n")
    assert lines[0] == "tessel built with:" and text.endswith("\n")
    assert re.fullmatch(r"  - GCC \d+\.\d+", lines[1])  # from the extension's ELF .comment
    assert lines[2] == "  - C++ Version: 202002"  # torch's line: __cplusplus under -std=c++20
    assert re.search(r"^  - OpenBLAS \d+\.\d+\.\d+ .*$", text, re.M)  # openblas_get_config() of the linked one
    assert re.search(r"^  - oneDNN v\d+\.\d+\.\d+ \(Git Hash \S+\)$", text, re.M)  # dnnl_version()
    assert "  - OpenMP (libgomp)" in lines
    assert "  - CPU capability usage: %s" % tessel.backends.cpu.get_cpu_capability() in lines
    settings = _build_settings(text)
    keys = [k for k, _ in settings]
    assert keys == sorted(keys)  # torch's are sorted too
    settings = dict(settings)
    assert {k: settings[k] for k in ("BLAS_INFO", "BUILD_TYPE", "CXX_COMPILER", "TORCH_VERSION", "TESSEL_VERSION",
                                     "USE_CUDA", "USE_GLOO", "USE_MKL", "USE_MKLDNN", "USE_OPENMP")} == {
        "BLAS_INFO": "open", "BUILD_TYPE": "Release", "CXX_COMPILER": "gcc", "TORCH_VERSION": "2.15.0",
        "TESSEL_VERSION": tessel.version.tessel, "USE_CUDA": "0", "USE_GLOO": "ON", "USE_MKL": "OFF",
        "USE_MKLDNN": "ON", "USE_OPENMP": "ON"}
    assert settings["CXX_FLAGS"] == tessel.__config__._cxx_flags()
    # torch's valgrind wrapper reads the build type with this pattern
    assert re.search("BUILD_TYPE=(.+),", text).groups()[0].split(",")[0] == "Release"


def test_cxx_flags_are_the_release_builds():
    flags = tessel.__config__._cxx_flags()
    assert flags.startswith(" ") and "-O3" in flags.split()  # torch's string starts with a space too
    bazelrc = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".bazelrc")
    if os.path.exists(bazelrc):  # the repository's checkout (not a bazel sandbox): the flags it builds with
        with open(bazelrc) as f:
            opts = [o for line in f if line.startswith("build ") for o in re.findall(r"--(?:copt|cxxopt)=(\S+)", line)]
        assert opts and set(opts) <= set(flags.split()), (opts, flags)


def test_config_parallel_info_reports_the_thread_budgets(monkeypatch):
    before = tessel.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    try:
        for n in (1, 2):
            tessel.set_num_threads(n)
            info = tessel.__config__.parallel_info()
            lines = info.split("\n")
            assert lines[:3] == ["tessel/Parallel:", "\ttessel.get_num_threads() : %d" % n,
                                 "\ttessel.get_num_interop_threads() : %d" % tessel.get_num_interop_threads()]
            # set_num_threads bounds OpenMP on this thread as well (core/base/parallel.cc)
            assert lines[3:5] == ["OpenMP (libgomp)", "\tomp_get_max_threads() : %d" % n]
            assert re.search(r"^OpenBLAS \d+\.\d+\.\d+ .*\n\topenblas_get_num_threads\(\) : \d+$", info, re.M)
            assert re.search(r"^oneDNN v\d+\.\d+\.\d+ \(Git Hash \S+\)$", info, re.M)
            assert "std::thread::hardware_concurrency() : %d" % os.cpu_count() in lines
            assert lines[-5:] == ["Environment variables:", "\tOMP_NUM_THREADS : 3",
                                  "\tOPENBLAS_NUM_THREADS : [not set]",
                                  "tessel parallel backend: thread pool (core/base/parallel.cc)", ""]
    finally:
        tessel.set_num_threads(before)


def test_config_loads_lazily_by_torchs_paths():
    import tessel.__config__ as config
    assert config is tessel.__config__ and config.show is tessel.__config__.show
    with pytest.raises(AttributeError, match="^module 'tessel' has no attribute 'nothing'$"):
        tessel.nothing
    assert not hasattr(tessel, "nothing")


# torch 2.15's SystemEnv fields, in its order
_TORCH_ENV_FIELDS = (
    "torch_version", "is_debug_build", "cuda_compiled_version", "gcc_version", "clang_version", "cmake_version", "os",
    "libc_version", "python_version", "python_platform", "is_cuda_available", "cuda_runtime_version",
    "cuda_module_loading", "nvidia_driver_version", "nvidia_gpu_models", "cudnn_version", "is_xpu_available",
    "pip_version", "pip_packages", "conda_packages", "hip_compiled_version", "hip_runtime_version",
    "miopen_runtime_version", "caching_allocator_config", "is_xnnpack_available", "cpu_info", "rocm_compiled_version")


@pytest.fixture(scope="module")
def env_info():
    return tessel.utils.collect_env.get_env_info()


def _cpu_model():
    with open("/proc/cpuinfo") as f:
        found = re.search(r"^model name\s*:\s*(.*)$", f.read(), re.M)
    return found.group(1).strip() if found else None


def test_get_env_info_has_torchs_fields_then_tessels(env_info):
    import platform
    ce = tessel.utils.collect_env
    assert ce.SystemEnv._fields == _TORCH_ENV_FIELDS + ("tessel_version", "blas_info", "onednn_info",
                                                        "cpu_capability")
    assert env_info.torch_version == tessel.__version__ == "2.15.0+tessel." + tessel.version.tessel
    assert env_info.tessel_version == tessel.version.tessel
    assert (env_info.is_debug_build, env_info.cuda_compiled_version, env_info.is_cuda_available,
            env_info.is_xpu_available, env_info.hip_compiled_version, env_info.rocm_compiled_version,
            env_info.pip_version) == ("False", None, "False", "False", "N/A", "N/A", "pip3")
    assert env_info.python_version == "%s (64-bit runtime)" % sys.version.replace("\n", " ")
    assert env_info.python_platform == platform.platform()
    assert env_info.libc_version == "-".join(platform.libc_ver())
    assert env_info.os.endswith(" (%s)" % platform.machine())
    # the libraries tessel's extension links, as they describe themselves
    assert re.fullmatch(r"OpenBLAS \d+\.\d+\.\d+ .* \(libopenblas\.so\.\d+\)", env_info.blas_info)
    assert re.fullmatch(r"v\d+\.\d+\.\d+ \(Git Hash \S+, \w+ runtime\) \(libdnnl\.so\.\d+\)", env_info.onednn_info)
    assert env_info.cpu_capability == tessel.backends.cpu.get_cpu_capability()
    model = _cpu_model()
    assert model is None or model in env_info.cpu_info  # lscpu's "Model name"


def test_cpu_info_falls_back_to_proc_cpuinfo_without_lscpu():
    model = _cpu_model()
    if model is None:
        pytest.skip("no model name in /proc/cpuinfo on this machine")
    info = tessel.utils.collect_env.get_cpu_info(lambda command: (127, "", "lscpu: not found"))
    assert "Model name: %s" % model in info.split("\n") and re.search(r"^CPU\(s\): \d+$", info, re.M)


def _env(**changes):
    fields = dict(torch_version="2.15.0", is_debug_build="False", cuda_compiled_version=None,
                  gcc_version="(Debian) 12.2.0", clang_version=None, cmake_version="version 3.25.1",
                  os="Debian 12 (x86_64)", libc_version="glibc-2.36", python_version="3.11.2 (64-bit runtime)",
                  python_platform="Linux-6-x86_64", is_cuda_available="False", cuda_runtime_version=None,
                  cuda_module_loading="N/A", nvidia_driver_version=None, nvidia_gpu_models=None, cudnn_version=None,
                  is_xpu_available="False", pip_version="pip3", pip_packages="numpy==1.24.2\noptree==0.1",
                  conda_packages="", hip_compiled_version="N/A", hip_runtime_version="N/A",
                  miopen_runtime_version="N/A", caching_allocator_config={}, is_xnnpack_available=True,
                  cpu_info="Model name: X", rocm_compiled_version="N/A", tessel_version="0.1.0", blas_info=None,
                  onednn_info="v1.2.3", cpu_capability="AVX2")
    fields.update(changes)
    return tessel.utils.collect_env.SystemEnv(**fields)


def _with_tessels_lines(torch_text, libraries):
    """torch's report plus tessel's two additions: its version first, its libraries before the packages."""
    return "tessel version: 0.1.0\n" + torch_text.replace(
        "\n\nVersions of relevant libraries:", "\n\ntessel's libraries:\n%s\n\nVersions of relevant libraries:"
        % libraries)


def test_pretty_str_applies_torchs_substitutions():
    pretty = tessel.utils.collect_env.pretty_str
    # torch 2.15's pretty_str of the same fields: no GPU answered, so "No CUDA"; True is Yes; None is "Could not
    # collect"; an empty conda list "No relevant packages"; package lines tagged
    torch_text = (
        "PyTorch version: 2.15.0\nIs debug build: False\nCUDA used to build PyTorch: None\n"
        "ROCm SDK used to build PyTorch: N/A\nHIP used to build PyTorch: N/A\n\nOS: Debian 12 (x86_64)\n"
        "GCC version: (Debian) 12.2.0\nClang version: Could not collect\nCMake version: version 3.25.1\n"
        "Libc version: glibc-2.36\n\nPython version: 3.11.2 (64-bit runtime)\nPython platform: Linux-6-x86_64\n"
        "Is CUDA available: False\nCUDA runtime version: No CUDA\nCUDA_MODULE_LOADING set to: N/A\n"
        "GPU models and configuration: No CUDA\nNvidia driver version: No CUDA\ncuDNN version: No CUDA\n"
        "Is XPU available: False\nHIP runtime version: N/A\nMIOpen runtime version: N/A\n"
        "Is XNNPACK available: Yes\nCaching allocator config: N/A\n\nCPU:\nModel name: X\n\n"
        "Versions of relevant libraries:\n[pip3] numpy==1.24.2\n[pip3] optree==0.1\n[conda] No relevant packages")
    assert pretty(_env()) == _with_tessels_lines(torch_text, "BLAS: Could not collect\noneDNN: v1.2.3\n"
                                                             "CPU capability: AVX2")
    # torch's, with a GPU list (on its own lines), a CUDA runtime, no pip list and an allocator setting
    torch_text = (
        "PyTorch version: 2.15.0\nIs debug build: False\nCUDA used to build PyTorch: Could not collect\n"
        "ROCm SDK used to build PyTorch: N/A\nHIP used to build PyTorch: N/A\n\nOS: Linux (x86_64)\n"
        "GCC version: Could not collect\nClang version: Could not collect\nCMake version: Could not collect\n"
        "Libc version: glibc-2.36\n\nPython version: 3.11.2 (64-bit runtime)\nPython platform: Linux\n"
        "Is CUDA available: False\nCUDA runtime version: 13.0.88\nCUDA_MODULE_LOADING set to: N/A\n"
        "GPU models and configuration: \nGPU 0: A\nGPU 1: B\n\nNvidia driver version: 580.1\n"
        "cuDNN version: Could not collect\nIs XPU available: False\nHIP runtime version: N/A\n"
        "MIOpen runtime version: N/A\nIs XNNPACK available: No\n"
        "Caching allocator config: {'PYTORCH_CUDA_ALLOC_CONF': 'expandable_segments:True'}\n\nCPU:\n"
        "lscpu: not found\n\nVersions of relevant libraries:\n[pip3] Could not collect\n[conda] mkl 2024\n"
        "[conda] torch 2.15")
    env = _env(gcc_version=None, cmake_version=None, os="Linux (x86_64)", python_platform="Linux",
               cuda_runtime_version="13.0.88", nvidia_driver_version="580.1", nvidia_gpu_models="GPU 0: A\nGPU 1: B",
               pip_packages=None, conda_packages="mkl 2024\ntorch 2.15",
               caching_allocator_config={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
               is_xnnpack_available=False, cpu_info="lscpu: not found", blas_info="OpenBLAS 0.3.21", onednn_info=None,
               cpu_capability="AVX512")
    assert pretty(env) == _with_tessels_lines(torch_text, "BLAS: OpenBLAS 0.3.21\noneDNN: Could not collect\n"
                                                          "CPU capability: AVX512")


def test_pretty_env_info_and_main_report_the_sections(env_info, monkeypatch, capsys):
    ce = tessel.utils.collect_env
    monkeypatch.setattr(ce, "get_env_info", lambda: env_info)  # the report of this machine, collected once
    text = ce.get_pretty_env_info()
    heads = ["tessel version: %s" % tessel.version.tessel, "PyTorch version: %s" % tessel.__version__, "OS: ",
             "Python version: ", "CPU:", "tessel's libraries:", "BLAS: OpenBLAS ", "oneDNN: v", "CPU capability: ",
             "Versions of relevant libraries:"]
    at = [text.find("\n" + h) if i else text.find(h) for i, h in enumerate(heads)]
    assert at[0] == 0 and all(a > b for a, b in zip(at[1:], at)), list(zip(heads, at))
    ce.main()
    out = capsys.readouterr().out
    assert out == "Collecting environment information...\n" + text + "\n"


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
