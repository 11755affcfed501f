"""The rest of torch's namespace that ported scripts reach for: function forms (torch.add(x, y, alpha=2),
torch.div(x, y, rounding_mode="floor"), torch.dot, torch.mv, torch.t), aliases (subtract, multiply, divide,
absolute, negative, greater, moveaxis, swapdims, concat, ...), the constants (pi, e, inf, nan, newaxis), the
dtype rules (promote_types, result_type, can_cast), splitting and stacking helpers (hsplit, dstack,
column_stack, atleast_2d), linear algebra's older spellings (det, inverse, cholesky_solve, triangular_solve,
svd with V, matrix_exp), statistics (cov, corrcoef, nanmedian, nanquantile, histogram), the out-of-place
scatters (select_scatter, slice_scatter, diagonal_scatter), window functions, torch's top-level forms of
torch.nn.functional (torch.conv2d, torch.dropout(x, p, train), torch.layer_norm, ...), and every in-place
method torch has whose out-of-place op tessel has (x.tril_(), x.cumsum_(0), x.eq_(y), x.rsqrt_()).

Each is composed from tessel's differentiable ops, so gradients flow and DTensors work wherever those ops do;
the exceptions say so in their docstrings (histogram and the window functions compute on the host with
numpy, as they have no gradient in torch either). An in-place method computes the out-of-place result and
writes it into the tensor with torch's rules: a result dtype the tensor cannot hold ("result type Float can't
be cast to the desired output type Long") or a shape it is not raises; under autograd the write is recorded
as tessel/_inplace.py records add_.

install(namespace) puts the functions into tessel's namespace and the methods onto Tensor, skipping any name
tessel already defines (the C++ ops and the earlier Python modules win).
"""
import builtins
import math

from . import _C, _dtypes, return_types
from ._autocast_policy import autocast_off as _autocast_off, float32_under_autocast as _float32_under_autocast
from ._dtensor_compose import aligned_args
from ._extra import fused_operands
# the dtype rules (_promotion.py), which tessel's modules also import from here
from ._promotion import _NAMES, _name, can_cast, check_alpha_of, promote_types, result_type  # noqa: F401
from ._tensor import with_zero_gradient

Tensor = _C.Tensor
_bool, _float, _int = builtins.bool, builtins.float, builtins.int

# ---- arithmetic function forms ----------------------------------------------------------------------------

_add_cpp, _mul_cpp = Tensor.add, Tensor.mul


def _as_operand(x, like):
    return x if isinstance(x, Tensor) else _C._full([], _float(x), result_type(like, x))


_FUSED_ADD_DTYPES = (_dtypes.float32, _dtypes.float64)
_ONES = {}  # dtype -> a 0-d 1: addcmul's tensor1 in a fused add with alpha, never written


def _one(dtype):
    one = _ONES.get(dtype)
    if one is None:
        one = _ONES[dtype] = _C._full([], 1.0, dtype)
    return one


def fused_scaled_add(input, other, alpha):
    """input + alpha · other as one fused multiply-add per element in the compute type (float for float32 and the
    16-bit floats, double for float64; alpha rounded to a 16-bit dtype, then to the compute type), as torch's CPU
    add / add_ with alpha compute it (the unfused form, rounding alpha · other first, differed in the last bit for
    ~8-27% of float32 values), or None where the operands need promoting (one floating dtype, all plain or all
    DTensors). addcmul's kernel with a 1 for tensor1 computes exactly fma(alpha, other, input), differentiably."""
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool):
        return None
    ops = fused_operands(input, other)
    if ops is None or ops[0].dtype != ops[1].dtype:
        return None
    dtype = ops[0].dtype
    if dtype in _dtypes.REDUCED:  # torch's vector kernel takes alpha in the tensor's dtype
        _C._check_number_fits(_float(alpha), dtype)
        alpha = _C._full([], alpha, dtype).item()
    return _C._functional.addcmul(ops[0], _one(dtype), ops[1], float(alpha))


def _scaled_add(input, other, alpha):
    """input + alpha * other in the two's result type, alpha != 1. float32 / float64 of one dtype: fused, as torch
    (fused_scaled_add). 16-bit floats as torch's vector kernel: alpha (and a number other) in the tensor's dtype,
    the sum in float32, one rounding."""
    if isinstance(input, Tensor) and isinstance(other, Tensor):
        dtype = result_type(input, other)
        if dtype in _FUSED_ADD_DTYPES and input.dtype.is_floating_point and \
                other.dtype.is_floating_point:  # torch promotes both, then fuses
            fused = fused_scaled_add(input.to(dtype), other.to(dtype), alpha)
            if fused is not None:
                return fused
        if dtype in _dtypes.REDUCED:  # torch's vector body: alpha in the dtype, one fused multiply-add in float32
            _C._check_number_fits(_float(alpha), dtype)
            alpha = _C._full([], alpha, dtype).item()
            one = _one(_dtypes.float32)
            return _C._functional.addcmul(input.float(), one, other.float(), float(alpha)).to(dtype)
        work = _dtypes.opmath(dtype)
        return (input.to(work) + other.to(work) * alpha).to(dtype)
    if isinstance(input, Tensor) and input.dtype in _dtypes.REDUCED:
        r = lambda v: _C._full([], _float(v), input.dtype).item()  # noqa: E731
        return (input.float() + r(other) * r(alpha)).to(input.dtype)
    return input + other * alpha


def _distributed(x):
    return isinstance(x, Tensor) and x.is_distributed


