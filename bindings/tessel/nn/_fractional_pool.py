"""torch.nn.functional.fractional_max_pool2d / 3d (and _with_indices) and nn.FractionalMaxPool2d / 3d (Graham's
fractional max pooling): windows of kernel_size whose starts step pseudo-randomly so that the input shrinks by a
non-integer ratio.

Per (sample, channel) plane and per dim, one number u in [0, 1) (the `_random_samples` [N, C, dims] tensor; 2-D:
index 0 for the width, 1 for the height; 3-D: time, height, width) places the windows as torch's kernel does:
start_i = int((i + u)·α) - int(u·α), α = (input - kernel) / (output - 1), in the input's dtype, and the last
window ends at the input's end. The max of a window is its first largest entry, or its last NaN; the indices are flat
within the plane. The gradient flows to the chosen entries (a gather).

Drawn samples (none given) come from the default generator's host stream as torch's CPU `torch.rand` draws them
(tessel/_host_random.py), so a generator seeded as in a torch script gives torch's windows (every CPU draw of the
Python face follows torch's stream: core/tensor/torch_random.h).
"""
import numpy as np

from .. import _C, _dtypes
from .modules import Module

_DIGITS = {"float32": 24, "float16": 11, "bfloat16": 8}


def _round_bfloat16(a):
    bits = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def _in_dtype(dtype):
    """v rounded to `dtype` after each operation, as the kernel's scalar_t arithmetic."""
    name = str(dtype).rsplit(".", 1)[-1]
    if name == "float64":
        return lambda v: np.float64(v)
    if name == "float16":
        return lambda v: np.float16(v)
    if name == "bfloat16":
        return lambda v: np.float32(_round_bfloat16(np.float32(v)))
    return lambda v: np.float32(v)


def _draw_samples(shape, dtype):
    """torch.rand(shape, dtype=dtype) as torch's CPU generator draws it, from the host stream (module doc)."""
    from .._host_random import host_doubles
    count = int(np.prod(shape))
    name = str(dtype).rsplit(".", 1)[-1]
    if name == "float64":
        values = host_doubles(count)
    else:
        digits = _DIGITS.get(name, 24)
        words = _C._host_words(count, None).astype(np.uint64)
        values = (words & np.uint64((1 << digits) - 1)).astype(np.float64) * 2.0 ** -digits
    return _C._from_numpy(values.reshape(shape)).to(dtype)


def _starts(u, n_in, n_out, pool, fix):
    """The window starts along one dim for sample u, torch's generate_intervals in the input's dtype."""
    seq = np.zeros(n_out, dtype=np.int64)
    if n_out > 1:
        alpha = fix(fix(n_in - pool) / fix(n_out - 1))
        base = int(fix(u * alpha))
        for i in range(n_out):
            seq[i] = int(fix(fix(i + u) * alpha)) - base
    if n_out > 0:
        seq[n_out - 1] = n_in - pool
    return seq


def _tuple(value, n):
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * n


def _check(name, out_name, nd, input, pool, outs, samples):
    """torch's checks of the pooling, in its order and with its messages."""
    word = "three " if nd == 3 else ""
    if len(pool) != nd:
        raise RuntimeError("fractional_max_pool%dd: kernel_size must either be a single Int or tuple of %sInts"
                           % (nd, word))
    if len(outs) != nd:
        raise RuntimeError("fractional_max_pool%dd: output_size must either be a single Int or tuple of %sInts"
                           % (nd, word))
    if samples.dtype != input.dtype:
        raise RuntimeError("Expect _random_samples to have the same dtype as input")
    if input.ndim not in (nd + 1, nd + 2):
        raise RuntimeError("%s: Expected %dD or %dD tensor, but got: %s" % (out_name, nd + 1, nd + 2,
                                                                          list(input.shape)))
    for d in range(1, input.ndim):
        if input.shape[d] == 0:
            raise RuntimeError("%s: Expected input to have non-zero size for non-batch dimensions, but got%s with "
                               "dimension %d being empty." % (out_name, list(input.shape), d))
    if samples.ndim != 3:
        raise RuntimeError("Expect _random_samples to have 3 dimensions, got %d" % samples.ndim)
    batch = input.shape[0] if input.ndim == nd + 2 else 1
    if samples.shape[0] < batch:
        raise RuntimeError("Expect _random_samples.size(0) no less then input batch size.")
    if samples.shape[1] != input.shape[-nd - 1]:
        raise RuntimeError("Expect _random_samples.size(1) equals to input channel size.")
    if samples.shape[2] != nd:
        raise RuntimeError("Expect _random_samples.size(2) equals to %d; got %d." % (nd, samples.shape[2]))
    for word, size, k, o in zip(("time", "height", "width")[3 - nd:], input.shape[-nd:], pool, outs):
        if o + k - 1 > size:
            raise RuntimeError("%s: pool %s %d too large relative to input %s %d" % (out_name, word, k, word, size))


