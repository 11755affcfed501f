"""torch._grouped_mm and torch.nn.functional.grouped_mm: the grouped GEMM of Mixture-of-Experts layers, one product
per group (expert) with jagged group sizes given by int32 end offsets, as torch 2.15 runs it on the CPU.

The four layouts (G groups, offs[g] the end of group g, s = offs[g - 1] its start):
  2d x 3d  mat_a [M, K], mat_b [G, K, N]   out [M, N]      out[s:e] = a[s:e] @ b[g]          (tokens by expert)
  2d x 2d  mat_a [M, K], mat_b [K, N]      out [G, M, N]   out[g] = a[:, s:e] @ b[s:e]       (weight gradients)
  3d x 2d  mat_a [G, M, K], mat_b [K, N]   out [M, N]      out[:, s:e] = a[g] @ b[:, s:e]
  3d x 3d  mat_a [G, M, K], mat_b [G, K, N] out [G, M, N]  out[g] = a[g] @ b[g]              (offs must be None)
Inputs are float32, bfloat16 or float16 of one dtype (each product rounds once, as torch's per-group mm); the output
has mat_a's dtype, inside an autocast region too (torch's CPU autocast lists leave it out). The kernel is one C++ op
(core/ops/grouped_mm.cc: a GEMM per group written into the output, small groups in parallel); its backward is
grouped products again (its node is torch's GroupedMmBackward0), so it is itself differentiable (torch's CPU backward
refuses a broadcast gradient and double backward; tessel runs both).

Where tessel is stricter or more defined than torch: offsets must be non-decreasing and within the jagged dimension
(torch reads them unchecked: out-of-range offsets read past the operand); the part of the output (and of the
gradients) past offs[-1], which torch leaves uninitialized, is zero. torch's 16-byte stride alignment, a limit of
its CUDA kernels that its CPU fallback also enforces, is not required.

DTensor operands are placed by the op's C++ sharding rule (dtensor/rules/grouped_mm.cc): torch 2.15's single-dim
strategies (distributed/tensor/_ops/_matrix_ops.py grouped_mm_single_dim_strategy) expanded over the mesh; the offsets
(a Replicate DTensor, as torch requires) are read as numbers.

Example:
  x = tessel.randn(10, 64)                                  # 10 tokens routed to 3 experts: 4, 0 and 6 tokens
  w = tessel.randn(3, 64, 128, requires_grad=True)
  y = tessel.nn.functional.grouped_mm(x, w, offs=tessel.tensor([4, 4, 10], dtype=tessel.int32))   # [10, 128]
"""
from . import _C, _dtypes
from ._autocast_policy import autocast_off
from ._linalg_checks import name as _dtype_name

_FLOATS = (_dtypes.float32, _dtypes.bfloat16, _dtypes.float16)


def _check(mat_a, mat_b, offs, bias, out_dtype):
    """torch's checks, in its order and with its messages, plus the offsets' range (module doc); the offsets as
    numbers ([] for 3d x 3d)."""
    for label, m in (("mat_a", mat_a), ("mat_b", mat_b)):
        if m.dtype not in _FLOATS:
            raise RuntimeError("Expected %s to be Float32, BFloat16 or Float16 matrix, got %s"
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
    if mat_a.shape[-1] != mat_b.shape[-2]:
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
        return []
    ends = [int(v) for v in offs.tolist()]
    jagged = mat_a.shape[0] if a2 and not b2 else mat_a.shape[1] if a2 else mat_b.shape[1]
    start = 0
    for g, e in enumerate(ends):
        if not start <= e <= jagged:
            raise RuntimeError("grouped_mm: offsets must be non-decreasing and at most %d (the size of the dimension "
                               "they split), got offs = %s (group %d ends at %d)" % (jagged, ends, g, e))
        start = e
    return ends


def _grouped_mm(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    """torch._grouped_mm (module doc)."""
    ends = _check(mat_a, mat_b, offs, bias, out_dtype)
    # one C++ op (core/ops/grouped_mm.cc): a Gemm per group into the output, its backward grouped products again
    return _kernel(mat_a, mat_b, ends)


@autocast_off  # (on neither of torch's CPU autocast lists: a float32 call stays float32 in a bfloat16 region)
def _kernel(mat_a, mat_b, ends):
    return _C._functional.grouped_mm(mat_a, mat_b, ends)


def grouped_mm(mat_a, mat_b, *, offs=None, bias=None, out_dtype=None):
    """torch.nn.functional.grouped_mm(mat_a, mat_b, *, offs=None, bias=None, out_dtype=None) (module doc)."""
    return _grouped_mm(mat_a, mat_b, offs=offs, bias=bias, out_dtype=out_dtype)
