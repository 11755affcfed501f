"""In-place Tensor methods (add_, mul_, clamp_, masked_fill_, copy_, ...) recorded by autograd, as torch records
them: where grad mode is on and the tensor or an argument requires grad, the op's out-of-place result is
computed and becomes the tensor (record()). A tensor nothing else shares (Tensor._sole_handle: no view of it, no
module holding it, no op that saved it for backward) is simply pointed at the result (Tensor._rebind_); any other
dense tensor gets the result written into its memory, so its base and every view see it, and the histories
torch gives them (core/ops/strided_view.h: the base's grad_fn becomes CopySlices, the views read it through
as_strided), so `h[:, 0] += 1`, `v = h.view(-1); v.mul_(2)`, `x.diagonal().zero_()` and `out[:, t] = f(t)` train
as in torch, and a tensor an op saved for backward that the write changed is caught at backward, as in torch.
A leaf that requires grad (or a view of one) refuses, as torch; a DTensor that others share raises (write the
out-of-place form). Outside autograd the methods write in place as before.
"""
import builtins

from . import _C, _dtypes

Tensor = _C.Tensor
_is_grad_enabled = _C.is_grad_enabled


def _extra():
    from . import _extra
    return _extra


def _composed():
    from . import _composed
    return _composed


def _replaced(self, value, fresh=False):
    """value, still connected to self's graph with a zero gradient (torch's fill_/zero_/copy_ keep
    requires_grad on a tensor that had it). The where saves value for its backward, so a value that may share
    memory with self (`x[:, :2] = x[:, :2] * 3` written through a view) is cloned first unless `fresh`: the write
    would otherwise change what was saved. The condition (and a fill's value) are 0-d, broadcast by the where:
    replicated scalars next to a DTensor self."""
    everywhere = _C._full([], 1.0, _C.dtype.bool)
    return _C._functional.where(everywhere, value if fresh else value.clone(), self)


def _scaled(self, other, alpha):
    """self + alpha · other as torch's add_ computes it, one fused multiply-add in the compute type (the recorded
    form rounded alpha · other first: ~5-26% of the values of bfloat16 and float32 differed from torch's)."""
    from ._namespace import _scaled_add, fused_scaled_add
    if not isinstance(other, Tensor):
        return self + other * alpha
    fused = fused_scaled_add(self, other, alpha)
    return fused if fused is not None else _scaled_add(self, other, alpha)  # (mixed dtypes: promoted, then fused)


def _added(self, other, alpha, sign):
    """add_ / sub_ (sign -1) recorded: torch's alpha check, then self + sign · alpha · other."""
    from ._promotion import check_alpha_of
    check_alpha_of(self, other, alpha)
    if alpha != 1:
        return _scaled(self, other, sign * alpha)
    return self + other if sign > 0 else self - other


# name -> the out-of-place result (self's shape; dtype cast back to self's)
_OUT_OF_PLACE = {
    "add_": lambda self, other, alpha=1: _added(self, other, alpha, 1),
    "sub_": lambda self, other, alpha=1: _added(self, other, alpha, -1),
    "mul_": lambda self, other: self * other,
    "div_": lambda self, other, rounding_mode=None: self.div(other, rounding_mode=rounding_mode)
    if rounding_mode is not None else self / other,
    "clamp_": lambda self, min=None, max=None: self.clamp(min, max),
    "clip_": lambda self, min=None, max=None: self.clamp(min, max),
    "masked_fill_": lambda self, mask, value: self.masked_fill(mask, value),
    "fill_": lambda self, value: _replaced(self, value.to(self.dtype).expand(*self.shape)) if isinstance(value, Tensor)
    else _replaced(self, _C._full([], float(value), self.dtype), fresh=True),
    "zero_": lambda self: _replaced(self, _C._full([], 0.0, self.dtype), fresh=True),
    "copy_": lambda self, src, non_blocking=False: _replaced(self, src.to(self.dtype).expand(*self.shape)),
    "lerp_": lambda self, end, weight: self.lerp(end, weight),
    "clamp_min_": lambda self, min: self.clamp(min, None),
    "clamp_max_": lambda self, max: self.clamp(None, max),
    "floor_": lambda self: self.floor(),
    "ceil_": lambda self: self.ceil(),
    "round_": lambda self, decimals=0: self.round(decimals=decimals),
    "trunc_": lambda self: self.trunc(),
    "reciprocal_": lambda self: self.reciprocal(),
    "log_": lambda self: self.log(),
    "addcmul_": lambda self, tensor1, tensor2, value=1: _composed().addcmul(self, tensor1, tensor2, value=value),
    "addcdiv_": lambda self, tensor1, tensor2, value=1: _composed().addcdiv(self, tensor1, tensor2, value=value),
    "index_add_": lambda self, dim, index, source, alpha=1: _extra().index_add(self, dim, index, source, alpha=alpha),
    "scatter_": lambda self, *a, **k: self.scatter(*a, **k),
    "scatter_add_": lambda self, *a, **k: self.scatter_add(*a, **k),
    "scatter_reduce_": lambda self, *a, **k: self.scatter_reduce(*a, **k),
    "relu_": lambda self: self.relu(),
    "sigmoid_": lambda self: self.sigmoid(),
    "tanh_": lambda self: self.tanh(),
    "exp_": lambda self: self.exp(),
    "neg_": lambda self: -self,
    "pow_": lambda self, exponent: self.pow(exponent),
    "sqrt_": lambda self: self.sqrt(),
    "abs_": lambda self: abs(self),
}


