"""The rest of torch 2.15's KL registry: same-family pairs (Binomial, Cauchy, ContinuousBernoulli, Dirichlet,
Geometric, Gumbel, HalfNormal, HalfCauchy, LowRankMultivariateNormal and its MultivariateNormal mixes, Pareto,
Poisson, TransformedDistribution) and the cross-family pairs among Bernoulli, Beta, ContinuousBernoulli,
Exponential, Gamma, Gumbel, Laplace, Normal, Pareto, Poisson and Uniform, each torch's closed form (infinite
where p's support reaches outside q's).

HalfCauchy is no TransformedDistribution in tessel, so its pair is registered here directly: torch reaches the
same Cauchy-Cauchy form through the TransformedDistribution pair.
"""
import math

import numpy as np

from .. import _tensor
from . import _families as fam, _more_families as more
from ._shaped_families import ContinuousBernoulli, LowRankMultivariateNormal, _batch_lowrank_logdet, \
    _batch_lowrank_mahalanobis, _batch_mahalanobis
from ._transformed_families import Pareto
from .kl import _event_shapes_differ, _kl_normal_normal, _set, kl_divergence, register_kl
from .transforms import TransformedDistribution

_EULER = 0.57721566490153286060


def _infinite_like(t):
    return _tensor.full_like(t, math.inf)


def _x_log_x(t):
    from .. import special
    return special.xlogy(t, t)  # 0 at t = 0


def _batch_trace_xxt(bmat):
    """tr(X Xᵀ) over the batch: the sum of X's squared entries."""
    n, m = bmat.shape[-1], bmat.shape[-2]
    return bmat.reshape(-1, m * n).pow(2).sum(-1).reshape(*bmat.shape[:-2])


def _linalg():
    from .. import linalg
    return linalg


# ---------------------------------------------------------------- same family

@register_kl(more.Binomial, more.Binomial)
def _kl_binomial_binomial(p, q):
    if bool((p.total_count < q.total_count).any().item()):
        raise NotImplementedError("KL between Binomials where q.total_count > p.total_count is not implemented")
    kl = p.total_count * (p.probs * (p.logits - q.logits) + (-p.probs).log1p() - (-q.probs).log1p())
    return _set(p.total_count > q.total_count, kl, math.inf)


@register_kl(ContinuousBernoulli, ContinuousBernoulli)
def _kl_continuous_bernoulli_continuous_bernoulli(p, q):
    t1 = p.mean * (p.logits - q.logits)
    t2 = p._cont_bern_log_norm() + (-p.probs).log1p()
    t3 = -q._cont_bern_log_norm() - (-q.probs).log1p()
    return t1 + t2 + t3


@register_kl(more.Dirichlet, more.Dirichlet)
def _kl_dirichlet_dirichlet(p, q):
    sum_p, sum_q = p.concentration.sum(-1), q.concentration.sum(-1)
    t1 = sum_p.lgamma() - sum_q.lgamma()
    t2 = (p.concentration.lgamma() - q.concentration.lgamma()).sum(-1)
    t3 = p.concentration - q.concentration
    t4 = p.concentration.digamma() - sum_p.digamma().unsqueeze(-1)
    return t1 - t2 + (t3 * t4).sum(-1)


@register_kl(more.Gumbel, more.Gumbel)
def _kl_gumbel_gumbel(p, q):
    ct1, ct2, ct3 = p.scale / q.scale, q.loc / q.scale, p.loc / q.scale
    t1 = -ct1.log() - ct2 + ct3
    t2 = ct1 * _EULER
    t3 = (ct2 + (1 + ct1).lgamma() - ct3).exp()
    return t1 + t2 + t3 - (1 + _EULER)


@register_kl(more.Geometric, more.Geometric)
def _kl_geometric_geometric(p, q):
    return -p.entropy() - (-q.probs).log1p() / p.probs - q.logits


@register_kl(more.HalfNormal, more.HalfNormal)
def _kl_halfnormal_halfnormal(p, q):
    return _kl_normal_normal(p.base_dist, q.base_dist)


