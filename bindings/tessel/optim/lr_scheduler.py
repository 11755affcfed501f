"""tessel.optim.lr_scheduler: torch's schedulers — LambdaLR, MultiplicativeLR, StepLR, MultiStepLR,
ExponentialLR, CosineAnnealingLR, LinearLR, ConstantLR, SequentialLR, ChainedScheduler, PolynomialLR,
CosineAnnealingWarmRestarts, OneCycleLR and CyclicLR (both cycling momentum or beta1 as torch does),
ReduceLROnPlateau — with torch's
chainable updates (each step() scales the group's current lr, so schedulers stacked on one optimizer
compose, and a hand-set lr is carried on) and closed forms for step(epoch) and SequentialLR's milestones;
and warmup_cosine, a LambdaLR over core/optim's WarmupCosineSchedule (linear warmup from 0, then cosine
decay to min_lr_ratio × lr).

    sched = warmup_cosine(opt, warmup_steps=100, total_steps=1000, min_lr_ratio=0.1)
    for step in ...: ...; opt.step(); sched.step()
"""
import bisect
import collections
import math
import types

from .. import _C


def _snapshot(lr):
    """An lr as a schedule keeps it: a tensor lr copied (the group's own is filled in place by _set_lr)."""
    return lr.clone() if isinstance(lr, _C.Tensor) else lr


def _set_lr(group, value):
    """group["lr"] = value, as torch's schedulers set it: a tensor lr is filled in place (a reference to it sees
    the new value, rounded to its dtype), a number replaced."""
    lr = group["lr"]
    if isinstance(lr, _C.Tensor):
        lr.fill_(float(value.item()) if isinstance(value, _C.Tensor) else float(value))
    else:
        group["lr"] = value


def _track_step_called(optimizer):
    """Wraps optimizer.step to note that it ran (torch's check for scheduler.step() before the first
    optimizer.step(), which skips the schedule's first value)."""
    step = optimizer.step
    if getattr(step, "_wrapped_by_lr_sched", False):
        return

    def wrapper(*args, **kwargs):
        optimizer._opt_called = True
        return step(*args, **kwargs)
    wrapper._wrapped_by_lr_sched = True
    try:
        optimizer.step = wrapper
        optimizer._opt_called = False
    except AttributeError:  # an optimizer whose attributes are fixed: no check
        pass


