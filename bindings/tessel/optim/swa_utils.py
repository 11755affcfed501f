"""tessel.optim.swa_utils: torch.optim.swa_utils' AveragedModel (stochastic weight averaging and exponential moving
averages of a model's parameters), the averaging functions, update_bn and the SWALR schedule.

    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
    ...; opt.step(); ema.update_parameters(model)
    update_bn(loader, swa_model)       # batch-norm statistics for the averaged weights

AveragedModel holds a deep copy of the model (`.module`) and a `n_averaged` buffer; the first update copies the
model's values, later ones average them in: by default the equal average of all updates, or avg_fn(averaged,
current, n) / multi_avg_fn(averaged_list, current_list, n) (in place). use_buffers=True averages the buffers too;
otherwise they are copied from the model at each update, as torch.
"""
import copy
import itertools
import math

from .. import _C
from ..nn.modules import Module
from .lr_scheduler import LRScheduler


def get_ema_multi_avg_fn(decay=0.999):
    """In place: ema ← decay·ema + (1 − decay)·current (integer tensors: computed in floats, truncated back)."""
    if decay < 0.0 or decay > 1.0:
        raise ValueError("Invalid decay value %s provided. Please provide a value in [0,1] range." % decay)

    def ema_update(ema_params, current_params, num_averaged):
        for e, c in zip(ema_params, current_params):
            if e.dtype.is_floating_point:
                e.lerp_(c, 1 - decay)
            else:
                e.copy_(e * decay + c * (1 - decay))
    return ema_update


def get_swa_multi_avg_fn():
    """In place: averaged ← lerp(averaged, current, 1 / (n + 1)), the running equal average (torch's foreach
    lerp; integer tensors raise torch's errors: its addcdiv / add with a float alpha refuse them)."""
    def swa_update(averaged_params, current_params, num_averaged):
        if averaged_params[0].dtype.is_floating_point or averaged_params[0].dtype.is_complex:
            weight = 1 / (num_averaged + 1)  # (a float32 tensor for a tensor count, as torch's)
            weight = weight.item() if isinstance(weight, _C.Tensor) else weight
            for a, c in zip(averaged_params, current_params):
                a.lerp_(c, weight)
        elif isinstance(num_averaged, _C.Tensor):
            raise RuntimeError("Integer division with addcdiv is no longer supported, and in a future  release "
                               "addcdiv will perform a true division of tensor1 and tensor2. The historic addcdiv "
                               "behavior can be implemented as (input + value * torch.trunc(tensor1 / tensor2)).to("
                               "input.dtype) for integer inputs and as (input + value * tensor1 / tensor2) for float "
                               "inputs. The future addcdiv behavior is just the latter implementation: (input + value "
                               "* tensor1 / tensor2), for all dtypes.")
        else:
            raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")
    return swa_update


def get_ema_avg_fn(decay=0.999):
    if decay < 0.0 or decay > 1.0:
        raise ValueError("Invalid decay value %s provided. Please provide a value in [0,1] range." % decay)

    def ema_update(ema_param, current_param, num_averaged):
        return decay * ema_param + (1 - decay) * current_param
    return ema_update


def get_swa_avg_fn():
    def swa_update(averaged_param, current_param, num_averaged):
        return averaged_param + (current_param - averaged_param) / (num_averaged + 1)
    return swa_update


