"""Complex tensors' (tessel/_complex.py) reductions (sum, mean, prod, cumsum, cumprod, var, std), products
(matmul / @, mm, bmm, dot, vdot, outer, einsum), joins (cat, stack), masked choices (where, masked_fill) and
random factories (randn, rand), composed of real ops on the interleaved parts.

Products follow torch's dtype rule for them: both operands of one complex dtype (torch has no mixed
complex x real GEMM and raises), then (a + ib)(c + id) = (ac - bd) + i(ad + bc) as four real products.
"""
import builtins
import math

from . import _C, _dtypes
from ._complex import _OF_REAL, _TYPE_NAMES, ComplexDType, ComplexTensor, _from_parts, _norm_dim, _parts

_where = _C._functional.where


def zeros_parts(shape, like):
    return _C._full(list(shape) + [2], 0.0, like.dtype)


def _ones(shape, real):
    return _from_parts(_C._full(list(shape), 1.0, real), 0.0)


# ---- reductions ---------------------------------------------------------------------------------------------

def _reduced_dims(z, dim):
    if dim is None:
        return list(range(z.ndim))
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    return sorted({_norm_dim(d, z.ndim) for d in dims})


def _with_dtype(z, dtype):
    """z in a reduction's dtype= (a real one keeps the real part, with torch's warning)."""
    if dtype is None or dtype == z.dtype:
        return z
    return z.to(dtype)


def sum(z, dim=None, keepdim=False, *, dtype=None):  # noqa: A001 (Tensor.sum)
    z = _with_dtype(z, dtype)
    if not isinstance(z, ComplexTensor):
        return z.sum(dim, keepdim) if dim is not None else z.sum()
    dims = _reduced_dims(z, dim)
    if not dims:
        return z.clone()
    return ComplexTensor(z._r.sum(dims, keepdim))


def mean(z, dim=None, keepdim=False, *, dtype=None):
    z = _with_dtype(z, dtype)
    if not isinstance(z, ComplexTensor):
        return z.mean(dim, keepdim) if dim is not None else z.mean()
    dims = _reduced_dims(z, dim)
    if not dims:
        return z.clone()
    return ComplexTensor(z._r.mean(dims, keepdim))


def _prod_along(z, dim):
    """The product along dim as a pairwise tree (log2(n) complex products; torch multiplies in order, so the
    last bits may differ)."""
    z = z.movedim(dim, 0)
    if z.shape[0] == 0:
        return _ones(z.shape[1:], z._r.dtype)
    while z.shape[0] > 1:
        if z.shape[0] % 2:
            z = cat([z, _ones((1,) + tuple(z.shape[1:]), z._r.dtype)], 0)
        z = z[0::2] * z[1::2]
    return z[0]


def prod(z, dim=None, keepdim=False, *, dtype=None):
    z = _with_dtype(z, dtype)
    if not isinstance(z, ComplexTensor):
        return z.prod(dim, keepdim) if dim is not None else z.prod()
    if dim is None:
        out = _prod_along(z.reshape(-1), 0)
        return out.reshape([1] * z.ndim) if keepdim else out
    d = _norm_dim(dim, z.ndim)
    if z.ndim == 0:
        return z.clone()
    out = _prod_along(z, d)
    return out.unsqueeze(d) if keepdim else out


def cumsum(z, dim, *, dtype=None):
    z = _with_dtype(z, dtype)
    if not isinstance(z, ComplexTensor):
        return z.cumsum(dim)
    if z.ndim == 0:
        return z.clone()
    return ComplexTensor(z._r.cumsum(_norm_dim(dim, z.ndim)))