@register_kl(more.Cauchy, more.Cauchy)
def _kl_cauchy_cauchy(p, q):
    t1 = ((p.scale + q.scale).pow(2) + (p.loc - q.loc).pow(2)).log()
    return t1 - (4 * p.scale * q.scale).log()


@register_kl(more.HalfCauchy, more.HalfCauchy)
def _kl_halfcauchy_halfcauchy(p, q):
    return _kl_cauchy_cauchy(p.base_dist, q.base_dist)


@register_kl(Pareto, Pareto)
def _kl_pareto_pareto(p, q):
    scale_ratio, alpha_ratio = p.scale / q.scale, q.alpha / p.alpha
    result = q.alpha * scale_ratio.log() - alpha_ratio.log() + alpha_ratio - 1
    return _set(p.support.lower_bound < q.support.lower_bound, result, math.inf)


@register_kl(more.Poisson, more.Poisson)
def _kl_poisson_poisson(p, q):
    return p.rate * (p.rate.log() - q.rate.log()) - (p.rate - q.rate)


@register_kl(TransformedDistribution, TransformedDistribution)
def _kl_transformed_transformed(p, q):
    if p.transforms != q.transforms:
        raise NotImplementedError
    if p.event_shape != q.event_shape:
        raise NotImplementedError
    return kl_divergence(p.base_dist, q.base_dist)


# ------------------------------------------------------- low-rank normals

def _lowrank_parts(q):
    return q._unbroadcasted_cov_factor, q._unbroadcasted_cov_diag, q._capacitance_tril


def _woodbury_a(q):
    """A = C⁻¹ Wᵀ D⁻¹ for q's capacitance factor C: Σq⁻¹ = D⁻¹ - Aᵀ A."""
    w, d, cap = _lowrank_parts(q)
    return _linalg().solve_triangular(cap, w.transpose(-2, -1) / d.unsqueeze(-2), upper=False)


@register_kl(LowRankMultivariateNormal, LowRankMultivariateNormal)
def _kl_lowrank_lowrank(p, q):
    if p.event_shape != q.event_shape:
        raise ValueError(_event_shapes_differ("Low Rank Multivariate Normals"))
    (pw, pd, pcap), (qw, qd, qcap) = _lowrank_parts(p), _lowrank_parts(q)
    term1 = _batch_lowrank_logdet(qw, qd, qcap) - _batch_lowrank_logdet(pw, pd, pcap)
    term3 = _batch_lowrank_mahalanobis(qw, qd, q.loc - p.loc, qcap)
    a = _woodbury_a(q)
    term21 = (pd / qd).sum(-1)
    term22 = _batch_trace_xxt(pw * qd.rsqrt().unsqueeze(-1))
    term23 = _batch_trace_xxt(a * pd.sqrt().unsqueeze(-2))
    term24 = _batch_trace_xxt(a @ pw)
    return 0.5 * (term1 + term21 + term22 - term23 - term24 + term3 - p.event_shape[0])


@register_kl(more.MultivariateNormal, LowRankMultivariateNormal)
def _kl_mvn_lowrank(p, q):
    if p.event_shape != q.event_shape:
        raise ValueError(_event_shapes_differ("(Low Rank) Multivariate Normals"))
    qw, qd, qcap = _lowrank_parts(q)
    pl = p._unbroadcasted_scale_tril
    term1 = _batch_lowrank_logdet(qw, qd, qcap) - 2 * pl.diagonal(0, -2, -1).log().sum(-1)
    term3 = _batch_lowrank_mahalanobis(qw, qd, q.loc - p.loc, qcap)
    term21 = _batch_trace_xxt(pl * qd.rsqrt().unsqueeze(-1))
    term22 = _batch_trace_xxt(_woodbury_a(q) @ pl)
    return 0.5 * (term1 + term21 - term22 + term3 - p.event_shape[0])


