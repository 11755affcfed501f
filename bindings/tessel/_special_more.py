"""torch.special's Bessel, incomplete-gamma, polygamma and zeta functions: i0, i0e, i1, i1e, erfcx, gammainc /
gammaincc (torch.igamma / igammac), polygamma, zeta (Hurwitz), multigammaln, spherical_bessel_j0.

Values are computed on the host in float64 with numpy, by the textbook methods (written here because neither
numpy nor the CPU libraries tessel links have them; numpy's i0 is used as is): power series where they converge
without cancellation (I₀, I₁ for |x| <= 30, the lower incomplete gamma for x < a + 1), asymptotic expansions
beyond (I₀, I₁, erfcx), Lentz's continued fraction for the upper incomplete gamma, and Euler–Maclaurin summation
for the Hurwitz zeta (Cephes' scheme: nine terms, then twelve Bernoulli corrections; the coefficients are derived
from the Bernoulli numbers below). Each is an autograd Function whose backward is torch's formula in terms of
these same functions (i0' = i1, d/dx gammainc = x^(a-1) e^(-x) / Γ(a), polygamma' = the next order, ...), so
second derivatives work; the derivatives torch does not implement (gammainc in a, zeta in x) raise as there.
"""
import math
from fractions import Fraction

import numpy as np

from . import _C
from .autograd import Function

Tensor = _C.Tensor
_SQRT_PI = math.sqrt(math.pi)
_EPS = np.finfo(np.float64).eps
_erfc_host = np.vectorize(math.erfc, otypes=[np.float64])  # libm's erfc, exact to the last bits down to 1e-308

# (2j)! / B_2j for j = 1..12 (Euler–Maclaurin's remainder terms), from the Bernoulli numbers B_2 .. B_24
_BERNOULLI = [Fraction(1, 6), Fraction(-1, 30), Fraction(1, 42), Fraction(-1, 30), Fraction(5, 66),
              Fraction(-691, 2730), Fraction(7, 6), Fraction(-3617, 510), Fraction(43867, 798),
              Fraction(-174611, 330), Fraction(854513, 138), Fraction(-236364091, 2730)]
_EM = [float(math.factorial(2 * (j + 1)) / b) for j, b in enumerate(_BERNOULLI)]


def _np(t):
    return t.detach().to(_C.dtype.float64).numpy()


def _back(values, like):
    out = _C._from_numpy(np.asarray(values, dtype=np.float64))
    dtype = like.dtype if like.dtype.is_floating_point else _C.dtype.float32
    return out.to(dtype)


def _on_pieces_if_distributed(fn):
    """fn(x, ...) computed on the host for dense tensors: DTensor arguments on each rank's pieces (the layout
    kept, tessel/_tensor.py's _on_pieces)."""
    import functools

    @functools.wraps(fn)
    def wrapped(*args):
        if any(isinstance(x, Tensor) and x.is_distributed for x in args):
            from ._tensor import _on_pieces
            return _on_pieces(fn, *args)
        return fn(*args)
    return wrapped


# ---- modified Bessel functions of the first kind --------------------------------------------------------

def _bessel_series(order, x):
    """I_order(x) for |x| <= 30: Σ (x/2)^(2k+order) / (k! (k+order)!), all terms of one sign."""
    half = x / 2.0
    term = half ** order / math.factorial(order)
    total = term.copy()
    sq = half * half
    for k in range(1, 150):
        term = term * sq / (k * (k + order))
        total = total + term
    return total


def _bessel_scaled_asymptotic(order, ax):
    """e^-x I_order(x) for x > 30: (2πx)^-1/2 Σ_k (-1)^k a_k(order) / x^k (Hankel's expansion)."""
    mu = 4.0 * order * order
    term = np.ones_like(ax)
    total = term.copy()
    for k in range(1, 30):
        term = -term * (mu - (2 * k - 1) ** 2) / (k * 8.0 * ax)
        total = total + term
    return total / np.sqrt(2 * math.pi * ax)


def _i_scaled(order, x):
    """e^-|x| I_order(x)."""
    ax = np.abs(x)
    small = ax <= 30
    out = np.empty_like(x)
    with np.errstate(over="ignore", invalid="ignore"):
        out[small] = _bessel_series(order, ax[small]) * np.exp(-ax[small])
        out[~small] = _bessel_scaled_asymptotic(order, ax[~small])
    if order % 2:
        out = np.where(x < 0, -out, out)
    return out


