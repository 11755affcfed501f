"""torch.special's orthogonal polynomials: chebyshev_polynomial_t / u / v / w and their shifted forms,
hermite_polynomial_h / he, laguerre_polynomial_l, legendre_polynomial_p. Each is its three-term recurrence in
tessel ops over x, evaluated to the largest degree asked for and picked per element (n broadcasts against x;
a negative degree gives 0, as torch). Composed of tessel ops, so the gradient in x flows (torch implements
none for these; n has none).

    P3 = tessel.special.legendre_polynomial_p(x, 3)          # (5x³ - 3x) / 2
"""
from . import _C

Tensor = _C.Tensor


def _degrees(x, n):
    """(x, n) broadcast, n as a float tensor of integers, and the largest degree."""
    if not isinstance(n, Tensor):
        n = _C._full([], float(n), x.dtype)
    if not isinstance(x, Tensor):
        x = _C._full([], float(x), n.dtype if n.dtype.is_floating_point else _C.dtype.float32)
    n = n.to(x.dtype)
    top = int(n.detach().max().item()) if n.numel() else -1
    return x, n, top


def _recurrence(name, first, step):
    """A polynomial family p_0 = 1, p_1 = first(x), p_(k+1) = step(k, x, p_k, p_(k-1))."""
    def poly(input, n):
        x, deg, top = _degrees(input, n)
        zero = x * 0
        prev, cur = zero + 1, first(x)
        result = _C._functional.where(deg.eq(0), prev, zero)
        if top >= 1:
            result = _C._functional.where(deg.eq(1), cur, result)
        for k in range(1, top):
            prev, cur = cur, step(k, x, cur, prev)
            result = _C._functional.where(deg.eq(k + 1), cur, result)
        return result
    poly.__name__ = name
    return poly


def _two_x(x):
    return 2 * x


chebyshev_polynomial_t = _recurrence("chebyshev_polynomial_t", lambda x: x, lambda k, x, p, q: 2 * x * p - q)
chebyshev_polynomial_u = _recurrence("chebyshev_polynomial_u", _two_x, lambda k, x, p, q: 2 * x * p - q)
chebyshev_polynomial_v = _recurrence("chebyshev_polynomial_v", lambda x: 2 * x - 1, lambda k, x, p, q: 2 * x * p - q)
chebyshev_polynomial_w = _recurrence("chebyshev_polynomial_w", lambda x: 2 * x + 1, lambda k, x, p, q: 2 * x * p - q)
hermite_polynomial_h = _recurrence("hermite_polynomial_h", _two_x, lambda k, x, p, q: 2 * x * p - 2 * k * q)
hermite_polynomial_he = _recurrence("hermite_polynomial_he", lambda x: x, lambda k, x, p, q: x * p - k * q)
laguerre_polynomial_l = _recurrence("laguerre_polynomial_l", lambda x: 1 - x,
                                    lambda k, x, p, q: ((2 * k + 1 - x) * p - k * q) / (k + 1))
legendre_polynomial_p = _recurrence("legendre_polynomial_p", lambda x: x,
                                    lambda k, x, p, q: ((2 * k + 1) * x * p - k * q) / (k + 1))


def _shifted(poly, name):
    def shifted(input, n):
        return poly(2 * input - 1, n)
    shifted.__name__ = name
    return shifted


POLYNOMIALS = dict(
    chebyshev_polynomial_t=chebyshev_polynomial_t, chebyshev_polynomial_u=chebyshev_polynomial_u,
    chebyshev_polynomial_v=chebyshev_polynomial_v, chebyshev_polynomial_w=chebyshev_polynomial_w,
    shifted_chebyshev_polynomial_t=_shifted(chebyshev_polynomial_t, "shifted_chebyshev_polynomial_t"),
    shifted_chebyshev_polynomial_u=_shifted(chebyshev_polynomial_u, "shifted_chebyshev_polynomial_u"),
    shifted_chebyshev_polynomial_v=_shifted(chebyshev_polynomial_v, "shifted_chebyshev_polynomial_v"),
    shifted_chebyshev_polynomial_w=_shifted(chebyshev_polynomial_w, "shifted_chebyshev_polynomial_w"),
    hermite_polynomial_h=hermite_polynomial_h, hermite_polynomial_he=hermite_polynomial_he,
    laguerre_polynomial_l=laguerre_polynomial_l, legendre_polynomial_p=legendre_polynomial_p)
