"""torch idioms that ported scripts use on every page, as thin Python over bound ops (each converts its
arguments and calls ops of tessel._C; nothing computes here): Tensor.argmax / argmin, max(dim) and
min(dim) as (values, indices) named tuples, in-place add_/sub_/mul_/div_/lerp_ with scalars, the in-place
initializers normal_ / uniform_, and Tensor.data.

    acc = (logits.argmax(dim=-1) == y).float().mean()
    with tessel.no_grad():
        w.normal_(0.0, 0.02); b.zero_(); p.data.mul_(0.5)
"""
import builtins

import numpy as np

from . import _C, _dtensor_compose, _dtypes, _inplace, return_types
from ._clamp import _PLAIN_FLOATS, _clamp
from ._device import CPU as _CPU
from ._tensor import (  # module-level: a function-level import cost ~0.4 us per call of topk / sort / gather
    _contiguous_strides, _float_draw, _host_numpy, _indices_like, _internal_index, _torch_dtype_name, tensor,
    user_stacklevel, wrap_dim, zero_dim_as_vector, zeros_like)

Tensor = _C.Tensor
_max_cpp = Tensor.max

values_indices = return_types.max
_min_result = return_types.min
_sort_result = return_types.sort
_topk_result = return_types.topk


def _inplace_operator(name, method, out_of_place):
    """a += b: in place, as torch. Where autograd must see it (grad mode on and either operand requiring grad:
    `h += residual` in a forward, `h[:, 0] *= 2`) it is recorded as tessel/_inplace.py records add_: a's data
    and history become the result's, and a base or views sharing a's memory see the write with torch's
    histories. A leaf that requires grad raises, as torch; a shared DTensor gets the out-of-place result as a
    new tensor instead."""
    aten = {"__iadd__": "add_", "__isub__": "sub_", "__imul__": "mul_", "__itruediv__": "div_"}[name]

    def op(self, other):
        if self.is_distributed:  # torch's refusal where a Partial self cannot stay Partial (P += 2)
            _inplace.refuse_partial_change(self, aten, (other,))
        tracked = _C.is_grad_enabled() and (self.requires_grad or (isinstance(other, Tensor) and other.requires_grad))
        if tracked:
            if self.is_distributed and not self._sole_handle():
                _inplace._check_leaf(self, name)
                return out_of_place(self, other)
            return _inplace.record(self, name, lambda x: out_of_place(x, other))
        return method(self, other)
    op.__name__ = name
    return op


def _plain_fast_in_place(aten, op):
    """op behind the C++ front of `aten` for a plain self; a DTensor self keeps op's own checks."""
    fast = _C._fast_in_place(aten, op)

    def dispatch(self, other):
        if self.is_distributed:
            return op(self, other)
        return fast(self, other)
    dispatch.__name__ = op.__name__
    return dispatch


def _max(self, dim=None, keepdim=False):
    """max() over everything, (values, indices) along dim (torch.return_types.max), or with a tensor in place
    of dim the elementwise maximum (torch.max(a, b))."""
    if isinstance(dim, Tensor):
        from ._extra import maximum
        return maximum(self, dim)
    if dim is None:
        if not self.requires_grad:  # fast path: what evenly_distributed does without a gradient to share
            return _max_cpp(self)
        from ._order import evenly_distributed
        return evenly_distributed(self, _max_cpp)  # ties and a NaN result share the gradient as torch's
    v, i = _max_cpp(self, dim, keepdim)
    return values_indices(v, i)


def _flipped(self):
    """An order-reversing map that cannot overflow: -x for floats, -1 - x (= ~x) for integers (-x of the
    most negative int64 is itself, which made min() skip it)."""
    dtype = self.dtype
    if dtype.value == _BOOL:
        return self.logical_not()
    return -self if dtype.is_floating_point else (-1) - self


_BOOL = _C.dtype.bool.value


def _min(self, dim=None, keepdim=False):
    if isinstance(dim, Tensor):
        from ._extra import minimum
        return minimum(self, dim)
    if dim is None:
        if not self.requires_grad:  # fast path: what evenly_distributed does without a gradient to share
            return _flipped(_max_cpp(_flipped(self)))
        from ._order import evenly_distributed
        return evenly_distributed(self, lambda x: _flipped(_max_cpp(_flipped(x))))
    v, i = _max_cpp(_flipped(self), dim, keepdim)
    return _min_result(_flipped(v), i)


def _argmax(self, dim=None, keepdim=False):
    """Index of the largest entry (the first on ties, as torch); dim=None: into the flattened tensor
    (keepdim=True: shaped [1, ..., 1]). A Partial DTensor is all-reduced first, as torch's argmax handler does
    (it never reduce-scatters one onto another dim, as max(dim) may)."""
    if self.is_distributed and any(p.is_partial() for p in self.placements):
        self = self.redistribute(placements=[_C.Replicate() if p.is_partial() else p for p in self.placements])
    if dim is None:
        i = _max_cpp(self.reshape(-1), 0, False)[1]
        return i.reshape(*([1] * self.ndim)) if keepdim else i
    return _max_cpp(self, dim, keepdim)[1]


def _argmin(self, dim=None, keepdim=False):
    return _argmax(_flipped(self), dim, keepdim)


def _in_place(self, value, name):
    """Writes value (a tensor of self's shape) into self: under no_grad, or on tensors that need no grad."""
    _check_in_place(self, name)
    return self.copy_(value)


def _check_in_place(self, name):
    """Refuses an in-place write autograd would need to record (torch's leaf / version errors)."""
    if self.requires_grad and _C.is_grad_enabled():
        if self.is_leaf:
            raise RuntimeError("%s: a leaf tensor that requires grad is used in an in-place operation (wrap it in "
                               "`with tessel.no_grad():`)" % name)
        raise RuntimeError("%s on a tensor that requires grad (the result of an op autograd recorded) is not "
                           "recorded by tessel's autograd: write the out-of-place form (e.g. `x = x + y`), or "
                           "collect per-step results in a list and tessel.stack them" % name)


