"""tessel.distributed.tensor against torch's rules on 2 rank threads, each expectation what torch 2.15 printed for
the same script on 2 gloo ranks (mesh = init_device_mesh("cpu", (2,))): local_map's None out_placements,
Tensor.broadcast_to's varargs, unbind along a sharded dim, in-place ops that cannot keep a Partial placement,
gathers along a sharded dim (sort, topk, flip, roll, indexing, index_select, kthvalue, cummax) coming back
Replicate, one-element and shape-only plain tensors next to DTensors, redistribute(async_op=True)'s wait(),
CommDebugMode's keys for distribute_tensor / from_local / barrier, DTensor._version / device_mesh identity /
_spec, and compute_local_shape_and_global_offset."""
import math
import re
import sys
import warnings

import pytest

import tessel
import tessel.nn.functional as F
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from tessel.distributed.tensor.experimental import local_map
from ranks_testing import on_ranks as ranks

W = 2


def on_ranks(fn):
    """fn(rank, mesh) on 2 rank threads with a 1-D mesh; returns {rank: result}."""
    return ranks(W, lambda rank: fn(rank, init_device_mesh("cpu", (W,))))


def approx(x):
    return pytest.approx(x, abs=1e-4)


def layout(d):
    """(placements, local values) of a DTensor, the two things torch's printout shows per rank."""
    return tuple(d.placements), d.to_local().tolist()


def test_local_map_wraps_an_output_whose_placements_are_none_as_replicate():
    def fn(rank, mesh):
        a = distribute_tensor(tessel.arange(4.0), mesh, [Shard(0)])
        out = local_map(lambda x: x.sum(), out_placements=None, in_placements=([Shard(0)],), device_mesh=mesh)(a)
        return layout(out)

    # torch: DTensor(placements=(Replicate(),)) holding each rank's own local sum
    assert on_ranks(fn) == {0: ((Replicate(),), 1.0), 1: ((Replicate(),), 5.0)}



def test_tensor_broadcast_to_takes_its_sizes_spread_out_as_torchs_method():
    def fn(rank, mesh):
        d = distribute_tensor(tessel.arange(4.0), mesh, [Shard(0)])
        return layout(d.broadcast_to(3, 4)), tuple(d.broadcast_to((3, 4)).shape)

    # torch: Shard(1), each rank's two columns repeated over the three rows
    assert on_ranks(fn) == {0: (((Shard(1),), [[0.0, 1.0]] * 3), (3, 4)),
                            1: (((Shard(1),), [[2.0, 3.0]] * 3), (3, 4))}
    assert tuple(tessel.arange(2.0).broadcast_to(2, 2).shape) == (2, 2)
    with pytest.raises(TypeError, match="takes 2 positional arguments but 3 were given"):
        tessel.broadcast_to(tessel.arange(2.0), 2, 2)  # the function form takes one sequence, as torch's


def test_unbind_along_a_sharded_dim_raises_and_along_another_keeps_the_shard():
    def fn(rank, mesh):
        d = distribute_tensor(tessel.arange(24.0).reshape(2, 4, 3), mesh, [Shard(1)])
        for dim in (1, -2):
            with pytest.raises(RuntimeError, match="Attempted to unbind along the sharded dimension 1. Please "
                                                   "redistribute the input explicitly before unbinding."):
                d.unbind(dim)
        with pytest.raises(RuntimeError, match="unbind along the sharded dimension 1"):
            tessel.unbind(d, 1)
        return [layout(p) for p in d.unbind(0)]

    # torch: two Shard(0) pieces of shape [4, 3], each rank holding two rows of each
    assert on_ranks(fn) == {0: [((Shard(0),), [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]),
                                ((Shard(0),), [[12.0, 13.0, 14.0], [15.0, 16.0, 17.0]])],
                            1: [((Shard(0),), [[6.0, 7.0, 8.0], [9.0, 10.0, 11.0]]),
                                ((Shard(0),), [[18.0, 19.0, 20.0], [21.0, 22.0, 23.0]])]}


def partial(rank, mesh, op="sum"):
    """Each rank's [2, 2] piece full of rank + 1, as a Partial(op) DTensor."""
    return DTensor.from_local(tessel.ones(2, 2) * (rank + 1), mesh, [Partial(op)])


