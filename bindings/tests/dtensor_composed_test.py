"""tessel's Python-composed functions on DTensors (tessel/_dtensor_compose.py) and t[...] = value on DTensors
(tessel/_tensor.py _dtensor_setitem), on 2 ranks, for Shard(0), Shard(1) and Replicate inputs: each result's
full tensor equals the same function on the plain tensors, gradients too, and each write equals a numpy
float64 copy written the same way; a plain floating tensor next to a DTensor raises torch's mixed-argument
error unless inside implicit_replication()."""
import re
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn.functional as F
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from tessel.distributed.tensor.experimental import implicit_replication

RNG = np.random.default_rng(3)
A = RNG.standard_normal((6, 5)).astype(np.float32)
V = RNG.standard_normal((4, 6, 8)).astype(np.float32)
IMG = RNG.standard_normal((2, 4, 6, 6)).astype(np.float32)
PLACEMENTS = {"S(0)": [Shard(0)], "S(1)": [Shard(1)], "R": [Replicate()]}


def on_two_ranks(body):
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        got[world.rank] = body(init_device_mesh("cpu", (2,)))

    tessel.run_ranks(2, rank_fn)
    return got


# Functions whose compositions build their own constants (ones, zeros, masks, weights): they raised "mixed
# DTensor and dense tensor inputs" on DTensors before.
COMPOSED = {
    "prod": (lambda a: a.prod(1), A),
    "prod_all": (lambda a: (a.abs() + 0.5).prod(), A),
    "pad": (lambda a: F.pad(a, (1, 2), value=0.5), A),
    "avg_pool1d": (lambda v: F.avg_pool1d(v, 2), V),
    "max_pool1d": (lambda v: F.max_pool1d(v, 3, stride=2, padding=1), V),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 2), IMG),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), IMG),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, 4), IMG),
    "interpolate_bilinear": (lambda x: F.interpolate(x, size=(8, 8), mode="bilinear"), IMG),
    "cumprod": (lambda a: a.cumprod(1), A),
    "atan2": (lambda a: tessel.atan2(a, a * 0.5 + 1.0), A),
    "lgamma": (lambda a: (a.abs() + 1.0).lgamma(), A),
    "digamma": (lambda a: (a.abs() + 1.0).digamma(), A),
    "xlogy": (lambda a: tessel.xlogy(a.abs(), a.abs() + 1.0), A),
    "isclose": (lambda a: tessel.isclose(a, a * 1.0000001).float(), A),
    "spherical_bessel_j0": (lambda a: tessel.special.spherical_bessel_j0(a), A),
    "chebyshev_t": (lambda a: tessel.special.chebyshev_polynomial_t(a * 0.5, 3), A),
}


@pytest.mark.parametrize("name", sorted(COMPOSED))
def test_composed_functions_on_dtensors_equal_the_plain_result(name):
    fn, x = COMPOSED[name]
    want = fn(tessel.tensor(x)).numpy()

    def body(mesh):
        return {p: fn(distribute_tensor(tessel.tensor(x), mesh, pl)).full_tensor().numpy()
                for p, pl in PLACEMENTS.items()}

    for r, outs in on_two_ranks(body).items():
        for p, got in outs.items():
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg="%s on rank %d" % (p, r))


@pytest.mark.parametrize("name", ["prod", "pad", "avg_pool1d", "max_pool1d", "cumprod", "lgamma"])
def test_composed_gradients_on_dtensors_equal_the_plain_ones(name):
    fn, x = COMPOSED[name]
    plain = tessel.tensor(x, requires_grad=True)
    weights = tessel.tensor(RNG.standard_normal(tuple(fn(tessel.tensor(x)).shape)).astype(np.float32))
    (fn(plain) * weights).sum().backward()

    def body(mesh):
        out = {}
        for p, pl in PLACEMENTS.items():
            d = distribute_tensor(tessel.tensor(x), mesh, pl).requires_grad_(True)
            y = fn(d)
            (y * distribute_tensor(weights, mesh, list(y.placements) if y.ndim > 1 else [Replicate()])).sum() \
                .full_tensor().backward()
            out[p] = d.grad.full_tensor().numpy()
        return out

    for r, outs in on_two_ranks(body).items():
        for p, g in outs.items():
            np.testing.assert_allclose(g, plain.grad.numpy(), rtol=1e-5, atol=1e-6, err_msg="%s rank %d" % (p, r))