def _i(order, x):
    """I_order(x); ±inf beyond |x| = 720 (the scaled value's 0 times e^inf gave NaN at inf), but NaN at ±inf itself
    for I₁, as torch's (its Chebyshev form's e^x · (series at 1/x = 0) / sqrt(x) is inf · finite / inf there)."""
    with np.errstate(over="ignore", invalid="ignore"):
        half = np.exp(np.abs(x) / 2)  # twice e^(|x|/2): finite up to where I itself overflows (|x| = 713)
        out = _i_scaled(order, x) * half * half
    out = np.where(np.abs(x) > 720.0, np.where(x < 0, (-1.0) ** order, 1.0) * np.inf, out)  # e^720 overflows
    return np.where(np.isinf(x), np.nan, out) if order % 2 else out


_EXP_OVERFLOW_32 = float(np.log(np.finfo(np.float32).max))  # 88.72: where float32's e^x is inf


def _float32_overflow(values, x, like):
    """torch's float32 (and 16-bit) kernels of i0 / i1 form e^|x| in float32: inf beyond |x| = 88.72 although
    I₀(89) = 4.3e37 fits float32."""
    if like.dtype == _C.dtype.float64:
        return values
    with np.errstate(invalid="ignore"):
        big = np.abs(x) > _EXP_OVERFLOW_32
    return np.where(big & np.isfinite(values), np.copysign(np.inf, values), values)


def _host_unary(name, host, derivative, overflow32=False):
    """An autograd Function computing host(x) in float64 numpy, with gradient g · derivative(x) (tessel ops);
    overflow32: torch's float32 overflow of e^x (_float32_overflow)."""
    class Op(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            values = _np(x)
            out = host(values)
            return _back(_float32_overflow(out, values, x) if overflow32 else out, x)

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return g * derivative(x)
    Op.__name__ = Op.__qualname__ = name
    Op._backward_name = name + "Backward"
    return Op


def _over_x(x, value_at_0, fn):
    """fn(x, 1/x) with 1/x made safe at 0, where value_at_0 is taken instead."""
    safe = _C._functional.where(x.eq(0), x * 0 + 1, x)
    return _C._functional.where(x.eq(0), x * 0 + value_at_0, fn(x, 1 / safe))


def _i0_host(v):
    with np.errstate(invalid="ignore", over="ignore"):  # (numpy's i0 divides inf by inf at ±inf: its NaN is torch's)
        return np.i0(v)


_I0 = _host_unary("I0", _i0_host, lambda x: i1(x), overflow32=True)
_I1 = _host_unary("I1", lambda v: _i(1, v), lambda x: _over_x(x, 0.5, lambda v, inv: i0(v) - i1(v) * inv),
                  overflow32=True)
_I0e = _host_unary("I0e", lambda v: _i_scaled(0, v), lambda x: i1e(x) - x.sign() * i0e(x))
# (e^-|x| I1)' = e^-|x| (I0 - I1/x) - sign(x) e^-|x| I1
_I1e = _host_unary("I1e", lambda v: _i_scaled(1, v),
                   lambda x: _over_x(x, 0.5, lambda v, inv: i0e(v) - i1e(v) * (v.sign() + inv)))


def _public(op, name, doc):
    @_on_pieces_if_distributed
    def fn(input):
        return op.apply(input)
    fn.__name__, fn.__doc__ = name, doc
    return fn


i0 = _public(_I0, "i0", "The modified Bessel function of the first kind of order 0.")
i1 = _public(_I1, "i1", "I₁ (odd).")
i0e = _public(_I0e, "i0e", "e^-|x| I₀(x), finite for every x.")
i1e = _public(_I1e, "i1e", "e^-|x| I₁(x).")


# ---- erfcx ------------------------------------------------------------------------------------------------

def _erfcx(x):
    out = np.full_like(x, np.nan)  # NaN stays NaN (np.empty_like left whatever was in memory)
    big = x >= 26.0
    mid = ~big & (x > -26.7)
    with np.errstate(over="ignore"):
        if mid.any():
            out[mid] = np.exp(x[mid] ** 2) * _erfc_host(x[mid])
        xb = x[big]
        if xb.size:  # 1/(x√π) Σ (-1)^k (2k-1)!! / (2x²)^k
            term = np.ones_like(xb)
            total = term.copy()
            for k in range(1, 10):
                term = -term * (2 * k - 1) / (2 * xb * xb)
                total = total + term
            out[big] = total / (xb * _SQRT_PI)
        low = x <= -26.7
        out[low] = np.inf
    return out


_Erfcx = _host_unary("Erfcx", _erfcx, lambda x: 2 * x * erfcx(x) - 2 / _SQRT_PI)


erfcx = _public(_Erfcx, "erfcx", "The scaled complementary error function e^(x²) erfc(x) (no overflow for large "
                                  "positive x).")


# ---- incomplete gamma -------------------------------------------------------------------------------------

def _gammainc_pair(a, x):
    """(P(a, x), Q(a, x)), the regularized lower and upper incomplete gamma functions."""
    a, x = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(x, np.float64))
    p = np.full(a.shape, np.nan)
    valid = (a > 0) & (x >= 0)
    series = valid & (x < a + 1)
    fraction = valid & ~series & np.isfinite(x)  # x = inf: P = 1 below
    lg = np.vectorize(math.lgamma)
    if series.any():
        aa, xx = a[series], x[series]
        term = 1.0 / aa
        total = term.copy()
        for n in range(1, 600):
            term = term * xx / (aa + n)
            total = total + term
        with np.errstate(divide="ignore"):
            p[series] = total * np.exp(-xx + aa * np.log(np.where(xx > 0, xx, 1.0)) - lg(aa))
        p[series & (x == 0)] = 0.0
    q = 1.0 - p
    if fraction.any():  # Lentz's continued fraction for Q
        aa, xx = a[fraction], x[fraction]
        tiny = 1e-300
        b = xx + 1.0 - aa
        c = np.full_like(xx, 1.0 / tiny)
        d = 1.0 / b
        h = d.copy()
        for i in range(1, 600):
            an = -i * (i - aa)
            b = b + 2.0
            d = an * d + b
            d = np.where(np.abs(d) < tiny, tiny, d)
            c = b + an / c
            c = np.where(np.abs(c) < tiny, tiny, c)
            d = 1.0 / d
            h = h * d * c
        qq = np.exp(-xx + aa * np.log(xx) - lg(aa)) * h
        q[fraction] = qq
        p[fraction] = 1.0 - qq
    inf = valid & np.isinf(x)
    p[inf], q[inf] = 1.0, 0.0
    empty = (a == 0) & (x > 0)  # the limit a -> 0: all the mass at 0 (torch's P = 1, Q = 0; x = 0 stays NaN)
    p[empty], q[empty] = 1.0, 0.0
    return p, q