class LRScheduler:
    def __init__(self, optimizer, last_epoch=-1):
        if not (hasattr(optimizer, "param_groups") and hasattr(optimizer, "step")):
            raise TypeError("%s is not an Optimizer" % type(optimizer).__name__)
        self.optimizer = optimizer
        if last_epoch == -1:
            for g in optimizer.param_groups:
                # a tensor lr is copied, as torch's: the schedule fills the group's lr in place (_set_lr)
                g.setdefault("initial_lr", _snapshot(g["lr"]))
        else:
            for i, g in enumerate(optimizer.param_groups):
                if "initial_lr" not in g:
                    raise KeyError("param 'initial_lr' is not specified in param_groups[%d] when resuming scheduler "
                                   "with last_epoch >= 0.\nThis typically happens when:\n1. You're trying to resume "
                                   "training from a checkpoint but haven't properly loaded the optimizer state\n2. "
                                   "You're using last_epoch >= 0 for a fresh training run (not recommended)" % i)
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        _track_step_called(optimizer)
        self._initial_step()

    def _initial_step(self):
        """The constructor's step: get_lr sees _is_initial and keeps the optimizer's lrs (a scheduler built with
        last_epoch=k over a resumed optimizer must not move them one step further, as torch's)."""
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self):
        raise NotImplementedError

    def _warn_outside_step(self):
        if not getattr(self, "_get_lr_called_within_step", True):
            import warnings
            warnings.warn("To get the last learning rate computed by the scheduler, please use `get_last_lr()`.",
                          UserWarning, stacklevel=3)

    def _lrs(self):  # a snapshot, as torch's
        return [_snapshot(g["lr"]) for g in self.optimizer.param_groups]

    def _set_lrs(self, values):
        """The schedule's values into the groups (_set_lr) and the snapshot get_last_lr() returns."""
        for group, lr in zip(self.optimizer.param_groups, values):
            _set_lr(group, lr)
        self._last_lr = self._lrs()

    def step(self, epoch=None):
        if self._step_count == 1:
            self._warn_step_order()
        if epoch is not None:
            _warn_epoch_deprecated()
        self._step_count += 1
        self._update_lr(epoch)

    def _warn_step_order(self):
        """torch's checks at the second scheduler step: optimizer.step replaced after the scheduler wrapped it
        (so the order can no longer be seen), or the optimizer not stepped yet (its first lr is skipped)."""
        import warnings
        called = getattr(self.optimizer, "_opt_called", None)  # (None: an optimizer the wrapper could not reach)
        if called is None:
            return
        if not getattr(self.optimizer.step, "_wrapped_by_lr_sched", False):
            warnings.warn("Seems like `optimizer.step()` has been overridden after learning rate scheduler "
                          "initialization. Please, make sure to call `optimizer.step()` before "
                          "`lr_scheduler.step()`. See more details at "
                          "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate", UserWarning,
                          stacklevel=3)
        elif not called:
            warnings.warn("Detected call of `lr_scheduler.step()` before `optimizer.step()`. In PyTorch 1.1.0 and "
                          "later, you should call them in the opposite order: `optimizer.step()` before "
                          "`lr_scheduler.step()`.  Failure to do this will result in PyTorch skipping the first "
                          "value of the learning rate schedule. See more details at "
                          "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate", UserWarning,
                          stacklevel=3)

    def _update_lr(self, epoch=None):
        """One schedule step without step()'s checks and count (SequentialLR restarts a scheduler with it)."""
        # torch's flag (saved in its state dicts): get_lr runs inside a step
        self._get_lr_called_within_step = True
        try:
            if epoch is None:
                self.last_epoch += 1
                values = self.get_lr()
            else:
                self.last_epoch = epoch
                values = self._get_closed_form_lr() if hasattr(self, "_get_closed_form_lr") else self.get_lr()
        finally:
            self._get_lr_called_within_step = False
        self._set_lrs(values)

    def get_last_lr(self):
        return list(self._last_lr)

    def state_dict(self):
        state = {k: v for k, v in self.__dict__.items() if k != "optimizer" and k != "lr_lambdas"}
        if "lr_lambdas" in self.__dict__:
            # torch's: None for a plain function, else the callable's own state (a partial's, an object's)
            state["lr_lambdas"] = [None if isinstance(fn, types.FunctionType) else fn.__dict__.copy()
                                   for fn in self.lr_lambdas]
        return state

    def load_state_dict(self, state_dict):
        state = dict(state_dict)
        lambdas = state.pop("lr_lambdas", None)
        self.__dict__.update(state)
        for fn, saved in zip(getattr(self, "lr_lambdas", []), lambdas or []):
            if saved is not None:
                fn.__dict__.update(saved)


def _lr_lambdas(optimizer, lr_lambda):
    """One lr_lambda per parameter group (one given for all, or a list of as many as there are groups)."""
    n = len(optimizer.param_groups)
    lambdas = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * n
    if len(lambdas) != n:
        raise ValueError("Expected %d lr_lambdas, but got %d" % (n, len(lambdas)))
    return lambdas


class LambdaLR(LRScheduler):
    """lr = initial lr × lr_lambda(step)."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        self.lr_lambdas = _lr_lambdas(optimizer, lr_lambda)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        self._warn_outside_step()
        return [base * fn(self.last_epoch) for base, fn in zip(self.base_lrs, self.lr_lambdas)]


class MultiplicativeLR(LRScheduler):
    """lr ×= lr_lambda(step) at every step after the first."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        self.lr_lambdas = _lr_lambdas(optimizer, lr_lambda)
        for fn in self.lr_lambdas:  # (torch checks here, not LambdaLR)
            if not callable(fn):
                raise TypeError("lr_lambda should be a function, but got %s" % type(fn).__name__)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        self._warn_outside_step()
        if not self._is_initial:
            return [lr * fn(self.last_epoch) for lr, fn in zip(self._lrs(), self.lr_lambdas)]
        return self._lrs()


