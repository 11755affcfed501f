"""torch's elementwise special functions that the C++ core has no kernel for, composed of its ops, and
``tessel.special``'s names for them.

Inverse trigonometric and hyperbolic functions, ``atan2``, ``hypot``, ``log2/log10``, ``logaddexp(2)``,
``copysign``, ``heaviside``, ``sinc``, ``frac``, ``xlogy``, ``logit``, ``erfc``, ``erfinv``, ``lgamma``,
``digamma`` and ``logcumsumexp``. Each is a chain of differentiable core ops, so autograd needs nothing new
and the gradients are the chain's own (checked against the closed forms and central differences in
//bindings:special_test). They are evaluated in float64 and cast back to the input's floating dtype (integer
inputs give float32, as torch's), so a float32 result is the correctly rounded value up to ~1 ulp. The
branches of a ``where`` are fed only inputs valid for them (e.g. the reflection of lgamma sees x < 0.5
only), so no NaN from the unused branch reaches a gradient.

Why by hand: numpy/scipy would compute on the host without gradients and without DTensor or device
support; these are a few lines of series each (Stirling / asymptotic series with argument shifts for
lgamma and digamma, Giles' erfinv approximation refined by one Newton step on erf, argument halving plus a
Taylor series for atan).

    >>> tessel.atan2(tessel.tensor([1.0]), tessel.tensor([-1.0]))
    tensor([2.3562])
"""
import builtins
import functools
import math

from . import _C
from ._dtensor_compose import aligned
from ._lazy_function import lazy_function
from ._tensor import with_zero_gradient

_F64 = _C.dtype.float64


def _f64(x):
    """x as a float64 tensor (numbers too)."""
    if not isinstance(x, _C.Tensor):
        return _C._full([], float(x), _F64)
    return x if x.dtype == _F64 else x.to(_F64)


def _where(cond, a, b):
    """where with tensors or numbers on either side (numbers take the tensor's dtype; float64 if both are)."""
    dtype = a.dtype if isinstance(a, _C.Tensor) else (b.dtype if isinstance(b, _C.Tensor) else _F64)
    if not isinstance(a, _C.Tensor):
        a = _C._full([], float(a), dtype)
    if not isinstance(b, _C.Tensor):
        b = _C._full([], float(b), dtype)
    return _C._functional.where(cond, a, b)


def _in_float64(fn, arity=1):
    """torch's form of fn: its first `arity` arguments (tensors or numbers) go in as float64, the rest pass
    through (eps, dim); the result has the floating dtype of the tensor arguments (float64 if any is, else
    the first's; float32 for integers and numbers, as torch's)."""
    @functools.wraps(fn)
    def op(*args, out=None, **kwargs):
        if out is not None:
            raise TypeError("%s: out= is not supported; assign the result" % fn.__name__)
        ins = args[:arity]
        if arity == 2 and builtins.any(isinstance(t, _C.Tensor) for t in ins):
            from ._namespace import result_type  # torch's promotion: f16 with f32 is f32, f32 with f64 0-d f32
            dtype = result_type(*ins)
            dtype = dtype if dtype.is_floating_point else _C.dtype.float32
        else:
            floats = [t.dtype for t in ins if isinstance(t, _C.Tensor) and t.dtype.is_floating_point]
            dtype = _F64 if _F64 in floats else (floats[0] if floats else _C.dtype.float32)
        # an integer tensor rounds to the result's float dtype first (torch promotes before computing)
        ins = [t.to(dtype) if isinstance(t, _C.Tensor) and not t.dtype.is_floating_point else t for t in ins]
        return fn(*[_f64(t) for t in ins], *args[arity:], **kwargs).to(dtype)
    return op


def _negative(y):
    """y < 0, counting -0.0 as negative (its sign bit: 1/-0.0 is -inf)."""
    return (y < 0.0) | ((y == 0.0) & ((1.0 / _where(y == 0.0, y, 1.0)) < 0.0))


# ---- trigonometric and hyperbolic --------------------------------------------------------------------------

def _atan_small(x):
    """atan for |x| <= 1: two halvings atan(x) = 2·atan(x / (1 + sqrt(1 + x²))) bring |x| below
    tan(pi/16) = 0.199, where the Taylor series to x^31 is exact to 1e-23."""
    for _ in range(2):
        x = x / (1.0 + (1.0 + x * x).sqrt())
    x2, term, total = x * x, x, x
    for k in range(1, 16):
        term = term * x2
        total = total + term * ((-1.0) ** k / (2 * k + 1))
    return total * 4.0


