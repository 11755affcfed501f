"""torch's dtype singletons and the direct C++ paths of per-call Tensor methods (item, tolist, any / all, to(cpu),
contiguous, is_floating_point): the same results as the general paths and as torch 2.15 (values read off torch for
the same lines, or numpy)."""
import copy
import pickle

import numpy as np
import pytest

import tessel

DTYPES = [tessel.float32, tessel.float64, tessel.bfloat16, tessel.float16, tessel.int64, tessel.int32, tessel.int16,
          tessel.int8, tessel.uint8, tessel.bool]


def test_dtypes_are_singletons_as_torch():
    x = tessel.randn(2, 3)
    assert x.dtype is tessel.float32 and (x > 0).dtype is tessel.bool and x.long().dtype is tessel.int64
    assert x.to(tessel.float64).dtype is tessel.float64 and x.half().dtype is tessel.float16
    assert tessel.zeros(2, dtype=tessel.bfloat16).dtype is tessel.bfloat16 and tessel.get_default_dtype() is tessel.float32
    assert tessel.float is tessel.float32 and tessel.long is tessel.int64
    for dt in DTYPES:
        assert tessel.zeros(1, dtype=dt).dtype is dt
        assert copy.deepcopy(dt) is dt
        assert all(pickle.loads(pickle.dumps(dt, protocol=p)) is dt for p in range(pickle.HIGHEST_PROTOCOL + 1))
    assert x.is_floating_point() and not x.long().is_floating_point() and tessel.is_floating_point(x.half())


@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_item_and_tolist_give_torchs_python_numbers(dt):
    vals = np.array([[0.5, -2.0, 3.0], [1.0, 0.0, -0.25]])
    if dt is tessel.bool:
        vals = vals != 0
    elif not dt.is_floating_point:
        vals = np.abs(vals * 4).astype(np.int64)
    x = tessel.tensor(vals.tolist(), dtype=dt)
    kind = bool if dt is tessel.bool else (float if dt.is_floating_point else int)
    want = vals.tolist()
    for got, expected in ((x.tolist(), want), (x.t().tolist(), vals.T.tolist()), (x[:, ::2].tolist(),
                                                                                  vals[:, ::2].tolist())):
        assert got == expected and all(type(v) is kind for row in got for v in row)
    assert x[1, 2].item() == want[1][2] and type(x[1, 2].item()) is kind
    assert x[0, 1].tolist() == want[0][1] and type(x[0, 1].tolist()) is kind  # 0-d: the number itself
    assert tessel.zeros(2, 0, dtype=dt).tolist() == [[], []] and tessel.zeros(0, 2, dtype=dt).tolist() == []


def test_item_and_tolist_of_tensors_that_require_grad_and_of_16_bit_values():
    w = tessel.tensor([1.5, -2.0], requires_grad=True)
    assert w.tolist() == [1.5, -2.0] and w[0].item() == 1.5
    assert tessel.tensor([1 / 3], dtype=tessel.bfloat16).tolist() == [0.333984375]  # torch 2.15
    assert tessel.tensor([1 / 3], dtype=tessel.float16).item() == 0.333251953125
    assert tessel.tensor([2 ** 62 + 1]).item() == 2 ** 62 + 1  # int64 exactly
    with pytest.raises(RuntimeError, match="a Tensor with 2 elements cannot be converted to Scalar"):
        w.item()


def test_any_and_all_match_numpy_and_torchs_dtypes():
    rng = np.random.default_rng(3)
    for _ in range(6):
        a = rng.choice([0.0, -0.0, 1.0, np.nan], size=(3, 4, 2))
        for dt in (tessel.float32, tessel.bfloat16, tessel.int64, tessel.uint8, tessel.bool):
            arr = np.nan_to_num(a, nan=1.0) if not dt.is_floating_point else a
            x = tessel.tensor(arr.tolist(), dtype=dt)
            out = tessel.uint8 if dt is tessel.uint8 else tessel.bool
            nz = arr != 0
            for dim in (None, 0, 1, -1, (0, 2)):
                for keepdim in (False, True):
                    kw = {} if dim is None else {"dim": dim, "keepdim": keepdim}
                    got_any, got_all = x.any(**kw), tessel.all(x, **kw)
                    ax = None if dim is None else dim
                    assert got_any.dtype is out and got_all.dtype is out
                    np.testing.assert_array_equal(got_any.numpy().astype(bool),
                                                  nz.any(axis=ax, keepdims=keepdim and dim is not None))
                    np.testing.assert_array_equal(got_all.numpy().astype(bool),
                                                  nz.all(axis=ax, keepdims=keepdim and dim is not None))
    assert tessel.tensor([1, 2], dtype=tessel.uint8).any().tolist() == 1  # torch: tensor(1, dtype=torch.uint8)
    assert tessel.zeros(0).all().item() is True and tessel.zeros(0).any().item() is False
    assert bool(tessel.isnan(tessel.tensor([1.0, float("nan")])).any())


def test_to_cpu_and_contiguous_return_the_tensor_itself_as_torch():
    x = tessel.randn(3, 4)
    assert x.to("cpu") is x and x.to(tessel.device("cpu"), non_blocking=True) is x and x.to(tessel.float32) is x
    assert x.contiguous() is x
    t = x.t()
    c = t.contiguous()
    assert c is not t and c.is_contiguous() and c.tolist() == t.tolist() and c.data_ptr() != x.data_ptr()
    w = tessel.randn(3, requires_grad=True)
    assert w.contiguous() is w
    (w.contiguous() * 2).sum().backward()
    assert w.grad.tolist() == [2.0, 2.0, 2.0]


def test_truth_of_one_element_tensors_as_torch():
    vals = [tessel.tensor(0.0), tessel.tensor(-0.0), tessel.tensor(float("nan")), tessel.tensor([2]),
            tessel.tensor(True), tessel.tensor(False), tessel.tensor(0, dtype=tessel.uint8),
            tessel.tensor([0.0], dtype=tessel.bfloat16), tessel.tensor([1e-8], dtype=tessel.float16),
            tessel.ones(1, 1, requires_grad=True), tessel.arange(5)[3]]
    assert [bool(v) for v in vals] == [False, False, True, True, True, False, False, False, False, True, True]
    assert ("yes" if tessel.tensor(3) else "no") == "yes" and not tessel.tensor(0)
    with pytest.raises(RuntimeError, match="Boolean value of Tensor with no values is ambiguous"):
        bool(tessel.zeros(0))
    with pytest.raises(RuntimeError, match="Boolean value of Tensor with more than one value is ambiguous"):
        bool(tessel.zeros(2))