class _Gammainc(Function):
    @staticmethod
    def forward(ctx, a, x, upper):
        ctx.save_for_backward(a, x)
        ctx.upper = upper
        p, q = _gammainc_pair(_np(a), _np(x))
        return _back(q if upper else p, x)

    @staticmethod
    def backward(ctx, g):
        a, x = ctx.saved_tensors
        if ctx.needs_input_grad[0]:
            raise NotImplementedError("the derivative of %s with respect to its first argument (a) is not "
                                      "implemented (torch does not implement it either)"
                                      % ("gammaincc" if ctx.upper else "gammainc"))
        density = (-x + (a - 1) * x.log() - a.lgamma()).exp()  # x^(a-1) e^-x / Γ(a)
        return None, (-g if ctx.upper else g) * density, None


def _tensor_pair(a, b):
    if not isinstance(a, Tensor):
        a = _C._full([], float(a), b.dtype if isinstance(b, Tensor) else _C.dtype.float32)
    if not isinstance(b, Tensor):
        b = _C._full([], float(b), a.dtype)
    return a, b


@_on_pieces_if_distributed
def gammainc(input, other):
    """torch.special.gammainc / torch.igamma: the regularized lower incomplete gamma P(a = input, x = other)."""
    a, x = _tensor_pair(input, other)
    return _Gammainc.apply(a, x, False)


@_on_pieces_if_distributed
def gammaincc(input, other):
    """torch.special.gammaincc / torch.igammac: Q(a, x) = 1 - P(a, x)."""
    a, x = _tensor_pair(input, other)
    return _Gammainc.apply(a, x, True)


# ---- Hurwitz zeta and polygamma ---------------------------------------------------------------------------

