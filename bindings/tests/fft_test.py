"""tessel.fft against numpy.fft (float64): fft / ifft / rfft / irfft / hfft / ihfft with n (pad, trim), dim and
the three norms, the 2-D and n-D forms, fftfreq / rfftfreq / fftshift / ifftshift; gradients of real losses
through rfft and irfft against central finite differences (the mirrored bins' doubling, the unused imaginary
parts of the DC and Nyquist bins), and a second derivative through create_graph."""
import sys

import numpy as np
import pytest

import tessel
from sharded_equivalence import finite_difference

F = tessel.fft
RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 6))
Y = RNG.standard_normal((3, 4, 5))


def t(a, **kw):
    return tessel.tensor(np.asarray(a, dtype=np.float64), **kw)


def c(z):
    """A ComplexTensor as numpy complex."""
    return z.real.detach().numpy() + 1j * z.imag.detach().numpy()


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
def test_one_dimensional_transforms_match_numpy(norm):
    np.testing.assert_allclose(c(F.fft(t(X), norm=norm)), np.fft.fft(X, norm=norm), atol=1e-12)
    np.testing.assert_allclose(c(F.fft(t(X), n=8, norm=norm)), np.fft.fft(X, n=8, norm=norm), atol=1e-12)
    np.testing.assert_allclose(c(F.fft(t(X), n=4, dim=1, norm=norm)), np.fft.fft(X, n=4, norm=norm), atol=1e-12)
    np.testing.assert_allclose(c(F.fft(t(X), dim=0, norm=norm)), np.fft.fft(X, axis=0, norm=norm), atol=1e-12)
    spectrum = np.fft.fft(X, norm=norm)
    np.testing.assert_allclose(c(F.ifft(F.fft(t(X), norm=norm), norm=norm)), X, atol=1e-12)
    np.testing.assert_allclose(c(F.rfft(t(X), norm=norm)), np.fft.rfft(X, norm=norm), atol=1e-12)
    np.testing.assert_allclose(c(F.rfft(t(X), n=7, norm=norm)), np.fft.rfft(X, n=7, norm=norm), atol=1e-12)
    half = np.fft.rfft(X, norm=norm)
    np.testing.assert_allclose(F.irfft(F.rfft(t(X), norm=norm), norm=norm).numpy(), X, atol=1e-12)
    for n in (5, 7, 10):
        np.testing.assert_allclose(F.irfft(F.rfft(t(X), norm=norm), n=n, norm=norm).numpy(),
                                   np.fft.irfft(half, n=n, norm=norm), atol=1e-12)
    np.testing.assert_allclose(F.hfft(F.rfft(t(X)), norm=norm).numpy(), np.fft.hfft(np.fft.rfft(X), norm=norm),
                               atol=1e-10)
    np.testing.assert_allclose(c(F.ihfft(t(X), norm=norm)), np.fft.ihfft(X, norm=norm), atol=1e-12)
    assert spectrum.shape == (2, 6)


def test_multi_dimensional_transforms_and_helpers():
    np.testing.assert_allclose(c(F.fft2(t(Y))), np.fft.fft2(Y), atol=1e-12)
    np.testing.assert_allclose(c(F.ifft2(t(Y))), np.fft.ifft2(Y), atol=1e-12)
    np.testing.assert_allclose(c(F.fftn(t(Y), s=(3, 6))), np.fft.fftn(Y, s=(3, 6), axes=(1, 2)), atol=1e-12)
    np.testing.assert_allclose(c(F.fftn(t(Y))), np.fft.fftn(Y), atol=1e-11)
    np.testing.assert_allclose(c(F.rfft2(t(Y))), np.fft.rfft2(Y), atol=1e-12)
    np.testing.assert_allclose(c(F.rfftn(t(Y), dim=(0, 2))), np.fft.rfftn(Y, axes=(0, 2)), atol=1e-12)
    np.testing.assert_allclose(F.irfft2(F.rfft2(t(Y)), s=(4, 5)).numpy(), Y, atol=1e-12)
    np.testing.assert_allclose(F.irfftn(F.rfftn(t(Y))).numpy(), np.fft.irfftn(np.fft.rfftn(Y)), atol=1e-12)
    np.testing.assert_allclose(F.irfftn(F.rfftn(t(Y)), s=Y.shape).numpy(), Y, atol=1e-12)
    np.testing.assert_allclose(F.fftfreq(5, 0.5).numpy(), np.fft.fftfreq(5, 0.5), rtol=1e-6)
    np.testing.assert_allclose(F.rfftfreq(6).numpy(), np.fft.rfftfreq(6), rtol=1e-6)
    np.testing.assert_array_equal(F.fftshift(t(Y), dim=(1, 2)).numpy(), np.fft.fftshift(Y, axes=(1, 2)))
    np.testing.assert_array_equal(F.ifftshift(t(Y)).numpy(), np.fft.ifftshift(Y))
    np.testing.assert_allclose(c(F.fftshift(F.fft(t(X)))), np.fft.fftshift(np.fft.fft(X)), atol=1e-12)
    with pytest.raises(RuntimeError, match='Invalid normalization mode: "twice"'):  # torch's RuntimeError
        F.fft(t(X), norm="twice")


