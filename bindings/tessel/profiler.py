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

What torch records and tessel does not: no memory or stacks (profile_memory adds torch's "CPU Mem" columns, all
0 B; with_stack is accepted and ignored), no CUDA activity (other activities than CPU are dropped with a
warning), no Python function events. An op's time is its kernel's (self and total are equal, as for torch's
leaf aten ops); record_function blocks (and, with a schedule, torch's "ProfilerStep#N" block around each step)
add rows of their own wall time.
"""
import enum
import gzip
import json
import os
import re
import socket
import threading
import time
import warnings

from . import _C

__all__ = ["profile", "record_function", "ProfilerActivity", "ProfilerAction", "schedule", "EventList",
           "FunctionEventAvg", "FunctionEvent", "tensorboard_trace_handler", "supported_activities"]


class ProfilerActivity(enum.Enum):
    CPU = 0
    XPU = 1
    MTIA = 2
    CUDA = 3
    HPU = 4
    PrivateUse1 = 5

    def __str__(self):
        return "ProfilerActivity." + self.name


class DeviceType(enum.Enum):
    CPU = 0
    CUDA = 1


def supported_activities():
    """torch.profiler.supported_activities: tessel records CPU ops only."""
    return {ProfilerActivity.CPU}


class ProfilerAction(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def schedule(*, wait, warmup, active, repeat=0, skip_first=0, skip_first_wait=0):
    """torch.profiler.schedule: the action for each step number (skip_first, then cycles of wait,
    warmup and active steps; the last active step of a cycle saves; repeat=0 cycles forever;
    skip_first_wait != 0 skips the first cycle's wait)."""
    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise ValueError("Invalid profiler schedule arguments")

    def action(step):
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        if skip_first_wait != 0:
            step += wait
        cycle = wait + warmup + active
        if repeat > 0 and step / cycle >= repeat:
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

    is_legacy = is_async = False
    use_device = None
    node_id = 0
    device_type = DeviceType.CPU

    def __init__(self, key, count, total_us, input_shapes="", user_annotation=False):
        self.key, self.count, self.input_shapes = key, count, input_shapes
        self.cpu_time_total = self.self_cpu_time_total = total_us
        self.device_time_total = self.self_device_time_total = 0.0
        self.cuda_time_total = self.self_cuda_time_total = 0.0
        self.cpu_memory_usage = self.self_cpu_memory_usage = 0  # tessel's op profiler records no memory
        self.device_memory_usage = self.self_device_memory_usage = 0
        self.flops = 0
        self.stack = []
        self.is_user_annotation = user_annotation

    @property
    def cpu_time(self):
        return self.cpu_time_total / self.count if self.count else 0.0

    @property
    def device_time(self):
        return self.device_time_total / self.count if self.count else 0.0

    cpu_time_str = property(lambda self: _us(self.cpu_time))
    cpu_time_total_str = property(lambda self: _us(self.cpu_time_total))
    self_cpu_time_total_str = property(lambda self: _us(self.self_cpu_time_total))

    def __repr__(self):
        return "<FunctionEventAvg key=%s self_cpu_time=%.3fus cpu_time=%.3fus count=%d>" % (
            self.key, self.self_cpu_time_total, self.cpu_time, self.count)


class FunctionEvent:
    """One recorded op call or record_function block (prof.events()), times in microseconds."""
    is_legacy = is_async = False
    device_type = DeviceType.CPU
    count = 1

    def __init__(self, id, name, start_us, end_us, thread, input_shapes=None, user_annotation=False):
        self.id, self.name, self.key, self.thread = id, name, name, thread
        self.time_range = Interval(start_us, end_us)
        self.input_shapes = input_shapes if input_shapes is not None else []
        self.cpu_children, self.cpu_parent = [], None
        self.cpu_memory_usage = self.self_cpu_memory_usage = 0
        self.device_time_total = self.self_device_time_total = 0.0
        self.flops = 0
        self.is_user_annotation = user_annotation

    @property
    def cpu_time_total(self):
        return self.time_range.elapsed_us()

    @property
    def self_cpu_time_total(self):
        return self.cpu_time_total - sum(c.cpu_time_total for c in self.cpu_children)

    def __repr__(self):
        return "<FunctionEvent id=%d name=%s cpu_time=%s>" % (self.id, self.name, _us(self.cpu_time_total))


class Interval:
    def __init__(self, start, end):
        self.start, self.end = start, end

    def elapsed_us(self):
        return self.end - self.start


def _us(us):
    return "%.3fms" % (us / 1e3) if us >= 1e3 else "%.3fus" % us


def _mem(nbytes):
    """torch's _format_memory."""
    for unit, size in (("GB", 1024 ** 3), ("MB", 1024 ** 2), ("KB", 1024)):
        if abs(nbytes) >= size:
            return "%.2f %s" % (nbytes / size, unit)
    return "%d B" % nbytes


class EventList(list):
    def __init__(self, *args, profile_memory=False):
        super().__init__(*args)
        self._profile_memory = profile_memory

    @property
    def self_cpu_time_total(self):
        return sum(e.self_cpu_time_total for e in self)

    def total_average(self):
        """torch's: one FunctionEventAvg with key "Total" summing every row."""
        total = FunctionEventAvg("Total", sum(e.count for e in self), 0.0)
        total.cpu_time_total = sum(e.cpu_time_total for e in self)
        total.self_cpu_time_total = self.self_cpu_time_total
        total.cpu_memory_usage = sum(e.cpu_memory_usage for e in self)
        total.self_cpu_memory_usage = sum(e.self_cpu_memory_usage for e in self)
        return total

    def export_chrome_trace(self, path):
        raise NotImplementedError("tessel.profiler: export the trace with prof.export_chrome_trace(path)")

    def table(self, sort_by=None, row_limit=100, max_name_column_width=55, max_shapes_column_width=80, header=None,
              **_):
        """torch's table: Name, Self CPU %, Self CPU, CPU total %, CPU total, CPU time avg, # of Calls."""
        if sort_by is not None and not hasattr(FunctionEventAvg("", 0, 0.0), sort_by):
            raise AttributeError("'FunctionEventAvg' object has no attribute '%s'" % sort_by)
        rows = sorted(self, key=lambda e: getattr(e, sort_by), reverse=True) if sort_by else list(self)
        if row_limit is not None and row_limit >= 0:
            rows = rows[:row_limit]
        total = self.self_cpu_time_total
        width = max([len("Name")] + [min(len(e.key), max_name_column_width) for e in rows])
        mem = self._profile_memory
        cols = ["Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"] + (
            ["CPU Mem", "Self CPU Mem"] if mem else []) + ["# of Calls"]
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
                _us(e.cpu_time)) + ((_mem(e.cpu_memory_usage), _mem(e.self_cpu_memory_usage)) if mem else ()) +
                (str(e.count),)) +
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
                 experimental_config=None, execution_trace_observer=None, acc_events=False, use_cuda=None,
                 custom_trace_id_callback=None):
        if activities is not None and set(activities) - {ProfilerActivity.CPU}:
            # torch records what the machine has; tessel's Python face has only the CPU
            warnings.warn("tessel.profiler: only ProfilerActivity.CPU is recorded; the other activities are "
                          "ignored", stacklevel=2)
        self._record_steps = schedule is not None
        self._schedule = schedule if schedule is not None else (lambda _: ProfilerAction.RECORD)
        self._on_trace_ready = on_trace_ready
        self._record_shapes, self._profile_memory = bool(record_shapes), bool(profile_memory)
        self.step_num = 0
        self._action = self._schedule(0)
        self._step_rec = None  # the running record_function("ProfilerStep#N") with a schedule
        self._rows = {}       # op -> [calls, seconds], what key_averages() reports
        self._user_events = []  # (name, start_ns, duration_ns) of the current recording's record_function blocks
        self._events = []     # (category, key, start_ns, duration_ns) of the last finished recording
        self._tid = None      # the profiling thread's native id
        self._op = None       # the C++ profiler while recording

    def _begin(self):
        if self._op is None:
            self._op = _C._OpProfiler()
            self._op.start(by_shape=self._record_shapes, record_events=True)
            self._user_events, self._tid = [], threading.get_native_id()

    def _recorded(self):
        """op / record_function name -> [calls, seconds] of the current recording."""
        rows = {}
        blocks = [(_wildcard(name), (1, dur / 1e9)) for name, _, dur in self._user_events]
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

    def _transit(self, prev, cur):
        """torch's action_map: (previous action, current action; None when stopping) -> stop the recording,
        call on_trace_ready, start a recording (WARMUP then stop: an empty recording)."""
        A = ProfilerAction
        recording = (A.RECORD, A.RECORD_AND_SAVE)
        if prev == A.RECORD_AND_SAVE or (prev == A.RECORD and cur not in recording):
            self._end()
            if (prev == A.RECORD_AND_SAVE or cur is None) and self._on_trace_ready is not None:
                self._on_trace_ready(self)
        if prev == A.WARMUP and cur in (A.NONE, None):
            self._begin()
            self._end()
        if cur in recording and prev != A.RECORD:
            self._begin()

    def _step_block(self):
        if self._record_steps:
            self._step_rec = record_function("ProfilerStep#%d" % self.step_num)
            self._step_rec.__enter__()

    def _close_step_block(self):
        if self._step_rec is not None:
            self._step_rec.__exit__(None, None, None)
            self._step_rec = None

    def start(self):
        _active.append(self)
        self._transit(ProfilerAction.NONE, self._action)
        self._step_block()

    def stop(self):
        self._close_step_block()
        self._transit(self._action, None)
        self._action = self._schedule(self.step_num)
        if self in _active:
            _active.remove(self)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def step(self):
        """torch's: step_num += 1, then the schedule's transition (a RECORD_AND_SAVE step closes its recording
        and calls on_trace_ready); with a schedule each step is a record_function("ProfilerStep#N") block."""
        self._close_step_block()
        prev = self._action
        self.step_num += 1
        self._action = self._schedule(self.step_num)
        self._transit(prev, self._action)
        self._step_block()

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0):
        rows = self._recorded() if self._op is not None else self._rows  # still recording: so far
        grouped = {}  # (name, shapes if grouping by them) -> [calls, seconds, shapes]
        for key, (calls, seconds) in rows.items():
            name, shapes = _split_shapes(key) if self._record_shapes else (key, [])
            row = grouped.setdefault((name, str(shapes) if group_by_input_shape else ""), [0, 0.0, shapes])
            row[0] += calls
            row[1] += seconds
        return EventList((FunctionEventAvg(name, c, s * 1e6, shapes if group_by_input_shape else "")
                          for (name, _), (c, s, shapes) in grouped.items()), profile_memory=self._profile_memory)

    def events(self):
        """torch's: an EventList of FunctionEvent, one per op call and record_function block."""
        events = self._recorded_events() if self._op is not None else self._events
        tid = self._tid if self._tid is not None else threading.get_native_id()
        out = EventList(profile_memory=self._profile_memory)
        for i, (cat, key, start, dur) in enumerate(events):
            name, shapes = _split_shapes(key) if self._record_shapes and cat == "cpu_op" else (key, [])
            out.append(FunctionEvent(i, name, start / 1e3, (start + dur) / 1e3, tid, shapes,
                                     user_annotation=cat == "user_annotation"))
        stack = []  # nesting by time ranges: events are sorted by start, longer first
        for e in out:
            while stack and e.time_range.start >= stack[-1].time_range.end:
                stack.pop()
            if stack:
                e.cpu_parent = stack[-1]
                stack[-1].cpu_children.append(e)
            stack.append(e)
        return out

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