def _plain_fused_add(input, other, alpha):
    """fused_scaled_add for the common case (two plain tensors of one float32 / float64 dtype, a number alpha)
    without its checks: torch.add(x, y, alpha=a) of 16 floats took 17.5 µs (torch: 1.4)."""
    if isinstance(input, Tensor) and isinstance(other, Tensor) and type(alpha) in (int, float) and \
            input.dtype is other.dtype and input.dtype in _FUSED_ADD_DTYPES and not input.is_distributed and \
            not other.is_distributed:
        return _C._functional.addcmul(input, _one(input.dtype), other, float(alpha))
    return None


def add(input, other, *, alpha=1):
    """torch.add / Tensor.add: input + alpha * other (other a tensor or a Python number), in the two's result type
    (alpha does not widen it: add(f16, i32, alpha=0.5) is float16, add(bool, bool, alpha=2) bool, as torch's; a
    float alpha with an integer result raises, as torch's alpha check)."""
    check_alpha_of(input, other, alpha)
    if alpha == 1:
        return input + other
    if _distributed(input) or _distributed(other):  # torch's add.Tensor is linear: Partial operands stay Partial
        return input + other * alpha
    fused = _plain_fused_add(input, other, alpha)
    return fused if fused is not None else _scaled_add(input, other, alpha)


def sub(input, other, *, alpha=1):
    """torch.sub / subtract / Tensor.sub: input - alpha * other."""
    if isinstance(input, Tensor) and input.dtype == _dtypes.bool and isinstance(other, Tensor) and \
            other.dtype == _dtypes.bool:
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or "
                           "`logical_xor()` operator instead.")
    check_alpha_of(input, other, alpha)
    if alpha == 1:
        return input - other
    if _distributed(input) or _distributed(other):  # linear, as add's
        return input - other * alpha
    fused = _plain_fused_add(input, other, -alpha)
    return fused if fused is not None else _scaled_add(input, other, -alpha)


def rsub(input, other, alpha=1):
    """torch.rsub: other - alpha * input."""
    check_alpha_of(input, other, alpha)
    return (other - input * alpha) if alpha != 1 else (other - input)


def mul(input, other):
    """torch.mul / multiply / Tensor.mul: input * other (a tensor or a Python number)."""
    return input * other


def div(input, other, *, rounding_mode=None):
    """torch.div / divide / Tensor.div: true division (integers give the default dtype), or rounded: "trunc" towards
    zero, "floor" towards -inf (integers stay integers, exactly). A rounded quotient of tensors that require grad
    requires grad too, with a zero gradient, as torch's."""
    if rounding_mode is None:
        return input / other
    if rounding_mode not in ("floor", "trunc"):
        raise ValueError("div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '%s'"
                         % rounding_mode)
    input, other = aligned_args((input, other))  # DTensors: each moved once, not by every sub-op (aligned)
    with _C._GradMode(False):
        value = _rounded_div(input, other, rounding_mode)
    return with_zero_gradient(value, input, other)


def _rounded_div(input, other, rounding_mode):
    if rounding_mode == "floor":
        return input.floor_divide(other) if isinstance(input, Tensor) else _as_operand(input, other).floor_divide(
            other)
    a = input if isinstance(input, Tensor) else _as_operand(input, other)
    b = other if isinstance(other, Tensor) else _as_operand(other, a)
    if a.dtype in _dtypes.REDUCED and a.dim() > 0 and b.dim() == 0 and b.dtype in (
            a.dtype, _dtypes.float32):  # (a divisor tensor of one or more dims: torch rounds the quotient first)
        # torch's kernel: trunc of the float32 quotient (a number at float32 precision), rounded once
        wide = other.float() if isinstance(other, Tensor) else other
        return (a.float() / wide).trunc().to(a.dtype)
    if (a.dtype.is_floating_point or b.dtype.is_floating_point):
        return (a / b).trunc()
    if result_type(input, other) == _dtypes.bool:
        raise NotImplementedError("\"div_trunc_cpu\" not implemented for 'Bool'")
    q = a.floor_divide(b)  # integers: floor + 1 where the exact quotient was negative and not whole
    inexact = (q * b).ne(a).logical_and(a.lt(0).logical_xor(b.lt(0)))
    return q + inexact.to(q.dtype)


def positive(input):
    """torch.positive: input itself (bool refused, as torch)."""
    if input.dtype == _dtypes.bool:
        raise NotImplementedError("The `+` operator, on a bool tensor is not supported.")
    return input


def tan(input):
    """torch.tan: sin / cos, formed in float64 for the narrower float types (one rounding at the end, as a
    direct tan would give), so float32 results are correctly rounded but for rare ties."""
    if input.dtype == _dtypes.float64:
        return input.sin() / input.cos()
    out_dtype = input.dtype if input.dtype.is_floating_point else _dtypes.default_float()
    x = input.to(out_dtype).to(_dtypes.float64)  # an integer rounds to the float dtype first, as torch's
    return (x.sin() / x.cos()).to(out_dtype)


def angle(input):
    """torch.angle of a real tensor: pi where it is negative, 0 elsewhere, NaN kept (no gradient flows)."""
    x = (input if input.dtype.is_floating_point else input.to(_dtypes.default_float())).detach()
    zero, pi = _C._full([], 0.0, x.dtype), _C._full([], math.pi, x.dtype)
    return _C._functional.where(x.isnan(), x, _C._functional.where(x.lt(0), pi, zero))


def ldexp(input, other):
    """torch.ldexp: input * 2 ** other."""
    two = _C._full([], 2.0, input.dtype if input.dtype.is_floating_point else _dtypes.default_float())
    return input * two.pow(other if isinstance(other, Tensor) else _C._full([], _float(other), two.dtype))


