"""torch.distributed's c10d API as torch 2.15's gloo, from a side-by-side sweep (2 ranks): list collectives refuse
list entries of another shape or dtype (one with as many elements was reshaped, one of another dtype cast:
silently); strided tensors take part (they were refused, funcol's own outputs gathered along dim 1 among them); async
handles of every collective have result(), get_future(), is_success() and exception(); a second
init_process_group raises; DeviceMesh hashes (equal meshes alike) and get_group of an unknown dim is a KeyError."""
import sys

import pytest

import tessel
import tessel.distributed as dist
from tessel.distributed.device_mesh import init_device_mesh
from ranks_testing import on_ranks


def on_two_ranks(fn):
    return on_ranks(2, fn)


def test_list_collectives_refuse_entries_of_another_shape_or_dtype():
    def run(r):
        x = tessel.arange(6.0).reshape(2, 3) + 10 * r
        errors = []
        for call in (lambda: dist.all_gather([tessel.zeros(2, 3, dtype=tessel.float64)] * 2, x),
                     lambda: dist.reduce_scatter(tessel.zeros(2, 3), [x.reshape(3, 2)] * 2)):
            with pytest.raises(ValueError) as info:
                call()
            assert isinstance(info.value, RuntimeError)  # torch raises ValueError for a dtype, RuntimeError for a shape
            errors.append(str(info.value))
        out = [tessel.zeros(2, 3) for _ in range(2)]
        dist.all_gather(out, x)  # the right shapes still gather
        return errors, [o.tolist() for o in out]

    for errors, gathered in on_two_ranks(run).values():
        assert errors == ["all_gather: tensor_list[0] is float64 [2, 3], but the collective's tensor is float32 [2, 3] "
                          "(every entry must have its shape and dtype)",
                          "reduce_scatter: input_list[0] is float32 [3, 2], but the collective's tensor is float32 "
                          "[2, 3] (every entry must have its shape and dtype)"]
        assert gathered == [[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], [[10.0, 11.0, 12.0], [13.0, 14.0, 15.0]]]


def test_all_gather_and_gather_refuse_ranks_whose_tensors_differ_in_shape_with_the_same_bytes():
    # the list form flattened each rank's tensor, so [2, 3] on rank 0 and [3, 2] on rank 1 (24 bytes each) gathered
    # silently, each rank reading the other's values in its own shape; the single-tensor collectives refuse it
    def run(r):
        x = tessel.arange(6.0).reshape(*((2, 3) if r == 0 else (3, 2)))
        errors = []
        for call in (lambda: dist.all_gather([tessel.zeros(*x.shape) for _ in range(2)], x),
                     lambda: dist.gather(x, [tessel.zeros(*x.shape) for _ in range(2)] if r == 0 else None, 0)):
            with pytest.raises(dist.DistBackendError) as info:
                call()
            errors.append(str(info.value))
        return errors

    for errors in on_two_ranks(run).values():
        assert len(errors) == 2 and all("collective mismatch" in e and "24 B of shape [3, 2], float32" in e and
                                        "24 B of shape [2, 3], float32" in e for e in errors), errors


def test_gather_refuses_a_gather_list_on_a_rank_that_is_not_the_destination_after_the_exchange():
    # torch raises ValueError on such a rank (it was accepted and ignored); the destination still gets its list
    def run(r):
        x = tessel.full((2,), float(r))
        out = [tessel.zeros(2) for _ in range(2)]
        if r == 1:
            with pytest.raises(ValueError, match="must NOT be specified on non-destination ranks"):
                dist.gather(x, out, dst=0)
            return None
        dist.gather(x, out, dst=0)
        return [o.tolist() for o in out]

    assert on_two_ranks(run)[0] == [[0.0, 0.0], [1.0, 1.0]]


def test_async_handles_of_every_collective_have_torchs_methods():
    def run(r):
        x = tessel.full((3,), float(r + 1))
        out = [tessel.zeros(3) for _ in range(2)]
        seen = []
        for work in (dist.all_gather(out, x, async_op=True), dist.all_reduce(x, async_op=True),
                     dist.barrier(async_op=True)):
            work.wait()
            seen.append((work.is_success(), work.exception(), [t.tolist() for t in work.result()],
                         [t.tolist() for t in work.get_future().wait()]))
        return seen

    for seen in on_two_ranks(run).values():
        gathered = [[1.0] * 3, [2.0] * 3]
        assert seen == [(True, None, gathered, gathered), (True, None, [[3.0] * 3], [[3.0] * 3]),
                        (True, None, [], [])]


def test_a_second_init_raises_and_meshes_hash_and_name_their_dims_as_torch():
    def run(r):
        with pytest.raises(ValueError, match="trying to initialize the default process group twice!"):
            dist.init_process_group()
        a = init_device_mesh("cpu", (2, 1), mesh_dim_names=("dp", "tp"))
        b = init_device_mesh("cpu", (2, 1), mesh_dim_names=("dp", "tp"))
        with pytest.raises(KeyError, match="Mesh dimension 'zz' does not exist."):
            a.get_group("zz")
        a["dp", "tp"]._flatten("dp_tp")
        with pytest.raises(KeyError) as info:  # torch's list of the valid names (it printed the mesh)
            a["xx"]
        assert info.value.args[0] == ("Invalid mesh_dim_names ('xx',) specified. Valid mesh_dim_names are "
                                      "['dp', 'tp', 'dp_tp'].")
        return a == b and hash(a) == hash(b) and len({a, b, a["dp"]}) == 2

    assert on_two_ranks(run) == {0: True, 1: True}


