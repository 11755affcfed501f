"""tessel.optim.LBFGS: torch's L-BFGS (minFunc's algorithm as torch.optim.LBFGS runs it) as a Python Optimizer
subclass: step(closure) runs up to max_iter iterations (max_eval closure calls), each taking the two-loop
recursion's direction over the last history_size curvature pairs (s, y) with ys > 1e-10, the initial Hessian
scaled by yᵀs / yᵀy, and either a fixed step (lr; the first iteration min(1, 1/|g|₁)·lr) or a strong-Wolfe line
search (line_search_fn="strong_wolfe": cubic interpolation, c1 1e-4, c2 0.9, as torch's). It stops on
tolerance_grad (max |g|), tolerance_change (the step or the loss change) or the evaluation budget, and keeps its
state (direction, step, history) across step() calls as torch does, in self.state of the first parameter.

The vectors (the gradient, the direction, the history) are torch's: one flat tensor over every parameter's
elements, so each dot product accumulates over the whole vector in the parameters' dtype, and the state holds
torch's layout (flat d, prev_flat_grad, old_dirs, old_stps; 0-d tensors H_diag, ro and al). With fully_shard
parameters they stay per parameter instead (_PerParam): the history is sharded like the parameters, every dot
sums the per-parameter ones (reduced across ranks), and a sharded run follows one rank's, provided the closure
returns the same loss on every rank (all-reduce it: the line search branches on it, and ranks that branch apart
raise a collective mismatch). Scalars (ρ, the initial scaling, the dots) are rounded to the parameters' dtype
(float32 unless they are float64) as torch's 0-d tensors hold them, so the iterates match torch's to that
rounding (and to the order in which the dots add up).

    opt = tessel.optim.LBFGS(model.parameters(), lr=1, line_search_fn="strong_wolfe")
    def closure():
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        return loss
    opt.step(closure)
"""
import builtins

import numpy as np

from .. import _C
from . import Optimizer, _check_lr


def _f32(x):
    return float(np.float32(x))


def _dot(a, b, rounded=_f32):
    return rounded(builtins.sum(float((x * y).sum().item()) for x, y in zip(a, b)))


def _abs_max(a):
    return builtins.max(float(x.abs().max().item()) if x.numel() else 0.0 for x in a)


def _number(x):
    """A scalar of the state as a float (torch's checkpoints hold 0-d tensors where this one holds floats)."""
    return float(x.item()) if isinstance(x, _C.Tensor) else x


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None):
    """The minimizer of the cubic through (x1, f1, g1) and (x2, f2, g2), clamped to bounds (default: between the
    points); the bounds' midpoint where the cubic has none."""
    lo, hi = bounds if bounds is not None else ((x1, x2) if x1 <= x2 else (x2, x1))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 * d1 - g1 * g2
    if d2_square < 0:
        return (lo + hi) / 2.0
    d2 = d2_square ** 0.5
    if x1 <= x2:
        at = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        at = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return builtins.min(builtins.max(at, lo), hi)


def _strong_wolfe(evaluate, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9, max_ls=25, rounded=_f32):
    """A step t along d satisfying the strong Wolfe conditions (bracketing, then zooming by cubic interpolation);
    evaluate(t) gives (loss, gradient list) at x + t·d. Returns (loss, gradient, t, evaluations)."""
    d_norm = _abs_max(d)
    f_new, g_new = evaluate(t)
    evals, ls_iter = 1, 0
    gtd_new = _dot(g_new, d, rounded)
    t_prev, f_prev, g_prev, gtd_prev = 0.0, f, g, gtd
    done = False
    while ls_iter < max_ls:
        if f_new > f + c1 * t * gtd or (ls_iter > 1 and f_new >= f_prev):
            bracket, bf, bg, bgtd = [t_prev, t], [f_prev, f_new], [g_prev, g_new], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bf, bg, bgtd = [t], [f_new], [g_new], [gtd_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bf, bg, bgtd = [t_prev, t], [f_prev, f_new], [g_prev, g_new], [gtd_prev, gtd_new]
            break
        step_lo, step_hi = t + 0.01 * (t - t_prev), t * 10
        t_prev, t = t, _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds=(step_lo, step_hi))
        f_prev, g_prev, gtd_prev = f_new, g_new, gtd_new
        f_new, g_new = evaluate(t)
        evals += 1
        gtd_new = _dot(g_new, d, rounded)
        ls_iter += 1
    if ls_iter == max_ls:
        bracket, bf, bg, bgtd = [0.0, t], [f, f_new], [g, g_new], [gtd, gtd_new]
    insufficient = False
    low, high = (0, 1) if bf[0] <= bf[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(bracket[0], bf[0], bgtd[0], bracket[1], bf[1], bgtd[1])
        top, bottom = builtins.max(bracket), builtins.min(bracket)
        eps = 0.1 * (top - bottom)
        if builtins.min(top - t, t - bottom) < eps:  # too close to an end: move it in, unless that stalled
            if insufficient or t >= top or t <= bottom:
                t = top - eps if abs(t - top) < abs(t - bottom) else bottom + eps
                insufficient = False
            else:
                insufficient = True
        else:
            insufficient = False
        f_new, g_new = evaluate(t)
        evals += 1
        gtd_new = _dot(g_new, d, rounded)
        ls_iter += 1
        if f_new > f + c1 * t * gtd or f_new >= bf[low]:
            bracket[high], bf[high], bg[high], bgtd[high] = t, f_new, g_new, gtd_new
            low, high = (0, 1) if bf[0] <= bf[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high] - bracket[low]) >= 0:
                bracket[high], bf[high], bg[high], bgtd[high] = bracket[low], bf[low], bg[low], bgtd[low]
            bracket[low], bf[low], bg[low], bgtd[low] = t, f_new, g_new, gtd_new
    return bf[low], bg[low], bracket[low], evals