_FREXP = return_types.frexp


def frexp(input):
    """torch.frexp: (mantissa, exponent) with input = mantissa * 2 ** exponent, |mantissa| in [0.5, 1) (0, inf
    and NaN keep exponent 0 and themselves as mantissa); exponent int32. Exact: the exponent comes from log2 in
    float64 and is corrected by one where rounding put it off, and dividing by a power of two is exact."""
    if not input.dtype.is_floating_point:
        raise RuntimeError("torch.frexp() only supports floating-point dtypes")
    x = input.detach().to(_dtypes.float64)
    finite_nonzero = x.isfinite().logical_and(x.ne(0))
    safe = _C._functional.where(finite_nonzero, x.abs(), _C._full([], 1.0, _dtypes.float64))
    e = safe.log2().floor() + 1
    m = safe / _C._full([], 2.0, _dtypes.float64).pow(e)
    e = e + m.ge(1).to(e.dtype) - m.lt(0.5).to(e.dtype)
    e = _C._functional.where(finite_nonzero, e, _C._full([], 0.0, _dtypes.float64))
    mantissa = _C._functional.where(finite_nonzero, x / _C._full([], 2.0, _dtypes.float64).pow(e), x)
    return _FREXP(mantissa.to(input.dtype), e.to(_dtypes.int32))


def _check_integral(input, other, name):
    for t in (input, other):
        if isinstance(t, Tensor) and (t.dtype.is_floating_point or t.dtype == _dtypes.bool):
            raise NotImplementedError('"%s_cpu" not implemented for \'%s\'' % (name, _NAMES[t.dtype]))


def gcd(input, other):
    """torch.gcd of integer tensors (broadcast), non-negative; gcd(0, 0) = 0. Euclid's algorithm, every
    element at once (at most ~92 rounds for int64)."""
    _check_integral(input, other, "gcd")
    a, b = input.abs(), _as_operand(other, input).abs()
    a, b = a + b * 0, b + a * 0  # broadcast
    while _bool(b.ne(0).any().item()):
        nz = b.ne(0)
        safe = _C._functional.where(nz, b, b * 0 + 1)
        a, b = _C._functional.where(nz, b, a), _C._functional.where(nz, a.remainder(safe), b)
    return a


def lcm(input, other):
    """torch.lcm of integer tensors: |a / gcd(a, b) * b|, 0 where either is 0."""
    g = gcd(input, other)
    b = _as_operand(other, input)
    safe = _C._functional.where(g.ne(0), g, g * 0 + 1)
    return _C._functional.where(g.ne(0), (input.floor_divide(safe) * b).abs(), g * 0)


def mvlgamma(input, p):
    """torch.mvlgamma: the multivariate log-gamma of dimension p, Σ_j lgamma(x - j/2) + p(p-1)/4·log(pi)
    (inf where an element is at most (p - 1) / 2, as torch 2.15 gives)."""
    if p < 1:
        raise RuntimeError("p has to be greater than or equal to 1")
    out = input.lgamma()
    for j in range(1, p):
        out = out + (input - j / 2).lgamma()
    return out + p * (p - 1) / 4 * math.log(math.pi)


def hardshrink(input, lambd=0.5):
    from .nn import functional as F
    return F.hardshrink(input, lambd)


def renorm(input, p, dim, maxnorm):
    """torch.renorm: each slice along dim whose p-norm exceeds maxnorm is scaled to maxnorm (norm + 1e-7 in
    the divisor, as torch)."""
    if p <= 0:
        raise RuntimeError("renorm: non-positive-norm not supported")
    if maxnorm < 0:
        raise RuntimeError("renorm: expected maxnorm to be >= 0 but got %s" % maxnorm)
    dim = dim % input.dim()
    others = [d for d in range(input.dim()) if d != dim]
    norms = input.norm(p, others, True) if others else input.abs()
    factor = _C._functional.where(norms.gt(maxnorm), maxnorm / (norms + 1e-7), norms * 0 + 1)
    return input * factor


# ---- products -------------------------------------------------------------------------------------------

@_autocast_off
def dot(input, other):
    """torch.dot: the inner product of two 1-D tensors of one size and dtype."""
    if input.dim() != 1 or other.dim() != 1:
        raise RuntimeError("1D tensors expected, but got %dD and %dD tensors" % (input.dim(), other.dim()))
    if input.dtype != other.dtype:
        raise RuntimeError("dot : expected both vectors to have same dtype, but found %s and %s"
                           % (_name(input.dtype), _name(other.dtype)))
    if input.shape[0] != other.shape[0]:
        raise RuntimeError("inconsistent tensor size, expected tensor [%d] and src [%d] to have the same number of "
                           "elements, but got %d and %d elements respectively"
                           % (input.shape[0], other.shape[0], input.shape[0], other.shape[0]))
    if input.dtype.is_floating_point:
        # the products summed by the reductions' cascade: a 1 x K x 1 GEMM summed them along K one after another
        # (1e6 float32 terms: 1e-4 off, torch 7e-8; 0.1 times 1e7 ones: 4% off)
        return (input * other).sum()
    return input.matmul(other)


@_autocast_off
def inner(input, other):
    """torch.inner: sums over the last dims (input.shape[:-1] + other.shape[:-1]); a 0-d side multiplies."""
    if input.dim() == 0 or other.dim() == 0:
        return input * other
    if input.shape[-1] != other.shape[-1]:
        raise RuntimeError("inner() the last dimension must match on both input tensors but got shapes %s and %s"
                           % (list(input.shape), list(other.shape)))
    if other.dim() == 1:
        return input.matmul(other)
    from ._composed import tensordot
    return tensordot(input, other, dims=([input.dim() - 1], [other.dim() - 1]))


