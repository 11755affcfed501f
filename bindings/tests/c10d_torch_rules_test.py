"""torch.distributed's c10d rules as torch 2.15 (gloo, 2 ranks) follows them, from a side-by-side sweep; the
expected values and messages are what torch printed. async_op=True returns at once for every collective (the list
forms, gather, scatter, reduce, barrier and strided tensors ran to the end, so a torch-valid program that reaches
another group first deadlocked) and returns a dist.Work; an isend deferred on one group goes out before this thread
blocks on another; torch's keywords (barrier timeout=, init_process_group _ranks= / enable_reconfigure=, new_group
sort_ranks= / device_id=, weights_only= and use_batch= of the object collectives, split_group backend=) and
split_group's listed order; torch's errors for a missing launcher, a wrong argument type, a list on the wrong rank
(scatter, gather_object, scatter_object_list), a rank outside the group, group None; Work.source_rank() and torch's
other Work methods; funcol's rank-list and group-name groups, bitwise ops, coalesced forms, permute_tensor and
broadcast's gradient."""
import datetime
import os
import pickle
import re
import sys
import warnings

import pytest

import tessel
import tessel.distributed as dist
import tessel.distributed._functional_collectives as funcol

TIMEOUT = datetime.timedelta(seconds=10)  # a regression that deadlocks fails within this, not hangs the suite


def on_two_ranks(fn, **init):
    """{rank: fn(rank)} from 2 rank threads, each inside init_process_group (a bounded timeout) / destroy."""
    out = {}

    def rank_fn(world):
        dist.init_process_group(timeout=TIMEOUT, **init)
        try:
            out[int(world.rank)] = fn(int(world.rank))
        finally:
            dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    return out


