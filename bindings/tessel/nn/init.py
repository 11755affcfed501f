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


def _calculate_fan_in_and_fan_out(tensor):
    return _fans(tensor)


def _calculate_correct_fan(tensor, mode):
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError("Mode %s not supported, please use one of ['fan_in', 'fan_out']" % mode)
    fan_in, fan_out = _fans(tensor)
    return fan_in if mode == "fan_in" else fan_out


def calculate_gain(nonlinearity, param=None):
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
              "sigmoid")
    if nonlinearity in linear:
        return 1  # (torch returns the int)
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif (isinstance(param, int) and not isinstance(param, bool)) or isinstance(param, float):
            slope = param
        else:
            raise ValueError("negative_slope %s not a valid number" % param)
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
    return calculate_gain(nonlinearity, a) / math.sqrt(_calculate_correct_fan(tensor, mode))


def _zero_elements(tensor):
    if 0 in tuple(tensor.shape):  # torch's: a no-op with a warning
        import warnings
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=3)
        return True
    return False


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    if _zero_elements(tensor):
        return tensor
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    if _zero_elements(tensor):
        return tensor
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity), generator)


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """N(mean, std²) restricted to [a, b], as torch's: where [a, b] holds more than 0.3 of the mass, normal
    draws outside it are drawn again (in C++, each element's redraws fixed by its counter, so a DTensor draws
    only its own piece: Distribution::TruncatedNormal); else uniform proposals on [a, b] accepted with the
    density's ratio to its peak (so bounds far in a tail work). Any floating dtype."""
    import warnings
    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. The distribution of values may "
                      "be incorrect.", stacklevel=2)
    mass = _mass(mean, std, a, b)
    if not tensor.dtype.is_floating_point:  # torch's normal_ (or, for the tail method, uniform_) has no integer kernel
        from .._tensor import _torch_dtype_name
        raise NotImplementedError('"%s" not implemented for \'%s\'' % (
            "normal_kernel_cpu" if mass > 0.3 else "check_uniform_bounds", _torch_dtype_name(tensor.dtype)))
    if a > b:  # torch's tail method draws uniform_(a, b), which refuses; a == b fills a
        raise RuntimeError("uniform_ expects to return a [from, to) range, but found from=%g > to=%g" % (a, b))
    if mass > 0.3 and tensor.device.type != "cpu":
        with _no_grad():
            _C._fill_random_(tensor, "trunc_normal", float(mean), float(std), generator, float(a), float(b))
        return tensor
    with _no_grad():
        if mass > 0.3:
            return _trunc_normal_redrawn(tensor, mean, std, a, b, generator)
        return _trunc_normal_tail(tensor, mean, std, a, b, generator)


@_on_whole
def _trunc_normal_redrawn(tensor, mean, std, a, b, generator):
    """torch 2.15's method where [a, b] holds more than 0.3 of the mass, draw for draw (a CPU tensor's normal_ is
    torch's kernel): normal_, then while any value lies outside the bounds (as the dtype holds them), a fresh
    whole-tensor normal_ replaces those values. A DTensor takes its piece of the whole tensor's values."""
    from .. import where
    from .._tensor import empty_like, tensor as _tensor
    lo, hi = (float(_tensor(v, dtype=tensor.dtype)) for v in (a, b))
    result = tensor.normal_(mean, std, generator=generator)
    while True:
        outside = (result < lo) | (result > hi)
        if not outside.any():
            break
        result = where(outside, empty_like(result).normal_(mean, std, generator=generator), result)
    return tensor if result is tensor else tensor.copy_(result)


def _mass(mean, std, a, b):
    """The probability N(mean, std²) gives [a, b]."""
    def cdf(x):
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0
    return cdf((b - mean) / std) - cdf((a - mean) / std)


@_on_whole
def _trunc_normal_tail(tensor, mean, std, a, b, generator):
    """trunc_normal_ where [a, b] holds at most 0.3 of the mass, as torch 2.15: uniform proposals on [a, b], each
    accepted where log(u) (a second uniform) is at most its log density relative to the peak's; the pending ones
    proposed again, whole-tensor draws each round (so the draws follow torch's)."""
    from .. import where
    from .._tensor import empty_like
    log_peak = -0.5 * ((max(a, min(mean, b)) - mean) / std) ** 2
    candidates, accept = empty_like(tensor), empty_like(tensor)

    def rejected(proposals):  # (in place on proposals, as torch: its log density relative to the peak)
        proposals.sub_(mean).div_(std).pow_(2).mul_(-0.5).sub_(log_peak)
        return accept.uniform_(generator=generator).log_().gt(proposals)
    tensor.uniform_(a, b, generator=generator)
    pending = rejected(candidates.copy_(tensor))
    if not pending.any():
        return tensor
    result = tensor
    while True:
        candidates.uniform_(a, b, generator=generator)
        result = where(pending, candidates, result)
        pending = where(pending, rejected(candidates), pending)
        if not pending.any():
            return tensor.copy_(result)


@_on_whole
def orthogonal_(tensor, gain=1.0, generator=None):
    """A (semi-)orthogonal matrix, as torch: QR of a normal_ [rows, cols] draw in the tensor's dtype (transposed
    when rows < cols), Q's columns signed by R's diagonal, times gain; trailing dims are flattened into cols."""
    from .. import linalg
    if tensor.dim() < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    with _no_grad():
        flat = tensor.new_empty((rows, cols)).normal_(0.0, 1.0, generator=generator)
        q, r = linalg.qr(flat.t() if rows < cols else flat)
        q = q * r.diagonal().sign()
        return tensor.copy_((q.t() if rows < cols else q).reshape(tuple(tensor.shape))).mul_(gain)


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


@_on_whole
def sparse_(tensor, sparsity, std=0.01, generator=None):
    """torch's: a 2-D tensor N(0, std²) with ceil(sparsity · rows) entries of each column set to zero: the first
    ones of a randperm(rows) per column, drawn (as torch's) from the default generator, not `generator`."""
    from .._tensor import randperm
    if tensor.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    rows, cols = tensor.shape
    zeros = int(math.ceil(sparsity * rows))
    with _no_grad():
        tensor.normal_(0.0, std, generator=generator)
        for col in range(cols):
            tensor[randperm(rows)[:zeros], col] = 0.0
    return tensor


def _make_deprecate(method):
    new_name = method.__name__
    old_name = new_name[:-1]

    def deprecated_init(*args, **kwargs):
        import warnings
        warnings.warn("`nn.init.%s` is now deprecated in favor of `nn.init.%s`." % (old_name, new_name),
                      FutureWarning, stacklevel=2)
        return method(*args, **kwargs)
    deprecated_init.__name__ = old_name
    deprecated_init.__doc__ = "%s(...): deprecated, torch's alias of %s." % (old_name, new_name)
    return deprecated_init


# torch's deprecated names, with its FutureWarning
uniform = _make_deprecate(uniform_)
normal = _make_deprecate(normal_)
constant = _make_deprecate(constant_)
eye = _make_deprecate(eye_)
dirac = _make_deprecate(dirac_)
xavier_uniform = _make_deprecate(xavier_uniform_)
xavier_normal = _make_deprecate(xavier_normal_)
kaiming_uniform = _make_deprecate(kaiming_uniform_)
kaiming_normal = _make_deprecate(kaiming_normal_)
orthogonal = _make_deprecate(orthogonal_)
sparse = _make_deprecate(sparse_)