def atan(x):
    """Arc tangent; for |x| > 1 through pi/2 - atan(1/|x|)."""
    big = x.abs() > 1.0
    inv = 1.0 / _where(big, x, 1.0)  # 1/x only where |x| > 1: no division by zero in the unused branch
    small = _atan_small(_where(big, 0.0, x))
    return _where(big, x.sign() * (math.pi / 2) - _atan_small(inv), _where(x == 0.0, x, small))  # keeps -0.0


@aligned
def atan2(y, x):
    """The angle of (x, y) in [-pi, pi], C's quadrants: atan2(±0, x < 0 or -0) = ±pi (the signs of zeros
    count), atan2(y != 0, ±0) = ±pi/2, atan2(±inf, ±inf) = ±pi/4 or ±3pi/4, NaN in either gives NaN."""
    zero_x = x == 0.0
    both_inf = y.isinf() & x.isinf()
    ratio = _where(both_inf, y.sign() * x.sign(), y / _where(zero_x, 1.0, x))
    base = atan(ratio)
    angle = _where(_negative(x), base + _where(_negative(y), -math.pi, math.pi), base)
    on_axis = zero_x & (y != 0.0) & (y == y)
    slope = -(x / _where(on_axis, y, 1.0))  # d/dx = -y / (x² + y²) = -1/y there, d/dy = x / (...) = 0
    axis = y.sign() * (math.pi / 2) + (slope - slope.detach())  # exactly ±pi/2, with torch's gradients
    origin = zero_x & (y == 0.0)  # atan2(±0, ±0): torch's gradients are 0
    return _where(on_axis, axis, _where(origin, angle.detach(), angle))


def asin(x):
    """Arc sine on [-1, 1] (NaN outside, as torch)."""
    return atan2(x, (1.0 - x * x).sqrt())


def acos(x):
    return math.pi / 2 - asin(x)


def sinh(x):
    return ((x.expm1() - (-x).expm1()) * 0.5)


def cosh(x):
    return (x.exp() + (-x).exp()) * 0.5


def asinh(x):
    """log(|x| + sqrt(x² + 1)) with the sign of x, in the log1p form exact for small x."""
    a = x.abs()
    small = a < 1e150  # x² would overflow float64 beyond
    a_s = _where(small, a, 1.0)
    near = (a_s + a_s * a_s / (1.0 + (a_s * a_s + 1.0).sqrt())).log1p()
    far = _where(small, 2.0, a).log() + math.log(2.0)
    return _where(x == 0.0, x, x.sign() * _where(small, near, far))  # (asinh(-0) = -0)


def _acosh_value(x):
    big = x > 1e150
    x_s = _where(big, 1.0, x)
    t = x_s - 1.0
    near = (t + (t * (x_s + 1.0)).sqrt()).log1p()
    far = _where(big, x, 2.0).log() + math.log(2.0)
    return _where(x < 1.0, math.nan, _where(big, far, near))


def acosh(x):
    """log(x + sqrt(x² - 1)) for x >= 1, as log1p(t + sqrt(t (x + 1))) with t = x - 1 (exact near 1) and
    log(2x) where x² would overflow; NaN below 1 (as torch: -1e30 gave 0 through t + sqrt(t²) = 0). The
    gradient is torch's 1 / sqrt(x² - 1): inf at 1, NaN below."""
    return _closed_form_grad(x, _acosh_value, lambda t: (t * t - 1.0).rsqrt())


def _atanh_value(x):
    return (2.0 * x / (1.0 - x)).log1p() * 0.5


def atanh(x):
    """0.5·log((1 + x) / (1 - x)), as 0.5·log1p(2x / (1 - x)); ±inf at ±1, where the gradient 1 / (1 - x²) is
    inf (torch's)."""
    return _closed_form_grad(x, _atanh_value, lambda t: 1.0 / (1.0 - t * t))


# ---- logarithms, signs and friends -------------------------------------------------------------------------

def log2(x):
    return x.log() * (1.0 / math.log(2.0))


def log10(x):
    return x.log() * (1.0 / math.log(10.0))


