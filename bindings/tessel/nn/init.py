"""tessel.nn.init: torch.nn.init's in-place initializers (under no_grad, from tessel's generator, so
tessel.manual_seed makes them reproducible). Fan in / out follow torch: a Linear weight [out, in] has
fan_in = in; trailing dims multiply both (receptive field).

    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
"""
import functools
import math

from .. import _C


def _no_grad():
    return _C._GradMode(False)


def _on_whole(init):
    """An initializer that computes values on the host (numpy) or copies them in, made to work on a DTensor
    parameter (under fully_shard or tensor parallel): it runs on a dense tensor of the global shape and this
    rank keeps its piece, so the values are those the call gives the whole tensor on one rank."""
    @functools.wraps(init)
    def wrapper(tensor, *args, **kwargs):
        if not getattr(tensor, "is_distributed", False):
            return init(tensor, *args, **kwargs)
        whole = _C._full(list(tensor.shape), 0.0, tensor.dtype)
        init(whole, *args, **kwargs)
        _C._assign_full(tensor, whole)
        return tensor
    return wrapper


def _fans(tensor):
    if tensor.dim() < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    receptive = 1
    for s in tensor.shape[2:]:
        receptive *= s
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def calculate_gain(nonlinearity, param=None):
    linear = ("linear", "conv1d", "conv2d", "conv3d", "sigmoid")
    if nonlinearity in linear:
        return 1  # (torch returns the int)
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError("Unsupported nonlinearity %s" % nonlinearity)


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    with _no_grad():
        return tensor.normal_(mean, std, generator=generator)


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    with _no_grad():
        return tensor.uniform_(a, b, generator=generator)


def constant_(tensor, val):
    with _no_grad():
        return tensor.fill_(float(val))


def zeros_(tensor):
    return constant_(tensor, 0.0)


def ones_(tensor):
    return constant_(tensor, 1.0)


def xavier_uniform_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = _fans(tensor)
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = _fans(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


def _kaiming_std(tensor, a, mode, nonlinearity):
    fan_in, fan_out = _fans(tensor)
    if mode not in ("fan_in", "fan_out"):
        raise ValueError("Mode %s not supported, please use one of fan_in, fan_out" % mode)
    return calculate_gain(nonlinearity, a) / math.sqrt(fan_in if mode == "fan_in" else fan_out)


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity), generator)


@_on_whole
def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """N(mean, std²) restricted to [a, b]: samples outside are drawn again until every one is inside."""
    if not a < b:
        raise ValueError("trunc_normal_: a=%s must be below b=%s" % (a, b))
    with _no_grad():
        tensor.normal_(mean, std, generator=generator)
        for _ in range(100):
            flat = tensor.numpy().reshape(-1)
            bad = (flat < a) | (flat > b)
            if not bad.any():
                return tensor
            fresh = (_C._randn([int(bad.sum())], generator, _C.dtype.float32) * float(std) + float(mean)).numpy()
            flat[bad] = fresh
            tensor.copy_(_C._from_numpy(flat.reshape(tuple(tensor.shape))).to(tensor.dtype))
        raise RuntimeError("trunc_normal_: [a, b] = [%s, %s] holds too little of N(%s, %s²)" % (a, b, mean, std))


@_on_whole
def orthogonal_(tensor, gain=1.0, generator=None):
    """A (semi-)orthogonal matrix, as torch: QR of a normal [rows, cols] draw (transposed when rows < cols),
    Q's columns signed by R's diagonal, times gain; trailing dims are flattened into cols."""
    import numpy as np
    from .._tensor import tensor as _tensor, randn as _randn
    if tensor.dim() < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    rows = tensor.shape[0]
    cols = tensor.numel() // rows if rows else 0
    flat = _randn(rows, cols, generator=generator, dtype=_C.dtype.float64).numpy()
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    with _no_grad():
        return tensor.copy_(_tensor(gain * q.reshape(tensor.shape), dtype=tensor.dtype))


@_on_whole
def eye_(tensor):
    """The identity in a 2-D tensor (ones on the diagonal of a non-square one)."""
    import numpy as np
    from .._tensor import tensor as _tensor
    if tensor.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    with _no_grad():
        return tensor.copy_(_tensor(np.eye(*tensor.shape), dtype=tensor.dtype))


@_on_whole
def dirac_(tensor, groups=1):
    """torch's Dirac delta for a 3-, 4- or 5-D convolution weight: identity on the channels of each group,
    at the kernel's centre."""
    import numpy as np
    from .._tensor import tensor as _tensor
    if tensor.dim() not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    out_per_group = tensor.shape[0] // groups
    if tensor.shape[0] % groups:
        raise ValueError("dim 0 must be divisible by groups")
    w = np.zeros(tensor.shape)
    centre = tuple(s // 2 for s in tensor.shape[2:])
    for g in range(groups):
        for d in range(min(out_per_group, tensor.shape[1])):
            w[(g * out_per_group + d, d) + centre] = 1.0
    with _no_grad():
        return tensor.copy_(_tensor(w, dtype=tensor.dtype))
