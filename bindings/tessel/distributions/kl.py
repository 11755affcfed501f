"""torch.distributions.kl: kl_divergence(p, q) dispatched on both types, and register_kl for new pairs.

Closed forms (torch's) for Normal, LogNormal, Uniform, Exponential, Laplace, Bernoulli, Categorical,
OneHotCategorical, MultivariateNormal, Gamma and Beta pairs and Independent wrappers here, the rest of torch's
registry (same-family pairs of the other families, TransformedDistribution pairs, the cross-family pairs) in
_kl_pairs.py; a pair with no registered form raises NotImplementedError naming both types.

Dispatch is torch's: among the registered (P, Q) pairs that the arguments' types subclass, the least in the
lexicographic subclass order wins; when ordering by Q first picks another function, a RuntimeWarning names the
ambiguity (and P's choice is used).
"""
import math
import warnings

import numpy as np

from .. import _C
from ..nn import functional as F
from . import _families as fam
from .distribution import Independent

_KL = {}


def register_kl(type_p, type_q):
    """Decorator: fn(p, q) computes KL(p || q) for instances of these types (subclasses match too; the most
    specific registered pair wins)."""
    def deco(fn):
        _KL[(type_p, type_q)] = fn
        return fn
    return deco


def _precedes(a, b):
    """a <= b: at the first position where the types differ, a's is a subclass of b's."""
    for x, y in zip(a, b):
        if not issubclass(x, y):
            return False
        if x is not y:
            break
    return True


def _least(pairs):
    best = pairs[0]
    for pair in pairs[1:]:
        if pair != best and _precedes(pair, best):
            best = pair
    return best


def _dispatch(type_p, type_q):
    matches = [(tp, tq) for (tp, tq) in _KL if issubclass(type_p, tp) and issubclass(type_q, tq)]
    if not matches:
        return None
    left_p, left_q = _least(matches)
    right_q, right_p = _least([(tq, tp) for tp, tq in matches])
    if _KL[left_p, left_q] is not _KL[right_p, right_q]:
        warnings.warn("Ambiguous kl_divergence(%s, %s). Please register_kl(%s, %s)"
                      % (type_p.__name__, type_q.__name__, left_p.__name__, right_q.__name__), RuntimeWarning,
                      stacklevel=3)
    return _KL[left_p, left_q]


def kl_divergence(p, q):
    fn = _dispatch(type(p), type(q))
    if fn is None:
        raise NotImplementedError("No KL(p || q) is implemented for p type %s and q type %s"
                                  % (type(p).__name__, type(q).__name__))
    return fn(p, q)


def _event_shapes_differ(what):  # (torch's message keeps its source's line continuation: a run of 26 spaces)
    return "KL-divergence between two %s with%sdifferent event shapes cannot be computed" % (what, " " * 26)


def _set(cond, t, value):
    """t with `value` where cond holds (inf for an impossible support, 0 for a term with zero mass)."""
    # a constant of t's shape and dtype (t * 0 + value is NaN where t is infinite: a -inf logit, a banned action)
    return _C._functional.where(cond, _C._full(list(t.shape), float(value), t.dtype), t)


@register_kl(fam.Normal, fam.Normal)
def _kl_normal_normal(p, q):
    var_ratio = (p.scale / q.scale) ** 2
    t1 = ((p.loc - q.loc) / q.scale) ** 2
    return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())


@register_kl(fam.LogNormal, fam.LogNormal)
def _kl_lognormal_lognormal(p, q):
    return _kl_normal_normal(p.base_dist, q.base_dist)


@register_kl(fam.Uniform, fam.Uniform)
def _kl_uniform_uniform(p, q):
    result = ((q.high - q.low) / (p.high - p.low)).log()
    return _set((q.low > p.low) | (q.high < p.high), result, math.inf)


@register_kl(fam.Exponential, fam.Exponential)
def _kl_exponential_exponential(p, q):
    rate_ratio = q.rate / p.rate
    return rate_ratio - 1 - rate_ratio.log()