@_autocast_off
def mv(input, vec):
    """torch.mv: matrix [n, m] times vector [m]."""
    if input.dim() != 2 or vec.dim() != 1:
        raise RuntimeError("vector + matrix @ vector expected, got %d, %d, %d" % (1, input.dim(), vec.dim()))
    if input.shape[1] != vec.shape[0]:
        raise RuntimeError("size mismatch, got input (%d), mat (%dx%d), vec (%d)"
                           % (input.shape[0], input.shape[0], input.shape[1], vec.shape[0]))
    return input.matmul(vec)


def _beta_alpha(input, product, beta, alpha):
    from ._logical import alpha_scaled
    scaled = alpha_scaled(product, alpha)
    if beta == 0:  # torch ignores input (NaN and inf included) when beta is 0; its shape still broadcasts
        return scaled + _C._full(list(input.shape), 0.0, scaled.dtype)
    return (input * beta if beta != 1 else input) + scaled


@_autocast_off
def addmv(input, mat, vec, *, beta=1, alpha=1):
    """torch.addmv: beta * input + alpha * (mat @ vec)."""
    return _beta_alpha(input, mv(mat, vec), beta, alpha)


def addr(input, vec1, vec2, *, beta=1, alpha=1):
    """torch.addr: beta * input + alpha * outer(vec1, vec2)."""
    if vec1.dim() != 1 or vec2.dim() != 1:
        raise RuntimeError("addr: Expected 1-D argument vec1, but got %d-D" % vec1.dim() if vec1.dim() != 1 else
                           "addr: Expected 1-D argument vec2, but got %d-D" % vec2.dim())
    return _beta_alpha(input, ger(vec1, vec2), beta, alpha)


def ger(input, vec2):
    """torch.ger (torch.outer's older name)."""
    from ._extra import outer
    return outer(input, vec2)


def adjoint(input):
    """torch.adjoint / Tensor.mH / Tensor.H (2-D): the conjugate transpose; real tensors: the transpose of the
    last two dims."""
    if input.dim() == 0:  # torch 2.15: a 0-d tensor is its own adjoint
        return input
    if input.dim() == 1:
        raise RuntimeError("tensor.adjoint() is only supported on matrices or batches of matrices. Got 1-D tensor.")
    return input.transpose(-2, -1)


# ---- linear algebra's older spellings ---------------------------------------------------------------------

def _linalg():
    from . import linalg
    return linalg


def det(input):
    return _linalg().det(input)


def logdet(input):
    """torch.logdet: log(det(A)); NaN where det < 0, -inf where det = 0 (from slogdet)."""
    from . import _linalg_checks
    _linalg_checks.square(input, "logdet")
    _linalg_checks.floating(input, "logdet")
    sign, logabs = _linalg().slogdet(input)
    nan = logabs * 0 + _float("nan")
    return _C._functional.where(sign.lt(0), nan, logabs)


def slogdet(input):
    return return_types.slogdet(*_linalg().slogdet(input))


@_float32_under_autocast
def inverse(input):
    return _linalg().inv(input)


@_float32_under_autocast
def pinverse(input, rcond=1e-15):
    """torch.pinverse: the pseudo-inverse (singular values below rcond · the largest are dropped), differentiable
    as linalg.pinv (it was computed on the host and detached: the gradient was dropped)."""
    return _linalg().pinv(input, rtol=rcond)


def matrix_power(input, n):
    return _linalg().matrix_power(input, n)


def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    """torch.lu_unpack: (P, L, U) of torch.linalg.lu_factor's (LU, pivots)."""
    from ._linalg_lu import lu_unpack as _lu_unpack
    return _lu_unpack(LU_data, LU_pivots, unpack_data, unpack_pivots)


@_float32_under_autocast
def lu_solve(b, LU_data, LU_pivots):
    """torch.lu_solve (deprecated in torch for torch.linalg.lu_solve, same result)."""
    return _linalg().lu_solve(LU_data, LU_pivots, b)


def cholesky(input, upper=False):
    """torch.cholesky: removed in torch 2 (as there, this raises; torch.linalg.cholesky is the spelling)."""
    raise RuntimeError("This function was deprecated since version 1.9 and is now removed. `torch.cholesky` is "
                       "deprecated in favor of `torch.linalg.cholesky`.")


@_float32_under_autocast
def cholesky_solve(input, input2, upper=False):
    """torch.cholesky_solve(B, L): X with A X = B for A = L Lᵀ (L lower; upper=True: A = Uᵀ U). Differentiable
    with torch's gradients (tessel/_linalg_grad.py CholeskySolve: the factor's is that of L Lᵀ for all of L)."""
    if _C.is_grad_enabled() and (input.requires_grad or input2.requires_grad):
        from ._linalg_grad import CholeskySolve
        return CholeskySolve.apply(input, input2, upper)
    return _cholesky_solve(input, input2, upper)


def _cholesky_solve(input, input2, upper):
    solve = _linalg().solve_triangular
    if upper:
        y = solve(input2.transpose(-2, -1), input, upper=False)
        return solve(input2, y, upper=True)
    y = solve(input2, input, upper=False)
    return solve(input2.transpose(-2, -1), y, upper=True)


@_float32_under_autocast
def cholesky_inverse(input, upper=False):
    """torch.cholesky_inverse(L): (L Lᵀ)⁻¹ (upper=True: (Uᵀ U)⁻¹)."""
    from ._tensor import eye
    n = input.shape[-1]
    identity = eye(n, dtype=input.dtype)
    if input.dim() > 2:
        identity = identity.expand(*input.shape)
    return cholesky_solve(identity, input, upper)