def test_plain_floating_tensors_next_to_dtensors_raise_unless_implicitly_replicated():
    ones = tessel.ones(6, 5)

    def body(mesh):
        d = distribute_tensor(tessel.tensor(A), mesh, [Shard(0)])
        with pytest.raises(tessel.InvalidArgumentError, match=r"addcmul: got mixed DTensor and plain tensor "
                           r"arguments: argument 0 is a DTensor of shape \[6, 5\] \(\[S\(0\)\]\) but argument 1 "
                           r"is a plain float32 tensor of shape \[6, 5\]"):
            tessel.addcmul(d, ones, d)
        with implicit_replication():
            got = tessel.addcmul(d, ones, d, value=2.0).full_tensor().numpy()
        # integer index tensors are replicated values, as indexing reads them
        picked = d.index_select(1, tessel.tensor([4, 0])).full_tensor().numpy()
        return got, picked

    for got, picked in on_two_ranks(body).values():
        np.testing.assert_allclose(got, A + 2.0 * A, rtol=1e-6)  # input + value * ones * d
        np.testing.assert_array_equal(picked, A[:, [4, 0]])


def _write(a, idx, value):
    out = a.copy()
    out[idx] = value
    return out


WRITES = {  # name: (index, value or None for a DTensor value of the indexed shape)
    "row": (1, 0.0),
    "column": ((slice(None), 2), 1.5),
    "rows": (slice(1, 3), -2.0),
    "everything": (Ellipsis, 2.0),
    "strided_rows": (slice(None, None, 2), 7.0),
    "rows_from_dtensor": (slice(0, 2), None),
    "index_list": ([0, 5], 3.0),
}


@pytest.mark.parametrize("name", sorted(WRITES))
def test_setitem_on_dtensors_writes_every_piece(name):
    idx, value = WRITES[name]
    v_np = A[:2] * 10.0 if value is None else value
    want = _write(A.astype(np.float64), idx, v_np)

    def body(mesh):
        out = {}
        for p, pl in PLACEMENTS.items():
            d = distribute_tensor(tessel.tensor(A), mesh, pl)
            v = distribute_tensor(tessel.tensor(v_np), mesh, pl) if value is None else value
            d[idx] = v
            out[p] = (d.placements, d.full_tensor().numpy())
        return out

    for r, outs in on_two_ranks(body).items():
        for p, (placements, got) in outs.items():
            assert [str(q) for q in placements] == [p]  # written in place, in its own layout
            np.testing.assert_array_equal(got, want.astype(np.float32), err_msg="%s rank %d" % (p, r))


def test_setitem_with_a_dtensor_mask_and_its_errors():
    def body(mesh):
        out = {}
        for p, pl in PLACEMENTS.items():
            d = distribute_tensor(tessel.tensor(A), mesh, pl)
            d[d > 0] = 0.0  # the mask stays a DTensor: one where per piece
            e = distribute_tensor(tessel.tensor(A), mesh, pl)
            e[e.abs() > 1.0] = tessel.tensor(-1.0)  # a 0-d plain value is a replicated scalar
            with pytest.raises(tessel.InvalidArgumentError, match=r"t\[...\] = value: t is a DTensor of shape "
                               r"\[6, 5\] \(\[%s\]\) but value is a plain tensor of shape \[5\]" % re.escape(p)):
                d[0] = tessel.ones(5)
            with implicit_replication():
                e[0] = tessel.ones(5)  # the caller vouches that the plain value is the same everywhere
            x = distribute_tensor(tessel.tensor(A), mesh, pl).requires_grad_(True)
            y = x.exp()  # exp saved its output for backward: writing into it would change what backward reads
            with pytest.raises(RuntimeError, match=r"t\[...\] = value on a DTensor that requires grad .* which "
                               r"something else shares .* build the result out of place"):
                y[1:3] = 0.0
            out[p] = (d.full_tensor().numpy(), e.full_tensor().numpy())
        return out

    e_want = np.where(np.abs(A) > 1.0, -1.0, A).astype(np.float32)
    e_want[0] = 1.0
    for r, outs in on_two_ranks(body).items():
        for p, (masked, e) in outs.items():
            np.testing.assert_array_equal(masked, np.where(A > 0, 0.0, A).astype(np.float32), err_msg=p)
            np.testing.assert_array_equal(e, e_want, err_msg=p)