def _fractional_max_pool(nd, input, kernel_size, output_size, output_ratio, return_indices, samples):
    name = "fractional_max_pool%dd" % nd
    pool = _tuple(kernel_size, nd)
    outs = [int(o) for o in _tuple(output_size, nd)]
    _check(name, name + "()" if nd == 2 else name + "_out()", nd, input, pool, outs, samples)
    batched = input.ndim == nd + 2
    x = input if batched else input.unsqueeze(0)
    n, c = x.shape[0], x.shape[1]
    sizes = list(x.shape[2:])
    u = (samples.float() if samples.dtype == _dtypes.bfloat16 else samples).detach().numpy()
    fix = _in_dtype(input.dtype)
    # 2-D samples hold (width, height), 3-D ones (time, height, width)
    order = [1, 0] if nd == 2 else [0, 1, 2]
    strides = [int(np.prod(sizes[k + 1:])) for k in range(nd)]
    taps = int(np.prod(pool))
    index = np.zeros((n, c, int(np.prod(outs)) if outs else 0, taps), dtype=np.int64)
    for b in range(n):
        for ch in range(c):
            flat = np.zeros([1] * (2 * nd), dtype=np.int64)
            for k in range(nd):
                starts = _starts(fix(u[b, ch, order[k]]), sizes[k], outs[k], pool[k], fix)
                pos = (starts[:, None] + np.arange(pool[k])[None, :]) * strides[k]  # [out_k, pool_k]
                shape = [1] * (2 * nd)
                shape[k], shape[nd + k] = outs[k], pool[k]
                flat = flat + pos.reshape(shape)
            index[b, ch] = flat.reshape(-1, taps)
    planes = x.reshape(n, c, -1)
    if index.size:
        values = (planes.float() if planes.dtype == _dtypes.bfloat16 else planes).detach().numpy()
        window = np.take_along_axis(values, index.reshape(n, c, -1), 2).reshape(index.shape)
        nan = np.isnan(window)
        last_nan = taps - 1 - np.argmax(nan[..., ::-1], axis=-1)
        pick = np.where(nan.any(-1), last_nan, np.argmax(np.where(nan, -np.inf, window), axis=-1))
        chosen = np.take_along_axis(index, pick[..., None], -1)[..., 0]
    else:
        chosen = np.zeros(index.shape[:3], dtype=np.int64)
    chosen_t = _C._from_numpy(np.ascontiguousarray(chosen))
    out = planes.gather(2, chosen_t).reshape(n, c, *outs)
    indices = chosen_t.reshape(n, c, *outs)
    if not batched:
        out, indices = out.squeeze(0), indices.squeeze(0)
    return (out, indices) if return_indices else out


def fractional_max_pool2d(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                          _random_samples=None):
    """torch.nn.functional.fractional_max_pool2d over [N, C, H, W] or [C, H, W] (module doc)."""
    if output_size is None and output_ratio is None:
        raise ValueError("fractional_max_pool2d requires specifying either an output_size or an output_ratio")
    if output_size is None:
        if len(output_ratio) > 2:  # (a bare float ratio is a TypeError here, as torch's)
            raise ValueError("fractional_max_pool2d requires output_ratio to either be a single Int or tuple of "
                             "Ints.")
        ratio = _tuple(output_ratio, 2)
        output_size = [int(input.size(-2) * ratio[0]), int(input.size(-1) * ratio[1])]
    if _random_samples is None:
        _random_samples = _draw_samples((1 if input.dim() == 3 else input.size(0), input.size(-3), 2), input.dtype)
    return _fractional_max_pool(2, input, kernel_size, output_size, output_ratio, return_indices, _random_samples)


