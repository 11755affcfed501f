"""The per-call fast paths of the forty-first session's overhead sweep against torch 2.15 (every expected value
below is what torch 2.15 printed for the same lines): `a += b` and friends through the C++ in-place front, with
promotion, integer targets, autograd and DTensor-free views still following torch's rules. Each fast path is
also checked to skip the Python rules it replaces (those patched to raise), since a silent fall back to them is
what the sweep measured as overhead.
"""
import pytest

import tessel
from tessel import _compat

T = tessel.tensor


def _pair():
    a = T([[1.5, -2.0, 3.0], [0.25, 4.0, -1.0]])
    b = T([[0.5, 1.0, -2.0], [2.0, 0.5, 4.0]])
    return a, b


def test_augmented_assignment_writes_self_in_place():
    a, b = _pair()
    x = a
    x += b
    assert x is a
    assert a.tolist() == [[2.0, -1.0, 1.0], [2.25, 4.5, 3.0]]  # torch's
    x -= b * 2
    assert a.tolist() == [[1.0, -3.0, 5.0], [-1.75, 3.5, -5.0]]  # torch's
    x *= b
    assert a.tolist() == [[0.5, -3.0, -10.0], [-3.5, 1.75, -20.0]]  # torch's
    x /= b
    assert a.tolist() == [[1.0, -3.0, 5.0], [-1.75, 3.5, -5.0]]  # torch's
    v = a[1]
    v += 10  # a view: the base sees the write
    assert a.tolist() == [[1.0, -3.0, 5.0], [8.25, 13.5, 5.0]]  # torch's


def test_plain_float_augmented_assignment_skips_the_python_rules(monkeypatch):
    def refused(*args, **kwargs):
        raise AssertionError("the Python rules ran for a plain float tensor")
    for name in ("_add_", "_sub_", "_mul_", "_div_"):
        monkeypatch.setattr(_compat, name, refused)
    a, b = _pair()
    a += b
    a -= b
    a *= 2.0
    a /= b
    assert a.tolist() == [[6.0, -4.0, -3.0], [0.25, 16.0, -0.5]]  # torch's


def test_augmented_assignment_promotion_and_integer_targets():
    f = T([1.0, 2.0])
    f += T([0.1, 0.2], dtype=tessel.float64)  # computed in float64, written back in float32
    assert f.dtype is tessel.float32 and f.tolist() == [1.100000023841858, 2.200000047683716]  # torch's
    i = T([1, 2])
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        i += T([0.5, 0.5])
    flags = T([True, False])
    with pytest.raises(NotImplementedError, match="Subtraction, the `-` operator, with two bool tensors"):
        flags -= flags


def test_augmented_assignment_broadcast_errors_are_torchs():
    s = tessel.ones(3)
    with pytest.raises(RuntimeError, match=r"output with shape \[3\] doesn't match the broadcast shape \[2, 3\]"):
        s *= tessel.ones(2, 3)  # torch's message (the copy_ of the product raised its own)
    assert s.tolist() == [1.0, 1.0, 1.0]


def test_augmented_assignment_under_autograd_is_recorded():
    w = tessel.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        w += 1
    h = w * 3
    h *= w
    h.sum().backward()
    assert w.grad.tolist() == [6.0, 6.0]  # torch's
    with tessel.no_grad():
        w += 1
    assert w.tolist() == [2.0, 2.0] and w.requires_grad  # torch's


def test_basic_setitem_of_a_number_writes_through_views():
    a = tessel.zeros(2, 3)
    v = a[1]
    v[0] = 5.0
    a[:, 2] = -1.0
    assert a.tolist() == [[0.0, 0.0, -1.0], [5.0, 0.0, -1.0]] and v.tolist() == [5.0, 0.0, -1.0]  # torch's
    h = tessel.zeros(2, dtype=tessel.float16)
    h[0] = 70000.0  # past float16's range: setitem rounds to inf (fill_ would raise)
    h[1] = -1e6
    assert h.tolist() == [float("inf"), float("-inf")]  # torch's
    i = tessel.zeros(2, dtype=tessel.int64)
    i[0] = 3.7
    assert i.tolist() == [3, 0]  # torch's