def test_in_place_ops_and_writes_on_dtensors_under_autograd():
    """In-place ops and t[idx] = value on a DTensor activation that requires grad are recorded (the Python
    tensor is pointed at the out-of-place result, in its own placements), with the plain computation's values
    and gradients."""
    v_np = RNG.standard_normal((2, 5)).astype(np.float32)
    w_np = RNG.standard_normal((6, 5)).astype(np.float32)

    def program(x, v, w):
        h = x * 2.0
        h.add_(x)  # 3x
        h.mul_(0.5)
        h[1:3] = v
        g = h * 1.0
        g.zero_()  # still connected, with a zero gradient
        g.copy_(h)
        g.relu_()  # saves its output: written last
        f = h * 1.0
        f.fill_(0.25)
        return (g * w).sum() + (f * w).sum()

    x, v = tessel.tensor(A, requires_grad=True), tessel.tensor(v_np, requires_grad=True)
    want = program(x, v, tessel.tensor(w_np))
    want.backward()

    def body(mesh):
        out = {}
        for p, pl in PLACEMENTS.items():
            xd = distribute_tensor(tessel.tensor(A), mesh, pl).requires_grad_(True)
            vd = distribute_tensor(tessel.tensor(v_np), mesh, [Replicate()]).requires_grad_(True)
            loss = program(xd, vd, distribute_tensor(tessel.tensor(w_np), mesh, pl)).full_tensor()
            loss.backward()
            out[p] = (loss.item(), xd.grad.full_tensor().numpy(), vd.grad.full_tensor().numpy())
        return out

    for r, outs in on_two_ranks(body).items():
        for p, (loss, gx, gv) in outs.items():
            assert loss == pytest.approx(want.item(), rel=1e-6), p
            np.testing.assert_allclose(gx, x.grad.numpy(), rtol=1e-6, err_msg="%s rank %d" % (p, r))
            np.testing.assert_allclose(gv, v.grad.numpy(), rtol=1e-6, err_msg="%s rank %d" % (p, r))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_composed_elementwise_functions_redistribute_each_argument_once():
    """atan2 / maximum / lerp / div(floor) of an S(0) and an S(1) tensor move the second argument once (one
    all-to-all, torch: one all-gather) and their backward brings its gradient back once; a Partial argument is
    reduced once (atan2 ran 7 all-to-alls forward and 103 backward, maximum 6 and 4, div(floor) 12; a Partial
    into atan2 38 all-reduces). Values and gradients equal the plain tensors'."""
    from tessel.distributed.tensor.debug import CommDebugMode
    b0 = tessel.tensor(np.flip(A, 0).copy()) * 0.7 + 2.0
    w0 = tessel.arange(30.0).reshape(6, 5)
    cases = {"atan2": tessel.atan2, "maximum": tessel.maximum, "lerp": lambda a, b: tessel.lerp(a, b, 0.3),
             "div_floor": lambda a, b: tessel.div(a, b, rounding_mode="floor"), "hypot": tessel.hypot,
             "logaddexp": tessel.logaddexp, "copysign": tessel.copysign, "fmax": tessel.fmax,
             "remainder": tessel.remainder}

    def body(mesh):
        out = {}
        for name, fn in cases.items():
            a = distribute_tensor(tessel.tensor(A), mesh, [Shard(0)]).requires_grad_(True)
            b = distribute_tensor(b0, mesh, [Shard(1)]).requires_grad_(True)
            with CommDebugMode() as fwd:
                y = fn(a, b)
            with CommDebugMode() as bwd:
                (y * distribute_tensor(w0, mesh, [Replicate()])).sum().backward()
            out[name] = (fwd.get_comm_counts(), bwd.get_total_counts(), y.placements, y.full_tensor(),
                         *(None if t.grad is None else t.grad.full_tensor() for t in (a, b)))
        p = DTensor.from_local(tessel.tensor(A) * (0.25 if dist.get_rank() == 0 else 0.75), mesh,
                               [tessel.distributed.tensor.Partial()])
        r = distribute_tensor(b0, mesh, [Replicate()])
        with CommDebugMode() as c:
            y = tessel.atan2(p, r)
        out["partial"] = (c.get_total_counts(), y.placements, y.full_tensor())
        # The most sharded argument leads, as torch's strategies rank them: a Replicate first argument is sliced
        # for free and a Partial one reduce-scattered (both gathered the sharded one to Replicate before).
        rep, s1, s0 = (distribute_tensor(t, mesh, [pl]) for t, pl in ((tessel.tensor(A), Replicate()),
                                                                      (b0, Shard(1)), (b0, Shard(0))))
        with CommDebugMode() as c:
            y = tessel.maximum(rep, s1)
        out["replicate_first"] = (c.get_total_counts(), y.placements, y.full_tensor())
        with CommDebugMode() as c:
            y = tessel.atan2(p, s0)
        out["partial_first"] = ({str(k): v for k, v in c.get_comm_counts().items()}, y.placements, y.full_tensor())
        return out

    got = on_two_ranks(body)
    for r in (0, 1):
        for name, fn in cases.items():
            fwd, bwd, placements, y, ga, gb = got[r][name]
            assert {str(k): v for k, v in fwd.items()} == {"c10d_functional.all_to_all_single": 1}, (name, fwd)
            assert bwd <= 2, (name, bwd)
            assert placements == (Shard(0),), name
            a, b = tessel.tensor(A).requires_grad_(True), b0.clone().requires_grad_(True)
            want = fn(a, b)
            (want * w0).sum().backward()
            assert tessel.allclose(y, want.detach(), atol=1e-6), name
            for g, w in ((ga, a.grad), (gb, b.grad)):
                assert (g is None) == (w is None), name  # (copysign's sign argument: no gradient either way)
                assert g is None or tessel.allclose(g, w, atol=1e-6), name
        count, placements, y = got[r]["partial"]
        assert (count, placements) == (1, (Replicate(),))
        assert tessel.allclose(y, tessel.atan2(tessel.tensor(A), b0), atol=1e-6)
        count, placements, y = got[r]["replicate_first"]
        assert (count, placements) == (0, (Shard(1),))
        assert tessel.equal(y, tessel.maximum(tessel.tensor(A), b0))
        counts, placements, y = got[r]["partial_first"]
        assert (counts, placements) == ({"c10d_functional.reduce_scatter_tensor": 1}, (Shard(0),))
        assert tessel.allclose(y, tessel.atan2(tessel.tensor(A), b0), atol=1e-6)


