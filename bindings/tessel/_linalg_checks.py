"""torch.linalg's argument checks and failure messages, shared by tessel/linalg.py, tessel/_linalg_lu.py and
tessel/_composed.py: the input checks torch runs before any LAPACK call (numpy's own complaints, "Last 2 dimensions of
the array must be square", named neither the function nor the shapes; an integer matrix was silently computed in
float64), and the messages of a failed factorization, which need LAPACK's info for the first failing matrix of a
batch (numpy's "Singular matrix" says neither which matrix nor which pivot). Scripts match on these texts: the
"not positive-definite" of a jitter-and-retry loop, the "Batch element" of a debugging session.
"""
import numpy as np

from . import _dtypes

_NAMES = {_dtypes.bool: "Bool", _dtypes.uint8: "Byte", _dtypes.int8: "Char", _dtypes.int16: "Short",
          _dtypes.int32: "Int", _dtypes.int64: "Long", _dtypes.float16: "Half", _dtypes.bfloat16: "BFloat16",
          _dtypes.float32: "Float", _dtypes.float64: "Double"}
_LOWER_NAMES = {"Float": "float", "Double": "double", "Half": "c10::Half", "BFloat16": "c10::BFloat16",
                "Long": "long int", "Int": "int"}


def name(dtype):
    """torch's ScalarType name of a dtype (Float, Double, Long, ComplexFloat, ...)."""
    if dtype in _NAMES:
        return _NAMES[dtype]
    text = str(dtype)
    return {"complex64": "ComplexFloat", "complex128": "ComplexDouble"}.get(text.rsplit(".", 1)[-1], text)


def _is_float_or_complex(x):
    return x.dtype.is_floating_point or x.is_complex()


def floating(x, fn, what="input"):
    """torch's checkFloatingOrComplex: NotImplementedError for integer and bool tensors."""
    if not _is_float_or_complex(x):
        raise NotImplementedError("%s: Expected a floating point or complex tensor as %s. Got %s"
                                  % (fn, what, name(x.dtype)))


def not_implemented_for(x, kernel):
    """torch's dispatch error for a dtype its kernel lacks ("lu_cpu" not implemented for 'Long')."""
    if not _is_float_or_complex(x):
        raise NotImplementedError("\"%s\" not implemented for '%s'" % (kernel, name(x.dtype)))


def at_least_2d(x, fn, arg="A"):
    if x.dim() < 2:
        raise RuntimeError("%s: The input tensor %s must have at least 2 dimensions." % (fn, arg))


def square(x, fn, arg="A"):
    """torch's squareCheckInputs: at least 2-D, and the last two dims equal."""
    at_least_2d(x, fn, arg)
    if x.shape[-1] != x.shape[-2]:
        raise RuntimeError("%s: %s must be batches of square matrices, but they are %d by %d matrices"
                           % (fn, arg, x.shape[-2], x.shape[-1]))


def same_dtype(a, b, fn, names=("A", "B")):
    if a.dtype != b.dtype:
        raise RuntimeError("%s: Expected %s and %s to have the same dtype, but found %s of type %s and %s of type %s "
                           "instead" % (fn, names[0], names[1], names[0], name(a.dtype), names[1], name(b.dtype)))


def dim_index(d, ndim):
    """d wrapped into [0, ndim) with torch's IndexError (a 0-d tensor takes dims 0 and -1)."""
    rank = max(ndim, 1)
    if not -rank <= d < rank:
        raise IndexError("Dimension out of range (expected to be in range of [%d, %d], but got %d)"
                         % (-rank, rank - 1, d))
    return d % rank


def dim_list(dim, ndim):
    """A dim argument (None: all; an int; a sequence) as wrapped indices, duplicates refused as torch's."""
    if dim is None:
        return tuple(range(ndim))
    dims = tuple(dim_index(d, ndim) for d in (dim if isinstance(dim, (tuple, list)) else (dim,)))
    for i, d in enumerate(dims):
        if d in dims[:i]:
            raise RuntimeError("dim %d appears multiple times in the list of dims" % d)
    return dims


def not_narrowing(x, dtype, fn):
    """torch's check on a norm's dtype= argument: floating, and no narrower than the input's."""
    if dtype is None:
        return
    if not dtype.is_floating_point:
        raise RuntimeError("%s: dtype should be floating point or complex, but got %s" % (fn, name(dtype)))
    wider = {_dtypes.float16: (_dtypes.float32, _dtypes.float64), _dtypes.bfloat16: (_dtypes.float32, _dtypes.float64),
             _dtypes.float32: (_dtypes.float64,)}
    narrows = x.dtype != dtype and dtype not in wider.get(x.dtype, ())  # torch's promote_types(input, dtype) != dtype
    if narrows:
        raise RuntimeError("%s: the dtype of the input (%s) should be convertible without narrowing to the specified "
                           "dtype (%s)" % (fn, name(x.dtype), name(dtype)))


# ---- LAPACK's info for one matrix -------------------------------------------------------------------------

def getrf_info(m):
    """getrf's info: 1 + the first column whose partial-pivoting pivot is exactly zero, else 0."""
    from ._linalg_lu import _getrf
    return int(_getrf(np.asarray(m, dtype=np.float64))[2])


def potrf_info(m):
    """potrf's info on the lower triangle: the order of the first leading minor whose pivot a_jj - Σ l_jk² is not
    positive, NaN included (numpy's cholesky let a NaN pivot through and returned NaNs)."""
    a = np.tril(np.asarray(m, dtype=np.float64))
    n = a.shape[-1]
    lower = np.zeros_like(a)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for j in range(n):
            pivot = a[j, j] - lower[j, :j] @ lower[j, :j]
            if not pivot > 0:
                return j + 1
            lower[j, j] = np.sqrt(pivot)
            lower[j + 1:, j] = (a[j + 1:, j] - lower[j + 1:, :j] @ lower[j, :j]) / lower[j, j]
    return 0