def cumprod(z, dim, *, dtype=None):
    """An inclusive scan of complex products by doubling strides (Hillis-Steele: log2(n) steps)."""
    z = _with_dtype(z, dtype)
    if not isinstance(z, ComplexTensor):
        return z.cumprod(dim)
    if z.ndim == 0:
        return z.clone()
    d = _norm_dim(dim, z.ndim)
    out, n, step = z.movedim(d, 0), z.shape[d], 1
    while step < n:
        shifted = cat([_ones((step,) + tuple(out.shape[1:]), z._r.dtype), out[:n - step]], 0)
        out = out * shifted
        step *= 2
    return out.movedim(0, d)


def var(z, dim=None, *args, **kwargs):
    """torch's variance of a complex tensor: of its real part plus of its imaginary part (real, as torch's)."""
    return z.real.var(dim, *args, **kwargs) + z.imag.var(dim, *args, **kwargs)


def std(z, dim=None, *args, **kwargs):
    return var(z, dim, *args, **kwargs).sqrt()


# ---- products -----------------------------------------------------------------------------------------------

def _scalar_name(dtype):
    if isinstance(dtype, ComplexDType):
        return "c10::complex<%s>" % ("float" if dtype == _OF_REAL[_dtypes.float32] else "double")
    return {"float32": "float", "float64": "double", "float16": "c10::Half", "bfloat16": "c10::BFloat16",
            "int64": "long int", "int32": "int"}.get(str(dtype).rsplit(".", 1)[-1], str(dtype))


def _same_dtype(x, y):
    if x.dtype != y.dtype:
        raise RuntimeError("expected m1 and m2 to have the same dtype, but got: %s != %s"
                           % (_scalar_name(x.dtype), _scalar_name(y.dtype)))


def matmul(x, y):
    _same_dtype(x, y)
    a, b = x._pair()
    c, d = y._pair()
    return _from_parts(a.matmul(c) - b.matmul(d), a.matmul(d) + b.matmul(c))


def rmatmul(y, x):
    return matmul(x, y)


def mm(x, y):
    for name, t in (("self", x), ("mat2", y)):
        if t.ndim != 2:
            raise RuntimeError("%s must be a matrix" % name)
    return matmul(x, y)


def bmm(x, y):
    for name, t in (("batch1", x), ("batch2", y)):
        if t.ndim != 3:
            raise RuntimeError("%s must be a 3D tensor" % name)
    return matmul(x, y)


def dot(x, y):
    if x.dtype != y.dtype:
        raise RuntimeError("dot : expected both vectors to have same dtype, but found %s and %s"
                           % (_TYPE_NAMES.get(getattr(x.dtype, "_name", ""), x.dtype),
                              _TYPE_NAMES.get(getattr(y.dtype, "_name", ""), y.dtype)))
    if x.ndim != 1 or y.ndim != 1:
        raise RuntimeError("1D tensors expected, but got %dD and %dD tensors" % (x.ndim, y.ndim))
    return matmul(x, y)


def vdot(x, y):
    return dot(x.conj(), y)


def outer(x, y):
    return x.unsqueeze(-1) * y.unsqueeze(0)


def einsum(equation, *operands):
    """The sum over each operand's choice of part, i^k (k imaginary parts chosen) deciding the sign and the part
    of the result it joins: 2^n real einsums for n complex operands. torch wants one dtype for all operands."""
    from ._einsum import einsum as real_einsum
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    dtypes = {o.dtype for o in operands}
    if len(dtypes) > 1:
        found = next(o.dtype for o in operands if o.dtype != operands[0].dtype)
        raise RuntimeError("expected scalar type %s but found %s" % (
            _TYPE_NAMES.get(getattr(operands[0].dtype, "_name", ""), operands[0].dtype),
            _TYPE_NAMES.get(getattr(found, "_name", ""), _scalar_name(found).capitalize())))
    parts = [o._pair() for o in operands]
    re = im = None
    for choice in range(2 ** len(parts)):
        picked = [p[(choice >> i) & 1] for i, p in enumerate(parts)]
        k = builtins.bin(choice).count("1") % 4
        term = real_einsum(equation, *picked)
        if k in (2, 3):
            term = -term
        if k % 2 == 0:
            re = term if re is None else re + term
        else:
            im = term if im is None else im + term
    return _from_parts(re, im)