def _check_leaf(self, name):
    if self.is_leaf and self.requires_grad:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation (%s; wrap it "
                           "in `with tessel.no_grad():`)" % name)


def _fitted(self, name, result):
    """result with self's dtype (and a DTensor self's placements: an in-place op keeps its tensor's layout, as
    torch's); a result of another shape is torch's broadcast error."""
    if tuple(result.shape) != tuple(self.shape):
        raise RuntimeError("%s: output with shape %s doesn't match the broadcast shape %s"
                           % (name, list(self.shape), list(result.shape)))
    if self.is_distributed and tuple(result.placements) != tuple(self.placements):
        result = result.redistribute(self.device_mesh, list(self.placements))
    return result if result.dtype == self.dtype else result.to(self.dtype)


def _recorded(self, name, result):
    """self (nothing else sharing it) becomes result: same values and history as a write."""
    self._rebind_(_fitted(self, name, result))
    return self


def record(self, name, compute):
    """self.<name>(...) under autograd, compute(x) giving the op's out-of-place value from x: self rebound to it
    when nothing else shares self, otherwise written into self's memory with torch's histories for self, its
    base and their views (the value is computed from a clone, so an op that saves its input keeps the old
    value)."""
    _check_leaf(self, name)
    base = self._base
    retaining = [t for t in (self, base) if t is not None and t.retains_grad]
    out = _record(self, name, compute)
    for t in retaining:  # torch's retain_grad follows the tensor (and a view's base) to its new version: .grad was
        t.retain_grad()  # lost, or was the old version's gradient
    return out


def _record(self, name, compute):
    if self.is_distributed:  # a view op's copy (x[2:6] of a Shard(0) DTensor): the write would be lost, refused
        self._check_writes_through(name)  # as the dispatcher refuses it outside autograd
    if self._sole_handle():
        return _recorded(self, name, compute(self))
    if self.is_distributed:
        hint = ("write the out-of-place form, e.g. `x = x.%s(...)`" % name[:-1] if name.endswith("_") else
                "build the result out of place (tessel.stack / cat / where)")
        raise RuntimeError("%s on a DTensor that requires grad (or with an argument that does), which something "
                           "else shares (a view of it, a module holding it, an op that saved it for backward): "
                           "tessel records in-place writes into DTensors only by rebinding an unshared one: %s"
                           % (name, hint))
    self._record_in_place(_fitted(self, name, compute(self.clone())))
    return self


def _any_requires_grad(args, kwargs):
    for a in args:
        if isinstance(a, Tensor) and a.requires_grad:
            return True
    for a in kwargs.values():
        if isinstance(a, Tensor) and a.requires_grad:
            return True
    return False


_NO_GRAD_VIEW = ("A view was created in no_grad mode and is being modified inplace with grad mode enabled. Given that "
                 "this use case is ambiguous and error-prone, it is forbidden. You can clarify your code by moving "
                 "both the view and the inplace either both inside the no_grad block (if you don't want the inplace "
                 "to be tracked) or both outside (if you want the inplace to be tracked).")


def _check_no_grad_view(self):
    """torch's refusal: in grad mode, an in-place write into a view made under no_grad of a tensor that requires
    grad (the write dropped the path through the base's old value: wrong gradients; a leaf changed unseen). The
    view does not require grad although its base does: only a no_grad view is so."""
    if not self.requires_grad:
        base = self._base
        if base is not None and base.requires_grad:
            raise RuntimeError(_NO_GRAD_VIEW)


# In-place ops torch's DTensor keeps on a Partial(sum / avg) tensor: linear in it, so each rank's piece takes
# the op (a number added is not: it would be counted once per rank).
_LINEAR = frozenset(("mul_", "multiply_", "div_", "divide_", "true_divide_", "neg_", "negative_", "cumsum_"))
# ... and on a Partial(max / min) one: non-decreasing, so the largest (smallest) piece stays so (torch's
# non_decreasing_unary_ops); a negative factor or a clamp is not kept there.
_MONOTONE = frozenset(("asinh_", "arcsinh_", "atan_", "arctan_", "ceil_", "deg2rad_", "erf_", "exp_", "exp2_",
                       "expm1_", "floor_", "nan_to_num_", "rad2deg_", "relu_", "round_", "sgn_", "sigmoid_",
                       "sign_", "sinh_", "tanh_", "trunc_", "fix_"))
