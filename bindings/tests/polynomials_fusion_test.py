"""torch.special's orthogonal polynomials (tessel/_polynomials.py) against numpy.polynomial's own bases and
closed forms, with tensor degrees and negative ones; and nn.utils.fusion's folded conv / linear layers against
the unfused layers in evaluation."""
import math
import sys

import numpy as np
import pytest
from numpy.polynomial import chebyshev, hermite, hermite_e, laguerre, legendre

import tessel
import tessel.nn as nn
from sharded_equivalence import finite_difference

S = tessel.special
X = np.array([-0.9, -0.3, 0.0, 0.4, 0.95, 1.5])


def t(a, **kw):
    return tessel.tensor(np.asarray(a, dtype=np.float64), **kw)


_BASES = {chebyshev: chebyshev.Chebyshev, hermite: hermite.Hermite, hermite_e: hermite_e.HermiteE,
          laguerre: laguerre.Laguerre, legendre: legendre.Legendre}


def basis(module, n):
    """numpy's n-th basis polynomial of the family."""
    return _BASES[module].basis(n)


@pytest.mark.parametrize("name, module, transform", [
    ("chebyshev_polynomial_t", chebyshev, lambda x: x), ("hermite_polynomial_h", hermite, lambda x: x),
    ("hermite_polynomial_he", hermite_e, lambda x: x), ("laguerre_polynomial_l", laguerre, lambda x: x),
    ("legendre_polynomial_p", legendre, lambda x: x), ("shifted_chebyshev_polynomial_t", chebyshev,
                                                       lambda x: 2 * x - 1)])
def test_polynomials_match_numpys_bases(name, module, transform):
    fn = getattr(S, name)
    for n in range(7):
        np.testing.assert_allclose(fn(t(X), n).numpy(), basis(module, n)(transform(X)), rtol=1e-12, atol=1e-12,
                                   err_msg="%s n=%d" % (name, n))
    degrees = np.array([0, 1, 2, 3, 4, 5])
    want = [basis(module, int(k))(transform(v)) for v, k in zip(X, degrees)]
    np.testing.assert_allclose(fn(t(X), t(degrees)).numpy(), want, rtol=1e-12, atol=1e-12)
    assert not fn(t(X), -1).numpy().any()


def test_chebyshev_u_v_w_closed_forms_and_gradient():
    theta = np.arccos(X[np.abs(X) < 1])
    inside = t(np.cos(theta))
    for n in range(5):
        np.testing.assert_allclose(S.chebyshev_polynomial_u(inside, n).numpy(),
                                   np.sin((n + 1) * theta) / np.sin(theta), rtol=1e-10)
        np.testing.assert_allclose(S.chebyshev_polynomial_v(inside, n).numpy(),
                                   np.cos((n + 0.5) * theta) / np.cos(theta / 2), rtol=1e-10)
        np.testing.assert_allclose(S.chebyshev_polynomial_w(inside, n).numpy(),
                                   np.sin((n + 0.5) * theta) / np.sin(theta / 2), rtol=1e-10)
    x = t(X, requires_grad=True)
    S.legendre_polynomial_p(x, 4).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), finite_difference(
        lambda v: S.legendre_polynomial_p(t(v), 4).sum().item(), X.copy()), rtol=1e-7)


def test_conv_and_linear_batchnorm_fusion():
    tessel.manual_seed(0)
    conv, bn = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)
    x = tessel.randn(2, 3, 5, 5)
    bn.train()
    bn(conv(x))  # running statistics that are not the defaults
    with tessel.no_grad():
        bn.weight.copy_(tessel.tensor([0.5, 1.5, -1.0, 2.0]))
        bn.bias.copy_(tessel.tensor([0.1, -0.2, 0.3, 0.0]))
    conv.eval(), bn.eval()
    fused = nn.utils.fuse_conv_bn_eval(conv, bn)
    np.testing.assert_allclose(fused(x).detach().numpy(), bn(conv(x)).detach().numpy(), rtol=1e-5, atol=1e-5)
    assert fused is not conv and conv.weight.shape == fused.weight.shape
    with pytest.raises(AssertionError, match="Fusion only for eval!"):
        nn.utils.fuse_conv_bn_eval(conv.train(), bn)
    linear, bn1 = nn.Linear(3, 4), nn.BatchNorm1d(4)
    bn1.train()
    bn1(linear(tessel.randn(8, 3)))
    linear.eval(), bn1.eval()
    fused = nn.utils.fuse_linear_bn_eval(linear, bn1)
    y = tessel.randn(5, 3)
    np.testing.assert_allclose(fused(y).detach().numpy(), bn1(linear(y)).detach().numpy(), rtol=1e-5, atol=1e-6)
    w, b = nn.utils.fuse_conv_bn_weights(conv.weight, None, bn.running_mean, bn.running_var, bn.eps, bn.weight,
                                         bn.bias)
    scale = bn.weight.detach().numpy() / np.sqrt(bn.running_var.numpy() + bn.eps)
    np.testing.assert_allclose(b.detach().numpy(), -bn.running_mean.numpy() * scale + bn.bias.detach().numpy(),
                               rtol=1e-6, atol=1e-7)
    assert math.isclose(w.detach().numpy()[1, 0, 0, 0], conv.weight.detach().numpy()[1, 0, 0, 0] * scale[1],
                        rel_tol=1e-6)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