def test_in_place_ops_that_cannot_keep_a_partial_placement_raise_torchs_error():
    def refused(text, placement="Partial(sum)"):
        return pytest.raises(RuntimeError, match=re.escape(
            "%s: in-place operations that require placement changes are not supported. The input has placement "
            "(%s,), but no valid strategy preserves this placement. Please use the out-of-place version of this "
            "operation instead." % (text, placement)))

    def fn(rank, mesh):
        mask = distribute_tensor(tessel.tensor([[True, False], [False, True]]), mesh, [Replicate()])
        for op, text in ((lambda a: a.add_(2), "aten.add_.Tensor"), (lambda a: a.sub_(2), "aten.sub_.Tensor"),
                         (lambda a: a.relu_(), "aten.relu_.default"), (lambda a: a.exp_(), "aten.exp_.default"),
                         (lambda a: a.clamp_(0, 1.5), "aten.clamp_.default"), (lambda a: a.pow_(2), "aten.pow_.Scalar"),
                         (lambda a: a.abs_(), "aten.abs_.default"), (lambda a: a.sigmoid_(), "aten.sigmoid_.default"),
                         (lambda a: a.masked_fill_(mask, 0.0), "aten.masked_fill_.Scalar"),
                         (lambda a: a.normal_(), "aten.normal_.default"),
                         (lambda a: F.relu(a, inplace=True), "aten.relu_.default")):
            with refused(text):
                op(partial(rank, mesh))
            with refused(text):  # under autograd too (tessel's error came from inside the recorded op)
                op(partial(rank, mesh).requires_grad_() * 1)
        with refused("aten.add_.Tensor"):
            d = partial(rank, mesh)
            d += 2
        with refused("aten.neg_.default", "Partial(max)"):  # a negation reorders the pieces
            partial(rank, mesh, "max").neg_()
        with refused("aten.clamp_.default", "Partial(max)"):
            partial(rank, mesh, "max").clamp_(0, 1.5)
        # torch keeps linear ops on Partial(sum) and non-decreasing ones on Partial(max)
        return [layout(f(partial(rank, mesh, op))) for op, f in (
            ("sum", lambda a: a.mul_(2)), ("sum", lambda a: a.neg_()), ("sum", lambda a: a.div_(2)),
            ("avg", lambda a: a.mul_(2)), ("max", lambda a: a.relu_()), ("max", lambda a: a.floor_()))]

    p = [Partial()], [Partial("avg")], [Partial("max")]
    # torch's placements and local pieces
    assert on_ranks(fn) == {
        0: [(tuple(p[0]), [[2.0] * 2] * 2), (tuple(p[0]), [[-1.0] * 2] * 2), (tuple(p[0]), [[0.5] * 2] * 2),
            (tuple(p[1]), [[2.0] * 2] * 2), (tuple(p[2]), [[1.0] * 2] * 2), (tuple(p[2]), [[1.0] * 2] * 2)],
        1: [(tuple(p[0]), [[4.0] * 2] * 2), (tuple(p[0]), [[-2.0] * 2] * 2), (tuple(p[0]), [[1.0] * 2] * 2),
            (tuple(p[1]), [[4.0] * 2] * 2), (tuple(p[2]), [[2.0] * 2] * 2), (tuple(p[2]), [[2.0] * 2] * 2)]}


def test_gathers_along_a_sharded_dim_come_back_replicate_with_whole_values():
    def fn(rank, mesh):
        d = distribute_tensor(tessel.tensor([3.0, 1.0, 4.0, 2.0]), mesh, [Shard(0)])
        picks = distribute_tensor(tessel.tensor([3, 0]), mesh, [Replicate()])
        return [layout(x) for x in (d.sort().values, d.topk(2).values, d[picks], d.flip(0), d.argsort(),
                                    d.roll(1, 0), d.index_select(0, picks))]

    r = (Replicate(),)
    # torch: each whole on every rank (tessel gave Partial(sum) pieces with zeros, argsort Shard(0))
    expected = [(r, [1.0, 2.0, 3.0, 4.0]), (r, [4.0, 3.0]), (r, [2.0, 3.0]), (r, [2.0, 4.0, 1.0, 3.0]),
                (r, [1, 3, 0, 2]), (r, [2.0, 3.0, 1.0, 4.0]), (r, [2.0, 3.0])]
    assert on_ranks(fn) == {0: expected, 1: expected}


