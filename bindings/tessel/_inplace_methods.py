"""torch's in-place Tensor methods that tessel had only out of place, for tessel's namespace (installed by
tessel/_namespace.py): each computes the out-of-place op of its name and writes the result back with torch's
rules (a result dtype the tensor cannot hold, "result type Float can't be cast to the desired output type
Long", or another shape raises), recorded by autograd as tessel/_inplace.py records add_; plus the ones whose
meaning is not "the op written back": bernoulli_(p), geometric_ / cauchy_ / log_normal_ (random fills),
fill_diagonal_, apply_ / map_ (a Python callable per element) and resize_as_."""
import builtins
import math

import numpy as np

from . import _C, _dtypes, _inplace

Tensor = _C.Tensor
_float = builtins.float


def _ns():
    from . import _namespace
    return _namespace


def _cast_back(self, name, result):
    """result written back into self's dtype and shape, with torch's in-place rules."""
    if not isinstance(result, Tensor):
        raise TypeError("%s: the op returned %s, not a tensor" % (name, type(result).__name__))
    if not _ns().can_cast(result.dtype, self.dtype):
        raise RuntimeError("result type %s can't be cast to the desired output type %s"
                           % (_ns()._name(result.dtype), _ns()._name(self.dtype)))
    return _inplace._fitted(self, name, result)  # the shape check (and the cast) every in-place write makes


def _in_place_of(name, base):
    def out_of_place(self, *args, **kwargs):
        return _cast_back(self, name, getattr(self, base)(*args, **kwargs))
    return _inplace._wrap(name, None, out_of_place)


# in-place methods whose semantics are not "base(self, ...) written back"
_NOT_GENERIC = {"as_strided_", "swapaxes_", "swapdims_", "bernoulli_", "resize_as_", "share_memory_", "apply_",
                "map_", "map2_"}
# torch's in-place methods tessel lacked (torch 2.15), each written back from the out-of-place op of its name
INPLACE_NAMES = (
    "absolute_ acos_ acosh_ addbmm_ addmm_ addmv_ addr_ baddbmm_ arccos_ arccosh_ arcsin_ arcsinh_ arctan2_ "
    "arctan_ arctanh_ "
    "asin_ asinh_ atan2_ atan_ atanh_ bitwise_and_ bitwise_not_ bitwise_or_ bitwise_xor_ conj_physical_ copysign_ "
    "cos_ cosh_ cumprod_ cumsum_ deg2rad_ digamma_ divide_ eq_ erf_ erfc_ erfinv_ exp2_ expm1_ fix_ float_power_ "
    "floor_divide_ fmod_ frac_ gcd_ ge_ greater_ greater_equal_ gt_ heaviside_ hypot_ i0_ igamma_ igammac_ "
    "index_copy_ lcm_ ldexp_ le_ polygamma_ "
    "less_ less_equal_ lgamma_ log10_ log1p_ log2_ logical_and_ logical_not_ logical_or_ logical_xor_ logit_ lt_ "
    "masked_scatter_ multiply_ mvlgamma_ nan_to_num_ ne_ negative_ not_equal_ rad2deg_ remainder_ renorm_ rsqrt_ "
    "sgn_ sign_ sin_ sinc_ sinh_ square_ subtract_ tan_ tril_ triu_ true_divide_ xlogy_").split()


def _torch_drawn(t):
    """Whether t takes torch's own CPU kernels (core/tensor/torch_random.h: a seeded script's values); a DTensor
    draws its piece of the whole tensor's values on the counter-based stream instead."""
    return not t.is_distributed and t.device.type == "cpu"


def _bernoulli_(self, p=0.5, *, generator=None):
    """Tensor.bernoulli_(p): self filled with 1 (probability p, a number or a broadcastable tensor) or 0."""
    if _torch_drawn(self) and not (isinstance(p, _C.Tensor) and p.is_distributed):
        with _C._GradMode(False):
            if isinstance(p, _C.Tensor):
                if not p.dtype.is_floating_point:
                    raise RuntimeError('"bernoulli_tensor_cpu_p_" not implemented for \'%s\'' % _ns()._name(p.dtype))
                return _C._torch_bernoulli_(self, p.detach().expand(tuple(self.shape)), generator)
            return _C._torch_random_(self, "bernoulli", float(p), 0.0, generator)
    from ._tensor import uniform_like
    u = uniform_like(self.detach(), generator, _dtypes.float32)
    with _C._GradMode(False):
        return self.copy_(u.lt(p).to(self.dtype))


def _random_fill(name, transform):
    def method(self, *args, generator=None, **kwargs):
        if not self.dtype.is_floating_point:
            raise RuntimeError("%s expects a floating-point tensor, got %s" % (name, _ns()._name(self.dtype)))
        from ._tensor import randn, randn_like, uniform_like
        u = uniform_like(self.detach(), generator)
        if transform is _log_normal:  # a normal draw, from the same generator
            x = self.detach()
            kwargs = dict(kwargs, _normal=randn_like(x) if generator is None or x.is_distributed else
                          randn(*x.shape, generator=generator, dtype=x.dtype))
        with _C._GradMode(False):
            return self.copy_(transform(u.to(_dtypes.float64), *args, **kwargs).to(self.dtype))
    method.__name__ = name
    return method