def _zeta_positive(s, q):
    """ζ(s, q) for s > 1, q > 0 by Euler–Maclaurin; where the first term dominates to float64's precision
    ((1 + 1/q)^-s < eps: s = 1e30 at q = 1 is 1) or overflows (0.5^-1e30), that term, as Cephes' early exit."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        first = q ** -s
        dominant = np.isinf(first) | np.isposinf(q) | ((1.0 + 1.0 / q) ** -s < _EPS / 2)
        finite = q[np.isfinite(q)]
        shift = int(max(0.0, math.ceil(9.0 - float(finite.min())))) + 9 if finite.size else 9
        total = np.zeros_like(s)
        for k in range(shift):
            total = total + (q + k) ** -s
        a = q + shift
        b = a ** -s
        total = total + a * b / (s - 1) + 0.5 * b  # the tail from a: its integral and half its first term
        fac = np.ones_like(s)
        kk = 0.0
        for coefficient in _EM:
            fac = fac * (s + kk)
            b = b / a
            total = total + fac * b / coefficient
            kk += 1.0
            fac = fac * (s + kk)
            b = b / a
            kk += 1.0
    return np.where(dominant, first, total)


def _zeta(s, q):
    """ζ(s, q) = Σ_k (q + k)^-s with Cephes' (and torch's) domain: inf at s = 1 and at the poles q = 0, -1, -2,
    ... (-inf too); NaN for s < 1 and for q < 0 with a non-integer s; q < 0 with an integer s through the
    polygamma reflection (a bounded amount of work however negative q is)."""
    s, q = np.broadcast_arrays(np.asarray(s, np.float64), np.asarray(q, np.float64))
    out = np.full(s.shape, np.nan)
    with np.errstate(invalid="ignore"):
        pole = (q <= 0) & (q == np.floor(q)) & ~(s < 1)
        ok = (s > 1) & (q > 0)
        negative = (s > 1) & (q < 0) & ~pole & (s == np.floor(s)) & np.isfinite(s)
    out[pole | (s == 1)] = np.inf
    if ok.any():
        out[ok] = _zeta_positive(s[ok], q[ok])
    # torch's (Cephes') summation at infinite arguments: q = inf, or s = inf with q > 1 (every term 0), ends in
    # 0 · inf = NaN; s = inf at q = 1 is the first term, 1, and at q < 1 inf
    out[ok & (np.isposinf(q) | (np.isposinf(s) & (q > 1)))] = np.nan
    out[ok & np.isposinf(s) & (q < 1)] = np.inf
    for order in np.unique(s[negative]):  # ζ(n + 1, q) = (-1)^(n+1) ψ^(n)(q) / n!
        at = negative & (s == order)
        n = int(order) - 1
        out[at] = (-1.0) ** (n + 1) * _polygamma(n, q[at]) / math.factorial(n)
    return out


def _cot_derivative_polynomial(n):
    """Coefficients (lowest first) of P_n with d^n/dy^n cot(y) = P_n(cot y): P_0 = c, P_(k+1) = -(1 + c²) P_k'."""
    from numpy.polynomial import polynomial as P
    coefficients = np.array([0.0, 1.0])
    for _ in range(n):
        coefficients = -P.polymul([1.0, 0.0, 1.0], P.polyder(coefficients))
    return coefficients


def _polygamma(n, x):
    """ψ^(n)(x) for n >= 1 (polygamma answers n = 0 with digamma): (-1)^(n+1) n! ζ(n + 1, x) for x > 0; below 0
    the reflection ψ^(n)(x) = (-1)^n ψ^(n)(1 - x) - π^(n+1) P_n(cot πx), cot taken of x's fraction (exact);
    at the poles x = 0, -1, ... (and -inf) torch's signed infinity (+inf for odd n, -inf for even n)."""
    x = np.asarray(x, np.float64)
    sign = (-1.0) ** (n + 1)
    out = np.full(x.shape, np.nan)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        pole = (x <= 0) & (x == np.floor(x))
        positive = x > 0
        negative = (x < 0) & ~pole
        out[pole] = sign * np.inf
        if positive.any():
            orders = np.full(int(positive.sum()), n + 1.0)
            out[positive] = sign * math.factorial(n) * _zeta_positive(orders, x[positive])
        if negative.any():
            xn = x[negative]
            fraction = xn - np.round(xn)
            cot = np.cos(math.pi * fraction) / np.sin(math.pi * fraction)
            mirrored = _polygamma(n, 1.0 - xn)
            out[negative] = (-1.0) ** n * mirrored - math.pi ** (n + 1) * np.polynomial.polynomial.polyval(
                cot, _cot_derivative_polynomial(n))
    return out


