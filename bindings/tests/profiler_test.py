"""tessel.profiler (torch.profiler over core/dispatch/profiler.h): exact per-op call counts of a known
forward + backward, the table's sorting and limits, schedules with on_trace_ready, record_function rows,
and the errors for what is not recorded."""
import gzip
import json
import os

import pytest

import tessel
import tessel.nn.functional as F
from tessel.profiler import ProfilerActivity, profile, record_function, schedule


def conv_step():
    x = tessel.randn(2, 3, 8, 8, requires_grad=True)
    w = tessel.randn(4, 3, 3, 3, requires_grad=True)
    y = F.conv2d(x, w, padding=1)
    (y * y).sum().backward()


def test_profile_counts_each_kernel_of_a_forward_and_backward_exactly():
    conv_step()  # oneDNN primitives are created on the first call; the counts below do not depend on it
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        conv_step()
    rows = {e.key: e for e in prof.key_averages()}
    assert rows["convolution"].count == 1
    assert rows["convolution_backward_input"].count == 1
    assert rows["convolution_backward_weight"].count == 1
    assert rows["convolution"].cpu_time_total > 0
    assert rows["convolution"].self_cpu_time_total == rows["convolution"].cpu_time_total
    total = sum(e.self_cpu_time_total for e in prof.key_averages())
    assert prof.key_averages().self_cpu_time_total == pytest.approx(total)


def test_table_sorts_limits_and_names_torch_columns():
    with profile() as prof:
        a = tessel.randn(64, 64)
        for _ in range(3):
            a = a @ a
        a.sum()
    table = prof.key_averages().table(sort_by="count", row_limit=1)
    lines = table.splitlines()
    assert "Self CPU %" in lines[1] and "# of Calls" in lines[1]
    body = [ln for ln in lines[3:] if ln and not ln.startswith("-") and not ln.startswith("Self CPU time")]
    assert len(body) == 1 and body[0].split()[0] == "matmul" and body[0].split()[-1] == "3"
    assert lines[-1].startswith("Self CPU time total: ")
    with pytest.raises(AttributeError, match="no attribute 'bogus'"):
        prof.key_averages().table(sort_by="bogus")


def test_record_shapes_groups_rows_by_input_shapes_with_torchs_column():
    a, b, c = tessel.ones(2, 3), tessel.ones(3), tessel.ones(3, 4)
    with profile(record_shapes=True) as prof:
        a + b
        a @ c
        a @ c
        c.t() @ a.t()
        with record_function("user block"):
            pass
    by_shape = {(e.key, str(e.input_shapes)): e.count for e in prof.key_averages(group_by_input_shape=True)}
    assert by_shape[("add", "[[2, 3], [3]]")] == 1
    assert by_shape[("matmul", "[[2, 3], [3, 4]]")] == 2
    assert by_shape[("matmul", "[[4, 3], [3, 2]]")] == 1
    assert by_shape[("user block", "[]")] == 1
    plain = {e.key: e for e in prof.key_averages()}  # default: one row per op, shapes summed over
    assert plain["matmul"].count == 3 and plain["matmul"].input_shapes == ""
    table = prof.key_averages(group_by_input_shape=True).table(sort_by="count")
    header = table.splitlines()[1]
    assert header.rstrip().endswith("Input Shapes")
    assert any(line.split()[0] == "matmul" and line.rstrip().endswith("[[2, 3], [3, 4]]")
               for line in table.splitlines())
    assert "Input Shapes" not in prof.key_averages().table()
    with profile() as plain_prof:  # without record_shapes, grouping by shapes has nothing to split
        a @ c
    rows = plain_prof.key_averages(group_by_input_shape=True)
    assert [(e.key, e.count, e.input_shapes) for e in rows if e.key == "matmul"] == [("matmul", 1, [])]