def _wildcard(name):
    """torch's key for a step block: ProfilerStep#N -> ProfilerStep*."""
    return "ProfilerStep*" if name.startswith("ProfilerStep#") else name


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


class _LegacyProfile:
    """torch.autograd.profiler.profile (the legacy API): profile(enabled=True, *, use_device=None,
    record_shapes=False, ...); enabled=False is a no-op whose `with` target is None, as torch's."""

    def __init__(self, enabled=True, *, use_device=None, record_shapes=False, with_flops=False, profile_memory=False,
                 with_stack=False, with_modules=False, use_kineto=False, use_cpu=True, experimental_config=None,
                 acc_events=False, custom_trace_id_callback=None, post_processing_timeout_s=None,
                 activity_filters=None):
        self.enabled = enabled
        self._prof = profile(record_shapes=record_shapes, profile_memory=profile_memory) if enabled else None

    def __enter__(self):
        if not self.enabled:
            return None
        self._prof.start()
        return self

    def __exit__(self, *exc):
        if self.enabled:
            self._prof.stop()
        return False

    @property
    def function_events(self):
        return self._prof.events()

    @property
    def self_cpu_time_total(self):
        return self.function_events.self_cpu_time_total

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0):
        return self._prof.key_averages(group_by_input_shape, group_by_stack_n)

    def table(self, *args, **kwargs):
        return self.key_averages().table(*args, **kwargs)

    def export_chrome_trace(self, path):
        return self._prof.export_chrome_trace(path)

    def total_average(self):
        return self.key_averages().total_average()

    def __str__(self):
        return self.table()


class emit_nvtx:
    """torch.autograd.profiler.emit_nvtx: tessel has no NVTX, a no-op context manager."""

    def __init__(self, enabled=True, record_shapes=False):
        self.enabled = enabled

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


emit_itt = emit_nvtx


def tensorboard_trace_handler(dir_name, worker_name=None, use_gzip=False):
    """torch's on_trace_ready handler: each saved recording becomes dir_name/<worker>.<ns>.pt.trace.json[.gz]
    (worker: "<host>_<pid>" by default; ns: time.time_ns()), the files TensorBoard's profiler plugin reads."""
    def handler(prof):
        os.makedirs(dir_name, exist_ok=True)
        worker = worker_name or "%s_%d" % (socket.gethostname(), os.getpid())
        name = "%s.%d.pt.trace.json%s" % (worker, time.time_ns(), ".gz" if use_gzip else "")
        prof.export_chrome_trace(os.path.join(dir_name, name))
    return handler