def grid(mesh, placements):
    return distribute_tensor(tessel.tensor([[3.0, 1.0, 4.0], [1.0, 5.0, 9.0], [2.0, 6.0, 5.0], [3.0, 5.0, 8.0]]),
                             mesh, placements)


def test_running_and_order_statistics_along_a_sharded_dim_as_torch():
    def fn(rank, mesh):
        d = grid(mesh, [Shard(0)])
        values, indices = d.cummax(0)
        kth = d.kthvalue(2, 0)
        med = d.median(0)
        along_rows = d.cummax(1)  # dim 1 is whole on each rank: the rows stay sharded
        return [layout(values), layout(indices), layout(kth.values), layout(kth.indices), layout(med.values),
                layout(med.indices), layout(along_rows.values), layout(along_rows.indices)]

    r, s0 = (Replicate(),), (Shard(0),)
    common = [(r, [[3.0, 1.0, 4.0], [3.0, 5.0, 9.0], [3.0, 6.0, 9.0], [3.0, 6.0, 9.0]]),
              (r, [[0, 0, 0], [0, 1, 1], [0, 2, 1], [3, 2, 1]]), (r, [2.0, 5.0, 5.0]), (r, [2, 1, 2]),
              (r, [2.0, 5.0, 5.0]), (r, [2, 1, 2])]
    # torch's (cummax's indices a plain tensor before: torch's are a DTensor laid out as the values)
    assert on_ranks(fn) == {
        0: common + [(s0, [[3.0, 3.0, 4.0], [1.0, 5.0, 9.0]]), (s0, [[0, 0, 2], [0, 1, 2]])],
        1: common + [(s0, [[2.0, 6.0, 6.0], [3.0, 5.0, 8.0]]), (s0, [[0, 1, 1], [0, 1, 2]])]}


def test_index_select_and_gather_by_a_sharded_or_replicated_index_follow_torchs_layout():
    def fn(rank, mesh):
        d = grid(mesh, [Shard(0)])
        rows = distribute_tensor(tessel.tensor([3, 2, 1, 0]), mesh, [Shard(0)])
        sharded = distribute_tensor(tessel.tensor([[0, 1, 2], [1, 1, 0], [3, 2, 1], [0, 0, 0]]), mesh, [Shard(0)])
        replicated = distribute_tensor(tessel.tensor([[0, 1, 2], [1, 1, 0], [2, 2, 2], [0, 0, 0]]), mesh,
                                       [Replicate()])
        return [layout(d.index_select(0, rows)), layout(d.gather(0, sharded)), layout(d.gather(1, replicated)),
                layout(d.gather(0, replicated))]

    s0, r = (Shard(0),), (Replicate(),)
    # torch: the input made whole along the gathered dim, the output laid out as the index (Shard(0)); gather
    # along the unsharded dim 1 by a replicated index keeps the input's Shard(0)
    whole = (r, [[3.0, 5.0, 5.0], [1.0, 5.0, 4.0], [2.0, 6.0, 5.0], [3.0, 1.0, 4.0]])
    assert on_ranks(fn) == {
        0: [(s0, [[3.0, 5.0, 8.0], [2.0, 6.0, 5.0]]), (s0, [[3.0, 5.0, 5.0], [1.0, 5.0, 4.0]]),
            (s0, [[3.0, 1.0, 4.0], [5.0, 5.0, 1.0]]), whole],
        1: [(s0, [[1.0, 5.0, 9.0], [3.0, 1.0, 4.0]]), (s0, [[3.0, 6.0, 9.0], [3.0, 1.0, 4.0]]),
            (s0, [[5.0, 5.0, 5.0], [3.0, 3.0, 3.0]]), whole]}


