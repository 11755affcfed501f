"""tessel.optim.ASGD: torch's averaged SGD as a Python Optimizer subclass. Each step decays the parameter by
1 − λ·η, steps by −η·grad (plus weight decay), updates the running average ax (from step t0 on, an equal
average; before it ax follows the parameter), then sets η = lr / (1 + λ·lr·step)^α and
μ = 1 / max(1, step − t0); η and μ are kept as scalars of torch's step dtype (float32, float64 under
set_default_dtype(float64)), as torch keeps them, so the steps equal torch's."""
import numpy as np

from .. import _C
from . import Optimizer, _check_lr, _scalar_dtype, _unsupported


class ASGD(Optimizer):
    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0, foreach=None,
                 maximize=False, differentiable=False, capturable=False):
        _check_lr(lr)
        _unsupported("ASGD", capturable=capturable, differentiable=differentiable)
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: %s" % lr)
        if not 0.0 <= weight_decay:
            raise ValueError("Invalid weight_decay value: %s" % weight_decay)
        super().__init__(params, dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
                                      foreach=foreach, maximize=maximize, differentiable=False, capturable=False))

    def step(self, closure=None):
        from .._tensor import zeros_like
        loss = self._closure_loss(closure)
        with _C._GradMode(False):
            for group, p, grad in self._gradients():
                lr, lambd, alpha, t0 = group["lr"], group["lambd"], group["alpha"], group["t0"]
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = _C._full([], 0.0, _scalar_dtype())
                    state["eta"] = _C._full([], float(lr), _scalar_dtype())
                    state["mu"] = _C._full([], 1.0, _scalar_dtype())
                    state["ax"] = zeros_like(p)
                state["step"].add_(1)
                if group["weight_decay"] != 0:
                    grad = grad + p * group["weight_decay"]
                eta = float(state["eta"].item())
                p.mul_(1 - lambd * eta)
                p.add_(grad, alpha=-eta)
                mu = float(state["mu"].item())
                if mu != 1:
                    state["ax"].add_((p - state["ax"]) * mu)
                else:
                    state["ax"].copy_(p)
                step = float(state["step"].item())
                rounded = np.float32 if state["eta"].dtype == _C.dtype.float32 else float
                state["eta"].fill_(float(rounded(lr / ((1 + lambd * lr * step) ** alpha))))
                state["mu"].fill_(float(rounded(1 / max(1, step - t0))))
        return loss
