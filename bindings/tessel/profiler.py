"""torch.profiler over tessel's op profiler (core/dispatch/profiler.h): per-op wall time and call counts
of every kernel the profiling thread dispatches, forward and backward.

    with tessel.profiler.profile(activities=[ProfilerActivity.CPU]) as prof:
        loss = model(x).sum(); loss.backward()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10))

With record_shapes=True each op's tensor inputs' shapes are kept, and key_averages(group_by_input_shape=
True) gives one row per op and shapes, with torch's "Input Shapes" column (torch also lists each scalar
argument as []; tessel's kernels take tensors only, and an absent optional tensor is []).

Every kernel call and record_function block is also kept with its start and duration, so
export_chrome_trace(path) (".gz" compressed) and tensorboard_trace_handler(dir) write torch's Chrome trace
JSON (chrome://tracing, Perfetto, TensorBoard's profiler): "cpu_op" events for the ops (with "Input Dims"
under record_shapes), "user_annotation" ones for record_function, on the profiling thread.

What torch records and tessel does not: no memory or stacks (profile_memory / with_stack are accepted and
ignored), no CUDA activity, no Python function events. An op's time is its kernel's (self and total are
equal, as for torch's leaf aten ops); record_function blocks add rows of their own wall time.
"""
import enum
import gzip
import json
import os
import re
import socket
import threading
import time

from . import _C

__all__ = ["profile", "record_function", "ProfilerActivity", "ProfilerAction", "schedule", "EventList",
           "FunctionEventAvg", "tensorboard_trace_handler"]


class ProfilerActivity(enum.Enum):
    CPU = 0
    CUDA = 1