_TRIANGULAR = return_types.triangular_solve


@_float32_under_autocast
def triangular_solve(b, A, upper=True, transpose=False, unitriangular=False):
    """torch.triangular_solve(b, A): (X, A.clone()) with op(A) X = b, op the transpose when transpose=True."""
    coefficient = A.transpose(-2, -1) if transpose else A
    x = _linalg().solve_triangular(coefficient, b, upper=upper != transpose, unitriangular=unitriangular)
    return _TRIANGULAR(x, A.clone())


_SVD = return_types.svd


@_float32_under_autocast
def svd(input, some=True, compute_uv=True):
    """torch.svd (the older form): U, S, V with input = U diag(S) Vᵀ (V, not Vᵀ); some=False gives the
    complete U and V; compute_uv=False returns zero-filled U and V as torch does."""
    if not compute_uv:  # zero-filled, [m, m] and [n, n] whatever some is, as torch's
        from ._tensor import zeros
        s = _linalg().svdvals(input)
        m, n = input.shape[-2], input.shape[-1]
        batch = list(input.shape[:-2])
        return _SVD(zeros(batch + [m, m], dtype=s.dtype), s, zeros(batch + [n, n], dtype=s.dtype))
    u, s, vh = _linalg().svd(input, full_matrices=not some)
    return _SVD(u, s, vh.transpose(-2, -1))


def qr(input, some=True):
    """torch.qr: removed in torch 2 (as there, this raises; torch.linalg.qr is the spelling)."""
    raise RuntimeError("This function was deprecated since version 1.9 and is now removed. `torch.qr` is deprecated "
                       "in favor of `torch.linalg.qr` and the boolean parameter `some` has been replaced with a "
                       "string parameter `mode`.")


def matrix_exp(input):
    """torch.matrix_exp / linalg.matrix_exp of square matrices [..., n, n]: scaling and squaring over a degree-18
    Taylor polynomial (the batch's 1-norm scaled below 1/2, so the truncation is below float64's rounding), all
    matmuls, so the gradient flows (it is the derivative of this approximation, equal to the exact Fréchet
    derivative to the same accuracy). A matrix with an inf or NaN is all NaN, as torch's."""
    from . import _linalg_checks
    _linalg_checks.square(input, "linalg.matrix_exp")
    _linalg_checks.floating(input, "linalg.matrix_exp")
    finite = input.detach().isfinite().all(-1).all(-1)
    if not bool(finite.all()):  # (the scaling's log2 of an infinite norm raised OverflowError)
        mask = finite.unsqueeze(-1).unsqueeze(-1)
        clean = _C._functional.where(mask, input, _C._full([], 0.0, input.dtype))
        return _C._functional.where(mask, matrix_exp(clean), _C._full([], _float("nan"), input.dtype))
    if input.dtype != _dtypes.float64:  # formed in float64 (the squarings amplify float32 rounding), one cast back
        return matrix_exp(input.to(_dtypes.float64)).to(input.dtype)
    from ._tensor import eye
    n = input.shape[-1]
    norm = _float(input.detach().abs().sum(-2).max().item()) if input.numel() else 0.0
    squarings = builtins.max(0, math.ceil(math.log2(norm / 0.5))) if norm > 0.5 else 0
    a = input / (2.0 ** squarings) if squarings else input
    identity = eye(n, dtype=input.dtype)
    result, term = identity + a * 0, identity + a * 0
    for k in range(1, 19):
        term = term.matmul(a) / k
        result = result + term
    for _ in range(squarings):
        result = result.matmul(result)
    return result


def chain_matmul(*matrices):
    if len(matrices) == 1:  # torch's: the one matrix itself (a copy)
        return matrices[0].clone()
    return _linalg().multi_dot(list(matrices))


def frobenius_norm(input, dim, keepdim=False):
    return input.norm(2, list(dim) if isinstance(dim, (list, tuple)) else [dim], keepdim)


def nuclear_norm(input, dim=None, keepdim=False):
    """torch.nuclear_norm(input, keepdim) / (input, dim, keepdim): the sum of singular values over the two dims."""
    if isinstance(dim, bool):  # nuclear_norm(x, True): the keepdim overload
        dim, keepdim = None, dim
    return _linalg().matrix_norm(input, "nuc", (-2, -1) if dim is None else tuple(dim), keepdim)


# ---- shape helpers --------------------------------------------------------------------------------------

def _tensors_of(args, name):
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        return list(args[0]), True
    return list(args), len(args) != 1


def _atleast(ndim, name):
    def fn(*tensors):
        items, many = _tensors_of(tensors, name)
        out = []
        for t in items:
            if t.dim() >= ndim:
                out.append(t)
            elif ndim == 1 or t.dim() == 0:
                out.append(t.reshape([1] * ndim))
            elif ndim == 2:  # 1-D [n] -> [1, n]
                out.append(t.unsqueeze(0))
            else:  # 3-D: [n] -> [1, n, 1], [m, n] -> [m, n, 1]
                out.append(t.unsqueeze(0).unsqueeze(-1) if t.dim() == 1 else t.unsqueeze(-1))
        return tuple(out) if many else out[0]
    fn.__name__ = name
    fn.__doc__ = "torch.%s: each tensor viewed with at least %d dims (a tuple for several)." % (name, ndim)
    return fn


atleast_1d, atleast_2d, atleast_3d = _atleast(1, "atleast_1d"), _atleast(2, "atleast_2d"), _atleast(3, "atleast_3d")