def test_basic_setitem_of_a_number_skips_the_recording_fill(monkeypatch):
    def refused(*args, **kwargs):
        raise AssertionError("the recording fill_ ran with nothing to record")
    a = tessel.zeros(2, 3)
    monkeypatch.setattr(tessel.Tensor, "fill_", refused)
    a[0] = 1.0
    a[:, 1] = 2.0
    with tessel.no_grad():
        a[1, 2] = 3.0
    assert a.tolist() == [[1.0, 2.0, 1.0], [0.0, 2.0, 3.0]]  # torch's


def test_basic_setitem_under_autograd_still_recorded_or_refused():
    w = tessel.ones(3, requires_grad=True)
    with tessel.no_grad():
        nv = w[:2]
    with pytest.raises(RuntimeError, match="created in no_grad mode"):
        nv[0] = 2.0
    y = w * 2
    y[0] = 0.0
    y.sum().backward()
    assert w.grad.tolist() == [0.0, 2.0, 2.0]  # torch's
    t = tessel.zeros(3)
    t[1] = T(4.0, requires_grad=True)
    assert t.requires_grad and t.tolist() == [0.0, 4.0, 0.0]  # torch's
    with tessel.no_grad():
        nv[1] = 7.0
    assert w.tolist() == [1.0, 7.0, 1.0]  # torch's
    b = tessel.arange(6.0).reshape(2, 3)
    b[0] = b[1]
    assert b.tolist() == [[3.0, 4.0, 5.0], [3.0, 4.0, 5.0]]  # torch's
    c = tessel.arange(4.0)
    with pytest.raises(RuntimeError, match="some elements of the input tensor and the written-to tensor refer"):
        c[1:] = c[:-1]


F32_MAX = 3.4028234663852886e38
INF = float("inf")


@pytest.mark.parametrize("value, dtype, expected", [
    (3.0, tessel.float32, 3.0), (-0.0, tessel.float32, -0.0), (0.1, tessel.float32, 0.10000000149011612),
    (3.4028235677973366e38, tessel.float32, INF), (F32_MAX, tessel.float32, F32_MAX), (-1e39, tessel.float32, -INF),
    (INF, tessel.float32, INF), (7, tessel.int64, 7), (-2 ** 53, tessel.int64, -9007199254740992),
    (2 ** 60, tessel.int64, 1152921504606846976), (True, tessel.bool, True)])  # torch's dtypes and items
def test_tensor_of_a_python_number(value, dtype, expected):
    t = tessel.tensor(value)
    assert t.dtype is dtype and t.shape == () and t.item() == expected
    assert str(t.item()) == str(expected)  # (the sign of -0.0 too)


def test_tensor_of_a_python_number_edge_cases():
    assert str(tessel.tensor(float("nan")).item()) == "nan"  # torch's
    t = tessel.tensor(2.5, requires_grad=True)
    assert t.requires_grad and t.is_leaf  # torch's
    with pytest.raises(ValueError, match="Overflow when unpacking long long"):
        tessel.tensor(2 ** 63)
    tessel.set_default_dtype(tessel.float64)
    try:
        assert tessel.tensor(0.1).dtype is tessel.float64 and tessel.tensor(0.1).item() == 0.1  # torch's
        assert tessel.tensor(1e39).item() == 1e39  # torch's
    finally:
        tessel.set_default_dtype(tessel.float32)


def test_tensor_of_floats_skips_the_general_unpacking(monkeypatch):
    import numpy as np

    from tessel import _tensor

    def refused(*args, **kwargs):
        raise AssertionError("the general path ran for plain Python numbers")
    monkeypatch.setattr(_tensor, "checked_numbers", refused)
    assert tessel.tensor(3.0).item() == 3.0 and tessel.tensor(-4).item() == -4  # torch's
    monkeypatch.undo()
    monkeypatch.setattr(np, "errstate", refused)
    assert tessel.tensor([0.1, 2, -2.5]).tolist() == [0.10000000149011612, 2.0, -2.5]  # torch's
    monkeypatch.undo()
    assert tessel.tensor([0.1, 1e39, -2.0]).tolist() == [0.10000000149011612, INF, -2.0]  # torch's
    assert str(tessel.tensor([float("nan"), 1e39]).tolist()) == "[nan, inf]"  # torch's


def _rows():
    return T([[3.0, -1.0, 2.0, 5.0], [0.5, 0.5, -2.0, 4.0]])


