"""torch._foreach_*: the list forms of elementwise ops that optimizers and EMA helpers call (timm's ModelEmaV3:
torch._foreach_lerp_(ema_params, model_params, 1 - decay)). torch runs them as multi-tensor kernels; here each
is a loop over the tensors calling the single-tensor op (same values, one kernel per tensor), in place for the
names ending in "_" (through the in-place methods, so autograd records them where it must).
"""
from . import _C

Tensor = _C.Tensor


def _others(tensors, other, name):
    """`other` per tensor: a list of tensors or numbers (one each), else the same number or tensor for all."""
    if isinstance(other, (list, tuple)):
        if len(other) != len(tensors):
            raise RuntimeError("%s: tensor lists must have the same length, got %d and %d"
                               % (name, len(tensors), len(other)))
        return list(other)
    return [other] * len(tensors)


def _binary(name, method, scaled=False):
    def out_of_place(tensors, other, *, alpha=1):
        tensors = list(tensors)
        return [getattr(t, method)(o, alpha=alpha) if scaled else getattr(t, method)(o)
                for t, o in zip(tensors, _others(tensors, other, name))]

    def in_place(tensors, other, *, alpha=1):
        tensors = list(tensors)
        for t, o in zip(tensors, _others(tensors, other, name + "_")):
            if scaled:
                getattr(t, method + "_")(o, alpha=alpha)
            else:
                getattr(t, method + "_")(o)
    out_of_place.__name__, in_place.__name__ = name, name + "_"
    return out_of_place, in_place


def _unary(name, method):
    def out_of_place(tensors):
        return [getattr(t, method)() for t in tensors]

    def in_place(tensors):
        for t in tensors:
            getattr(t, method + "_")()
    out_of_place.__name__, in_place.__name__ = name, name + "_"
    return out_of_place, in_place


def _foreach_lerp(tensors, ends, weight):
    tensors = list(tensors)
    return [t.lerp(e, w) for t, e, w in zip(tensors, _others(tensors, ends, "_foreach_lerp"),
                                           _others(tensors, weight, "_foreach_lerp"))]


def _foreach_lerp_(tensors, ends, weight):
    tensors = list(tensors)
    for t, e, w in zip(tensors, _others(tensors, ends, "_foreach_lerp_"), _others(tensors, weight, "_foreach_lerp_")):
        t.lerp_(e, w)


def _foreach_addcmul_(tensors, tensor1, tensor2, value=1):
    tensors = list(tensors)
    for t, a, b, v in zip(tensors, tensor1, tensor2, _others(tensors, value, "_foreach_addcmul_")):
        t.addcmul_(a, b, value=v)


def _foreach_addcdiv_(tensors, tensor1, tensor2, value=1):
    tensors = list(tensors)
    for t, a, b, v in zip(tensors, tensor1, tensor2, _others(tensors, value, "_foreach_addcdiv_")):
        t.addcdiv_(a, b, value=v)


def _foreach_norm(tensors, ord=2, dtype=None):  # noqa: A002 (torch's argument name)
    from .linalg import vector_norm
    return [vector_norm(t, ord, dtype=dtype) for t in tensors]


def _foreach_copy_(tensors, src, non_blocking=False):
    for t, s in zip(tensors, src):
        t.copy_(s)


def _foreach_zero_(tensors):
    for t in tensors:
        t.zero_()


def functions():
    out = {}
    for name, method, scaled in (("_foreach_add", "add", True), ("_foreach_sub", "sub", True),
                                 ("_foreach_mul", "mul", False), ("_foreach_div", "div", False),
                                 ("_foreach_maximum", "maximum", False), ("_foreach_minimum", "minimum", False),
                                 ("_foreach_pow", "pow", False), ("_foreach_clamp_min", "clamp_min", False),
                                 ("_foreach_clamp_max", "clamp_max", False)):
        out[name], out[name + "_"] = _binary(name, method, scaled)
    for name, method in (("_foreach_sqrt", "sqrt"), ("_foreach_neg", "neg"), ("_foreach_abs", "abs"),
                         ("_foreach_exp", "exp"), ("_foreach_log", "log"), ("_foreach_reciprocal", "reciprocal"),
                         ("_foreach_sign", "sign")):
        out[name], out[name + "_"] = _unary(name, method)
    out.update(_foreach_lerp=_foreach_lerp, _foreach_lerp_=_foreach_lerp_, _foreach_addcmul_=_foreach_addcmul_,
               _foreach_addcdiv_=_foreach_addcdiv_, _foreach_norm=_foreach_norm, _foreach_copy_=_foreach_copy_,
               _foreach_zero_=_foreach_zero_)
    return out
