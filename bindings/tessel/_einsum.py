"""torch.einsum composed in Python as pairwise batched matmuls ('...' broadcast; no subscript repeated within
an operand), split from _extra.py by concept; importing it registers tessel.einsum.
"""
import builtins
import functools
import math

from . import _C
from ._extra import TORCH_FUNCTIONS

# ---- einsum ------------------------------------------------------------------------------------------------

def _einsum_parse(equation, operands):
    """Subscripts per operand and for the output, with '...' expanded to fresh letters (right-aligned
    across operands, as numpy and torch broadcast)."""
    return _parse_ranks(equation, tuple(x.ndim for x in operands))


# A training step calls the same einsum every time: the parse and each pair's plan are cached on the equation
# and the operand ranks / shapes (einsum("ij,jk->ik", A, B) cost ~61 us against torch's few, most of it here).
@functools.lru_cache(maxsize=512)
def _parse_ranks(equation, ranks):
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueError("einsum(): more operands were provided than specified in the equation"
                         if len(ranks) > len(terms) else "einsum(): fewer operands were provided than specified "
                         "in the equation")
    used = set(c for c in eq if c.isalpha())
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in used]
    ell_dims = 0
    for t, ndim in zip(terms, ranks):
        if "..." in t:
            ell_dims = builtins.max(ell_dims, ndim - len(t.replace("...", "")))
    ell = "".join(spare[:ell_dims])
    subs = []
    for t, ndim in zip(terms, ranks):
        if "..." in t:
            k = ndim - len(t.replace("...", ""))
            t = t.replace("...", ell[ell_dims - k:] if k else "")
        if len(t) != ndim:
            raise RuntimeError("einsum(): the number of subscripts in the equation (%d) does not match the number "
                               "of dimensions (%d) for operand %d" % (len(t), ndim, len(subs)))
        subs.append(t)
    if arrow:
        out = rhs.replace("...", ell)
    else:
        counts = {}
        for t in subs:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    return tuple(subs), out


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
    drop_a, drop_b, steps_a, steps_b, shape, subs = _pair_plan(sa, tuple(a.shape), sb, tuple(b.shape),
                                                               frozenset(keep))
    if drop_a:
        a = a.sum(list(drop_a))
    if drop_b:
        b = b.sum(list(drop_b))
    out = _arranged(a, steps_a) @ _arranged(b, steps_b)
    return out.reshape(*shape) if shape else out.reshape(()), subs


def _arranged(x, steps):
    order, full, flat = steps
    if order is not None:
        x = x.permute(*order)
    if full is not None:
        x = x.expand(*full)
    return x.reshape(*flat)


@functools.lru_cache(maxsize=512)
def _pair_plan(sa, a_shape, sb, b_shape, keep):
    """What _einsum_pair does for these subscripts and shapes: the dims each operand sums first, the permute /
    expand / reshape into [*batch, M, K] and [*batch, K, N] (None: not needed), and the result's shape and
    subscripts."""
    drop_a, sa, a_shape = _reduced(sa, a_shape, set(sb) | keep)
    drop_b, sb, b_shape = _reduced(sb, b_shape, set(sa) | keep)
    size = {}
    for shp, s in ((a_shape, sa), (b_shape, sb)):
        for c, n in zip(s, shp):
            if size.get(c, 1) != 1 and n not in (1, size[c]):
                raise RuntimeError("einsum(): operands do not broadcast with remapped shapes (letter %s: %d and %d)"
                                   % (c, size[c], n))
            size[c] = builtins.max(size.get(c, 1), n)
    batch = [c for c in sa if c in sb and c in keep]
    contract = [c for c in sa if c in sb and c not in keep]
    a_only = [c for c in sa if c not in sb]
    b_only = [c for c in sb if c not in sa]

    def arrange(shp, s, first, second, third):
        order = [s.index(c) for c in first + second + third]
        permuted = tuple(shp[i] for i in order)
        full = tuple(size[c] for c in first + second + third)
        # the batch dims stay apart (an N-D batched matmul), so a DTensor sharded on one of them (heads in
        # "bhqd,bhkd->bhqk") keeps that sharding instead of being gathered to flatten them
        prod = [math.prod([size[c] for c in g]) if g else 1 for g in (second, third)]
        return (tuple(order) if order != list(range(len(order))) else None,
                full if permuted != full else None, tuple([size[c] for c in first] + prod))

    steps_a = arrange(a_shape, sa, batch, a_only, contract)  # [*batch, M, K]
    steps_b = arrange(b_shape, sb, batch, contract, b_only)  # [*batch, K, N]
    shape = tuple(size[c] for c in batch + a_only + b_only)
    return drop_a, drop_b, steps_a, steps_b, shape, "".join(batch + a_only + b_only)


def _reduced(sub, shape, keep):
    """(dims summed, subscripts and shape left) of _einsum_reduce."""
    drop = tuple(i for i, c in enumerate(sub) if c not in keep)
    if not drop:
        return drop, sub, shape
    return drop, "".join(c for c in sub if c in keep), tuple(n for c, n in zip(sub, shape) if c in keep)


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