class _PerParam:
    """Vectors as one tensor per parameter (fully_shard parameters: each a DTensor shard)."""

    def __init__(self, params):
        self.params = params

    def gradient(self, grads):
        return grads

    def add(self, step, direction):
        for p, d in zip(self.params, direction):
            p.add_(d, alpha=step)

    def load(self, x):
        """A state vector as this layout keeps it: a per-parameter list as it is; torch's flat tensor refused (it
        would need the full parameters)."""
        if not isinstance(x, _C.Tensor):
            return x
        raise ValueError("LBFGS: a loaded state vector of shape %s is torch's flat layout, which sharded parameters "
                         "cannot take (they keep tessel's per-parameter lists)" % (tuple(x.shape),))

    def store(self, v):
        return v

    def scalar(self, x):
        return x


class _Flat:
    """Vectors as torch keeps them: one flat tensor over every parameter's elements, in order (a one-element list,
    so the loop's per-item arithmetic is the same for both layouts)."""

    def __init__(self, params):
        self.params = params
        self.sizes = [p.numel() for p in params]
        self.dtype = params[0].dtype

    def gradient(self, grads):
        from .. import cat
        return [cat([g.reshape(-1) for g in grads])]

    def add(self, step, direction):
        at = 0
        for p, n in zip(self.params, self.sizes):
            p.add_(direction[0][at:at + n].view(tuple(p.shape)), alpha=step)
            at += n

    def load(self, x):
        """A state vector (torch's flat tensor, or a per-parameter list tessel kept before) in this layout."""
        if x is None:
            return None
        if not isinstance(x, _C.Tensor):
            from .. import cat
            x = cat([v.reshape(-1) for v in x])
        if x.dim() != 1 or x.numel() != builtins.sum(self.sizes):
            raise ValueError("LBFGS: a loaded state vector of shape %s is not one flat vector over this optimizer's "
                             "%d parameter elements" % (tuple(x.shape), builtins.sum(self.sizes)))
        return [x.to(self.dtype)]

    def store(self, v):
        return v[0]

    def scalar(self, x):
        """torch's 0-d tensor of the vectors' dtype (ρ, H_diag, α)."""
        return _C._full([], x, self.dtype)


