"""Integer matrix products as torch computes them on the CPU: every entry point (@, mm, bmm, mv, dot, vdot, inner,
tensordot, addmm, baddbmm, F.linear, matrix_power, multi_dot) in int64 / int32 / int16 / int8 / uint8 equals numpy's
integer matmul, which wraps in the dtype as torch does (values checked against torch 2.15); bool raises torch's
NotImplementedError; sharded integer operands (Shard @ Replicate, Shard(1) @ Shard(0) through a Partial sum) give the
full product on every rank."""
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn.functional as F
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.tensor import Replicate, Shard, distribute_tensor

DTYPES = [(tessel.int64, np.int64), (tessel.int32, np.int32), (tessel.int16, np.int16), (tessel.int8, np.int8),
          (tessel.uint8, np.uint8)]


def ints(rng, shape, np_dtype):
    lo, hi = (0, 40) if np_dtype == np.uint8 else (-40, 40)  # products overflow int8 / uint8: the wrap is tested
    return rng.integers(lo, hi, size=shape).astype(np_dtype)


@pytest.mark.parametrize("dtype,np_dtype", DTYPES, ids=[str(d[1].__name__) for d in DTYPES])
def test_every_product_entry_point_equals_numpys_wrapping_integer_matmul(dtype, np_dtype):
    rng = np.random.default_rng(7)
    a, b = ints(rng, (3, 4), np_dtype), ints(rng, (4, 5), np_dtype)
    ba, bb = ints(rng, (2, 3, 4), np_dtype), ints(rng, (2, 4, 5), np_dtype)
    v, w = ints(rng, (4,), np_dtype), ints(rng, (4,), np_dtype)
    c = ints(rng, (3, 5), np_dtype)
    sq = ints(rng, (3, 3), np_dtype)
    t = tessel.from_numpy
    cases = {
        "@": (t(a) @ t(b), a @ b), "mm": (tessel.mm(t(a), t(b)), a @ b), "bmm": (tessel.bmm(t(ba), t(bb)), ba @ bb),
        "broadcast": (t(ba) @ t(b), ba @ b), "transposed": (t(b).T @ t(a).T, b.T @ a.T),
        "mv": (tessel.mv(t(a), t(v)), a @ v), "dot": (tessel.dot(t(v), t(w)), v @ w),
        "vdot": (tessel.vdot(t(v), t(w)), v @ w), "inner": (tessel.inner(t(a), t(a)), a @ a.T),
        "tensordot": (tessel.tensordot(t(ba), t(b), dims=1), ba @ b),
        "addmm": (tessel.addmm(t(c), t(a), t(b)), c + a @ b),
        "baddbmm": (tessel.baddbmm(t(c[None]), t(ba), t(bb)), c[None] + ba @ bb),
        "linear": (F.linear(t(a), t(b.T.copy()), t(c[0])), a @ b + c[0]),
        "matrix_power": (tessel.linalg.matrix_power(t(sq), 3), sq @ sq @ sq),
        "multi_dot": (tessel.linalg.multi_dot([t(a), t(b), t(b.T.copy())]), a @ b @ b.T),
    }
    for name, (got, want) in cases.items():
        assert got.dtype == dtype, name
        np.testing.assert_array_equal(got.numpy(), np.asarray(want, dtype=np_dtype), err_msg=name)


def test_wraparound_and_errors_follow_torch():
    # torch 2.15: tensor([[200]], dtype=uint8) @ tensor([[2]], dtype=uint8) == 144; int64 wraps at 2^64.
    u8 = tessel.tensor([[200]], dtype=tessel.uint8) @ tessel.tensor([[2]], dtype=tessel.uint8)
    assert u8.tolist() == [[144]]
    big = tessel.tensor([[2 ** 62, 2 ** 62, 1]]) @ tessel.tensor([[2], [2], [3]])
    assert big.tolist() == [[3]]
    with pytest.raises(NotImplementedError, match="not implemented for bool tensors"):
        tessel.ones(2, 3, dtype=tessel.bool) @ tessel.ones(3, 2, dtype=tessel.bool)
    with pytest.raises(ValueError, match="dtype mismatch int64 vs float32"):
        tessel.ones(2, 3, dtype=tessel.int64) @ tessel.ones(3, 2)


def test_sharded_integer_operands_give_the_full_product_on_every_rank():
    rng = np.random.default_rng(11)
    a, b = ints(rng, (4, 6), np.int64), ints(rng, (6, 3), np.int64)

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        rows = distribute_tensor(tessel.from_numpy(a), mesh, [Shard(0)])
        full_b = distribute_tensor(tessel.from_numpy(b), mesh, [Replicate()])
        np.testing.assert_array_equal((rows @ full_b).full_tensor().numpy(), a @ b)
        cols = distribute_tensor(tessel.from_numpy(a), mesh, [Shard(1)])
        inner = distribute_tensor(tessel.from_numpy(b), mesh, [Shard(0)])
        product = cols @ inner
        assert product.placements[0].is_partial()
        np.testing.assert_array_equal(product.full_tensor().numpy(), a @ b)

    tessel.run_ranks(2, rank_fn)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
