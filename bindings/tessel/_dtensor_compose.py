"""Functions composed in Python (tessel._extra, _special, nn._conv_ops, ...) on DTensor arguments.

A composed function builds its own constants (the ones padding a product's tree, a pool's weight of ones, the
masks of a `where`) as plain tensors. Next to a DTensor input those are replicated values, the same on every
rank, since they come from shapes and arguments only; the C++ dispatcher takes them so under implicit
replication (dtensor/dispatch.h). `composed(fn)` runs fn in that scope when an argument is a DTensor.

The user's own arguments keep torch's rule: a plain floating tensor (or one requiring grad) of more than one
element next to a DTensor raises, as torch's "got mixed torch.Tensor and DTensor" does, unless the caller is
inside implicit_replication(); a one-element one is replicated (a 1-d one with torch's UserWarning). Integer
and bool tensors (indices, masks, targets) are read as replicated, as tessel's indexing reads them. A function
whose tensor argument gives only a shape (expand_as, view_as: `shape_only`) takes any.

Why by hand: torch gets the same effect from its dispatcher running decompositions on DTensors; tessel's
compositions are Python, so the scope is entered here, once per outermost call (nested composed calls run
inside it unchanged).

The layout helpers the compositions share, so that an argument moves once rather than once per sub-op:
`aligned` (a function's DTensor arguments on one layout before it runs), `gathered_along` (a dim made whole
once: split, chunk, cumsum) and `by_index_pieces` (index_select / gather by a sharded index, locally).
"""
import functools
import inspect
import threading

from . import _C

_Tensor = _C.Tensor
_state = threading.local()


def refused_plain(t):
    """Whether the plain tensor t may not stand next to a DTensor (module doc): more than one element, floating
    (or requiring grad), outside implicit_replication()."""
    return t.ndim > 0 and t.numel() != 1 and (t.dtype.is_floating_point or t.requires_grad) and \
        not _C._implicit_replication_enabled()


def _warn_one_element(t):
    """torch's warning for a 1-d one-element plain tensor it replicates next to a DTensor."""
    if t.ndim == 1 and t.numel() == 1:
        import warnings
        from ._tensor import user_stacklevel
        warnings.warn("Found a non-scalar tensor with numel=1 and ndim!=0, we are implicitly creating a replicated "
                      "DTensor for it. However, please consider changing it to a scalar tensor or explicitly "
                      "create a DTensor under distributed environment.", UserWarning, stacklevel=user_stacklevel())


def shape_only(fn):
    """fn reads its tensor arguments other than the first for their shapes only (expand_as, view_as): a plain
    one is fine next to a DTensor, as torch's (which passes just the size to the op), and fn builds no
    constants, so composed leaves it as it is."""
    fn._tessel_composed = True
    return fn


def _tensors(args, kwargs):
    """(position, tensor) of every tensor argument, lists and tuples one level deep."""
    for pos, v in list(enumerate(args)) + list(kwargs.items()):
        if isinstance(v, _Tensor):
            yield pos, v
        elif isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                if isinstance(x, _Tensor):
                    yield "%s[%d]" % (pos, i), x


def _plain(values):
    """Whether none of values is a DTensor, a Tensor subclass or a list / tuple (composed's fast path)."""
    for a in values:
        if type(a) is _Tensor:
            if a.is_distributed:
                return False
        elif isinstance(a, (_Tensor, list, tuple)):
            return False
    return True


def composed(fn):
    """fn on DTensors: its constants replicated, the user's plain floating tensors refused (module doc)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        # Fast path (every unary op pays this wrapper): no DTensor among the arguments and no list/tuple to look
        # into: fn runs as the general path below would run it.
        if _plain(args) and (not kwargs or _plain(kwargs.values())):
            return fn(*args, **kwargs)
        if getattr(_state, "inside", False):
            return fn(*args, **kwargs)
        lead = next(((pos, t) for pos, t in _tensors(args, kwargs) if t.is_distributed), None)
        if lead is None:  # the common case: one pass over the arguments
            return fn(*args, **kwargs)
        plain = None
        for pos, t in _tensors(args, kwargs):
            if not t.is_distributed:
                if refused_plain(t):
                    plain = pos, t
                    break
                _warn_one_element(t)
        if plain is not None:
            (dpos, d), (ppos, p) = lead, plain
            raise _C.InvalidArgumentError(
                "%s: got mixed DTensor and plain tensor arguments: argument %s is a DTensor of shape %s ([%s]) but "
                "argument %s is a plain %s tensor of shape %s; distribute it (distribute_tensor / "
                "DTensor.from_local) or call inside implicit_replication(), as torch requires"
                % (getattr(fn, "__name__", "function"), dpos, list(d.shape), ", ".join(map(str, d.placements)), ppos,
                   str(p.dtype).replace("tessel.", ""), list(p.shape)))
        _state.inside = True
        guard = _C._ImplicitReplication()
        guard.__enter__()
        try:
            return fn(*args, **kwargs)
        finally:
            guard.__exit__(None, None, None)
            _state.inside = False
    wrapper._tessel_composed = True
    return wrapper


def wrap_all(table):
    """table's Python functions wrapped by composed (in place; builtins, properties and wrapped ones kept)."""
    for name, fn in list(table.items()):
        if inspect.isfunction(fn) and not getattr(fn, "_tessel_composed", False):
            table[name] = composed(fn)
    return table