def test_schedule_records_only_active_steps_and_hands_each_cycle_to_on_trace_ready():
    seen = []

    def ready(p):
        rows = {e.key: e.count for e in p.key_averages()}
        seen.append((p.step_num, rows.get("matmul", 0), rows.get("user block", 0)))
    a = tessel.randn(8, 8)
    with profile(schedule=schedule(wait=1, warmup=1, active=2, repeat=2), on_trace_ready=ready) as prof:
        for step in range(10):
            for _ in range(step + 1):  # step s runs s + 1 matmuls
                a @ a
            with record_function("user block"):
                a + a
            prof.step()
    # cycle 1 records steps 2 and 3 (3 + 4 matmuls), cycle 2 steps 6 and 7 (7 + 8); nothing after; the handler
    # sees torch's step_num, already past the saving step
    assert seen == [(4, 7, 2), (8, 15, 2)]
    assert schedule(wait=0, warmup=0, active=1, skip_first=2)(1) == tessel.profiler.ProfilerAction.NONE


def test_chrome_trace_holds_every_kernel_call_inside_its_record_function_block(tmp_path):
    a, c = tessel.ones(2, 3), tessel.ones(3, 4)
    with profile(record_shapes=True) as prof:
        with record_function("block"):
            a @ c
            a @ c
        a + a
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    doc = json.loads((tmp_path / "trace.json").read_text())
    events = doc["traceEvents"]
    ops = [e for e in events if e["cat"] == "cpu_op"]
    blocks = [e for e in events if e["cat"] == "user_annotation"]
    assert [e["name"] for e in ops] == ["matmul", "matmul", "add"]  # call order, one event per call
    assert [e["args"]["Input Dims"] for e in ops] == [[[2, 3], [3, 4]], [[2, 3], [3, 4]], [[2, 3], [2, 3]]]
    assert [e["name"] for e in blocks] == ["block"] and all(e["ph"] == "X" for e in events)
    assert len({(e["pid"], e["tid"]) for e in events}) == 1
    # one clock for both: the block's span holds both matmuls and ends before the add starts
    b = blocks[0]
    for m in ops[:2]:
        assert b["ts"] <= m["ts"] and m["ts"] + m["dur"] <= b["ts"] + b["dur"] + 1e-3
    assert ops[0]["ts"] + ops[0]["dur"] <= ops[1]["ts"] + 1e-3 and b["ts"] + b["dur"] <= ops[2]["ts"] + 1e-3
    # durations are the key_averages' times: the table and the trace tell the same story
    rows = {e.key: e for e in prof.key_averages()}
    assert sum(e["dur"] for e in ops if e["name"] == "matmul") == pytest.approx(rows["matmul"].cpu_time_total,
                                                                               rel=1e-3)
    # gzip by extension; tensorboard_trace_handler writes one file per saved cycle
    prof.export_chrome_trace(str(tmp_path / "trace.json.gz"))
    assert json.loads(gzip.open(tmp_path / "trace.json.gz").read())["traceEvents"] == events
    with profile(schedule=schedule(wait=0, warmup=0, active=1, repeat=2),
                 on_trace_ready=tessel.profiler.tensorboard_trace_handler(str(tmp_path / "tb"), "w0")) as p2:
        for _ in range(3):
            a @ c
            p2.step()
    files = sorted(os.listdir(tmp_path / "tb"))
    assert len(files) == 2 and all(f.startswith("w0.") and f.endswith(".pt.trace.json") for f in files)
    for f in files:
        trace = json.loads((tmp_path / "tb" / f).read_text())["traceEvents"]
        assert [e["name"] for e in trace if e["cat"] == "cpu_op"] == ["matmul"]


def test_what_is_not_recorded_says_so():
    with pytest.warns(UserWarning, match="only ProfilerActivity.CPU is recorded"):  # torch: quietly dropped
        profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    with pytest.raises(ValueError):
        schedule(wait=0, warmup=0, active=0)


if __name__ == "__main__":
    import sys
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