@aligned
def hypot(x, y):
    """sqrt(x² + y²) as C's hypot: scaled by the larger magnitude (1e30 in float32 no longer overflows to inf),
    inf where either is infinite even if the other is NaN, NaN where one is NaN and the other finite, 0 at (0, 0)."""
    ax, ay = x.abs(), y.abs()
    larger = ax > ay
    m, n = _where(larger, ax, ay), _where(larger, ay, ax)
    zero = (ax == 0.0) & (ay == 0.0)
    t = n / _where(zero, 1.0, m)
    r = _where(zero, 0.0, m * (1.0 + t * t).sqrt())
    return _hypot_grads(_where(ax.isinf() | ay.isinf(), math.inf, r), x, y)


def _hypot_grads(value, x, y):
    """value with torch's hypot gradients x / h and y / h (NaN at the origin, as torch's), whose own derivatives
    a create_graph backward takes (through |x| the composition had none at 0: d²/dx² hypot(x, 2) at 0 was 0, not
    1/2)."""
    if not (_C.is_grad_enabled() and any(isinstance(t, _C.Tensor) and t.requires_grad for t in (x, y))):
        return value
    return _hypot_grads_apply(value.detach(), x, y)


def _build_hypot_grads():
    from .autograd import Function
    from ._pow import _sum_to

    class HypotGrads(Function):
        @staticmethod
        def forward(ctx, value, x, y):
            ctx.save_for_backward(x, y)
            return value.clone()

        @staticmethod
        def backward(ctx, g):
            x, y = ctx.saved_tensors
            h = hypot(x, y)  # with its graph under create_graph (hypot's own gradients again)
            return (None, _sum_to(g * x / h, x.shape) if x.requires_grad else None,
                    _sum_to(g * y / h, y.shape) if y.requires_grad else None)
    return HypotGrads


_hypot_grads_apply = lazy_function(_build_hypot_grads)


@aligned
def logaddexp(x, y):
    """log(e^x + e^y) as the larger argument plus softplus of the difference, taken on the larger side: the
    gradients are torch's sigmoid(x - y) and sigmoid(y - x), 1/2 each at a tie (max + log1p(e^-|x - y|) gave
    all of a tie's gradient to one argument) and finite at infinities; equal infinities give that infinity."""
    from ._activations import _softplus1
    w = _C._functional.where
    inf_tie = (x == y) & x.isinf()
    d = _where(inf_tie, 0.0, y - x)  # (inf - inf)
    return w(x >= y, x + _softplus1(d), y + _softplus1(-d))


def logaddexp2(x, y):
    return logaddexp(x * math.log(2.0), y * math.log(2.0)) * (1.0 / math.log(2.0))


@aligned
def copysign(x, y):
    """|x| with y's sign (including -0.0's); y's gradient is zero (torch's: zeros, not None)."""
    return with_zero_gradient(_where(_negative(y), -x.abs(), x.abs()), y)


@aligned
def heaviside(input, values):
    """torch.heaviside: values where input is 0, else 1 above 0 and 0 below, in input's dtype (integers stay
    integers: they were float32), which values must share (torch's error otherwise)."""
    if isinstance(values, _C.Tensor) and values.dtype != input.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes.")
    return _where(input == 0, values, (input > 0).to(input.dtype))


def sinc(x):
    """sin(pi x) / (pi x), 1 at 0."""
    zero = x == 0.0
    px = _where(zero, 1.0, x) * math.pi
    return _where(zero, 1.0, px.sin() / px)


def frac(x):
    return x - x.trunc()


@aligned
def xlogy(x, y):
    """x·log(y), 0 where x == 0 (even for y == 0 or inf), NaN where y is NaN; torch's gradients (_xlog_grads)."""
    zero = (x == 0.0) & (y == y)
    return _xlog_grads(_where(zero, 0.0, x * _where(zero, 1.0, y).log()), x, y, False)


@aligned
def xlog1py(x, y):
    zero = (x == 0.0) & (y == y)
    return _xlog_grads(_where(zero, 0.0, x * _where(zero, 0.0, y).log1p()), x, y, True)


def _xlog_grads(value, x, y, one_plus):
    """value with torch's gradients of x·log(y) (one_plus: x·log1p(y)): d/dx the log, also at x = 0 (the mask
    that makes the value 0 there cut it: xlogy(0, 2)'s was 0, torch's log 2), 0 where x is 0 and the log's
    argument is not positive; d/dy x / y (x / (1 + y))."""
    if not (_C.is_grad_enabled() and any(isinstance(t, _C.Tensor) and t.requires_grad for t in (x, y))):
        return value
    return _xlog_grads_apply(value.detach(), x, y, one_plus)