def test_chunk_and_split_along_a_sharded_dim_gather_once():
    from tessel.distributed.tensor.debug import CommDebugMode

    def body(mesh):
        x = distribute_tensor(tessel.tensor(A), mesh, [Shard(1)])
        with CommDebugMode() as c:
            parts = x.chunk(3, dim=1) + x.split(2, dim=1)
        along_other = x.chunk(2, dim=0)  # not the sharded dim: no gather, each piece keeps S(1)
        return c.get_total_counts(), [p.full_tensor() for p in parts], [p.placements for p in along_other]

    for count, parts, other in on_two_ranks(body).values():
        assert count == 2  # one all-gather per call (each piece gathered before: 3 + 3)
        want = tessel.tensor(A).chunk(3, dim=1) + tessel.tensor(A).split(2, dim=1)
        assert all(tessel.equal(p, w) for p, w in zip(parts, want))
        assert other == [(Shard(1),), (Shard(1),)]


def test_masked_fill_with_a_tensor_value_and_rounded_division_keep_torchs_autograd():
    x = tessel.ones(4, 6, requires_grad=True)
    v = tessel.tensor(2.0, requires_grad=True)
    mask = tessel.tensor(np.arange(24).reshape(4, 6) % 3 == 0)
    y = x.masked_fill(mask, v)
    (y * tessel.arange(24.0).reshape(4, 6)).sum().backward()
    assert v.grad.item() == float(np.arange(24)[np.arange(24) % 3 == 0].sum())  # the filled places' weights
    assert tessel.equal(x.grad, tessel.arange(24.0).reshape(4, 6) * ~mask)
    with pytest.raises(RuntimeError, match="masked_fill_ only supports a 0-dimensional value tensor"):
        x.masked_fill(mask, tessel.ones(2, requires_grad=True))
    for mode in ("floor", "trunc"):  # torch: the rounded quotient requires grad, its gradient is zero
        a = tessel.tensor([3.5, -2.5], requires_grad=True)
        q = tessel.div(a, 2.0, rounding_mode=mode)
        assert q.requires_grad
        q.sum().backward()
        assert a.grad.tolist() == [0.0, 0.0]
        assert q.tolist() == ([1.0, -2.0] if mode == "floor" else [1.0, -1.0])
    a, b = tessel.tensor([1.0, -2.0], requires_grad=True), tessel.tensor([-1.0, 3.0], requires_grad=True)
    tessel.copysign(a, b).sum().backward()
    assert (a.grad.tolist(), b.grad.tolist()) == ([-1.0, -1.0], [0.0, 0.0])  # torch: the sign's gradient zeros
    a = tessel.tensor([3.5, -2.5], requires_grad=True)
    q = a // 2  # torch: requires grad, and its backward raises
    assert q.requires_grad and q.tolist() == [1.0, -2.0]
    with pytest.raises(RuntimeError, match="derivative for aten::floor_divide is not implemented"):
        q.sum().backward()


