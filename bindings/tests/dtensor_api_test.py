"""torch.distributed's DeviceMesh / DTensor API as torch 2.15 gives it (each case run under torch with gloo first):
the DTensor factories with Partial placements hold the value on every rank, their signature (*size and keyword
arguments only, a current `with mesh:`), DeviceMesh.from_group's names and N-D form, size(-1), copy / deepcopy /
pickling of meshes, and CommDebugMode's c10d keys for tessel.distributed's own calls."""
import copy
import pickle

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.distributed.tensor as dtm
import tessel.nn as nn
from tessel.distributed.device_mesh import DeviceMesh, init_device_mesh
from tessel.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
from tessel.distributed.tensor.debug import CommDebugMode


def _on_ranks(n, fn):
    def rank_fn(world):
        dist.init_process_group()
        try:
            fn(dist.get_rank(), dist.get_world_size())
        finally:
            dist.destroy_process_group()

    tessel.run_ranks(n, rank_fn)


def test_factories_with_partial_hold_the_value_on_every_rank_for_each_reduce_op():
    def fn(r, w):
        mesh = init_device_mesh("cpu", (w,))
        for op in ("sum", "avg", "max", "min"):
            reduced = w if op == "sum" else 1  # torch: the reduction of w equal pieces
            for make, value in ((lambda p: dtm.ones(2, 3, device_mesh=mesh, placements=p), 1.0),
                                (lambda p: dtm.zeros(2, 3, device_mesh=mesh, placements=p), 0.0),
                                (lambda p: dtm.full((2, 3), 3.5, device_mesh=mesh, placements=p), 3.5)):
                d = make([Partial(op)])
                assert d.placements == (Partial(op),) and tuple(d.shape) == (2, 3)
                np.testing.assert_array_equal(d.to_local().numpy(), np.full((2, 3), value, np.float32))
                np.testing.assert_array_equal(d.full_tensor().numpy(), np.full((2, 3), value * reduced, np.float32))
        lin = dtm.linspace(0.0, 1.0, 3, device_mesh=mesh, placements=[Partial()])
        np.testing.assert_allclose(lin.to_local().numpy(), [0.0, 0.5, 1.0])
        np.testing.assert_allclose(lin.full_tensor().numpy(), [0.0, 0.5 * w, 1.0 * w])
        # requires_grad is kept, and a Replicate factory is unchanged
        assert dtm.ones(2, device_mesh=mesh, placements=[Partial()], requires_grad=True).requires_grad
        np.testing.assert_array_equal(dtm.ones(2, device_mesh=mesh).full_tensor().numpy(), [1.0, 1.0])

    _on_ranks(2, fn)


def test_factories_partial_and_shard_on_a_2d_mesh():
    def fn(r, w):
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        d = dtm.ones(4, 2, device_mesh=mesh, placements=[Partial(), Shard(0)])
        np.testing.assert_array_equal(d.to_local().numpy(), np.ones((2, 2), np.float32))  # this rank's rows, whole
        np.testing.assert_array_equal(d.full_tensor().numpy(), np.full((4, 2), 2.0, np.float32))  # dp's 2 ranks

    _on_ranks(4, fn)


def test_mixed_partial_reduce_ops_are_refused_by_from_local_and_distribute_tensor_as_torch():
    """[Partial("max"), Partial("sum")] on a 2 x 2 mesh: the full value depends on which mesh dim is reduced first
    (8 or 5 for these pieces), so torch refuses it; tessel accepted it and full_tensor read 8 while redistributing
    dim b first gave 5. Sum with avg stays allowed (torch's exception)."""
    got = {}

    def fn(r, w):
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("a", "b"))
        local = tessel.tensor([[1.0], [3.0], [5.0], [0.0]][r])
        for make in (lambda pl: dtm.DTensor.from_local(local, mesh, pl),
                     lambda pl: distribute_tensor(tessel.ones(1), mesh, pl)):
            with pytest.raises(ValueError, match=r"Mixed Partial reduce types are not supported in the same "
                                                 r"placement list\. Found reduce ops: \{'(max', 'sum|sum', 'max)'\}"):
                make([Partial("max"), Partial("sum")])
        got[r] = dtm.DTensor.from_local(local, mesh, [Partial("sum"), Partial("avg")]).full_tensor().item()

    _on_ranks(4, fn)
    assert got == {r: 4.5 for r in range(4)}  # sum over a of the averages over b: (1 + 3) / 2 + (5 + 0) / 2