_promoted = _dtypes.promoted


def _t(input):
    """torch.t: the transpose of a matrix (a 0-D or 1-D tensor as it is)."""
    if input.dim() > 2:
        raise RuntimeError("t() expects a tensor with <= 2 dimensions, but self is %dD" % input.dim())
    return input.transpose(0, 1) if input.dim() == 2 else input


def column_stack(tensors):
    """torch.column_stack: 0-d and 1-D tensors become columns [n, 1], then hstack."""
    cols = [t.reshape(-1, 1) if t.dim() <= 1 else t for t in _promoted(tensors)]
    return _C._functional.cat(cols, 1)


def dstack(tensors):
    """torch.dstack: atleast_3d, then concatenated along dim 2."""
    return _C._functional.cat(list(atleast_3d(_promoted(tensors))), 2)


def concat(tensors, dim=0):
    """torch.concat / concatenate: torch.cat (promotion, the legacy empty 1-D tensor skipped)."""
    from . import cat
    return cat(tensors, dim)


def _split_along(name, min_dim, dim_of):
    def fn(input, indices_or_sections):
        if input.dim() < min_dim:
            raise RuntimeError("torch.%s requires a tensor with at least %d dimension, but got a tensor with %d "
                               "dimensions!" % (name, min_dim, input.dim()))
        dim = dim_of(input)
        if isinstance(indices_or_sections, _int) and not isinstance(indices_or_sections, _bool):
            size = input.shape[dim]
            if indices_or_sections == 0 or size % indices_or_sections:
                raise RuntimeError("torch.%s attempted to split along dimension %d, but the size of the dimension %d "
                                   "is not divisible by the split_size %d!"
                                   % (name, dim, size, indices_or_sections))
        return input.tensor_split(indices_or_sections, dim)
    fn.__name__ = name
    return fn


hsplit = _split_along("hsplit", 1, lambda t: 0 if t.dim() == 1 else 1)
vsplit = _split_along("vsplit", 2, lambda t: 0)
dsplit = _split_along("dsplit", 3, lambda t: 2)


def fliplr(input):
    if input.dim() < 2:
        raise RuntimeError("Input must be >= 2-d.")
    return input.flip([1])


def flipud(input):
    if input.dim() < 1:
        raise RuntimeError("Input must be >= 1-d.")
    return input.flip([0])


def ravel(input):
    """torch.ravel: contiguous and flat, a view where input is contiguous, else a copy (a strided 1-D view
    wrote through to the input)."""
    return input.contiguous().reshape(-1)


def msort(input):
    return input.sort(0)[0]


def diagflat(input, offset=0):
    """torch.diagflat: the flattened input on the offset diagonal of a square matrix."""
    from ._extra import diag
    return diag(input.reshape(-1), offset)


def take_along_dim(input, indices, dim=None):
    """torch.take_along_dim: gather along dim with input and indices broadcast against each other elsewhere;
    dim=None indexes the flattened input; along a dim an index wraps around it (torch's index % size: -1 is the
    last, 3 of 3 the first)."""
    if indices.dtype != _dtypes.int64:
        from ._subscript import _torch_dtype_name
        raise RuntimeError("torch.take_along_dim(): dtype of indices should be Long but got %s"
                           % _torch_dtype_name(indices.dtype))
    if dim is None:
        return input.reshape(-1).gather(0, indices.reshape(-1))
    from ._tensor import wrap_dim
    dim = wrap_dim(dim, input.dim())
    if input.dim() and input.shape[dim]:
        indices = indices % input.shape[dim]
    if input.dim() != indices.dim():
        raise RuntimeError("torch.take_along_dim(): input and indices should have the same number of dimensions, "
                           "but got %d dimensions for input, and %d dimensions for indices"
                           % (input.dim(), indices.dim()))
    shape_in, shape_ix = list(input.shape), list(indices.shape)
    for d in range(input.dim()):
        if d == dim:
            continue
        size = builtins.max(shape_in[d], shape_ix[d])
        if shape_in[d] not in (1, size) or shape_ix[d] not in (1, size):
            raise RuntimeError("The size of tensor a (%d) must match the size of tensor b (%d) at non-singleton "
                               "dimension %d" % (shape_in[d], shape_ix[d], d))
        shape_in[d] = shape_ix[d] = size
    return input.expand(*shape_in).gather(dim, indices.expand(*shape_ix))


def unravel_index(indices, shape):
    """torch.unravel_index: the coordinates (a tuple of int64 tensors) of flat indices into shape."""
    if isinstance(shape, _int):
        shape = (shape,)
    if not isinstance(indices, Tensor):
        indices = _C._full([], _float(indices), _dtypes.int64)
    if indices.dtype.is_floating_point or indices.dtype == _dtypes.bool:
        raise TypeError("expected 'indices' to be integer dtype, but got %s" % _name(indices.dtype))
    if builtins.any(s < 0 for s in shape):
        raise ValueError("'shape' cannot have negative values, but got %s" % (tuple(shape),))
    total = 1
    for s in shape:
        total *= s
    if indices.numel() and (_bool(indices.lt(-total).any().item()) or _bool(indices.ge(total).any().item())):
        raise RuntimeError("'indices' must be in range [-%d, %d)" % (total, total))
    flat = indices.to(_dtypes.int64)
    flat = _C._functional.where(flat.lt(0), flat + total, flat)
    out, stride = [], total
    for s in shape:
        stride //= s
        out.append(flat.floor_divide(stride).remainder(s) if s else flat * 0)
    return tuple(out)