_add_cpp, _mul_cpp = Tensor.add_, Tensor.mul_


# dtype.value of float32 / float64: the dtypes whose add_ / mul_ take the plain C++ kernel (pybind's dtype ==
# costs ~0.5 us, an int compare nothing)


def _add_(self, other, alpha=1):
    if alpha.__class__ is not builtins.int:  # torch's alpha check (a float alpha into an integer result raises)
        from ._promotion import check_alpha_of
        check_alpha_of(self, other, alpha)
    if isinstance(other, Tensor):  # fast path: a float32 / float64 tensor plus one of its dtype (as below)
        d = self.dtype.value
        if (d == _PLAIN_FLOATS[0] or d == _PLAIN_FLOATS[1]) and other.dtype.value == d:
            return _add_cpp(self, other, alpha=builtins.float(alpha))
    _check_int_target(self, other, "add_")
    low = self.dtype in _dtypes.REDUCED
    if isinstance(other, Tensor):
        if self.dtype.is_floating_point and other.dtype == self.dtype:
            if low and alpha != 1:  # torch's vector kernel takes alpha in the tensor's dtype
                alpha = _C._full([], builtins.float(alpha), self.dtype).item()
            return _add_cpp(self, other, alpha=builtins.float(alpha))
        # integers (T5's `buckets += where(...)`), long += bool, float32 += float64: computed promoted, written
        # back in self's dtype, as torch's
        return _in_place(self, self + (other * alpha if alpha != 1 else other), "add_")
    if low and alpha != 1:  # torch: the number and alpha in the tensor's dtype, self + alpha * other in float32
        from ._namespace import _scaled_add
        return _in_place(self, _scaled_add(self, other, alpha), "add_")
    scaled = other * alpha if isinstance(other, builtins.int) and isinstance(alpha, builtins.int) else \
        builtins.float(other) * builtins.float(alpha)
    return _in_place(self, self + scaled, "add_")


def _sub_(self, other, alpha=1):
    if self.dtype == _C.dtype.bool and isinstance(other, Tensor) and other.dtype == _C.dtype.bool:
        raise NotImplementedError("Subtraction, the `-` operator, with two bool tensors is not supported. Use the "
                                  "`^` or `logical_xor()` operator instead.")
    if alpha.__class__ is not builtins.int:  # checked before the negation (-True is an int)
        from ._promotion import check_alpha_of
        check_alpha_of(self, other, alpha)
    return _add_(self, other, -alpha)


def _check_int_target(self, other, name=None):
    """torch's in-place dtype rule, checked before computing: the result type of self and other must cast to
    self's dtype ("result type Float can't be cast to the desired output type Long", without the method's name:
    torch's message has none). A floating self takes every real result."""
    if self.dtype.is_floating_point:
        return
    from ._promotion import _name, can_cast, result_type
    result = result_type(self, other)
    if not can_cast(result, self.dtype):
        raise RuntimeError("result type %s can't be cast to the desired output type %s"
                           % (_name(result), _name(self.dtype)))


def _mul_(self, other):
    if (type(other) is builtins.float or type(other) is builtins.int) and self.dtype.is_floating_point:
        return _mul_cpp(self, builtins.float(other))  # fast path: what the checks below come to for these
    _check_int_target(self, other, "mul_")
    if isinstance(other, Tensor):
        return _in_place(self, self * other, "mul_")
    if not self.dtype.is_floating_point:
        return _in_place(self, self * builtins.int(other), "mul_")
    return _mul_cpp(self, builtins.float(other))


def _div_(self, other):
    if not self.dtype.is_floating_point:  # true division of an integer tensor is a float
        from ._promotion import _name, result_type
        result = result_type(self, other)
        result = result if result.is_floating_point or result.is_complex else _dtypes.default_float()
        raise RuntimeError("result type %s can't be cast to the desired output type %s"
                           % (_name(result), _name(self.dtype)))
    return _in_place(self, self / other, "div_")  # x / 0 is inf, as torch (no Python ZeroDivisionError)


def _normal_(self, mean=0.0, std=1.0, *, generator=None):
    """Fills self with N(mean, std²) samples from tessel's generator (tessel.manual_seed)."""
    _float_draw(self.dtype, "normal_kernel_cpu")
    if not std >= 0:  # (NaN too)
        raise RuntimeError("normal expects std >= 0.0, but found std %s" % std)
    if self.is_distributed:  # a random fill keeps no Partial placement: torch's refusal
        _inplace.refuse_partial_change(self, "normal_")
    _check_in_place(self, "normal_")
    # mean + std·z in double, rounded once to self's dtype; a DTensor draws only its own piece of the draw the
    # whole tensor would get (every rank advancing the generator by the global numel).
    _C._fill_random_(self, "normal", builtins.float(mean), builtins.float(std), generator)
    return self


# torch's check_uniform_bounds: the C++ type names its bounds messages use (its limits message: _torch_dtype_name).
_UNIFORM_TYPE_NAMES = {"Float": "float", "Double": "double", "Half": "c10::Half", "BFloat16": "c10::BFloat16"}


_FINITE_MAX = {}  # floating dtype -> its largest finite value (finfo made per call cost uniform_ ~8 us of 10.6)


