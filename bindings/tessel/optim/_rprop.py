"""tessel.optim.Rprop: torch's resilient backpropagation as a Python Optimizer subclass. Each element keeps its own
step size: multiplied by etaplus where the gradient kept its sign, by etaminus where it flipped (and that element
then takes no step and forgets its gradient), clamped to step_sizes; the parameter moves by -sign(grad)·step."""
from .. import _C
from . import Optimizer, _check_lr, _scalar_dtype, _unsupported


class Rprop(Optimizer):
    def __init__(self, params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *, capturable=False, foreach=None,
                 maximize=False, differentiable=False):
        _check_lr(lr)
        _unsupported("Rprop", capturable=capturable, differentiable=differentiable)
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: %s" % lr)
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError("Invalid eta values: %s, %s" % (etas[0], etas[1]))
        super().__init__(params, dict(lr=lr, etas=tuple(etas), step_sizes=tuple(step_sizes), foreach=foreach,
                                      maximize=maximize, differentiable=False, capturable=False))

    def step(self, closure=None):
        from .._tensor import full_like, zeros_like
        loss = self._closure_loss(closure)
        where = _C._functional.where
        with _C._GradMode(False):
            for group, p, grad in self._gradients():
                (etaminus, etaplus), (lo, hi) = group["etas"], group["step_sizes"]
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = _C._full([], 0.0, _scalar_dtype())
                    state["prev"] = zeros_like(p)
                    state["step_size"] = full_like(grad, group["lr"])
                state["step"].add_(1)
                sign = (grad * state["prev"]).sign()
                factor = where(sign > 0, _C._full([], etaplus, sign.dtype),
                               where(sign < 0, _C._full([], etaminus, sign.dtype), sign * 0 + 1))
                state["step_size"].mul_(factor).clamp_(lo, hi)
                grad = where(sign < 0, grad * 0, grad)  # a flipped sign: no step, and no memory of it
                p.addcmul_(grad.sign(), state["step_size"], value=-1)
                state["prev"].copy_(grad)
        return loss