def _torch_trigamma(x, single):
    """torch's trigamma below 1/2, where polygamma(1, x) is its value: -π²/sin²(πx) on the reflection, then six
    recurrence steps and a short asymptotic series, in float32 for single (torch's float kernel). At the poles
    sin(πx) is the rounding error of π·x, not 0, so the value is large and finite (6.6e32 at -1, 1.3e15 in
    float32), and that is what torch's digamma gradient is there."""
    f = np.float32 if single else np.float64
    x = np.asarray(x, f)
    one = f(1.0)
    with np.errstate(all="ignore"):
        sine = np.sin(f(math.pi) * x)
        result = -(f(math.pi) * f(math.pi)) / (sine * sine)
        x = one - x
        for _ in range(6):
            result = result + one / (x * x)
            x = x + one
        ixx = one / (x * x)
        result = result + (one + one / (f(2.0) * x) + ixx * (f(1 / 6) - ixx * (f(1 / 30) - ixx * f(1 / 42)))) / x
    return -result.astype(np.float64)


def _polygamma_torch(n, x, single):
    """_polygamma with torch's values at its edges: trigamma's at the poles (finite) and -inf (NaN), 0 at inf;
    NaN at inf for n >= 2 (its zeta(n + 1, inf) is NaN)."""
    out = _polygamma(n, x)
    if n == 1:
        with np.errstate(invalid="ignore"):
            pole = (x <= 0) & (x == np.floor(x)) & np.isfinite(x)
        if pole.any():
            out[pole] = _torch_trigamma(x[pole], single)
        out[np.isneginf(x)] = np.nan
        out[np.isposinf(x)] = 0.0
    else:
        out[np.isposinf(x)] = np.nan
    return out


class _Polygamma(Function):
    @staticmethod
    def forward(ctx, x, n):
        ctx.save_for_backward(x)
        ctx.n = n
        return _back(_polygamma_torch(n, _np(x), x.dtype != _C.dtype.float64), x)

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g * polygamma(ctx.n + 1, x), None


def polygamma(n, input):
    """torch.special.polygamma(n, x): the n-th derivative of digamma (n = 0: digamma itself)."""
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    if n == 0:
        return input.digamma()
    if input.is_distributed:
        from ._tensor import _on_pieces
        return _on_pieces(lambda x: _Polygamma.apply(x, int(n)), input)
    return _Polygamma.apply(input, int(n))


class _Zeta(Function):
    @staticmethod
    def forward(ctx, x, q):
        ctx.save_for_backward(x, q)
        return _back(_zeta(_np(x), _np(q)), q)

    @staticmethod
    def backward(ctx, g):
        x, q = ctx.saved_tensors
        if ctx.needs_input_grad[0]:
            raise NotImplementedError("the derivative of zeta with respect to its first argument (x) is not "
                                      "implemented (torch does not implement it either)")
        return None, -g * x * zeta(x + 1, q)


@_on_pieces_if_distributed
def zeta(input, other):
    """torch.special.zeta(x, q): the Hurwitz zeta function Σ_k (q + k)^-x."""
    x, q = _tensor_pair(input, other)
    return _Zeta.apply(x, q)


def multigammaln(input, p):
    from ._namespace import mvlgamma
    return mvlgamma(input, p)


def spherical_bessel_j0(input):
    """sin(x) / x (1 at 0; its Taylor polynomial near 0, so the gradient stays finite; 0 at ±inf, as torch's)."""
    small = input.abs().lt(1e-4)
    infinite = input.isinf()
    safe = _C._functional.where(small | infinite, input * 0 + 1, input)
    value = _C._functional.where(small, 1 - input * input / 6, safe.sin() / safe)
    return _C._functional.where(infinite, _C._full([], 0.0, value.dtype), value)


SPECIAL = dict(i0=i0, i0e=i0e, i1=i1, i1e=i1e, erfcx=erfcx, gammainc=gammainc, gammaincc=gammaincc,
               polygamma=polygamma, zeta=zeta, multigammaln=multigammaln, spherical_bessel_j0=spherical_bessel_j0,
               modified_bessel_i0=i0, modified_bessel_i1=i1)
TORCH = dict(i0=i0, igamma=gammainc, igammac=gammaincc, polygamma=polygamma)
METHODS = dict(i0=i0, igamma=gammainc, igammac=gammaincc, polygamma=lambda self, n: polygamma(n, self))