def _check_uniform_bounds(dt, a, b):
    """torch's check_uniform_bounds: from <= to, both finite values of the dtype, and to - from not overflowing
    it (here the draw gave inf or the dtype's max)."""
    if not a <= b:
        raise RuntimeError("uniform_ expects to return a [from, to) range, but found from=%g > to=%g" % (a, b))
    top = _FINITE_MAX.get(dt)
    if top is None:
        top = _FINITE_MAX[dt] = _dtypes.finfo(dt).max
    if -top <= a <= top and -top <= b <= top and b - a <= top:
        return
    name = _torch_dtype_name(dt)
    if not -top <= a <= top:
        raise RuntimeError("from is out of bounds for %s" % _UNIFORM_TYPE_NAMES[name])
    if not -top <= b <= top:
        raise RuntimeError("to is out of bounds for %s" % _UNIFORM_TYPE_NAMES[name])
    if b - a > top:
        raise RuntimeError("uniform_ expects to-from <= std::numeric_limits<%s>::max(), but found to=%g and from=%g "
                           "which result in to-from to exceed the limit" % (name, b, a))


def _uniform_(self, a=0.0, b=1.0, *, generator=None):
    """Fills self with U(a, b) samples (below b in self's dtype)."""
    _float_draw(self.dtype, "check_uniform_bounds")
    _check_uniform_bounds(self.dtype, a, b)
    if self.is_distributed:  # a random fill keeps no Partial placement: torch's refusal
        _inplace.refuse_partial_change(self, "uniform_")
    _check_in_place(self, "uniform_")
    _C._fill_random_(self, "uniform", builtins.float(a), builtins.float(b), generator)
    return self


def _data_get(self):
    """A handle to the same values that autograd does not track (torch's .data): detach() with a version counter
    of its own, so p.data.mul_(2) between forward and backward is not "modified by an inplace operation" and
    leaves p._version alone, as in torch."""
    return self._variable_data()


def _data_set(self, value):
    """p.data = t, as torch: p (every handle of it: the module's parameter, an optimizer's) takes t's data, shape
    and dtype, sharing t's memory, and stays the same leaf with its requires_grad and .grad (loralib transposes
    weights so; Module.to(dtype) casts parameters so). A DTensor, or t on another device, is copied into p's own
    memory instead (same shape)."""
    if self.requires_grad and not (value.dtype.is_floating_point or value.dtype.is_complex):
        raise RuntimeError("data set to a tensor that requires gradients must be floating point or complex dtype")
    if (not self.is_distributed and not value.is_distributed and value.device == self.device
            and self.grad_fn is None):
        self._set_data(value.detach())
        return
    if tuple(value.shape) != tuple(self.shape):
        raise ValueError("Tensor.data = value: shape %s differs from the tensor's %s (a %s is updated by copying "
                         "values into it)" % (tuple(value.shape), tuple(self.shape),
                                              "DTensor" if self.is_distributed or value.is_distributed
                                              else "tensor on another device or with autograd history"))
    self.detach().copy_(value.detach())


def _mm(self, other):
    """torch.mm: 2-D @ 2-D only."""
    if self.ndim != 2 or other.ndim != 2:
        raise RuntimeError("mm: expected 2-D tensors, got %d-D and %d-D (matmul broadcasts)" % (self.ndim, other.ndim))
    return self @ other


def _bmm(self, other):
    """torch.bmm: [b, n, m] @ [b, m, p] only."""
    if self.ndim != 3 or other.ndim != 3 or self.size(0) != other.size(0):
        raise RuntimeError("bmm: expected 3-D tensors with the same batch, got shapes %s and %s"
                           % (tuple(self.shape), tuple(other.shape)))
    return self @ other


def _T(self):
    """torch's .T: the tensor itself below 2-D, the transpose in 2-D, all dims reversed above (deprecated
    in torch for ndim > 2 but still what it computes)."""
    ndim = self.ndim
    if ndim == 2:  # (the common case, without building the range)
        return self.permute(1, 0)
    if ndim < 2:
        return self
    return self.permute(*range(ndim - 1, -1, -1))


def _mT(self):
    if self.ndim == 0:  # torch 2.15: a 0-d tensor is its own transpose
        return self
    if self.ndim < 2:
        raise RuntimeError("tensor.mT is only supported on matrices or batches of matrices. Got %d-D tensor."
                           % self.ndim)
    return self.transpose(-2, -1)


def _unfold(self, dimension, size, step):
    """Tensor.unfold: every window of `size` entries along `dimension`, `step` apart, as a new last dim."""
    from ._extra import index_select
    d = wrap_dim(dimension, self.ndim)
    length = self.shape[d] if self.ndim else 1
    if size < 0:
        raise RuntimeError("size is %d but must be >= 0" % size)
    if step <= 0:
        raise RuntimeError("step is %d but must be > 0" % step)
    if size > length:
        raise RuntimeError("maximum size for tensor at dimension %d is %d but size is %d" % (d, length, size))
    count = (length - size) // step + 1
    if self.ndim == 0:  # torch: the only element's window, [size]
        return self.reshape(1).narrow(0, 0, size)
    if not self.is_distributed:  # torch's unfold is a view: the windows share self's memory
        sizes, strides = list(self.shape), list(self.stride())
        try:
            return self.as_strided(sizes[:d] + [count] + sizes[d + 1:] + [size],
                                   strides[:d] + [strides[d] * step] + strides[d + 1:] + [strides[d]],
                                   self.storage_offset())
        except NotImplementedError as e:
            # autograd's as_strided refuses a view over an overlapping one (x.unfold(2, k, s).unfold(3, k, s)
            # with s < k, requiring grad): the windows are gathered instead (the same values and gradients; not
            # a view of self's memory)
            if "share memory" not in str(e):
                raise
    if self.is_distributed:  # d not sharded: the windows of each rank's piece, a view written through
        from ._dtensor_like import local_view
        view = local_view(self, lambda local: _unfold(local, d, size, step),
                          {i: i for i in range(self.ndim) if i != d},
                          list(self.shape[:d]) + [count] + list(self.shape[d + 1:]) + [size])
        if view is not None:
            return view
    index = (np.arange(count)[:, None] * step + np.arange(size)[None, :]).reshape(-1)
    picked = index_select(self, d, tensor(index.astype(np.int64)))
    shape = list(self.shape)
    shape[d:d + 1] = [count, size]
    return picked.reshape(*shape).movedim(d + 1, -1)


