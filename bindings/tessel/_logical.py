"""torch's logical and bitwise operators (& | ^ ~, logical_* / bitwise_*), comparisons by name and other small
torch functions and Tensor methods, composed in Python; split from _extra.py by concept. Importing it
registers them in _extra's TORCH_FUNCTIONS / TENSOR_METHODS.
"""
import builtins
import math
import sys

import numpy as np

from . import _C, _dtypes
from ._autocast_policy import autocast_off as _autocast_off
from ._dtensor_compose import gathered_along, shape_only
from ._tensor import wrap_dim
from ._extra import TENSOR_METHODS, TORCH_FUNCTIONS, Tensor, _new_full, _tensor, isfinite, prod
from ._extra import sized as _sized


# ---- logical and bitwise operators, comparisons by name, and other small torch functions ----------------

def _any_all(x, dim, keepdim, every):
    """torch.any / torch.all: bool, or uint8 for a uint8 input (torch's); NaN is nonzero. A plain CPU tensor over
    everything or one dim is one C++ loop (_C._any_all); the rest (DTensors, several dims) counts nonzeros."""
    if (dim is None or type(dim) is builtins.int) and type(x) is Tensor:
        out = _any_all_cpp(x, dim, keepdim, every)
        if out is not None:
            return out
    if dim is None:
        s = (x == 0 if every else x != 0).long().sum()
    else:
        s = (x == 0 if every else x != 0).long().sum(dim, keepdim=keepdim)
    out = s == 0 if every else s > 0
    return out.to(_dtypes.uint8) if x.dtype is _dtypes.uint8 else out


def any_(x, dim=None, keepdim=False):
    return _any_all(x, dim, keepdim, False)


def all_(x, dim=None, keepdim=False):
    return _any_all(x, dim, keepdim, True)


_any_all_cpp = _C._any_all
TORCH_FUNCTIONS.update(any=any_, all=all_)
TENSOR_METHODS.update(any=any_, all=all_)


def _truth(x):
    """A tensor's truth values (nonzero, NaN included, is True), as torch's logical ops read them."""
    if not isinstance(x, Tensor):
        return x
    return x if x.dtype.value == _BOOL else x != 0


_BOOL = _dtypes.bool.value  # (dtypes compared by value: pybind's == costs ~0.5 us)


def _as_bool_tensor(x, like):
    return x if isinstance(x, Tensor) else _C._full([], float(bool(x)), _dtypes.bool).expand_as(like)


def _dense_pair(a, b):
    """Both plain dense tensors (no DTensor, no subclass): where the fast paths below apply."""
    return type(a) is Tensor and type(b) is Tensor and not a.is_distributed and not b.is_distributed


def logical_and(a, b):
    a, b = _truth(a), _truth(b)
    if _dense_pair(a, b):  # fast path: a's False entries are the False the general path expands (same shape)
        return _C._functional.where(a, b, a)
    if not isinstance(a, Tensor):
        a, b = b, a
    return _C._functional.where(a, _as_bool_tensor(b, a), _as_bool_tensor(False, a)) if isinstance(b, Tensor) \
        else (a if b else _as_bool_tensor(False, a))


def logical_or(a, b):
    a, b = _truth(a), _truth(b)
    if _dense_pair(a, b):  # fast path: a's True entries are the True the general path expands
        return _C._functional.where(a, a, b)
    if not isinstance(a, Tensor):
        a, b = b, a
    return _C._functional.where(a, _as_bool_tensor(True, a), _as_bool_tensor(b, a)) if isinstance(b, Tensor) \
        else (_as_bool_tensor(True, a) if b else a)


def logical_xor(a, b):
    a, b = _truth(a), _truth(b)
    if not isinstance(a, Tensor):
        a, b = b, a
    return a != (_as_bool_tensor(b, a) if not isinstance(b, Tensor) else b)


def logical_not(a):
    return _truth(a) == False  # noqa: E712 (an elementwise comparison, not a Python truth test)


