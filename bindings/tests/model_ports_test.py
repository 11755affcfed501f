"""Behaviours found by porting model code to tessel by its imports and comparing with torch 2.15: HF BERT's
masked-LM head (a bias assigned to a Linear built without one), Swin's roll-then-view, Mixtral's experts without
tokens, DeepSeek's auxiliary-loss Function, T5's integer buckets, mamba-minimal's keyword arguments, and
pytorch/examples' legacy constructors, warnings and optimizer state. Expected values are computed another way
(numpy, closed forms) or are torch 2.15's printed results for the same lines."""
import sys

import numpy as np
import pytest

import tessel
import tessel.nn as nn


def test_a_bias_or_norm_weight_assigned_after_construction_takes_part_in_forward_and_backward():
    # HF BertLMPredictionHead: decoder = nn.Linear(h, V, bias=False); self.bias = Parameter(zeros(V));
    # decoder.bias = self.bias. The C++ layers read a bias flag fixed at construction and ignored it silently.
    x_np = np.array([[1.0, -2.0, 0.5]], dtype=np.float32)
    x = tessel.tensor(x_np)
    lin = nn.Linear(3, 2, bias=False)
    bias = nn.Parameter(tessel.tensor([5.0, -1.0]))
    lin.bias = bias
    assert [n for n, _ in lin.named_parameters()] == ["weight", "bias"]
    out = lin(x)
    np.testing.assert_allclose(out.detach().numpy(), x_np @ lin.weight.detach().numpy().T + [5.0, -1.0], rtol=1e-6)
    out.sum().backward()
    np.testing.assert_array_equal(bias.grad.numpy(), [1.0, 1.0])
    lin.bias = None  # and back: no bias
    np.testing.assert_allclose(lin(x).detach().numpy(), x_np @ lin.weight.detach().numpy().T, rtol=1e-6)

    row = np.array([[1.0, 2.0]], dtype=np.float32)  # normalized: [-1, 1] (up to eps)
    norm = (row - row.mean()) / np.sqrt(row.var() + 1e-5)
    ln = nn.LayerNorm(2, bias=False)
    ln.bias = nn.Parameter(tessel.tensor([5.0, 5.0]))
    out = ln(tessel.tensor(row))
    np.testing.assert_allclose(out.detach().numpy(), norm + 5.0, rtol=1e-6)
    out.sum().backward()
    np.testing.assert_array_equal(ln.bias.grad.numpy(), [1.0, 1.0])
    bare = nn.LayerNorm(2, elementwise_affine=False)
    bare.weight = nn.Parameter(tessel.tensor([2.0, 3.0]))
    np.testing.assert_allclose(bare(tessel.tensor(row)).detach().numpy(), norm * [2.0, 3.0], rtol=1e-6)
    rms = nn.RMSNorm(2, elementwise_affine=False)
    rms.weight = nn.Parameter(tessel.tensor([2.0, 3.0]))
    want = row / np.sqrt((row ** 2).mean() + np.finfo(np.float32).eps) * [2.0, 3.0]
    np.testing.assert_allclose(rms(tessel.tensor(row)).detach().numpy(), want, rtol=1e-6)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
