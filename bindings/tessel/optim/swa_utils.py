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
    """In place: averaged ← averaged + (current − averaged) / (n + 1), the running equal average."""
    def swa_update(averaged_params, current_params, num_averaged):
        n = float(num_averaged.item()) if isinstance(num_averaged, _C.Tensor) else float(num_averaged)
        for a, c in zip(averaged_params, current_params):
            a.copy_(a + (c - a) / (n + 1))
    return swa_update


def get_ema_avg_fn(decay=0.999):
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
            mine, theirs = self._tensors(self.module), self._tensors(model)
            if len(mine) != len(theirs):
                raise ValueError("AveragedModel.update_parameters: the model has %d tensors to average, the averaged "
                                 "copy %d" % (len(theirs), len(mine)))
            if int(self.n_averaged.item()) == 0:
                for a, c in zip(mine, theirs):
                    a.copy_(c.detach())
            elif self.avg_fn is not None:
                for a, c in zip(mine, theirs):
                    a.copy_(self.avg_fn(a.detach(), c.detach(), self.n_averaged))
            else:  # torch hands multi_avg_fn the tensors grouped by dtype
                groups = {}
                for a, c in zip(mine, theirs):
                    groups.setdefault(a.dtype, ([], []))
                    groups[a.dtype][0].append(a)
                    groups[a.dtype][1].append(c.detach())
                update = self.multi_avg_fn or get_swa_multi_avg_fn()
                for averaged, current in groups.values():
                    update(averaged, current, self.n_averaged)
            if not self.use_buffers:  # the buffers follow the model's (batch-norm statistics)
                for a, c in zip(self.module.buffers(), model.buffers()):
                    if a is not None and c is not None:
                        a.copy_(c.detach())
            self.n_averaged.add_(1)


def update_bn(loader, model, device=None):
    """One pass over loader to recompute model's batch-norm running statistics as the cumulative average over
    the pass (momentum None during it, restored after); a loader yielding (input, target) feeds the input."""
    from ..nn._conv_modules import _NormBase
    norms = [m for m in model.modules() if isinstance(m, _NormBase) and m.track_running_stats]
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
            model(batch[0] if isinstance(batch, (list, tuple)) else batch)
    for m in norms:
        m.momentum = momenta[m]
    model.train(was_training)


class SWALR(LRScheduler):
    """torch's SWALR: each group's lr moves to its swa_lr over anneal_epochs steps (cosine or linear), then stays;
    the interpolation restarts from the lr the previous step set, as torch's, so other schedulers' changes carry
    over."""

    def __init__(self, optimizer, swa_lr, anneal_epochs=10, anneal_strategy="cos", last_epoch=-1):
        swa_lrs = list(swa_lr) if isinstance(swa_lr, (list, tuple)) else [swa_lr] * len(optimizer.param_groups)
        if len(swa_lrs) != len(optimizer.param_groups):
            raise ValueError("swa_lr must have the same length as optimizer.param_groups: swa_lr has %d, "
                             "optimizer.param_groups has %d" % (len(swa_lrs), len(optimizer.param_groups)))
        for value, group in zip(swa_lrs, optimizer.param_groups):
            group["swa_lr"] = value
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError("anneal_strategy must be one of 'cos' or 'linear', instead got %s" % anneal_strategy)
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError("anneal_epochs must be equal or greater than 0, got %s" % anneal_epochs)
        self._anneal_strategy, self.anneal_epochs = anneal_strategy, anneal_epochs
        super().__init__(optimizer, last_epoch)

    def _anneal(self, t):
        return t if self._anneal_strategy == "linear" else (1 - math.cos(math.pi * t)) / 2

    def get_lr(self):
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_alpha = self._anneal(max(0, min(1, (step - 1) / max(1, self.anneal_epochs))))
        alpha = self._anneal(max(0, min(1, step / max(1, self.anneal_epochs))))
        lrs = []
        for group in self.optimizer.param_groups:
            lr, swa_lr = group["lr"], group["swa_lr"]
            start = swa_lr if prev_alpha == 1 else (lr - prev_alpha * swa_lr) / (1 - prev_alpha)
            lrs.append(swa_lr * alpha + start * (1 - alpha))
        return lrs