class StepLR(LRScheduler):
    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        self._warn_outside_step()
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return self._lrs()
        return [lr * self.gamma for lr in self._lrs()]

    def _get_closed_form_lr(self):
        return [b * self.gamma ** (self.last_epoch // self.step_size) for b in self.base_lrs]


class MultiStepLR(LRScheduler):
    def __init__(self, optimizer, milestones, gamma=0.1, last_epoch=-1):
        self.milestones, self.gamma = collections.Counter(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        self._warn_outside_step()
        if self.last_epoch not in self.milestones:
            return self._lrs()
        return [lr * self.gamma ** self.milestones[self.last_epoch] for lr in self._lrs()]

    def _get_closed_form_lr(self):
        ms = sorted(self.milestones.elements())
        return [b * self.gamma ** bisect.bisect_right(ms, self.last_epoch) for b in self.base_lrs]


class ExponentialLR(LRScheduler):
    def __init__(self, optimizer, gamma, last_epoch=-1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        self._warn_outside_step()
        if self._is_initial:  # (a resumed optimizer's lr stays; last_epoch 0 is the initial step too)
            return self._lrs()
        return [lr * self.gamma for lr in self._lrs()]

    def _get_closed_form_lr(self):
        return [b * self.gamma ** self.last_epoch for b in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        self._warn_outside_step()
        e, t = self.last_epoch, self.T_max
        if self._is_initial:
            return self._lrs()
        if self._step_count == 1 and e > 0:
            return [self.eta_min + (b - self.eta_min) * (1 + math.cos(e * math.pi / t)) / 2 for b in self.base_lrs]
        if (e - 1 - t) % (2 * t) == 0:
            return [lr + (b - self.eta_min) * (1 - math.cos(math.pi / t)) / 2
                    for lr, b in zip(self._lrs(), self.base_lrs)]
        return [(1 + math.cos(math.pi * e / t)) / (1 + math.cos(math.pi * (e - 1) / t)) * (lr - self.eta_min)
                + self.eta_min for lr in self._lrs()]

    def _get_closed_form_lr(self):
        c = (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
        return [self.eta_min + (b - self.eta_min) * c for b in self.base_lrs]


class LinearLR(LRScheduler):
    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5, last_epoch=-1):
        if not 0 < start_factor <= 1:
            raise ValueError("Starting multiplicative factor expected to be greater than 0 and less or equal to 1.")
        if not 0 <= end_factor <= 1:
            raise ValueError("Ending multiplicative factor expected to be between 0 and 1.")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        self._warn_outside_step()
        if self.last_epoch == 0:
            return [lr * self.start_factor for lr in self._lrs()]
        if self._is_initial or self.last_epoch > self.total_iters:
            return self._lrs()
        s, e, n = self.start_factor, self.end_factor, self.total_iters
        return [lr * (1.0 + (e - s) / (n * s + (self.last_epoch - 1) * (e - s))) for lr in self._lrs()]

    def _get_closed_form_lr(self):
        f = self.start_factor + (self.end_factor - self.start_factor) * min(self.last_epoch, self.total_iters) \
            / self.total_iters
        return [b * f for b in self.base_lrs]


class ConstantLR(LRScheduler):
    def __init__(self, optimizer, factor=1.0 / 3, total_iters=5, last_epoch=-1):
        if not 0 <= factor <= 1:
            raise ValueError("Constant multiplicative factor expected to be between 0 and 1.")
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        self._warn_outside_step()
        if self.last_epoch == 0:
            return [lr * self.factor for lr in self._lrs()]
        if self.last_epoch != self.total_iters:
            return self._lrs()
        return [lr * (1.0 / self.factor) for lr in self._lrs()]

    def _get_closed_form_lr(self):
        return [b * (self.factor if self.last_epoch < self.total_iters else 1.0) for b in self.base_lrs]


class SequentialLR(LRScheduler):
    """Runs schedulers[i] from milestones[i - 1] on; at a milestone the next one restarts from its epoch 0
    (torch's SequentialLR)."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch=-1):
        if len(milestones) != len(schedulers) - 1:
            raise ValueError("Sequential Schedulers expects number of schedulers provided to be one more than the "
                             "number of milestone points, but got %d and %d" % (len(schedulers), len(milestones)))
        for i, s in enumerate(schedulers):  # torch's check: each scheduler steps this optimizer
            if isinstance(s, ReduceLROnPlateau):
                raise ValueError("SequentialLR does not support `ReduceLROnPlateau` scheduler as it requires "
                                 "additional kwargs to be specified when calling `step`, but got one at index %d in "
                                 "the given schedulers sequence." % i)
            if s.optimizer is not optimizer:
                raise ValueError("%s expects all schedulers to belong to the same optimizer, but got scheduler %s at "
                                 "index %d has %s, which is different from %s." % (
                                     type(self).__name__, type(s).__name__, i, s.optimizer, type(optimizer).__name__))
        self._schedulers, self._milestones = list(schedulers), list(milestones)
        self.optimizer = optimizer
        self.last_epoch = last_epoch + 1
        for g in optimizer.param_groups:  # back to the initial lrs; undo the schedulers' own first steps
            _set_lr(g, g["initial_lr"])
        for s in self._schedulers:
            s.last_epoch -= 1
        first = self._schedulers[0]
        first._initial_step()
        self._last_lr = first.get_last_lr()

    def step(self, epoch=None):
        self.last_epoch += 1
        i = bisect.bisect_right(self._milestones, self.last_epoch)
        sched = self._schedulers[i]
        if i > 0 and self._milestones[i - 1] == self.last_epoch:
            sched._update_lr(0)  # torch's restart: no step count, no epoch-argument warning
        else:
            sched.step()
        self._last_lr = sched.get_last_lr()

    def state_dict(self):
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict):
        state = dict(state_dict)
        for s, sd in zip(self._schedulers, state.pop("_schedulers")):
            s.load_state_dict(sd)
        self.__dict__.update(state)


class PolynomialLR(LRScheduler):
    def __init__(self, optimizer, total_iters=5, power=1.0, last_epoch=-1):
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        self._warn_outside_step()
        if self._is_initial or self.last_epoch > self.total_iters:
            return self._lrs()
        f = ((1.0 - self.last_epoch / self.total_iters) / (1.0 - (self.last_epoch - 1) / self.total_iters)) \
            ** self.power
        return [lr * f for lr in self._lrs()]

    def _get_closed_form_lr(self):
        f = (1.0 - min(self.total_iters, self.last_epoch) / self.total_iters) ** self.power
        return [b * f for b in self.base_lrs]


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine from the base lr to eta_min over T_0 steps, restarting with periods T_0, T_0·T_mult, ..."""

    def __init__(self, optimizer, T_0, T_mult=1, eta_min=0.0, last_epoch=-1):
        if T_0 <= 0 or not isinstance(T_0, int):
            raise ValueError("Expected positive integer T_0, but got %s" % T_0)
        if T_mult < 1 or not isinstance(T_mult, int):
            raise ValueError("Expected integer T_mult >= 1, but got %s" % T_mult)
        if not isinstance(eta_min, (float, int)):
            raise ValueError("Expected float or int eta_min, but got %s of type %s" % (eta_min, type(eta_min)))
        self.T_0, self.T_i, self.T_mult, self.eta_min = T_0, T_0, T_mult, eta_min
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        self._warn_outside_step()
        c = (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
        return [self.eta_min + (b - self.eta_min) * c for b in self.base_lrs]

    def step(self, epoch=None):
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur += 1
            if self.T_cur >= self.T_i:  # torch's modulo: a resumed T_cur (last_epoch) may be several periods on
                self.T_cur %= self.T_i
                self.T_i *= self.T_mult
        else:
            if epoch < 0:
                raise ValueError("Expected non-negative epoch, but got %s" % epoch)
            if epoch >= self.T_0:
                if self.T_mult == 1:
                    self.T_cur = epoch % self.T_0
                else:
                    n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
                    self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
                    self.T_i = self.T_0 * self.T_mult ** n
            else:
                self.T_i, self.T_cur = self.T_0, epoch
        self.last_epoch = math.floor(epoch)  # (no _step_count: torch's stays 0, so no step-order warning)
        self._get_lr_called_within_step = True
        try:
            values = self.get_lr()
        finally:
            self._get_lr_called_within_step = False
        self._set_lrs(values)


def _warn_epoch_deprecated():
    import warnings
    warnings.warn("The epoch parameter in `scheduler.step()` was not necessary and is being deprecated where "
                  "possible. Please use `scheduler.step()` to step the scheduler. During the deprecation, if "
                  "epoch is different from None, the closed form is used instead of the new chainable form, "
                  "where available. Please open an issue if you are unable to replicate your use case: "
                  "https://github.com/pytorch/pytorch/issues/new/choose.", UserWarning, stacklevel=3)


def _per_group(optimizer, name, value):
    """A scheduler argument given once or per parameter group (torch's _format_param)."""
    n = len(optimizer.param_groups)
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError("%s must have the same length as optimizer.param_groups. %s has %d values, "
                             "param_groups has %d." % (name, name, len(value), n))
        return [_snapshot(v) for v in value]
    return [_snapshot(value) for _ in range(n)]


class _MomentumCycle:
    """The momentum side of OneCycleLR and CyclicLR (cycle_momentum=True): the optimizer's "momentum" (SGD)
    or beta1 of "betas" (Adam, AdamW) moves opposite to the lr; each group records max_momentum and
    base_momentum, as torch's schedulers do."""

    def __init__(self, optimizer, base_momentum, max_momentum, last_epoch):
        if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
            raise ValueError("optimizer must support momentum or beta1 with `cycle_momentum` option enabled")
        self.use_beta1 = "betas" in optimizer.defaults
        self.base_momentums = _per_group(optimizer, "base_momentum", base_momentum)
        self.max_momentums = _per_group(optimizer, "max_momentum", max_momentum)
        if last_epoch == -1:
            for top, low, g in zip(self.max_momentums, self.base_momentums, optimizer.param_groups):
                self.set(g, top)
                g["max_momentum"], g["base_momentum"] = top, low

    def set(self, group, momentum):
        _set_momentum(group, momentum, self.use_beta1)


def _set_momentum(group, momentum, use_beta1):
    if use_beta1:
        group["betas"] = (momentum,) + tuple(group["betas"][1:])
    else:
        group["momentum"] = momentum


def _without_momentum_object(scheduler, state):
    """A state dict with the momentum cycle as plain values (torch's keys: cycle_momentum, use_beta1, and the
    momentum lists), so torch.load(weights_only=True) reads it."""
    m = state.pop("_momentum", None)
    state["cycle_momentum"] = m is not None
    if m is not None:
        state.update(use_beta1=m.use_beta1, base_momentums=list(m.base_momentums),
                     max_momentums=list(m.max_momentums))
    return state


def _restore_momentum_object(scheduler, state):
    """The inverse of _without_momentum_object (a torch-written state dict too)."""
    state = dict(state)
    cycle = state.pop("cycle_momentum", getattr(scheduler, "_momentum", None) is not None)
    plain = {k: state.pop(k) for k in ("use_beta1", "base_momentums", "max_momentums") if k in state}
    scheduler.__dict__.update(state)
    if cycle and plain:
        m = _MomentumCycle.__new__(_MomentumCycle)
        m.use_beta1, m.base_momentums, m.max_momentums = plain.get("use_beta1", False), \
            plain.get("base_momentums", []), plain.get("max_momentums", [])
        scheduler._momentum = m
    elif not cycle:
        scheduler._momentum = None


class OneCycleLR(LRScheduler):
    """torch's OneCycleLR (per batch): from max_lr/div_factor up to max_lr over pct_start of the steps, then
    down to max_lr/(div_factor·final_div_factor); cosine or linear annealing; three_phase as torch. With
    cycle_momentum (the default) momentum, or Adam's beta1, goes the other way: max_momentum down to
    base_momentum while the lr rises, and back. Its attributes (the state dict) are torch's: the phases as
    dicts naming the group keys they anneal between, the anneal function by name."""

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None, pct_start=0.3,
                 anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85, max_momentum=0.95,
                 div_factor=25.0, final_div_factor=1e4, three_phase=False, last_epoch=-1):
        self.optimizer = optimizer
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")
            for name, v in (("epochs", epochs), ("steps_per_epoch", steps_per_epoch)):
                if not isinstance(v, int) or v <= 0:
                    raise ValueError("Expected positive integer %s, but got %s" % (name, v))
            total_steps = epochs * steps_per_epoch
        elif total_steps <= 0 or not isinstance(total_steps, int):  # torch's checks
            raise ValueError("Expected positive integer total_steps, but got %s" % total_steps)
        self.total_steps = total_steps
        up = float(pct_start * total_steps) - 1
        if three_phase:
            phases = [(up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                      (float(2 * pct_start * total_steps) - 2, "max_lr", "initial_lr", "base_momentum",
                       "max_momentum"),
                      (total_steps - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum")]
        else:
            phases = [(up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                      (total_steps - 1, "max_lr", "min_lr", "base_momentum", "max_momentum")]
        keys = ("end_step", "start_lr", "end_lr", "start_momentum", "end_momentum")
        self._schedule_phases = [dict(zip(keys, phase)) for phase in phases]
        if pct_start < 0 or pct_start > 1 or not isinstance(pct_start, float):
            raise ValueError("Expected float between 0 and 1 pct_start, but got %s" % pct_start)
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError("anneal_strategy must be one of 'cos' or 'linear', instead got %s" % anneal_strategy)
        self._anneal_func_type = anneal_strategy
        max_lrs = _per_group(optimizer, "max_lr", max_lr)
        if last_epoch == -1:
            for g, m in zip(optimizer.param_groups, max_lrs):
                g["initial_lr"] = m / div_factor
                g["max_lr"] = m
                g["min_lr"] = g["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self.use_beta1 = _MomentumCycle(optimizer, base_momentum, max_momentum, last_epoch).use_beta1
        super().__init__(optimizer, last_epoch)

    def _anneal_func(self, start, end, pct):
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self):
        self._warn_outside_step()
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError("Tried to step %d times. The specified number of total steps is %d"
                             % (step, self.total_steps))
        out = []
        for g in self.optimizer.param_groups:
            start = 0
            for i, phase in enumerate(self._schedule_phases):
                end = phase["end_step"]
                if step <= end or i == len(self._schedule_phases) - 1:
                    pct = (step - start) / (end - start)
                    out.append(self._anneal_func(g[phase["start_lr"]], g[phase["end_lr"]], pct))
                    if self.cycle_momentum:
                        m = self._anneal_func(g[phase["start_momentum"]], g[phase["end_momentum"]], pct)
                        _set_momentum(g, m, self.use_beta1)
                    break
                start = end
        return out

    def load_state_dict(self, state_dict):
        state = dict(state_dict)
        old = state.pop("_phases", None)  # (a state dict tessel wrote before it kept torch's attributes)
        if old is not None:
            keys = ("end_step", "start_lr", "end_lr", "start_momentum", "end_momentum")
            state.setdefault("_schedule_phases", [dict(zip(keys, phase)) for phase in old])
        for key in ("base_momentums", "max_momentums"):
            state.pop(key, None)
        super().load_state_dict(state)


class CyclicLR(LRScheduler):
    """torch's CyclicLR (per batch): the lr cycles between base_lr and max_lr, step_size_up steps up and
    step_size_down (default: the same) down; mode "triangular" (constant amplitude), "triangular2" (halved
    every cycle), "exp_range" (gamma ** iteration), or scale_fn(x) with scale_mode "cycle" (x: the cycle,
    from 1) or "iterations". With cycle_momentum (the default) momentum, or Adam's beta1, moves the other
    way between max_momentum and base_momentum."""

    def __init__(self, optimizer, base_lr, max_lr, step_size_up=2000, step_size_down=None, mode="triangular",
                 gamma=1.0, scale_fn=None, scale_mode="cycle", cycle_momentum=True, base_momentum=0.8,
                 max_momentum=0.9, last_epoch=-1):
        base_lrs = _per_group(optimizer, "base_lr", base_lr)
        if last_epoch == -1:
            for lr, g in zip(base_lrs, optimizer.param_groups):
                _set_lr(g, lr)
        self.max_lrs = _per_group(optimizer, "max_lr", max_lr)
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        self.total_size, self.step_ratio = up + down, up / (up + down)
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ValueError("mode is invalid and scale_fn is None")
        self.mode, self.gamma, self._scale_fn_custom = mode, gamma, scale_fn
        self.scale_mode = scale_mode if scale_fn is not None else ("iterations" if mode == "exp_range" else "cycle")
        self.cycle_momentum = cycle_momentum
        self._momentum = _MomentumCycle(optimizer, base_momentum, max_momentum, last_epoch) if cycle_momentum else None
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    def scale_fn(self, x):
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1 / (2.0 ** (x - 1))
        return self.gamma ** x

    def get_lr(self):
        self._warn_outside_step()
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        factor = x / self.step_ratio if x <= self.step_ratio else (x - 1) / (self.step_ratio - 1)
        scale = self.scale_fn(cycle if self.scale_mode == "cycle" else self.last_epoch)
        lrs = [low + (top - low) * factor * scale for low, top in zip(self.base_lrs, self.max_lrs)]
        if self._momentum is not None:
            m = self._momentum
            for g, low, top in zip(self.optimizer.param_groups, m.base_momentums, m.max_momentums):
                m.set(g, top - (top - low) * factor * scale)
        return lrs

    def state_dict(self):
        """As torch: a scale_fn that is a plain function or lambda is not saved (None)."""
        state = {k: v for k, v in self.__dict__.items() if k != "optimizer"}
        fn = state.pop("_scale_fn_custom")
        state["_scale_fn_custom"] = None if fn is None or isinstance(fn, type(lambda: 0)) else fn.__dict__.copy()
        return _without_momentum_object(self, state)

    def load_state_dict(self, state_dict):
        state = dict(state_dict)
        fn = state.pop("_scale_fn_custom", None)
        _restore_momentum_object(self, state)
        if fn is not None and self._scale_fn_custom is not None:
            self._scale_fn_custom.__dict__.update(fn)


class ChainedScheduler(LRScheduler):
    """torch's ChainedScheduler: step() steps every scheduler in order, so their (chainable) factors
    multiply; all must drive one optimizer, and ReduceLROnPlateau (which needs a metric) is refused."""

    def __init__(self, schedulers, optimizer=None):
        if len(schedulers) < 1:
            raise ValueError("ChainedScheduler expects at least one scheduler to be chained, but got no scheduler.")
        optimizer = optimizer or schedulers[0].optimizer
        for i, s in enumerate(schedulers):
            if not hasattr(s, "optimizer"):
                raise TypeError("ChainedScheduler at index %d should have `optimizer` as its attribute." % i)
            if isinstance(s, ReduceLROnPlateau):
                raise ValueError("ChainedScheduler does not support `ReduceLROnPlateau` scheduler as it requires "
                                 "additional kwargs to be specified when calling `step`, but got one at index %d "
                                 "in the given schedulers sequence." % i)
            if s.optimizer is not optimizer:
                raise ValueError("ChainedScheduler expects all schedulers to belong to the same optimizer, but got "
                                 "scheduler %s at index %d with a different optimizer" % (type(s).__name__, i))
        self._schedulers, self.optimizer = list(schedulers), optimizer
        self._last_lr = self._lrs()

    def step(self):
        for s in self._schedulers:
            s.step()
        self._last_lr = self._lrs()

    def state_dict(self):
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict):
        state = dict(state_dict)
        for s, sd in zip(self._schedulers, state.pop("_schedulers")):
            s.load_state_dict(sd)
        self.__dict__.update(state)


class ReduceLROnPlateau(LRScheduler):
    """torch's ReduceLROnPlateau: lr × factor once the metric has not improved (by threshold, rel or abs)
    for more than `patience` steps, then `cooldown` steps of rest; never below min_lr. A group added to the
    optimizer later takes a min_lr given as one number (default_min_lr); with a list, torch's RuntimeError.
    Its attributes (the state dict) are torch's, in torch's order."""

    def __init__(self, optimizer, mode="min", factor=0.1, patience=10, threshold=1e-4, threshold_mode="rel",
                 cooldown=0, min_lr=0, eps=1e-8):
        if factor >= 1.0:
            raise ValueError("Factor should be < 1.0.")
        self.factor = factor
        self.optimizer = optimizer
        n = len(optimizer.param_groups)
        if isinstance(min_lr, (list, tuple)):
            if len(min_lr) != n:
                raise ValueError("expected %d min_lrs, got %d" % (n, len(min_lr)))
            self.default_min_lr, self.min_lrs = None, list(min_lr)
        else:
            self.default_min_lr, self.min_lrs = min_lr, [min_lr] * n
        self.patience, self.cooldown, self.eps = patience, cooldown, eps
        self.last_epoch = 0
        self._last_lr = self._lrs()
        self._init_is_better(mode, threshold, threshold_mode)
        self.best = self.mode_worse
        self.cooldown_counter = self.num_bad_epochs = 0

    def _init_is_better(self, mode, threshold, threshold_mode):
        if mode not in ("min", "max"):
            raise ValueError("mode " + str(mode) + " is unknown!")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError("threshold mode " + str(threshold_mode) + " is unknown!")
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode

    def _better(self, a):
        rel = self.threshold_mode == "rel"
        if self.mode == "min":
            return a < (self.best * (1 - self.threshold) if rel else self.best - self.threshold)
        return a > (self.best * (1 + self.threshold) if rel else self.best + self.threshold)

    def step(self, metrics, epoch=None):
        current = float(metrics)
        if epoch is None:
            epoch = self.last_epoch + 1
        else:
            _warn_epoch_deprecated()
        self.last_epoch = epoch
        if self._better(current):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            self._reduce_lr()
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = self._lrs()

    def _reduce_lr(self):
        groups = self.optimizer.param_groups
        if len(groups) != len(self.min_lrs):  # groups added (unfrozen layers) since the scheduler was made
            if self.default_min_lr is None:
                raise RuntimeError("The number of param groups in the `optimizer` (%d) differs from when "
                                   "`ReduceLROnPlateau` was initialized (%d), usually due to a new param group "
                                   "being added to the optimizer. Please modify the `min_lrs` field to match the "
                                   "length of the `optimizer` param groups." % (len(groups), len(self.min_lrs)))
            self.min_lrs = [self.default_min_lr] * len(groups)
        for group, min_lr in zip(groups, self.min_lrs):
            old = float(group["lr"])
            new = max(old * self.factor, min_lr)
            if old - new > self.eps:
                _set_lr(group, new)

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        self._init_is_better(self.mode, self.threshold, self.threshold_mode)


def warmup_cosine(optimizer, warmup_steps, total_steps, min_lr_ratio=0.1):
    def factor(step):
        return _C._warmup_cosine_lr(1.0, min_lr_ratio, warmup_steps, total_steps, step)
    return LambdaLR(optimizer, factor)