def test_topk_sort_gather_values_are_torchs():
    a = _rows()
    v, i = a.topk(2, dim=1)
    assert v.tolist() == [[5.0, 3.0], [4.0, 0.5]] and i.tolist() == [[3, 0], [3, 1]]  # torch's
    v, i = a.sort(dim=1, descending=True)
    assert v.tolist() == [[5.0, 3.0, 2.0, -1.0], [4.0, 0.5, 0.5, -2.0]]  # torch's
    assert i.tolist() == [[3, 0, 2, 1], [3, 0, 1, 2]]  # torch's
    assert tessel.gather(a, 1, T([[3, 0], [2, 2]])).tolist() == [[5.0, 3.0], [-2.0, -2.0]]  # torch's
    assert a.argsort(dim=1).tolist() == [[1, 2, 0, 3], [2, 0, 1, 3]]  # torch's
    with pytest.raises(RuntimeError, match="index 4 is out of bounds for dimension 1 with size 4"):
        tessel.gather(a, 1, T([[4]]))


def test_topk_sort_gather_import_nothing_per_call(monkeypatch):
    import builtins
    a, index = _rows(), T([[3, 0], [2, 2]])
    imported, real_import = [], builtins.__import__

    def noted(name, *args, **kwargs):
        imported.append(name)
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", noted)
    v, i = a.topk(2, dim=1)
    s, j = a.sort(dim=1)
    g = tessel.gather(a, 1, index)
    monkeypatch.undo()
    assert imported == []
    assert v.tolist() == [[5.0, 3.0], [4.0, 0.5]] and i.tolist() == [[3, 0], [3, 1]]  # torch's
    assert s.tolist() == [[-1.0, 2.0, 3.0, 5.0], [-2.0, 0.5, 0.5, 4.0]] and j.tolist() == [[1, 2, 0, 3], [2, 0, 1, 3]]
    assert g.tolist() == [[5.0, 3.0], [-2.0, -2.0]]  # torch's


def test_randint_values_and_dtypes_are_torchs():
    tessel.manual_seed(0)
    assert tessel.randint(0, 10, (2, 4)).tolist() == [[4, 9, 3, 0], [3, 9, 7, 3]]  # torch's
    tessel.manual_seed(0)
    t = tessel.randint(3, 10, (5,), dtype=tessel.float32)
    assert t.dtype is tessel.float32 and t.tolist() == [7.0, 6.0, 3.0, 5.0, 4.0]  # torch's
    tessel.manual_seed(0)
    t = tessel.randint(10, (3,), dtype=tessel.int32)
    assert t.dtype is tessel.int32 and t.tolist() == [4, 9, 3]  # torch's
    with pytest.raises(RuntimeError, match="to - 1 is out of bounds for unsigned char"):
        tessel.randint(0, 300, (2,), dtype=tessel.uint8)


def test_int64_randint_converts_nothing(monkeypatch):
    from tessel import _tensor
    converted = []
    real_to = tessel.Tensor.to
    monkeypatch.setattr(tessel.Tensor, "to", lambda self, *a, **k: converted.append(a) or real_to(self, *a, **k))
    monkeypatch.setattr(_tensor, "tensor", lambda *a, **k: converted.append("tensor()") or tessel.tensor(*a, **k))
    tessel.manual_seed(0)
    t = tessel.randint(0, 10, (2, 4))
    monkeypatch.undo()
    assert converted == [] and t.dtype is tessel.int64
    assert t.tolist() == [[4, 9, 3, 0], [3, 9, 7, 3]]  # torch's


