"""tessel.set_default_dtype / get_default_dtype as torch's: the dtype factories, layers' parameters and
float-scalar promotion of integer tensors take when none is given; explicit dtypes win; float32 until set;
non-floating dtypes raise torch's TypeError. Every test restores float32 (the default is process-wide)."""
import sys

import numpy as np
import pytest

import tessel
import tessel.nn as nn


@pytest.fixture
def default_dtype():
    """Sets the default dtype for one test and restores float32 after it, pass or fail."""
    yield tessel.set_default_dtype
    tessel.set_default_dtype(tessel.float32)


def factories():
    return {"zeros": tessel.zeros(2), "ones": tessel.ones(2, 2), "empty": tessel.empty(3), "randn": tessel.randn(2),
            "rand": tessel.rand(2), "full_float": tessel.full((2,), 1.5), "tensor_list": tessel.tensor([1.5, 2.0]),
            "tensor_scalar": tessel.tensor(0.1), "arange_float": tessel.arange(0.0, 1.0, 0.25),
            "linspace": tessel.linspace(0, 1, 5), "logspace": tessel.logspace(0, 1, 3), "eye": tessel.eye(2),
            "scalar_tensor": tessel.scalar_tensor(1.0), "parameter": nn.Parameter()}


def layers():
    return {"Linear": nn.Linear(3, 2).weight, "Linear.bias": nn.Linear(3, 2).bias, "Embedding": nn.Embedding(4, 3).weight,
            "LayerNorm": nn.LayerNorm(3).weight, "RMSNorm": nn.RMSNorm(3).weight, "Conv1d": nn.Conv1d(2, 3, 3).weight,
            "BatchNorm1d": nn.BatchNorm1d(3).running_mean, "LSTM": nn.LSTM(3, 4).weight_ih_l0,
            "MultiheadAttention": nn.MultiheadAttention(4, 2).in_proj_weight, "Bilinear": nn.Bilinear(2, 3, 4).weight,
            "PReLU": nn.PReLU().weight}


def test_float32_until_set_and_only_floating_dtypes_are_accepted(default_dtype):
    assert tessel.get_default_dtype() == tessel.float32
    i = tessel.tensor([1, 2, 3])
    # torch's result type with a Python float: floating even for a whole bound (clamp(int, min=2.0) is float)
    assert tessel.clamp(i, min=2.0).dtype == tessel.float32 and tessel.clamp(i, min=2.0).tolist() == [2.0, 2.0, 3.0]
    assert tessel.clamp(i, min=2).dtype == tessel.int64
    assert tessel.where(i > 1, i, 0.5).tolist() == [0.5, 2.0, 3.0]  # was int64 [0, 2, 3]
    b = tessel.tensor([True, False, True])
    # cat / stack promote across dtypes (they raised a dtype mismatch)
    f = tessel.tensor([0.5])
    assert tessel.cat([i, f]).dtype == tessel.float32 and tessel.cat([i, f]).tolist() == [1.0, 2.0, 3.0, 0.5]
    assert tessel.stack([b, i]).dtype == tessel.int64 and tessel.stack([b, i]).tolist() == [[1, 0, 1], [1, 2, 3]]
    assert tessel.cat([f, tessel.tensor([1.0], dtype=tessel.float64)]).dtype == tessel.float64
    for t, want in ((b * 2, [2, 0, 2]), (3 * b, [3, 0, 3]), (b + 1, [2, 1, 2])):
        assert t.dtype == tessel.int64 and t.tolist() == want  # torch's int64; it raised for bool tensors
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with a bool tensor is not supported"):
        1 - b  # torch 2.15 refuses subtraction with any bool operand
    assert {k: t.dtype for k, t in factories().items()} == {k: tessel.float32 for k in factories()}
    for bad in (tessel.int64, tessel.bool, "float64"):
        with pytest.raises(TypeError, match="only floating-point types are supported as the default type"):
            default_dtype(bad)
    assert tessel.get_default_dtype() == tessel.float32