def _matrices(a):
    return a.reshape((-1,) + a.shape[-2:])


def first_failure(a, info_of):
    """(batch index, info) of the first matrix of a [..., n, n] whose info is not 0, or None."""
    for i, m in enumerate(_matrices(a)):
        code = info_of(m)
        if code:
            return i, code
    return None


def _prefix(ndim, index):
    return "(Batch element %d): " % index if ndim > 2 else ""


def inv_message(a, fn="linalg.inv"):
    found = first_failure(a, getrf_info)
    index, code = found if found else (0, a.shape[-1])
    return ("%s: %sThe diagonal element %d is zero, the inversion could not be completed because the input matrix "
            "is singular." % (fn, _prefix(a.ndim, index), code))


def cholesky_message(a, fn="linalg.cholesky"):
    found = first_failure(a, potrf_info)
    index, code = found if found else (0, a.shape[-1])
    return ("%s: %sThe factorization could not be completed because the input is not positive-definite (the "
            "leading minor of order %d is not positive-definite)." % (fn, _prefix(a.ndim, index), code))


def solve_message(a, fn="torch.linalg.solve"):
    found = first_failure(a, getrf_info)
    index = found[0] if found else 0
    return "%s: %sThe solver failed because the input matrix is singular." % (fn, _prefix(a.ndim, index))


def svd_message(a, fn="linalg.svd"):
    bad = [i for i, m in enumerate(_matrices(a)) if not np.isfinite(m).all()]
    if not bad:
        return "%s: The algorithm failed to converge because the input matrix is ill-conditioned or has too many " \
               "repeated singular values." % fn
    return ("%s: %sThe algorithm failed to converge because the input matrix contained non-finite values."
            % (fn, _prefix(a.ndim, bad[0])))


def lu_factor_message(ndim, info, fn):
    """lu_factor's RuntimeError (not a LinAlgError: torch raises it from its info check) for a batch's infos."""
    flat = np.asarray(info).reshape(-1)
    index = int(np.argmax(flat != 0))
    bad = int(flat[index])
    return ("%s: %sU[%d,%d] is zero and using it on lu_solve would result in a division by zero. If you still want "
            "to perform the factorization, consider calling linalg.lu(A, pivot) or linalg.lu_factor_ex(A, pivot)"
            % (fn, _prefix(ndim, index), bad, bad))


# ---- composed functions' checks (tessel/_composed.py) -----------------------------------------------------

def cross_inputs(input, other):
    if input.dim() != other.dim():
        raise RuntimeError("linalg.cross: inputs must have the same number of dimensions.")
    if input.dtype != other.dtype:
        raise RuntimeError("expected scalar type %s but found %s" % (name(input.dtype), name(other.dtype)))


def _lower_name(dtype):
    text = name(dtype)
    return _LOWER_NAMES.get(text, text)


def multi_dot_inputs(tensors):
    """torch's multi_dot checks: 1-D or 2-D ends, 2-D middles, one dtype, chained shapes."""
    n = len(tensors)
    if n < 2:
        raise RuntimeError("multi_dot(): expected at least 2 tensors but got %d" % n)
    for i, which in ((0, "first"), (n - 1, "last")):
        if tensors[i].dim() not in (1, 2):
            raise RuntimeError("multi_dot(): the %s tensor must be 1D or 2D but got %dD" % (which, tensors[i].dim()))
    for i in range(1, n - 1):
        if tensors[i].dim() != 2:
            raise RuntimeError("multi_dot(): tensor %d must be 2D but got %dD" % (i, tensors[i].dim()))
    for i in range(1, n):
        if tensors[i].dtype != tensors[0].dtype:
            raise RuntimeError("multi_dot(): all tensors must have be the same dtype but tensor 0 is %s and tensor %d "
                               "%s" % (_lower_name(tensors[0].dtype), i, _lower_name(tensors[i].dtype)))
    for i in range(n - 1):
        a, b = tensors[i], tensors[i + 1]
        inner_b = b.shape[0]
        if a.shape[-1] != inner_b:
            raise RuntimeError("multi_dot(): tensors %d and %d with shapes %s and %s cannot be multiplied"
                               % (i, i + 1, list(a.shape), list(b.shape)))


_COND_ORDERS = (None, 2, -2, 1, -1, float("inf"), float("-inf"), "fro", "nuc")


def cond_inputs(A, p):
    if A.dim() < 2:
        raise RuntimeError("linalg.cond: The input tensor must have at least 2 dimensions.")
    if not any(p == q and type(p) is not bool for q in _COND_ORDERS) and p is not None:
        raise ValueError("linalg.cond got an invalid norm type: %s" % (p,))
    if p not in (None, 2, -2):  # the norms of A⁻¹ need a square A (the singular values do not)
        square(A, "linalg.cond(ord=%s)" % (p if isinstance(p, str) else "%g" % p))


def solve_triangular_inputs(A, B, left):
    fn = "linalg.solve_triangular"
    square(A, fn)
    at_least_2d(B, fn, "B")
    if (A.shape[-2] != B.shape[-2]) if left else (A.shape[-1] != B.shape[-1]):
        raise RuntimeError("%s: Incompatible shapes of A and B for the equation %s (%dx%d and %dx%d)"
                           % (fn, "AX = B" if left else "XA = B", A.shape[-2], A.shape[-1], B.shape[-2], B.shape[-1]))
    not_implemented_for(A, "triangular_solve_cpu")