def _host_bitwise(op, name):
    """Integer bitwise ops (no gradient: integers carry none) on the host; bool tensors take the logical ops."""
    logical = {"and": logical_and, "or": logical_or, "xor": logical_xor}[op] if op != "not" else logical_not

    def fn(a, b=None):
        if b is not None and type(a) is Tensor and type(b) is Tensor and a.dtype.value == _BOOL and \
                b.dtype.value == _BOOL:  # fast path, mask & mask: what the checks below pick for it
            return logical(a, b)
        tensors = [t for t in (a, b) if isinstance(t, Tensor)]
        if all(t.dtype == _dtypes.bool for t in tensors) and all(isinstance(v, (bool, Tensor, np.bool_))
                                                                 for v in (a, b) if v is not None):
            return logical(a) if op == "not" else logical(a, b)
        if any(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in (a, b)):
            # bool_tensor & 1: an integer result, as torch promotes (a Python int over bool)
            a, b = (v.to(_dtypes.int64) if isinstance(v, Tensor) and v.dtype == _dtypes.bool else v for v in (a, b))
        from ._namespace import _name, result_type  # a 0-d operand does not widen a dimensioned one (uint8 & 3)
        dtype = a.dtype if op == "not" else result_type(a, b)
        if dtype.is_floating_point or dtype.is_complex:
            # torch's kernels take integers and bools only (int_tensor & 1.5 leaked numpy's TypeError)
            raise NotImplementedError("\"%s_cpu\" not implemented for '%s'" % (name, _name(dtype)))
        av = a.numpy() if isinstance(a, Tensor) else a
        if op == "not":
            return _tensor(np.invert(av))
        bv = b.numpy() if isinstance(b, Tensor) else b
        out = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op](av, bv)
        return _tensor(np.asarray(out)).to(dtype)
    fn.__name__ = name
    return fn


bitwise_and, bitwise_or = _host_bitwise("and", "bitwise_and"), _host_bitwise("or", "bitwise_or")
bitwise_xor, bitwise_not = _host_bitwise("xor", "bitwise_xor"), _host_bitwise("not", "bitwise_not")


def isinf(x):
    return (x == math.inf) | (x == -math.inf) if x.dtype.is_floating_point else x != x


def isposinf(x):
    return x == math.inf if x.dtype.is_floating_point else x != x


def isneginf(x):
    return x == -math.inf if x.dtype.is_floating_point else x != x


