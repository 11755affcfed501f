"""torch.nn.functional's activations composed from tessel's ops in Python (split from _extra.py by concept):
softplus / logsigmoid, the ELU family, mish, hardtanh / relu6, hardsigmoid / hardswish, the shrinks, threshold,
prelu, glu and softmin. Each takes torch's parameter name `input`; a 16-bit input of the ones torch computes at
float32 is computed in float32 and rounded once (_opmath). _extra.py registers them in its tables.
"""
import functools

from . import _C, _dtypes
from ._autocast_policy import lower_precision_under_autocast as _lower_under_autocast
from ._dtensor_compose import aligned
from ._inplace import honours_inplace

_REDUCED = _dtypes.REDUCED


def _scalar_like(x, v):
    return _C._full([], float(v), x.dtype)


def _softplus1(z):
    """log(1 + exp(z)) = log1p(exp(-|z|)) + max(z, 0): finite everywhere, 0 at -inf (z * 0 would be NaN there),
    tiny values kept (log1p), with the exact gradient sigmoid(z) at 0 too (no |z| or clamp, whose gradient is 0
    there)."""
    w = _C._functional.where
    pos = z > 0
    return w(pos, -z, z).exp().log1p() + w(pos, z, _C._full([], 0.0, z.dtype))


def _opmath(fn):
    """A 16-bit (bfloat16 / float16) input computed in float32 and rounded once, as torch's kernels compute
    them: the formula composed in the input's dtype rounds every intermediate (bf16 hardswish, mish, glu,
    softplus, group_norm: 17-42% of outputs one ulp from the correctly rounded value, torch's none)."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        x = args[0] if args else kwargs.get("input")
        if not (isinstance(x, _C.Tensor) and x.dtype in _REDUCED):
            return fn(*args, **kwargs)
        if args:
            return fn(x.float(), *args[1:], **kwargs).to(x.dtype)
        return fn(**dict(kwargs, input=x.float())).to(x.dtype)
    return wrapped


@aligned
@_opmath
def softplus(input, beta=1.0, threshold=20.0):
    """log(1 + exp(beta·x)) / beta, linear above threshold (torch's)."""
    x = input  # (torch's parameter name: F.softplus(input=...))
    z = x * beta
    return _C._functional.where(z > threshold, x, _softplus1(z) / beta)


@_opmath
def logsigmoid(input):
    x = input  # (torch's parameter name: F.logsigmoid(input=...))
    return -softplus(-x) + 0.0  # (+0, not -0, where softplus(-x) underflows: torch's)


@honours_inplace
def leaky_relu(input, negative_slope=0.01, inplace=False):
    x = input  # (torch's parameter name: F.leaky_relu(input=...))
    return _C._functional.where(x > 0, x, x * negative_slope)


@honours_inplace
@_opmath
def elu(input, alpha=1.0, inplace=False):
    """x above 0, alpha (e^x - 1) below through expm1 (exact for small x, and -0 stays -0 as torch's); the
    expm1 sees a constant 0 where x > 0, so +inf keeps gradient 1 (x * 0 there was NaN)."""
    x = input  # (torch's parameter name: F.elu(input=...))
    w = _C._functional.where
    pos = x > 0
    return w(pos, x, _expm1_with_exp_gradient(w(pos, _scalar_like(x, 0.0), x)) * alpha)


def _expm1_with_exp_gradient(z):
    """expm1(z)'s value with exp(z)'s gradient (torch's elu backward): expm1's own gradient, its result + 1,
    underflows to 0 below z = -17 in float32 (-38 in float64) where exp(z) is still 2e-9 (elu, selu, celu's
    gradients far left were 0). At z = 0 expm1 itself (its -0 kept, gradient exactly 1)."""
    e = z.expm1()
    ez = z.exp()
    return _C._functional.where(z == 0, e, e.detach() + (ez - ez.detach()))


@honours_inplace
@_opmath
def mish(input, inplace=False):
    x = input  # (torch's parameter name: F.mish(input=...))
    return x * softplus(x).tanh()


@honours_inplace
def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    """min_val below, max_val above, x between; the gradient passes strictly inside and at NaN (torch's
    x <= min || x >= max ? 0 : g, where clamp's gave 0 at NaN)."""
    x = input  # (torch's parameter name: F.hardtanh(input=...))
    if not x.dtype.is_floating_point:  # an integer tensor keeps its dtype (torch's bounds cast to it)
        return x.clamp(min=int(min_val), max=int(max_val))
    w = _C._functional.where
    return w(x <= min_val, _scalar_like(x, min_val), w(x >= max_val, _scalar_like(x, max_val), x))


@honours_inplace
def relu6(input, inplace=False):
    x = input  # (torch's parameter name: F.relu6(input=...))
    return hardtanh(x, 0.0, 6.0)


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772, 1.0507009873554805  # torch's constants


@honours_inplace
@_opmath
def selu(input, inplace=False):
    """scale (max(0, x) + min(0, alpha (exp(x) - 1))), as elu: gradient scale·alpha at 0, finite at +inf."""
    x = input  # (torch's parameter name: F.selu(input=...))
    return elu(x, _SELU_ALPHA) * _SELU_SCALE


@honours_inplace
@_opmath
def celu(input, alpha=1.0, inplace=False):
    """max(0, x) + min(0, alpha (exp(x / alpha) - 1)); the exp sees min(x, 0), so +inf keeps a finite
    gradient (torch's)."""
    x = input  # (torch's parameter name: F.celu(input=...))
    w = _C._functional.where
    pos = x > 0
    return w(pos, x, _expm1_with_exp_gradient(w(pos, _scalar_like(x, 0.0), x) / alpha) * alpha)  # (elu's form)


@honours_inplace
@_opmath
def hardsigmoid(input, inplace=False):
    x = input  # (torch's parameter name: F.hardsigmoid(input=...))
    return (x / 6.0 + 0.5).clamp(min=0.0, max=1.0)


@honours_inplace
@_opmath
def hardswish(input, inplace=False):
    x = input  # (torch's parameter name: F.hardswish(input=...))
    return x * hardsigmoid(x)


def softsign(input):
    x = input  # (torch's parameter name: F.softsign(input=...))
    return x / (x.abs() + 1.0)


@honours_inplace
def threshold(input, threshold, value, inplace=False):
    """torch's x <= threshold ? value : x (NaN passes through; a 16-bit x compares in float32 with the threshold
    at float32 precision, as torch's kernel: bf16(0.1) is above 0.1)."""
    x = input  # (torch's parameter name: F.threshold(input=...))
    keep = x.float() <= threshold if x.dtype in _REDUCED else x <= threshold
    return _C._functional.where(keep, _scalar_like(x, value), x)


def tanhshrink(input):
    x = input  # (torch's parameter name: F.tanhshrink(input=...))
    return x - x.tanh()


def softshrink(x, lambd=0.5):
    """x - lambd above lambd, x + lambd below -lambd, else 0 (NaN passes through)."""
    w = _C._functional.where
    return w(x > lambd, x - lambd, w(x < -lambd, x + lambd, w(x == x, x * 0.0 + 0.0, x)))  # +0 inside (torch's)


def hardshrink(x, lambd=0.5):
    """x where |x| > lambd, else +0 (torch's; NaN passes through)."""
    return _C._functional.where(x.abs() <= lambd, x * 0.0 + 0.0, x)


@_lower_under_autocast
def prelu(x, weight):
    """max(0, x) + weight * min(0, x); weight has 1 or C entries (C: dim 1 of x, as torch)."""
    if weight.numel() > 1:
        channels = x.shape[1] if x.ndim >= 2 else 1
        if weight.numel() != channels:
            raise RuntimeError("Mismatch of parameter numbers and input channel size. Found parameter numbers = "
                               "%d and channel size = %d." % (weight.numel(), channels))
        shape = [1] * x.ndim
        shape[1] = channels
        weight = weight.reshape(*shape)
    elif x.ndim == 0:
        weight = weight.reshape(())
    return _C._functional.where(x > 0, x, x * weight)


@_opmath
def glu(input, dim=-1):
    x = input  # (torch's parameter name: F.glu(input=...))
    if x.shape[dim] % 2:  # an odd dim would drop its last entry
        raise RuntimeError("Halving dimension must be even, but dimension %d is size %d" % (dim % x.ndim, x.shape[dim]))
    a, b = x.chunk(2, dim)
    return a * b.sigmoid()


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    x = input  # (torch's parameter name: F.softmin(input=...))
    if dim is None:  # torch's implicit-dim rule and its warning, naming softmin
        import warnings
        warnings.warn("Implicit dimension choice for softmin has been deprecated. Change the call to include dim=X "
                      "as an argument.", stacklevel=2)
        dim = 0 if x.dim() in (0, 1, 3) else 1
    return _C._functional.softmax(-x, dim, 3, dtype)
