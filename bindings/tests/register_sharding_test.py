"""register_sharding (torch.distributed.tensor.experimental) for custom ops on 2 and 2 x 2 thread ranks: the strategy
torch 2.15 picks (each expected placement printed by torch 2.15 with the same op, strategies and inputs on a fake
process group), exact collective counts, values and gradients against numpy in float64, uneven shards, tuple
outputs, keyword tensors, scalar and dense arguments, register_autograd, mutated arguments and torch's errors."""
import numpy as np
import pytest

import tessel
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from tessel.distributed.tensor.experimental import implicit_replication, register_sharding
from ranks_testing import on_ranks as ranks, placed as placed_np

RNG = np.random.default_rng(11)


@tessel.library.custom_op("rs_test::rowsoftmax", mutates_args=())
def rowsoftmax(x: tessel.Tensor) -> tessel.Tensor:
    return tessel.softmax(x, dim=-1)


@register_sharding(tessel.ops.rs_test.rowsoftmax.default)
def _rowsoftmax_sharding(x):
    strategies = [([Replicate()], [Replicate()])]
    for d in range(x.ndim - 1):
        strategies.append(([Shard(d)], [Shard(d)]))
    return strategies


@tessel.library.custom_op("rs_test::mm", mutates_args=())
def mm(a: tessel.Tensor, b: tessel.Tensor) -> tessel.Tensor:
    return a @ b


@register_sharding(tessel.ops.rs_test.mm.default)
def _mm_sharding(a, b):
    return [([Replicate()], [Replicate(), Replicate()]), ([Shard(0)], [Shard(0), Replicate()]),
            ([Shard(1)], [Replicate(), Shard(1)]), ([Partial()], [Shard(1), Shard(0)])]


def on_ranks(body, mesh_shape=(2,)):
    """body(mesh) on every rank; returns {rank: result}."""
    return ranks(int(np.prod(mesh_shape)), lambda rank: body(init_device_mesh("cpu", mesh_shape)))


def t(a, grad=False):
    return tessel.tensor(np.asarray(a, dtype=np.float32), requires_grad=grad)