@register_kl(LowRankMultivariateNormal, more.MultivariateNormal)
def _kl_lowrank_mvn(p, q):
    if p.event_shape != q.event_shape:
        raise ValueError(_event_shapes_differ("(Low Rank) Multivariate Normals"))
    pw, pd, pcap = _lowrank_parts(p)
    ql = q._unbroadcasted_scale_tril
    term1 = 2 * ql.diagonal(0, -2, -1).log().sum(-1) - _batch_lowrank_logdet(pw, pd, pcap)
    term3 = _batch_mahalanobis(ql, q.loc - p.loc)
    batch = tuple(np.broadcast_shapes(tuple(ql.shape[:-2]), tuple(pw.shape[:-2])))
    n = p.event_shape[0]
    q_tril = ql.expand(*(batch + (n, n)))
    solve = _linalg().solve_triangular
    term21 = _batch_trace_xxt(solve(q_tril, pw.expand(*(batch + (n, pw.shape[-1]))), upper=False))
    term22 = _batch_trace_xxt(solve(q_tril, pd.sqrt().diag_embed().expand(*(batch + (n, n))), upper=False))
    return 0.5 * (term1 + term21 + term22 + term3 - n)


# ------------------------------------------------------------ cross family

@register_kl(fam.Bernoulli, more.Poisson)
def _kl_bernoulli_poisson(p, q):
    return -p.entropy() - (p.probs * q.rate.log() - q.rate)


@register_kl(more.Beta, ContinuousBernoulli)
def _kl_beta_continuous_bernoulli(p, q):
    return -p.entropy() - p.mean * q.logits - (-q.probs).log1p() - q._cont_bern_log_norm()


@register_kl(more.Beta, Pareto)
def _kl_beta_infinity(p, q):
    return _infinite_like(p.concentration1)


@register_kl(more.Beta, fam.Exponential)
def _kl_beta_exponential(p, q):
    c1, c0 = p.concentration1, p.concentration0
    return -p.entropy() - q.rate.log() + q.rate * (c1 / (c1 + c0))


@register_kl(more.Beta, more.Gamma)
def _kl_beta_gamma(p, q):
    c1, c0 = p.concentration1, p.concentration0
    t2 = q.concentration.lgamma() - q.concentration * q.rate.log()
    t3 = (q.concentration - 1) * (c1.digamma() - (c1 + c0).digamma())
    t4 = q.rate * c1 / (c1 + c0)
    return -p.entropy() + t2 - t3 + t4


@register_kl(more.Beta, fam.Normal)
def _kl_beta_normal(p, q):
    c1, c0 = p.concentration1, p.concentration0
    e_beta = c1 / (c1 + c0)
    var_normal = q.scale.pow(2)
    t2 = 0.5 * (var_normal * 2 * math.pi).log()
    t3 = (e_beta * (1 - e_beta) / (c1 + c0 + 1) + e_beta.pow(2)) * 0.5
    t4 = q.loc * e_beta
    t5 = q.loc.pow(2) * 0.5
    return -p.entropy() + t2 + (t3 - t4 + t5) / var_normal


@register_kl(more.Beta, fam.Uniform)
def _kl_beta_uniform(p, q):
    result = -p.entropy() + (q.high - q.low).log()
    return _set((q.low > 0.0) | (q.high < 1.0), result, math.inf)  # Beta's support is [0, 1]


@register_kl(ContinuousBernoulli, Pareto)
def _kl_continuous_bernoulli_infinity(p, q):
    return _infinite_like(p.probs)


@register_kl(ContinuousBernoulli, fam.Exponential)
def _kl_continuous_bernoulli_exponential(p, q):
    return -p.entropy() - q.rate.log() + q.rate * p.mean


@register_kl(ContinuousBernoulli, fam.Normal)
def _kl_continuous_bernoulli_normal(p, q):
    t2 = 0.5 * (math.log(2.0 * math.pi) + (q.loc / q.scale).square()) + q.scale.log()
    t3 = (p.variance + p.mean.square() - 2.0 * q.loc * p.mean) / (2.0 * q.scale.square())
    return -p.entropy() + t2 + t3