def test_einsum_values_are_torchs_on_repeated_calls():
    a = tessel.arange(6.0).reshape(2, 3)
    b = tessel.arange(12.0).reshape(3, 4) - 5
    x = tessel.arange(24.0).reshape(2, 3, 4)
    for _ in range(2):  # the second call runs from the cached plans
        assert tessel.einsum("ij,jk->ik", a, b).tolist() == [[5.0, 8.0, 11.0, 14.0], [-4.0, 8.0, 20.0, 32.0]]
        assert tessel.einsum("ij,jk", a, b).sum().item() == 94.0 and tessel.einsum("ij,ij->", a, a).item() == 55.0
        e = tessel.einsum("...k,kn->...n", x, tessel.arange(8.0).reshape(4, 2))
        assert e.shape == (2, 3, 2) and e[1, 2].tolist() == [268.0, 354.0]  # torch's
        assert tessel.einsum("bij,bjk->bik", x, x.transpose(1, 2)).sum().item() == 12204.0  # torch's
        assert tessel.einsum("ijk,k->j", x, tessel.ones(4)).tolist() == [60.0, 92.0, 124.0]  # torch's
        assert tessel.einsum("ii->i", tessel.arange(9.0).reshape(3, 3)).tolist() == [0.0, 4.0, 8.0]  # torch's
        ai = tessel.arange(6).reshape(2, 3)
        e = tessel.einsum("ij,kj->ik", ai, ai)
        assert e.dtype is tessel.int64 and e.tolist() == [[5, 14], [14, 50]]  # torch's
        w = tessel.ones(3, 4, requires_grad=True)
        tessel.einsum("ij,jk->ik", a, w).sum().backward()
        assert w.grad.tolist() == [[3.0] * 4, [5.0] * 4, [7.0] * 4]  # torch's
        with pytest.raises(RuntimeError, match=r"the number of subscripts in the equation \(3\) does not match"):
            tessel.einsum("ijk,jk->i", a, b)


def test_einsum_plans_once_per_equation_and_shapes():
    from tessel import _einsum
    a, b = tessel.ones(2, 5), tessel.ones(5, 7)
    tessel.einsum("pq,qr->pr", a, b)
    before = _einsum._pair_plan.cache_info().hits
    assert tessel.einsum("pq,qr->pr", a, b).tolist() == [[5.0] * 7] * 2  # torch's
    assert _einsum._pair_plan.cache_info().hits == before + 1


def _signed():
    a = T([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]])
    return a, a < 0


def test_mask_setitem_and_masked_fill_values_are_torchs():
    a, m = _signed()
    b = a.clone()
    b[m] = 0.0
    assert b.tolist() == [[1.0, 0.0, 3.0], [0.0, 5.0, 0.0]]  # torch's
    b = a.clone()
    v = b[1]
    v[m[1]] = 9  # through a view
    assert b.tolist() == [[1.0, -2.0, 3.0], [9.0, 5.0, 9.0]]  # torch's
    i = T([[1, 2], [3, 4]])
    i[i > 2] = 7.9
    assert i.tolist() == [[1, 2], [7, 7]]  # torch's
    b = a.clone()
    assert b.masked_fill_(m, -1.5) is b and b.tolist() == [[1.0, -1.5, 3.0], [-1.5, 5.0, -1.5]]  # torch's
    b = a.clone()
    b.masked_fill_(T([True, False, True]), 2)  # a broadcast mask
    assert b.tolist() == [[2.0, -2.0, 2.0], [2.0, 5.0, 2.0]]  # torch's


def test_mask_setitem_and_masked_fill_errors_are_torchs():
    a, m = _signed()
    with pytest.raises(RuntimeError, match="masked_fill_ only supports boolean masks, but got mask with dtype "
                                           "unsigned char"):
        a.masked_fill_(m.to(tessel.uint8), 0.0)
    with pytest.raises(IndexError, match=r"The shape of the mask \[3, 2\] at index 0 does not match the shape"):
        a[tessel.ones(3, 2, dtype=tessel.bool)] = 1.0
    h = tessel.zeros(2, 2, dtype=tessel.float16)
    with pytest.raises(RuntimeError, match="value cannot be converted to type c10::Half without overflow"):
        h[h == 0] = 70000.0
    assert a.tolist() == [[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]]


def test_mask_writes_under_autograd_are_recorded():
    _, m = _signed()
    w = tessel.ones(2, 3, requires_grad=True)
    y = w * 2
    y[m] = 0.0
    y.sum().backward()
    assert w.grad.tolist() == [[2.0, 0.0, 2.0], [0.0, 2.0, 0.0]]  # torch's
    w.grad = None
    y = w * 2
    y.masked_fill_(m, 0.0)
    y.sum().backward()
    assert w.grad.tolist() == [[2.0, 0.0, 2.0], [0.0, 2.0, 0.0]]  # torch's
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        w.masked_fill_(m, 0.0)