def test_gradients_of_real_losses_through_the_transforms():
    w = RNG.standard_normal((2, 4))

    def through_rfft(x):
        z = F.rfft(x)
        return (z.real * t(w)).sum() + (z.imag ** 2).sum()
    xt = t(X, requires_grad=True)
    through_rfft(xt).backward()
    np.testing.assert_allclose(xt.grad.numpy(), finite_difference(lambda v: through_rfft(t(v)).item(), X.copy()),
                               rtol=1e-6, atol=1e-8)
    spectrum = np.fft.rfft(X)
    weights = RNG.standard_normal((2, 6))

    def through_irfft(re, im):
        return (F.irfft(tessel.complex(re, im), n=6) * t(weights)).sum()
    re, im = t(spectrum.real, requires_grad=True), t(spectrum.imag, requires_grad=True)
    through_irfft(re, im).backward()
    np.testing.assert_allclose(re.grad.numpy(), finite_difference(
        lambda v: through_irfft(t(v), t(spectrum.imag)).item(), spectrum.real.copy()), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(im.grad.numpy(), finite_difference(
        lambda v: through_irfft(t(spectrum.real), t(v)).item(), spectrum.imag.copy()), rtol=1e-6, atol=1e-8)
    assert not im.grad.numpy()[:, [0, 3]].any()  # the DC and Nyquist bins' imaginary parts are unused
    # second derivative: d/dx <∇ |fft(x)|², v> = 2·6·v (|fft x|² = 6 |x|² by Parseval)
    x = t(X, requires_grad=True)
    g, = tessel.autograd.grad(F.fft(x).abs().pow(2).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), 12 * X, rtol=1e-10)
    v = RNG.standard_normal((2, 6))
    hv, = tessel.autograd.grad((g * t(v)).sum(), x)
    np.testing.assert_allclose(hv.numpy(), 12 * v, rtol=1e-10)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))


def test_hfftn_and_ihfftn_match_numpy_identities():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 4))
    got = tessel.fft.ihfft2(tessel.tensor(x, dtype=tessel.float64))
    want = np.conj(np.fft.rfftn(x)) / x.size  # ihfftn: the conjugate half spectrum, 1/n scaled
    np.testing.assert_allclose(got.real.numpy() + 1j * got.imag.numpy(), want, rtol=1e-12, atol=1e-14)
    c = rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))
    ct = tessel.complex(tessel.tensor(c.real, dtype=tessel.float64), tessel.tensor(c.imag, dtype=tessel.float64))
    cases = [(None, None, 3 * 6), ((3, 6), None, 3 * 6), ((3, 6), "forward", 1), ((3, 6), "ortho", 18 ** 0.5)]
    for s, norm, scale in cases:
        got = tessel.fft.hfftn(ct, s=s, norm=norm).numpy()
        want = np.fft.irfftn(np.conj(c), s=(3, 6)) * scale  # hfftn: irfftn of the conjugate, unscaled by default
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert tuple(tessel.fft.hfft2(ct).shape) == (3, 6)