Tensor.unfold = _unfold
_numpy_of = Tensor.numpy


def _numpy(self, *, force=False):
    """torch's Tensor.numpy(force=): force=True is t.detach().numpy() (tessel's tensors are on the CPU already
    and hold no lazy conjugate or negative bits); the array shares the tensor's memory either way."""
    return _numpy_of(self.detach() if force else self)


Tensor.numpy = _numpy


class UntypedStorage:
    """torch's untyped_storage() as a read-only view of the bytes a tensor and its views share: nbytes(),
    size(), data_ptr() (equal for tensors over the same memory, the usual aliasing check), device, element_size
    1. Resizing or writing through it is not offered (tessel's allocator owns and counts those bytes)."""

    def __init__(self, address, nbytes):
        self._address, self._nbytes = address, nbytes
        self.device = _device_cpu()

    def nbytes(self):
        return self._nbytes

    size = nbytes

    def data_ptr(self):
        return self._address

    def element_size(self):
        return 1

    def __len__(self):
        return self._nbytes

    def __repr__(self):
        return "UntypedStorage(data_ptr=0x%x, nbytes=%d)" % (self._address, self._nbytes)


def _device_cpu():
    from ._device import device
    return device("cpu")


Tensor.untyped_storage = lambda self: UntypedStorage(*self._storage())
Tensor.T = property(_T)
Tensor.mT = property(_mT)
Tensor.clamp = _clamp
# a += b through the C++ front of add_ (bindings/inplace_py.cc): the Python operator cost ~2.4 us a call against
# torch's 0.66. add_ / sub_ take that front for DTensors too (a tensor operand keeps any Partial, as
# refuse_partial_change says; a number goes to the Python rules); mul_ / div_ only for plain tensors, since a
# Partial(max) self must still meet refuse_partial_change's refusal.
Tensor.__iadd__ = _C._fast_in_place(
    "add_", _inplace_operator("__iadd__", lambda a, b: _add_(a, b), lambda a, b: a + b))
Tensor.__isub__ = _C._fast_in_place(
    "sub_", _inplace_operator("__isub__", lambda a, b: _sub_(a, b), lambda a, b: a - b))
Tensor.__imul__ = _plain_fast_in_place(
    "mul_", _inplace_operator("__imul__", lambda a, b: _mul_(a, b), lambda a, b: a * b))
Tensor.__itruediv__ = _plain_fast_in_place(
    "div_", _inplace_operator("__itruediv__", lambda a, b: _div_(a, b), lambda a, b: a / b))


def _augmented(name, method):
    """a //= b, a %= b, a **= b, a &= b, a |= b, a ^= b: in place through the method (recorded by autograd where
    it must be), as torch; without these Python rebinds `a` to a new tensor and aliases, views and buffers keep
    the old values."""
    def op(self, other):
        _check_int_target(self, other)  # (torch checks the cast first: int_t &= 1.5 is a cast error)
        return getattr(self, method)(other)
    op.__name__ = name
    return op


for _name, _method in (("__ifloordiv__", "floor_divide_"), ("__imod__", "remainder_"), ("__ipow__", "pow_"),
                       ("__iand__", "bitwise_and_"), ("__ior__", "bitwise_or_"), ("__ixor__", "bitwise_xor_")):
    setattr(Tensor, _name, _augmented(_name, _method))
class _HookHandle:
    """register_hook's handle (torch's RemovableHandle): remove() takes the hook out of its tensor's (or node's)
    C++ list, freeing it; `with x.register_hook(f):` removes it on exit; `id` is unique per handle."""
    _next_id = [0]

    def __init__(self, holder, remover):
        self._holder, self._remover = holder, remover
        self.id = _HookHandle._next_id[0]
        _HookHandle._next_id[0] += 1

    def remove(self):
        self._holder[0] = None
        remover, self._remover = self._remover, None
        if remover is not None:
            remover()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def _register_hook(self, hook):
    """torch's Tensor.register_hook: hook(grad) returns a replacement gradient or None."""
    holder = [hook]

    def call(grad):
        fn = holder[0]
        return None if fn is None else fn(grad)

    return _HookHandle(holder, self._register_hook(call))


Tensor.register_hook = _register_hook


def _node_hook(pre):
    def register(self, hook):
        holder = [hook]

        def call(*grads):
            fn = holder[0]
            return None if fn is None else fn(*grads)

        return _HookHandle(holder, self._register_hook(call, pre))
    return register


# torch's grad_fn.register_prehook(hook(grad_outputs)) and register_hook(hook(grad_inputs, grad_outputs)): each
# returns replacement gradients or None; on a parameter's AccumulateGrad node (p.expand_as(p).grad_fn.
# next_functions[0][0]) the hook runs once the gradient is in p.grad (Megatron / DeepSpeed DDP's ready signal).
_C._Node.register_prehook = _node_hook(True)
_C._Node.register_hook = _node_hook(False)


def _register_post_accumulate_grad_hook(self, hook):
    """torch's Tensor.register_post_accumulate_grad_hook: hook(tensor) runs right after a backward pass added
    into this leaf's .grad (the optimizer-in-backward pattern: step and free each gradient as it is ready). The
    hook gets this very tensor object (a Parameter stays the same key of the caller's dicts). On a fully_shard
    parameter it runs once its reduce-scatter has set the sharded .grad (as torch's FSDP2), so optimizer-in-
    backward steps each shard during the backward."""
    import weakref
    if not self.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    if not self.is_leaf:
        raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
    holder = [hook]
    try:
        ref = weakref.ref(self)  # not the object itself: the C++ hook would keep it alive for good
    except TypeError:
        ref = None

    def call(leaf):
        fn = holder[0]
        if fn is not None:
            target = ref() if ref is not None else None
            if fn(target if target is not None else leaf) is not None:
                raise RuntimeError("Tensor post accumulate grad hooks should return None.")  # (torch's)

    return _HookHandle(holder, self._register_post_accumulate_grad_hook(call))