def fractional_max_pool3d(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                          _random_samples=None):
    """torch.nn.functional.fractional_max_pool3d over [N, C, T, H, W] or [C, T, H, W] (module doc)."""
    if output_size is None and output_ratio is None:
        raise ValueError("fractional_max_pool3d requires specifying either an output_size or an output_ratio")
    if output_size is None:
        ratio = _tuple(output_ratio, 3)
        output_size = [int(input.size(-3) * ratio[0]), int(input.size(-2) * ratio[1]),
                       int(input.size(-1) * ratio[2])]
    if _random_samples is None:
        _random_samples = _draw_samples((1 if input.dim() == 4 else input.size(0), input.size(-4), 3), input.dtype)
    return _fractional_max_pool(3, input, kernel_size, output_size, output_ratio, return_indices, _random_samples)


def fractional_max_pool2d_with_indices(input, kernel_size, output_size=None, output_ratio=None,
                                       return_indices=False, _random_samples=None):
    return fractional_max_pool2d(input, kernel_size, output_size, output_ratio, True, _random_samples)


def fractional_max_pool3d_with_indices(input, kernel_size, output_size=None, output_ratio=None,
                                       return_indices=False, _random_samples=None):
    return fractional_max_pool3d(input, kernel_size, output_size, output_ratio, True, _random_samples)


def _pool_class(nd):
    fn = fractional_max_pool2d if nd == 2 else fractional_max_pool3d
    name = "FractionalMaxPool%dd" % nd

    def __init__(self, kernel_size, output_size=None, output_ratio=None, return_indices=False, _random_samples=None):
        Module.__init__(self)
        if nd == 3 and ((isinstance(kernel_size, int) and kernel_size <= 0) or
                        (isinstance(kernel_size, (tuple, list)) and not all(k > 0 for k in kernel_size))):
            raise ValueError("kernel_size must be greater than 0, but got %s" % (kernel_size,))
        self.kernel_size = _tuple(kernel_size, nd)
        self.return_indices = return_indices
        self.register_buffer("_random_samples", _random_samples)
        self.output_size = _tuple(output_size, nd) if output_size is not None else None
        self.output_ratio = _tuple(output_ratio, nd) if output_ratio is not None else None
        if output_size is None and output_ratio is None:
            raise ValueError("%s requires specifying either an output size, or a pooling ratio" % name)
        if output_size is not None and output_ratio is not None:
            raise ValueError("only one of output_size and output_ratio may be specified")
        if self.output_ratio is not None and not all(0 < r < 1 for r in self.output_ratio[:nd]):
            raise ValueError("output_ratio must be between 0 and 1 (got %s)" % (output_ratio,))

    def forward(self, input):
        return fn(input, self.kernel_size, self.output_size, self.output_ratio, self.return_indices,
                  _random_samples=self._random_samples)

    return type(name, (Module,), {"__init__": __init__, "forward": forward,
                                  "__doc__": "torch.nn.%s (tessel/nn/_fractional_pool.py)." % name})


FractionalMaxPool2d = _pool_class(2)
FractionalMaxPool3d = _pool_class(3)

FUNCTIONAL = dict(fractional_max_pool2d=fractional_max_pool2d, fractional_max_pool3d=fractional_max_pool3d,
                  fractional_max_pool2d_with_indices=fractional_max_pool2d_with_indices,
                  fractional_max_pool3d_with_indices=fractional_max_pool3d_with_indices)
MODULES = dict(FractionalMaxPool2d=FractionalMaxPool2d, FractionalMaxPool3d=FractionalMaxPool3d)