def _lead(args):
    """The DTensor argument whose layout the others of its shape take: of those shaped as the first DTensor, the
    most sharded, the lowest sharded dims first, as torch's pointwise strategies rank theirs (a Replicate operand
    is then sliced for free and a Partial one reduce-scattered, not the Shard gathered); the first on ties."""
    dts = [a for a in args if isinstance(a, _Tensor) and a.is_distributed]
    if not dts:
        return None
    same = [a for a in dts if tuple(a.shape) == tuple(dts[0].shape) and a.device_mesh == dts[0].device_mesh]

    def rank(a):
        dims = [p.dim if p.is_shard() else 1 << 30 for p in a.placements]
        return (-sum(p.is_shard() for p in a.placements), dims)
    return min(same, key=rank)


def aligned_args(args):
    """aligned's arguments: the DTensors of the lead's shape (_lead) on its placements with its Partial mesh dims
    reduced as torch's pointwise strategies reduce them (_reduce_partials), the others' Partial mesh dims
    all-reduced; each moved by one redistribute."""
    lead = _lead(args)
    if lead is None:
        return args
    from .distributed.tensor import Partial, Replicate

    def reduced(placements):
        return tuple(Replicate() if p.is_partial() else p for p in placements)

    dts = [a for a in args if isinstance(a, _Tensor) and a.is_distributed]
    same = [a for a in dts if tuple(a.shape) == tuple(lead.shape) and a.device_mesh == lead.device_mesh]
    any_shard = any(p.is_shard() for a in dts for p in a.placements)
    # a mesh dim the lead replicates where another operand is Partial: that one is reduced as the lead's own
    # Partial would be (the lead's copy is sliced for free to match a reduce-scatter)
    target = [p if not p.is_replicate() or not any(a.placements[m].is_partial() for a in same) else Partial()
              for m, p in enumerate(lead.placements)]
    target = tuple(_reduce_partials(target, lead.shape, lead.device_mesh, any_shard))
    out = []
    for a in args:
        if isinstance(a, _Tensor) and a.is_distributed:
            want = target if tuple(a.shape) == tuple(lead.shape) and a.device_mesh == lead.device_mesh \
                else reduced(a.placements)
            if tuple(want) != tuple(a.placements):
                a = a.redistribute(a.device_mesh, want)
        out.append(a)
    return tuple(out)