def test_factories_take_torchs_signature():
    def fn(r, w):
        mesh = init_device_mesh("cpu", (w,))
        with pytest.raises(TypeError, match="unexpected keyword argument 'size'"):
            dtm.zeros(size=(2, 2), device_mesh=mesh)
        with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
            dtm.ones(2, 2, device_mesh=mesh, bogus=1)
        with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
            dtm.full((2,), 1.0, device_mesh=mesh, bogus=1)
        with pytest.raises(TypeError, match=r"takes an iterable of 'int' \(item 0 is 'str'\)"):
            dtm.zeros("a", device_mesh=mesh)
        with pytest.raises(TypeError, match=r"item 1 is 'float'"):
            dtm.rand(2, 2.5, device_mesh=mesh)
        for size in ((4, 3), [4, 3], tessel.Size([4, 3])):
            assert tuple(dtm.zeros(size, device_mesh=mesh, placements=[Shard(0)]).shape) == (4, 3)
        assert tuple(dtm.empty(4, 3, device_mesh=mesh).to_local().shape) == (4, 3)
        assert tuple(dtm.zeros(device_mesh=mesh).shape) == ()  # torch: zeros() is 0-d
        assert tuple(dtm.zeros(tessel.tensor(3), device_mesh=mesh).shape) == (3,)
        assert dtm.full(size=(2,), fill_value=3.0, device_mesh=mesh).to_local().tolist() == [3.0, 3.0]
        assert tuple(dtm.full(5, 1.0, device_mesh=mesh).shape) == (5,)
        assert dtm.zeros(2, dtype=tessel.float64, device_mesh=mesh).dtype == tessel.float64
        assert dtm.zeros(2, device_mesh=mesh, layout=tessel.strided).shape == (2,)
        with pytest.raises(AssertionError, match="layout value not supported"):
            dtm.zeros(2, device_mesh=mesh, layout=tessel.sparse_coo)
        with pytest.raises(AssertionError, match="mesh dimension does not match the length of placements"):
            dtm.zeros(2, device_mesh=mesh, placements=[Replicate(), Replicate()])

    _on_ranks(2, fn)


