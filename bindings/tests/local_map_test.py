"""DTensor's experimental and debug faces from Python: local_map (values and gradients against numpy in float64,
in_grad_placements, redistribute_inputs, torch's misuse errors), to_local / from_local with grad_placements
(and their default: a Partial value's local gradient is the whole one), redistribute to Partial,
visualize_sharding's table (golden text on 1-D and 2-D meshes), tessel.utils._pytree, and torch's small API
surface around them: placements' is_shard / is_replicate / is_partial / reduce_op / str forms,
Shard.local_shard_size_and_offset (against torch.chunk's split in numpy), DeviceMesh.mesh / device_type /
get_all_groups, ProcessGroup.rank() / size() / group_name."""
import collections
import contextlib
import io
import re
import sys
import threading

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from tessel.distributed.tensor.debug import visualize_sharding
from tessel.distributed.tensor.experimental import local_map
from tessel.utils import _pytree as pytree

RNG = np.random.default_rng(7)
W_NP, X_NP, C_NP = RNG.standard_normal((4, 6)), RNG.standard_normal((6, 5)), RNG.standard_normal((4, 5))


def on_two_ranks(body, mesh_shape=(2,)):
    """body(mesh) on every rank; returns {rank: result}."""
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        got[world.rank] = body(init_device_mesh("cpu", mesh_shape))

    tessel.run_ranks(int(np.prod(mesh_shape)), rank_fn)
    return got


def t(a, grad=False):
    return tessel.tensor(np.asarray(a, dtype=np.float32), requires_grad=grad)


