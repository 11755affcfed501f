"""torch._grouped_mm and torch.nn.functional.grouped_mm: the grouped GEMM of Mixture-of-Experts layers, one product
per group (expert) with jagged group sizes given by int32 end offsets, as torch 2.15 runs it on the CPU.

The four layouts (G groups, offs[g] the end of group g, s = offs[g - 1] its start):
  2d x 3d  mat_a [M, K], mat_b [G, K, N]   out [M, N]      out[s:e] = a[s:e] @ b[g]          (tokens by expert)
  2d x 2d  mat_a [M, K], mat_b [K, N]      out [G, M, N]   out[g] = a[:, s:e] @ b[s:e]       (weight gradients)
  3d x 2d  mat_a [G, M, K], mat_b [K, N]   out [M, N]      out[:, s:e] = a[g] @ b[:, s:e]
  3d x 3d  mat_a [G, M, K], mat_b [G, K, N] out [G, M, N]  out[g] = a[g] @ b[g]              (offs must be None)
Inputs are float32, bfloat16 or float16 of one dtype (each product rounds once, as torch's per-group mm); the output
has mat_a's dtype, inside an autocast region too (torch's CPU autocast lists leave it out). The backward is grouped products again (its node is torch's GroupedMmBackward0), so it is itself
differentiable (torch's CPU backward refuses a broadcast gradient and double backward; tessel runs both).

Where tessel is stricter or more defined than torch: offsets must be non-decreasing and within the jagged dimension
(torch reads them unchecked: out-of-range offsets read past the operand); the part of the output (and of the
gradients) past offs[-1], which torch leaves uninitialized, is zero. torch's 16-byte stride alignment, a limit of
its CUDA kernels that its CPU fallback also enforces, is not required.

DTensor operands run torch 2.15's single-dim strategies (distributed/tensor/_ops/_matrix_ops.py
grouped_mm_single_dim_strategy) through the register_sharding engine (distributed/tensor/_matrix_ops.py).

Example:
  x = tessel.randn(10, 64)                                  # 10 tokens routed to 3 experts: 4, 0 and 6 tokens
  w = tessel.randn(3, 64, 128, requires_grad=True)
  y = tessel.nn.functional.grouped_mm(x, w, offs=tessel.tensor([4, 4, 10], dtype=tessel.int32))   # [10, 128]
"""
import sys

from . import _C, _dtypes
from ._autocast_policy import autocast_off
from ._linalg_checks import name as _dtype_name

_FLOATS = (_dtypes.float32, _dtypes.bfloat16, _dtypes.float16)


def _check(mat_a, mat_b, offs, bias, out_dtype):
    """torch's checks, in its order and with its messages, plus the offsets' range (module doc); the group bounds."""
    for label, m in (("mat_a", mat_a), ("mat_b", mat_b)):
        if m.dtype not in _FLOATS:
            raise RuntimeError("Expected %s to be Float32, BFloat16 or Float16 matrix, got %s."
                               % (label, _dtype_name(m.dtype)))
    if mat_a.dtype != mat_b.dtype:
        raise RuntimeError("Expected mat_a and mat_b to have the same dtype, got %s and %s"
                           % (_dtype_name(mat_a.dtype), _dtype_name(mat_b.dtype)))
    for label, m in (("mat_a", mat_a), ("mat_b", mat_b)):
        if m.dim() not in (2, 3):
            raise RuntimeError("%s has to be 2 or 3d, got shape %s" % (label, list(m.shape)))
    a2, b2 = mat_a.dim() == 2, mat_b.dim() == 2
    if (a2 or b2) != (offs is not None):
        raise RuntimeError("Have to provide offsets if there is a 2d matrix, or no offset if both matrices are 3d")
    if offs is not None:
        if offs.dtype != _dtypes.int32:
            raise RuntimeError("Offsets have to be int32, got %s" % _dtype_name(offs.dtype))
        if offs.dim() != 1:
            raise RuntimeError("offs has to be 1D, got shape %s" % list(offs.shape))
        if tuple(offs.stride()) != (1,):
            raise RuntimeError("Offsets must have stride (1,), got %s" % (tuple(offs.stride()),))
    if mat_a.shape[-1] != mat_b.shape[-2] and not (a2 and b2):
        raise RuntimeError("contraction dimension of mat_a and mat_b must match: mat_a %s, mat_b %s"
                           % (list(mat_a.shape), list(mat_b.shape)))
    if a2 and b2 and mat_a.shape[1] != mat_b.shape[0]:
        raise RuntimeError("contraction dimension of mat_a and mat_b must match: mat_a %s, mat_b %s"
                           % (list(mat_a.shape), list(mat_b.shape)))
    if not (a2 or b2) and mat_a.shape[0] != mat_b.shape[0]:
        raise RuntimeError("batched dimension has to match: mat_a %s, mat_b %s"
                           % (list(mat_a.shape), list(mat_b.shape)))
    groups = mat_b.shape[0] if a2 and not b2 else mat_a.shape[0] if b2 and not a2 else None
    if offs is not None and groups is not None and offs.shape[0] != groups:
        raise RuntimeError("matrix batch sizes have to match: %d offsets for %d groups"
                           % (offs.shape[0], groups))
    if bias is not None:
        raise RuntimeError("Bias not supported yet")
    if out_dtype is not None and out_dtype != mat_a.dtype:
        raise RuntimeError("Grouped gemm output dtype must match `mat_a` dtype")
    if offs is None:
        return None
    ends = [int(v) for v in offs.tolist()]
    jagged = mat_a.shape[0] if a2 and not b2 else mat_a.shape[1] if a2 else mat_b.shape[1]
    start = 0
    for g, e in enumerate(ends):
        if not start <= e <= jagged:
            raise RuntimeError("grouped_mm: offsets must be non-decreasing and at most %d (the size of the dimension "
                               "they split), got offs = %s (group %d ends at %d)" % (jagged, ends, g, e))
        start = e
    return [(s, e) for s, e in zip([0] + ends[:-1], ends)]


