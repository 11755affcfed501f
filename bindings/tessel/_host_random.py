"""Draws that follow torch's CPU generator word for word: exponential_ and multinomial, from the generator's host
stream (core/tensor/random.h: the MT19937 words torch's CPU generator would draw; `_C._host_words`), so that a
torch script's sampling (a WeightedRandomSampler's epoch, torch.multinomial over a model's probabilities, the
exponential noise of Gumbel tricks) gives torch's values for a generator seeded as in the script.

Why by hand: the values are defined by aten's CPU kernels (a 53-bit double per two words, `-1/λ·log1p(-u)`, a
sequential cumulative sum searched with a binary search), which no library reproduces; numpy does the arithmetic.
"""
import numpy as np

from . import _C

_MASK53 = np.uint64((1 << 53) - 1)


def host_ints(span, count, generator=None):
    """count integers uniform in [0, span) (span at most 2^63) as torch's CPU generator draws them (random_,
    randint): a word of the generator's host stream each modulo span below 2^32, two (the first high) from 2^32 on."""
    if span < (1 << 32):
        return _C._host_words(count, generator).astype(np.int64) % span
    words = _C._host_words(2 * count, generator).astype(np.uint64)
    return ((words[0::2] << np.uint64(32) | words[1::2]) % np.uint64(span)).astype(np.int64)


def host_int64(generator=None):
    """torch.empty((), dtype=torch.int64).random_(generator=generator).item() as torch's CPU generator draws it (a
    sampler's seed, a DataLoader's base seed)."""
    return int(host_ints(1 << 63, 1, generator)[0])


def host_doubles(count, generator=None):
    """count doubles uniform in [0, 1) as torch's CPU generator draws them for double-precision distributions: two
    words (the first the high half) per value, its low 53 bits scaled by 2^-53."""
    words = _C._host_words(2 * count, generator).astype(np.uint64)
    return ((words[0::2] << np.uint64(32) | words[1::2]) & _MASK53).astype(np.float64) * 2.0 ** -53


def exponential_values(count, lambd, generator=None):
    """torch's CPU exponential_: -1/λ · log1p(-u) in double precision, one host double u per value (row-major);
    the caller rounds to the tensor's dtype. log1p is tessel's float64 kernel (glibc's values, as aten's; Debian's
    numpy vectorizes log1p and differs from it in the last bit for ~10% of inputs)."""
    from ._tensor import tensor
    lambd = float(lambd)
    if not lambd > 0.0:
        raise RuntimeError("exponential_ expects lambda > 0.0, but found lambda=%s" % _number(lambd))
    return (tensor(-host_doubles(count, generator)).log1p() * (-1.0 / lambd)).numpy()


def check_multinomial(rows, n_sample, replacement):
    """torch.multinomial's checks of weight rows [R, C] (float32 / float64 values), in its order and with its messages:
    without replacement (or for one sample) its fast path's checks of the whole tensor, else the CPU kernel's,
    row by row and entry by entry (NaN fails `>= 0` first)."""
    if not replacement and n_sample > rows.shape[-1]:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    if not replacement or n_sample == 1:
        if not rows.shape[-1]:
            raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the operation has no "
                               "identity.")
        if not (np.all(rows >= 0) and np.all(rows < np.inf)):
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
        if np.any(rows.sum(axis=-1) == 0):
            raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
        return
    for r in rows:
        bad = np.flatnonzero(~((r >= 0) & np.isfinite(r)))
        if len(bad):
            if not r[bad[0]] >= 0:
                raise RuntimeError("invalid multinomial distribution (encountering probability entry < 0)")
            raise RuntimeError("invalid multinomial distribution (encountering probability entry = infinity or NaN)")
        if not r.sum() > 0:
            raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")


def multinomial_with_replacement(rows, n_sample, generator=None):
    """aten's CPU multinomial with replacement for n_sample > 1: per row, the cumulative sum of the weights in
    their dtype (float32 for float16 / bfloat16 weights, given here as float32), divided by the total, its last
    entry set to 1; per sample one host double u and the first entry >= u. rows: [R, C] float32 / float64."""
    out = np.empty((rows.shape[0], n_sample), dtype=np.int64)
    for i, r in enumerate(rows):
        cum = np.cumsum(r, dtype=r.dtype)  # add.accumulate: sequential, in the weights' dtype, as aten's loop
        cum = cum / cum[-1]
        cum[-1] = 1
        out[i] = np.searchsorted(cum.astype(np.float64), host_doubles(n_sample, generator), side="left")
    return out


def _number(x):
    return str(int(x)) if np.isfinite(x) and x == int(x) and abs(x) < 1e16 else repr(x)


def _sample(kind, params, generator):
    """torch's CPU rejection samplers (core/tensor/torch_random.h TorchSample) for float32 / float64 parameters,
    broadcast against each other; float16 / bfloat16 ones sampled in float32 and rounded, as the dtype is."""
    from ._tensor import broadcast_tensors
    from . import _dtypes
    params = broadcast_tensors(*params) if len(params) > 1 else params
    dtype = params[0].dtype
    work = dtype if dtype in (_dtypes.float32, _dtypes.float64) else _dtypes.float32
    values = [p.detach().to(work).contiguous() for p in params]
    out = _C._empty(list(values[0].shape), work)
    _C._torch_sample_(out, kind, values[0], values[1] if len(values) > 1 else None, generator)
    return out if work == dtype else out.to(dtype)


def _standard_gamma(input, generator=None):
    """torch._standard_gamma: Gamma(input, 1) samples, as torch's CPU kernel draws them."""
    return _sample("standard_gamma", [input], generator)


def poisson(input, generator=None):
    """torch.poisson: Poisson(input) samples, as torch's CPU kernel draws them."""
    if input.numel() and not bool((input.detach() >= 0).all()):
        raise RuntimeError("invalid Poisson rate, expected rate to be non-negative")
    return _sample("poisson", [input], generator)


def binomial(count, prob, generator=None):
    """torch.binomial: Binomial(count, prob) samples, as torch's CPU kernel draws them."""
    return _sample("binomial", [count, prob], generator)


def _sample_dirichlet(input, generator=None):
    """torch._sample_dirichlet: Gamma(α) samples drawn in float64, each divided by its row's sum (last dim) and
    clamped to [the dtype's smallest normal, the largest value below 1], as torch's CPU kernel."""
    import numpy as np
    gammas = _sample("standard_gamma", [input.detach().to(_C.dtype.float64)], generator).numpy()
    ratio = gammas / gammas.sum(-1, keepdims=True)
    np_dtype = np.float32 if input.dtype != _C.dtype.float64 else np.float64
    info = np.finfo(np_dtype)
    clamped = np.minimum(np.nextafter(np_dtype(1), np_dtype(0)), np.maximum(info.tiny, ratio.astype(np_dtype)))
    return _C._from_numpy(np.ascontiguousarray(clamped)).to(input.dtype)