def test_local_map_matmul_partial_output_values_and_gradients():
    def body(mesh):
        mm = local_map(lambda w, x: w @ x, out_placements=[Partial()], in_placements=([Shard(1)], [Shard(0)]),
                       device_mesh=mesh)
        w = distribute_tensor(t(W_NP), mesh, [Shard(1)]).requires_grad_(True)
        x = distribute_tensor(t(X_NP), mesh, [Shard(0)]).requires_grad_(True)
        y = mm(w, x)
        c = distribute_tensor(t(C_NP), mesh, [Replicate()])
        (y * c).sum().backward()
        return (y.placements, y.full_tensor().numpy(), w.grad.placements, w.grad.full_tensor().numpy(),
                x.grad.full_tensor().numpy())

    got = on_two_ranks(body)
    for r in (0, 1):
        placements, y, w_placements, dw, dx = got[r]
        assert placements == (Partial(),)
        np.testing.assert_allclose(y, W_NP @ X_NP, rtol=1e-5, atol=1e-5)
        assert w_placements == (Shard(1),)
        np.testing.assert_allclose(dw, C_NP @ X_NP.T, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(dx, W_NP.T @ C_NP, rtol=1e-5, atol=1e-5)


def test_local_map_in_grad_placements_partial_sums_a_replicated_inputs_gradient():
    # y = x @ w.T with w's rows sharded: each rank's d(loss)/dx is a partial sum over its rows of w.
    x_np, w_np, g_np = RNG.standard_normal((3, 4)), RNG.standard_normal((6, 4)), RNG.standard_normal((3, 6))

    def body(mesh, grad_placements):
        f = local_map(lambda x, w: x @ w.t(), out_placements=[Shard(1)], in_placements=([Replicate()], [Shard(0)]),
                      in_grad_placements=grad_placements, device_mesh=mesh)
        x = distribute_tensor(t(x_np), mesh, [Replicate()]).requires_grad_(True)
        w = distribute_tensor(t(w_np), mesh, [Shard(0)])
        y = f(x, w)
        g = distribute_tensor(t(g_np), mesh, [Shard(1)])
        (y * g).sum().backward()
        return y.full_tensor().numpy(), x.grad.placements, x.grad.full_tensor().numpy()

    got = on_two_ranks(lambda mesh: body(mesh, ([Partial()], [Shard(0)])))
    for r in (0, 1):
        y, placements, dx = got[r]
        np.testing.assert_allclose(y, x_np @ w_np.T, rtol=1e-5, atol=1e-5)
        assert placements == (Partial(),)
        np.testing.assert_allclose(dx, g_np @ w_np, rtol=1e-5, atol=1e-5)
    # Without the hint the local gradient is taken as Replicate: each rank keeps only its own half of the sum.
    plain = on_two_ranks(lambda mesh: body(mesh, None))
    assert not np.allclose(plain[0][2], g_np @ w_np, atol=1e-3)


def test_local_map_redistributes_only_when_asked_and_passes_plain_values():
    def body(mesh):
        f = local_map(lambda x, k: (x * k, k + 1), out_placements=([Shard(0)], None), in_placements=([Shard(0)], None),
                      device_mesh=mesh)
        x = distribute_tensor(t(W_NP), mesh, [Replicate()])
        with pytest.raises(ValueError, match="redistribute_inputs=True"):
            f(x, 3)
        g = local_map(lambda x, k: (x * k, k + 1), out_placements=([Shard(0)], None),
                      in_placements=([Shard(0)], None), redistribute_inputs=True)
        y, k = g(x, 3)
        with pytest.raises(AssertionError, match="received 1 out_placements but 2 is expected"):
            local_map(lambda x: (x, x), out_placements=[Shard(0)])(x)
        with pytest.raises(AssertionError, match="in_placements length 1 does not match the number of input args 2"):
            local_map(lambda x, k: x, out_placements=[Shard(0)], in_placements=([Shard(0)],))(x, 2)
        with pytest.raises(AssertionError, match="Non-tensor output 4 expects None placements"):
            local_map(lambda x: (x, 4), out_placements=([Replicate()], [Replicate()]))(x)
        plain = f(tessel.ones(2, 2), 5)  # no DTensor argument: the function's own result
        return y.placements, tuple(y.to_local().shape), y.full_tensor().numpy(), k, type(plain[0]), plain[0].is_distributed

    got = on_two_ranks(body)
    for r in (0, 1):
        placements, local_shape, full, k, plain_type, plain_dist = got[r]
        assert placements == (Shard(0),) and local_shape == (2, 6) and k == 4
        np.testing.assert_allclose(full, 3 * W_NP, rtol=1e-6)
        assert plain_type is tessel.Tensor and not plain_dist


def test_local_map_decorator_form_and_nested_arguments():
    def body(mesh):
        @local_map(out_placements=[Shard(0)], in_placements=([Shard(0)], [Shard(0)]), device_mesh=mesh)
        def add(pair):
            return pair["a"] + 2 * pair["b"]

        a = distribute_tensor(t(W_NP), mesh, [Shard(0)])
        b = distribute_tensor(t(W_NP[::-1].copy()), mesh, [Shard(0)])
        return add({"a": a, "b": b}).full_tensor().numpy()

    got = on_two_ranks(body)
    np.testing.assert_allclose(got[1], W_NP + 2 * W_NP[::-1], rtol=1e-6)


def test_to_local_and_from_local_grad_placements():
    def body(mesh):
        # to_local(grad_placements=[Partial()]): the gradient of a replicated tensor is each rank's partial sum.
        x = distribute_tensor(t(W_NP), mesh, [Replicate()]).requires_grad_(True)
        rank = mesh.get_local_rank()
        (x.to_local(grad_placements=[Partial()]) * (rank + 1.0)).sum().backward()
        # from_local(grad_placements=[Partial()]): the local gradient stays a partial piece of the full one.
        base = t(W_NP, grad=True)
        p = DTensor.from_local(base * 1.0, mesh, [Partial()], grad_placements=[Partial()])
        (p.redistribute(mesh, [Replicate()]).to_local() * t(C_NP[:, :1])).sum().backward()
        d = DTensor.from_local(t(W_NP, grad=False), mesh, [Replicate()])
        with pytest.raises(ValueError, match="grad_placements"):
            d.to_local(grad_placements=[Replicate(), Replicate()])
        return x.grad.placements, x.grad.full_tensor().numpy(), base.grad.numpy()

    got = on_two_ranks(body)
    full_grad = np.broadcast_to(C_NP[:, :1], W_NP.shape)
    for r in (0, 1):
        placements, dx, _ = got[r]
        assert placements == (Partial(),)
        np.testing.assert_allclose(dx, np.full(W_NP.shape, 3.0))  # (1 + 2) summed over the two ranks
    # The pieces sum to the gradient (without the hint each rank would hold all of it: twice the sum).
    np.testing.assert_allclose(got[0][2] + got[1][2], full_grad, rtol=1e-6)


def test_default_local_gradients_read_partial_as_replicate():
    """torch 2.15's gradient placement guarantee: to_local / from_local of a Partial value take the local
    gradient as the whole (Replicate) gradient. Values as torch 2.15 printed them for the same program."""
    def body(mesh):
        rank = mesh.get_local_rank()
        x = tessel.arange(4.0).reshape(4, 1)
        d = distribute_tensor(x, mesh, [Shard(0)]).requires_grad_(True)
        loss = (d * d).sum()  # Partial(sum): each rank's local sum of squares
        loss.to_local().backward()  # the gradient 1 is the whole loss's: d.grad = 2x, not 2 * 2x
        loc = (tessel.ones(3) * (rank + 1.0)).requires_grad_(True)
        z = DTensor.from_local(loc, mesh, [Partial()]) * 3.0
        (z * 1.0).sum().full_tensor().backward()  # a Replicate gradient arrives: 3 on every rank
        loc2 = (tessel.ones(3) * (rank + 1.0)).requires_grad_(True)
        z2 = DTensor.from_local(loc2, mesh, [Partial()]) * 3.0
        z2.to_local().sum().backward()  # to_local's Replicate reading: 3 on every rank, as torch
        return (loss.placements, float(loss.to_local().item()), d.grad.placements, d.grad.to_local().numpy(),
                loc.grad.numpy(), loc2.grad.numpy())

    got = on_two_ranks(body)
    for r in (0, 1):
        placements, local_loss, grad_placements, grad, g1, g2 = got[r]
        assert placements == (Partial(),)
        assert local_loss == [1.0, 13.0][r]
        assert grad_placements == (Shard(0),)
        np.testing.assert_array_equal(grad.ravel(), [[0.0, 2.0], [4.0, 6.0]][r])
        np.testing.assert_array_equal(g1, [3.0] * 3)
        np.testing.assert_array_equal(g2, [3.0] * 3)


def test_redistribute_to_partial():
    """Shard -> Partial(sum) is torch's (the piece in zeros, no communication); the other Partial targets are
    refused with torch's message (C++'s DTensor::Redistribute does Replicate -> Partial exactly: redistribute_test).
    5 rows on 2 ranks: uneven pieces of 3 and 2."""
    x_np = np.arange(10.0, dtype=np.float32).reshape(5, 2)

    def body(mesh):
        out = {}
        for src, dst in [(Shard(0), Partial()), (Shard(1), Partial())]:
            d = distribute_tensor(t(x_np), mesh, [src]).requires_grad_(True)
            y = d.redistribute(mesh, [dst])
            out[(str(src), str(dst))] = (y.placements, y.to_local().numpy(), y.full_tensor().numpy())
            (y.to_local() * 2.0).sum().backward()  # the whole gradient is 2 (to_local reads it as Replicate)
            out[(str(src), str(dst), "grad")] = (d.grad.placements, d.grad.full_tensor().numpy())
        for src, dst in [(Replicate(), Partial()), (Replicate(), Partial("avg")), (Shard(0), Partial("max")),
                         (Partial(), Partial("max"))]:
            d = distribute_tensor(t(x_np), mesh, [src]) if not src.is_partial() else DTensor.from_local(
                t(x_np), mesh, [src])
            with pytest.raises(RuntimeError, match=re.escape(f"Can not redistribute from {src} to {dst}, only Shard "
                                                             "to Partial(sum) redistribution is supported!")):
                d.redistribute(mesh, [dst])
        return out

    got = on_two_ranks(body)
    for r in (0, 1):
        o = got[r]
        rows = x_np.copy()
        rows[3:] = 0.0 if r == 0 else rows[3:]
        rows[:3] = 0.0 if r == 1 else rows[:3]
        np.testing.assert_array_equal(o[("S(0)", "P(sum)")][1], rows)  # torch 2.15 prints the same
        cols = x_np.copy()
        cols[:, 1 - r] = 0.0
        np.testing.assert_array_equal(o[("S(1)", "P(sum)")][1], cols)
        for key in [("S(0)", "P(sum)"), ("S(1)", "P(sum)")]:
            assert o[key][0] == (Partial(),)
            np.testing.assert_array_equal(o[key][2], x_np)
            grad_placements, grad = o[key + ("grad",)]
            assert str(grad_placements[0]) == key[0]
            np.testing.assert_array_equal(grad, np.full_like(x_np, 2.0))


class PerThreadStdout:
    """sys.stdout for the ranks (threads) of run_ranks: each thread's prints go to its own buffer."""

    def __init__(self):
        self.local = threading.local()

    def write(self, s):
        if not hasattr(self.local, "buf"):
            self.local.buf = io.StringIO()
        return self.local.buf.write(s)

    def flush(self):
        pass

    def take(self):
        buf, self.local.buf = getattr(self.local, "buf", io.StringIO()), io.StringIO()
        return buf.getvalue()


def printed(fn):
    out = sys.stdout
    assert isinstance(out, PerThreadStdout)
    out.take()
    fn()
    return out.take()


def test_visualize_sharding_tables():
    with contextlib.redirect_stdout(PerThreadStdout()):
        check_visualize_sharding_tables()


def check_visualize_sharding_tables():
    def body(mesh):
        rows = printed(lambda: visualize_sharding(distribute_tensor(tessel.zeros(4, 6), mesh, [Shard(0)])))
        cols = printed(lambda: visualize_sharding(distribute_tensor(tessel.zeros(5), mesh, [Shard(0)]), header="v"))
        rep = printed(lambda: visualize_sharding(distribute_tensor(tessel.zeros(2, 3), mesh, [Replicate()])))
        with pytest.raises(RuntimeError, match="only 1D or 2D"):
            visualize_sharding(distribute_tensor(tessel.zeros(2, 2, 2), mesh, [Shard(0)]))
        return rows, cols, rep

    got = on_two_ranks(body)
    assert got[1] == ("", "", "")  # only the rank at local rank 0 on every mesh dim prints, as torch
    rows, cols, rep = got[0]
    # Golden text printed by torch 2.15 (with tabulate) for the same tensors and meshes.
    assert rows == "         Col 0-5\n-------  ---------\nRow 0-1  cpu:0\nRow 2-3  cpu:1\n"
    assert cols == "         Col 0-0\n-------  ---------\nRow 0-2  cpu:0\nRow 3-4  cpu:1\n"
    assert rep == "         Col 0-2\n-------  ---------\nRow 0-1  cpu:0,1\n"
    grid = on_two_ranks(lambda mesh: printed(lambda: visualize_sharding(
        distribute_tensor(tessel.zeros(4, 6), mesh, [Shard(0), Shard(1)]))), mesh_shape=(2, 2))
    assert grid[0] == ("         Col 0-2    Col 3-5\n-------  ---------  ---------\n"
                       "Row 0-1  cpu:0      cpu:1\nRow 2-3  cpu:2      cpu:3\n")
    four = on_two_ranks(lambda mesh: (printed(lambda: visualize_sharding(
        distribute_tensor(tessel.zeros(5), mesh, [Shard(0)]))), printed(lambda: visualize_sharding(
            distribute_tensor(tessel.zeros(2, 3), mesh, [Replicate()])))), mesh_shape=(4,))
    assert four[0] == ("         Col 0-0\n-------  ---------\nRow 0-1  cpu:0\nRow 2-3  cpu:1\nRow 4-4  cpu:2\n"
                       "Row 5-4  cpu:3\n",  # torch.chunk's empty last piece
                       "         Col 0-2\n-------  -----------\nRow 0-1  cpu:0,1,2,3\n")


def test_pytree_flatten_unflatten_map():
    NT = collections.namedtuple("NT", "a b")
    tree = {"x": (1, 2), "y": [3, None, NT(4, [5])], "z": collections.OrderedDict(w=6)}
    leaves, spec = pytree.tree_flatten(tree)
    assert leaves == [1, 2, 3, None, 4, 5, 6] and spec.num_leaves == 7  # None is a leaf, as torch 2.15's
    back = pytree.tree_unflatten([v * 10 if v is not None else None for v in leaves], spec)
    assert back == {"x": (10, 20), "y": [30, None, NT(40, [50])], "z": collections.OrderedDict(w=60)}
    assert type(back["y"][2]) is NT and type(back["z"]) is collections.OrderedDict
    assert pytree.tree_map(lambda a, b: a - b if a is not None else None, tree, tree) == pytree.tree_unflatten(
        [0, 0, 0, None, 0, 0, 0], spec)
    assert pytree.tree_map_only(str, str.upper, ["a", 1, ("b",)]) == ["A", 1, ("B",)]
    with pytest.raises(ValueError, match="structures differ"):
        pytree.tree_map(lambda a, b: a, [1, 2], (1, 2))
    with pytest.raises(ValueError, match="has length 2 but the spec refers to a pytree that holds 7 items"):
        pytree.tree_unflatten([1, 2], spec)


def test_placement_predicates_and_string_forms():
    s, r, p, m = Shard(1), Replicate(), Partial(), Partial("max")
    assert (s.is_shard(), s.is_shard(1), s.is_shard(0), s.is_replicate(), s.is_partial()) == (True, True, False,
                                                                                             False, False)
    assert (r.is_shard(), r.is_replicate(), r.is_partial()) == (False, True, False)
    assert (p.is_shard(), p.is_replicate(), p.is_partial(), p.is_partial("sum"), m.is_partial("sum")) == (
        False, False, True, True, False)
    assert (p.reduce_op, m.reduce_op) == ("sum", "max")
    assert [str(x) for x in (s, r, p)] == ["S(1)", "R", "P(sum)"] and repr(s) == "Shard(dim=1)"
    for size in range(0, 12):
        for n in range(1, 6):
            pieces = np.array_split(np.arange(size), [min(size, -(-size // n) * k) for k in range(1, n)])
            for rank in range(n):  # torch.chunk: pieces of ceil(size / n), the last ones short or empty
                want = (len(pieces[rank]), int(pieces[rank][0]) if len(pieces[rank]) else size)
                assert Shard.local_shard_size_and_offset(size, n, rank) == want, (size, n, rank)
    # torch 2.15 on these: torch.chunk(arange(5), 4) has pieces 2, 2, 1 and an empty fourth at offset 5
    assert [Shard.local_shard_size_and_offset(5, 4, k) for k in range(4)] == [(2, 0), (2, 2), (1, 4), (0, 5)]
    assert [Shard.local_shard_size_and_offset(6, 4, k) for k in range(4)] == [(2, 0), (2, 2), (2, 4), (0, 6)]
    with pytest.raises(ValueError, match="0 <= rank < num_chunks"):
        Shard.local_shard_size_and_offset(4, 2, 2)


def test_mesh_and_group_torch_spellings():
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        g = mesh.get_group("tp")
        got[world.rank] = (mesh.device_type, mesh.mesh.tolist(), [x.size for x in mesh.get_all_groups()], g.rank(),
                           g.size(), g.rank == g.rank(), world.size() * 10, g.group_name == g.name, mesh.mesh.dtype)

    tessel.run_ranks(4, rank_fn)
    for r in range(4):
        assert got[r] == ("cpu", [[0, 1], [2, 3]], [2, 2], r % 2, 2, True, 40, True, tessel.int32)  # torch.int


def test_device_mesh_constructor_with_any_rank_layout():
    # torch's DeviceMesh("cpu", mesh, mesh_dim_names=): here dim "tp" pairs ranks (0, 2) and (1, 3)
    from tessel.distributed.device_mesh import DeviceMesh
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = DeviceMesh("cpu", tessel.tensor([[0, 2], [1, 3]]), mesh_dim_names=("dp", "tp"))
        t = tessel.tensor([float(world.rank)])
        dist.all_reduce(t, group=mesh.get_group("tp"))
        d = distribute_tensor(tessel.arange(4.0), mesh["tp"], [Shard(0)])
        got[world.rank] = (mesh.mesh.tolist(), mesh.get_coordinate(), t.item(), d.to_local().tolist())
        with pytest.raises(ValueError, match="are not the ranks of the world group"):
            DeviceMesh("cpu", [[0, 1], [1, 3]])
        flat = DeviceMesh("cpu", [3, 2, 1, 0])
        got[world.rank] += (flat.get_coordinate(),)

    tessel.run_ranks(4, rank_fn)
    coords = {0: (0, 0), 2: (0, 1), 1: (1, 0), 3: (1, 1)}  # tuples, as torch 2.15's get_coordinate
    for r in range(4):
        layout, coord, reduced, local, flat_coord = got[r]
        assert layout == [[0, 2], [1, 3]] and coord == coords[r]
        assert reduced == {0: 2.0, 2: 2.0, 1: 4.0, 3: 4.0}[r]  # the tp group sums 0 + 2 or 1 + 3
        assert local == [[0.0, 1.0], [2.0, 3.0]][coords[r][1]]
        assert flat_coord == (3 - r,)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