@register_kl(fam.Laplace, fam.Laplace)
def _kl_laplace_laplace(p, q):
    scale_ratio = p.scale / q.scale
    loc_abs_diff = (p.loc - q.loc).abs()
    return -scale_ratio.log() + loc_abs_diff / q.scale + scale_ratio * (-loc_abs_diff / p.scale).exp() - 1


@register_kl(fam.Bernoulli, fam.Bernoulli)
def _kl_bernoulli_bernoulli(p, q):
    # log p - log q = softplus(-q.logits) - softplus(-p.logits); the complements with +logits
    t1 = _set(q.probs == 0, p.probs * (F.softplus(-q.logits) - F.softplus(-p.logits)), math.inf)
    t2 = _set(q.probs == 1, (1 - p.probs) * (F.softplus(q.logits) - F.softplus(p.logits)), math.inf)
    return _set(p.probs == 0, t1, 0.0) + _set(p.probs == 1, t2, 0.0)


@register_kl(fam.Categorical, fam.Categorical)
def _kl_categorical_categorical(p, q):
    t = _set(q.probs == 0, p.probs * (p.logits - q.logits), math.inf)
    return _set(p.probs == 0, t, 0.0).sum(-1)


@register_kl(fam.OneHotCategorical, fam.OneHotCategorical)
def _kl_onehot_onehot(p, q):
    return _kl_categorical_categorical(p._categorical, q._categorical)


@register_kl(Independent, Independent)
def _kl_independent_independent(p, q):
    if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
        raise NotImplementedError("KL between Independent distributions with different reinterpreted_batch_ndims")
    return p._sum_rightmost(kl_divergence(p.base_dist, q.base_dist))


def _more():
    from . import _more_families
    return _more_families


@register_kl(_more().MultivariateNormal, _more().MultivariateNormal)
def _kl_mvn_mvn(p, q):
    """½ (tr(Σq⁻¹Σp) + (μq - μp)ᵀ Σq⁻¹ (μq - μp) - n + log det Σq - log det Σp), through q's Cholesky factor."""
    from .. import linalg
    if p.event_shape != q.event_shape:
        raise ValueError(_event_shapes_differ("Multivariate Normals"))
    n = p.event_shape[0]
    lq = q._unbroadcasted_scale_tril
    lp = p._unbroadcasted_scale_tril
    half_log_det_q = lq.diagonal(0, -2, -1).log().sum(-1)
    half_log_det_p = lp.diagonal(0, -2, -1).log().sum(-1)
    shape = list(np.broadcast_shapes(tuple(lq.shape), tuple(lp.shape)))
    m = linalg.solve_triangular(lq.expand(*shape), lp.expand(*shape), upper=False)  # Lq⁻¹ Lp
    diff = (q.loc - p.loc).unsqueeze(-1)
    lq_diff = lq.expand(*(list(diff.shape[:-2]) + [n, n])) if lq.dim() < diff.dim() else lq
    mahalanobis = linalg.solve_triangular(lq_diff, diff, upper=False).squeeze(-1)
    return half_log_det_q - half_log_det_p + 0.5 * ((m * m).sum([-2, -1]) + (mahalanobis ** 2).sum(-1) - n)


@register_kl(_more().Gamma, _more().Gamma)
def _kl_gamma_gamma(p, q):
    a1, b1, a2, b2 = p.concentration, p.rate, q.concentration, q.rate
    return (a2 * (b1 / b2).log() + a2.lgamma() - a1.lgamma() + (a1 - a2) * a1.digamma()
            + (b2 - b1) * a1 / b1)


@register_kl(_more().Beta, _more().Beta)
def _kl_beta_beta(p, q):
    a1, b1, a2, b2 = p.concentration1, p.concentration0, q.concentration1, q.concentration0
    s1 = a1 + b1
    t1 = a2.lgamma() + b2.lgamma() + s1.lgamma()
    t2 = a1.lgamma() + b1.lgamma() + (a2 + b2).lgamma()
    return t1 - t2 + (a1 - a2) * a1.digamma() + (b1 - b2) * b1.digamma() + (a2 - a1 + b2 - b1) * s1.digamma()


def _register_the_rest():  # after the pairs above exist: _kl_pairs reuses _kl_normal_normal and _set
    from . import _kl_pairs
    return _kl_pairs


_register_the_rest()
