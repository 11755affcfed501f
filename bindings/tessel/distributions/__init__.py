"""torch.distributions for tessel: Normal, LogNormal, Uniform, Exponential, Laplace (with rsample),
Bernoulli, Categorical, OneHotCategorical, Independent, kl_divergence / register_kl and constraints.

    from tessel.distributions import Normal, Categorical, kl_divergence
    pi = Categorical(logits=policy(obs)); a = pi.sample(); loss = -(pi.log_prob(a) * adv).mean()

Not provided yet: Beta, Gamma, Dirichlet, MultivariateNormal, Poisson, Binomial and transforms
(TransformedDistribution); constructing them raises AttributeError on the module.
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
from .distribution import Distribution, Independent, broadcast_all  # noqa: F401
from .kl import kl_divergence, register_kl  # noqa: F401