def test_one_element_and_shape_only_plain_tensors_stand_next_to_dtensors_as_in_torch():
    def fn(rank, mesh):
        d = distribute_tensor(tessel.arange(4.0), mesh, [Shard(0)])
        column = distribute_tensor(tessel.ones(4, 1), mesh, [Shard(0)])
        out = [layout(tessel.hypot(d, tessel.ones(1))), layout(tessel.lerp(d, tessel.ones(1), 0.5)),
               layout(tessel.maximum(d, tessel.ones(1, 1))), layout(column.expand_as(tessel.empty(4, 3))),
               layout(column.expand_as(tessel.empty(4, 3, requires_grad=True))),
               layout(d.view_as(tessel.empty(2, 2)))]
        with pytest.raises(RuntimeError, match="got mixed DTensor and plain tensor arguments"):
            tessel.atan2(d, tessel.ones(4))  # more than one element: still torch's refusal
        return out

    with warnings.catch_warnings(record=True) as seen:  # (process-wide: around the rank threads)
        warnings.simplefilter("always")
        got = on_ranks(fn)
    s0, s1 = (Shard(0),), (Shard(1),)
    ones = [[1.0] * 3] * 2
    # torch: hypot and lerp take the 1-d ones(1) with a UserWarning, maximum the 2-d ones(1, 1) silently (values
    # as torch printed them, to 4 places)
    assert got == {0: [(s0, [1.0, approx(1.4142)]), (s0, [0.5, 1.0]), (s1, [[1.0, 1.0]]), (s0, ones),
                       (s0, ones), (s0, [[0.0, 1.0]])],
                   1: [(s0, [approx(2.2361), approx(3.1623)]), (s0, [1.5, 2.0]), (s1, [[2.0, 3.0]]),
                       (s0, ones), (s0, ones), (s0, [[2.0, 3.0]])]}
    texts = [str(w.message) for w in seen if issubclass(w.category, UserWarning)]
    assert texts.count("Found a non-scalar tensor with numel=1 and ndim!=0, we are implicitly creating a "
                       "replicated DTensor for it. However, please consider changing it to a scalar tensor or "
                       "explicitly create a DTensor under distributed environment.") == 4  # 2 calls x 2 ranks


def test_redistribute_async_op_gives_a_local_piece_to_wait_on_as_torchs():
    from tessel.distributed._functional_collectives import AsyncCollectiveTensor

    def fn(rank, mesh):
        d = distribute_tensor(tessel.arange(4.0), mesh, [Shard(0)])
        out = d.redistribute(mesh, [Replicate()], async_op=True)
        local = out.to_local()
        waited = local.wait()
        return (isinstance(out, DTensor), type(local).__name__, isinstance(local, AsyncCollectiveTensor),
                type(waited).__name__, waited.tolist(), (local + 1).tolist(), layout(out * 2),
                type(d.redistribute(mesh, [Replicate()]).to_local()).__name__)

    # torch: an AsyncCollectiveTensor whose wait() is the plain tensor; without async_op a plain Tensor
    expected = (True, "AsyncCollectiveTensor", True, "Tensor", [0.0, 1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0],
                ((Replicate(),), [0.0, 2.0, 4.0, 6.0]), "Tensor")
    assert on_ranks(fn) == {0: expected, 1: expected}


def test_comm_debug_mode_keys_distribute_tensor_from_local_and_leaves_out_barrier_and_p2p_as_torch():
    def fn(rank, mesh):
        import tessel.distributed as dist
        from tessel.distributed.tensor import ones
        from tessel.distributed.tensor.debug import CommDebugMode

        def counts(f):
            mode = CommDebugMode()
            with mode:
                f()
            return sorted((str(op), n) for op, n in mode.get_comm_counts().items()), mode.get_total_counts()

        def send_or_recv():
            if rank == 0:
                dist.send(tessel.ones(2), 1)
            else:
                dist.recv(tessel.zeros(2), 0)
        checked = counts(lambda: DTensor.from_local(tessel.ones(4), mesh, [Shard(0)], run_check=True))
        return [counts(lambda: distribute_tensor(tessel.ones(4), mesh, [Shard(0)])),
                counts(lambda: distribute_tensor(tessel.ones(4), mesh, [Replicate()])),
                counts(lambda: distribute_tensor(tessel.ones(4), mesh, [Partial()])),
                counts(lambda: ones(4, device_mesh=mesh, placements=[Shard(0)])),
                counts(lambda: DTensor.from_local(tessel.ones(4), mesh, [Shard(0)])),
                counts(dist.barrier), counts(send_or_recv), [op for op, _ in checked[0]]]

    # torch's counts (from_local's check: torch's key; it all-gathers twice where tessel does once)
    expected = [([("c10d.scatter_", 1)], 1), ([("c10d.broadcast_", 1)], 1), ([("c10d.broadcast_", 1)], 1),
                ([], 0), ([], 0), ([], 0), ([], 0), ["c10d._allgather_base_"]]
    assert on_ranks(fn) == {0: expected, 1: expected}