def check_close(a, b, rtol, atol, name):
    """torch's argument checks of isclose / allclose: two tensors of one dtype, non-negative tolerances."""
    if not isinstance(b, Tensor):
        raise TypeError("%s(): argument 'other' (position 2) must be Tensor, not %s" % (name, type(b).__name__))
    if a.dtype != b.dtype:
        from ._promotion import _name
        raise RuntimeError("%s did not match %s" % (_name(a.dtype), _name(b.dtype)))
    for tol, value in (("rtol", rtol), ("atol", atol)):
        if not value >= 0:  # (NaN too)
            raise RuntimeError("%s must be greater than or equal to zero, but got %g" % (tol, value))


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|a - b| <= atol + rtol·|b| elementwise (infinities equal only to themselves; NaN to NaN with equal_nan),
    as torch.isclose."""
    check_close(a, b, rtol, atol, "isclose")
    if not a.dtype.is_floating_point:  # integers and bools compared exactly, without wrapping: uint8's 2 - 3 was
        a, b = a.double(), b.double()  # 255 (isclose(2, 3, atol=1) False)
    close = logical_and((a - b).abs() <= atol + rtol * b.abs(), logical_and(isfinite(a), isfinite(b)))
    out = logical_or(close, a == b)  # infinities: equal only to themselves
    if equal_nan:
        out = logical_or(out, logical_and(a != a, b != b))
    return out


def _lower_under_autocast(*tensors):
    """torch's autocast lower-precision list for the addmm family: every float32 operand, input included,
    cast to the region's dtype (the product alone would be cast by the matmul, and the add would promote
    the result back to float32)."""
    enabled, dtype = _C._autocast_state()
    if not enabled:
        return tensors
    return tuple(t.to(dtype) if isinstance(t, Tensor) and t.dtype in (_dtypes.float32, _dtypes.bfloat16,
                                                                        _dtypes.float16) else t for t in tensors)


def _on_dtensors(name, input, mat1, mat2, dense):
    """The addmm family on DTensor matrices: one op placed as torch's (distributed/tensor/_matrix_ops.py), the
    dense function on the local pieces; None when no matrix is a DTensor (or input is a number)."""
    if not (isinstance(input, Tensor) and (mat1.is_distributed or mat2.is_distributed or input.is_distributed)):
        return None
    from .distributed.tensor import _matrix_ops
    return _matrix_ops.addmm(name, input, mat1, mat2, dense)


def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """beta·input + alpha·(mat1 @ mat2)."""
    input, mat1, mat2 = _lower_under_autocast(input, mat1, mat2)
    placed = _on_dtensors("addmm", input, mat1, mat2, lambda i, a, b: addmm(i, a, b, beta=beta, alpha=alpha))
    if placed is not None:
        return placed
    if isinstance(input, Tensor) and mat1.dtype in _dtypes.REDUCED and input.dtype == mat1.dtype == mat2.dtype:
        # torch's kernel adds the bias to the float32 accumulator and rounds once (the product was rounded first)
        wide = _autocast_off(addmm)(input.float(), mat1.float(), mat2.float(), beta=beta, alpha=alpha)
        return wide.to(mat1.dtype)
    prod = alpha_scaled(mat1.matmul(mat2), alpha)
    return (input * beta if beta != 1 else input) + prod if beta != 0 else prod


def alpha_scaled(prod, alpha):
    """alpha·prod of the addmm family; alpha == 0 gives zeros whatever prod holds (torch's BLAS call reads
    neither matrix then: a NaN or inf in them stays out; alpha·prod was NaN there), still connected to prod's
    graph with a zero gradient."""
    if alpha == 0:
        return _C._functional.where(_C._full([], 0.0, _dtypes.bool), prod, _C._full([], 0.0, prod.dtype))
    return prod * alpha if alpha != 1 else prod


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """beta·input + alpha·(batch1 @ batch2), batched; alpha == 0 still multiplies (torch's batched kernel does:
    an inf or NaN in the batches gives NaN there, where addmm's BLAS call leaves them out)."""
    placed = _on_dtensors("baddbmm", input, batch1, batch2,
                          lambda i, a, b: baddbmm(i, a, b, beta=beta, alpha=alpha))
    if placed is not None:
        return placed
    if alpha != 0:
        return addmm(input, batch1, batch2, beta=beta, alpha=alpha)
    prod = batch1.matmul(batch2) * 0.0
    return (input * beta if beta != 1 else input) + prod if beta != 0 else prod


def addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """beta·input + alpha·Σ_b batch1[b] @ batch2[b]."""
    input, batch1, batch2 = _lower_under_autocast(input, batch1, batch2)
    if isinstance(input, Tensor) and batch1.dtype in _dtypes.REDUCED and input.dtype == batch1.dtype == batch2.dtype:
        # torch's kernel sums the batch's products in float32 and rounds once (a bf16 sum lost the low bits)
        wide = _autocast_off(addbmm)(input.float(), batch1.float(), batch2.float(), beta=beta, alpha=alpha)
        return wide.to(batch1.dtype)
    prod = alpha_scaled(batch1.matmul(batch2).sum(0), alpha)
    return (input * beta + prod) if beta != 0 else prod


_CUMPROD_BLOCK = 64


def cumprod(x, dim, *, dtype=None):
    """Cumulative product along dim, differentiable: exp of the cumulative sum of log|x| with the sign and
    zeros tracked (no division by x, so zeros give exact products and finite gradients) — composed of a
    masked product over a lower-triangular [n, n] pairing (n = x.shape[dim])."""
    if dtype is not None:
        x = x.to(dtype)
    nd = builtins.max(x.ndim, 1)
    if not -nd <= dim < nd:
        raise IndexError("Dimension out of range (expected to be in range of [%d, %d], but got %d)"
                         % (-nd, nd - 1, dim))
    d = dim % nd
    if x.ndim == 0 or x.shape[d] == 0:  # bool and integers give int64 here too, as torch (and as below)
        return x.clone() if x.dtype.is_floating_point else x.to(_dtypes.int64)
    if x.dtype in (_dtypes.float32, _dtypes.float16, _dtypes.bfloat16):
        # torch's CPU kernel accumulates in double: a 1000-step alphas_cumprod in float32 drifted 20x further
        return cumprod(x.to(_dtypes.float64), dim).to(x.dtype)
    n = x.shape[d]
    moved = x.movedim(d, -1)
    ones = _C._full([], 1.0, x.dtype)
    # Blocks of _CUMPROD_BLOCK entries: within a block row i multiplies the entries j <= i (a [.., b, b]
    # pairing), and each block is scaled by the product carried from the blocks before it, so memory is
    # O(n·b), not O(n²) (16 × 2048 took 560 MB as one block).
    parts, carry = [], None
    for start in range(0, n, _CUMPROD_BLOCK):
        b = builtins.min(_CUMPROD_BLOCK, n - start)
        block = moved.narrow(-1, start, b).unsqueeze(-2)  # [..., 1, b]
        keep = _tensor(np.tril(np.ones((b, b), dtype=bool)))
        local = prod(_C._functional.where(keep, block, ones), -1)  # [..., b]
        if carry is not None:
            local = local * carry
        parts.append(local)
        carry = local.narrow(-1, b - 1, 1)
    out = parts[0] if len(parts) == 1 else _C._functional.cat(parts, -1)
    return out.movedim(-1, d).contiguous() if d != nd - 1 else out  # torch's result is contiguous


def diff(x, n=1, dim=-1, prepend=None, append=None):
    """n-th forward difference along dim (prepend / append joined first)."""
    d = wrap_dim(dim, x.ndim)
    parts = [t for t in (prepend, x, append) if t is not None]
    if len(parts) > 1:
        x = _C._functional.cat([t if isinstance(t, Tensor) else _tensor(t) for t in parts], d)
    for _ in range(n):
        length = x.shape[d]
        if length <= 1:
            return x.narrow(d, 0, 0)
        x = (x.narrow(d, 1, length - 1) - x.narrow(d, 0, length - 1)) if x.dtype != _dtypes.bool else \
            logical_xor(x.narrow(d, 1, length - 1), x.narrow(d, 0, length - 1))
    return x


def _moments(x, dim, unbiased, keepdim, correction, op):
    """(var, mean) in float64 for floating x (torch's CPU Welford accumulates there, for both)."""
    from ._compat import _var
    if isinstance(dim, bool):  # torch's var_mean(x, unbiased) overload
        dim, unbiased = None, dim
    wide = x.to(_dtypes.float64) if x.dtype.is_floating_point else x
    return _var(wide, dim, unbiased, keepdim, correction=correction, _op=op), \
        (wide.mean() if dim is None else wide.mean(dim, keepdim=keepdim))


def var_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    v, m = _moments(x, dim, unbiased, keepdim, correction, "var_mean")
    return v.to(x.dtype), m.to(x.dtype)


def std_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    from ._compat import _sqrt_zero_grad
    v, m = _moments(x, dim, unbiased, keepdim, correction, "std_mean")
    return _sqrt_zero_grad(v).to(x.dtype), m.to(x.dtype)


def clamp_(x, min=None, max=None):
    """In place (under autograd tessel/_inplace.py records it instead). A result type x cannot hold raises torch's
    error (it was clamped in float and truncated back, so clamp_(min=1.5) left 1 as 1): with number bounds torch
    names x's C++ type ("long int"), with a tensor bound its dtype ("Long")."""
    if not x.dtype.is_floating_point:
        bounds = [b for b in (min, max) if b is not None]
        if bounds:
            from ._promotion import _name, can_cast, result_type
            result = result_type(x, *bounds)
            if not can_cast(result, x.dtype):
                tensor_bound = builtins.any(isinstance(b, Tensor) for b in bounds)
                raise RuntimeError("result type %s can't be cast to the desired output type %s" % (
                    _name(result), _name(x.dtype) if tensor_bound else _dtypes.c_type_name(x.dtype)))
    return x.copy_(x.clamp(min, max))


def masked_fill_(x, mask, value):
    """In place (under autograd tessel/_inplace.py records it instead)."""
    return x.copy_(x.masked_fill(mask, value))


_ITEMSIZE = {_dtypes.float32: 4, _dtypes.float64: 8, _dtypes.float16: 2, _dtypes.bfloat16: 2, _dtypes.int64: 8,
             _dtypes.int32: 4, _dtypes.bool: 1, _dtypes.int16: 2, _dtypes.int8: 1, _dtypes.uint8: 1}


def split_with_sizes(x, split_sizes, dim=0):
    if builtins.sum(split_sizes) != x.shape[dim]:
        raise RuntimeError("split_with_sizes expects split_sizes to sum exactly to %d (input tensor's size at "
                           "dimension %d), but got split_sizes=%s" % (x.shape[dim], dim, list(split_sizes)))
    return x.split(list(split_sizes), dim)


_masked_fill_cpp, _split_cpp, _chunk_cpp = Tensor.masked_fill, Tensor.split, Tensor.chunk


def masked_fill(x, mask, value):
    """Tensor.masked_fill; a 0-d tensor value that requires grad gets the gradient of the filled places (a
    where), as torch's (it was read as a number: no gradient)."""
    if isinstance(value, Tensor):
        if value.dim() != 0:  # (a one-element value was read as its number)
            raise RuntimeError("masked_fill_ only supports a 0-dimensional value tensor, but got tensor with %d "
                               "dimension(s)." % value.dim())
        if value.requires_grad and _C.is_grad_enabled():
            _check_bool_mask(mask)
            return _C._functional.where(mask, value.to(x.dtype), x)
    try:
        return _masked_fill_cpp(x, mask, value)
    except _C.InvalidArgumentError:
        _check_bool_mask(mask)  # torch's error for that mistake; the others as raised
        raise


def _check_bool_mask(mask):
    if isinstance(mask, Tensor) and mask.dtype != _dtypes.bool:
        raise RuntimeError("masked_fill_ only supports boolean masks, but got mask with dtype %s"
                           % _dtypes.c_type_name(mask.dtype)) from None


def split(x, *args, **kwargs):  # (split_size, dim=0), torch's keywords included
    dim = kwargs.get("dim", args[1] if len(args) > 1 else 0)
    g = gathered_along(x, dim)
    return _copies_if_moved(x, g, _split_cpp(g, *args, **kwargs), "split")


def chunk(x, *args, **kwargs):  # (chunks, dim=0)
    dim = kwargs.get("dim", args[1] if len(args) > 1 else 0)
    g = gathered_along(x, dim)
    return _copies_if_moved(x, g, _chunk_cpp(g, *args, **kwargs), "chunk")


def _broadcast_to_method(x, *size):
    """Tensor.broadcast_to: torch's method takes the sizes as one sequence or spread out (x.broadcast_to(3, 4)),
    where torch.broadcast_to takes only the sequence."""
    if len(size) == 1 and not isinstance(size[0], int):
        size = tuple(size[0])
    return x.expand(*size)


def _copies_if_moved(x, gathered, pieces, op):
    """The pieces of a DTensor that had to be gathered first are copies, not views of x: marked so an in-place
    write to one is refused (x.chunk(2)[1].add_(1) on Shard(0) was lost silently)."""
    if gathered is not x:
        for piece in pieces:
            piece._set_view_copy_of(op)
    return pieces


TORCH_FUNCTIONS.update(
    logical_and=logical_and, logical_or=logical_or, logical_xor=logical_xor, logical_not=logical_not,
    bitwise_and=bitwise_and, bitwise_or=bitwise_or, bitwise_xor=bitwise_xor, bitwise_not=bitwise_not,
    isinf=isinf, isposinf=isposinf, isneginf=isneginf, isclose=isclose, addmm=addmm, baddbmm=baddbmm,
    addbmm=addbmm, cumprod=cumprod, diff=diff, var_mean=var_mean, std_mean=std_mean, clamp_=clamp_,
    eq=lambda a, b: a == b, ne=lambda a, b: a != b, lt=lambda a, b: a < b, le=lambda a, b: a <= b,
    gt=lambda a, b: a > b, ge=lambda a, b: a >= b, greater=lambda a, b: a > b, less=lambda a, b: a < b,
    not_equal=lambda a, b: a != b, greater_equal=lambda a, b: a >= b, less_equal=lambda a, b: a <= b,
    broadcast_to=lambda x, size: x.expand(*size), expand=lambda x, *size: x.expand(*size),
    split_with_sizes=split_with_sizes, clamp_min=lambda x, min: x.clamp(min, None),
    clamp_max=lambda x, max: x.clamp(None, max))
TENSOR_METHODS.update(
    logical_and=logical_and, logical_or=logical_or, logical_xor=logical_xor, logical_not=logical_not,
    bitwise_and=bitwise_and, bitwise_or=bitwise_or, bitwise_xor=bitwise_xor, bitwise_not=bitwise_not,
    __and__=bitwise_and, __or__=bitwise_or, __xor__=bitwise_xor, __invert__=bitwise_not,
    __rand__=lambda a, b: bitwise_and(b, a), __ror__=lambda a, b: bitwise_or(b, a),
    __rxor__=lambda a, b: bitwise_xor(b, a),
    isinf=isinf, isposinf=isposinf, isneginf=isneginf, isclose=isclose, addmm=addmm, baddbmm=baddbmm,
    addbmm=addbmm, cumprod=cumprod, diff=diff, clamp_=clamp_, clip_=clamp_, masked_fill_=masked_fill_,
    clamp_min=lambda x, min: x.clamp(min, None), clamp_max=lambda x, max: x.clamp(None, max),
    eq=lambda a, b: a == b, ne=lambda a, b: a != b, lt=lambda a, b: a < b, le=lambda a, b: a <= b,
    gt=lambda a, b: a > b, ge=lambda a, b: a >= b, broadcast_to=_broadcast_to_method,
    view_as=shape_only(lambda x, other: x.view(*other.shape)), split_with_sizes=split_with_sizes,
    where=lambda x, condition, y: sys.modules[__package__].where(condition, x, y),  # (a number y: torch's dtype)
    nelement=lambda x: x.numel(), element_size=lambda x: _ITEMSIZE[x.dtype],
    new_empty=lambda x, *size, **kw: _new_full(x, _sized(size, kw), 0.0, **kw), masked_fill=masked_fill, split=split,
    chunk=chunk)


