"""uint8, int8 and int16 (torch.uint8 / int8 / int16, Tensor.byte() / char() / short()): arithmetic that wraps
as numpy's fixed-width integers do, torch's promotion lattice (uint8 with int8 is int16; sums and products
accumulate in int64), casts from floats truncating toward zero, numpy in and out, reductions, indexing, sort,
bitwise ops; saved and loaded by tessel.save / load, DCP-resharded, and
all-reduced across ranks. Expected values come from numpy in the same dtypes (an independent implementation
of the same wrap-around) and from torch 2.15 where noted."""
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.distributed.checkpoint as dcp
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.tensor import Replicate, Shard, distribute_tensor

RNG = np.random.default_rng(3)
DTYPES = {"uint8": (tessel.uint8, np.uint8), "int8": (tessel.int8, np.int8), "int16": (tessel.int16, np.int16)}


def rand(np_dtype, n=16):
    info = np.iinfo(np_dtype)
    return RNG.integers(info.min, info.max, size=n, endpoint=True).astype(np_dtype)


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_arithmetic_wraps_like_numpy_and_keeps_the_dtype(name):
    dt, nt = DTYPES[name]
    a, b = rand(nt), rand(nt)
    b[b == 0] = 1
    ta, tb = tessel.tensor(a), tessel.tensor(b)
    assert ta.dtype == dt and tessel.tensor(a).numpy().dtype == nt
    with np.errstate(over="ignore", divide="ignore"):
        cases = {"add": (ta + tb, a + b), "sub": (ta - tb, a - b), "mul": (ta * tb, a * b), "neg": (-ta, -a),
                 "add_scalar": (ta + 100, (a.astype(np.int64) + 100).astype(nt)),
                 "and": (ta & tb, a & b), "or": (ta | tb, a | b), "xor": (ta ^ tb, a ^ b),
                 "max": (tessel.maximum(ta, tb), np.maximum(a, b)), "sort": (ta.sort().values, np.sort(a)),
                 "gather": (ta[tessel.tensor([3, 0, 3])], a[[3, 0, 3]]), "mask": (ta[ta > tb], a[a > b])}
    for key, (got, want) in cases.items():
        assert got.dtype == dt, key
        np.testing.assert_array_equal(got.numpy(), want, err_msg=key)
    # sums and products accumulate in int64 (torch's rule), means need a float, true division is float32
    assert ta.sum().dtype == tessel.int64 and ta.sum().item() == int(a.astype(np.int64).sum())
    np.testing.assert_array_equal(ta.cumsum(0).numpy(), np.cumsum(a.astype(np.int64)))
    assert (ta / tb).dtype == tessel.float32 and (ta * 0.5).dtype == tessel.float32
    assert type(ta[0].item()) is int and ta[0].item() == int(a[0])


def test_promotion_and_casts_follow_torch():
    u8, i8, i16 = tessel.tensor([200, 7], dtype=tessel.uint8), tessel.tensor([100, -3], dtype=tessel.int8), \
        tessel.tensor([1000, -2], dtype=tessel.int16)
    assert (u8 + i8).dtype == tessel.int16 and (u8 + i8).tolist() == [300, 4]  # torch 2.15: int16 [300, 4]
    assert (u8 + i16).dtype == tessel.int16 and (i8 + tessel.tensor([1, 2])).dtype == tessel.int64
    assert (u8 + tessel.tensor(5)).dtype == tessel.uint8  # a 0-dim int64 does not widen a dimensioned uint8
    assert tessel.promote_types(tessel.uint8, tessel.int8) == tessel.int16
    assert tessel.promote_types(tessel.int16, tessel.float16) == tessel.float16
    assert tessel.result_type(u8, 2.5) == tessel.float32
    # float -> integer truncates toward zero; out-of-range values wrap (torch 2.15 on x86 gives the same)
    assert tessel.tensor([3.7, -0.5, 255.9]).byte().tolist() == [3, 0, 255]
    assert tessel.tensor([3.7, -1.5]).char().tolist() == [3, -1]
    assert tessel.tensor([40000, -5]).short().tolist() == [-25536, -5]
    assert u8.type() == "torch.ByteTensor" and i8.type() == "torch.CharTensor" and i16.type() == "torch.ShortTensor"
    assert (u8.element_size(), i8.element_size(), i16.element_size()) == (1, 1, 2)
    assert (tessel.iinfo(tessel.uint8).max, tessel.iinfo(tessel.int8).min, tessel.iinfo(tessel.int16).max) == (
        255, -128, 32767)
    assert tessel.short is tessel.int16
    with pytest.raises(RuntimeError, match="floating"):
        tessel.zeros(2, dtype=tessel.uint8).requires_grad_(True)


def test_images_as_uint8_become_float_inputs():
    images = RNG.integers(0, 256, size=(4, 3, 5, 5)).astype(np.uint8)
    x = tessel.from_numpy(images).float().div(255.0)
    np.testing.assert_allclose(x.numpy(), images.astype(np.float32) / 255.0, rtol=1e-7)
    assert tessel.from_numpy(images).permute(0, 2, 3, 1).contiguous().numpy().tobytes() == \
        images.transpose(0, 2, 3, 1).tobytes()


def test_save_load_keeps_small_integers(tmp_path):
    sd = {"u8": tessel.tensor(np.arange(250, 256, dtype=np.uint8)), "i8": tessel.tensor([-128, 127], dtype=tessel.int8),
          "i16": tessel.tensor([-32768, 5], dtype=tessel.int16)}
    tessel.save(sd, str(tmp_path / "sd.pt"))
    back = tessel.load(str(tmp_path / "sd.pt"))
    for k, v in sd.items():
        assert back[k].dtype == v.dtype and back[k].tolist() == v.tolist(), k
    # (a uint8 tensor in a file torch.save wrote is read as uint8: tensor_test's torch-file fixture)


def test_dcp_reshards_and_collectives_reduce_small_integers(tmp_path):
    full = np.arange(-8, 8, dtype=np.int16).reshape(4, 4) * 1000
    got = {}

    def save_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        dcp.save({"w": distribute_tensor(tessel.tensor(full), mesh, [Shard(0)]),
                  "m": distribute_tensor(tessel.tensor(full.astype(np.uint8)), mesh, [Shard(1)])},
                 checkpoint_id=str(tmp_path))
        t = tessel.tensor([100 + world.rank, -7], dtype=tessel.int8)
        dist.all_reduce(t)
        s = tessel.tensor([30000, 1], dtype=tessel.int16)
        dist.all_reduce(s, op=dist.ReduceOp.MAX)
        got[world.rank] = (t.tolist(), s.tolist())

    tessel.run_ranks(2, save_fn)
    assert got[0] == got[1] == ([-55, -14], [30000, 1])  # 100 + 101 wraps to -55 in int8, as numpy
    loaded = {}

    def load_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (1,))
        sd = {"w": distribute_tensor(tessel.zeros(4, 4, dtype=tessel.int16), mesh, [Replicate()]),
              "m": tessel.zeros(4, 4, dtype=tessel.uint8)}
        dcp.load(sd, checkpoint_id=str(tmp_path))
        loaded["w"], loaded["m"] = sd["w"].full_tensor().numpy(), sd["m"].numpy()

    tessel.run_ranks(1, load_fn)
    np.testing.assert_array_equal(loaded["w"], full)
    np.testing.assert_array_equal(loaded["m"], full.astype(np.uint8))
    md = dcp.FileSystemReader(str(tmp_path)).read_metadata()
    assert md.state_dict_metadata["m"].properties.dtype == tessel.uint8


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
