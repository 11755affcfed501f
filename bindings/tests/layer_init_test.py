"""tessel.nn's C++ layers start from torch's initialization, so a ported script trains from the same
distribution: Linear's weight and bias uniform on ±1/sqrt(in_features) (kaiming_uniform_(a=sqrt(5))), Embedding
N(0, 1) with the padding row zero, norms ones and zeros; init_std= keeps the GPT-2 style N(0, init_std) weight
and zero bias. reset_parameters() redraws from the default generator (reproducible under manual_seed). The
moments are checked against the distributions' own (uniform: variance b²/3) on enough draws that a wrong
distribution cannot pass: the tolerances are several standard errors, the alternatives far outside them."""
import math
import sys

import numpy as np
import pytest

import tessel
import tessel.nn as nn


def test_linear_draws_torchs_uniform_weight_and_bias():
    tessel.manual_seed(0)
    layer = nn.Linear(64, 512)
    w, b = layer.weight.detach().numpy(), layer.bias.detach().numpy()
    bound = 1 / math.sqrt(64)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound
    assert abs(w.mean()) < 0.01 * bound  # standard error 0.0026·bound over 32768 draws
    assert w.var() == pytest.approx(bound ** 2 / 3, rel=0.03)  # N(0, 0.02) would give 0.0004 against 0.0052
    assert np.abs(b).max() <= bound and b.std() == pytest.approx(bound / math.sqrt(3), rel=0.1)
    assert layer.weight.requires_grad and layer.bias.requires_grad


def test_init_std_keeps_the_gpt2_style_normal_and_zero_bias():
    tessel.manual_seed(0)
    layer = nn.Linear(64, 512, init_std=0.02)
    w = layer.weight.detach().numpy()
    assert w.std() == pytest.approx(0.02, rel=0.03) and np.abs(w).max() > 3 * 0.02  # normal tails, not uniform
    assert not layer.bias.detach().numpy().any()
    emb = nn.Embedding(300, 64, init_std=0.02)
    assert emb.weight.detach().numpy().std() == pytest.approx(0.02, rel=0.03)


def test_embedding_draws_a_standard_normal_with_the_padding_row_zero():
    tessel.manual_seed(0)
    emb = nn.Embedding(500, 64, padding_idx=3)
    w = emb.weight.detach().numpy()
    assert not w[3].any()
    rest = np.delete(w, 3, axis=0)
    assert rest.std() == pytest.approx(1.0, rel=0.02) and abs(rest.mean()) < 0.02


def test_reset_parameters_redraws_from_the_default_generator():
    layer = nn.Linear(8, 4)
    tessel.manual_seed(5)
    layer.reset_parameters()
    first = [p.detach().numpy().copy() for p in layer.parameters()]
    with tessel.no_grad():
        layer.weight.mul_(10.0)
    tessel.manual_seed(5)
    layer.reset_parameters()
    for p, want in zip(layer.parameters(), first):
        np.testing.assert_array_equal(p.detach().numpy(), want)
    assert np.abs(first[0]).max() <= 1 / math.sqrt(8)
    emb = nn.Embedding(10, 3, padding_idx=0)
    with tessel.no_grad():
        emb.weight.fill_(5.0)
    emb.reset_parameters()
    w = emb.weight.detach().numpy()
    assert not w[0].any() and (w[1:] != 5.0).all()
    norm = nn.LayerNorm(4)
    with tessel.no_grad():
        norm.weight.fill_(3.0)
        norm.bias.fill_(2.0)
    norm.reset_parameters()
    assert norm.weight.tolist() == [1.0] * 4 and norm.bias.tolist() == [0.0] * 4
    rms = nn.RMSNorm(3)
    with tessel.no_grad():
        rms.weight.fill_(0.5)
    rms.reset_parameters()
    assert rms.weight.tolist() == [1.0] * 3


def test_an_optimizer_sees_the_reset_values():
    layer = nn.Linear(3, 2)
    opt = tessel.optim.SGD(layer.parameters(), lr=0.1)
    layer.reset_parameters()
    before = layer.weight.detach().numpy().copy()
    layer(tessel.ones(1, 3)).sum().backward()
    opt.step()
    np.testing.assert_allclose(layer.weight.detach().numpy(), before - 0.1, rtol=1e-6)  # d/dW sum(Wx) = 1
    with pytest.raises(ValueError, match="features must be positive"):
        nn.Linear(0, 2)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