def warned(fn):
    """(on_two_ranks(fn), the messages of the warnings both ranks raised): recorded here, as the rank threads'
    own warning contexts would record each other's (warnings' state is the process's)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = on_two_ranks(fn)
    return out, [(w.category, str(w.message)) for w in caught]


def _values(x):
    if x is None:
        return None
    return [t.tolist() for t in x] if isinstance(x, list) else x.tolist()


def test_async_collectives_return_at_once_and_do_their_copies_on_wait():
    # rank 0 starts the collective async and runs an all_reduce on another group before waiting; rank 1 runs the
    # all_reduce first: torch-valid. The composed collectives ran to the end when called, so rank 0 waited for
    # rank 1, which waited in the all_reduce: a deadlock.
    def run(r):
        g = dist.new_group([0, 1])
        x = tessel.tensor([r + 1.0])
        base = tessel.arange(4.0) + r
        cases = {
            "all_gather": ([tessel.zeros(1), tessel.zeros(1)], lambda o, a: dist.all_gather(o, x, async_op=a)),
            "reduce": (x.clone(), lambda o, a: dist.reduce(o, dst=0, async_op=a)),
            "all_to_all": ([tessel.zeros(1), tessel.zeros(1)],
                           lambda o, a: dist.all_to_all(o, [tessel.tensor([r * 10.0]), tessel.tensor([r * 10.0 + 1])],
                                                        async_op=a)),
            "reduce_scatter": (tessel.zeros(1), lambda o, a: dist.reduce_scatter(
                o, [tessel.tensor([r * 10.0]), tessel.tensor([r * 10.0 + 1])], async_op=a)),
            "barrier": (None, lambda o, a: dist.barrier(async_op=a)),
            "gather": ([tessel.zeros(1), tessel.zeros(1)] if r == 0 else None,
                       lambda o, a: dist.gather(x, o, dst=0, async_op=a)),
            "scatter": (tessel.zeros(1), lambda o, a: dist.scatter(
                o, [tessel.tensor([5.0]), tessel.tensor([6.0])] if r == 0 else None, src=0, async_op=a)),
            "strided all_reduce": (base[::2], lambda o, a: dist.all_reduce(o, async_op=a)),
        }
        got = {}
        for name, (out, call) in cases.items():
            b = tessel.tensor([r + 10.0])
            if r == 0:
                w = call(out, True)
                dist.all_reduce(b, group=g)
                assert isinstance(w, dist.Work), name
                w.wait()
                future = w.get_future().wait()
            else:
                dist.all_reduce(b, group=g)
                assert call(out, False) is None
                future = None
            got[name] = (b.tolist(), _values(out), _values(future))
        got["strided base"] = base.tolist()
        return got

    out = on_two_ranks(run)
    for r in (0, 1):
        assert all(v[0] == [21.0] for k, v in out[r].items() if k != "strided base")
    r0, r1 = out[0], out[1]
    assert r0["all_gather"][1:] == ([[1.0], [2.0]], [[1.0], [2.0]]) and r1["all_gather"][1] == [[1.0], [2.0]]
    assert r0["reduce"][1:] == ([3.0], [[3.0]]) and r1["reduce"][1] == [2.0]
    assert r0["all_to_all"][1:] == ([[0.0], [10.0]], [[0.0], [10.0]]) and r1["all_to_all"][1] == [[1.0], [11.0]]
    assert r0["reduce_scatter"][1] == [10.0] and r1["reduce_scatter"][1] == [12.0]
    assert r0["barrier"][2] == []
    assert r0["gather"][1:] == ([[1.0], [2.0]], [[1.0], [2.0]]) and r1["gather"][1] is None
    assert r0["scatter"][1:] == ([5.0], [[5.0]]) and r1["scatter"][1] == [6.0]
    # the strided slice's elements summed in place, the others left (torch's gloo wrote elsewhere in the base)
    assert out[0]["strided base"] == [1.0, 1.0, 5.0, 3.0] and out[1]["strided base"] == [1.0, 2.0, 5.0, 4.0]


def test_a_deferred_isend_goes_out_before_this_thread_blocks_on_another_group():
    # rank 0: w = isend(a, 1); recv(b, 1, group=g2); w.wait() / rank 1: recv(a, 0); send(b, 0, group=g2).
    # The isend waited for rank 0's next call on the default group, and rank 1 for the isend: a timeout.
    def run(r):
        g2 = dist.new_group([0, 1])
        if r == 0:
            w = dist.isend(tessel.tensor([7.0]), 1)
            b = tessel.zeros(1)
            dist.recv(b, 1, group=g2)
            w.wait()
            return b.tolist()
        a = tessel.zeros(1)
        dist.recv(a, 0)
        dist.send(tessel.tensor([8.0]), 0, group=g2)
        return a.tolist()

    assert on_two_ranks(run) == {0: [8.0], 1: [7.0]}


def test_barrier_timeout_and_init_process_group_keywords():
    def run(r):
        got = [dist.barrier(timeout=datetime.timedelta(seconds=5))]
        w = dist.barrier(async_op=True, timeout=datetime.timedelta(seconds=5))
        got += [w.wait(), isinstance(w, dist.Work), dist.get_world_size()]
        return got

    assert on_two_ranks(run, _ranks=[0, 1], enable_reconfigure=False) == {0: [None, True, True, 2],
                                                                          1: [None, True, True, 2]}


def test_init_process_group_without_a_launcher_is_torchs_value_error(monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ValueError, match=re.escape("Error initializing torch.distributed using env:// rendezvous: "
                                                   "environment variable RANK expected, but not set")) as info:
        dist.init_process_group()
    assert isinstance(info.value, RuntimeError)  # (tessel's error classes are both)
    with pytest.raises(ValueError, match=re.escape("Error initializing torch.distributed using env:// rendezvous: "
                                                   "environment variable MASTER_ADDR expected, but not set")):
        dist.init_process_group("gloo", rank=0, world_size=2)
    assert not dist.is_initialized() and "RANK" not in os.environ


def test_work_source_rank_and_torchs_other_work_methods():
    def run(r):
        got = []
        if r == 0:
            t = tessel.zeros(1)
            w = dist.irecv(t)  # from any rank
            w.wait()
            got += [t.tolist(), w.source_rank(), w._source_rank()]
            w = dist.irecv(t, src=1)
            w.wait()
            got.append(w.source_rank())
        else:
            dist.send(tessel.tensor([7.0]), 0)
            dist.send(tessel.tensor([9.0]), 0)
        w = dist.all_reduce(tessel.ones(1), async_op=True)
        got.append(w.synchronize())
        w.wait()
        got += [dist.Work.unbox(w.boxed()) is w, w.get_future_result().wait(), w.block_current_stream()]
        with pytest.raises(RuntimeError, match=re.escape("sourceRank() may only be called on work objects that "
                                                         "correspond to a recv or recv-from-any call.")):
            w.source_rank()
        return got

    out = on_two_ranks(run)
    assert out[0] == [[7.0], 1, 1, 1, None, True, 0, None]
    assert out[1] == [None, True, 0, None]


def test_a_scatter_list_on_the_wrong_rank_is_torchs_value_error_after_the_exchange():
    # torch raises on that rank before any exchange (its peer then waits out the timeout); tessel raises after it
    def run(r):
        got = []
        t = tessel.zeros(2)
        parts = [tessel.tensor([1.0, 2.0]), tessel.tensor([3.0, 4.0])]
        if r == 1:
            with pytest.raises(ValueError, match="^Argument ``scatter_list`` must NOT be specified on non-source "
                                                 "ranks.$"):
                dist.scatter(t, parts, src=0)
        else:
            dist.scatter(t, parts, src=0)
        got.append(t.tolist())
        with pytest.raises(ValueError if r == 0 else RuntimeError) as info:
            dist.scatter(t, None, src=0)
        got.append(str(info.value))
        return got

    out = on_two_ranks(run)
    assert out[0] == [[1.0, 2.0], "Argument ``scatter_list`` must be specified on source rank."]
    assert out[1] == [[0.0, 0.0], "scatter: the source rank 0's scatter_list was refused (its error names why)"]


def test_a_rank_outside_the_group_and_group_none_get_torchs_errors():
    def run(r):
        g = dist.new_group([0])
        t = tessel.ones(1)
        errors = []
        calls = [lambda: dist.get_group_rank(None, 1), lambda: dist.get_global_rank(None, 1)]
        if r == 0:
            calls.append(lambda: dist.send(t, 0, group=g))  # the only rank of the group: itself
        else:
            calls += [lambda: dist.get_backend(g), lambda: dist.send(t, 0, group=g)]
        for call in calls:
            with pytest.raises(ValueError) as info:
                call()
            errors.append(str(info.value))
        if r == 1:
            errors.append(dist.recv(t, 0, group=g))
        return errors

    out, caught = warned(run)
    assert caught == [(UserWarning, "Running irecv on global rank 1 which does not belong to the given group.")]
    none = ["Group None is not registered, please create group with torch.distributed.new_group API"] * 2
    assert out[0] == none + ["Invalid destination rank: destination rank should not be the same as the rank of the "
                             "current process."]
    assert out[1] == none + ["Invalid process group specified"] * 2 + [-1]


def test_wrong_argument_types_are_torchs_type_errors():
    def run(r):
        t = tessel.ones(1)
        calls = [lambda: dist.all_reduce([t]), lambda: dist.all_gather([1, 2], t), lambda: dist.broadcast("x", 0),
                 lambda: dist.send([t], 1 - r), lambda: dist.all_gather_into_tensor(None, t),
                 lambda: dist.all_gather(t, t), lambda: dist.reduce_scatter(t, t), lambda: dist.all_to_all(t, [t, t])]
        errors = []
        for call in calls:
            with pytest.raises(TypeError) as info:
                call()
            errors.append(str(info.value))
        return errors

    indent = "\n             but got "
    for errors in on_two_ranks(run).values():
        assert errors[:5] == [
            "Invalid function argument. Expected parameter `tensor` of type torch.Tensor" + indent +
            "<class 'list'> instead.",
            "Invalid function argument. Expected parameter `tensor_list` of type List[torch.Tensor]" + indent +
            "<class 'list'> with elements of type [<class 'int'>, <class 'int'>].",
            "Invalid function argument. Expected parameter `tensor` of type torch.Tensor" + indent +
            "<class 'str'> instead.",
            "Invalid function argument. Expected parameter `tensor` of type torch.Tensor" + indent +
            "<class 'list'> instead.",
            "Invalid function argument. Expected parameter `output_tensor` of type torch.Tensor" + indent +
            "<class 'NoneType'> instead."]
        # torch names its own tensor class here ("<class 'torch.Tensor'>")
        for error, name in zip(errors[5:8], ("tensor_list", "input_list", "output_tensor_list")):
            assert error.startswith("Invalid function argument. Expected parameter `%s` of type List[torch.Tensor]"
                                    % name + indent + "<class '") and error.endswith("'> instead."), error


def test_object_collectives_take_torchs_keywords_and_raise_its_errors():
    def run(r):
        got = []
        objs = [None, None]
        dist.all_gather_object(objs, {"a": r, "t": tessel.tensor([r])}, weights_only=True)
        got.append([(o["a"], o["t"].tolist()) for o in objs])
        box = [{"x": 1}] if r == 0 else [None]
        dist.broadcast_object_list(box, src=0, weights_only=True)
        mine = [None]
        dist.scatter_object_list(mine, [1, 2] if r == 0 else None, src=0, weights_only=True)
        gathered = [None, None] if r == 0 else None
        dist.gather_object({"r": dist.get_rank()}, gathered, dst=0, weights_only=True)
        got += [box, mine, gathered]
        with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
            import fractions
            dist.all_gather_object(objs, fractions.Fraction(1, 2), weights_only=True)  # not a weights-only class
        if r == 0:
            dist.send_object_list([1, "a"], dst=1, use_batch=True, weights_only=False)
        else:
            received = [None, None]
            dist.recv_object_list(received, src=0, use_batch=True, weights_only=False)
            got.append(received)
        errors = []
        with pytest.raises(ValueError) as info:
            dist.scatter_object_list([], [1, 2], src=0)
        errors.append(str(info.value))
        if r == 0:
            with pytest.raises(ValueError) as info:
                dist.scatter_object_list([None], None, src=0)
            errors.append(str(info.value))
            with pytest.raises(ValueError) as info:  # after the exchange: rank 1 is not left waiting
                dist.gather_object("a", None, dst=0)
            errors.append(str(info.value))
        else:
            with pytest.raises(ValueError) as info:
                dist.gather_object("b", [None, None], dst=0)
            errors.append(str(info.value))
        return got, errors

    out = on_two_ranks(run)
    both = [[(0, [0]), (1, [1])], [{"x": 1}]]
    assert out[0][0] == both + [[1], [{"r": 0}, {"r": 1}]]
    assert out[1][0] == both + [[2], None, [1, "a"]]
    assert out[0][1] == ["Expected argument scatter_object_output_list to be a list of size at least 1.",
                         "source rank must provide non-None scatter_object_input_list",
                         "Argument ``gather_list`` must be specified on destination rank."]
    assert out[1][1] == ["Expected argument scatter_object_output_list to be a list of size at least 1.",
                         "Argument ``gather_list`` must NOT be specified on non-destination ranks."]


def test_new_group_without_sorting_and_split_group_keep_the_listed_order():
    def run(r):
        g = dist.new_group([1, 0], sort_ranks=False, device_id=None)
        t = tessel.tensor([r + 1.0])
        dist.broadcast(t, group_src=0, group=g)  # group rank 0 is global rank 1
        sorted_group = dist.new_group([1, 0])
        split = dist.split_group(split_ranks=[[1, 0]])
        same = dist.split_group(split_ranks=[[0, 1]], backend="gloo")
        return (dist.get_rank(g), dist.get_process_group_ranks(g), t.tolist(), dist.get_rank(sorted_group),
                dist.get_process_group_ranks(sorted_group), dist.get_rank(split), dist.get_process_group_ranks(split),
                dist.get_rank(same))

    assert on_two_ranks(run) == {0: (1, [1, 0], [2.0], 0, [0, 1], 1, [1, 0], 0),
                                 1: (0, [1, 0], [2.0], 1, [0, 1], 0, [1, 0], 1)}


def test_functional_collectives_take_a_rank_list_or_a_group_name():
    def run(r):
        g = dist.new_group([0, 1])
        got = []
        for form in (g.group_name, dist.group.WORLD.group_name):
            got.append(funcol.all_reduce(tessel.tensor([r + 1.0]), "sum", form).tolist())
        for ranks in ([0, 1], [1, 0]):
            got.append(funcol.all_reduce(tessel.tensor([r + 1.0]), "sum", ranks).tolist())
        with pytest.raises(RuntimeError) as bad_name:
            funcol.all_reduce(tessel.ones(1), "sum", "nope")
        with pytest.raises(ValueError) as bad_list:
            funcol.all_reduce(tessel.ones(1), "sum", [0])
        return got, str(bad_name.value), str(bad_list.value)

    out, caught = warned(run)
    for got, bad_name, bad_list in out.values():
        assert got == [[3.0]] * 4
        assert bad_name == "Could not resolve the process group registered under the name nope"
        assert bad_list == ""
    assert caught == [(FutureWarning, "The combination of ranks + tag as process group identifier has been deprecated. "
                                      "Please switch to using ProcessGroup, DeviceMesh, or group name instead.")] * 6


def test_functional_collectives_bitwise_ops_broadcast_gradient_and_coalesced_forms():
    def run(r):
        w = dist.group.WORLD
        x = tessel.tensor([6 + r, 3 * r])
        got = [funcol.all_reduce(x, op, w).tolist() for op in ("band", "bor", "bxor", "BAND")]
        got.append(funcol.reduce_scatter_single(tessel.tensor([1 + r, 4 * r]), "bor", 0, w).tolist())
        errors = []
        for op in ("foo", "prod"):
            with pytest.raises(RuntimeError) as info:
                funcol.all_reduce(x, op, w)
            errors.append(str(info.value))
        with pytest.raises(RuntimeError) as info:
            funcol.all_gather_single(tessel.tensor(r + 1.0), 0, w)
        errors.append(str(info.value))
        src = tessel.ones(2, requires_grad=True)
        y = funcol.wait_tensor(funcol.broadcast(src, 0, w))
        (y * 1).sum().backward()
        got.append((y.requires_grad, y.grad_fn is not None, src.grad.tolist()))
        a, b = tessel.tensor([r + 1.0]), tessel.tensor([[r * 10.0, 1.0]])
        got.append(_values(funcol.all_reduce_coalesced([a, b], "sum", w)))
        got.append(_values(funcol.all_gather_into_tensor_coalesced([a, b], w)))
        got.append(_values(funcol.all_gather_single_coalesced([a, b], w)))
        got.append(_values(funcol.reduce_scatter_tensor_coalesced(
            [tessel.tensor([1.0, 2.0]) + r, tessel.arange(4.0).reshape(2, 2) * (r + 1)], "sum", [0, 0], w)))
        got.append(funcol.permute_tensor(tessel.tensor([r * 1.0, r + 5.0]), [1, 0], w).tolist())
        return got, errors

    out, caught = warned(run)
    messages = sorted(set(caught), key=str)
    assert [m[0] for m in messages] == [FutureWarning, FutureWarning, UserWarning], messages
    assert all(m[1].startswith(start) for m, start in zip(messages, (
        "`torch.distributed._functional_collectives.all_gather_into_tensor_coalesced` is deprecated. Please use "
        "`torch.distributed._functional_collectives.all_gather_single_coalesced` instead.",
        "`torch.distributed._functional_collectives.reduce_scatter_tensor_coalesced` is deprecated. Please use "
        "`torch.distributed._functional_collectives.reduce_scatter_single_coalesced` instead.",
        "_c10d_functional::broadcast: an autograd kernel was not registered to the Autograd key(s) but we are "
        "trying to backprop through it. This may lead to silently incorrect behavior."))), messages
    for r, (got, errors) in out.items():
        assert got[:4] == [[6, 0], [7, 3], [1, 3], [6, 0]] and got[4] == ([3] if r == 0 else [4])
        assert errors == ["Unrecognized reduce_op: foo", "Unrecognized reduce_op: prod",
                          "ProcessGroupGloo::allgather_coalesced: invalid size of output tensor at index 0 "
                          "(expected length (), got (1))"]
        assert got[5] == (True, True, [1.0, 1.0])  # torch's: the gradient passes through (with its warning)
        assert got[6] == [[3.0], [[10.0, 2.0]]]
        assert got[7] == got[8] == [[1.0, 2.0], [[0.0, 1.0], [10.0, 1.0]]]
        assert got[9] == ([[3.0], [[0.0, 3.0]]] if r == 0 else [[5.0], [[6.0, 9.0]]])
        assert got[10] == ([1.0, 6.0] if r == 0 else [0.0, 5.0])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