def test_distribute_tensor_versions_mesh_identity_and_bad_shard_dims_as_torch():
    def fn(rank, mesh):
        from tessel.distributed.tensor import ones
        x = tessel.arange(4.0)
        d = distribute_tensor(x, mesh, [Shard(0)])
        versions = [d._version, distribute_tensor(x, mesh, [Replicate()])._version,
                    ones(4, device_mesh=mesh, placements=[Shard(0)])._version, x._version]
        d.add_(1)
        versions.append(d._version)
        with pytest.raises(IndexError, match=re.escape("Dimension out of range (expected to be in range of [-1, 0], "
                                                       "but got 1)")):
            distribute_tensor(tessel.ones(2), mesh, [Shard(1)])
        with pytest.raises(AssertionError, match="Expected tensor.dim\\(\\) > 0, got 0"):
            distribute_tensor(tessel.tensor(3.0), mesh, [Shard(0)])
        return versions, d.device_mesh is mesh, (d * 2).device_mesh is mesh, d.redistribute(mesh, [Replicate()])\
            .device_mesh is mesh

    # torch: fresh DTensors at version 0 (one in-place op: 1), and the mesh object they were made on
    assert on_ranks(fn) == {0: ([0, 0, 0, 0, 1], True, True, True), 1: ([0, 0, 0, 0, 1], True, True, True)}


def test_dtensor_spec_describes_mesh_placements_and_global_meta_as_torchs():
    def fn(rank, mesh):
        from tessel.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
        d = distribute_tensor(tessel.arange(15.0).reshape(5, 3), mesh, [Shard(0)])
        spec = d._spec
        p = DTensor.from_local(tessel.ones(2, 2), mesh, [Partial()])._spec
        made = DTensorSpec(mesh, (Shard(0),), TensorMeta(tessel.Size([4, 2]), (2, 1), tessel.float32))
        with pytest.raises(ValueError, match="tensor_meta is not set"):
            DTensorSpec(mesh, (Shard(0),)).shape
        return (type(spec).__name__, spec.placements, spec.mesh is mesh, spec.device_mesh is mesh,
                tuple(spec.tensor_meta.shape), spec.tensor_meta.stride, spec.tensor_meta.dtype == tessel.float32,
                spec.ndim, spec.dim_map, spec.num_shards, spec.num_shards_map, spec.sums, spec.is_replicated(),
                spec.is_sharded(), str(spec), spec == d._spec, hash(spec) == hash(d._spec),
                spec == distribute_tensor(tessel.ones(5, 3), mesh, [Replicate()])._spec,
                (p.dim_map, p.sums, p.num_shards, str(p), p.is_replicated()), str(made),
                DTensorSpec.from_dim_map(mesh, [-1, 0], []).placements,
                DTensorSpec.from_dim_map(mesh, [-1, -1], [0]).placements)

    # torch's DTensorSpec
    expected = ("DTensorSpec", (Shard(0),), True, True, (5, 3), (3, 1), True, 2, [0, -1], 2, [2, 1], [], False, True,
                "Spec(f32[5, 3](S(0)))", True, True, False, ([-1, -1], [0], 1, "Spec(f32[2, 2](P(sum)))", False),
                "Spec(f32[4, 2](S(0)))", (Shard(1),), (Partial(),))
    assert on_ranks(fn) == {0: expected, 1: expected}