# ---- joins and masked choices ------------------------------------------------------------------------------

def _common_real(tensors):
    out = None
    for t in tensors:
        out = t.dtype if out is None else _promote(out, t.dtype)
    return out.to_real() if isinstance(out, ComplexDType) else out


def _promote(d1, d2):
    from ._promotion import promote_types
    return promote_types(d1, d2)


def cat(tensors, dim=0):
    """torch.cat with complex tensors among them: each (a real one with a zero imaginary part) in the promoted
    complex dtype, joined on the parts."""
    tensors = list(tensors)
    real = _common_real(tensors)
    ref = next((t for t in tensors if not (t.ndim == 1 and t.numel() == 0)), tensors[0])
    d = _norm_dim(dim, ref.ndim)
    kept = [t for t in tensors if not (t.ndim == 1 and t.numel() == 0)] or tensors[:1]
    return ComplexTensor(_C._functional.cat([_parts(t, real) for t in kept], d))


def stack(tensors, dim=0):
    tensors = list(tensors)
    real = _common_real(tensors)
    d = _norm_dim(dim, tensors[0].ndim + 1)
    return ComplexTensor(_C._functional.stack([_parts(t, real) for t in tensors], d))


def _real_of_result(x, y):
    from ._promotion import result_type
    dtype = result_type(x, y)
    return dtype.to_real() if isinstance(dtype, ComplexDType) else dtype


def where(condition, input, other):
    """torch.where with a complex operand: both in the two's result type, chosen on the parts."""
    real = _real_of_result(input, other)
    return ComplexTensor(_where(condition.unsqueeze(-1), _parts(input, real), _parts(other, real)))


def masked_fill(z, mask, value):
    if isinstance(value, (_C.Tensor, ComplexTensor)) and value.ndim != 0:
        raise RuntimeError("masked_fill_ only supports a 0-dimensional value tensor, but got tensor with %d "
                           "dimension(s)." % value.ndim)
    return ComplexTensor(_where(mask.unsqueeze(-1), _parts(value, z._r.dtype), z._r))


def masked_fill_(z, mask, value):
    return z._assign(masked_fill(z, mask, value))


# ---- factories ----------------------------------------------------------------------------------------------

def random(kind, shape, generator, dtype, requires_grad):
    """randn / rand with a complex dtype as torch draws them: normal_ / uniform_ of the real view [..., 2] (so
    the parts interleave in the generator's order), a normal's std 1 / sqrt(2) (E|z|² = 1)."""
    from ._tensor import rand, randn
    if kind == "randn":
        # torch's CPU normal_ draws fewer than 16 values one by one in double, scaled there and rounded once; 16
        # and more in the tensor's dtype (float32's vectorized kernel), scaled in it
        serial = 2 * math.prod(shape) < 16 and dtype.real == _dtypes.float32
        r = randn(*shape, 2, generator=generator, dtype=_dtypes.float64 if serial else dtype.real)
        r = r * (1.0 / math.sqrt(2.0))
        r = r.to(dtype.real) if serial else r
    else:
        r = rand(*shape, 2, generator=generator, dtype=dtype.real)
    return ComplexTensor(r.requires_grad_(True) if requires_grad else r)


METHODS = dict(
    sum=sum, mean=mean, prod=prod, cumsum=cumsum, cumprod=cumprod, var=var, std=std, matmul=matmul,
    __matmul__=matmul, __rmatmul__=rmatmul, mm=mm, bmm=bmm, dot=dot, vdot=vdot, outer=outer, ger=outer,
    masked_fill=masked_fill, masked_fill_=masked_fill_,
    where=lambda z, condition, other: where(condition, z, other))


def install(cls):
    for name, fn in METHODS.items():
        setattr(cls, name, fn)