class LBFGS(Optimizer):
    def __init__(self, params, lr=1, max_iter=20, max_eval=None, tolerance_grad=1e-7, tolerance_change=1e-9,
                 history_size=100, line_search_fn=None, *, maximize=False):
        _check_lr(lr)
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: %s" % lr)
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        super().__init__(params, dict(lr=lr, max_iter=max_iter, max_eval=max_eval, tolerance_grad=tolerance_grad,
                                      tolerance_change=tolerance_change, history_size=history_size,
                                      line_search_fn=line_search_fn, maximize=maximize))
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]

    def add_param_group(self, param_group):
        if getattr(self, "_params", None) is not None:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        super().add_param_group(param_group)

    def _gradient(self, space):
        """The gradient in the space's layout (zeros where a parameter has none), negated to maximize."""
        from .._tensor import zeros_like
        out = [p.grad.clone() if p.grad is not None else zeros_like(p) for p in self._params]
        return space.gradient([-g for g in out] if self.param_groups[0]["maximize"] else out)

    def step(self, closure):
        if closure is None:
            raise RuntimeError("LBFGS.step requires a closure that reevaluates the model and returns the loss")
        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        history_size, line_search_fn, sign = group["history_size"], group["line_search_fn"], \
            (-1.0 if group["maximize"] else 1.0)
        if line_search_fn not in (None, "strong_wolfe"):
            raise RuntimeError("only 'strong_wolfe' is supported")

        def evaluate_loss():
            with _C._GradMode(True):
                return closure()

        def value_of(loss):  # read outside grad mode, as torch's no_grad step reads it (no requires-grad warning)
            with _C._GradMode(False):
                return float(loss)

        # scalars rounded as torch's 0-d tensors of the parameters' dtype hold them
        rnd = float if builtins.all(p.dtype == _C.dtype.float64 for p in self._params) else _f32
        space = _PerParam(self._params) if builtins.any(p.is_distributed for p in self._params) \
            else _Flat(self._params)
        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        orig_loss = evaluate_loss()
        loss = sign * value_of(orig_loss)
        evals = 1
        state["func_evals"] += 1
        with _C._GradMode(False):
            g = self._gradient(space)
            if _abs_max(g) <= tolerance_grad:
                return orig_loss
            d, t = space.load(state.get("d")), _number(state.get("t"))
            old_dirs = None if state.get("old_dirs") is None else [space.load(v) for v in state["old_dirs"]]
            old_stps = None if state.get("old_stps") is None else [space.load(v) for v in state["old_stps"]]
            ro = None if state.get("ro") is None else [_number(v) for v in state["ro"]]
            h_diag, prev_loss = _number(state.get("H_diag")), _number(state.get("prev_loss"))
            prev_g = space.load(state.get("prev_flat_grad"))
            al = None if state.get("al") is None else [_number(v) for v in state["al"]]
            n_iter = 0
            while n_iter < max_iter:
                n_iter += 1
                state["n_iter"] += 1
                if state["n_iter"] == 1:
                    d = [-x for x in g]
                    old_dirs, old_stps, ro, h_diag = [], [], [], 1  # (torch's H_diag: the int 1 until a pair)
                else:
                    y = [a - b for a, b in zip(g, prev_g)]
                    s = [x * t for x in d]
                    ys = _dot(y, s, rnd)
                    if ys > 1e-10:  # a curvature pair only where it keeps the update positive definite
                        if len(old_dirs) == history_size:
                            old_dirs.pop(0), old_stps.pop(0), ro.pop(0)
                        old_dirs.append(y)
                        old_stps.append(s)
                        ro.append(rnd(1.0 / ys))
                        h_diag = rnd(ys / _dot(y, y, rnd))
                    if al is None:  # torch's α: one slot per history entry, kept across iterations and steps
                        al = [None] * history_size
                    q = [-x for x in g]
                    for i in range(len(old_dirs) - 1, -1, -1):
                        al[i] = rnd(_dot(old_stps[i], q, rnd) * ro[i])
                        q = [a.add(b, alpha=-al[i]) for a, b in zip(q, old_dirs[i])]  # (one rounding, as torch's)
                    r = [x * h_diag for x in q]
                    for i in range(len(old_dirs)):
                        be = rnd(_dot(old_dirs[i], r, rnd) * ro[i])
                        r = [a.add(b, alpha=rnd(al[i] - be)) for a, b in zip(r, old_stps[i])]
                    d = r
                prev_g, prev_loss = [x.clone() for x in g], loss
                if state["n_iter"] == 1:  # torch's first step: min(1, 1/|g|₁)·lr, a 0-d tensor when 1/|g|₁ < 1
                    inverse = rnd(1.0 / builtins.sum(float(x.abs().sum().item()) for x in g))
                    t = rnd(inverse * lr) if inverse < 1.0 else lr
                else:
                    t = lr
                gtd = _dot(g, d, rnd)
                if gtd > -tolerance_change:  # not a descent direction
                    break
                step_evals = 0
                if line_search_fn is not None:
                    start = [p.clone() for p in self._params]

                    def at(step):
                        space.add(step, d)
                        value = sign * value_of(evaluate_loss())
                        grad = self._gradient(space)
                        for p, x in zip(self._params, start):
                            p.copy_(x)
                        return value, grad
                    loss, g, t, step_evals = _strong_wolfe(at, t, d, loss, g, gtd, max_ls=max_eval - evals,
                                                          rounded=rnd)
                    space.add(t, d)
                    done = _abs_max(g) <= tolerance_grad
                else:
                    space.add(t, d)
                    done = False
                    if n_iter != max_iter:
                        loss = sign * value_of(evaluate_loss())
                        g = self._gradient(space)
                        done = _abs_max(g) <= tolerance_grad
                        step_evals = 1
                evals += step_evals
                state["func_evals"] += step_evals
                if n_iter == max_iter or evals >= max_eval or done:
                    break
                if _abs_max([x * t for x in d]) <= tolerance_change or abs(loss - prev_loss) < tolerance_change:
                    break
            if al is not None:
                state["al"] = [None if v is None else space.scalar(v) for v in al]
            state.update(d=space.store(d), t=t, old_dirs=[space.store(v) for v in old_dirs],
                         old_stps=[space.store(v) for v in old_stps], ro=[space.scalar(v) for v in ro],
                         H_diag=space.scalar(h_diag) if isinstance(h_diag, float) else h_diag,
                         prev_flat_grad=space.store(prev_g), prev_loss=prev_loss)
        return orig_loss
