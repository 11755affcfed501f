"""tessel.optim.Adafactor: torch's Adafactor (Shazeer & Stern 2018 as torch 2.5+ writes it) as a Python Optimizer
subclass. A parameter of two or more dims keeps its second moment factored over the last two dims: a row
variance [..., R, 1] and a column variance [..., 1, C] (the state ledger's saving: R + C numbers per matrix
instead of R·C), each an exponential average with decay 1 - t^beta2_decay of the squared gradient's row / column
means; the estimate is their outer product over the rows' mean. Vectors keep the full variance. The step is
grad / sqrt(max(estimate, eps1²)), clipped to RMS d, scaled by max(eps2, RMS(param)) · min(lr, 1/sqrt(t));
weight decay multiplies the parameter by 1 - lr·weight_decay first. eps1=None is the dtype's machine epsilon.

On fully_shard parameters every op is a DTensor op: the row and column means and the parameter's and update's
norms reduce across the shards, so a sharded run equals one rank's.

    opt = tessel.optim.Adafactor(model.parameters(), lr=1e-2)
"""
import builtins
import math

from .. import _C
from .._dtypes import finfo
from . import Optimizer, _check_lr, _scalar_dtype


def _factor_zeros(grad, dim):
    """Zeros shaped as grad with `dim` reduced to 1; for a DTensor gradient, sharded as the gradient except along
    `dim` (replicated there: a factor is small, and the other factor's mean reduces across that dim's shards)."""
    shape = list(grad.shape)
    shape[dim] = 1
    zeros = _C._full(shape, 0.0, grad.dtype)
    if not grad.is_distributed:
        return zeros
    reduced = dim % grad.dim()
    splits = (_C.Shard, _C._StridedShard)
    placements = [_C.Replicate() if isinstance(pl, splits) and pl.dim % grad.dim() == reduced else pl
                  for pl in grad.placements]
    return _C.distribute_tensor(zeros, grad.device_mesh, placements, None)


class Adafactor(Optimizer):
    def __init__(self, params, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.0, *,
                 foreach=None, maximize=False):
        _check_lr(lr)
        if not 0.0 <= lr:
            raise ValueError("Learning rate should be >= 0 but is: %s" % lr)
        if not 0.0 >= beta2_decay:
            raise ValueError("beta2_decay should be <= 0 but is: %s" % beta2_decay)
        if eps[0] is not None and not 0.0 <= eps[0]:
            raise ValueError("epsilon1 should be >= 0 but is: %s" % eps[0])
        if not 0.0 <= eps[1]:
            raise ValueError("epsilon2 should be >= 0 but is: %s" % eps[1])
        if not 1.0 <= d:
            raise ValueError("Clipping threshold d should be >= 1 but is: %s" % d)
        if not 0.0 <= weight_decay:
            raise ValueError("weight_decay should be >= 0 but is: %s" % weight_decay)
        super().__init__(params, dict(lr=lr, beta2_decay=beta2_decay, eps=tuple(eps), d=d,
                                      weight_decay=weight_decay, foreach=foreach, maximize=maximize))

    def _init_state(self, p, grad):
        from .._tensor import zeros_like
        state = self.state[p]
        state["step"] = _C._full([], 0.0, _scalar_dtype())
        if grad.dim() > 1:
            state["row_var"] = _factor_zeros(grad, -1)  # [..., R, 1]
            state["col_var"] = _factor_zeros(grad, -2)  # [..., 1, C]
        else:
            state["variance"] = zeros_like(grad)
        return state

    def step(self, closure=None):
        loss = self._closure_loss(closure)
        with _C._GradMode(False):
            eps1_of_group = {}
            for group, p, grad in self._gradients():
                state = self.state[p]
                if len(state) == 0:
                    state = self._init_state(p, grad)
                lr, (eps1, eps2), d = group["lr"], group["eps"], group["d"]
                # torch fixes eps1 from the group's first parameter with a gradient
                eps1 = eps1_of_group.setdefault(id(group), eps1 if eps1 is not None else finfo(p.dtype).eps)
                state["step"].add_(1)
                t = float(state["step"].item())
                decay = t ** group["beta2_decay"]  # 1 - beta2_t
                rho = builtins.min(lr, 1 / math.sqrt(t))
                alpha = builtins.max(eps2, float(p.norm(2).item()) / math.sqrt(p.numel())) * rho
                if group["weight_decay"] != 0:
                    p.mul_(1 - lr * group["weight_decay"])
                if grad.dim() > 1:
                    square = grad * grad
                    state["row_var"].lerp_(square.mean(-1, True), decay)
                    state["col_var"].lerp_(square.mean(-2, True), decay)
                    row_var, col_var = state["row_var"], state["col_var"]
                    estimate = row_var * col_var / row_var.mean(-2, True).clamp(min=eps1)
                else:
                    state["variance"].lerp_(grad * grad, decay)
                    estimate = state["variance"]
                update = estimate.clamp(min=eps1 * eps1).rsqrt() * grad
                denom = builtins.max(1.0, float(update.norm(2).item()) / (math.sqrt(update.numel()) * d))
                p.add_(update, alpha=-alpha / denom)
        return loss