def test_compute_local_shape_and_global_offset_as_torchs():
    from tessel.distributed.tensor import _StridedShard

    def fn(rank, mesh):
        from tessel.distributed.tensor._utils import compute_local_shape_and_global_offset as f
        return [f((4, 3), mesh, [Shard(0)]), f((5, 3), mesh, [Shard(0)]), f((5, 3), mesh, [Shard(1)]),
                f((1, 3), mesh, [Shard(0)]), f((0, 3), mesh, [Shard(0)]), f((5, 3), mesh, [Replicate()]),
                f((5, 3), mesh, [Partial()]), f(tessel.Size([5, 3]), mesh, (Shard(0),)),
                f((5, 3), mesh, [Shard(0)], skip_offset=True), f((7,), mesh, [_StridedShard(0, split_factor=2)])]

    # torch's (local_shape, global_offset) per rank: uneven pieces as torch.chunk cuts them, an empty piece
    # starting at the dim's size
    assert on_ranks(fn) == {
        0: [((2, 3), (0, 0)), ((3, 3), (0, 0)), ((5, 2), (0, 0)), ((1, 3), (0, 0)), ((0, 3), (0, 0)),
            ((5, 3), (0, 0)), ((5, 3), (0, 0)), ((3, 3), (0, 0)), ((3, 3), ()), ((4,), (0,))],
        1: [((2, 3), (2, 0)), ((2, 3), (3, 0)), ((5, 1), (0, 2)), ((0, 3), (1, 0)), ((0, 3), (0, 0)),
            ((5, 3), (0, 0)), ((5, 3), (0, 0)), ((2, 3), (3, 0)), ((2, 3), ()), ((3,), (2,))]}


def test_the_api_module_holds_the_packages_dtensor_names_as_torchs():
    from tessel.distributed import tensor
    from tessel.distributed.tensor import _api
    # torch: torch.distributed.tensor._api.DTensor is torch.distributed.tensor.DTensor (and the other two)
    assert (_api.DTensor, _api.distribute_tensor, _api.distribute_module) == \
        (tensor.DTensor, tensor.distribute_tensor, tensor.distribute_module)


def test_mean_var_and_std_placements_and_collectives_as_torchs():
    def fn(rank, mesh):
        from tessel.distributed.tensor.debug import CommDebugMode
        full = tessel.arange(32.0).reshape(4, 8) * 0.25 - 3.0
        shape = tuple(mesh.mesh.shape)

        def run(placements, op, partial_axis=None):
            x = distribute_tensor(full, mesh, placements)
            if partial_axis is not None:  # the value on coordinate 0 of that mesh dim, zeros on the other
                keep = 1.0 if mesh.get_coordinate()[partial_axis] == 0 else 0.0
                placements = [Partial() if a == partial_axis else p for a, p in enumerate(placements)]
                x = DTensor.from_local(x.to_local() * keep, mesh, placements)
            mode = CommDebugMode()
            with mode:
                y = op(x)
            counts = sorted((str(k).split(".")[-1], n) for k, n in mode.get_comm_counts().items())
            return tuple(y.placements), counts, y.full_tensor().tolist()

        if len(shape) == 1:
            return [run([Shard(0)], lambda x: x.mean(0)),
                    run([Replicate()], lambda x: x.mean(), partial_axis=0),
                    run([Shard(0)], lambda x: x.var())]
        return [run([Shard(1), Replicate()], lambda x: x.var(1)),
                run([Shard(0), Replicate()], lambda x: x.var(1), partial_axis=1),
                run([Shard(0), Replicate()], lambda x: x.std(0)),
                run([Replicate(), Shard(0)], lambda x: x.mean(0), partial_axis=0)]

    full = [[i * 0.25 - 3.0 + 2.0 * r for i in range(8)] for r in range(4)]
    mean0 = [sum(full[r][c] for r in range(4)) / 4 for c in range(8)]
    flat = [v for row in full for v in row]
    mu = sum(flat) / 32
    var1 = [sum((v - sum(row) / 8) ** 2 for v in row) / 7 for row in full]
    std0 = [(sum((full[r][c] - mean0[c]) ** 2 for r in range(4)) / 3) ** 0.5 for c in range(8)]
    # torch 2.15 on 2 gloo ranks: mean of a row shard is Partial(avg) without communication, of a Partial(sum)
    # an all-reduced Replicate; var gathers the reduced dim
    one = on_ranks(fn)
    assert one[0] == one[1]
    assert one[0][0] == ((Partial("avg"),), [], approx(mean0))
    assert one[0][1] == ((Replicate(),), [("all_reduce", 1)], approx(mu))
    assert one[0][2] == ((Replicate(),), [("all_gather_into_tensor", 1)],
                         approx(sum((v - mu) ** 2 for v in flat) / 31))
    # torch 2.15 on a 2 x 2 mesh: a Replicate mesh dim right of a gathered one is split on the kept dim; a
    # Partial is reduce-scattered onto the kept dim
    two = ranks(4, lambda rank: fn(rank, init_device_mesh("cpu", (2, 2))))
    assert all(two[r] == two[0] for r in range(4))
    assert two[0][0] == ((Replicate(), Shard(0)), [("all_gather_into_tensor", 1)], approx(var1))
    assert two[0][1] == ((Shard(0), Shard(0)), [("reduce_scatter_tensor", 1)], approx(var1))
    assert two[0][2] == ((Replicate(), Shard(0)), [("all_gather_into_tensor", 1)], approx(std0))
    assert two[0][3] == ((Shard(0), Partial("avg")), [("reduce_scatter_tensor", 1)], approx(mean0))


