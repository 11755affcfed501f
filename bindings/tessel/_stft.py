"""torch.stft / torch.istft: short-time Fourier transforms composed of tessel ops around tessel.fft (so both are
differentiable, to any order the FFT Function allows).

    spec = tessel.stft(wave, n_fft=512, hop_length=128, window=tessel.hann_window(512), return_complex=True)
    wave_back = tessel.istft(spec, n_fft=512, hop_length=128, window=tessel.hann_window(512), length=len(wave))

torch's arguments and defaults: hop_length n_fft // 4, win_length n_fft, a window shorter than n_fft zero-padded
to the center, center=True pads n_fft // 2 on both sides with pad_mode ('reflect', 'constant', 'replicate',
'circular'), normalized multiplies by n_fft^-1/2, onesided (default for real input and window) keeps the
n_fft // 2 + 1 non-negative bins. The output is [..., freq, frames] (complex; return_complex=False gives the real
and imaginary parts stacked last, which torch deprecates and still requires asking for). istft inverts by
overlap-add with the squared-window envelope (its minimum must stay above 1e-11, torch's NOLA check), trimmed to
`length` or to what center padding added.
"""
from . import _C
from ._complex import ComplexTensor, _from_parts

Tensor = _C.Tensor


def _window(window, win_length, n_fft, like):
    from ._tensor import ones
    if window is None:
        window = ones(win_length, dtype=like.dtype)
    if window.dim() != 1 or window.shape[0] != win_length:
        raise RuntimeError("stft: expected a 1D window tensor of size equal to win_length=%d, but got window with "
                           "size %s" % (win_length, tuple(window.shape)))
    if win_length < n_fft:
        left = (n_fft - win_length) // 2
        window = _C._functional.cat([_C._full([left], 0.0, window.dtype), window,
                                     _C._full([n_fft - win_length - left], 0.0, window.dtype)], 0)
    return window


def _check(n_fft, hop_length, win_length, length):
    hop_length = n_fft // 4 if hop_length is None else hop_length
    win_length = n_fft if win_length is None else win_length
    if n_fft <= 0 or hop_length <= 0 or not 0 < win_length <= n_fft:
        raise RuntimeError("stft: expected 0 < n_fft, 0 < hop_length and 0 < win_length <= n_fft, but got n_fft=%d, "
                           "hop_length=%d, win_length=%d" % (n_fft, hop_length, win_length))
    if length is not None and n_fft > length:
        raise RuntimeError("stft: expected 0 < n_fft <= %d, but got n_fft=%d" % (length, n_fft))
    return hop_length, win_length


def stft(input, n_fft, hop_length=None, win_length=None, window=None, center=True, pad_mode="reflect",
         normalized=False, onesided=None, return_complex=None, align_to_window=None):
    from . import fft
    from .nn import functional as F
    if isinstance(input, ComplexTensor):
        raise NotImplementedError("stft of a complex signal: tessel's stft takes real signals")
    if return_complex is None:
        raise RuntimeError("stft requires the return_complex parameter be given for real inputs, and will further "
                           "require that return_complex=True in a future PyTorch release.")
    if input.dim() not in (1, 2):
        raise RuntimeError("stft: expected a 1D or 2D tensor, but got %dD" % input.dim())
    x = input.unsqueeze(0) if input.dim() == 1 else input
    if center:
        x = F.pad(x.unsqueeze(1), (n_fft // 2, n_fft // 2), mode=pad_mode).squeeze(1)
    hop_length, win_length = _check(n_fft, hop_length, win_length, x.shape[-1])
    frames = x.unfold(-1, n_fft, hop_length) * _window(window, win_length, n_fft, x)  # [B, frames, n_fft]
    spec = fft.rfft(frames, dim=-1) if onesided is None or onesided else fft.fft(frames, dim=-1)
    re, im = spec.real.transpose(-1, -2), spec.imag.transpose(-1, -2)  # [B, freq, frames]
    if normalized:
        re, im = re * n_fft ** -0.5, im * n_fft ** -0.5
    if input.dim() == 1:
        re, im = re.squeeze(0), im.squeeze(0)
    if return_complex:
        return _from_parts(re, im)
    return _C._functional.stack([re, im], -1)


def istft(input, n_fft, hop_length=None, win_length=None, window=None, center=True, normalized=False,
          onesided=None, length=None, return_complex=False):
    from . import fft
    from .nn import functional as F
    if return_complex:
        raise NotImplementedError("istft(return_complex=True): tessel's istft returns real signals")
    if not isinstance(input, ComplexTensor):
        raise RuntimeError("istft requires a complex-valued input tensor")
    hop_length, win_length = _check(n_fft, hop_length, win_length, None)
    batched = input.dim() == 3
    spec = input if batched else input.unsqueeze(0)  # [B, freq, frames]
    re, im = spec.real.transpose(-1, -2), spec.imag.transpose(-1, -2)  # [B, frames, freq]
    onesided = re.shape[-1] != n_fft if onesided is None else onesided
    frames = (fft.irfft(_from_parts(re, im), n=n_fft, dim=-1) if onesided
              else fft.ifft(_from_parts(re, im), dim=-1).real)
    if normalized:
        frames = frames * n_fft ** 0.5
    win = _window(window, win_length, n_fft, frames)
    frames = frames * win
    count = frames.shape[1]
    total = n_fft + hop_length * (count - 1)
    # overlap-add as fold: [B, n_fft, frames] -> [B, 1, 1, total]
    y = F.fold(frames.transpose(1, 2), output_size=(1, total), kernel_size=(1, n_fft), stride=(1, hop_length))
    envelope = F.fold((win * win).reshape(1, n_fft, 1).expand(1, n_fft, count), output_size=(1, total),
                      kernel_size=(1, n_fft), stride=(1, hop_length))
    y, envelope = y.reshape(y.shape[0], total), envelope.reshape(total)
    start = n_fft // 2 if center else 0
    end = total - (n_fft // 2 if center else 0) if length is None else min(start + length, total)
    y, envelope = y[:, start:end], envelope[start:end]
    if float(envelope.abs().min()) < 1e-11:
        raise RuntimeError("istft: window overlap add min: %g (the window's squares must overlap everywhere: "
                           "torch's NOLA condition)" % float(envelope.abs().min()))
    y = y / envelope
    if length is not None and y.shape[-1] < length:
        y = F.pad(y, (0, length - y.shape[-1]))
    return y if batched else y.squeeze(0)