def _build_xlog_grads():
    from .autograd import Function
    from ._pow import _sum_to

    class XlogGrads(Function):
        @staticmethod
        def forward(ctx, value, x, y, one_plus):
            ctx.save_for_backward(x, y)
            ctx.one_plus = one_plus
            return value.clone()

        @staticmethod
        def backward(ctx, g):
            x, y = ctx.saved_tensors
            arg = y + 1.0 if ctx.one_plus else y
            dx = _where((x == 0.0) & (arg <= 0.0), 0.0, y.log1p() if ctx.one_plus else y.log())
            return (None, _sum_to(g * dx, x.shape) if x.requires_grad else None,
                    _sum_to(g * x / arg, y.shape) if y.requires_grad else None, None)
    return XlogGrads


_xlog_grads_apply = lazy_function(_build_xlog_grads)


def _build_closed_form_grad():
    from .autograd import Function

    class ClosedFormGrad(Function):
        """fn(x) with the gradient g·deriv(x) (torch's formula) instead of the composition's: at a function's
        edges the chain meets 0·inf or a where's dead branch (erfinv'(±1) and logit'(0) are inf, lgamma'(0) is
        digamma(0) = -inf, entr'(x < 0) is NaN), while deriv, itself composed, stays differentiable."""
        @staticmethod
        def forward(ctx, x, fn, deriv):
            ctx.save_for_backward(x)
            ctx.deriv = deriv
            return fn(x)

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return g * ctx.deriv(x), None, None
    return ClosedFormGrad


_closed_form_grad = lazy_function(_build_closed_form_grad)


def _entr_value(x):
    pos = x > 0.0
    inner = -x * _where(pos, x, 1.0).log()
    return _where(pos, inner, _where(x == 0.0, 0.0, _where(x < 0.0, -math.inf, x)))


def entr(x):
    """-x·log(x) for x > 0, 0 at 0, -inf below 0; the gradient -(1 + log x) everywhere (torch's: +inf at 0,
    NaN below)."""
    return _closed_form_grad(x, _entr_value, lambda t: -(1.0 + t.log()))


def _logit_value(x):
    return (x / (1.0 - x)).log()


def _logit_grad(t):
    """torch's logit_backward without eps: 1 / (p (1 - p)) on [0, 1], NaN outside (where the value is NaN too)."""
    return _where((t < 0.0) | (t > 1.0), math.nan, 1.0 / (t * (1.0 - t)))


def logit(x, eps=None):
    """log(p / (1 - p)), p clamped to [eps, 1 - eps] when eps is given; the gradient 1 / (p (1 - p)), inf at 0
    and 1 (torch's), NaN outside [0, 1] without eps and 0 outside [eps, 1 - eps] with it."""
    if eps is not None:
        x = x.clamp(eps, 1.0 - eps)
    return _closed_form_grad(x, _logit_value, _logit_grad)


# ---- error function and gamma ------------------------------------------------------------------------------

def erfc(x):
    """1 - erf(x) with torch's gradient -2/√π·e^(-x²), -0 at ±inf (the composition's 0 · inf was NaN there)."""
    return _closed_form_grad(x, _erfc_value, lambda t: (-(t * t)).exp() * (-2.0 / math.sqrt(math.pi)))


def _erfc_value(x):
    """1 - erf(x): 1 - erf(|x|) below |x| = 2, above it exp(-x²)/sqrt(pi) over the continued fraction
    x + (1/2)/(x + 1/(x + (3/2)/(x + ...))) (60 terms: relative error < 1e-15 there), so the tail keeps its
    digits (erfc(9) = 4.1e-37) instead of 1 - erf rounding to 0; erfc(-x) = 2 - erfc(x)."""
    a = x.abs()
    far = a >= 2.0
    af = _where(far, a, 2.0)
    cf = af
    for n in range(60, 0, -1):
        cf = af + (n * 0.5) / cf
    tail = (-(af * af)).exp() / (cf * math.sqrt(math.pi))
    # 1 - erf(x) itself inside (2 - (1 - erf|x|) through |x| had abs's zero gradient at 0: erfc'(0) is -2/√π)
    return _where(far, _where(x < 0.0, 2.0 - tail, tail), 1.0 - _where(far, 0.0, x).erf())


_ERFINV_LOW = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
               -0.00417768164, 0.246640727, 1.50140941)
_ERFINV_HIGH = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                0.00943887047, 1.00167406, 2.83297682)