@register_kl(ContinuousBernoulli, fam.Uniform)
def _kl_continuous_bernoulli_uniform(p, q):
    result = -p.entropy() + (q.high - q.low).log()
    return _set((q.low >= 0.0) | (q.high <= 1.0), result, math.inf)


@register_kl(fam.Exponential, more.Beta)
@register_kl(fam.Exponential, ContinuousBernoulli)
@register_kl(fam.Exponential, Pareto)
@register_kl(fam.Exponential, fam.Uniform)
def _kl_exponential_infinity(p, q):
    return _infinite_like(p.rate)


@register_kl(fam.Exponential, more.Gamma)
def _kl_exponential_gamma(p, q):
    ratio = q.rate / p.rate
    t1 = -q.concentration * ratio.log()
    return t1 + ratio + q.concentration.lgamma() + q.concentration * _EULER - (1 + _EULER)


@register_kl(fam.Exponential, more.Gumbel)
def _kl_exponential_gumbel(p, q):
    scale_rate_prod = p.rate * q.scale
    loc_scale_ratio = q.loc / q.scale
    t1 = scale_rate_prod.log() - 1
    t2 = loc_scale_ratio.exp() * scale_rate_prod / (scale_rate_prod + 1)
    return t1 - loc_scale_ratio + t2 + scale_rate_prod.reciprocal()


@register_kl(fam.Exponential, fam.Normal)
def _kl_exponential_normal(p, q):
    var_normal, rate_sqr = q.scale.pow(2), p.rate.pow(2)
    t1 = 0.5 * (rate_sqr * var_normal * 2 * math.pi).log()
    return t1 - 1 + (rate_sqr.reciprocal() - q.loc / p.rate + q.loc.pow(2) * 0.5) / var_normal


@register_kl(more.Gamma, more.Beta)
@register_kl(more.Gamma, ContinuousBernoulli)
@register_kl(more.Gamma, Pareto)
@register_kl(more.Gamma, fam.Uniform)
def _kl_gamma_infinity(p, q):
    return _infinite_like(p.concentration)


@register_kl(more.Gamma, fam.Exponential)
def _kl_gamma_exponential(p, q):
    return -p.entropy() - q.rate.log() + q.rate * p.concentration / p.rate


@register_kl(more.Gamma, more.Gumbel)
def _kl_gamma_gumbel(p, q):
    a = p.concentration
    beta_scale_prod = p.rate * q.scale
    loc_scale_ratio = q.loc / q.scale
    t1 = (a - 1) * a.digamma() - a.lgamma() - a
    t2 = beta_scale_prod.log() + a / beta_scale_prod
    t3 = loc_scale_ratio.exp() * (1 + beta_scale_prod.reciprocal()).pow(-a) - loc_scale_ratio
    return t1 + t2 + t3


@register_kl(more.Gamma, fam.Normal)
def _kl_gamma_normal(p, q):
    a = p.concentration
    var_normal, beta_sqr = q.scale.pow(2), p.rate.pow(2)
    t1 = 0.5 * (beta_sqr * var_normal * 2 * math.pi).log() - a - a.lgamma()
    t2 = 0.5 * (a.pow(2) + a) / beta_sqr
    t3 = q.loc * a / p.rate
    t4 = 0.5 * q.loc.pow(2)
    return t1 + (a - 1) * a.digamma() + (t2 - t3 + t4) / var_normal


@register_kl(more.Gumbel, more.Beta)
@register_kl(more.Gumbel, ContinuousBernoulli)
@register_kl(more.Gumbel, fam.Exponential)
@register_kl(more.Gumbel, more.Gamma)
@register_kl(more.Gumbel, Pareto)
@register_kl(more.Gumbel, fam.Uniform)
def _kl_gumbel_infinity(p, q):
    return _infinite_like(p.loc)


