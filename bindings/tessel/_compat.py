"""torch idioms that ported scripts use on every page, as thin Python over bound ops (each converts its
arguments and calls ops of tessel._C; nothing computes here): Tensor.argmax / argmin, max(dim) and
min(dim) as (values, indices) named tuples, in-place add_/sub_/mul_/div_/lerp_ with scalars, the in-place
initializers normal_ / uniform_, and Tensor.data.

    acc = (logits.argmax(dim=-1) == y).float().mean()
    with tessel.no_grad():
        w.normal_(0.0, 0.02); b.zero_(); p.data.mul_(0.5)
"""
import builtins
import collections

from . import _C

Tensor = _C.Tensor
_max_cpp = Tensor.max

values_indices = collections.namedtuple("max", ["values", "indices"])


def _max(self, dim=None, keepdim=False):
    """max() over everything, or (values, indices) along dim (torch.return_types.max)."""
    if dim is None:
        return _max_cpp(self)
    v, i = _max_cpp(self, dim, keepdim)
    return values_indices(v, i)


def _min(self, dim=None, keepdim=False):
    if dim is None:
        return -_max_cpp(-self)
    v, i = _max_cpp(-self, dim, keepdim)
    return values_indices(-v, i)


def _argmax(self, dim=None, keepdim=False):
    """Index of the largest entry (the first on ties, as torch); dim=None: into the flattened tensor."""
    if dim is None:
        return _max_cpp(self.reshape(-1), 0, False)[1]
    return _max_cpp(self, dim, keepdim)[1]


def _argmin(self, dim=None, keepdim=False):
    return _argmax(-self, dim, keepdim)


def _in_place(self, value, name):
    """Writes value (a tensor of self's shape) into self: under no_grad, or on tensors that need no grad."""
    if self.requires_grad and _C.is_grad_enabled():
        raise RuntimeError("%s: a leaf tensor that requires grad is used in an in-place operation (wrap it in "
                           "`with tessel.no_grad():`)" % name)
    return self.copy_(value)


_add_cpp, _mul_cpp = Tensor.add_, Tensor.mul_


def _add_(self, other, alpha=1.0):
    if isinstance(other, Tensor):
        return _add_cpp(self, other, alpha=builtins.float(alpha))
    return _in_place(self, self + builtins.float(other) * builtins.float(alpha), "add_")


def _sub_(self, other, alpha=1.0):
    return _add_(self, other, -builtins.float(alpha))


def _mul_(self, other):
    if isinstance(other, Tensor):
        return _in_place(self, self * other, "mul_")
    return _mul_cpp(self, builtins.float(other))


def _div_(self, other):
    if isinstance(other, Tensor):
        return _in_place(self, self / other, "div_")
    return _mul_cpp(self, 1.0 / builtins.float(other))


def _lerp_(self, end, weight):
    """self += weight * (end - self)."""
    return _in_place(self, self + (end - self) * weight, "lerp_")


def _random_fill(self, values, name):
    if self.is_distributed:
        raise NotImplementedError("%s on a DTensor: initialize the module before fully_shard / parallelize_module "
                                  "(torch's recommended order) or distribute_tensor a full tensor" % name)
    return _in_place(self, values.to(self.dtype), name)


def _normal_(self, mean=0.0, std=1.0, *, generator=None):
    """Fills self with N(mean, std²) samples from tessel's generator (tessel.manual_seed)."""
    return _random_fill(self, _C._randn(list(self.shape), generator, _C.dtype.float32) * builtins.float(std)
                        + builtins.float(mean), "normal_")


def _uniform_(self, a=0.0, b=1.0, *, generator=None):
    """Fills self with U(a, b) samples."""
    return _random_fill(self, _C._rand(list(self.shape), generator, _C.dtype.float32) * (builtins.float(b) - a)
                        + builtins.float(a), "uniform_")


def _data_get(self):
    """A handle to the same values that autograd does not track (torch's .data: the detached tensor)."""
    return self.detach()


def _data_set(self, value):
    """p.data = t: copies t's values into p (same shape), leaving p the same parameter object."""
    if tuple(value.shape) != tuple(self.shape):
        raise ValueError("Tensor.data = value: shape %s differs from the tensor's %s (tessel copies values "
                         "into the same tensor)" % (tuple(value.shape), tuple(self.shape)))
    self.detach().copy_(value.detach())


def _mm(self, other):
    """torch.mm: 2-D @ 2-D only."""
    if self.ndim != 2 or other.ndim != 2:
        raise RuntimeError("mm: expected 2-D tensors, got %d-D and %d-D (matmul broadcasts)" % (self.ndim, other.ndim))
    return self @ other


def _bmm(self, other):
    """torch.bmm: [b, n, m] @ [b, m, p] only."""
    if self.ndim != 3 or other.ndim != 3 or self.shape[0] != other.shape[0]:
        raise RuntimeError("bmm: expected 3-D tensors with the same batch, got shapes %s and %s"
                           % (tuple(self.shape), tuple(other.shape)))
    return self @ other


Tensor.mm = _mm
Tensor.bmm = _bmm
Tensor.max = _max
Tensor.min = _min
Tensor.argmax = _argmax
Tensor.argmin = _argmin
Tensor.add_ = _add_
Tensor.sub_ = _sub_
Tensor.mul_ = _mul_
Tensor.div_ = _div_
Tensor.lerp_ = _lerp_
Tensor.normal_ = _normal_
Tensor.uniform_ = _uniform_
Tensor.data = property(_data_get, _data_set)


# torch's function forms of the methods: tessel.sum(x, dim) == x.sum(dim), ...
FUNCTION_FORMS = ("sum", "mean", "mm", "bmm", "transpose", "reshape", "max", "min", "argmax", "argmin", "clamp",
                  "flatten", "permute", "unsqueeze", "squeeze", "chunk", "split", "norm", "pow", "amax", "neg",
                  "masked_fill", "narrow", "select", "detach", "clone")


def _function_form(name):
    def fn(input, *args, **kwargs):
        return getattr(input, name)(*args, **kwargs)
    fn.__name__ = name
    fn.__doc__ = "torch.%s(input, ...): input.%s(...)" % (name, name)
    return fn