def _tessel():
    return sys.modules[__package__]


@autocast_off  # (on neither of torch's CPU autocast lists: a float32 call stays float32 in a bfloat16 region)
def _dense(a, b, bounds):
    """The grouped products of local tensors, no autograd (bounds: each group's [start, end) of the jagged dim).
    One product per group, joined by one cat or stack: a product written through matmul(out=) cost 5x the
    product itself at 32-wide experts (its out= checks), a third of the op at 64 experts."""
    if a.dim() == 3 and b.dim() == 3:
        return a.matmul(b)
    tessel = _tessel()
    if a.dim() == 2 and b.dim() == 2:  # the contraction dim is split: one [M, N] block per group
        return tessel.stack([a.narrow(1, s, e - s).matmul(b.narrow(0, s, e - s)) for s, e in bounds])
    # the rows of a (2d x 3d) or the columns of b (3d x 2d) are split: the products side by side, zeros past
    # offs[-1]
    dim, size = (0, a.shape[0]) if a.dim() == 2 else (1, b.shape[1])
    parts = [a.narrow(0, s, e - s).matmul(b.select(0, g)) if dim == 0 else a.select(0, g).matmul(b.narrow(1, s, e - s))
             for g, (s, e) in enumerate(bounds) if e > s]
    rows, cols = (a.shape[0], b.shape[2]) if dim == 0 else (a.shape[1], b.shape[1])
    end = bounds[-1][1] if bounds else 0
    if end < size:
        parts.append(_C._full([size - end, cols] if dim == 0 else [rows, size - end], 0.0, a.dtype))
    return tessel.cat(parts, dim) if parts else _C._full([rows, cols], 0.0, a.dtype)


def _t(x):
    return x.transpose(-2, -1)


def _grouped_mm(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    """torch._grouped_mm (module doc)."""
    bounds = _check(mat_a, mat_b, offs, bias, out_dtype)
    if any(getattr(t, "is_distributed", False) for t in (mat_a, mat_b, offs)):
        from .distributed.tensor import _matrix_ops
        return _matrix_ops.grouped_mm(mat_a, mat_b, offs, out_dtype, _grouped_mm)
    with _C._GradMode(False):
        out = _dense(mat_a, mat_b, bounds)
    inputs = [t for t in (mat_a, mat_b) if t.requires_grad]
    if not (inputs and _C.is_grad_enabled()):
        return out
    a2, b2 = mat_a.dim() == 2, mat_b.dim() == 2

    def backward(grads):
        g = grads[0]
        # Each gradient is a grouped product of the other layout (torch's _grouped_mm backward formulas):
        # 2d x 3d: dA = gmm(g, bᵀ) (2d x 3d), dB = gmm(aᵀ, g) (2d x 2d); 2d x 2d: dA = gmm(g, bᵀ) (3d x 2d),
        # dB = gmm(aᵀ, g) (2d x 3d); 3d x 2d: dA = gmm(g, bᵀ) (2d x 2d), dB = gmm(aᵀ, g) (3d x 2d).
        result = []
        for t in inputs:
            if t is mat_a:
                result.append(_grouped_mm(g, _t(mat_b), offs) if (a2 or b2) else g.matmul(_t(mat_b)))
            else:
                result.append(_grouped_mm(_t(mat_a), g, offs) if (a2 or b2) else _t(mat_a).matmul(g))
        return result

    return _C._apply_function("GroupedMmBackward0", inputs, [out], [True], backward, True)[0]


def grouped_mm(mat_a, mat_b, *, offs=None, bias=None, out_dtype=None):
    """torch.nn.functional.grouped_mm(mat_a, mat_b, *, offs=None, bias=None, out_dtype=None) (module doc)."""
    return _grouped_mm(mat_a, mat_b, offs=offs, bias=bias, out_dtype=out_dtype)
