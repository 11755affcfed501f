"""torch.distributions for tessel: Normal, LogNormal, Uniform, Exponential, Laplace, MultivariateNormal,
Cauchy, HalfNormal, HalfCauchy, Gumbel (with rsample), Gamma, Chi2, Beta, Dirichlet, StudentT (sample; their
rsample raises, see _more_families.py), Bernoulli, Categorical, OneHotCategorical, Poisson, Binomial,
Geometric, Independent, TransformedDistribution with transforms (Exp, Affine, Sigmoid, Tanh, Power, Abs,
Compose), kl_divergence / register_kl and constraints.

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
from .distribution import Distribution, Independent, broadcast_all  # noqa: F401
from . import transforms  # noqa: F401
from .transforms import (  # noqa: F401
    AbsTransform, AffineTransform, ComposeTransform, ExpTransform, PowerTransform, SigmoidTransform, TanhTransform,
    Transform, TransformedDistribution)
from .kl import kl_divergence, register_kl  # noqa: F401
