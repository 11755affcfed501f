"""torch.distributions for tessel: Normal, LogNormal, Uniform, Exponential, Laplace, MultivariateNormal,
LowRankMultivariateNormal, Cauchy, HalfNormal, HalfCauchy, Gumbel, Weibull, Pareto, Kumaraswamy, LogisticNormal,
RelaxedBernoulli, RelaxedOneHotCategorical, ContinuousBernoulli, FisherSnedecor, InverseGamma, Wishart (with
rsample), Gamma, Chi2, Beta, Dirichlet, StudentT (their rsample differentiable in the concentrations, see
_more_families.py), VonMises, LKJCholesky, Bernoulli, Categorical, OneHotCategorical, Poisson, Binomial,
Multinomial, NegativeBinomial, Geometric, MixtureSameFamily, Independent, TransformedDistribution with transforms
(Exp, Affine, Sigmoid, Tanh, Power, Abs, StickBreaking, Compose), kl_divergence / register_kl (torch's registry of
pairs) and constraints. Every family has torch's expand.

    from tessel.distributions import Normal, Categorical, kl_divergence
    pi = Categorical(logits=policy(obs)); a = pi.sample(); loss = -(pi.log_prob(a) * adv).mean()
"""
from . import constraints, kl  # noqa: F401
from ._families import (  # noqa: F401
    Bernoulli,
    Categorical,
    Exponential,
    Laplace,
    LogNormal,
    Normal,
    OneHotCategorical,
    Uniform,
)
from ._more_families import (  # noqa: F401
    Beta,
    Binomial,
    Cauchy,
    Chi2,
    Dirichlet,
    Gamma,
    Geometric,
    Gumbel,
    HalfCauchy,
    HalfNormal,
    MultivariateNormal,
    Poisson,
    StudentT,
)
from ._count_families import MixtureSameFamily, Multinomial, NegativeBinomial  # noqa: F401
from ._matrix_families import LKJCholesky, Wishart  # noqa: F401
from ._shaped_families import ContinuousBernoulli, FisherSnedecor, LowRankMultivariateNormal, VonMises  # noqa: F401
from ._transformed_families import (  # noqa: F401
    ExpRelaxedCategorical,
    InverseGamma,
    Kumaraswamy,
    LogisticNormal,
    LogitRelaxedBernoulli,
    Pareto,
    RelaxedBernoulli,
    RelaxedOneHotCategorical,
    Weibull,
)
from .distribution import Distribution, Independent, broadcast_all  # noqa: F401
from . import transforms  # noqa: F401
from .transforms import (  # noqa: F401
    AbsTransform, AffineTransform, ComposeTransform, ExpTransform, PowerTransform, SigmoidTransform,
    StickBreakingTransform, TanhTransform, Transform, TransformedDistribution)
from .kl import kl_divergence, register_kl  # noqa: F401

__all__ = [
    "AbsTransform", "AffineTransform", "Bernoulli", "Beta", "Binomial", "Categorical", "Cauchy", "Chi2",
    "ComposeTransform", "ContinuousBernoulli", "Dirichlet", "Distribution", "ExpRelaxedCategorical", "ExpTransform",
    "Exponential", "FisherSnedecor", "Gamma", "Geometric", "Gumbel", "HalfCauchy", "HalfNormal", "Independent",
    "InverseGamma", "Kumaraswamy", "LKJCholesky", "Laplace", "LogNormal", "LogisticNormal", "LogitRelaxedBernoulli",
    "LowRankMultivariateNormal", "MixtureSameFamily", "Multinomial", "MultivariateNormal", "NegativeBinomial",
    "Normal", "OneHotCategorical", "Pareto", "Poisson", "PowerTransform", "RelaxedBernoulli",
    "RelaxedOneHotCategorical", "SigmoidTransform", "StickBreakingTransform", "StudentT", "TanhTransform", "Transform",
    "TransformedDistribution", "Uniform", "VonMises", "Weibull", "Wishart", "broadcast_all", "constraints", "kl",
    "kl_divergence", "register_kl", "transforms",
]