def _poly(coeffs, t):
    acc = t * 0.0 + coeffs[0]
    for c in coeffs[1:]:
        acc = acc * t + c
    return acc


def _erfinv_value(x):
    inside = x.abs() < 1.0
    xs = _where(inside, x, 0.0)
    w = -((1.0 - xs) * (1.0 + xs)).log()
    low = w < 5.0
    y0 = xs * _where(low, _poly(_ERFINV_LOW, _where(low, w, 5.0) - 2.5),
                     _poly(_ERFINV_HIGH, _where(low, 5.0, w).sqrt() - 3.0))
    for _ in range(2):
        y0 = y0 - (y0.erf() - xs) * (math.sqrt(math.pi) / 2) * (y0 * y0).exp()
    edge = _where(x == 1.0, math.inf, _where(x == -1.0, -math.inf, math.nan))
    return _where(inside, y0, edge)


def erfinv(x):
    """The inverse of erf on (-1, 1), ±inf at ±1: Giles' single-precision approximation, then two Newton steps
    on erf in float64. The gradient is torch's sqrt(pi)/2·exp(erfinv(x)²), inf at ±1."""
    return _closed_form_grad(x, _erfinv_value, lambda t: (_erfinv_value(t) ** 2).exp() * (math.sqrt(math.pi) / 2))


_SHIFT = 8  # lgamma/digamma: z + 8 >= 8.5, where the asymptotic series below is exact to ~1e-13


def _lgamma_pos(y):
    """lgamma for y >= 0.5: shift to z = y + 8, Stirling's series, minus log(y (y+1) ... (y+7))."""
    z = y + float(_SHIFT)
    zi = 1.0 / z
    zi2 = zi * zi
    series = zi * (1 / 12 + zi2 * (-1 / 360 + zi2 * (1 / 1260 + zi2 * (-1 / 1680 + zi2 * (1 / 1188)))))
    stirling = (z - 0.5) * z.log() - z + 0.5 * math.log(2 * math.pi) + series
    shift = y.log()
    for k in range(1, _SHIFT):
        shift = shift + (y + float(k)).log()
    return stirling - shift


def _lgamma_value(x):
    reflect = x < 0.5
    y = _where(reflect, 1.0 - x, x)
    direct = _lgamma_pos(y)
    xr = _where(reflect, x, 0.5)
    sin = (xr * math.pi).sin().abs()
    pole = reflect & (xr == xr.floor())
    refl = math.log(math.pi) - _where(pole, 1.0, sin).log() - direct
    exact = (x == 1.0) | (x == 2.0)  # log Gamma(1) = log Gamma(2) = 0 exactly, as torch's
    return _where(pole | (x == math.inf), math.inf, _where(exact, 0.0, _where(reflect, refl, direct)))


def lgamma(x):
    """log|Gamma(x)|; x < 0.5 through the reflection log(pi / |sin(pi x)|) - lgamma(1 - x); +inf at the
    poles (0, -1, -2, ...) and at ±inf. The gradient is torch's digamma(x): -inf at 0, NaN at the negative
    integers."""
    return _closed_form_grad(x, _lgamma_value, digamma)


def _digamma_pos(y):
    z = y + float(_SHIFT)
    zi = 1.0 / z
    zi2 = zi * zi
    series = z.log() - 0.5 * zi - zi2 * (1 / 12 - zi2 * (1 / 120 - zi2 * (1 / 252 - zi2 * (1 / 240 - zi2 / 132))))
    shift = 1.0 / y
    for k in range(1, _SHIFT):
        shift = shift + 1.0 / (y + float(k))
    return series - shift


def digamma(x):
    """d/dx lgamma(x); x < 0.5 through digamma(1 - x) - pi / tan(pi x); -inf at +0 (+inf at -0) and NaN at
    the negative integers, as torch."""
    reflect = x < 0.5
    y = _where(reflect, 1.0 - x, x)
    direct = _digamma_pos(y)
    xr = _where(reflect, x, 0.25)
    pole = reflect & (xr == xr.floor())
    xr = _where(pole, 0.25, xr)
    t = (xr - xr.round().detach()) * math.pi  # cot(pi x) of x's fraction: pi x itself rounds for large |x|
    refl = direct - math.pi * t.cos() / t.sin()
    at_pole = _where(x == 0.0, -1.0 / _where(x == 0.0, x, 1.0), math.nan)  # -inf at +0, +inf at -0 (torch's)
    return _where(pole, at_pole, _where(reflect, refl, direct))


