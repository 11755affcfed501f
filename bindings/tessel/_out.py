"""torch's out= argument: the result written into the tensor(s) given, resized to the result's shape as torch
does (with its deprecation warning when the tensor had elements), and returned. Used by the functions' fallback
overload (module.cc: _add_numpy_arg_names: write_out(result, out)) and by tessel/__init__.py's wrappers of the
functions written in Python (call(), which knows the function and its inputs and applies torch's rules per op).

torch's rules by op (each message as torch 2.15 prints it):
    default          the result type must cast to out's dtype ("result type Float can't be cast to the desired
                     output type Long"): binary and float unary ops, comparisons, remainder, addcmul, lerp, ...
    _SAME            out's dtype must be the result's ("Found dtype Float but expected Long"): abs, neg, clamp,
                     floor, round, sign, bitwise_not, ...
    _STRICT          out's dtype must be the result's, in C++ type names ("Expected out tensor to have dtype
                     float, but got double instead"): mm, matmul, sort, topk, max / min with a dim, argmax, ...
    _CAST_INPUT      sum / prod / cumsum / cumprod / nansum compute in out's dtype (the input cast first), mean /
                     nanmean / logsumexp in a wider floating out's; with dtype= out must have that dtype (_STRICT's
                     message)
    _FACTORIES       arange / linspace / zeros / ones / full make out's dtype ("dtype Float does not match dtype
                     of out parameter (Int)" for another dtype=), resized without the warning (arange: its own)
    amax / amin, where, cat / stack, nan_to_num, all / any, cummax / cummin / logcumsumexp, quantile: their own
The elementwise ops (and cat / stack) refuse an out that partly overlaps an input's memory, as torch's
TensorIterator ("unsupported operation: some elements of the input tensor and the written-to tensor refer to a
single memory location"); the same tensor (full overlap) is allowed.
"""
import warnings

from . import _C, _dtypes

Tensor = _C.Tensor

_SAME = frozenset("abs absolute neg negative clamp clip floor ceil round trunc fix sign bitwise_not".split())
_STRICT = frozenset("mm bmm matmul addmm sort topk aminmax argmax argmin max min softmax log_softmax".split())
_CAST_INPUT = frozenset("sum prod cumsum cumprod nansum".split())
_CAST_FLOAT_INPUT = frozenset("mean nanmean logsumexp".split())  # (into a wider floating out)
_FACTORIES = frozenset("arange linspace zeros ones full".split())
_CAT = frozenset("cat concat concatenate stack".split())
_NO_OUT = frozenset("argsort count_nonzero var_mean std_mean".split())  # torch: no out= overload
_OVERLAP_CHECKED = frozenset(
    "add sub mul div true_divide exp log sqrt abs neg pow sin cos tanh sigmoid clamp where maximum minimum outer "
    "eq ne lt gt le ge remainder fmod floor_divide bitwise_and bitwise_or bitwise_xor bitwise_not logical_and "
    "logical_or logical_xor logical_not floor ceil round trunc sign nan_to_num addcmul lerp cumsum cumprod cat "
    "concat concatenate stack subtract multiply divide absolute negative greater greater_equal less less_equal "
    "not_equal clip fix".split())

_RESIZED = ("An output with one or more elements was resized since it had shape %s, which does not match the "
            "required output shape %s. This behavior is deprecated, and in a future PyTorch release outputs will not "
            "be resized unless they have zero elements. You can explicitly reuse an out tensor t by resizing it, "
            "inplace, to zero elements with t.resize_(0).")
_OVERLAP = ("unsupported operation: some elements of the input tensor and the written-to tensor refer to a single "
            "memory location. Please clone() the tensor before performing the operation.")


def _name(d):
    from ._promotion import _name as name
    return name(d)


def _shape(shape):
    return "[%s]" % ", ".join(str(s) for s in shape)


def _invalid_combination(name, args, kwargs, out):
    """torch's argument parser's refusal of out= for a function (or a form of it) without one: "got (...)" lists
    each argument's type (Tensor for tensors)."""
    def kind(v):
        return "Tensor" if isinstance(v, Tensor) else type(v).__name__
    got = [kind(a) for a in args] + ["%s=%s" % (k, kind(v)) for k, v in dict(kwargs, out=out).items()]
    return TypeError("%s() received an invalid combination of arguments - got (%s), but expected one of:"
                     % (name, ", ".join(got)))


