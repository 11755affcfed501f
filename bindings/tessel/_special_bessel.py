"""torch.special's Bessel functions of the first and second kind (bessel_j0 / j1 / y0 / y1), the modified ones of the
second kind (modified_bessel_k0 / k1 and their e^x-scaled forms) and airy_ai, on the host in float64 numpy (neither
numpy nor the libraries tessel links have them, and scipy is not a dependency).

The methods, each accurate to a few units of float64's last place where it is used:

    J0, J1, Y0, Y1   x <= 2: their power series; 2 < x <= 25: Miller's backward recurrence for J_n from n = 80,
                     normalized by J0 + 2 Σ J_2k = 1, with Y0 and Y1 from the Neumann series in the same J_n;
                     x > 25: Hankel's asymptotic expansion, its phase x - π/4 (x - 3π/4) rounded in float64 as
                     torch's Cephes kernels round it (so huge x gives torch's value)
    K0, K1           x <= 2: their power series; beyond, e^x K_ν(x) = ∫_0^∞ e^(-x (cosh t - 1)) cosh(νt) dt by the
                     trapezoidal rule, which converges geometrically for this analytic, even, decaying integrand
    Ai               |x| <= 2: its Maclaurin series; x > 2: (1/π) sqrt(x/3) K_1/3(2/3 x^3/2) by the same integral;
                     -9 <= x < -2: Taylor steps along Airy's equation y'' = x y from x = -2 (stable there: both
                     solutions oscillate); x < -9: the asymptotic expansion (DLMF 9.7.9)

torch's edge values are kept: J and Y are NaN at ±inf, Y is -inf at ±0 and NaN below, K is inf at ±0, 0 at inf and
NaN below, Ai is NaN at ±inf. j0, j1, y0, y1, k0 and k1 are differentiable with torch's formulas (J0' = -J1,
J1' = J0 - J1 / x, ...); the scaled K and Ai are not, as in torch.
"""
import math

import numpy as np

from . import _dtypes
from ._special_more import _back, _host_unary, _np, _on_pieces_if_distributed, _over_x

_EULER = 0.57721566490153286061
_AI0, _AIP0 = 0.35502805388781723926, -0.25881940379280679840  # Ai(0), Ai'(0)


def _positive(x, fn, at_zero, below):
    """fn on x > 0, at_zero at ±0, below for x < 0 (and NaN stays NaN)."""
    out = np.full(x.shape, np.nan)
    with np.errstate(invalid="ignore"):
        pos = x > 0
    if pos.any():
        out[pos] = fn(x[pos])
    out[x == 0] = at_zero
    out[x < 0] = below
    return out


# ---- J0, J1, Y0, Y1 -----------------------------------------------------------------------------------------

def _jy_series(x):
    """(J0, J1, Y0, Y1) for 0 < x <= 2 (A&S 9.1.10, 9.1.13 and 9.1.11; Y1's sum over ψ(k+1) + ψ(k+2))."""
    q = x * x / 4
    term = np.ones_like(x)  # (-q)^k / (k!)²
    j0, j1, s0, s1 = (np.zeros_like(x) for _ in range(4))
    harmonic = 0.0
    for k in range(25):
        if k:
            term = term * -q / (k * k)
            harmonic += 1.0 / k
        j0 += term
        j1 += term / (k + 1)
        s0 -= harmonic * term
        s1 += (2 * harmonic + 1.0 / (k + 1) - 2 * _EULER) * term / (k + 1)
    j1 *= x / 2
    log = np.log(x / 2)
    y0 = (2 / math.pi) * ((log + _EULER) * j0 + s0)
    y1 = -2 / (math.pi * x) + (2 / math.pi) * log * j1 - (x / 2) * s1 / math.pi
    return j0, j1, y0, y1