Tensor.register_post_accumulate_grad_hook = _register_post_accumulate_grad_hook
Tensor.mm = _mm
Tensor.bmm = _bmm
Tensor.max = _max
_squeeze_cpp = Tensor.squeeze


def _squeeze(self, dim=None):
    """squeeze(), squeeze(d), or squeeze((d1, d2, ...)) (torch 2.0's tuple of dims; sizes other than 1 stay)."""
    if isinstance(dim, (tuple, list)):
        out = self
        wrapped = [d % builtins.max(self.ndim, 1) for d in dim]
        for d in wrapped:
            if wrapped.count(d) > 1:
                raise RuntimeError("dim %d appears multiple times in the list of dims" % d)
        for d in sorted(set(wrapped), reverse=True):
            out = _squeeze_cpp(out, d)
        return out
    return _squeeze_cpp(self, dim)


Tensor.squeeze = _squeeze
Tensor.min = _min
Tensor.argmax = _argmax
Tensor.argmin = _argmin
Tensor.add_ = _add_
Tensor.sub_ = _sub_
Tensor.mul_ = _mul_
Tensor.div_ = _div_
Tensor.normal_ = _normal_
Tensor.uniform_ = _uniform_
Tensor.data = property(_data_get, _data_set)


# torch's function forms of the methods: tessel.sum(x, dim) == x.sum(dim), ...
@zero_dim_as_vector
def _var(self, dim=None, unbiased=None, keepdim=False, *, correction=None, _op="var"):
    """torch.var: Σ (x - mean)² / max(0, N - correction) over dim (all dims when None); correction 1
    (Bessel's) unless unbiased=False or correction= says otherwise. N - correction <= 0 gives inf or NaN."""
    if not self.dtype.is_floating_point:
        raise NotImplementedError("%s only support floating point and complex dtypes"
                                  % (_op if _op.endswith("_mean") else "std and var"))
    if isinstance(dim, builtins.bool):  # torch's var(unbiased) overload: x.var(False) is the biased var
        dim, unbiased = None, dim
    # accumulated in float64 as torch's CPU Welford: 1e30 in float32 overflowed
    if self.dtype.value != _PLAIN_FLOATS[1]:
        return _var(self.to(_C.dtype.float64), dim, unbiased, keepdim, correction=correction, _op=_op).to(self.dtype)
    return _var64(self, dim, unbiased, keepdim, correction, _op)


def _var64(self, dim, unbiased, keepdim, correction, op="var"):
    """_var's body, on a float64 tensor."""
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    if dim is None or (not isinstance(dim, builtins.int) and len(dim) == 0):  # [] means every dim, as torch
        dims = list(range(self.ndim))
    else:
        dims = [dim] if isinstance(dim, builtins.int) else list(dim)
    n = 1
    for d in dims:
        n *= self.shape[d]
    if n - correction <= 0:  # torch's warning (the result is inf or nan)
        import warnings
        warnings.warn("%s(): degrees of freedom is <= 0. Correction should be strictly less than the reduction factor "
                      "(input numel divided by output numel)." % op, UserWarning, stacklevel=user_stacklevel())
    self = _dtensor_compose.for_nonlinear_reduction(self, dims)  # a DTensor: torch's layout for var
    mean = self.mean(dims, keepdim=True)
    squares = ((self - mean) * (self - mean)).sum(dims, keepdim=keepdim)
    return squares / builtins.float(builtins.max(0, n - correction))