def test_strided_tensors_take_part_in_collectives_and_are_written_in_place():
    import tessel.distributed._functional_collectives as funcol

    def run(r):
        t = (tessel.arange(6.0).reshape(2, 3) + 10 * r).t()  # transposed: [3, 2], strided
        dist.all_reduce(t)
        base = tessel.arange(6.0) + 10 * r
        dist.all_reduce(base[::2])  # a strided slice: only its elements change, in the base
        b = tessel.zeros(2, 3).t() + 7 * r
        dist.broadcast(b, src=1)
        gathered = tessel.zeros(2, 3)
        dist.all_gather_into_tensor(gathered, tessel.arange(6.0).reshape(3, 2).t()[0] + r)
        wide = funcol.all_gather_single(tessel.ones(2, 1) * (r + 1), 1, dist.group.WORLD)  # [2, 2], strided
        dist.all_reduce(wide)
        return t.tolist(), base.tolist(), b.tolist(), gathered.tolist(), wide.tolist()

    for r, (t, base, b, gathered, wide) in on_two_ranks(run).items():
        assert t == [[10.0, 16.0], [12.0, 18.0], [14.0, 20.0]]
        assert base == [10.0, 1.0 + 10 * r, 14.0, 3.0 + 10 * r, 18.0, 5.0 + 10 * r]
        assert b == [[7.0, 7.0], [7.0, 7.0], [7.0, 7.0]]
        assert gathered == [[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]]
        assert wide == [[2.0, 4.0], [2.0, 4.0]]  # [[1, 2]] on each rank, summed


def test_reduce_scatter_with_bitwise_ops():
    def run(r):
        inp = tessel.tensor([3 + r, 5 * (r + 1), 12, 7 - r], dtype=tessel.int32)  # rank 1: [4, 10, 12, 6]
        got = []
        for op in (dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR):
            out, out2 = tessel.zeros(2, dtype=tessel.int32), tessel.zeros(2, dtype=tessel.int32)
            dist.reduce_scatter_tensor(out, inp, op=op)
            dist.reduce_scatter(out2, list(inp.chunk(2)), op=op)
            got.append((out.tolist(), out2.tolist()))
        return got

    out = on_two_ranks(run)
    assert out[0] == [([3 & 4, 5 & 10], [0, 0]), ([3 | 4, 5 | 10], [7, 15]), ([3 ^ 4, 5 ^ 10], [7, 15])]
    assert out[1] == [([12, 7 & 6], [12, 6]), ([12, 7 | 6], [12, 7]), ([0, 7 ^ 6], [0, 1])]


def test_monitored_barrier_gives_up_after_its_timeout_naming_the_missing_rank():
    import datetime
    import time

    def run(r):
        if r == 1:  # never arrives
            time.sleep(1.0)
            return None
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=r"timed out after 300 ms.*rank\(s\) 1 \(global 1\) never arrived"):
            dist.monitored_barrier(timeout=datetime.timedelta(milliseconds=300))
        return time.monotonic() - start

    waited = on_two_ranks(run)[0]
    assert 0.25 < waited < 10, waited  # its own timeout, not the group's (minutes)


def test_complex_tensors_take_part_as_in_torchs_gloo():
    def run(r):
        def cx(k):
            return tessel.complex(tessel.tensor([1.0 + r, 2.0]), tessel.tensor([0.5, -1.0 - r - k]))
        x = cx(0)
        dist.all_reduce(x)
        gathered = tessel.complex(tessel.zeros(4), tessel.zeros(4))
        dist.all_gather_into_tensor(gathered, cx(0))
        swapped = tessel.complex(tessel.zeros(2), tessel.zeros(2))
        dist.all_to_all_single(swapped, cx(0))
        with pytest.raises(ValueError, match="all_reduce does not support MAX on complex tensors"):
            dist.all_reduce(cx(0), op=dist.ReduceOp.MAX)
        return x.tolist(), gathered.tolist(), swapped.tolist()

    out = on_two_ranks(run)  # torch 2.15 (gloo) gives these
    assert out[0] == ([3 + 1j, 4 - 3j], [1 + 0.5j, 2 - 1j, 2 + 0.5j, 2 - 2j], [1 + 0.5j, 2 + 0.5j])
    assert out[1][0] == [3 + 1j, 4 - 3j] and out[1][2] == [2 - 1j, 2 - 2j]


def test_a_bad_scatter_list_raises_on_every_rank_at_once():
    def run(r):
        out = tessel.zeros(2, 3)
        x = tessel.arange(6.0).reshape(2, 3)
        dist.scatter(out, [x, x + 10] if r == 0 else None, src=0)
        good = out.tolist()
        with pytest.raises(RuntimeError) as info:  # the peer does not wait out the group's timeout
            dist.scatter(out, [x.reshape(3, 2)] * 2 if r == 0 else None, src=0)
        return good, str(info.value)

    out = on_two_ranks(run)
    assert out[0][0] == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]] and out[1][0] == [[10.0, 11.0, 12.0], [13.0, 14.0, 15.0]]
    assert out[0][1].startswith("scatter: scatter_list[0] is float32 [3, 2], but the collective's tensor is float32")
    assert out[1][1] == "scatter: the source rank 0's scatter_list was refused (its error names why)"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