def _scatter_into(input, src, view_of, expected_shape, name):
    """A copy of input whose view view_of(copy) holds src (shape checked as torch: no broadcasting); the
    gradient reaches input outside the view and src inside it (the write is recorded as a view write)."""
    if tuple(src.shape) != tuple(expected_shape):
        raise RuntimeError("expected src to have a size equal to the slice of self. src size = %s, slice size = %s"
                           % (list(src.shape), list(expected_shape)))
    out = input.clone()
    view_of(out).copy_(src)
    return out


def select_scatter(input, src, dim, index):
    """torch.select_scatter: input with input.select(dim, index) replaced by src."""
    return _scatter_into(input, src, lambda t: t.select(dim, index), input.select(dim, index).shape,
                         "select_scatter")


def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    """torch.slice_scatter: input with input[..., start:end:step, ...] (along dim) replaced by src."""
    index = [builtins.slice(None)] * input.dim()
    index[dim] = builtins.slice(start, end, step)
    index = tuple(index)
    return _scatter_into(input, src, lambda t: t[index], input[index].shape, "slice_scatter")


def diagonal_scatter(input, src, offset=0, dim1=0, dim2=1):
    """torch.diagonal_scatter: input with input.diagonal(offset, dim1, dim2) replaced by src."""
    return _scatter_into(input, src, lambda t: t.diagonal(offset, dim1, dim2),
                         input.diagonal(offset, dim1, dim2).shape, "diagonal_scatter")


def narrow_copy(input, dim, start, length):
    return input.narrow(dim, start, length).clone()


def reshape_as(input, other):
    return input.reshape(list(other.shape))


def sum_to_size(input, *size):
    """Tensor.sum_to_size: sums the broadcast dims away so the result has `size` (which input expands from)."""
    if len(size) == 1 and isinstance(size[0], (list, tuple)):
        size = tuple(size[0])
    size = tuple(size)
    lead = input.dim() - len(size)
    if lead < 0 or builtins.any(s not in (1, input.shape[lead + i]) for i, s in enumerate(size)):
        raise RuntimeError("size {%s} is not expandable to size {%s}." % (list(size), list(input.shape)))
    out = input.sum(list(range(lead))) if lead else input
    dims = [i for i, s in enumerate(size) if s == 1 and out.shape[i] != 1]
    return out.sum(dims, True) if dims else out


def is_nonzero(input):
    if input.numel() == 0:
        raise RuntimeError("Boolean value of Tensor with no values is ambiguous")
    if input.numel() > 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    return _bool(input.item() != 0)


def is_same_size(input, other):
    return tuple(input.shape) == tuple(other.shape)


def is_signed(input):
    return input.dtype.is_signed  # uint8 and bool unsigned (uint8 read as signed)


def _false(input):
    return False


def _identity(input):
    return input


def isreal(input):
    """torch.isreal: every element of a real tensor is real."""
    return _C._full(list(input.shape), 1.0, _dtypes.bool)


def imag(input):
    raise TypeError("imag is not implemented for tensors with non-complex dtypes.")


def scalar_tensor(s, *, dtype=None, device=None, requires_grad=False, **_):
    out = _C._full([], _float(s), dtype or _dtypes.default_float())
    if requires_grad:
        out.requires_grad_(True)
    return out


# ---- torch's top-level forms of torch.nn.functional -----------------------------------------------------

def _F():
    from .nn import functional
    return functional


_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _nn_forms():
    F = _F()

    def stride_or_none(stride):
        return None if stride in ((), [], None) else stride

    forms = {name: getattr(F, name) for name in (
        "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "bilinear",
        "cosine_similarity", "pairwise_distance", "pdist", "pixel_shuffle", "pixel_unshuffle", "celu", "selu",
        "prelu", "threshold", "rrelu", "adaptive_avg_pool1d", "ctc_loss")}
    forms.update(
        dropout=lambda input, p, train: F.dropout(input, p, train),
        alpha_dropout=lambda input, p, train: F.alpha_dropout(input, p, train),
        layer_norm=lambda input, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True:
            F.layer_norm(input, normalized_shape, weight, bias, eps),
        group_norm=lambda input, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=True:
            F.group_norm(input, num_groups, weight, bias, eps),
        rms_norm=lambda input, normalized_shape, weight=None, eps=None: F.rms_norm(input, normalized_shape, weight,
                                                                                   eps),
        batch_norm=lambda input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled:
            F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps),
        instance_norm=lambda input, weight, bias, running_mean, running_var, use_input_stats, momentum, eps,
        cudnn_enabled: F.instance_norm(input, running_mean, running_var, weight, bias, use_input_stats, momentum,
                                       eps),
        embedding=lambda weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False:
            F.embedding(indices, weight, padding_idx=None if padding_idx < 0 else padding_idx,
                        scale_grad_by_freq=scale_grad_by_freq),
        max_pool1d=lambda input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False:
            F.max_pool1d(input, kernel_size, stride_or_none(stride), padding, dilation, ceil_mode),
        max_pool2d=lambda input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False:
            F.max_pool2d(input, kernel_size, stride_or_none(stride), padding, dilation, ceil_mode),
        max_pool3d=lambda input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False:
            F.max_pool3d(input, kernel_size, stride_or_none(stride), padding, dilation, ceil_mode),
        avg_pool1d=lambda input, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True:
            F.avg_pool1d(input, kernel_size, stride_or_none(stride), padding, ceil_mode, count_include_pad),
        adaptive_max_pool1d=lambda input, output_size: F.adaptive_max_pool1d(input, output_size, return_indices=True),
        binary_cross_entropy_with_logits=lambda input, target, weight=None, pos_weight=None, reduction=0:
            F.binary_cross_entropy_with_logits(input, target, weight, reduction=_REDUCTIONS[reduction],
                                               pos_weight=pos_weight),
        kl_div=lambda input, target, reduction=0, *, log_target=False:
            F.kl_div(input, target, reduction=_REDUCTIONS[reduction], log_target=log_target),
    )
    return forms