def test_with_mesh_is_the_default_mesh_of_factories_and_distribute_tensor():
    def fn(r, w):
        mesh = init_device_mesh("cpu", (w,))
        m2 = init_device_mesh("cpu", (2, w // 2), mesh_dim_names=("dp", "tp"))
        with pytest.raises(RuntimeError, match="No device mesh is currently active!"):
            dtm.zeros(2)
        with pytest.raises(RuntimeError, match="No device mesh is currently active!"):
            distribute_tensor(tessel.ones(2))
        with mesh as entered:
            assert entered is mesh
            d = dtm.ones(4, 2, placements=[Shard(0)])
            assert d.device_mesh == mesh and d.to_local().tolist() == [[1.0, 1.0]] * (4 // w)
            with m2:  # the innermost one
                assert dtm.zeros(2).device_mesh == m2
                e = distribute_tensor(tessel.arange(8.0).reshape(4, 2), placements=[Shard(0), Shard(1)])
                assert e.device_mesh == m2 and e.full_tensor().tolist() == np.arange(8.0).reshape(4, 2).tolist()
            assert distribute_tensor(tessel.ones(2)).device_mesh == mesh
        with pytest.raises(RuntimeError, match="No device mesh is currently active!"):
            dtm.ones(1)

    _on_ranks(4, fn)


def test_from_group_names_and_nd_meshes_as_torch():
    def fn(r, w):
        m2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        assert DeviceMesh.from_group(dist.group.WORLD, "cpu").mesh_dim_names is None
        assert DeviceMesh.from_group(m2.get_group("tp"), "cpu").mesh_dim_names is None
        one = DeviceMesh.from_group(m2.get_group("tp"), "cpu", mesh_dim_names=("x",))
        assert one.mesh_dim_names == ("x",) and one.mesh.tolist() == m2["tp"].mesh.tolist()
        assert DeviceMesh.from_group(dist.group.WORLD, "cpu", mesh=list(range(w))).shape == (w,)
        with pytest.raises(ValueError, match=r"Invalid mesh \[1, 0, 2, 3\] for ProcessGroup with ranks"):
            DeviceMesh.from_group(dist.group.WORLD, "cpu", mesh=[1, 0, 2, 3])

        fm = DeviceMesh.from_group([m2.get_group(0), m2.get_group(1)], "cpu", mesh=m2.mesh,
                                   mesh_dim_names=("p", "q"))
        assert fm.shape == (2, 2) and fm.mesh_dim_names == ("p", "q") and fm.mesh.tolist() == [[0, 1], [2, 3]]
        assert fm.get_group("p") is m2.get_group("dp") and fm.get_local_rank("q") == r % 2
        assert fm["q"].mesh.tolist() == m2["tp"].mesh.tolist()
        x = np.arange(16.0, dtype=np.float32).reshape(4, 4)
        d = distribute_tensor(tessel.from_numpy(x), fm, [Shard(0), Shard(1)])
        row, col = (r // 2) * 2, (r % 2) * 2
        np.testing.assert_array_equal(d.to_local().numpy(), x[row:row + 2, col:col + 2])
        np.testing.assert_array_equal(d.full_tensor().numpy(), x)
        assert DeviceMesh.from_group([m2.get_group(0), m2.get_group(1)], "cpu", mesh=[[0, 1], [2, 3]],
                                     mesh_dim_names=("p", "q")) == fm
        groups = [m2.get_group(0), m2.get_group(1)]
        with pytest.raises(ValueError, match="Must pass mesh if passing multiple ProcessGroups"):
            DeviceMesh.from_group(groups, "cpu")
        with pytest.raises(ValueError, match="Must pass mesh if passing multiple ProcessGroups"):
            DeviceMesh.from_group([dist.group.WORLD], "cpu")
        with pytest.raises(ValueError, match="Must pass mesh_dim_names if passing multiple ProcessGroups"):
            DeviceMesh.from_group(groups, "cpu", mesh=m2.mesh)
        with pytest.raises(ValueError, match="Expects mesh with ndim equal to number of ProcessGroups"):
            DeviceMesh.from_group(groups, "cpu", mesh=[0, 1, 2, 3], mesh_dim_names=("p", "q"))
        with pytest.raises(ValueError, match="ProcessGroup 0 has ranks"):  # the groups in the wrong order
            DeviceMesh.from_group(groups[::-1], "cpu", mesh=m2.mesh, mesh_dim_names=("p", "q"))

    _on_ranks(4, fn)


def test_negative_mesh_dims_count_from_the_end():
    def fn(r, w):
        m2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        m3 = init_device_mesh("cpu", (1, 4, 1))
        assert (m2.size(-1), m2.size(-2), m3.size(-2), m3.size(-1), m3.size(-3)) == (2, 2, 4, 1, 1)
        with pytest.raises(IndexError, match="mesh dim -3 out of range for a 2-D mesh"):
            m2.size(-3)
        with pytest.raises(IndexError, match="mesh dim 2 out of range"):
            m2.size(2)
        assert m2.get_group(-1).global_ranks == m2.get_group("tp").global_ranks
        assert (m2.get_local_rank(-1), m2.get_local_rank(-2)) == (r % 2, r // 2)

    _on_ranks(4, fn)


class _Holder(nn.Module):
    def __init__(self, mesh):
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.mesh = mesh


def test_meshes_copy_deepcopy_and_pickle_within_the_group():
    def fn(r, w):
        m2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        for c in (copy.copy(m2), copy.deepcopy(m2), pickle.loads(pickle.dumps(m2))):
            assert c == m2 and c is not m2 and c.mesh_dim_names == ("dp", "tp")
            assert c.get_group("tp") is m2.get_group("tp")  # the same groups: no new one
            d = distribute_tensor(tessel.arange(4.0), c["tp"], [Shard(0)])
            assert d.full_tensor().tolist() == [0.0, 1.0, 2.0, 3.0]
        tp = pickle.loads(pickle.dumps(m2["tp"]))
        assert tp == m2["tp"] and tp.mesh_dim_names == ("tp",)
        # what a rank pickles unpickles on its peers (all_gather_object): the 1-D world mesh on every rank
        world = init_device_mesh("cpu", (w,), mesh_dim_names=("w",))
        got = [None] * w
        dist.all_gather_object(got, world)
        assert all(g == world for g in got)
        blob = [pickle.dumps(m2["tp"]) if r == 0 else None]
        dist.broadcast_object_list(blob, 0)
        if r in (0, 1):  # rank 0's tp group
            assert pickle.loads(blob[0]) == m2["tp"]
        else:
            with pytest.raises(RuntimeError, match="cannot unpickle DeviceMesh"):
                pickle.loads(blob[0])
        dp = m2["dp"]
        assert m2["dp", "tp"] is m2 and dp["dp"] is dp  # torch: all of its names give the mesh itself
        holder = copy.deepcopy(_Holder(m2["dp"]))
        assert holder.mesh == m2["dp"] and holder.mesh.get_group() is m2.get_group("dp")

    _on_ranks(4, fn)


def test_comm_debug_mode_keys_tessel_distributed_calls_as_c10d_ops():
    ops = tessel.ops

    def fn(r, w):
        mesh = init_device_mesh("cpu", (w,))

        def counts(body):
            with CommDebugMode() as mode:
                body()
            return mode.get_comm_counts()

        assert counts(lambda: dist.all_reduce(tessel.ones(2))) == {ops.c10d.allreduce_: 1}
        assert counts(lambda: dist.all_reduce(tessel.ones(2), async_op=True).wait()) == {ops.c10d.allreduce_: 1}
        assert counts(lambda: dist.broadcast(tessel.ones(2), 0)) == {ops.c10d.broadcast_: 1}
        assert counts(lambda: dist.all_gather_into_tensor(tessel.zeros(2 * w), tessel.ones(2))) == \
            {ops.c10d._allgather_base_: 1}
        assert counts(lambda: dist.all_gather([tessel.zeros(2) for _ in range(w)], tessel.ones(2))) == \
            {ops.c10d.allgather_: 1}
        assert counts(lambda: dist.gather(tessel.ones(2), [tessel.zeros(2) for _ in range(w)] if r == 0 else None,
                                          dst=0)) == {ops.c10d.gather_: 1}
        assert counts(lambda: dist.all_to_all_single(tessel.zeros(2 * w), tessel.ones(2 * w))) == \
            {ops.c10d.alltoall_base_: 1}
        assert counts(lambda: dist.all_gather_object([None] * w, r)) == {ops.c10d._allgather_base_: 2}
        # a DTensor redistribute keeps the functional keys, also mixed with a plain call
        d = distribute_tensor(tessel.ones(4, 2), mesh, [Shard(0)])
        mixed = counts(lambda: (d.full_tensor(), dist.all_reduce(tessel.ones(1)), d.redistribute(mesh, [Replicate()])))
        assert mixed == {ops.c10d_functional.all_gather_into_tensor: 2, ops.c10d.allreduce_: 1}
        assert str(ops.c10d.allreduce_) == "c10d.allreduce_"

    _on_ranks(2, fn)


class _TwoLayers(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(4, 6), nn.Linear(6, 4)

    def forward(self, x):
        return self.down(self.up(x).relu())


def test_deepcopy_of_a_tensor_parallel_module_copies_its_dtensors_and_refuses_fully_shard():
    from tessel.distributed.fsdp import fully_shard
    from tessel.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    def fn(r, w):
        mesh = init_device_mesh("cpu", (w,))
        tessel.manual_seed(0)
        model = parallelize_module(_TwoLayers(), mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
        with CommDebugMode() as mode:
            twin = copy.deepcopy(model)
        assert mode.get_total_counts() == 0  # torch's: local copies, no communication
        for (name, p), (_, q) in zip(model.named_parameters(), twin.named_parameters()):
            assert q is not p and isinstance(q, nn.Parameter) and q.placements == p.placements
            assert q.full_tensor().tolist() == p.full_tensor().tolist(), name
        with tessel.no_grad():
            twin.up.weight.mul_(0.0)  # the copy owns its storage
        assert model.up.weight.full_tensor().abs().sum().item() > 0
        sharded = fully_shard(_TwoLayers(), mesh=mesh)
        with pytest.raises(AssertionError, match="^FSDP does not support deepcopy. Please use state dict for "
                                                 "serialization.$"):  # torch's
            copy.deepcopy(sharded)

    _on_ranks(2, fn)


def test_a_mesh_over_some_ranks_is_built_and_used_by_them_alone():
    # torch: a mesh smaller than the world (DeviceMesh over a list, init_device_mesh with a smaller shape);
    # fully_shard and DTensors on it run on its ranks, the others get get_coordinate() None
    from tessel.distributed.fsdp import fully_shard

    def fn(r, w):
        groups_before = dist.get_pg_count()
        if r != 3:  # rank 3 takes no part: the mesh is collective over its own ranks only
            mesh = DeviceMesh("cpu", [2, 0])
            assert mesh.get_coordinate() == ((1,) if r == 0 else (0,) if r == 2 else None)
            assert mesh.mesh.tolist() == [2, 0] and mesh.size() == 2
            if r == 1:
                with pytest.raises(RuntimeError, match="rank 1 is not part of DeviceMesh.*ranks=\\[2, 0\\]"):
                    distribute_tensor(tessel.ones(4), mesh, [Shard(0)])
                with pytest.raises(RuntimeError, match="DeviceMesh::axis_group: rank 1 is not part"):
                    mesh.get_group()
            else:
                x = distribute_tensor(tessel.arange(8.0).reshape(4, 2), mesh, [Shard(0)])
                np.testing.assert_array_equal(x.to_local().numpy(), np.arange(8.0).reshape(4, 2)[[2, 3] if r == 0
                                                                                                 else [0, 1]])
                tessel.manual_seed(0)
                m = nn.Linear(4, 3)
                want = (m.weight.detach().clone(), m.bias.detach().clone())
                fully_shard(m, mesh=mesh)
                inp = tessel.arange(8.0).reshape(2, 4) * (mesh.get_coordinate()[0] + 1)
                m(inp).sum().backward()
                # the average over the two ranks' batches of d(sum(x W^T + b))/dW: column sums of x, times 1.5
                grad = m.weight.grad.full_tensor().numpy()
                np.testing.assert_allclose(grad, np.tile(np.array([4.0, 6.0, 8.0, 10.0]) * 1.5, (3, 1)))
                np.testing.assert_allclose(m.bias.grad.full_tensor().numpy(), [2.0, 2.0, 2.0])
                np.testing.assert_array_equal(m.weight.full_tensor().numpy(), want[0].numpy())
            assert dist.get_pg_count() == groups_before + 1  # torch's count: one group for the mesh's one dim
        small = init_device_mesh("cpu", (3,), mesh_dim_names=("dp",))  # ranks 0-2 of 4
        assert small.get_coordinate() == ((r,) if r < 3 else None)
        if r < 3:
            t = tessel.ones(1) * (r + 1)
            dist.all_reduce(t, group=small.get_group("dp"))
            assert t.item() == 6.0
        t = tessel.ones(1)
        dist.all_reduce(t)  # the world is still in step
        assert t.item() == 4.0

    _on_ranks(4, fn)


def test_placements_that_are_not_placements_are_a_type_error_naming_the_entry():
    def fn(r, w):
        mesh = init_device_mesh("cpu", (w,))
        with pytest.raises(TypeError, match=r"distribute_tensor: placements\[0\] is 0 \(int\); expected Shard\(dim\), "
                                            r"Replicate\(\) or Partial\(\)"):
            distribute_tensor(tessel.ones(4), mesh, [0])  # pybind11's "Unable to cast Python instance" before
        with pytest.raises(TypeError, match=r"DTensor.from_local: placements\[0\] is 'S\(0\)' \(str\)"):
            dtm.DTensor.from_local(tessel.ones(2), mesh, ["S(0)"])

    _on_ranks(2, fn)