class ProfilerAction(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def schedule(*, wait, warmup, active, repeat=0, skip_first=0):
    """torch.profiler.schedule: the action for each step number (skip_first, then cycles of wait,
    warmup and active steps; the last active step of a cycle saves; repeat=0 cycles forever)."""
    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise ValueError("Invalid profiler schedule arguments")

    def action(step):
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        cycle = wait + warmup + active
        if repeat > 0 and step // cycle >= repeat:
            return ProfilerAction.NONE
        at = step % cycle
        if at < wait:
            return ProfilerAction.NONE
        if at < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if at < cycle - 1 else ProfilerAction.RECORD_AND_SAVE
    return action


class FunctionEventAvg:
    """One row of key_averages(): times in microseconds, as torch's."""

    def __init__(self, key, count, total_us, input_shapes=""):
        self.key, self.count, self.input_shapes = key, count, input_shapes
        self.cpu_time_total = self.self_cpu_time_total = total_us
        self.device_time_total = self.self_device_time_total = 0.0
        self.cuda_time_total = self.self_cuda_time_total = 0.0

    @property
    def cpu_time(self):
        return self.cpu_time_total / self.count if self.count else 0.0

    def __repr__(self):
        return "<FunctionEventAvg key=%s self_cpu_time=%.3fus cpu_time=%.3fus count=%d>" % (
            self.key, self.self_cpu_time_total, self.cpu_time, self.count)


_SORT_KEYS = {"cpu_time_total", "self_cpu_time_total", "cpu_time", "count", "device_time_total",
              "self_device_time_total", "cuda_time_total", "self_cuda_time_total"}


def _us(us):
    return "%.3fms" % (us / 1e3) if us >= 1e3 else "%.3fus" % us


class EventList(list):
    @property
    def self_cpu_time_total(self):
        return sum(e.self_cpu_time_total for e in self)

    def table(self, sort_by=None, row_limit=100, max_name_column_width=55, max_shapes_column_width=80, header=None,
              **_):
        """torch's table: Name, Self CPU %, Self CPU, CPU total %, CPU total, CPU time avg, # of Calls."""
        if sort_by is not None and sort_by not in _SORT_KEYS:
            raise AttributeError("'FunctionEventAvg' object has no attribute '%s'" % sort_by)
        rows = sorted(self, key=lambda e: getattr(e, sort_by), reverse=True) if sort_by else list(self)
        if row_limit is not None and row_limit >= 0:
            rows = rows[:row_limit]
        total = self.self_cpu_time_total
        width = max([len("Name")] + [min(len(e.key), max_name_column_width) for e in rows])
        cols = ["Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg", "# of Calls"]
        shapes = any(getattr(e, "input_shapes", None) for e in self)  # torch: a column when any row has shapes
        shape_width = min(max(len(str(e.input_shapes)) for e in self) + 4, max_shapes_column_width) if shapes else 0
        rule = "-" * width + "  " + "  ".join("-" * 12 for _ in cols) + ("  " + "-" * shape_width if shapes else "")
        lines = [rule] if header is None else [header, rule]
        lines += [("%-*s  " % (width, "Name")) + "  ".join("%12s" % c for c in cols) +
                  ("  %*s" % (shape_width, "Input Shapes") if shapes else ""), rule]
        for e in rows:
            share = 100.0 * e.self_cpu_time_total / total if total else 0.0
            lines.append(("%-*s  " % (width, e.key[:max_name_column_width])) + "  ".join("%12s" % v for v in (
                "%.2f%%" % share, _us(e.self_cpu_time_total), "%.2f%%" % share, _us(e.cpu_time_total),
                _us(e.cpu_time), str(e.count))) +
                ("  %*s" % (shape_width, str(e.input_shapes)[:shape_width]) if shapes else ""))
        lines += [rule, "Self CPU time total: %s" % _us(total), ""]
        return "\n".join(lines)

    def __str__(self):
        return self.table()


_active = []  # the running profiles of this process, innermost last (record_function adds to it)


class profile:
    """torch.profiler.profile for CPU op times (see the module docstring for what is not recorded)."""

    def __init__(self, activities=None, schedule=None, on_trace_ready=None, record_shapes=False,
                 profile_memory=False, with_stack=False, with_flops=False, with_modules=False,
                 experimental_config=None, execution_trace_observer=None, acc_events=False, use_cuda=None):
        if activities is not None and ProfilerActivity.CUDA in activities:
            raise NotImplementedError("tessel.profiler: CUDA activity is not recorded (tessel's Python face has no "
                                      "CUDA device); use activities=[ProfilerActivity.CPU]")
        self._schedule, self._on_trace_ready = schedule, on_trace_ready
        self._record_shapes = bool(record_shapes)
        self._step = 0
        self._rows = {}       # op -> [calls, seconds], what key_averages() reports
        self._user_events = []  # (name, start_ns, duration_ns) of the current recording's record_function blocks
        self._events = []     # (category, key, start_ns, duration_ns) of the last finished recording
        self._tid = None      # the profiling thread's native id
        self._op = None       # the C++ profiler while recording

    def _recording(self):
        return self._schedule is None or self._schedule(self._step) in (ProfilerAction.RECORD,
                                                                          ProfilerAction.RECORD_AND_SAVE)

    def _begin(self):
        if self._op is None and self._recording():
            self._op = _C._OpProfiler()
            self._op.start(by_shape=self._record_shapes, record_events=True)
            self._user_events, self._tid = [], threading.get_native_id()

    def _recorded(self):
        """op / record_function name -> [calls, seconds] of the current recording."""
        rows = {}
        blocks = [(name, (1, dur / 1e9)) for name, _, dur in self._user_events]
        for key, (calls, seconds) in list(self._op.rows().items()) + blocks:
            row = rows.setdefault(key, [0, 0.0])
            row[0] += calls
            row[1] += seconds
        return rows

    def _recorded_events(self):
        ops = [("cpu_op", key, start, dur) for key, start, dur in self._op.events()]
        return sorted(ops + [("user_annotation", name, start, dur) for name, start, dur in self._user_events],
                      key=lambda e: (e[2], -e[3]))

    def _end(self):
        if self._op is None:
            return
        self._op.stop()
        self._rows, self._events, self._op = self._recorded(), self._recorded_events(), None

    def start(self):
        _active.append(self)
        self._begin()

    def stop(self):
        self._end()
        if self in _active:
            _active.remove(self)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        saving = self._schedule is not None and self._schedule(self._step) == ProfilerAction.RECORD_AND_SAVE
        self.stop()
        if saving and self._on_trace_ready is not None:
            self._on_trace_ready(self)
        return False

    def step(self):
        """Ends step self._step: a RECORD_AND_SAVE step closes its recording and calls on_trace_ready."""
        action = self._schedule(self._step) if self._schedule is not None else None
        if action == ProfilerAction.RECORD_AND_SAVE:
            self._end()
            if self._on_trace_ready is not None:
                self._on_trace_ready(self)
        self._step += 1
        if self in _active:
            if not self._recording():
                self._end()
            self._begin()

    @property
    def step_num(self):
        return self._step

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0):
        rows = self._recorded() if self._op is not None else self._rows  # still recording: so far
        grouped = {}  # (name, shapes if grouping by them) -> [calls, seconds, shapes]
        for key, (calls, seconds) in rows.items():
            name, shapes = _split_shapes(key) if self._record_shapes else (key, [])
            row = grouped.setdefault((name, str(shapes) if group_by_input_shape else ""), [0, 0.0, shapes])
            row[0] += calls
            row[1] += seconds
        return EventList(FunctionEventAvg(name, c, s * 1e6, shapes if group_by_input_shape else "")
                         for (name, _), (c, s, shapes) in grouped.items())

    def events(self):
        return self.key_averages()

    def export_chrome_trace(self, path):
        """torch's Chrome trace of the last recording (the current one while recording): one complete ("X")
        event per op call and record_function block, microseconds on the monotonic clock; a path ending in
        .gz is written gzip-compressed."""
        events = self._recorded_events() if self._op is not None else self._events
        pid, tid = os.getpid(), self._tid if self._tid is not None else threading.get_native_id()
        trace = []
        for cat, key, start, dur in events:
            name, shapes = _split_shapes(key) if self._record_shapes and cat == "cpu_op" else (key, None)
            event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": start / 1e3, "dur": dur / 1e3}
            if shapes is not None:
                event["args"] = {"Input Dims": shapes}
            trace.append(event)
        doc = {"schemaVersion": 1, "traceEvents": trace, "displayTimeUnit": "ms",
               "traceName": os.path.basename(str(path))}
        data = json.dumps(doc).encode()
        with (gzip.open(path, "wb") if str(path).endswith(".gz") else open(path, "wb")) as f:
            f.write(data)
        return path

    def export_stacks(self, path, metric="self_cpu_time_total"):
        raise NotImplementedError("tessel.profiler records no stacks: use key_averages().table()")


