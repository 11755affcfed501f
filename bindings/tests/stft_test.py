"""torch.stft / istft: frames, windows, centering pads, one- and two-sided spectra and normalization checked
against a naive DFT loop in float64 (numpy's padding, the definition of the transform), istft(stft(x)) == x for
NOLA windows, gradients by finite differences, and torch's argument errors. (Probed against torch 2.15 too:
equal to its printed digits on every option above.)"""
import sys

import numpy as np
import pytest

import tessel
from tessel.autograd import gradcheck

RNG = np.random.default_rng(4)


def naive_stft(x, n_fft, hop, window, center, pad_mode, onesided, normalized):
    if center:
        x = np.pad(x, n_fft // 2, mode={"reflect": "reflect", "constant": "constant", "replicate": "edge",
                                         "circular": "wrap"}[pad_mode])
    count = 1 + (len(x) - n_fft) // hop
    k = np.arange(n_fft // 2 + 1 if onesided else n_fft)
    out = np.zeros((len(k), count), complex)
    for t in range(count):
        frame = x[t * hop:t * hop + n_fft] * window
        for f in k:
            out[f, t] = np.sum(frame * np.exp(-2j * np.pi * f * np.arange(n_fft) / n_fft))
    return out / np.sqrt(n_fft) if normalized else out


def padded(win, n_fft):
    left = (n_fft - len(win)) // 2
    return np.concatenate([np.zeros(left), win, np.zeros(n_fft - len(win) - left)])


@pytest.mark.parametrize("n_fft,hop,win_length,center,pad_mode,onesided,normalized", [
    (16, 4, 16, True, "reflect", True, False), (16, 5, 12, True, "constant", True, True),
    (8, 3, 8, False, "reflect", False, False), (12, 4, 10, True, "replicate", True, False),
    (10, 4, 10, True, "circular", None, False)])
def test_stft_matches_the_dft_of_each_windowed_frame(n_fft, hop, win_length, center, pad_mode, onesided, normalized):
    x = RNG.standard_normal(41)
    win = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(win_length) / win_length)  # periodic Hann, as torch's
    got = tessel.stft(tessel.tensor(x, dtype=tessel.float64), n_fft, hop_length=hop, win_length=win_length,
                      window=tessel.tensor(win, dtype=tessel.float64), center=center, pad_mode=pad_mode,
                      onesided=onesided, normalized=normalized, return_complex=True)
    want = naive_stft(x, n_fft, hop, padded(win, n_fft), center, pad_mode, onesided is not False, normalized)
    np.testing.assert_allclose(got.real.numpy() + 1j * got.imag.numpy(), want, rtol=1e-9, atol=1e-9)
    assert tuple(tessel.hann_window(win_length, dtype=tessel.float64).tolist()) == pytest.approx(tuple(win))


def test_istft_inverts_and_batches():
    x = tessel.tensor(RNG.standard_normal((3, 53)), dtype=tessel.float64)
    for n_fft, hop in ((16, 4), (20, 5), (8, 2)):
        w = tessel.hann_window(n_fft, dtype=tessel.float64)
        spec = tessel.stft(x, n_fft, hop_length=hop, window=w, return_complex=True)
        assert tuple(spec.shape) == (3, n_fft // 2 + 1, 1 + 53 // hop)
        back = tessel.istft(spec, n_fft, hop_length=hop, window=w, length=53)
        np.testing.assert_allclose(back.numpy(), x.numpy(), rtol=1e-10, atol=1e-10)
        one = tessel.istft(tessel.stft(x[0], n_fft, hop_length=hop, window=w, return_complex=True), n_fft,
                           hop_length=hop, window=w, length=53)
        np.testing.assert_allclose(one.numpy(), x[0].numpy(), rtol=1e-10, atol=1e-10)
    stacked = tessel.stft(x[0], 16, return_complex=False)
    spec = tessel.stft(x[0], 16, return_complex=True)
    np.testing.assert_array_equal(stacked[..., 1].numpy(), spec.imag.numpy())


def test_gradients_by_finite_differences():
    x = tessel.tensor(RNG.standard_normal(20), dtype=tessel.float64, requires_grad=True)
    w = tessel.hann_window(8, dtype=tessel.float64)
    weights = tessel.tensor(RNG.standard_normal((5, 6)), dtype=tessel.float64)

    def power(v):
        s = tessel.stft(v, 8, hop_length=4, window=w, return_complex=True)
        return ((s.real ** 2 + s.imag ** 2) * weights).sum()
    assert gradcheck(power, (x,), eps=1e-6, atol=1e-6, rtol=1e-4)
    spec = tessel.stft(x.detach(), 8, hop_length=2, window=w, return_complex=True)
    re = spec.real.clone().requires_grad_(True)

    def inverse(r):
        from tessel._complex import _from_parts
        return (tessel.istft(_from_parts(r, spec.imag), 8, hop_length=2, window=w, length=20) * x.detach()).sum()
    assert gradcheck(inverse, (re,), eps=1e-6, atol=1e-6, rtol=1e-4)


def test_torchs_argument_errors():
    x = tessel.randn(30)
    with pytest.raises(RuntimeError, match="requires the return_complex parameter"):
        tessel.stft(x, 8)
    with pytest.raises(RuntimeError, match="window tensor of size equal to win_length=8"):
        tessel.stft(x, 8, window=tessel.ones(6), return_complex=True)
    with pytest.raises(RuntimeError, match="expected a 1D or 2D tensor"):
        tessel.stft(tessel.randn(2, 2, 30), 8, return_complex=True)
    spec = tessel.stft(x, 8, hop_length=8, window=tessel.hann_window(8), return_complex=True, center=False)
    with pytest.raises(RuntimeError, match="window overlap add min"):  # Hann at hop n_fft: zeros at the seams
        tessel.istft(spec, 8, hop_length=8, window=tessel.hann_window(8), center=False)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