class AveragedModel(Module):
    def __init__(self, model, device=None, avg_fn=None, multi_avg_fn=None, use_buffers=False):
        super().__init__()
        from .._device import check_cpu
        check_cpu(device, "AveragedModel")
        if avg_fn is not None and multi_avg_fn is not None:
            raise AssertionError("Only one of avg_fn and multi_avg_fn should be provided")
        self.module = copy.deepcopy(model)
        self.register_buffer("n_averaged", _C._full([], 0.0, _C.dtype.int64))
        self.avg_fn, self.multi_avg_fn, self.use_buffers = avg_fn, multi_avg_fn, use_buffers

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def _tensors(self, model):
        if self.use_buffers:
            return list(itertools.chain(model.parameters(), [b for b in model.buffers() if b is not None]))
        return list(model.parameters())

    def update_parameters(self, model):
        with _C._GradMode(False):
            # torch zips without strict: a model with more (or fewer) tensors averages the common prefix
            pairs = list(zip(self._tensors(self.module), self._tensors(model)))
            if int(self.n_averaged.item()) == 0:
                for a, c in pairs:
                    a.copy_(c.detach())
            elif self.avg_fn is not None:
                for a, c in pairs:
                    a.copy_(self.avg_fn(a.detach(), c.detach(), self.n_averaged))
            elif self.multi_avg_fn is not None:  # torch hands multi_avg_fn the tensors grouped by dtype
                groups = {}
                for a, c in pairs:
                    groups.setdefault(a.dtype, ([], []))
                    groups[a.dtype][0].append(a)
                    groups[a.dtype][1].append(c.detach())
                for averaged, current in groups.values():
                    self.multi_avg_fn(averaged, current, self.n_averaged)
            else:  # torch's CPU default: get_swa_avg_fn per tensor (integer buffers average, truncated back)
                average = get_swa_avg_fn()
                for a, c in pairs:
                    a.copy_(average(a, c.detach(), self.n_averaged))
            if not self.use_buffers:  # the buffers follow the model's (batch-norm statistics)
                for a, c in zip(self.module.buffers(), model.buffers(), strict=True):
                    if a is not None and c is not None:
                        a.copy_(c.detach())
            self.n_averaged.add_(1)


def update_bn(loader, model, device=None):
    """One pass over loader to recompute model's batch-norm running statistics as the cumulative average over
    the pass (momentum None during it, restored after); a loader yielding (input, target) feeds the input. Only
    the BatchNorm layers (torch's _BatchNorm), not InstanceNorm's tracked statistics."""
    from ..nn._conv_modules import _BatchNormNd
    norms = [m for m in model.modules() if isinstance(m, _BatchNormNd)]
    if not norms:
        return
    momenta = {}
    for m in norms:
        m.reset_running_stats()
        momenta[m] = m.momentum
        m.momentum = None
    was_training = model.training
    model.train()
    with _C._GradMode(False):
        for batch in loader:
            batch = batch[0] if isinstance(batch, (list, tuple)) else batch
            model(batch.to(device) if device is not None else batch)
    for m in norms:
        m.momentum = momenta[m]
    model.train(was_training)


class SWALR(LRScheduler):
    """torch's SWALR: each group's lr moves to its swa_lr over anneal_epochs steps (cosine or linear), then stays;
    the interpolation restarts from the lr the previous step set, as torch's, so other schedulers' changes carry
    over."""

    def __init__(self, optimizer, swa_lr, anneal_epochs=10, anneal_strategy="cos", last_epoch=-1):
        from .lr_scheduler import _per_group
        for value, group in zip(_per_group(optimizer, "swa_lr", swa_lr), optimizer.param_groups):
            group["swa_lr"] = value
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError("anneal_strategy must be one of 'cos' or 'linear', instead got %s" % anneal_strategy)
        self._set_anneal_func(anneal_strategy)
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError("anneal_epochs must be equal or greater than 0, got %s" % anneal_epochs)
        self.anneal_epochs = anneal_epochs
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _linear_anneal(t):
        return t

    @staticmethod
    def _cosine_anneal(t):
        return (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _get_initial_lr(lr, swa_lr, alpha):
        """The lr the interpolation started from, given the current one at alpha."""
        if alpha == 1:
            return swa_lr
        return (lr - alpha * swa_lr) / (1 - alpha)

    def _set_anneal_func(self, anneal_strategy):
        self._anneal_strategy = anneal_strategy
        self.anneal_func = self._cosine_anneal if anneal_strategy == "cos" else self._linear_anneal

    def get_lr(self):
        self._warn_outside_step()
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_alpha = self.anneal_func(max(0, min(1, (step - 1) / max(1, self.anneal_epochs))))
        alpha = self.anneal_func(max(0, min(1, step / max(1, self.anneal_epochs))))
        return [group["swa_lr"] * alpha + self._get_initial_lr(group["lr"], group["swa_lr"], prev_alpha) * (1 - alpha)
                for group in self.optimizer.param_groups]

    def state_dict(self):
        """torch's: the scheduler's attributes but the optimizer and the anneal function (a strategy name)."""
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "anneal_func")}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)
        self._set_anneal_func(self._anneal_strategy)