def test_float64_default_reaches_factories_layers_and_integer_promotion(default_dtype):
    default_dtype(tessel.float64)
    assert tessel.get_default_dtype() == tessel.float64
    assert {k: t.dtype for k, t in factories().items()} == {k: tessel.float64 for k in factories()}
    assert {k: p.dtype for k, p in layers().items()} == {k: tessel.float64 for k in layers()}
    assert tessel.tensor(0.1).item() == 0.1  # the Python float itself, not rounded through float32
    assert tessel.finfo().eps == np.finfo(np.float64).eps
    # integers stay integers; an explicit dtype wins
    assert tessel.arange(3).dtype == tessel.int64 and tessel.full((2,), 3).dtype == tessel.int64
    assert tessel.zeros(2, dtype=tessel.float32).dtype == tessel.float32
    assert nn.Linear(2, 2, dtype=tessel.float32).weight.dtype == tessel.float32
    # torch's promotion: an integer tensor meeting a Python float, and true division, take the default dtype
    i = tessel.tensor([1, 2, 3])
    assert (i + 0.1).dtype == tessel.float64 and (i + 0.1).tolist() == [1.1, 2.1, 3.1]  # exact in float64 only
    assert (i / 3).dtype == tessel.float64 and (i / 3).tolist() == [1 / 3, 2 / 3, 1.0]
    assert (i * 0.5).dtype == tessel.float64 and (0.5 * i).dtype == tessel.float64
    assert (i < 1.0000000001).tolist() == [True, False, False]  # compared in float64 (float32 rounds to 1.0)
    assert tessel.tan(i).dtype == tessel.float64
    # the float ops of integer tensors, pow and clamp with float operands, where with a float: torch's result type
    for name, t in {"sqrt": tessel.sqrt(i), "exp": tessel.exp(i), "sigmoid": tessel.sigmoid(i), "pow": i ** 0.5,
                    "rpow": 2.0 ** i, "clamp": tessel.clamp(i, min=1.5), "where": tessel.where(i > 1, i, 0.5),
                    "where_numbers": tessel.where(i > 1, 1.0, 0.0)}.items():
        assert t.dtype == tessel.float64, name
    assert tessel.sqrt(i)[1].item() == 2 ** 0.5 and tessel.where(i > 1, i, 0.1).tolist() == [0.1, 2.0, 3.0]
    # float64 tensors draw in float64: normal_ values are not float32 values widened
    w = tessel.empty(64, dtype=tessel.float64).normal_()
    assert np.any(w.numpy() != w.numpy().astype(np.float32).astype(np.float64))
    # a float tensor keeps its own dtype
    assert (tessel.ones(2, dtype=tessel.float32) * 0.5).dtype == tessel.float32


def test_a_float64_training_step_matches_numpy_in_double(default_dtype):
    default_dtype(tessel.float64)
    tessel.manual_seed(0)
    lin = nn.Linear(3, 2)
    x = tessel.randn(4, 3)
    loss = (lin(x) ** 2).mean()
    loss.backward()
    w, b, xs = lin.weight.detach().numpy(), lin.bias.detach().numpy(), x.numpy()
    y = xs @ w.T + b
    assert loss.dtype == tessel.float64 and abs(loss.item() - (y ** 2).mean()) < 1e-15
    np.testing.assert_allclose(lin.weight.grad.numpy(), 2 * y.T @ xs / y.size, rtol=1e-13)
    np.testing.assert_allclose(lin.bias.grad.numpy(), 2 * y.sum(0) / y.size, rtol=1e-13)


def test_bfloat16_default(default_dtype):
    default_dtype(tessel.bfloat16)
    assert tessel.zeros(2).dtype == tessel.bfloat16 and nn.Linear(2, 2).weight.dtype == tessel.bfloat16
    assert tessel.tensor([1.5]).dtype == tessel.bfloat16 and (tessel.tensor([1]) * 0.5).dtype == tessel.bfloat16


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