def _dense(t):
    """Whether t's elements fill its memory span without gaps or overlaps (torch's is_non_overlapping_and_dense)."""
    expected = 1
    for stride, size in sorted((st, s) for s, st in zip(t.shape, t.stride()) if s != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _partial_overlap(a, b):
    """torch's get_overlap_status(a, b) == Partial: two dense tensors of one storage whose memory spans
    intersect, unless they are the same span with the same strides (full overlap, allowed)."""
    if a is b or not a.numel() or not b.numel() or a.is_distributed or b.is_distributed:
        return False
    if a._storage()[0] != b._storage()[0] or not _dense(a) or not _dense(b):
        return False  # (torch leaves non-dense views unchecked: "too hard")
    a0, b0 = a.data_ptr(), b.data_ptr()
    a1, b1 = a0 + a.numel() * a.element_size(), b0 + b.numel() * b.element_size()
    if a0 == b0 and a1 == b1:
        return tuple(a.stride()) != tuple(b.stride())
    return a0 < b1 and b0 < a1


def _inputs(args, kwargs):
    for v in list(args) + list(kwargs.values()):
        if isinstance(v, Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            for t in v:
                if isinstance(t, Tensor):
                    yield t


def _tensor_type(d):
    return "torch.%sTensor" % _name(d)


_LONG = _dtypes.int64
# (values, indices) results whose dtype checks have messages of their own: name -> (values message, indices
# message), each from (the dtype wanted, out's dtype)
_PAIR_MESSAGES = {
    "median": (lambda want, got: "Expected tensor for 'values' to have the same type as tensor for argument #2 "
               "'self'; but type %s does not equal %s (while checking arguments for median)"
               % (_tensor_type(got), _tensor_type(want)),
               lambda want, got: "Expected tensor for argument #1 'indices' to have scalar type Long; but got %s "
               "instead (while checking arguments for median)" % _tensor_type(got)),
    "kthvalue": (lambda want, got: "output values must be of same type as input",
                 lambda want, got: "output indices must be of scalar type Long"),
    "mode": (lambda want, got: "expected scalar type '%s' but got '%s' for values output" % (_name(want), _name(got)),
             lambda want, got: "expected scalar type 'Long' but got '%s' for indices output" % _name(got)),
}
for _op in ("cummax", "cummin"):
    _PAIR_MESSAGES[_op] = (lambda want, got: "expected scalar_type %s but found %s" % (_name(want), _name(got)),) * 2


def _check_out_dtype(name, result, out, args, kwargs):
    """torch's per-op rule on out's dtype (see the module docstring); the default rule is write_out's."""
    if name in _PAIR_MESSAGES and isinstance(result, tuple) and isinstance(out, (tuple, list)):
        for r, o, message in zip(result, out, _PAIR_MESSAGES[name]):
            if isinstance(o, Tensor) and r.dtype != o.dtype:
                raise RuntimeError(message(r.dtype, o.dtype))
        return
    if isinstance(result, tuple) != isinstance(out, (tuple, list)):
        raise _invalid_combination(name, args, kwargs, out)  # (sort(x, out=t): torch's out is a tuple there)
    clamp_tensor = name in ("clamp", "clip") and any(isinstance(v, Tensor) for v in list(args[1:]) + list(
        kwargs.values()))  # (tensor bounds: the binary ops' rule)
    if name in _SAME and result.dtype != out.dtype and not clamp_tensor:
        raise RuntimeError("Found dtype %s but expected %s" % (_name(out.dtype), _name(result.dtype)))
    if name in ("amax", "amin") and args and isinstance(args[0], Tensor) and args[0].dtype != out.dtype:
        raise RuntimeError("Expected the dtype for input and out to match, but got %s for input's dtype and %s for "
                           "out's dtype." % (_name(args[0].dtype), _name(out.dtype)))
    if name == "where" and result.dtype != out.dtype:
        raise RuntimeError("Expected out type to be %s but got %s" % (_name(result.dtype), _name(out.dtype)))
    if name == "nan_to_num" and result.dtype != out.dtype:
        raise RuntimeError("nan_to_num: dtype of out: %s should be same as input: %s"
                           % (_name(out.dtype), _name(result.dtype)))
    if name in ("all", "any") and out.dtype != _dtypes.bool:
        raise RuntimeError("%s only supports bool tensor for result, got: %s" % (name, _name(out.dtype)))
    if name == "logcumsumexp" and result.dtype != out.dtype:
        raise RuntimeError("expected scalar_type %s but found %s" % (_name(result.dtype), _name(out.dtype)))
    if name == "quantile" and result.dtype != out.dtype:
        raise RuntimeError("quantile() out tensor must be same dtype as the input tensor")
    if name in _CAT:
        from ._promotion import can_cast
        if not can_cast(result.dtype, out.dtype):
            raise TypeError("torch.cat(): input types can't be cast to the desired output type %s" % _name(out.dtype))
    strict = name in _STRICT and (name not in ("max", "min") or isinstance(out, (tuple, list)))
    if strict or (kwargs.get("dtype") is not None and (name in _CAST_INPUT or name in _CAST_FLOAT_INPUT)):
        results = result if isinstance(result, tuple) else (result,)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        for r, o in zip(results, outs):
            if isinstance(r, Tensor) and isinstance(o, Tensor) and r.dtype != o.dtype:
                raise RuntimeError("Expected out tensor to have dtype %s, but got %s instead"
                                   % (_dtypes.c_type_name(r.dtype), _dtypes.c_type_name(o.dtype)))


def _factory(fn, name, args, kwargs, out):
    """arange / linspace / zeros / ones / full with out=: the values made in out's dtype and written in."""
    dtype = kwargs.get("dtype")
    if dtype is not None and dtype != out.dtype:
        raise RuntimeError("dtype %s does not match dtype of out parameter (%s)" % (_name(dtype), _name(out.dtype)))
    result = fn(*args, **dict(kwargs, dtype=out.dtype))  # (requires_grad=True is dropped, as torch's)
    if tuple(out.shape) != tuple(result.shape):
        if name == "arange" and out.numel() == result.numel():
            result = result.reshape(*out.shape)  # torch's arange keeps out's shape when the count matches
        else:
            if name == "arange":
                from ._tensor import user_stacklevel
                warnings.warn("The number of elements in the out tensor of shape %s is %d which does not match the "
                              "computed number of elements %d. Note that this may occur as a result of rounding "
                              "error. The out tensor will be resized to a tensor of shape (%d,)."
                              % (_shape(out.shape), out.numel(), result.numel(), result.numel()), UserWarning,
                              stacklevel=user_stacklevel())
            out.resize_(*result.shape)
    with _C._GradMode(False):
        out.copy_(result)
    return out


def call(fn, name, args, kwargs, out):
    """fn(*args, **kwargs) written into out with torch's rules for the function torch calls `name`."""
    if name in _NO_OUT:
        raise _invalid_combination(name, args, kwargs, out)
    if name in _FACTORIES and isinstance(out, Tensor):
        return _factory(fn, name, args, kwargs, out)
    if name == "where":  # torch's out= form takes tensors only
        for position, (arg, value) in enumerate(zip(("condition", "input", "other"), args)):
            if not isinstance(value, Tensor):
                raise TypeError("where(): argument '%s' (position %d) must be Tensor, not %s"
                                % (arg, position + 1, type(value).__name__))
    if name in _OVERLAP_CHECKED and isinstance(out, Tensor):
        for t in _inputs(args, kwargs):
            if _partial_overlap(t, out):
                raise RuntimeError(_OVERLAP)
    cast = False
    if name in _CAST_INPUT and isinstance(out, Tensor) and kwargs.get("dtype") is None:
        if name in ("sum", "prod") and len(args) < 2 and "dim" not in kwargs:
            raise _invalid_combination(name, args, kwargs, out)  # torch: no out= without a dim
        cast = True
    elif name in _CAST_FLOAT_INPUT and isinstance(out, Tensor) and kwargs.get("dtype") is None and args and \
            isinstance(args[0], Tensor) and args[0].dtype.is_floating_point and out.dtype.is_floating_point:
        from ._promotion import promote_types
        cast = promote_types(args[0].dtype, out.dtype) == out.dtype  # (into a narrower out: computed, then cast)
    if cast and args and isinstance(args[0], Tensor) and args[0].dtype != out.dtype:
        args = (args[0].to(out.dtype),) + tuple(args[1:])  # torch reduces in out's dtype
    result = fn(*args, **kwargs)
    if cast and isinstance(result, Tensor) and result.dtype != out.dtype:
        result = result.to(out.dtype)  # (a bool out: the sum of bools, an int64, is its truth)
    _check_out_dtype(name, result, out, args, kwargs)
    return write_out(result, out, name)


def _check_grad(name, result, out):
    if _C.is_grad_enabled() and (out.requires_grad or (isinstance(result, Tensor) and result.requires_grad)):
        raise RuntimeError("%sfunctions with out=... arguments don't support automatic differentiation, but one of "
                           "the arguments requires grad." % ("%s(): " % name if name else ""))


def write_out(result, out, name=None):
    """result written into out (a tensor, or a tuple / list of them for (values, indices) results), resized to
    result's shape with torch's warning when out had elements; torch's default dtype rule (a result type that
    casts to out's dtype). `name`: the function's, for the messages."""
    if isinstance(out, (tuple, list)):  # (values, indices) forms: torch.max(x, 1, out=(v, i))
        if not isinstance(result, tuple) or len(result) != len(out):
            n = len(result) if isinstance(result, tuple) else 1
            raise TypeError("expected tuple of %d elements but got %d" % (n, len(out)))
        for r, o in zip(result, out):
            write_out(r, o, name)
        return type(out)(out) if isinstance(out, tuple) else out
    if not isinstance(out, Tensor):
        raise TypeError("out= must be a Tensor, got %s" % type(out).__name__)
    _check_grad(name, result, out)
    if isinstance(result, Tensor) and result.dtype != out.dtype:
        from ._promotion import can_cast
        if not can_cast(result.dtype, out.dtype):  # torch's rule: a float result never truncates into an int out
            raise RuntimeError("result type %s can't be cast to the desired output type %s"
                               % (_name(result.dtype), _name(out.dtype)))
    if tuple(out.shape) != tuple(result.shape):
        if out.numel():
            from ._tensor import user_stacklevel
            warnings.warn(_RESIZED % (_shape(out.shape), _shape(result.shape)), UserWarning,
                          stacklevel=user_stacklevel())
        out.resize_(*result.shape)
    with _C._GradMode(False):
        out.copy_(result)
    return out
