"""tessel.utils.benchmark (torch.utils.benchmark): Timer runs a Python statement in blocks under a thread budget
and returns a Measurement (replicate times, median, IQR, torch's repr); Compare prints many Measurements as
torch's grouped tables. Loaded on first use of tessel.utils.benchmark, so `import tessel` does not pay for it.

    t = benchmark.Timer("x @ y", globals={"x": x, "y": y}, label="mm", description="64x64")
    m = t.blocked_autorange(min_run_time=0.2)
    benchmark.Compare([m]).print()
"""
from .utils.common import (Measurement, TaskSpec, ordered_unique, select_unit, set_torch_threads, trim_sigfig,
                           unit_to_english)
from .utils.compare import Colorize, Compare
from .utils.fuzzer import FuzzedParameter, FuzzedTensor, Fuzzer, ParameterAlias
from .utils.timer import Language, Timer, timer

__all__ = ["Measurement", "TaskSpec", "ordered_unique", "select_unit", "set_torch_threads", "trim_sigfig",
           "unit_to_english", "Colorize", "Compare", "FuzzedParameter", "FuzzedTensor", "Fuzzer", "ParameterAlias",
           "Language", "Timer", "timer"]