def test_a_sharded_index_selects_each_ranks_rows_without_communication():
    """index_select / gather of a replicated tensor by an index sharded along the selected dim: each rank selects
    its own rows (the output laid out as the index, as torch's; the index was all-gathered); the gradient reaches
    the replicated input summed over the ranks. cumsum along a sharded dim gathers once (six times before)."""
    from tessel.distributed.tensor.debug import CommDebugMode
    x0, g0 = tessel.tensor(A), tessel.arange(35.0).reshape(7, 5)
    rows, cols = [3, 0, 5, 2, 2, 1, 4], [[3, 0, 1, 4], [2, 2, 0, 1], [1, 1, 1, 0], [0, 3, 2, 2], [4, 4, 0, 1],
                                          [1, 0, 3, 3]]

    def body(mesh):
        x = distribute_tensor(x0, mesh, [Replicate()]).requires_grad_(True)
        idx = distribute_tensor(tessel.tensor(rows), mesh, [Shard(0)])
        gidx = distribute_tensor(tessel.tensor(cols), mesh, [Shard(1)])
        with CommDebugMode() as c:
            y = tessel.index_select(x, 0, idx)
            z = tessel.gather(x, 1, gidx)
        (y * distribute_tensor(g0, mesh, [Shard(0)])).sum().backward()
        s = distribute_tensor(x0, mesh, [Shard(1)])
        with CommDebugMode() as c2:
            cum = s.cumsum(1)
        # an index sharded along its rows (as many as x's): each rank gathers from its own rows of x
        x2 = distribute_tensor(x0, mesh, [Replicate()]).requires_grad_(True)
        ridx = distribute_tensor(tessel.tensor(cols), mesh, [Shard(0)])
        with CommDebugMode() as c3:
            w = tessel.gather(x2, 1, ridx)
        (w * distribute_tensor(g0[:6, :4], mesh, [Shard(0)])).sum().backward()
        return (c.get_total_counts(), y.placements, z.placements, y.full_tensor(), z.full_tensor(),
                x.grad.full_tensor(), c2.get_total_counts(), cum.full_tensor(),
                (c3.get_total_counts(), w.placements, w.full_tensor(), x2.grad.full_tensor()))

    ref = x0.clone().requires_grad_(True)
    (tessel.index_select(ref, 0, tessel.tensor(rows)) * g0).sum().backward()
    ref2 = x0.clone().requires_grad_(True)
    (tessel.gather(ref2, 1, tessel.tensor(cols)) * g0[:6, :4]).sum().backward()
    for count, yp, zp, y, z, grad, count2, cum, rowwise in on_two_ranks(body).values():
        assert rowwise[:2] == (0, (Shard(0),))
        assert tessel.equal(rowwise[2], tessel.gather(x0, 1, tessel.tensor(cols)))
        assert tessel.allclose(rowwise[3], ref2.grad)
        assert (count, yp, zp) == (0, (Shard(0),), (Shard(1),))
        assert tessel.equal(y, tessel.index_select(x0, 0, tessel.tensor(rows)))
        assert tessel.equal(z, tessel.gather(x0, 1, tessel.tensor(cols)))
        assert tessel.allclose(grad, ref.grad)
        assert count2 == 1 and tessel.allclose(cum, x0.cumsum(1))


def test_index_select_and_gather_with_an_index_sharded_on_one_axis_of_a_2d_mesh_give_the_gradient_once():
    # x replicated, the index Shard on one mesh axis and Replicate on the other: x's gradient was marked Partial on
    # both axes, so the Replicate axis counted it once per rank (3x on a 2 x 3 mesh). torch 2.15: [0,0,0,1,0,1,0].
    from tessel.distributed.tensor import Partial
    out = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2, 3))
        got = []
        for op, index_placements in (("index_select", [Shard(0), Replicate()]),
                                     ("gather", [Replicate(), Shard(0)])):
            x = distribute_tensor(tessel.arange(7.0), mesh, [Replicate(), Replicate()]).requires_grad_(True)
            idx = distribute_tensor(tessel.tensor([3, 5]), mesh, index_placements)
            y = x.index_select(0, idx) if op == "index_select" else tessel.gather(x, 0, idx)
            assert y.full_tensor().tolist() == [3.0, 5.0]
            y.sum().backward()
            got.append((tuple(x.grad.placements), x.grad.full_tensor().tolist()))
        out[world.rank] = got
        dist.destroy_process_group()

    tessel.run_ranks(6, rank_fn)
    want = [0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    for got in out.values():
        assert got == [((Partial(), Replicate()), want), ((Replicate(), Partial()), want)]
