"""torch.special's names over tessel's functions (the composed ones are in tessel/_special.py).

    >>> tessel.special.gammaln(tessel.tensor([0.5]))   # log(sqrt(pi))
    tensor([0.5724])
"""
import math as _math

from . import _special

_f = _special.FUNCTIONS
erf = lambda input: input.erf()  # noqa: E731
erfc, erfinv, gammaln, digamma, psi = _f["erfc"], _f["erfinv"], _f["lgamma"], _f["digamma"], _f["digamma"]
xlogy, logit, sinc, logsumexp = _f["xlogy"], _f["logit"], _f["sinc"], lambda input, dim, keepdim=False: input.logsumexp(dim, keepdim)
expit = lambda input: input.sigmoid()  # noqa: E731
exp2 = lambda input: (input * _math.log(2.0)).exp()  # noqa: E731
expm1 = lambda input: input.expm1()  # noqa: E731
log1p = lambda input: input.log1p()  # noqa: E731
round = lambda input, decimals=0: input.round(decimals=decimals)  # noqa: E731,A001
softmax = lambda input, dim, dtype=None: input.softmax(dim) if dtype is None else input.to(dtype).softmax(dim)  # noqa: E731
log_softmax = lambda input, dim, dtype=None: input.log_softmax(dim, dtype)  # noqa: E731


xlog1py, entr = _special._in_float64(_special.xlog1py, 2), _special._in_float64(_special.entr)


from ._dtensor_compose import wrap_all as _wrap_composed  # noqa: E402 (their constants next to DTensors)
from ._special_more import SPECIAL as _MORE  # noqa: E402 (i0, i1e, erfcx, gammainc, polygamma, zeta, ...)
globals().update(_wrap_composed(_MORE))
from ._polynomials import POLYNOMIALS as _POLYNOMIALS  # noqa: E402 (chebyshev_polynomial_t, legendre_polynomial_p, ...)
globals().update(_wrap_composed(_POLYNOMIALS))
from ._special_bessel import SPECIAL as _BESSEL  # noqa: E402 (bessel_j0 / y1, modified_bessel_k0, airy_ai, ...)
globals().update(_wrap_composed(_BESSEL))


def ndtr(input):
    """The standard normal CDF: (1 + erf(x / sqrt(2))) / 2."""
    return (1.0 + (input * (1.0 / _math.sqrt(2.0))).erf()) * 0.5


from ._normal import log_ndtr, ndtri  # noqa: E402,F401 (float64 on the host: their far tails)
