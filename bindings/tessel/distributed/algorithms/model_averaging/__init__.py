"""tessel.distributed.algorithms.model_averaging: torch's periodic and hierarchical model averaging for local SGD
(averagers, hierarchical_model_averager, utils); used with tessel.distributed.optim.PostLocalSGDOptimizer and
the post_localSGD DDP hook."""
from . import averagers, hierarchical_model_averager, utils  # noqa: F401