def test_add_with_alpha_keeps_a_partial_operand_partial_and_where_reduces_it_as_torchs():
    def fn(rank, mesh):
        from tessel.distributed.tensor.debug import CommDebugMode
        r = distribute_tensor(tessel.arange(4.0), mesh, [Replicate()])
        p = DTensor.from_local(tessel.arange(4.0) * (rank + 1), mesh, [Partial()])  # the sum: 3 * arange
        out = []
        for op in (lambda: tessel.add(r, p, alpha=2), lambda: p.add(r, alpha=0.5),
                   lambda: tessel.where(r > 1, p, r), lambda: tessel.sub(r, p, alpha=2)):
            mode = CommDebugMode()
            with mode:
                y = op()
            out.append((tuple(y.placements), mode.get_total_counts(), y.full_tensor().tolist()))
        return out

    # torch 2.15: add.Tensor is linear (R + 2 * P: Partial(sum), the Replicate one partitioned, no collective);
    # where has no Partial rule (one all_reduce)
    expected = [((Partial(),), 0, approx([0.0, 7.0, 14.0, 21.0])), ((Partial(),), 0, approx([0.0, 3.5, 7.0, 10.5])),
                ((Replicate(),), 1, approx([0.0, 1.0, 6.0, 9.0])), ((Partial(),), 0, approx([0.0, -5.0, -10.0, -15.0]))]
    assert on_ranks(fn) == {0: expected, 1: expected}


def test_composed_maximum_and_atan2_reduce_scatter_a_partial_on_a_two_dim_mesh_as_torchs():
    def fn(rank):
        from tessel.distributed.tensor.debug import CommDebugMode
        mesh = init_device_mesh("cpu", (2, 2))
        full = tessel.arange(32.0).reshape(4, 8) * 0.25 - 3.0
        x = distribute_tensor(full, mesh, [Replicate(), Shard(0)])
        keep = 1.0 if mesh.get_coordinate()[0] == 0 else 0.0  # the value on dp coordinate 0, zeros on the other
        y = DTensor.from_local(distribute_tensor(full.flip(1), mesh, [Replicate(), Shard(0)]).to_local() * keep,
                               mesh, [Partial(), Shard(0)])
        out = []
        for op in (tessel.maximum, tessel.atan2):
            mode = CommDebugMode()
            with mode:
                z = op(x, y)
            out.append((tuple(z.placements), mode.get_total_counts(), z.full_tensor().reshape(-1).tolist()))
        return out

    # torch 2.15: the Partial mesh dim is reduce-scattered onto dim 1 (dim 0 is sharded to its right), the
    # Replicate operand sliced to match: (Shard(1), Shard(0)), one collective
    full = [[(8 * r + c) * 0.25 - 3.0 for c in range(8)] for r in range(4)]
    flipped = [row[::-1] for row in full]
    want = [max(a, b) for ra, rb in zip(full, flipped) for a, b in zip(ra, rb)]
    angle = [math.atan2(a, b) for ra, rb in zip(full, flipped) for a, b in zip(ra, rb)]
    got = ranks(4, fn)
    for r in range(4):
        assert got[r] == [((Shard(1), Shard(0)), 1, approx(want)), ((Shard(1), Shard(0)), 1, approx(angle))]


