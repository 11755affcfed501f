"""tessel.optim.lr_scheduler: LambdaLR (torch's) and warmup_cosine, a LambdaLR over core/optim's
WarmupCosineSchedule (linear warmup from 0, then cosine decay to min_lr_ratio × lr).

    sched = warmup_cosine(opt, warmup_steps=100, total_steps=1000, min_lr_ratio=0.1)
    for step in ...: ...; opt.step(); sched.step()
"""
from .. import _C


class LRScheduler:
    def __init__(self, optimizer, last_epoch=-1):
        self.optimizer = optimizer
        self.base_lrs = [g.setdefault("initial_lr", g["lr"]) for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def get_lr(self):
        raise NotImplementedError

    def step(self):
        self.last_epoch += 1
        for group, lr in zip(self.optimizer.param_groups, self.get_lr()):
            group["lr"] = lr

    def get_last_lr(self):
        return [g["lr"] for g in self.optimizer.param_groups]


class LambdaLR(LRScheduler):
    """lr = initial lr × lr_lambda(step)."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        n = len(optimizer.param_groups)
        self.lr_lambdas = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * n
        if len(self.lr_lambdas) != n:
            raise ValueError("Expected %d lr_lambdas, but got %d" % (n, len(self.lr_lambdas)))
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base * fn(self.last_epoch) for base, fn in zip(self.base_lrs, self.lr_lambdas)]


def warmup_cosine(optimizer, warmup_steps, total_steps, min_lr_ratio=0.1):
    def factor(step):
        return _C._warmup_cosine_lr(1.0, min_lr_ratio, warmup_steps, total_steps, step)
    return LambdaLR(optimizer, factor)