def logcumsumexp(x, dim):
    """log(cumsum(exp(x))) along dim. Where some finite entry lies 600 or more below another, a running logaddexp
    (torch's), in log2(n) steps of a parallel prefix scan (entry i folds in entry i - 2^k at step k): one shift by
    the max underflowed the entries far below it (logcumsumexp([0, 800]) gave [-inf, 800], a masked -1e4 gave -inf
    and a NaN gradient). Otherwise that one shift and a cumulative sum (the scan is ~10x slower)."""
    rank = max(x.ndim, 1)
    if not -rank <= dim < rank:
        raise IndexError("Dimension out of range (expected to be in range of [%d, %d], but got %d)"
                         % (-rank, rank - 1, dim))
    d = dim % x.ndim if x.ndim else 0
    n = x.shape[d] if x.ndim else 1
    finite = x.isfinite()
    if n <= 1 or not bool(finite.any()):
        hi, lo = 0.0, 0.0
    else:
        hi = float(_where(finite, x, -math.inf).max().detach())
        lo = float(_where(finite, x, math.inf).min().detach())
    if hi - lo < 600.0:
        # no finite entry 600 below another (x is float64 here: e^-600 is far above its underflow): one shift by
        # the row's max and a cumulative sum, as fast as torch's
        m = x.amax(d, keepdim=True).detach()
        m = _where(m.isfinite(), m, 0.0)  # an all -inf row: no inf - inf
        return (x - m).exp().cumsum(d).log() + m
    y, step = x, 1
    while step < n:
        y = _C._functional.cat([y.narrow(d, 0, step),
                                logaddexp(y.narrow(d, step, n - step), y.narrow(d, 0, n - step))], d)
        step *= 2
    return y


_UNARY = dict(atan=atan, arctan=atan, asin=asin, arcsin=asin, acos=acos, arccos=acos, sinh=sinh, cosh=cosh,
              asinh=asinh, arcsinh=asinh, acosh=acosh, arccosh=acosh, atanh=atanh, arctanh=atanh, log2=log2,
              log10=log10, sinc=sinc, frac=frac, erfc=erfc, erfinv=erfinv, lgamma=lgamma, digamma=digamma,
              logit=logit, logcumsumexp=logcumsumexp)
_BINARY = dict(atan2=atan2, arctan2=atan2, hypot=hypot, logaddexp=logaddexp, logaddexp2=logaddexp2,
               copysign=copysign, xlogy=xlogy)

FUNCTIONS = {name: _in_float64(fn) for name, fn in _UNARY.items()}
FUNCTIONS.update({name: _in_float64(fn, 2) for name, fn in _BINARY.items()})
FUNCTIONS["heaviside"] = heaviside  # exact in every dtype, and an integer input keeps its dtype
_logit64 = FUNCTIONS["logit"]


def _logit_public(input, eps=None, *, out=None):
    """torch.logit: with eps, the input is clamped to [eps, 1 - eps] computed in its own dtype (float32 for
    integers) as torch's kernel does: 1 - 1e-6 is 0.99999899 in float32 and 1 in float16."""
    if eps is not None:
        dtype = input.dtype if input.dtype.is_floating_point else _C.dtype.float32
        lo = _C._full([], float(eps), dtype)
        hi = _C._full([], 1.0, dtype) - lo
        x = input.to(dtype)
        # torch's x < lo ? lo : (x > hi ? hi : x): with eps > 0.5 (lo > hi) a small x takes lo, not hi
        input = _where(x < lo, lo, _where(x > hi, hi, x))
    return _logit64(input, out=out)


FUNCTIONS["logit"] = _logit_public
FUNCTIONS["sgn"] = lambda input: input.sign()  # torch.sgn of a real tensor: its sign, in its dtype
_digamma64 = FUNCTIONS["digamma"]


def _trigamma(t):
    from ._special_more import polygamma
    return polygamma(1, t)


def _digamma_public(input, *, out=None):
    """torch.digamma with torch's gradient polygamma(1, x), taken in the input's dtype (at the poles that is torch's
    trigamma formula's huge finite value, 6.6e32 at -1 in float64 and 1.3e15 in float32; the composition's where
    gave 0 there)."""
    if out is not None or not (_C.is_grad_enabled() and input.requires_grad):
        return _digamma64(input, out=out)
    return _closed_form_grad(input, lambda t: _digamma64(t), _trigamma)


FUNCTIONS["digamma"] = _digamma_public
