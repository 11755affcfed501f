"""get_total_norm / clip_grad_norm_ on plain tensors the way torch computes them, with their rounding: each
tensor's norm in its own dtype (_foreach_norm), the norm of those in the promoted dtype, and the clip coefficient
max_norm / (total + 1e-6) computed in that dtype too. It matters for bfloat16 / float16 gradients (the scale
comes from the rounded norm: 12.875 became 0.92188, torch's 0.92578; an fp16 norm above 65504 is inf and torch
zeroes the gradients) and for mixed dtypes (the result takes the promoted dtype, not the first gradient's).
The values are computed in float64 on the host and rounded where torch's tensors round."""
from ... import _C

_INF = float("inf")


def _real(dtype):
    return dtype.to_real() if dtype.is_complex else dtype


def _round(value, dtype):
    """value as a 0-d tensor of dtype holds it (float32 first for the reduced dtypes: torch's opmath)."""
    if dtype == _C.dtype.float64 or value != value or value in (_INF, -_INF):
        return value
    if dtype in (_C.dtype.bfloat16, _C.dtype.float16):
        value = _C._full([], value, _C.dtype.float32).item()
    return _C._full([], value, dtype).item()


def check(tensors, p):
    """torch's errors for what it cannot take a norm of, in its order."""
    from ..._tensor import _torch_dtype_name
    if tensors[0] is None:
        raise AttributeError("'NoneType' object has no attribute 'device'")
    for i, t in enumerate(tensors):
        if t is None:
            raise RuntimeError("Tensors of the first list of nested Tensor lists are supposed to be defined but the "
                               "%d-th Tensor is not." % i)
    for t in tensors:
        if not (t.dtype.is_floating_point or t.dtype.is_complex):
            raise NotImplementedError("linalg.vector_norm: Expected a floating point or complex tensor as input. "
                                      "Got %s" % _torch_dtype_name(t.dtype))
    if p in (_INF, -_INF) and any(t.numel() == 0 for t in tensors):
        if p > 0:
            raise RuntimeError("_foreach_norm cannot compute the infinity norm on an empty tensor because the "
                               "operation does not have an identity")
        raise RuntimeError("linalg.vector_norm cannot compute the -inf norm on an empty tensor because the operation "
                           "does not have an identity")


def dtype_of(tensors):
    """The dtype of torch's total: the promotion of the per-tensor norms' (real) dtypes."""
    from ... import promote_types
    out = _real(tensors[0].dtype)
    for t in tensors[1:]:
        out = promote_types(out, _real(t.dtype))
    return out


def _pow(x, y):
    return _INF if x == 0 and y < 0 else x ** y  # (0 ** -1 raises in Python; a tensor gives inf)


def _vector_norm(values, p):
    if p == _INF:
        return float("nan") if any(v != v for v in values) else max(values)
    if p == -_INF:
        return float("nan") if any(v != v for v in values) else min(values)
    if p == 0:
        return float(sum(1 for v in values if v != 0))
    return _pow(sum(_pow(abs(v), p) for v in values), 1.0 / p)


def total(tensors, p):
    """torch's total norm of plain tensors (a float, rounded to dtype_of(tensors))."""
    norms = []
    with _C._GradMode(False):
        for t in tensors:
            a = t.detach().abs().double()
            if p == _INF:
                v = a.amax().item()
            elif p == -_INF:
                v = a.amin().item()
            elif p == 0:
                v = float((a != 0).sum().item())
            else:
                v = _pow((a ** p).sum().item(), 1.0 / p)
            norms.append(_round(v, _real(t.dtype)))
    return _round(_vector_norm(norms, p), dtype_of(tensors))


def coefficient(max_norm, total_norm, dtype):
    """min(max_norm / (total_norm + 1e-6), 1) as torch's 0-d tensors of dtype compute it (the division is
    reciprocal then product: Tensor.__rtruediv__); NaN stays NaN (clamp)."""
    if dtype == _C.dtype.float64:
        coef = max_norm / (total_norm + 1e-6)
    else:
        shifted = _round(total_norm + _C._full([], 1e-6, _C.dtype.float32).item(), dtype)
        reciprocal = _round(1.0 / shifted, dtype) if shifted else _INF
        coef = _round(reciprocal * _round(float(max_norm), _C.dtype.float32), dtype)
    return coef if coef != coef or coef < 1.0 else 1.0


def scale(grads, coef, dtype):
    """Every gradient times the coefficient of `dtype` (torch multiplies a float32 / float64 gradient by it cast to
    the gradient's dtype; a reduced-precision one in float32 arithmetic)."""
    with _C._GradMode(False):
        for g in grads:
            if g.dtype == _C.dtype.float32 and dtype == _C.dtype.float64:
                g.mul_(_round(coef, _C.dtype.float32))
            else:
                g.mul_(coef)