def _geometric(u, p):
    if not 0 < p < 1:
        raise RuntimeError("geometric_ expects p to be in (0, 1), but got p=%s" % p)
    return (u.clamp(1e-300, None).log() / math.log1p(-p)).ceil()


def _cauchy(u, median=0.0, sigma=1.0):
    return _ns().tan((u - 0.5) * math.pi) * sigma + median


def _log_normal(u, mean=1.0, std=2.0, *, _normal):
    if std <= 0:
        raise RuntimeError("log_normal_ expects std > 0.0, but found std=%s" % std)
    return (_normal.to(u.dtype) * std + mean).exp()


_GEOMETRIC, _CAUCHY, _LOG_NORMAL = (_random_fill(n, f) for n, f in (
    ("geometric_", _geometric), ("cauchy_", _cauchy), ("log_normal_", _log_normal)))


def _geometric_(self, p, *, generator=None):
    """Tensor.geometric_: torch's CPU kernel on a dense CPU tensor of any dtype (core/tensor/torch_random.h)."""
    if not _torch_drawn(self):
        return _GEOMETRIC(self, p, generator=generator)
    with _C._GradMode(False):
        return _C._torch_random_(self, "geometric", float(p), 0.0, generator)


def _cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
    if not _torch_drawn(self) or not self.dtype.is_floating_point:
        return _CAUCHY(self, median, sigma, generator=generator)
    with _C._GradMode(False):
        return _C._torch_random_(self, "cauchy", float(median), float(sigma), generator)


def _log_normal_(self, mean=1.0, std=2.0, *, generator=None):
    if not _torch_drawn(self) or not self.dtype.is_floating_point:
        return _LOG_NORMAL(self, mean, std, generator=generator)
    with _C._GradMode(False):
        return _C._torch_random_(self, "log_normal", float(mean), float(std), generator)


def _fill_diagonal_(self, fill_value, wrap=False):
    """Tensor.fill_diagonal_: the main diagonal (all dims of one size when ndim > 2) set to fill_value; wrap=True
    continues below a tall matrix's first square block, every (columns + 1) elements."""
    if self.dim() < 2:
        raise RuntimeError("dimensions must larger than 1")
    if self.dim() > 2 and len(set(self.shape)) != 1:
        raise RuntimeError("all dimensions of input must be of equal length")
    numel, step = self.numel(), 1
    if self.dim() == 2:
        rows, cols = self.shape
        step = cols + 1
        limit = numel if wrap else builtins.min(rows, cols) * cols
    else:
        n = self.shape[0]
        step = builtins.sum(n ** k for k in range(self.dim()))
        limit = numel
    positions = list(range(0, limit, step))
    if not positions:
        return self
    index = _C._from_numpy(np.asarray(positions, dtype=np.int64))
    values = _C._full([len(positions)], _float(fill_value), self.dtype)

    def filled(x):
        return x.reshape(-1).index_put((index,), values).reshape(list(x.shape))
    if _C.is_grad_enabled() and self.requires_grad:
        return _inplace.record(self, "fill_diagonal_", filled)
    with _C._GradMode(False):
        return self.copy_(filled(self))


def _apply_(self, callable):
    """Tensor.apply_: callable applied to every element (a Python loop, CPU only, as torch); no autograd."""
    if self.is_distributed:
        raise NotImplementedError("apply_ of a DTensor: apply it to to_local()")
    values = self.detach().numpy().reshape(-1).tolist()
    out = np.asarray([callable(v) for v in values], dtype=self.detach().numpy().dtype).reshape(tuple(self.shape))
    with _C._GradMode(False):
        return self.copy_(_C._from_numpy(np.ascontiguousarray(out)))


def _map_(self, tensor, callable):
    """Tensor.map_: self[i] = callable(self[i], tensor[i]) with tensor broadcast to self."""
    other = tensor.expand(*self.shape).detach().numpy().reshape(-1).tolist()
    values = self.detach().numpy().reshape(-1).tolist()
    out = np.asarray([callable(a, b) for a, b in zip(values, other)],
                     dtype=self.detach().numpy().dtype).reshape(tuple(self.shape))
    with _C._GradMode(False):
        return self.copy_(_C._from_numpy(np.ascontiguousarray(out)))


SPECIAL_INPLACE = dict(
    bernoulli_=_bernoulli_, geometric_=_geometric_, cauchy_=_cauchy_, log_normal_=_log_normal_,
    fill_diagonal_=_fill_diagonal_, apply_=_apply_, map_=_map_,
    resize_as_=lambda self, other: self.resize_(*other.shape),
)


def install():
    for name in INPLACE_NAMES:
        if not hasattr(Tensor, name) and name not in _NOT_GENERIC:
            setattr(Tensor, name, _in_place_of(name, name[:-1]))
    for name, fn in SPECIAL_INPLACE.items():
        if not hasattr(Tensor, name):
            setattr(Tensor, name, fn)
    rounded_div_ = _in_place_of("div_", "div")
    for name in ("div_", "divide_", "true_divide_"):
        plain = getattr(Tensor, name)

        def div_(self, other, *, rounding_mode=None, _plain=plain):
            """Tensor.div_ (divide_, true_divide_): in place; rounding_mode "trunc" / "floor" as div's."""
            return _plain(self, other) if rounding_mode is None else rounded_div_(self, other,
                                                                                  rounding_mode=rounding_mode)
        div_.__name__ = name
        setattr(Tensor, name, div_)