_SUMS = frozenset(("add_", "sub_", "subtract_"))  # kept on any Partial when the other operand is a tensor
# Left to the layout rules of the op itself (C++ dispatch, fill_'s own refusal): torch keeps some of these on a
# Partial (copy_, index_add_, fill_, zero_) and tessel's rules answer the rest in their own words.
_NOT_JUDGED = frozenset(("fill_", "zero_", "copy_", "index_add_", "index_copy_", "index_fill_", "scatter_",
                         "scatter_add_", "scatter_reduce_", "masked_scatter_", "addmm_", "addbmm_", "baddbmm_",
                         "addmv_", "addr_", "inplace"))
_ATEN = {"multiply_": "mul_", "divide_": "div_", "true_divide_": "div_", "negative_": "neg_", "subtract_": "sub_",
         "absolute_": "abs_", "clip_": "clamp_", "square_": "pow_", "float_power_": "pow_", "fix_": "trunc_"}


def _aten_name(name, args, kwargs):
    """torch's name for the op in its refusal (aten.add_.Tensor, aten.relu_.default, aten.pow_.Scalar)."""
    op = _ATEN.get(name, name)
    if name in ("square_", "float_power_"):
        overload = "Scalar"
    elif op in ("add_", "sub_", "mul_", "div_"):
        overload = "Tensor_mode" if kwargs.get("rounding_mode") is not None else "Tensor"
    elif op.startswith("clamp") or op == "cumsum_" or not (args or kwargs):
        overload = "default"
    else:
        overload = "Tensor" if isinstance((list(args) + list(kwargs.values()))[-1], Tensor) else "Scalar"
    return "aten.%s.%s" % (op, overload)


def refuse_partial_change(self, name, args=(), kwargs=None):
    """torch's refusal of an in-place op on a Partial DTensor whose result could not stay Partial (tessel
    reduced it and computed, or raised a redistribute error from inside the op): P.add_(2), P.relu_(),
    P.clamp_(0, 1). Returns quietly for the ops torch keeps on it."""
    placements = self.placements
    ops = [p.reduce_op for p in placements if p.is_partial()]
    if not ops or name in _NOT_JUDGED or "dropout" in name:
        return
    kwargs = kwargs or {}
    if name in _SUMS:
        if isinstance(args[0] if args else kwargs.get("other"), Tensor):
            return
    elif name in _LINEAR:
        if builtins.all(op in ("sum", "avg") for op in ops) and kwargs.get("rounding_mode") is None:
            return
    elif name in _MONOTONE:
        if builtins.all(op in ("max", "min") for op in ops):
            return
    raise RuntimeError("%s: in-place operations that require placement changes are not supported. The input has "
                       "placement %r, but no valid strategy preserves this placement. Please use the out-of-place "
                       "version of this operation instead." % (_aten_name(name, args, kwargs), tuple(placements)))


# The methods above whose result can be floating for an integer tensor (the C++ ones cast it back).
_MAY_FLOAT = frozenset(("exp_", "sqrt_", "log_", "reciprocal_", "pow_"))


# torch names the target by its C++ type in these ops' cast errors ("... output type long int")
_C_TYPE_NAMED = frozenset(("clamp_min_", "clamp_max_", "clip_"))
# in-place ops whose result dtype an integer or bool self is checked against before computing (as torch's
# TensorIterator: x.addcmul_(float_t, t) computed in float and truncated; int_t.bitwise_and_(1.5) leaked numpy's
# TypeError)
_CAST_FIRST = frozenset(("addcmul_", "addcdiv_", "bitwise_and_", "bitwise_or_", "bitwise_xor_"))


def _check_cast(name, result, target):
    """torch's in-place rule: a `result` dtype the tensor's `target` dtype cannot hold raises (without the op's
    name: torch's message has none)."""
    from ._promotion import _name, can_cast
    if not can_cast(result, target):
        to = _dtypes.c_type_name(target) if name in _C_TYPE_NAMED else _name(target)
        raise RuntimeError("result type %s can't be cast to the desired output type %s" % (_name(result), to))


