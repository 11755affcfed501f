"""tessel.distributed.algorithms.model_averaging: torch's periodic model averaging for local SGD (averagers,
utils); used with tessel.distributed.optim.PostLocalSGDOptimizer and the post_localSGD DDP hook."""
from . import averagers, utils  # noqa: F401
