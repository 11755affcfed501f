"""tessel.optim.Muon: torch 2.15's Muon (momentum orthogonalized by a quintic Newton–Schulz iteration, for 2-D
parameters), written as a Python Optimizer subclass (tessel.optim's base keeps param_groups, state, state dicts and
checkpoints). The semantics are torch's: the momentum buffer is an exponential average (buf ← lerp(buf, g, 1 − μ));
Nesterov takes lerp(g, buf, μ); the Newton–Schulz iteration runs in bfloat16 on the matrix normalized to norm 1
(transposed when it has more rows than columns); weight decay is decoupled and the step scaled by adjust_lr_fn
("original": √max(1, A/B), "match_rms_adamw": 0.2·√max(A, B), "spectral_unclamped": √(A/B)). On fully_shard
parameters every op is a DTensor op, so the iteration sees the whole matrix.

    opt = tessel.optim.Muon([p for p in model.parameters() if p.ndim == 2], lr=0.02)
"""
import math

from .. import _C
from . import Optimizer, _check_lr

_A, _B, _C_COEF = 3.4445, -4.7750, 2.0315
_ADJUSTMENTS = (None, "original", "match_rms_adamw", "spectral_unclamped")


def _newton_schulz(g, coefficients, steps, eps):
    """≈ U Vᵀ for G = U S Vᵀ (singular values pushed towards 1 by `steps` quintic iterations, in bfloat16)."""
    if steps >= 100:
        raise ValueError("Number of steps must be less than 100 for computational efficiency")
    if g.ndim != 2:
        raise ValueError("Input tensor gradient must be a 2D matrix")
    if len(coefficients) != 3:
        raise ValueError("Coefficients must be a tuple of exactly 3 values")
    a, b, c = coefficients
    x = g.to(_C.dtype.bfloat16)
    tall = g.shape[0] > g.shape[1]
    if tall:
        x = x.t()
    x = x / x.norm().clamp(min=eps)
    bf16, f32 = _C.dtype.bfloat16, _C.dtype.float32
    for _ in range(steps):
        # torch's bfloat16 addmm rounds once: beta·M + alpha·(A @ B) is formed in float32 from bfloat16 inputs
        gram = (x @ x.t()).to(f32)
        update = (gram * b + (gram @ gram) * c).to(bf16).to(f32)
        x = (x.to(f32) * a + update @ x.to(f32)).to(bf16)
    return x.t() if tall else x


def _adjusted_lr(lr, adjust_lr_fn, shape):
    rows, cols = shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        return lr * math.sqrt(max(1, rows / cols))
    if adjust_lr_fn == "match_rms_adamw":
        return lr * 0.2 * math.sqrt(max(rows, cols))
    return lr * math.sqrt(rows / cols)  # "spectral_unclamped"


class Muon(Optimizer):
    def __init__(self, params, lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True,
                 ns_coefficients=(_A, _B, _C_COEF), eps=1e-7, ns_steps=5, adjust_lr_fn=None):
        _check_lr(lr)
        if not 0.0 <= lr:
            raise ValueError("Learning rate should be >= 0 but is: %s" % lr)
        if not 0.0 <= momentum:
            raise ValueError("momentum should be >= 0 but is: %s" % momentum)
        if not 0.0 <= weight_decay:
            raise ValueError("weight decay should be >= 0 but is: %s" % weight_decay)
        if adjust_lr_fn not in _ADJUSTMENTS:
            raise ValueError("Adjust learning rate function %s is not supported" % adjust_lr_fn)
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov,
                                      ns_coefficients=tuple(ns_coefficients), eps=eps, ns_steps=ns_steps,
                                      adjust_lr_fn=adjust_lr_fn))
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim != 2:
                    raise ValueError("Muon only supports 2D parameters whereas we found a parameter with size: %s"
                                     % (tuple(p.shape),))

    def step(self, closure=None):
        from .._tensor import zeros_like
        loss = self._closure_loss(closure)
        with _C._GradMode(False):
            for group, p, g in self._gradients():
                lr, momentum = group["lr"], group["momentum"]
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = zeros_like(g)
                buf = state["momentum_buffer"]
                buf.lerp_(g, 1 - momentum)
                update = g.lerp(buf, momentum) if group["nesterov"] else buf
                update = _newton_schulz(update, group["ns_coefficients"], group["ns_steps"], group["eps"])
                p.mul_(1 - lr * group["weight_decay"])
                p.add_(update.to(p.dtype), alpha=-_adjusted_lr(lr, group["adjust_lr_fn"], p.shape))
        return loss