# ---- installation ---------------------------------------------------------------------------------------

FUNCTIONS = dict(
    promote_types=promote_types, can_cast=can_cast, result_type=result_type,
    add=add, sub=sub, subtract=sub, rsub=rsub, mul=mul, multiply=mul, div=div, divide=div, true_divide=div,
    positive=positive, tan=tan, angle=angle, ldexp=ldexp, frexp=frexp, gcd=gcd, lcm=lcm, mvlgamma=mvlgamma,
    hardshrink=hardshrink, renorm=renorm, dot=dot, vdot=dot, inner=inner, mv=mv, addmv=addmv, addr=addr, ger=ger,
    adjoint=adjoint, det=det, logdet=logdet, slogdet=slogdet, inverse=inverse, pinverse=pinverse,
    matrix_power=matrix_power, matrix_exp=matrix_exp, lu_unpack=lu_unpack, lu_solve=lu_solve, cholesky=cholesky,
    cholesky_solve=cholesky_solve,
    cholesky_inverse=cholesky_inverse, triangular_solve=triangular_solve, svd=svd, qr=qr, chain_matmul=chain_matmul,
    frobenius_norm=frobenius_norm, nuclear_norm=nuclear_norm, atleast_1d=atleast_1d, atleast_2d=atleast_2d,
    atleast_3d=atleast_3d, column_stack=column_stack, dstack=dstack, concat=concat, concatenate=concat, t=_t,
    hsplit=hsplit, vsplit=vsplit, dsplit=dsplit, fliplr=fliplr, flipud=flipud, ravel=ravel, msort=msort,
    diagflat=diagflat, take_along_dim=take_along_dim, unravel_index=unravel_index, select_scatter=select_scatter,
    slice_scatter=slice_scatter, diagonal_scatter=diagonal_scatter, narrow_copy=narrow_copy, is_nonzero=is_nonzero,
    is_same_size=is_same_size, is_signed=is_signed, is_conj=_false, is_neg=_false, is_inference=_false,
    resolve_conj=_identity, resolve_neg=_identity, conj_physical=_identity, isreal=isreal,
    imag=imag, scalar_tensor=scalar_tensor, pi=math.pi, e=math.e, inf=_float("inf"), nan=_float("nan"), newaxis=None,
)
# Tensor methods: the function forms above that take the tensor first, plus method-only spellings.
_NOT_METHODS = {"promote_types", "can_cast", "result_type", "rsub", "chain_matmul", "atleast_1d", "atleast_2d",
                "atleast_3d", "column_stack", "dstack", "concat", "concatenate", "unravel_index", "scalar_tensor",
                "hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window", "pi", "e",
                "inf", "nan", "newaxis", "frobenius_norm", "nuclear_norm", "is_nonzero", "vdot"}
METHODS = {name: fn for name, fn in FUNCTIONS.items() if name not in _NOT_METHODS}
METHODS.update(
    add=add, mul=mul, vdot=dot, reshape_as=reshape_as, sum_to_size=sum_to_size, get_device=lambda self: -1,
    real=property(_identity), imag=property(imag), conj=_identity,  # real / imag: attributes, as torch's
    is_shared=_false, is_pinned=_false,
    pin_memory=lambda self, device=None: self,
    unsafe_chunk=lambda self, chunks, dim=0: self.chunk(chunks, dim),
    unsafe_split=lambda self, split_size, dim=0: self.split(split_size, dim),
    mH=property(adjoint), H=property(lambda self: adjoint(self) if self.dim() in (0, 2) else _H_error(self)),
)
# torch's other spellings of tessel methods: a function and a method each, both calling the method
for _alias, _method in (("absolute", "abs"), ("negative", "neg"), ("greater", "gt"), ("greater_equal", "ge"),
                        ("less", "lt"), ("less_equal", "le"), ("not_equal", "ne"), ("swapdims", "transpose"),
                        ("moveaxis", "movedim")):
    FUNCTIONS[_alias] = METHODS[_alias] = (lambda m: lambda input, *a, **k: getattr(input, m)(*a, **k))(_method)


def _H_error(self):
    raise RuntimeError("tensor.H is only supported on matrices (2-D tensors). Got %d-D tensor.%s"
                       % (self.dim(), " For batches of matrices, consider using tensor.mH" if self.dim() > 2 else ""))


# tessel's own definitions these replace: C++ add/mul took no Python numbers or alpha, and torch's dtype rules
# decide mul's result here as for the operators
_REPLACED = {"add", "mul"}


def install(namespace):
    """Functions into tessel's namespace (dict), methods and in-place methods onto Tensor; names tessel already
    has are kept."""
    from . import _inplace_methods, _special_more, _statistics
    functions = dict(FUNCTIONS, **_statistics.FUNCTIONS, **_nn_forms(), **_special_more.TORCH)
    for name, fn in functions.items():
        if name not in namespace or name in _REPLACED:
            namespace[name] = fn
    for name, fn in dict(METHODS, **_statistics.METHODS, **_special_more.METHODS).items():
        if not hasattr(Tensor, name) or name in _REPLACED:
            setattr(Tensor, name, fn)
    _inplace_methods.install()