def _wrap(name, original, out_of_place):
    def method(self, *args, **kwargs):
        if name in _CAST_FIRST and not self.dtype.is_floating_point:
            from ._promotion import result_type
            _check_cast(name, result_type(self, *[a for a in args if isinstance(a, (Tensor, int, float))]),
                        self.dtype)
        if self.is_distributed:
            refuse_partial_change(self, name, args, kwargs)
        # the checks of _check_no_grad_view and _any_requires_grad inlined (every in-place op pays them)
        if _is_grad_enabled():
            if self.requires_grad:
                return record(self, name, lambda x: out_of_place(x, *args, **kwargs))
            base = self._base
            if base is not None and base.requires_grad:
                raise RuntimeError(_NO_GRAD_VIEW)
            if (args or kwargs) and _any_requires_grad(args, kwargs):
                return record(self, name, lambda x: out_of_place(x, *args, **kwargs))
        if original is None or (name in _MAY_FLOAT and not self.dtype.is_floating_point):
            # a method torch has that tessel wrote only out of place, or an integer / bool tensor under an op
            # whose result may be floating: the result copied in, with torch's in-place dtype rule (int.exp_()
            # raises there, "result type Float can't be cast to the desired output type Long"; the C++ method
            # truncated)
            with _C._GradMode(False):
                result = out_of_place(self, *args, **kwargs)
                if not self.dtype.is_floating_point:
                    _check_cast(name, result.dtype, self.dtype)
                    result = _fitted(self, name, result)
                return self.copy_(result)
        return original(self, *args, **kwargs)
    method.__name__ = name
    method.__doc__ = "torch's Tensor.%s: in place; recorded by autograd (see tessel/_inplace.py)" % name
    return method


def apply(x, compute, name="inplace"):
    """An activation's inplace=True (F.relu(x, inplace=True), nn.ReLU(inplace=True), F.elu_(x), F.dropout(...,
    inplace=True)): x holds compute(x) and is returned, as torch's. Under autograd it is recorded as Tensor's
    in-place methods are (record(): x repointed when nothing else shares it, else written into its memory with
    torch's histories; a leaf that requires grad refuses); otherwise the result is written into x (its views
    and a DTensor's shards see it). compute runs once. One exception: under autograd, a DTensor that something
    else shares (a module call's argument) cannot be written with a history, so the result comes back as a new
    tensor and x keeps its values (`x = act(x)`, what module code does, is unaffected)."""
    if x.is_distributed:
        refuse_partial_change(x, name)
    if _C.is_grad_enabled() and x.requires_grad:
        if x.is_distributed and not x._sole_handle() and not (x.is_leaf and x.requires_grad):
            return compute(x)
        return record(x, name, compute)
    with _C._GradMode(False):
        return x.copy_(_fitted(x, name, compute(x)))


def honours_inplace(fn):
    """fn(x, ..., inplace=False), computed out of place, made to honour inplace=True (by keyword or position)
    through apply()."""
    import functools
    import inspect
    sig = inspect.signature(fn)
    names = list(sig.parameters)
    at = names.index("inplace")

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        if not (kwargs.get("inplace") or (len(args) > at and args[at])):
            return fn(*args, **kwargs)
        bound = sig.bind(*args, **kwargs)
        bound.arguments["inplace"] = False

        def compute(t):
            bound.arguments[names[0]] = t
            return fn(*bound.args, **bound.kwargs)
        return apply(bound.arguments[names[0]], compute, fn.__name__ + "_")
    return wrapped


# The methods optimizers call per parameter per step: a C++ front (bindings/inplace_py.cc) runs the op where
# autograd records nothing and no promotion is needed, and calls the method installed here otherwise.
_FAST = ("add_", "sub_", "mul_", "div_", "lerp_", "addcmul_", "addcdiv_", "zero_", "copy_", "clamp_")


def install():
    for name, out_of_place in _OUT_OF_PLACE.items():
        setattr(Tensor, name, _wrap(name, getattr(Tensor, name, None), out_of_place))
    for name in _FAST:
        setattr(Tensor, name, _C._fast_in_place(name, getattr(Tensor, name)))
    Tensor.masked_fill_ = _plain_masked_fill_(Tensor.masked_fill_)


def _plain_masked_fill_(recording):
    """x.masked_fill_(mask, number) of plain tensors with nothing to record: the C++ masked_fill and one copy_
    (through the wrappers ~10 us against torch's 2); anything else, and every error (nothing is written before
    it), goes through `recording`, the method wrapped above."""
    from ._setitem import _masked_fill_cpp
    copy = Tensor.copy_

    def masked_fill_(self, mask, value):
        if mask.__class__ is Tensor and value.__class__ in _NUMBERS and not self.is_distributed and \
                not mask.is_distributed and (not _is_grad_enabled() or (not self.requires_grad and self._base is None)):
            try:
                filled = _masked_fill_cpp(self, mask, value)
            except _C.InvalidArgumentError:
                return recording(self, mask, value)  # its own words for the mistake
            return copy(self, filled)
        return recording(self, mask, value)
    masked_fill_.__doc__ = recording.__doc__
    return masked_fill_


_NUMBERS = (builtins.float, builtins.int, builtins.bool)