def softmax64(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def placed(full, mesh, placements):
    return placed_np(np.asarray(full, dtype=np.float32), mesh, placements)


def test_one_dim_mesh_picks_torchs_strategy_with_exact_collectives_and_values():
    x_np = RNG.standard_normal((5, 6))  # 5 rows: uneven over 2 ranks

    def body(mesh):
        out = {}
        for name, pl in (("S0", [Shard(0)]), ("S1", [Shard(1)]), ("R", [Replicate()]), ("P", [Partial()])):
            x = placed(x_np, mesh, pl)
            with tessel.CommTracer() as tracer:
                y = rowsoftmax(x)
            out[name] = (y.placements, tuple(y.shape), tuple(y.to_local().shape), tracer.summary(),
                         y.full_tensor().numpy())
        return out

    got = on_ranks(body)
    want = softmax64(x_np)
    # torch 2.15: S(0) stays S(0); S(1) (the softmax dim) gathers to R (cheaper than an all-to-all); P(sum) is
    # reduce-scattered to S(0)
    expected = {"S0": ((Shard(0),), "all_gather(axis0) x1"), "S1": ((Replicate(),), "all_gather(axis0) x1"),
                "R": ((Replicate(),), ""), "P": ((Shard(0),), "reduce_scatter(axis0) x1, all_gather(axis0) x1")}
    for r in (0, 1):
        for name, (placements, trace) in expected.items():
            got_pl, shape, local_shape, got_trace, full = got[r][name]
            assert got_pl == placements, (name, got_pl)
            assert shape == (5, 6)
            # a Shard(0) output's global shape comes from every rank's piece: rows 3 and 2
            assert local_shape == ((3 - r, 6) if placements == (Shard(0),) else (5, 6)), (name, local_shape)
            # the Shard outputs' one extra all_gather is the pieces' shapes (torch reads its fake kernel instead)
            assert got_trace == trace, (name, got_trace)
            np.testing.assert_allclose(full, want, rtol=1e-6, atol=1e-7)


def test_two_dim_mesh_prices_moves_in_torchs_greedy_order():
    x_np = RNG.standard_normal((4, 6, 8))
    a_np, b_np = RNG.standard_normal((8, 8)), RNG.standard_normal((8, 8))
    # (input placements) -> output placements torch 2.15 picks on a 2 x 2 mesh
    soft_cases = {
        (Shard(2), Replicate()): (Replicate(), Shard(0)),   # chunk on dim 1 first, the gather sends half
        (Replicate(), Shard(2)): (Replicate(), Replicate()),  # the gather comes first: no cheaper chunk
        (Partial(), Shard(0)): (Shard(1), Shard(0)),
        (Shard(0), Shard(1)): (Shard(0), Shard(1)),
        (Partial(), Replicate()): (Shard(0), Replicate()),
    }
    mm_cases = {
        ((Shard(0), Replicate()), (Shard(0), Shard(0))): (Partial(), Partial()),
        ((Replicate(), Shard(0)), (Replicate(), Shard(1))): (Replicate(), Shard(0)),
        ((Shard(1), Shard(0)), (Replicate(), Shard(1))): (Partial(), Shard(1)),
        ((Partial(), Replicate()), (Replicate(), Replicate())): (Shard(0), Replicate()),
        ((Shard(0), Shard(1)), (Shard(1), Replicate())): (Shard(0), Partial()),
    }

    def body(mesh):
        soft = {pl: rowsoftmax(placed(x_np, mesh, list(pl))) for pl in soft_cases}
        mms = {k: mm(placed(a_np, mesh, list(k[0])), placed(b_np, mesh, list(k[1]))) for k in mm_cases}
        return ({k: (v.placements, v.full_tensor().numpy()) for k, v in soft.items()},
                {k: (v.placements, v.full_tensor().numpy()) for k, v in mms.items()})

    got = on_ranks(body, (2, 2))
    for r in range(4):
        soft, mms = got[r]
        for pl, want_pl in soft_cases.items():
            assert soft[pl][0] == want_pl, (pl, soft[pl][0])
            np.testing.assert_allclose(soft[pl][1], softmax64(x_np), rtol=1e-6, atol=1e-7)
        for k, want_pl in mm_cases.items():
            assert mms[k][0] == want_pl, (k, mms[k][0])
            np.testing.assert_allclose(mms[k][1], a_np @ b_np, rtol=1e-5, atol=1e-5)


def test_gradients_flow_through_the_local_kernel_and_through_register_autograd():
    @tessel.library.custom_op("rs_test::scaled_square", mutates_args=())
    def scaled_square(x: tessel.Tensor, s: float) -> tessel.Tensor:
        return x * x * s

    @register_sharding(scaled_square)
    def _(x, s):
        return [([Replicate()], [Replicate(), None])] + [([Shard(d)], [Shard(d), None]) for d in range(x.ndim)]

    @tessel.library.custom_op("rs_test::scaled_square_ag", mutates_args=())
    def scaled_square_ag(x: tessel.Tensor, s: float) -> tessel.Tensor:
        return x * x * s

    def setup(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.s = inputs[1]

    calls = []

    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        calls.append((type(g).__name__, tuple(g.placements)))
        return g * x * (2 * ctx.s), None

    scaled_square_ag.register_autograd(backward, setup_context=setup)
    register_sharding(scaled_square_ag)(_)
    x_np, c_np = RNG.standard_normal((4, 6)), RNG.standard_normal((4, 6))

    def body(mesh):
        out = []
        for op in (scaled_square, scaled_square_ag):
            x = distribute_tensor(t(x_np), mesh, [Shard(1)]).requires_grad_(True)
            y = op(x, 1.5)
            (y * distribute_tensor(t(c_np), mesh, [Shard(1)])).sum().backward()
            out.append((y.placements, y.full_tensor().numpy(), x.grad.placements, x.grad.full_tensor().numpy()))
        return out

    got = on_ranks(body)
    assert calls == [("Tensor", (Shard(1),))] * 2  # the registered backward ran on each rank, on a DTensor
    for r in (0, 1):
        for placements, y, grad_placements, grad in got[r]:
            assert placements == (Shard(1),) and grad_placements == (Shard(1),)
            np.testing.assert_allclose(y, 1.5 * x_np * x_np, rtol=1e-6)
            np.testing.assert_allclose(grad, 3.0 * x_np * c_np, rtol=1e-5, atol=1e-6)


def test_a_replicated_input_of_a_sharded_output_gets_a_partial_gradient():
    # mm with a [S(0)], b [R]: each rank multiplies its rows, so b's gradient is a partial sum per rank. Read as
    # Replicate, every rank's b.grad would hold one rank's share only.
    a_np, b_np, c_np = RNG.standard_normal((6, 4)), RNG.standard_normal((4, 5)), RNG.standard_normal((6, 5))

    def body(mesh):
        a = distribute_tensor(t(a_np), mesh, [Shard(0)]).requires_grad_(True)
        b = distribute_tensor(t(b_np), mesh, [Replicate()]).requires_grad_(True)
        y = mm(a, b)
        (y * distribute_tensor(t(c_np), mesh, [Shard(0)])).sum().backward()
        return y.placements, a.grad.placements, b.grad.placements, a.grad.full_tensor().numpy(), \
            b.grad.full_tensor().numpy()

    got = on_ranks(body)
    for r in (0, 1):
        y_pl, a_pl, b_pl, da, db = got[r]
        assert (y_pl, a_pl, b_pl) == ((Shard(0),), (Shard(0),), (Partial(),))
        np.testing.assert_allclose(da, c_np @ b_np.T, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(db, a_np.T @ c_np, rtol=1e-5, atol=1e-6)


def test_a_partial_avg_output_gives_a_replicated_input_an_averaged_gradient():
    # addmm (the same engine) with a Partial(avg) matrix: the output is Partial(avg), the average of the ranks'
    # products, so the Replicate matrix's gradient is the average of theirs (read as Partial(sum) it was n times
    # too large).
    a_np, b_np, c_np = RNG.standard_normal((4, 3)), RNG.standard_normal((3, 5)), RNG.standard_normal((4, 5))

    def body(mesh):
        bias = distribute_tensor(t(np.zeros((4, 5))), mesh, [Replicate()])
        a = DTensor.from_local(t(a_np), mesh, [Partial("avg")])
        b = distribute_tensor(t(b_np), mesh, [Replicate()]).requires_grad_(True)
        y = tessel.addmm(bias, a, b)
        (y * distribute_tensor(t(c_np), mesh, [Replicate()])).sum().backward()
        return y.placements, y.full_tensor().numpy(), b.grad.placements, b.grad.full_tensor().numpy()

    got = on_ranks(body)
    for r in (0, 1):
        y_pl, y, b_pl, db = got[r]
        assert y_pl == (Partial("avg"),) and b_pl == (Partial("avg"),)
        np.testing.assert_allclose(y, a_np @ b_np, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(db, a_np.T @ c_np, rtol=1e-5, atol=1e-6)


def test_tuple_outputs_keyword_tensors_and_a_non_tensor_first_argument():
    @tessel.library.custom_op("rs_test::center", mutates_args=())
    def center(tag: str, x: tessel.Tensor, *, shift: tessel.Tensor) -> tuple[tessel.Tensor, tessel.Tensor]:
        mean = x.mean(dim=-1, keepdim=True)
        return x - mean + shift, mean

    seen = []

    @register_sharding(center)
    def _(tag, x, *, shift):
        seen.append((tag, type(x).__name__, tuple(x.shape), x.placements, shift.placements))
        rows = [([Replicate(), Replicate()], [None, Replicate(), Replicate()])]
        for d in range(x.ndim - 1):
            rows.append(([Shard(d), Shard(d)], [None, Shard(d), Replicate()]))
        return rows

    x_np, shift_np = RNG.standard_normal((6, 4)), RNG.standard_normal((1, 4))

    def body(mesh):
        x = distribute_tensor(t(x_np), mesh, [Shard(0)])
        shift = distribute_tensor(t(shift_np), mesh, [Replicate()])
        with tessel.CommTracer() as tracer:
            y, mean = center("tag", x, shift=shift)
        return (y.placements, mean.placements, tracer.summary(), y.full_tensor().numpy(),
                mean.full_tensor().numpy())

    got = on_ranks(body)
    assert seen[0] == ("tag", "DTensorSpec", (6, 4), (Shard(0),), (Replicate(),))
    for r in (0, 1):
        y_pl, mean_pl, trace, y, mean = got[r]
        assert y_pl == (Shard(0),) and mean_pl == (Shard(0),)
        assert trace == "all_gather(axis0) x2"  # the two outputs' shapes; the inputs stay
        np.testing.assert_allclose(mean, x_np.mean(-1, keepdims=True), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(y, x_np - x_np.mean(-1, keepdims=True) + shift_np, rtol=1e-6, atol=1e-6)


def test_a_dense_argument_raises_unless_implicitly_replicated():
    x_np = RNG.standard_normal((4, 6))

    def body(mesh):
        x = distribute_tensor(t(x_np), mesh, [Shard(0)])
        with pytest.raises(RuntimeError, match="rs_test::mm: got mixed torch.Tensor and DTensor, need to convert all "
                                               "torch.Tensor to DTensor before calling distributed operators!"):
            mm(x, t(np.eye(6)))
        with implicit_replication():
            y = mm(x, t(2 * np.eye(6)))
        return y.placements, y.full_tensor().numpy()

    got = on_ranks(body)
    for r in (0, 1):
        assert got[r][0] == (Shard(0),)
        np.testing.assert_allclose(got[r][1], 2 * x_np, rtol=1e-6)


def test_a_one_element_dense_tensor_is_a_replicated_scalar():
    @tessel.library.custom_op("rs_test::axpy", mutates_args=())
    def axpy(alpha: tessel.Tensor, x: tessel.Tensor) -> tessel.Tensor:
        return alpha * x

    @register_sharding(axpy)
    def _(alpha, x):
        assert alpha.placements == (Replicate(),)
        return [([Replicate()], [Replicate(), Replicate()]), ([Shard(0)], [Replicate(), Shard(0)])]

    x_np = RNG.standard_normal((4, 3))

    def body(mesh):
        y = axpy(t(2.5), distribute_tensor(t(x_np), mesh, [Shard(0)]))
        return y.placements, y.full_tensor().numpy()

    got = on_ranks(body)
    for r in (0, 1):
        assert got[r][0] == (Shard(0),)
        np.testing.assert_allclose(got[r][1], 2.5 * x_np, rtol=1e-6)


def test_a_mutated_argument_never_moves():
    @tessel.library.custom_op("rs_test::scale_", mutates_args=("x",))
    def scale_(x: tessel.Tensor, s: float) -> None:
        x.mul_(s)

    @register_sharding(scale_)
    def _(x, s):
        return [([], [Replicate(), None]), ([], [Shard(0), None])]  # no outputs, as torch's schema

    x_np = RNG.standard_normal((4, 3))

    def body(mesh):
        x = distribute_tensor(t(x_np), mesh, [Shard(0)])
        before = x.to_local()
        with tessel.CommTracer() as tracer:
            scale_(x, 3.0)
        err = None
        y = distribute_tensor(t(x_np), mesh, [Shard(1)])
        try:
            scale_(y, 3.0)
        except ValueError as e:
            err = str(e)
        return x.placements, tracer.summary(), before.data_ptr() == x.to_local().data_ptr(), \
            x.full_tensor().numpy(), err

    got = on_ranks(body)
    for r in (0, 1):
        placements, trace, same_storage, full, err = got[r]
        assert placements == (Shard(0),) and trace == "" and same_storage
        np.testing.assert_allclose(full, 3.0 * x_np, rtol=1e-6)
        assert "rs_test::scale_: every sharding strategy moves an argument the op mutates" in err


def test_misuse_raises_torchs_errors():
    with pytest.raises(NotImplementedError, match="built-in ops choose their sharding in C.. .dtensor/rules."):
        register_sharding(tessel.ops.aten._softmax.default)
    with pytest.raises(TypeError, match="expected a custom op"):
        register_sharding(lambda x: x)

    @tessel.library.custom_op("rs_test::bad", mutates_args=())
    def bad(x: tessel.Tensor) -> tessel.Tensor:
        return x.clone()

    strategies = {}

    @register_sharding(bad)
    def _(x):
        return strategies["now"]

    def body(mesh):
        x = distribute_tensor(t(np.ones((4, 4))), mesh, [Shard(0)])
        errors = []
        for rows in ([([Shard(0)], [Shard(0), Replicate()])],  # two inputs placed for one tensor
                     [([Shard(5)], [Shard(5)])],  # no dim 5: not shardable
                     [([Replicate(), Replicate()], [Replicate()])]):  # two outputs for one
            strategies["now"] = rows
            try:
                bad(x)
            except Exception as e:
                errors.append((type(e).__name__, str(e)))
        return errors

    got = on_ranks(body)
    errors = got[0]
    assert errors[0] == ("AssertionError", "rs_test::bad: the sharding strategy places 2 tensor inputs, the call "
                                           "has 1")
    assert errors[1] == ("RuntimeError", "rs_test::bad: no valid sharding strategy for the input placements.")
    assert errors[2] == ("ValueError", "rs_test::bad: the kernel returned 1 outputs, the sharding strategy places 2")


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
