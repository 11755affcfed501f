"""tessel.optim: SGD and AdamW with torch's signatures, over ``model.parameters()``, named parameters or
parameter groups (dicts with "params" and per-group options).

Each parameter group is one C++ optimizer (core/optim), whose state is keyed by the parameter's FQN, so a
checkpoint of the optimizer reshards like the model's. Every hyperparameter of ``param_groups[i]`` (lr,
weight_decay, betas, eps, momentum, ...) is read at every step, as in torch, so LR schedulers and
hand-edited groups work.

    opt = tessel.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    loss.backward(); opt.step(); opt.zero_grad()
"""
from .. import _C
from . import lr_scheduler  # noqa: F401


def _named(params, group_index):
    out = []
    for i, p in enumerate(params):
        if isinstance(p, tuple):
            name, p = p
        else:
            name = getattr(p, "_fqn", None) or "param_groups.%d.%d" % (group_index, i)
        if not isinstance(p, _C.Tensor):
            raise TypeError("optimizer can only optimize Tensors, got %s" % type(p).__name__)
        out.append((name, p))
    return out


def _param_groups(params):
    if isinstance(params, _C.Tensor):
        raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, "
                        "but got a Tensor")
    groups = list(params)
    if not groups:
        raise ValueError("optimizer got an empty parameter list")
    if not isinstance(groups[0], dict):
        groups = [{"params": groups}]
    seen = set()  # tensor identities: the same parameter reached twice (hash is the tensor's identity)
    names = set()
    out = []
    for gi, g in enumerate(groups):
        g = dict(g)
        ps = g["params"]
        named = []
        for i, (name, p) in enumerate(_named([ps] if isinstance(ps, _C.Tensor) else list(ps), gi)):
            if hash(p) in seen:
                raise ValueError("some parameters appear in more than one parameter group ('%s')" % name)
            seen.add(hash(p))
            # Names key the optimizer's state (checkpoints): parameters reached through attributes of
            # different modules share local names ('weight'), so a repeated name takes its position instead.
            if name in names:
                name = "param_groups.%d.%d" % (gi, i)
            names.add(name)
            named.append((name, p))
        g["params"] = named
        out.append(g)
    return out


class Optimizer:
    """Base: one C++ optimizer per parameter group."""

    def __init__(self, params, defaults):
        self.defaults = defaults
        self.param_groups = []
        self._optimizers = []
        for g in _param_groups(params):
            group = dict(defaults, **g)
            self._optimizers.append(self._make(group["params"], group))
            group["params"] = [p for _, p in group["params"]]
            self.param_groups.append(group)

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group, opt in zip(self.param_groups, self._optimizers):
            opt.hyper = self._hyper(group)
            opt.step()
        return loss

    def zero_grad(self, set_to_none=True):
        for group, opt in zip(self.param_groups, self._optimizers):
            if set_to_none:
                opt.zero_grad()
            else:
                for p in group["params"]:
                    if p.grad is not None:
                        p.grad.zero_()

    def _single(self, what):
        """The C++ optimizer of a one-group optimizer (checkpoints key one optimizer's state by FQN)."""
        if len(self._optimizers) != 1:
            raise NotImplementedError("%s: optimizers with %d parameter groups are not supported"
                                      % (what, len(self._optimizers)))
        return self._optimizers[0]


class AdamW(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
                 maximize=False, foreach=None, capturable=False, differentiable=False, fused=None):
        if amsgrad or maximize or capturable or differentiable:
            raise NotImplementedError("AdamW: amsgrad, maximize, capturable and differentiable are not supported")
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: %s" % lr)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    @staticmethod
    def _hyper(g):
        b1, b2 = g["betas"]
        return {"lr": float(g["lr"]), "beta1": float(b1), "beta2": float(b2), "eps": float(g["eps"]),
                "weight_decay": float(g["weight_decay"])}

    @staticmethod
    def _make(named, g):
        b1, b2 = g["betas"]
        return _C.AdamW(named, lr=float(g["lr"]), weight_decay=float(g["weight_decay"]), beta1=float(b1),
                        beta2=float(b2), eps=float(g["eps"]))


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, *,
                 maximize=False, foreach=None, differentiable=False, fused=None):
        if maximize or differentiable:
            raise NotImplementedError("SGD: maximize and differentiable are not supported")
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: %s" % lr)
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov))

    @staticmethod
    def _hyper(g):
        return {"lr": float(g["lr"]), "momentum": float(g["momentum"]), "dampening": float(g["dampening"]),
                "weight_decay": float(g["weight_decay"]), "nesterov": float(bool(g["nesterov"]))}

    @staticmethod
    def _make(named, g):
        return _C.SGD(named, lr=float(g["lr"]), momentum=float(g["momentum"]), dampening=float(g["dampening"]),
                      weight_decay=float(g["weight_decay"]), nesterov=bool(g["nesterov"]))