def test_empty_like_keeps_a_partial_and_the_filled_likes_replicate_it_as_torchs():
    # torch 2.15 (the placement sweep): empty_like of a Partial(sum) DTensor is Partial(sum); zeros_like, ones_like
    # and full_like give Replicate
    def fn(rank, mesh):
        p = partial(rank, mesh)
        return [tuple(f(p).placements) for f in (tessel.empty_like, tessel.zeros_like, tessel.ones_like,
                                                  lambda x: tessel.full_like(x, 2.0))]

    got = on_ranks(fn)
    for r in (0, 1):
        assert got[r] == [(Partial(),), (Replicate(),), (Replicate(),), (Replicate(),)]


def _placed(full, mesh, placements):
    """A DTensor of `full`: Shard / Replicate as distribute_tensor cuts it; a Partial(sum) axis holds the value on
    its coordinate 0 and zeros on the others."""
    base = [Replicate() if p.is_partial() else p for p in placements]
    local = distribute_tensor(full, mesh, base).to_local()
    if any(p.is_partial() and mesh.get_coordinate()[a] != 0 for a, p in enumerate(placements)):
        local = local * 0.0
    return DTensor.from_local(local, mesh, placements, shape=full.shape, stride=full.stride())


def test_addmm_and_baddbmm_place_the_bias_with_the_product_as_torchs_single_op():
    # (mesh shape, op, input placements of (bias, mat1, mat2)) -> the output placements torch 2.15 prints for
    # the sweep's shapes (tools/dev/dtensor_placements): addmm (4,) + (4, 8) @ (8, 4), baddbmm (4, 4, 4) +
    # (4, 4, 8) @ (4, 8, 4). Tessel ran a product, then the add, and gave the second column.
    cases = [((2,), "baddbmm", ([Shard(0)], [Shard(1)], [Shard(1)]), (Shard(1),)),  # was (S(0),)
             ((2,), "baddbmm", ([Shard(2)], [Shard(0)], [Replicate()]), (Shard(2),)),  # was (S(0),)
             ((2,), "baddbmm", ([Partial()], [Shard(0)], [Partial()]), (Partial(),)),  # was (S(0),)
             ((2, 2), "addmm", ([Replicate(), Shard(0)], [Shard(0), Shard(1)], [Replicate(), Replicate()]),
              (Shard(0), Shard(1))),  # was (R, S(1))
             ((2, 2), "addmm", ([Shard(0), Replicate()], [Shard(1), Shard(0)], [Replicate(), Replicate()]),
              (Shard(1), Shard(0))),  # was (S(1), R)
             ((2, 2), "baddbmm", ([Replicate(), Shard(0)], [Shard(0), Replicate()], [Shard(0), Shard(1)]),
              (Shard(0), Replicate()))]  # was (R, S(0))
    shapes = {"addmm": ((4,), (4, 8), (8, 4)), "baddbmm": ((4, 4, 4), (4, 4, 8), (4, 8, 4))}

    def values(op):
        return [tessel.arange(float(math.prod(s))).reshape(s) * (0.125 * (k + 1)) - 1.0
                for k, s in enumerate(shapes[op])]

    def fn(rank, mesh_shape, op, placements):
        mesh = init_device_mesh("cpu", mesh_shape)
        fulls = values(op)
        args = [_placed(f, mesh, list(p)).requires_grad_(True) for f, p in zip(fulls, placements)]
        out = getattr(tessel, op)(*args, beta=0.5, alpha=2.0)
        (out * out).sum().backward()
        return (tuple(out.placements), out.full_tensor().reshape(-1).tolist(),
                [a.grad.full_tensor().reshape(-1).tolist() for a in args])

    for mesh_shape, op, placements, want in cases:
        fulls = [f.requires_grad_(True) for f in values(op)]
        ref = getattr(tessel, op)(*fulls, beta=0.5, alpha=2.0)
        (ref * ref).sum().backward()
        got = ranks(math.prod(mesh_shape), lambda rank: fn(rank, mesh_shape, op, placements))
        for r in got:
            placed, full, grads = got[r]
            assert placed == want, (op, placements, placed)
            assert full == pytest.approx(ref.reshape(-1).tolist(), rel=1e-6), (op, placements)
            for g, f in zip(grads, fulls):
                assert g == pytest.approx(f.grad.reshape(-1).tolist(), rel=1e-5), (op, placements)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