def aligned(fn):
    """For a function composed of several sub-ops that each read its tensor arguments (atan2, maximum, lerp,
    softplus, ...): on DTensor arguments, their layouts are made to agree once, before the sub-ops run (Partial
    mesh dims all-reduced, since the sub-ops are not linear; arguments of the first DTensor's shape moved to its
    placements), so no sub-op redistributes an argument again. Without it each sub-op redistributed the same
    input: atan2 of an S(0) and an S(1) tensor ran 7 all-to-alls forward and 102 backward (torch: 1 and 2), of a
    Partial 38 all-reduces. Positional tensor arguments only; the rest pass through."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        for a in args:  # (a loop, not any(genexpr): maximum, lerp, ... pay it on every call)
            if isinstance(a, _Tensor) and a.is_distributed:
                args = aligned_args(args)
                break
        return fn(*args, **kwargs)
    return wrapper


def gathered_along(x, dim):
    """x, or a DTensor sharded along dim gathered along it once (Replicate on those mesh dims), so that the
    pieces of a split, or the shifted copies of a cumsum, are local: each gathered the tensor again (chunk(3) of
    an S(1) tensor: three all-gathers; torch: one)."""
    if not x.is_distributed or x.ndim == 0:
        return x
    d = dim % x.ndim
    from .distributed.tensor import Replicate
    want = tuple(Replicate() if p.is_shard() and p.dim % x.ndim == d else p for p in x.placements)
    return x if want == tuple(x.placements) else x.redistribute(x.device_mesh, want)


def _reduce_partials(want, shape, mesh, any_shard, excluded=()):
    """want (a placement list) with each Partial mesh dim reduced as torch 2.15's single-dim strategies reduce
    one: reduce-scattered onto the lowest tensor dim (not in excluded) that no mesh dim to its right shards and
    that has a piece for every rank, when some operand is sharded (torch fills its Shard options only then);
    all-reduced (Replicate) otherwise."""
    from .distributed.tensor import Replicate, Shard
    ndim = len(shape)
    for a, p in enumerate(want):
        if not p.is_partial():
            continue
        want[a] = Replicate()
        if not any_shard:
            continue
        right = {q.dim % ndim for q in want[a + 1:] if q.is_shard()}
        for d in range(ndim):
            shards = mesh.size(a)
            for b, q in enumerate(want):
                if b != a and q.is_shard() and q.dim % ndim == d:
                    shards *= mesh.size(b)
            if d not in excluded and d not in right and shape[d] >= shards:
                want[a] = Shard(d)
                break
    return want


def for_nonlinear_reduction(x, dims):
    """x, or a DTensor laid out as torch's single-dim strategy for a non-linear reduction over dims (var, std:
    _reduction_single_dim_strategy with reduction_linear=False) takes it: a mesh dim sharding a reduced dim is
    gathered; a Partial one is reduce-scattered onto the first kept dim it can split when some mesh dim shards
    x (torch fills its Shard options only then), else all-reduced; a Replicate one right of a gathered one is
    split on that kept dim too (its chunk shrinks the gather); kept dims stay sharded."""
    if not x.is_distributed or x.ndim == 0:
        return x
    from .distributed.tensor import Partial, Replicate
    reduced = {d % x.ndim for d in dims}
    mesh, current = x.device_mesh, tuple(x.placements)
    gathered = [a for a, p in enumerate(current) if p.is_shard() and p.dim % x.ndim in reduced]
    # a Replicate mesh dim right of a gathered one: torch's planner chunks that one first, so the gather moves
    # fewer bytes; marked Partial here to take the same choice of dim
    want = [Replicate() if a in gathered else Partial() if p.is_replicate() and gathered and gathered[0] < a else p
            for a, p in enumerate(current)]
    want = tuple(_reduce_partials(want, x.shape, mesh, any(q.is_shard() for q in current), excluded=reduced))
    return x if want == current else x.redistribute(mesh, want)


def by_index_pieces(x, index, select, shape, placements, aligned_dims=(), along=None):
    """select(x's whole local value, this rank's piece of index) as a DTensor laid out as `placements` (index's,
    mapped to the output's dims), when x is replicated on index's mesh and index is sharded (no Partial): each rank
    selects its own rows, no communication (torch's index_select / gather follow the index's sharding; they
    all-gathered the index). x's gradient is each rank's part (Partial), reduced where x needs it. An index
    sharded along one of `aligned_dims` (gather's dims other than its own, where x and the index have one size)
    takes x's matching rows: x is sliced there first (Replicate to Shard: local). `along`: the dim the index
    picks from; an x sharded only along it is gathered there first (torch replicates the input and follows the
    index's sharding). None otherwise."""
    from ._tensor import _contiguous_strides
    if along is not None and isinstance(x, _Tensor) and x.is_distributed and isinstance(index, _Tensor) and \
            index.is_distributed and any(p.is_shard() for p in index.placements) and \
            all(p.is_replicate() or (p.is_shard() and p.dim % x.ndim == along % x.ndim) for p in x.placements):
        x = gathered_along(x, along)
    if not (isinstance(index, _Tensor) and index.is_distributed and isinstance(x, _Tensor) and x.is_distributed) or \
            index.device_mesh != x.device_mesh or not all(p.is_replicate() for p in x.placements) or \
            any(p.is_partial() for p in index.placements) or all(p.is_replicate() for p in index.placements):
        return None
    from .distributed.tensor import Partial, Replicate
    sliced = [p if p.is_shard() and p.dim % index.ndim in aligned_dims else None for p in index.placements]
    if any(p is not None for p in sliced):
        x = x.redistribute(x.device_mesh, [p if p is not None else q for p, q in zip(sliced, x.placements)])
    # On a mesh dim where the index is sharded each rank's gradient is its rows' part (Partial); where it is
    # replicated every rank computes the same whole gradient (Partial there counted it once per rank: 3x on a 2 x 3
    # mesh).
    grads = [s if s is not None else (Partial() if p.is_shard() else Replicate())
             for s, p in zip(sliced, index.placements)]
    local = select(x.to_local(grad_placements=grads), index.to_local())
    return _C.from_local(local, x.device_mesh, list(placements), list(shape), _contiguous_strides(shape), False)
