"""torch.einsum composed in Python as pairwise batched matmuls ('...' broadcast; no subscript repeated within
an operand), split from _extra.py by concept; importing it registers tessel.einsum.
"""
import builtins

import numpy as np

from . import _C
from ._extra import TORCH_FUNCTIONS

# ---- einsum ------------------------------------------------------------------------------------------------

def _einsum_parse(equation, operands):
    """Subscripts per operand and for the output, with '...' expanded to fresh letters (right-aligned
    across operands, as numpy and torch broadcast)."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise ValueError("einsum(): more operands were provided than specified in the equation"
                         if len(operands) > len(terms) else "einsum(): fewer operands were provided than specified "
                         "in the equation")
    used = set(c for c in eq if c.isalpha())
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in used]
    ell_dims = 0
    for t, x in zip(terms, operands):
        if "..." in t:
            ell_dims = builtins.max(ell_dims, x.ndim - len(t.replace("...", "")))
    ell = "".join(spare[:ell_dims])
    subs = []
    for t, x in zip(terms, operands):
        if "..." in t:
            k = x.ndim - len(t.replace("...", ""))
            t = t.replace("...", ell[ell_dims - k:] if k else "")
        if len(t) != x.ndim:
            raise RuntimeError("einsum(): the number of subscripts in the equation (%d) does not match the number "
                               "of dimensions (%d) for operand %d" % (len(t), x.ndim, len(subs)))
        subs.append(t)
    if arrow:
        out = rhs.replace("...", ell)
    else:
        counts = {}
        for t in subs:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    return subs, out


def _einsum_diagonals(x, sub):
    """x with each letter repeated in its subscripts (einsum("ii", A), "bii->bi") replaced by the diagonal over
    those dims (moved last), and the subscripts without the repeats."""
    from ._composed import diagonal
    while len(set(sub)) != len(sub):
        c = next(c for c in sub if sub.count(c) > 1)
        i = sub.index(c)
        j = sub.index(c, i + 1)
        x = diagonal(x, 0, i, j)
        sub = sub[:i] + sub[i + 1:j] + sub[j + 1:] + c
    return x, sub


def _einsum_reduce(x, sub, keep):
    """Sums the letters of sub not in keep."""
    drop = [i for i, c in enumerate(sub) if c not in keep]
    if drop:
        x = x.sum(drop)
        sub = "".join(c for c in sub if c in keep)
    return x, sub


def _einsum_pair(a, sa, b, sb, keep):
    """The product of a (subscripts sa) and b (sb), summed over the shared letters not in keep, as one
    batched matmul; returns it with its subscripts."""
    a, sa = _einsum_reduce(a, sa, set(sb) | set(keep))
    b, sb = _einsum_reduce(b, sb, set(sa) | set(keep))
    size = {}
    for x, s in ((a, sa), (b, sb)):
        for c, n in zip(s, x.shape):
            if size.get(c, 1) != 1 and n not in (1, size[c]):
                raise RuntimeError("einsum(): operands do not broadcast with remapped shapes (letter %s: %d and %d)"
                                   % (c, size[c], n))
            size[c] = builtins.max(size.get(c, 1), n)
    batch = [c for c in sa if c in sb and c in keep]
    contract = [c for c in sa if c in sb and c not in keep]
    a_only = [c for c in sa if c not in sb]
    b_only = [c for c in sb if c not in sa]

    def arrange(x, s, first, second, third):
        order = [s.index(c) for c in first + second + third]
        x = x.permute(*order) if order != list(range(len(order))) else x
        full = [size[c] for c in first + second + third]
        if tuple(x.shape) != tuple(full):
            x = x.expand(*full)
        # the batch dims stay apart (an N-D batched matmul), so a DTensor sharded on one of them (heads in
        # "bhqd,bhkd->bhqk") keeps that sharding instead of being gathered to flatten them
        prod = [int(np.prod([size[c] for c in g])) if g else 1 for g in (second, third)]
        return x.reshape(*([size[c] for c in first] + prod))

    am = arrange(a, sa, batch, a_only, contract)  # [*batch, M, K]
    bm = arrange(b, sb, batch, contract, b_only)  # [*batch, K, N]
    out = am @ bm
    shape = [size[c] for c in batch + a_only + b_only]
    return out.reshape(*shape) if shape else out.reshape(()), "".join(batch + a_only + b_only)


def _from_sublists(args):
    """(equation, operands) of torch's sublist form: operand, sublist, operand, sublist, ..., [output sublist];
    the integers (0 to 51) name subscripts, Ellipsis stands for '...'."""
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

    def word(sub):
        return "".join("..." if s is Ellipsis else letters[int(s)] for s in sub)
    pairs = list(args)
    out = pairs.pop() if len(pairs) % 2 else None
    operands = tuple(pairs[0::2])
    equation = ",".join(word(sub) for sub in pairs[1::2])
    return (equation if out is None else equation + "->" + word(out)), operands


def einsum(equation, *operands):
    """torch.einsum over bound ops: each pair of operands is one batched matmul (with the sums, permutes
    and broadcasts around it), left to right, so gradients flow; '...' broadcasts; a subscript repeated
    inside one operand takes that operand's diagonal first (numpy's and torch's "ii", "ii->i")."""
    if not isinstance(equation, str):  # torch's sublist format: einsum(x, [0, 1], y, [1, 2], [0, 2])
        equation, operands = _from_sublists((equation,) + tuple(operands))
    elif len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    subs, out = _einsum_parse(equation, operands)
    for c in out:  # (the reduction's lookup raised "substring not found")
        if not any(c in sub for sub in subs):
            raise RuntimeError("einsum(): output subscript %s does not appear in the equation for any input operand" % c)
    integral = all(not t.dtype.is_floating_point for t in operands)
    if integral:  # through float64 (the matmuls are floating), exact below 2^53, then back to the operands'
        int_dtype = operands[0].dtype  # integer dtype (uint8 wraps as torch's: it was int64)
        for t in operands[1:]:
            int_dtype = _C._promote_types(int_dtype, t.dtype)
        operands = tuple(t.double() for t in operands)
    elif any(not t.dtype.is_floating_point for t in operands):
        raise RuntimeError("einsum(): operands must share one dtype (cast them first)")
    operands, subs = zip(*[_einsum_diagonals(t, sub) for t, sub in zip(operands, subs)])
    x, s = operands[0], subs[0]
    for i in range(1, len(operands)):
        later = set("".join(subs[i + 1:])) | set(out)
        x, s = _einsum_pair(x, s, operands[i], subs[i], later)
    x, s = _einsum_reduce(x, s, set(out))
    order = [s.index(c) for c in out]
    x = x.permute(*order) if order != list(range(len(order))) else x
    return x.round().long().to(int_dtype) if integral else x


TORCH_FUNCTIONS["einsum"] = einsum


