"""torch.special.ndtri and log_ndtr in the far tails: computed on the host in float64, differentiable.

The composed forms (sqrt(2)·erfinv(2p - 1), log(erfc(-x/sqrt(2)) / 2)) lose the tails: 2p - 1 rounds to -1
for p below 1e-17 (ndtri(1e-30) gave -inf where it is -11.46) and erfc underflows below x = -38
(log_ndtr(-1e30) gave -inf where it is -5e59). Here log_ndtr is log(erfc(-x/√2)/2) from libm's erfc (exact
to the last bits down to 1e-308) with log1p(-erfc(x/√2)/2) above 0, and the asymptotic series
-x²/2 - log(-x·√(2π)) + log(1 - 1/x² + 3/x⁴ - ...) below x = -20; ndtri starts from Acklam's rational
approximation (relative error 1.2e-9) and takes two Newton steps on log_ndtr(x) = log(p), which converge to
float64's precision anywhere in (0, 1) (no library tessel links has these; numpy has neither).
"""
import math

import numpy as np

from ._special_more import _erfc_host as _erfc, _host_unary, _on_pieces_if_distributed

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)

# Acklam's coefficients for the inverse normal CDF (central region, then the tails)
_A = [-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02, 1.383577518672690e+02,
      -3.066479806614716e+01, 2.506628277459239e+00]
_B = [-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01,
      -1.328068155288572e+01]
_C_ = [-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00, -2.549732539343734e+00,
       4.374664141464968e+00, 2.938163982698783e+00]
_D = [7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00]


def _log_ndtr(x):
    x = np.asarray(x, np.float64)
    out = np.empty_like(x)
    upper, far = x > 0.0, x < -20.0
    mid = ~upper & ~far
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        out[upper] = np.log1p(-0.5 * _erfc(x[upper] / math.sqrt(2.0)))
        out[mid] = np.log(0.5 * _erfc(-x[mid] / math.sqrt(2.0)))
        xf = x[far]
        inv2 = 1.0 / (xf * xf)
        series, term = np.ones_like(xf), np.ones_like(xf)
        for k in range(1, 12):  # 1 - 1/x² + 3/x⁴ - 15/x⁶ ...: terms shrink while (2k - 1) < x² (x² > 400)
            term = -term * (2 * k - 1) * inv2
            series = series + term
        out[far] = -0.5 * xf * xf - np.log(-xf) - _LOG_SQRT_2PI + np.log(series)
    return out


def _polyval(coefficients, t):
    out = np.zeros_like(t)
    for c in coefficients:
        out = out * t + c
    return out


def _ndtri(p):
    p = np.asarray(p, np.float64)
    out = np.full(p.shape, np.nan)
    out[p == 0.0] = -np.inf
    out[p == 1.0] = np.inf
    inside = (p > 0.0) & (p < 1.0)
    q = p[inside]
    lower = np.minimum(q, 1.0 - q)  # solved in the lower half, then mirrored
    x = np.empty_like(q)
    with np.errstate(divide="ignore", invalid="ignore"):
        central = lower > 0.02425
        r = lower[central] - 0.5
        s = r * r
        x[central] = _polyval(_A, s) * r / (_polyval(_B, s) * s + 1.0)
        t = np.sqrt(-2.0 * np.log(lower[~central]))
        x[~central] = _polyval(_C_, t) / (_polyval(_D, t) * t + 1.0)
        target = np.where(q < 0.5, np.log(q), np.log(1.0 - q))
        for _ in range(2):  # Newton on log_ndtr(x) = log(p): its slope is pdf(x) / ndtr(x)
            f = _log_ndtr(x)
            slope = np.exp(-0.5 * x * x - _LOG_SQRT_2PI - f)
            x = x - (f - target) / slope
    out[inside] = np.where(q < 0.5, x, -x) + 0.0  # (+0 at p = 0.5)
    return out


def _ndtri_derivative(p):
    """d ndtri / dp = sqrt(2π)·exp(ndtri(p)² / 2), differentiable again (second derivatives through ndtri)."""
    y = ndtri(p)
    return (y * y * 0.5 + _LOG_SQRT_2PI).exp()


def _log_ndtr_derivative(x):
    """d log_ndtr / dx = pdf(x) / ndtr(x) = exp(-x²/2 - log sqrt(2π) - log_ndtr(x)), differentiable again."""
    return (x * x * -0.5 - _LOG_SQRT_2PI - log_ndtr(x)).exp()


_Ndtri = _host_unary("Ndtri", _ndtri, _ndtri_derivative)
_LogNdtr = _host_unary("LogNdtr", _log_ndtr, _log_ndtr_derivative)


@_on_pieces_if_distributed
def ndtri(input):
    """The inverse of the standard normal CDF (torch.special.ndtri); integer inputs in the default dtype."""
    return _Ndtri.apply(input)


@_on_pieces_if_distributed
def log_ndtr(input):
    """log of the standard normal CDF (torch.special.log_ndtr), finite down to x = -1e154."""
    return _LogNdtr.apply(input)