def test_mask_writes_of_plain_tensors_skip_the_python_rules(monkeypatch):
    from tessel import _setitem

    def refused(*args, **kwargs):
        raise AssertionError("the general path ran for a plain mask write")
    a, m = _signed()
    monkeypatch.setattr(_setitem, "_rows_of", refused)  # (the mask's numpy round trip)
    monkeypatch.setattr(tessel.Tensor, "masked_fill", refused)
    a[m] = 0.5
    a.masked_fill_(a > 2, 7.0)
    monkeypatch.undo()
    assert a.tolist() == [[1.0, 0.5, 7.0], [0.5, 7.0, 0.5]]  # torch's


def test_transpose_and_contiguity_are_torchs():
    x = tessel.arange(24.0).reshape(2, 3, 4)
    assert x.T.shape == (4, 3, 2) and x.T.stride() == (1, 4, 12)  # torch's
    t = x[0].T
    assert t.tolist() == [[0.0, 4.0, 8.0], [1.0, 5.0, 9.0], [2.0, 6.0, 10.0], [3.0, 7.0, 11.0]]  # torch's
    assert tessel.tensor(2.0).T.shape == () and tessel.arange(3.0).T.tolist() == [0.0, 1.0, 2.0]  # torch's
    assert not t.is_contiguous() and t.contiguous().is_contiguous() and t.contiguous().stride() == (3, 1)  # torch's
    assert t.contiguous().tolist() == t.tolist()
    assert x.contiguous() is x and not x.is_contiguous(memory_format=tessel.channels_last)  # torch's
    c = tessel.ones(2, 3, 4, 5).contiguous(memory_format=tessel.channels_last)
    assert c.stride() == (60, 1, 15, 3) and not c.is_contiguous()  # torch's
    assert c.is_contiguous(memory_format=tessel.channels_last)  # torch's
    w = tessel.ones(2, 3, requires_grad=True)
    (w.T * tessel.arange(6.0).reshape(3, 2)).sum().backward()
    assert w.grad.tolist() == [[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]]  # torch's


def test_default_layout_queries_skip_the_memory_format_rules(monkeypatch):
    from tessel import _tensor_extras

    def refused(*args, **kwargs):
        raise AssertionError("the memory-format rules ran for the default format")
    t = tessel.arange(6.0).reshape(2, 3).T
    monkeypatch.setattr(_tensor_extras, "_channels_last_order", refused)
    monkeypatch.setattr(_compat, "range", refused, raising=False)  # (a.T of a matrix builds no dim range)
    flags = (t.is_contiguous(), t.T.is_contiguous())
    c = t.contiguous()
    monkeypatch.undo()
    assert flags == (False, True) and c.stride() == (2, 1)  # torch's
    assert c.tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]  # torch's


def test_equal_is_torchs():
    nan = float("nan")
    a = T([[1.0, 2.0], [3.0, nan]])
    assert tessel.equal(a, a.clone()) is False and tessel.equal(a[0], a[0].clone()) is True  # torch's (NaN != NaN)
    assert not tessel.equal(a, a[:, :1]) and not tessel.equal(tessel.ones(2, 1), tessel.ones(2, 3))  # torch's
    assert tessel.equal(T([0.0]), T([-0.0])) and tessel.equal(tessel.zeros(0, 3), tessel.zeros(0, 3))  # torch's
    assert not tessel.equal(tessel.zeros(0, 3), tessel.zeros(3, 0))  # torch's
    assert tessel.equal(T([1, 2]), T([1.0, 2.0])) and not tessel.equal(T([1, 2]), T([1, 3]))  # torch's
    b = tessel.arange(6.0).reshape(2, 3)
    assert tessel.equal(b.T, b.T.contiguous()) and b.equal(b + 0)  # torch's
    assert tessel.equal(T([True, False]), T([True, False]))  # torch's
    assert tessel.equal(tessel.ones(2, dtype=tessel.bfloat16), tessel.ones(2, dtype=tessel.bfloat16))  # torch's
    assert tessel.equal(tessel.ones(2, requires_grad=True), tessel.ones(2))  # torch's


def test_equal_of_plain_tensors_copies_nothing_to_numpy(monkeypatch):
    from tessel import _extra

    def refused(*args, **kwargs):
        raise AssertionError("equal copied its operands to numpy")
    b = tessel.arange(6.0).reshape(2, 3)
    monkeypatch.setattr(_extra, "_exact_numpy", refused)
    same, different = tessel.equal(b, b.clone()), tessel.equal(b, b + 1)
    monkeypatch.undo()
    assert same is True and different is False  # torch's


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