def _jy_miller(x, top=80):
    """(J0, J1, Y0, Y1) for 2 < x <= 25: J_n by backward recurrence J_(n-1) = (2n / x) J_n - J_(n+1) from a tiny
    J_top, scaled by the sum rule; (π/2) Y0 = (ln(x/2) + γ) J0 - 2 Σ (-1)^k J_2k / k and (π/2) Y1 =
    (ln(x/2) + γ - 1) J1 - J0 / x + Σ (-1)^(m+1) (2m+1) / (m (m+1)) J_(2m+1)."""
    upper, current = np.zeros_like(x), np.full_like(x, 1e-30)
    norm, even, odd = np.zeros_like(x), np.zeros_like(x), np.zeros_like(x)
    for n in range(top, 0, -1):
        lower = (2 * n / x) * current - upper
        upper, current = current, lower  # current: J_(n-1)
        m = n - 1
        if m and m % 2 == 0:
            norm += 2 * current
            even += (-1) ** (m // 2) * current / (m // 2)
        elif m % 2 and m >= 3:
            h = (m - 1) // 2
            odd += (-1) ** (h + 1) * (2 * h + 1) / (h * (h + 1)) * current
    scale = 1.0 / (norm + current)
    j0, j1 = current * scale, upper * scale
    log = np.log(x / 2) + _EULER
    y0 = (2 / math.pi) * (log * j0 - 2 * even * scale)
    y1 = (2 / math.pi) * ((log - 1) * j1 - j0 / x + odd * scale)
    return j0, j1, y0, y1


def _hankel(order, x):
    """(J_order, Y_order) for x > 25: sqrt(2 / (πx)) (P cos χ - Q sin χ, P sin χ + Q cos χ), χ = x - (2·order + 1) π/4
    rounded in float64 (Cephes' xn), P and Q Hankel's alternating series in 1/x."""
    mu = 4.0 * order * order
    term, p, q = np.ones_like(x), np.ones_like(x), np.zeros_like(x)
    for k in range(1, 31):
        term = term * (mu - (2 * k - 1) ** 2) / (k * 8.0 * x)
        sign = -1.0 if (k // 2) % 2 else 1.0
        if k % 2:
            q += sign * term
        else:
            p += sign * term
    with np.errstate(invalid="ignore"):
        phase = x - (0.75 if order else 0.25) * math.pi
        amplitude = np.sqrt(2 / (math.pi * x))
        c, s = np.cos(phase), np.sin(phase)
    return amplitude * (p * c - q * s), amplitude * (p * s + q * c)


def _jy(x):
    """(J0, J1, Y0, Y1) of x > 0 (inf included: NaN, torch's)."""
    outs = [np.empty_like(x) for _ in range(4)]
    for mask, fn in ((x <= 2, _jy_series), ((x > 2) & (x <= 25), _jy_miller)):
        if mask.any():
            for out, value in zip(outs, fn(x[mask])):
                out[mask] = value
    big = x > 25
    if big.any():
        outs[0][big], outs[2][big] = _hankel(0, x[big])
        outs[1][big], outs[3][big] = _hankel(1, x[big])
    return outs


def _j0(x):
    return _positive(np.abs(x), lambda v: _jy(v)[0], 1.0, np.nan)


def _j1(x):
    out = np.sign(x) * _positive(np.abs(x), lambda v: _jy(v)[1], 0.0, np.nan)
    return np.where(x == 0, x, out)  # J1(-0) = -0


def _y0(x):
    return _positive(x, lambda v: _jy(v)[2], -np.inf, np.nan)


def _y1(x):
    return _positive(x, lambda v: _jy(v)[3], -np.inf, np.nan)


# ---- K0, K1 -------------------------------------------------------------------------------------------------

def _k_series(x):
    """(K0, K1) for 0 < x <= 2 (A&S 9.6.13 and 9.6.11)."""
    q = x * x / 4
    term = np.ones_like(x)  # q^k / (k!)²
    i0, i1, s0, s1 = (np.zeros_like(x) for _ in range(4))
    harmonic = 0.0
    for k in range(25):
        if k:
            term = term * q / (k * k)
            harmonic += 1.0 / k
        i0 += term
        i1 += term / (k + 1)
        s0 += harmonic * term
        s1 += (2 * harmonic + 1.0 / (k + 1) - 2 * _EULER) * term / (k + 1)
    log = np.log(x / 2)
    return -(log + _EULER) * i0 + s0, 1 / x + log * i1 * (x / 2) - (x / 4) * s1


def _k_scaled_integral(nu, x, nodes=64):
    """e^x K_nu(x) for x > 0: the trapezoidal rule on [0, t_max], t_max where e^(-x (cosh t - 1)) < e^-45."""
    with np.errstate(over="ignore", invalid="ignore"):
        u = 45 / x
        t_max = np.log1p(u + np.sqrt(u * (u + 2)))  # arccosh(1 + u), exact for tiny u (1 + u rounded to 1)
        h = t_max / nodes
        t = h[:, None] * np.arange(nodes + 1)
        f = np.exp(-x[:, None] * 2 * np.sinh(t / 2) ** 2) * np.cosh(nu * t)  # (cosh t - 1 without cancellation)
        return np.where(np.isposinf(x), 0.0, h * (f.sum(axis=1) - f[:, 0] / 2))


def _k_scaled(order, x):
    def fn(v):
        out = np.empty_like(v)
        small = v <= 2
        if small.any():
            out[small] = _k_series(v[small])[order] * np.exp(v[small])
        if (~small).any():
            out[~small] = _k_scaled_integral(order, v[~small])
        return out
    return _positive(x, fn, np.inf, np.nan)


def _k(order, x):
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = _k_scaled(order, x)
        small = (x > 0) & (x <= 2)
        out = scaled * np.exp(-np.where(np.isfinite(x), x, 0.0))
        out[small] = _k_series(x[small])[order]
    return np.where(np.isposinf(x), 0.0, out)


# ---- Airy Ai ------------------------------------------------------------------------------------------------

def _ai_series(x):
    """(Ai, Ai') for |x| <= 2: Ai(0) f(x) + Ai'(0) g(x), f = 1 + x³/3! + 1·4 x⁶/6! + ..., g = x + 2 x⁴/4! + ..."""
    cube = x ** 3
    f_term, g_term = np.ones_like(x), x.copy()
    f, g = f_term.copy(), g_term.copy()
    df, dg = np.zeros_like(x), np.ones_like(x)  # f' and g'
    for k in range(30):
        df += f_term * x * x / (3 * k + 2)  # d/dx of the next f term: its x^(3k+3) / (3k+3)! times (3k+3)
        dg += g_term * x * x / (3 * k + 3)
        f_term = f_term * cube / ((3 * k + 2) * (3 * k + 3))
        g_term = g_term * cube / ((3 * k + 3) * (3 * k + 4))
        f += f_term
        g += g_term
    return _AI0 * f + _AIP0 * g, _AI0 * df + _AIP0 * dg


def _ai_taylor(x, steps=20, terms=32):
    """Ai for -9 <= x < -2: Taylor steps of Airy's equation from x = -2, y^(n+2) = x0 y^(n) + n y^(n-1)."""
    x0 = np.full_like(x, -2.0)
    y, dy = (v[0] * np.ones_like(x) for v in _ai_series(np.array([-2.0])))
    h = (x - x0) / steps
    for _ in range(steps):
        d = [y, dy]
        for n in range(terms):
            d.append(x0 * d[n] + (n * d[n - 1] if n else 0.0))
        value, slope, power = np.zeros_like(x), np.zeros_like(x), np.ones_like(x)
        for n in range(terms):
            value += d[n] * power
            slope += d[n + 1] * power
            power = power * h / (n + 1)
        y, dy, x0 = value, slope, x0 + h
    return y


def _ai_asymptotic(x):
    """Ai(-z) for z > 9: π^-1/2 z^-1/4 (sin θ P - cos θ Q), θ = ζ + π/4, ζ = 2/3 z^3/2 (DLMF 9.7.9)."""
    z = -x
    zeta = 2 * z * np.sqrt(z) / 3
    u, p, q = 1.0, np.ones_like(z), np.zeros_like(z)
    power = np.ones_like(z)
    for k in range(1, 25):
        u = u * (6 * k - 5) * (6 * k - 3) * (6 * k - 1) / ((2 * k - 1) * 216 * k)
        power = power / zeta
        sign = -1.0 if (k // 2) % 2 else 1.0
        if k % 2:
            q += sign * u * power
        else:
            p += sign * u * power
    theta = zeta + math.pi / 4
    return (np.sin(theta) * p - np.cos(theta) * q) / (math.sqrt(math.pi) * np.sqrt(np.sqrt(z)))


def _airy_ai(x):
    out = np.full(x.shape, np.nan)
    with np.errstate(invalid="ignore"):
        pieces = ((np.abs(x) <= 2, lambda v: _ai_series(v)[0]),
                  ((x > 2) & np.isfinite(x), _ai_positive),
                  ((x < -2) & (x >= -9), _ai_taylor),
                  ((x < -9) & np.isfinite(x), _ai_asymptotic))
    for mask, fn in pieces:
        if mask.any():
            out[mask] = fn(x[mask])
    return out


def _ai_positive(x):
    zeta = 2 * x * np.sqrt(x) / 3
    with np.errstate(under="ignore"):
        return np.sqrt(x / 3) / math.pi * _k_scaled_integral(1 / 3, zeta) * np.exp(-zeta)


# ---- the public functions -----------------------------------------------------------------------------------

def _kernel_check(name, x):
    """torch's CPU kernels of these have no 16-bit floats."""
    if x.dtype in _dtypes.REDUCED:
        raise NotImplementedError("\"%s_cpu\" not implemented for '%s'"
                                  % (name, "Half" if x.dtype == _dtypes.float16 else "BFloat16"))


def _flat(host):
    """host on a 1-D copy (the pieces above index and assign by masks; a 0-d array has no elements to assign)."""
    def fn(values):
        values = np.asarray(values, np.float64)
        return host(values.reshape(-1).copy()).reshape(values.shape)
    return fn


def _differentiable(name, host, derivative):
    op = _host_unary(name, _flat(host), derivative)

    @_on_pieces_if_distributed
    def fn(input):
        _kernel_check(name, input)
        return op.apply(input)
    fn.__name__ = fn.__qualname__ = name
    return fn


def _plain(name, host):
    @_on_pieces_if_distributed
    def fn(input):
        _kernel_check(name, input)
        return _back(_flat(host)(_np(input)), input)
    fn.__name__ = fn.__qualname__ = name
    return fn


bessel_j0 = _differentiable("bessel_j0", _j0, lambda x: -bessel_j1(x))
bessel_j1 = _differentiable("bessel_j1", _j1,
                            lambda x: _over_x(x, 0.5, lambda v, inv: bessel_j0(v) - bessel_j1(v) * inv))
bessel_y0 = _differentiable("bessel_y0", _y0, lambda x: -bessel_y1(x))
bessel_y1 = _differentiable("bessel_y1", _y1,
                            lambda x: _over_x(x, math.inf, lambda v, inv: bessel_y0(v) - bessel_y1(v) * inv))
modified_bessel_k0 = _differentiable("modified_bessel_k0", lambda v: _k(0, v), lambda x: -modified_bessel_k1(x))
modified_bessel_k1 = _differentiable("modified_bessel_k1", lambda v: _k(1, v),
                                     lambda x: -modified_bessel_k0(x) - modified_bessel_k1(x) / x)
scaled_modified_bessel_k0 = _plain("scaled_modified_bessel_k0", lambda v: _k_scaled(0, v))
scaled_modified_bessel_k1 = _plain("scaled_modified_bessel_k1", lambda v: _k_scaled(1, v))
airy_ai = _plain("airy_ai", _airy_ai)

SPECIAL = dict(bessel_j0=bessel_j0, bessel_j1=bessel_j1, bessel_y0=bessel_y0, bessel_y1=bessel_y1,
               modified_bessel_k0=modified_bessel_k0, modified_bessel_k1=modified_bessel_k1,
               scaled_modified_bessel_k0=scaled_modified_bessel_k0,
               scaled_modified_bessel_k1=scaled_modified_bessel_k1, airy_ai=airy_ai)