@register_kl(more.Gumbel, fam.Normal)
def _kl_gumbel_normal(p, q):
    param_ratio = p.scale / q.scale
    t1 = (param_ratio / math.sqrt(2 * math.pi)).log()
    t2 = (math.pi * param_ratio * 0.5).pow(2) / 3
    t3 = ((p.loc + p.scale * _EULER - q.loc) / q.scale).pow(2) * 0.5
    return -t1 + t2 + t3 - (_EULER + 1)


@register_kl(fam.Laplace, more.Beta)
@register_kl(fam.Laplace, ContinuousBernoulli)
@register_kl(fam.Laplace, fam.Exponential)
@register_kl(fam.Laplace, more.Gamma)
@register_kl(fam.Laplace, Pareto)
@register_kl(fam.Laplace, fam.Uniform)
def _kl_laplace_infinity(p, q):
    return _infinite_like(p.loc)


@register_kl(fam.Laplace, fam.Normal)
def _kl_laplace_normal(p, q):
    var_normal = q.scale.pow(2)
    scale_sqr_var_ratio = p.scale.pow(2) / var_normal
    t1 = 0.5 * (2 * scale_sqr_var_ratio / math.pi).log()
    t2, t3, t4 = 0.5 * p.loc.pow(2), p.loc * q.loc, 0.5 * q.loc.pow(2)
    return -t1 + scale_sqr_var_ratio + (t2 - t3 + t4) / var_normal - 1


@register_kl(fam.Normal, more.Beta)
@register_kl(fam.Normal, ContinuousBernoulli)
@register_kl(fam.Normal, fam.Exponential)
@register_kl(fam.Normal, more.Gamma)
@register_kl(fam.Normal, Pareto)
@register_kl(fam.Normal, fam.Uniform)
def _kl_normal_infinity(p, q):
    return _infinite_like(p.loc)


@register_kl(fam.Normal, more.Gumbel)
def _kl_normal_gumbel(p, q):
    mean_scale_ratio = p.loc / q.scale
    var_scale_sqr_ratio = (p.scale / q.scale).pow(2)
    loc_scale_ratio = q.loc / q.scale
    t1 = var_scale_sqr_ratio.log() * 0.5
    t2 = mean_scale_ratio - loc_scale_ratio
    t3 = (-mean_scale_ratio + 0.5 * var_scale_sqr_ratio + loc_scale_ratio).exp()
    return -t1 + t2 + t3 - (0.5 * (1 + math.log(2 * math.pi)))


@register_kl(fam.Normal, fam.Laplace)
def _kl_normal_laplace(p, q):
    loc_diff = p.loc - q.loc
    scale_ratio = p.scale / q.scale
    loc_diff_scale_ratio = loc_diff / p.scale
    t1 = scale_ratio.log()
    t2 = math.sqrt(2 / math.pi) * p.scale * (-0.5 * loc_diff_scale_ratio.pow(2)).exp()
    t3 = loc_diff * (math.sqrt(0.5) * loc_diff_scale_ratio).erf()
    return -t1 + (t2 + t3) / q.scale - (0.5 * (1 + math.log(0.5 * math.pi)))


@register_kl(Pareto, more.Beta)
@register_kl(Pareto, ContinuousBernoulli)
@register_kl(Pareto, fam.Uniform)
def _kl_pareto_infinity(p, q):
    return _infinite_like(p.scale)


@register_kl(Pareto, fam.Exponential)
def _kl_pareto_exponential(p, q):
    scale_rate_prod = p.scale * q.rate
    t1 = (p.alpha / scale_rate_prod).log()
    t3 = p.alpha * scale_rate_prod / (p.alpha - 1)
    return _set(p.alpha <= 1, t1 - p.alpha.reciprocal() + t3 - 1, math.inf)


@register_kl(Pareto, more.Gamma)
def _kl_pareto_gamma(p, q):
    common_term = p.scale.log() + p.alpha.reciprocal()
    t1 = p.alpha.log() - common_term
    t2 = q.concentration.lgamma() - q.concentration * q.rate.log()
    t3 = (1 - q.concentration) * common_term
    t4 = q.rate * p.alpha * p.scale / (p.alpha - 1)
    return _set(p.alpha <= 1, t1 + t2 + t3 + t4 - 1, math.inf)