@zero_dim_as_vector
def _std(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """torch.std: the square root of var (same arguments), taken in float64 before the cast back (the std of
    1e30s is finite in float32 where their var is not)."""
    if isinstance(dim, builtins.bool):
        dim, unbiased = None, dim
    wide = self.to(_C.dtype.float64) if self.dtype.is_floating_point else self
    return _sqrt_zero_grad(_var(wide, dim, unbiased, keepdim, correction=correction, _op="std")).to(self.dtype)


def _sqrt_zero_grad(v):
    """sqrt whose gradient is 0 where the result is 0 (torch's std and 2-norm backward: a constant feature or an
    all-zero vector gave NaN gradients, inf · 0)."""
    if not (v.requires_grad and _C.is_grad_enabled()):
        return v.sqrt()
    if not _SQRT_ZERO_GRAD:
        from .autograd import Function

        class SqrtZeroGrad(Function):
            @staticmethod
            def forward(ctx, x):
                out = x.sqrt()
                ctx.save_for_backward(out)
                return out

            @staticmethod
            def backward(ctx, g):
                out, = ctx.saved_tensors
                safe = _C._functional.where(out > 0, out, _C._full([], 1.0, out.dtype))
                return _C._functional.where(out > 0, g * 0.5 / safe, _C._full([], 0.0, g.dtype))
        _SQRT_ZERO_GRAD.append(SqrtZeroGrad)
    return _SQRT_ZERO_GRAD[0].apply(v)


_SQRT_ZERO_GRAD = []  # the autograd Function, made on first use (tessel.autograd imports this module)


Tensor.var = _var
Tensor.std = _std
_norm_cpp = Tensor.norm


def _norm(self, p="fro", dim=None, keepdim=False, out=None, dtype=None):
    """Tensor.norm / torch.norm(input, p, dim, keepdim, out, dtype): dtype casts the input first, as torch's."""
    if not self.dtype.is_floating_point:  # (checked before dtype's cast, as torch's)
        from ._dtype_errors import vector_norm_error
        raise vector_norm_error(self)
    result = _norm_cpp(self if dtype is None else self.to(dtype), p, dim, keepdim)
    if out is not None:
        return out.copy_(result)
    return result


Tensor.norm = _norm

FUNCTION_FORMS = ("sum", "mean", "var", "std", "mm", "bmm", "transpose", "reshape", "max", "min", "argmax", "argmin",
                  "clamp", "flatten", "permute", "unsqueeze", "squeeze", "chunk", "split", "norm", "pow", "amax", "neg",
                  "masked_fill", "narrow", "select", "detach", "clone", "as_strided")


def split(tensor, split_size_or_sections, dim=0):
    """torch.split(tensor, split_size_or_sections, dim=0) (the method's argument is split_size)."""
    return tensor.split(split_size_or_sections, dim)


def _function_form(name):
    def fn(input, *args, **kwargs):
        return getattr(input, name)(*args, **kwargs)
    fn.__name__ = name
    fn.__doc__ = "torch.%s(input, ...): input.%s(...)" % (name, name)
    return fn


_to_dtype = Tensor.to  # the C++ cast


def _to(self, *args, **kwargs):
    """Tensor.to(dtype | device | other tensor, non_blocking=, copy=, memory_format=): casts; a CPU device is
    where the tensor already is, any other raises (tessel._device); memory_format lays the result out so
    (tessel/_tensor_extras.py)."""
    if len(args) == 1 and not kwargs and type(args[0]) is _C.dtype:
        # fast path, x.to(dtype) with one of _C's dtypes: parse_to_args gives (dtype, None, False) for it
        dtype = args[0]
        return self if dtype is self.dtype or dtype.value == self.dtype.value else _to_dtype(self, dtype)
    if len(args) == 1 and (args[0] is _CPU or (type(args[0]) is str and args[0] == "cpu")) and \
            (not kwargs or kwargs.keys() == {"non_blocking"}):
        return self  # fast path, x.to(device): the CPU is where the Python face's tensors are (4.9 -> 0.3 µs)
    from ._device import parse_to_args
    from ._complex import ComplexDType, complex as _complex_of
    wanted = [a for a in args if isinstance(a, ComplexDType)] + [kwargs.get("dtype")] * isinstance(
        kwargs.get("dtype"), ComplexDType)
    if wanted:  # a real tensor as complex64 / complex128: its values as the real part, a zero imaginary part
        real = self.to(wanted[0].real)
        return _complex_of(real, _C._full(list(real.shape), 0.0, real.dtype))
    fmt = kwargs.get("memory_format")
    dtype, _, copy = parse_to_args(args, kwargs, "Tensor.to", allow_copy=True)
    out = self if dtype is None or dtype == self.dtype else _to_dtype(self, dtype)
    out = out.clone() if copy and out is self else out
    if fmt is not None and getattr(fmt, "_name", None) != "preserve_format":
        out = out.contiguous(memory_format=fmt)
    return out


def _cuda(self, *args, **kwargs):
    raise NotImplementedError("Tensor.cuda(): tessel's Python face computes on the CPU "
                              "(tessel.cuda.is_available() is False)")


Tensor.to = _to
Tensor.cpu = lambda self, memory_format=None: self
Tensor.cuda = _cuda
_DEVICES = []  # [CPU, meta], imported when first asked for


def _tensor_device(self):
    """CPU, or meta for a tensor built under tessel.device("meta") until to_empty (is_meta), as torch's."""
    if not _DEVICES:
        from ._device import CPU, device
        _DEVICES.extend([CPU, device("meta")])
    return _DEVICES[self.is_meta]


Tensor.device = property(_tensor_device)
Tensor.is_cuda = property(lambda self: False)
Tensor.is_cpu = property(lambda self: not self.is_meta)



# ---- torch functions composed from indexing (values through one gather, so gradients flow) ----

def _tri(self, diagonal, upper):
    """tril / triu over the last two dims: the kept entries are self's (a where against zeros)."""
    if self.ndim < 2:
        raise RuntimeError("%s: input tensor must have at least 2 dimensions" % ("triu" if upper else "tril"))
    rows, cols = self.shape[-2], self.shape[-1]
    keep = np.triu(np.ones((rows, cols), dtype=bool), diagonal) if upper else \
        np.tril(np.ones((rows, cols), dtype=bool), diagonal)
    return _C._functional.where(_internal_index(self, tensor(keep)), self, zeros_like(self))


def _whole_along(x, dim):
    """Whether x is a DTensor whose dim is whole on every rank (no Shard of it, no Partial), so that a sort,
    topk or gather along dim runs on each rank's piece and keeps x's layout (torch's strategies for them)."""
    if not x.is_distributed or x.ndim == 0:
        return False
    d = dim % x.ndim
    return not builtins.any(isinstance(p, _C.Partial) or (isinstance(p, _SHARDS) and p.dim % x.ndim == d)
                            for p in x.placements)


_SHARDS = (_C.Shard, _C._StridedShard)  # placements that split a dim


def _rewrap(x, local, shape):
    """Each rank's result `local` (laid out as x's pieces) as a DTensor of global `shape` (differentiable)."""
    return _C.from_local(local, x.device_mesh, list(x.placements), list(shape), _contiguous_strides(shape), False)


def _gather(self, dim, index, *, sparse_grad=False):
    """torch.gather: out[i][j][k] = self[index[i][j][k]][j][k] for dim 0 (and so on), index no larger than
    self in the other dims. Two DTensors laid out alike, dim whole and the sharded dims of equal size, gather
    on each rank's pieces (no communication, the layout kept); so does a replicated self with a sharded index
    (the output laid out as the index, by_index_pieces)."""
    if isinstance(index, Tensor) and index.is_distributed and _whole_along(self, dim) and \
            builtins.all(p.is_replicate() for p in index.placements) and index.device_mesh == self.device_mesh and \
            builtins.all(self.shape[p.dim] == index.shape[p.dim] for p in self.placements if p.is_shard()):
        index = index.redistribute(self.device_mesh, list(self.placements))  # (a local slice) torch's layout
    if isinstance(index, Tensor) and index.is_distributed and _whole_along(self, dim) and \
            index.device_mesh == self.device_mesh and tuple(index.placements) == tuple(self.placements) and \
            builtins.all(self.shape[p.dim] == index.shape[p.dim] for p in self.placements if isinstance(p, _SHARDS)):
        return _rewrap(self, _gather(self.to_local(), dim, index.to_local()), index.shape)
    if isinstance(index, Tensor) and index.is_distributed and index.ndim == self.ndim and self.ndim > 0:
        d0 = dim % self.ndim
        aligned = {d for d in range(self.ndim) if d != d0 and self.shape[d] == index.shape[d]}
        if builtins.all(p.dim % index.ndim in aligned | {d0} for p in index.placements if p.is_shard()):
            # (an index sharded along a dim where it is shorter than self: the general path)
            out = _dtensor_compose.by_index_pieces(self, index, lambda xl, il: _gather(xl, dim, il), index.shape,
                                                   index.placements, aligned, along=d0)
            if out is not None:
                return out
    dim = wrap_dim(dim, self.ndim)
    out = _gather_plain(self, dim, index)
    if out is not None:
        return out
    idx = index.numpy() if isinstance(index, Tensor) else np.asarray(index)
    if idx.dtype.kind not in "iu":
        raise RuntimeError("gather(): Expected dtype int32/int64 for index")
    if idx.ndim != self.ndim:
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    for d in range(self.ndim):  # torch: the index may be no longer than self in the other dims
        if d != dim and idx.shape[d] > self.shape[d]:
            raise RuntimeError("Size does not match at dimension %d expected index %s to be no larger than self %s "
                               "apart from dimension %d" % (d, list(idx.shape), list(self.shape), dim))
    size = self.shape[dim] if self.ndim else 1
    if idx.size and (idx.min() < 0 or idx.max() >= size):  # no wrap-around, as torch
        bad = idx[(idx < 0) | (idx >= size)].reshape(-1)[0]
        raise RuntimeError("index %d is out of bounds for dimension %d with size %d" % (bad, dim, size))
    if self.ndim == 0:  # torch: a 0-d tensor gathers its own only element
        return self.clone()
    grids = list(np.indices(idx.shape, sparse=True))
    grids[dim] = idx.astype(np.int64)
    return self[tuple(np.broadcast_to(g, idx.shape) for g in grids)]


def _gather_plain(self, dim, index):
    """torch.gather of plain (non-distributed) tensors in C++ (core/ops/index_dim.h, differentiable, any dtype).
    None where the general path must answer (DTensors, empty or 0-d tensors, an index that is not int64, longer
    than self in another dim, or out of range: torch's errors)."""
    if not isinstance(index, Tensor) or index.is_distributed or self.is_distributed or \
            index.dtype != _dtypes.int64 or self.ndim == 0 or index.ndim != self.ndim or self.numel() == 0 or \
            index.numel() == 0:
        return None
    d = dim % self.ndim
    x = self
    for k in range(self.ndim):
        if k != d and index.shape[k] != x.shape[k]:
            if index.shape[k] > x.shape[k]:
                return None
            x = x.narrow(k, 0, index.shape[k])  # torch reads only index's extent of the other dims
    try:
        return _C._functional._gather_dim(x, d, index)
    except (IndexError, RuntimeError, ValueError):
        return None


def _sort_indices(self, dim, descending):
    """The stable sorting permutation along dim, NaN above every number: a plain int64 tensor computed in C++
    (core/ops/scan_sort.h) for a plain tensor; None for the general path (DTensors, empty, 0-d or complex
    tensors)."""
    return _along_rows(self, dim, lambda rows: _C._functional._sort_indices(rows, bool(descending), rows.shape[-1]))


def _topk_indices(self, dim, k, largest, sorted):
    """torch.topk's indices along dim, ties in torch's order (core/ops/scan_sort.h TopKIndicesLastDim), or None
    for the general path (as _sort_indices)."""
    return _along_rows(self, dim, lambda rows: _C._functional._topk_indices(rows, k, bool(largest), bool(sorted)))


def _along_rows(self, dim, fn):
    """fn over self's rows along dim (a [rows, n] view with dim last), its [rows, m] result moved back to dim."""
    if not isinstance(self, Tensor) or self.is_distributed or self.ndim == 0 or self.numel() == 0 or self.is_complex():
        return None
    d = wrap_dim(dim, self.ndim)  # torch's IndexError for an out-of-range dim (argsort returns this directly)
    last = d == self.ndim - 1  # the common case: no dim moves, and a matrix is its own [rows, n]
    moved = self.detach() if last else self.detach().movedim(d, -1)
    n = moved.shape[-1]
    order = fn(moved if moved.ndim == 2 else moved.reshape(-1, n))
    if moved.ndim != 2:
        order = order.reshape(tuple(moved.shape[:-1]) + (order.shape[-1],))
    return order if last else order.movedim(-1, d)


def _sort_order(self, dim, descending):
    """The stable sorting permutation along dim (numpy, int64): ties keep their order (torch's default
    may not), NaN last ascending and first descending, as torch."""
    a = _host_numpy(self)
    if descending:  # stable and without negating (bools, INT64_MIN): an ascending pass over the reversed axis
        f = np.flip(a, axis=dim)
        if np.issubdtype(a.dtype, np.floating):  # NaN as the largest value (first when descending)
            order = np.lexsort((np.where(np.isnan(f), 0, f), np.isnan(f)), axis=dim)
        else:
            order = np.argsort(f, axis=dim, kind="stable")
        order = np.flip(a.shape[dim] - 1 - order, axis=dim)
    else:
        order = np.argsort(a, axis=dim, kind="stable")
    return np.ascontiguousarray(order).astype(np.int64)


def _sort(self, dim=-1, descending=False, stable=False):
    """(values, indices) along dim, the values through one gather (so gradients flow)."""
    if self.ndim == 0:
        return _sort_result(self, tensor(np.zeros((), dtype=np.int64)))
    if _whole_along(self, dim):  # each rank sorts its pieces (torch keeps the layout)
        values, indices = _sort(self.to_local(), dim, descending, stable)
        return _sort_result(_rewrap(self, values, self.shape), _rewrap(self, indices, self.shape))
    order = _sort_indices(self, dim, descending)
    if order is not None:
        return _sort_result(_gather(self, dim, order), order)
    order = _sort_order(self, dim, descending)
    values = _gather(self, dim, order)
    return _sort_result(values, _indices_like(values, order))


@zero_dim_as_vector
def _topk(self, k, dim=-1, largest=True, sorted=True):
    dim = wrap_dim(dim, self.ndim)  # torch's IndexError (self.shape[dim] raised "tuple index out of range")
    if not 0 <= k <= self.shape[dim]:
        raise RuntimeError("selected index k out of range")
    if _whole_along(self, dim):  # each rank's pieces (torch keeps the layout)
        values, indices = _topk(self.to_local(), k, dim, largest, sorted)
        shape = list(self.shape)
        shape[dim] = k
        return _topk_result(_rewrap(self, values, shape), _rewrap(self, indices, shape))
    order = _topk_indices(self, dim, k, largest, sorted)
    if order is not None:
        return _topk_result(_gather(self, dim, order), order)
    order = np.take(_sort_order(self, dim, largest), np.arange(k), axis=dim)
    values = _gather(self, dim, order)
    return _topk_result(values, _indices_like(values, order))


def _argsort(self, dim=-1, descending=False, stable=False):
    if self.ndim == 0:
        return tensor(np.zeros((), dtype=np.int64))
    if _whole_along(self, dim):
        return _rewrap(self, _argsort(self.to_local(), dim, descending, stable), self.shape)
    order = _sort_indices(self, dim, descending)
    if order is not None:
        return order
    return _indices_like(self, _sort_order(self, dim, descending), dim)


def _multinomial(self, num_samples, replacement=False, *, generator=None):
    """torch.multinomial on the CPU, draw for draw (tessel._host_random): without replacement or for one sample,
    torch's fast path (weights / exponential noise, then argmax or topk; zero-weight categories tied at 0 come
    in index order, where torch's topk leaves ties in its selection's order), else aten's cumulative-sum search.
    From `generator` or the default one, so a generator seeded as in a torch script gives torch's samples."""
    from . import _host_random
    if not self.dtype.is_floating_point:
        raise RuntimeError("multinomial only supports floating-point dtypes for input, got: %s" % self.dtype)
    if self.dim() not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    if self.shape[-1] > 1 << 24:
        raise RuntimeError("number of categories cannot exceed 2^24")
    weights = self.detach()
    # the weights on the host once, as aten's with-replacement loop sums them: float32 for float16 / bfloat16
    own = weights if self.dtype in (_dtypes.float64, _dtypes.float32) else weights.float()
    rows = own.contiguous().numpy().reshape(self.shape[0] if self.dim() == 2 else 1, self.shape[-1])
    _host_random.check_multinomial(rows, num_samples, replacement)
    if not replacement or num_samples == 1:
        noise = _host_random.exponential_values(weights.numel(), 1.0, generator)
        ratio = weights / tensor(noise.reshape(tuple(self.shape))).to(self.dtype)
        if num_samples == 1:
            return ratio.argmax(dim=-1, keepdim=True)
        return ratio.topk(num_samples).indices
    drawn = _host_random.multinomial_with_replacement(rows, num_samples, generator)
    return tensor(drawn.reshape(tuple(self.shape[:-1]) + (num_samples,)))


Tensor.tril = lambda self, diagonal=0: _tri(self, diagonal, False)
Tensor.triu = lambda self, diagonal=0: _tri(self, diagonal, True)
Tensor.gather = _gather
Tensor.sort = _sort
Tensor.argsort = _argsort
Tensor.topk = _topk
Tensor.multinomial = _multinomial
FUNCTION_FORMS = FUNCTION_FORMS + ("tril", "triu", "gather", "sort", "argsort", "topk", "multinomial")


def _index(self):
    """A one-element integer (or bool: torch's True is 1) tensor used as a Python index (data[i:i + T],
    range(t), [a, b][mask_scalar]), as torch."""
    if self.numel() != 1 or self.dtype.is_floating_point:
        raise TypeError("only integer tensors of a single element can be converted to an index")
    return builtins.int(self.item())


def _contains(self, element):
    """torch's `element in t`: whether any entry equals element (a number or a tensor), any shape (a 2-D or 0-d
    tensor fell back to iteration: ambiguous truth value / not iterable)."""
    import numbers
    if isinstance(element, (Tensor, numbers.Number)):
        return builtins.bool((element == self).any().item())
    raise RuntimeError("Tensor.__contains__ only supports Tensor or scalar, but you passed in a %s."
                       % type(element))


def _reversed(self):
    """torch's reversed(t): t flipped along dim 0 (a 0-d tensor itself), a new tensor (Python's row iterator
    returned views of t's rows)."""
    return self if self.dim() == 0 else self.flip(0)


Tensor.__index__ = _index
Tensor.__contains__ = _contains
Tensor.__reversed__ = _reversed
