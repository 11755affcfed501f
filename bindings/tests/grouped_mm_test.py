"""torch._grouped_mm / F.grouped_mm (Mixture-of-Experts grouped GEMM): the four layouts' values and gradients against
numpy loops in float64, empty groups and the zeroed tail past offs[-1], a second derivative against its closed form,
16-bit inputs, torch 2.15's errors (and tessel's offsets check), and DTensor operands placed as torch 2.15 places them
(each expected placement printed by torch 2.15 on a fake process group with the same operands), with their values,
gradients and exact collective counts."""
import numpy as np
import pytest

import tessel
import tessel.nn.functional as F
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
from ranks_testing import on_ranks as ranks, placed

RNG = np.random.default_rng(5)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def offsets(*ends):
    return tessel.tensor(list(ends), dtype=tessel.int32)


def bounds(ends):
    return list(zip([0] + list(ends[:-1]), ends))


def reference(a, b, ends):
    """The grouped products in float64, one loop per group (the module doc's table); zeros past offs[-1]."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    if a.ndim == 3 and b.ndim == 3:
        return np.stack([a[g] @ b[g] for g in range(a.shape[0])])
    if a.ndim == 2 and b.ndim == 3:
        out = np.zeros((a.shape[0], b.shape[2]))
        for g, (s, e) in enumerate(bounds(ends)):
            out[s:e] = a[s:e] @ b[g]
        return out
    if a.ndim == 2:
        return np.stack([a[:, s:e] @ b[s:e] for s, e in bounds(ends)])
    out = np.zeros((a.shape[1], b.shape[1]))
    for g, (s, e) in enumerate(bounds(ends)):
        out[:, s:e] = a[g] @ b[:, s:e]
    return out


def reference_grads(a, b, ends, w):
    """d(Σ out·w)/da and /db in float64, by the same loops."""
    a, b, w = a.astype(np.float64), b.astype(np.float64), w.astype(np.float64)
    da, db = np.zeros_like(a), np.zeros_like(b)
    if a.ndim == 3 and b.ndim == 3:
        for g in range(a.shape[0]):
            da[g], db[g] = w[g] @ b[g].T, a[g].T @ w[g]
    elif a.ndim == 2 and b.ndim == 3:
        for g, (s, e) in enumerate(bounds(ends)):
            da[s:e], db[g] = w[s:e] @ b[g].T, a[s:e].T @ w[s:e]
    elif a.ndim == 2:
        for g, (s, e) in enumerate(bounds(ends)):
            da[:, s:e], db[s:e] = w[g] @ b[s:e].T, a[:, s:e].T @ w[g]
    else:
        for g, (s, e) in enumerate(bounds(ends)):
            da[g], db[:, s:e] = w[:, s:e] @ b[:, s:e].T, a[g].T @ w[:, s:e]
    return da, db


# (mat_a shape, mat_b shape, offsets): every layout, with an empty group and a tail past offs[-1] where offsets apply
LAYOUTS = {
    "2d_3d": ((11, 6), (4, 6, 5), (3, 3, 7, 9)),     # rows 9 and 10 belong to no expert
    "2d_2d": ((5, 10), (10, 7), (4, 4, 9)),          # contraction columns split; column 9 in no group
    "3d_2d": ((3, 4, 6), (6, 9), (2, 2, 8)),         # output columns split; column 8 in no group
    "3d_3d": ((3, 4, 6), (3, 6, 5), None),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_values_and_gradients_match_loops_in_float64(layout):
    a_shape, b_shape, ends = LAYOUTS[layout]
    a_np, b_np = f32(*a_shape), f32(*b_shape)
    a, b = tessel.tensor(a_np, requires_grad=True), tessel.tensor(b_np, requires_grad=True)
    offs = None if ends is None else offsets(*ends)
    y = tessel._grouped_mm(a, b, offs=offs)
    want = reference(a_np, b_np, ends)
    assert tuple(y.shape) == want.shape and y.dtype == tessel.float32
    np.testing.assert_allclose(y.detach().numpy(), want, rtol=1e-5, atol=1e-5)
    assert y.grad_fn.name() == "GroupedMmBackward0"
    w_np = f32(*want.shape)
    y.backward(tessel.tensor(w_np))
    da, db = reference_grads(a_np, b_np, ends, w_np)
    np.testing.assert_allclose(a.grad.numpy(), da, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), db, rtol=1e-5, atol=1e-5)
    # the functional form is the same op
    np.testing.assert_array_equal(F.grouped_mm(a, b, offs=offs).detach().numpy(), y.detach().numpy())


def test_the_tail_past_the_last_offset_and_empty_groups_are_exact_zeros():
    # torch leaves rows past offs[-1] uninitialized (and their gradient); tessel writes zeros
    a_np, b_np = f32(8, 4), f32(3, 4, 4)
    a, b = tessel.tensor(a_np, requires_grad=True), tessel.tensor(b_np, requires_grad=True)
    y = tessel._grouped_mm(a, b, offs=offsets(2, 2, 5))
    assert not y.detach().numpy()[5:].any()
    y.backward(tessel.ones(8, 4))  # a broadcast-free gradient that is nonzero on the tail rows too
    assert not a.grad.numpy()[5:].any()
    assert not b.grad.numpy()[1].any()  # the empty expert gets no gradient
    np.testing.assert_allclose(b.grad.numpy()[2], a_np[2:5].T.astype(np.float64) @ np.ones((3, 4)), rtol=1e-6)


def test_the_second_derivative_matches_its_closed_form():
    # L = Σ out·W with out = a_g @ b_g per row group; G = ∂L/∂a (rows s:e: W_g b_gᵀ); M = Σ G·V:
    # ∂M/∂b_g = V_gᵀ W_g. torch's CPU backward cannot run this (its grouped_mm refuses the broadcast gradient).
    a_np, b_np, w_np, v_np = f32(7, 3), f32(2, 3, 4), f32(7, 4), f32(7, 3)
    ends = (3, 6)
    a, b = tessel.tensor(a_np, requires_grad=True), tessel.tensor(b_np, requires_grad=True)
    y = tessel._grouped_mm(a, b, offs=offsets(*ends))
    g_a, = tessel.autograd.grad((y * tessel.tensor(w_np)).sum(), a, create_graph=True)
    (g_a * tessel.tensor(v_np)).sum().backward()
    want = np.stack([v_np[s:e].T.astype(np.float64) @ w_np[s:e] for s, e in bounds(ends)])
    np.testing.assert_allclose(b.grad.numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [tessel.bfloat16, tessel.float16])
def test_sixteen_bit_inputs_round_each_product_once(dtype):
    a_np, b_np = f32(9, 8), f32(3, 8, 8)
    a, b = tessel.tensor(a_np).to(dtype), tessel.tensor(b_np).to(dtype)
    y = tessel._grouped_mm(a, b, offs=offsets(2, 6, 9))
    assert y.dtype == dtype
    # each group's product is the float32 product of the rounded inputs, rounded once to the 16-bit dtype
    want = tessel.tensor(reference(a.float().numpy(), b.float().numpy(), (2, 6, 9)).astype(np.float32)).to(dtype)
    np.testing.assert_allclose(y.float().numpy(), want.float().numpy(), rtol=1e-2, atol=1e-2)
    assert (y.float() == want.float()).float().mean().item() > 0.9


def test_an_autocast_region_leaves_the_dtypes_as_torch():
    # _grouped_mm is on neither of torch's CPU autocast lists: float32 stays float32 (it raised on its float32
    # out= buffers when the region lowered the per-group products), bfloat16 stays bfloat16
    a_np, b_np = f32(9, 8), f32(3, 8, 8)
    a, b = tessel.tensor(a_np), tessel.tensor(b_np)
    with tessel.autocast("cpu", dtype=tessel.bfloat16):
        y = tessel._grouped_mm(a, b, offs=offsets(2, 6, 9))
        z = tessel._grouped_mm(a.bfloat16(), b.bfloat16(), offs=offsets(2, 6, 9))
    assert y.dtype == tessel.float32 and z.dtype == tessel.bfloat16
    np.testing.assert_allclose(y.numpy(), reference(a_np, b_np, (2, 6, 9)), rtol=1e-5, atol=1e-5)


def test_misuse_raises_torchs_errors():
    a, b, offs = tessel.randn(12, 8), tessel.randn(3, 8, 16), offsets(3, 7, 12)
    cases = [
        (lambda: tessel._grouped_mm(a.double(), b.double(), offs=offs),
         "Expected mat_a to be Float32, BFloat16 or Float16 matrix, got Double"),
        (lambda: tessel._grouped_mm(a, b.double(), offs=offs),
         "Expected mat_b to be Float32, BFloat16 or Float16 matrix, got Double"),
        (lambda: tessel._grouped_mm(a.bfloat16(), b, offs=offs),
         "Expected mat_a and mat_b to have the same dtype, got BFloat16 and Float"),
        (lambda: tessel._grouped_mm(a[None, None], b, offs=offs), "mat_a has to be 2 or 3d"),
        (lambda: tessel._grouped_mm(a, b[None], offs=offs), "mat_b has to be 2 or 3d"),
        (lambda: tessel._grouped_mm(a, b), "Have to provide offsets if there is a 2d matrix"),
        (lambda: tessel._grouped_mm(tessel.randn(3, 4, 8), b, offs=offs), "no offset if both matrices are 3d"),
        (lambda: tessel._grouped_mm(a, b, offs=tessel.tensor([3, 7, 12])), "Offsets have to be int32, got Long"),
        (lambda: tessel._grouped_mm(a, b, offs=offs.reshape(1, 3)), "offs has to be 1D"),
        (lambda: tessel._grouped_mm(a, b, offs=offsets(3, 0, 7, 0, 12, 0)[::2]), "Offsets must have stride (1,)"),
        (lambda: tessel._grouped_mm(a, tessel.randn(3, 4, 16), offs=offs),
         "contraction dimension of mat_a and mat_b must match"),
        (lambda: tessel._grouped_mm(a, b, offs=offsets(3, 12)), "matrix batch sizes have to match"),
        (lambda: tessel._grouped_mm(tessel.randn(3, 4, 8), tessel.randn(2, 8, 4)), "batched dimension has to match"),
        (lambda: tessel._grouped_mm(a, b, offs=offs, bias=tessel.randn(3, 16)), "Bias not supported yet"),
        (lambda: F.grouped_mm(a.bfloat16(), b.bfloat16(), offs=offs, out_dtype=tessel.float32),
         "Grouped gemm output dtype must match `mat_a` dtype"),
        # torch reads these offsets unchecked (past the operand, or a negative group size)
        (lambda: tessel._grouped_mm(a, b, offs=offsets(3, 7, 14)),
         "offsets must be non-decreasing and at most 12 (the size of the dimension they split), got offs = [3, 7, 14]"),
        (lambda: tessel._grouped_mm(a, b, offs=offsets(7, 3, 12)), "(group 1 ends at 3)"),
    ]
    for call, fragment in cases:
        with pytest.raises(RuntimeError) as info:
            call()
        assert fragment in str(info.value), (fragment, str(info.value))


def test_torchtitans_moe_calls_around_grouped_mm_answer_as_torchs():
    # its expert-parallel dispatch waits on the token counts' all_to_all and asks whether it is being traced
    t = tessel.ones(3)
    assert tessel.ops._c10d_functional.wait_tensor(t) is t
    assert tessel.compiler._is_non_strict_tracing() is False
    # its router's histc over int64 expert indices: torch 2.15 has no integer CPU kernel
    for dtype, name in ((tessel.int64, "Long"), (tessel.int32, "Int"), (tessel.uint8, "Byte")):
        with pytest.raises(NotImplementedError, match="\"histogram_cpu\" not implemented for '%s'" % name):
            tessel.histc(tessel.tensor([1, 2, 3]).to(dtype), bins=4, min=0, max=4)
    np.testing.assert_array_equal(tessel.histc(tessel.tensor([1.0, 2, 3]), bins=4, min=0, max=4).numpy(),
                                  [0, 1, 1, 1])

def test_dtensor_operands_are_placed_as_torchs_with_values_gradients_and_collectives():
    shapes = {"2d_3d": ((16, 16), (4, 16, 16), (3, 8, 8, 16)), "2d_2d": ((16, 16), (16, 16), (3, 8, 8, 16)),
              "3d_2d": ((4, 16, 16), (16, 16), (4, 8, 8, 16)), "3d_3d": ((4, 16, 16), (4, 16, 16), None)}
    ops = {k: (f32(*a), f32(*b), ends) for k, (a, b, ends) in shapes.items()}
    S0, S1, S2, R, P = Shard(0), Shard(1), Shard(2), Replicate(), Partial()
    # (layout, mat_a placements, mat_b placements) -> (torch 2.15's output placements, this rank's collectives)
    cases = {
        ("2d_3d", (S1,), (S1,)): ((P,), ""),                             # expert-parallel contraction: no move
        ("2d_3d", (R,), (S2,)): ((S1,), ""),                             # column-parallel experts
        ("2d_3d", (S0,), (S0,)): ((R,), "all_gather(axis0) x2"),        # rows and experts are gathered
        ("2d_3d", (S0,), (S2,)): ((S1,), "all_gather(axis0) x1"),
        ("2d_2d", (S0,), (S1,)): ((S2,), "all_gather(axis0) x1"),
        ("3d_2d", (S0,), (S0,)): ((P,), "all_to_all(axis0) x1"),       # a: experts -> contraction dim
        ("3d_3d", (S0,), (R,)): ((S0,), ""),                             # b is chunked locally
        ("3d_3d", (S0,), (S2,)): ((S2,), "all_gather(axis0) x1"),
    }

    def body(rank):
        mesh = init_device_mesh("cpu", (2,))
        out = {}
        for (layout, pa, pb), _ in cases.items():
            a_np, b_np, ends = ops[layout]
            a, b = placed(a_np, mesh, list(pa)), placed(b_np, mesh, list(pb))
            a.requires_grad_(True)
            b.requires_grad_(True)
            offs = None if ends is None else distribute_tensor(offsets(*ends), mesh, [R])
            with tessel.CommTracer() as tracer:
                y = tessel._grouped_mm(a, b, offs=offs)
            y.full_tensor().sum().backward()
            out[(layout, pa, pb)] = (tuple(y.placements), tracer.summary(), y.full_tensor().numpy(),
                                     a.grad.full_tensor().numpy(), b.grad.full_tensor().numpy())
        return out

    got = ranks(2, body)
    for key, (placements, trace) in cases.items():
        a_np, b_np, ends = ops[key[0]]
        want = reference(a_np, b_np, ends)
        da, db = reference_grads(a_np, b_np, ends, np.ones(want.shape))
        for r in (0, 1):
            got_pl, got_trace, full, ga, gb = got[r][key]
            assert got_pl == placements, (key, got_pl)
            assert got_trace == trace, (key, got_trace)
            np.testing.assert_allclose(full, want, rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(ga, da, rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(gb, db, rtol=1e-4, atol=1e-4)


def test_two_dim_meshes_place_as_torch():
    a_np, b_np, ends = f32(16, 16), f32(4, 16, 16), (3, 8, 8, 16)
    S0, S1, S2, R, P = Shard(0), Shard(1), Shard(2), Replicate(), Partial()
    cases = {  # torch 2.15 on a 2 x 2 mesh
        ((S1, R), (S0, S2)): (P, S1), ((S1, R), (S0, S1)): (R, P), ((S1, R), (S2, S2)): (S1, S1),
        ((S1, R), (P, R)): (P, R), ((R, R), (S1, S2)): (P, S1),
    }

    def body(rank):
        mesh = init_device_mesh("cpu", (2, 2))
        offs = distribute_tensor(offsets(*ends), mesh, [R, R])
        return {k: (tuple(y.placements), y.full_tensor().numpy()) for k in cases
                for y in [tessel._grouped_mm(placed(a_np, mesh, list(k[0])), placed(b_np, mesh, list(k[1])),
                                             offs=offs)]}

    got = ranks(4, body)
    want = reference(a_np, b_np, ends)
    for r in range(4):
        for k, placements in cases.items():
            assert got[r][k][0] == placements, (k, got[r][k][0])
            np.testing.assert_allclose(got[r][k][1], want, rtol=1e-4, atol=1e-4)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