_INPUT = re.compile(r"\[([0-9, ]*)\] \w+|None")


def _split_shapes(key):
    """'matmul [2, 3] float32, [3, 4] float32' -> ('matmul', [[2, 3], [3, 4]]); a record_function row or an op
    without inputs has no shapes."""
    name, _, inputs = key.partition(" ")
    if not inputs:  # an op without inputs ("op " from the profiler) or a one-word record_function name
        return name, []
    if not inputs.startswith(("[", "None")):  # a record_function name with spaces
        return key, []
    shapes = [[int(d) for d in m.group(1).split(", ") if d] if m.group(1) is not None else []
              for m in _INPUT.finditer(inputs)]
    return name, shapes


class record_function:
    """A named block: its wall time becomes a row of the innermost running profile (also a decorator)."""

    def __init__(self, name, args=None):
        self.name = name

    def __enter__(self):
        self._t = time.perf_counter_ns()  # CLOCK_MONOTONIC, the op events' clock
        return self

    def __exit__(self, *exc):
        end = time.perf_counter_ns()
        if _active and _active[-1]._op is not None:
            _active[-1]._user_events.append((self.name, self._t, end - self._t))
        return False

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with record_function(self.name):
                return fn(*args, **kwargs)
        return wrapper


def tensorboard_trace_handler(dir_name, worker_name=None, use_gzip=False):
    """torch's on_trace_ready handler: each saved recording becomes dir_name/<worker>.<ns>.pt.trace.json[.gz]
    (worker: "<host>_<pid>" by default; ns: time.time_ns()), the files TensorBoard's profiler plugin reads."""
    def handler(prof):
        os.makedirs(dir_name, exist_ok=True)
        worker = worker_name or "%s_%d" % (socket.gethostname(), os.getpid())
        name = "%s.%d.pt.trace.json%s" % (worker, time.time_ns(), ".gz" if use_gzip else "")
        prof.export_chrome_trace(os.path.join(dir_name, name))
    return handler
