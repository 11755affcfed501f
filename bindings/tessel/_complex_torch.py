"""Complex tensors (tessel/_complex.py) in tessel's namespace: torch functions given a complex tensor, and
Tensor's operators given a Python complex number (t * 1j, 1j * t, t == 1j: the C++ operators' last overload
calls number_operation: the real tensor promoted to torch's result type, then the complex operator).

install() runs last in tessel/__init__.py, after every other module has placed its functions, and wraps those
that need it: most of tessel's functions already call their first argument's method (tessel.exp, sum, reshape,
...), which ComplexTensor has; the others check for a ComplexTensor first (angle, tan, isinf, prod, ...: they
computed on the real part or raised), and those whose fast paths are C++ calls that refuse a ComplexTensor (cat,
stack, matmul, where, einsum) try that first and turn to the complex implementation only when it raised, so real
tensors pay no check there.
"""
import functools

from . import _C
from ._complex import ComplexTensor, complex64, complex128
from . import _complex_ops

_Tensor = _C.Tensor


# ---- Tensor's operators with a Python complex number ------------------------------------------------------

def _promoted(t, number):
    from ._promotion import result_type
    return t.to(result_type(t, number))


def number_operation(name, tensor, number):
    """tensor <name> number for a complex number: what the C++ operators call (tensor_ops_py.cc
    ComplexNumberOperation) once every real overload has declined, so real operands pay nothing for it."""
    return getattr(_promoted(tensor, number), name)(number)


# ---- functions ---------------------------------------------------------------------------------------------

def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """torch.isclose of complex tensors: |a - b| <= atol + rtol |b| with the moduli (an infinity close only to
    itself), NaN (in either part) equal to NaN with equal_nan."""
    if not isinstance(b, (_Tensor, ComplexTensor)):
        raise TypeError("isclose(): argument 'other' (position 2) must be Tensor, not %s" % type(b).__name__)
    if a.dtype != b.dtype:
        from ._promotion import _name
        raise RuntimeError("%s did not match %s" % (_name(a.dtype), _name(b.dtype)))
    for tol, value in (("rtol", rtol), ("atol", atol)):
        if not value >= 0:
            raise RuntimeError("%s must be greater than or equal to zero, but got %g" % (tol, value))
    close = a == b
    if equal_nan:
        close = close | (a.isnan() & b.isnan())
    if rtol == 0 and atol == 0:
        return close
    error = (a - b).abs()
    return close | (error.isfinite() & (error <= atol + (b * rtol).abs()))


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    return bool(isclose(a, b, rtol, atol, equal_nan).all())


def _method(name):
    def call(input, *args, **kwargs):
        return getattr(input, name)(*args, **kwargs)
    return call


def _refused(message):
    def refuse(input, *args, **kwargs):
        raise NotImplementedError(message)
    return refuse


# torch.<name>(z, ...) for a ComplexTensor z, where tessel's function does not already call z's method (exp, sum,
# reshape, ... do): its method, or the function given here
_BY_FIRST = dict(
    {n: _method(n) for n in (
        "angle conj_physical log10 log2 pow tan sinh cosh reciprocal sgn isinf isfinite isreal isposinf isneginf "
        "prod cumsum cumprod diag diagonal index_select adjoint vdot").split()},
    isclose=isclose, allclose=allclose,
    as_tensor=lambda data, dtype=None, device=None: data if dtype in (None, data.dtype) else data.to(dtype),
    isin=_refused("Unsupported input type encountered for isin(): ComplexFloat"),
    **{n: _refused("%s is not supported for complex tensors." % n) for n in ("deg2rad", "rad2deg")})


def _truth(x):
    return (x != 0) if type(x) is ComplexTensor else x


def _logical(fn):
    """torch's logical ops take a complex tensor as its nonzero entries."""
    @functools.wraps(fn)
    def logical(*args, **kwargs):
        return fn(*[_truth(a) for a in args], **kwargs)
    return logical


def _by_first(name, fn, impl):
    @functools.wraps(fn)
    def dispatch(input, *args, **kwargs):
        if type(input) is ComplexTensor:
            return impl(input, *args, **kwargs)
        return fn(input, *args, **kwargs)
    return dispatch


def _holds_complex(values):
    return any(type(v) is ComplexTensor for v in values)


def _on_failure(fn, impl, complex_args):
    """fn, and impl when fn raised for arguments among which complex_args(args, kwargs) finds a ComplexTensor."""
    @functools.wraps(fn)
    def dispatch(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception:  # noqa: BLE001 (re-raised unless a complex tensor explains it)
            if not complex_args(args, kwargs):
                raise
        return impl(*args, **kwargs)
    return dispatch


def _first_list(args, kwargs):
    tensors = args[0] if args else kwargs.get("tensors", ())
    return isinstance(tensors, (list, tuple)) and _holds_complex(tensors)


def _any_arg(args, kwargs):
    return _holds_complex(args) or _holds_complex(kwargs.values())


def _einsum_args(args, kwargs):
    ops = args[1:]
    if len(ops) == 1 and isinstance(ops[0], (list, tuple)):
        ops = ops[0]
    return _holds_complex(ops)


def _joined(impl):
    def join(tensors, dim=0, **kwargs):
        kwargs.pop("out", None)
        return impl(tensors, kwargs.pop("axis", dim))
    return join


def _where(condition, input=None, other=None):
    return _complex_ops.where(condition, input, other)


_ON_FAILURE = dict(
    cat=(_joined(_complex_ops.cat), _first_list), concat=(_joined(_complex_ops.cat), _first_list),
    concatenate=(_joined(_complex_ops.cat), _first_list), stack=(_joined(_complex_ops.stack), _first_list),
    matmul=(_complex_ops.matmul, _any_arg), where=(_where, _any_arg), einsum=(_complex_ops.einsum, _einsum_args))


def install(namespace):
    """Wraps the namespace's functions (a dict: tessel's globals)."""
    _Tensor.cfloat = lambda self: self.to(complex64)
    _Tensor.cdouble = lambda self: self.to(complex128)
    is_tensor = namespace["is_tensor"]
    namespace["is_tensor"] = functools.wraps(is_tensor)(lambda obj: is_tensor(obj) or type(obj) is ComplexTensor)
    for name in ("logical_and", "logical_or", "logical_xor", "logical_not"):
        if name in namespace:
            namespace[name] = _logical(namespace[name])
    for name, impl in _BY_FIRST.items():
        if name in namespace:
            namespace[name] = _by_first(name, namespace[name], impl)
    for name, (impl, finds) in _ON_FAILURE.items():
        if name in namespace:
            namespace[name] = _on_failure(namespace[name], impl, finds)