@register_kl(Pareto, fam.Normal)
def _kl_pareto_normal(p, q):
    var_normal = 2 * q.scale.pow(2)
    common_term = p.scale / (p.alpha - 1)
    t1 = (math.sqrt(2 * math.pi) * q.scale * p.alpha / p.scale).log()
    t3 = p.alpha * common_term.pow(2) / (p.alpha - 2)
    t4 = (p.alpha * common_term - q.loc).pow(2)
    return _set(p.alpha <= 2, t1 - p.alpha.reciprocal() + (t3 + t4) / var_normal - 1, math.inf)


@register_kl(more.Poisson, fam.Bernoulli)
@register_kl(more.Poisson, more.Binomial)
def _kl_poisson_infinity(p, q):
    return _infinite_like(p.rate)


@register_kl(fam.Uniform, more.Beta)
def _kl_uniform_beta(p, q):
    width = p.high - p.low
    t1 = width.log()
    t2 = (q.concentration1 - 1) * (_x_log_x(p.high) - _x_log_x(p.low) - width) / width
    t3 = (q.concentration0 - 1) * (_x_log_x(1 - p.high) - _x_log_x(1 - p.low) + width) / width
    t4 = q.concentration1.lgamma() + q.concentration0.lgamma() - (q.concentration1 + q.concentration0).lgamma()
    return _set((p.high > 1.0) | (p.low < 0.0), t3 + t4 - t1 - t2, math.inf)


@register_kl(fam.Uniform, ContinuousBernoulli)
def _kl_uniform_continuous_bernoulli(p, q):
    result = -p.entropy() - p.mean * q.logits - (-q.probs).log1p() - q._cont_bern_log_norm()
    return _set((p.high >= 1.0) | (p.low <= 0.0), result, math.inf)


@register_kl(fam.Uniform, fam.Exponential)
def _kl_uniform_exponential(p, q):
    result = q.rate * (p.high + p.low) / 2 - ((p.high - p.low) * q.rate).log()
    return _set(p.low < 0.0, result, math.inf)


@register_kl(fam.Uniform, more.Gamma)
def _kl_uniform_gamma(p, q):
    width = p.high - p.low
    t2 = q.concentration.lgamma() - q.concentration * q.rate.log()
    t3 = (1 - q.concentration) * (_x_log_x(p.high) - _x_log_x(p.low) - width) / width
    t4 = q.rate * (p.high + p.low) / 2
    return _set(p.low < 0.0, -width.log() + t2 + t3 + t4, math.inf)


@register_kl(fam.Uniform, more.Gumbel)
def _kl_uniform_gumbel(p, q):
    common_term = q.scale / (p.high - p.low)
    high_loc_diff = (p.high - q.loc) / q.scale
    low_loc_diff = (p.low - q.loc) / q.scale
    t1 = common_term.log() + 0.5 * (high_loc_diff + low_loc_diff)
    t2 = common_term * ((-high_loc_diff).exp() - (-low_loc_diff).exp())
    return t1 - t2


@register_kl(fam.Uniform, fam.Normal)
def _kl_uniform_normal(p, q):
    width = p.high - p.low
    t1 = (math.sqrt(math.pi * 2) * q.scale / width).log()
    t2 = width.pow(2) / 12
    t3 = ((p.high + p.low - 2 * q.loc) / 2).pow(2)
    return t1 + 0.5 * (t2 + t3) / q.scale.pow(2)


@register_kl(fam.Uniform, Pareto)
def _kl_uniform_pareto(p, q):
    width = p.high - p.low
    t1 = (q.alpha * q.scale.pow(q.alpha) * width).log()
    t2 = (_x_log_x(p.high) - _x_log_x(p.low) - width) / width
    return _set(p.low < q.support.lower_bound, t2 * (q.alpha + 1) - t1, math.inf)

