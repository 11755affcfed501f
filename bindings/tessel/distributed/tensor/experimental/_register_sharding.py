"""register_sharding (torch.distributed.tensor.experimental.register_sharding): how a custom op runs on DTensors.

    @tessel.library.custom_op("mylib::rownorm", mutates_args=())
    def rownorm(x: Tensor, eps: float) -> Tensor:          # normalizes each row: rows are independent
        return x / (x.norm(dim=-1, keepdim=True) + eps)

    @register_sharding(tessel.ops.mylib.rownorm.default)
    def rownorm_sharding(x, eps):                           # x: a DTensorSpec (shape, ndim, placements)
        strategies = [([Replicate()], [Replicate(), None])]  # (output placements, input placements) per mesh dim
        for d in range(x.ndim - 1):                          # any dim but the last may be sharded
            strategies.append(([Shard(d)], [Shard(d), None]))
        return strategies

    y = rownorm(x_dt, 1e-6)   # x_dt [Shard(0)]: each rank normalizes its rows, no communication; y is [Shard(0)]

Semantics are torch 2.15's (`_register_sharding.py` with `expand_to_full_mesh_op_strategy` and the sharding
propagator's choice):
- The sharding function takes the op's arguments with each DTensor replaced by its DTensorSpec and returns
  (output placements, input placements) pairs for one mesh dim: one placement (or None for a non-tensor) per
  output and per argument, positional ones then keyword ones, in the call's order.
- Every combination over the mesh dims is a candidate (itertools.product, mesh dim 0 outermost). A candidate is
  dropped when a spec mixes Partial reduce ops (sum with avg excepted), or when it shards an input dim that does
  not exist or is smaller than its number of shards.
- Each candidate costs the sum of its inputs' moves in torch's cost model (PriceMove, the model tessel's own
  strategy choice uses). The pick is torch's `_select_min_cost_strategy`: the last candidate with no move, else
  the first free one, else the first cheapest.
- The inputs move (differentiably), the kernel runs on the local pieces, and each tensor output becomes a DTensor
  with its placements. An output that is sharded takes its global shape from every rank's piece (one small
  all_gather per mesh dim, which also raises the same error on every rank when the pieces do not fit the
  placements). torch reads it from the op's fake kernel instead.
- A dense tensor next to DTensors is Replicate when it has one element, or under implicit_replication() when it
  does not require grad (torch's rules). Otherwise the call raises torch's "mixed torch.Tensor and DTensor".
- Autograd: with register_autograd the op stays one node, and its backward runs on the DTensor gradients.
  Without it, autograd records the moves, the local ops and from_local. Each input piece's gradient is read in
  the layout the strategy implies: a Shard keeps its Shard; a Replicate input feeding an output that is sharded or
  Partial on a mesh dim gets a share from each rank there (Partial(avg) under Partial(avg) outputs, else
  Partial(sum)); otherwise Replicate. The moves'
  backward then brings each gradient back to its input's layout. torch raises at backward instead, since its
  custom op has no autograd formula.

Beyond torch: an argument the op mutates (mutates_args) never moves. Candidates that would move it are dropped,
and a call where all would raises ValueError, where torch would write into a temporary copy.

Not offered: overriding the strategies of tessel's built-in ops (aten.* handles). Their sharding rules are C++
(dtensor/rules) and run before any Python code, so register_sharding on one raises NotImplementedError.
"""
import inspect
import itertools

from .... import _C

__all__ = ["register_sharding"]


def register_sharding(op):
    """Registers the decorated function as the sharding strategies of `op` (a custom op or a list of them) on
    DTensors; returns the function unchanged."""
    targets = [_custom_op(o) for o in (op if isinstance(op, list) else [op])]

    def wrapper(custom_sharding_fn):
        for target in targets:
            target._sharding_fn = custom_sharding_fn
        return custom_sharding_fn
    return wrapper


def _custom_op(op):
    from ....library import CustomOpDef
    if isinstance(op, CustomOpDef):
        return op
    from .... import ops
    if isinstance(op, ops._AtenOverload):
        raise NotImplementedError(
            "register_sharding(%r): tessel's built-in ops choose their sharding in C++ (dtensor/rules) before any "
            "Python runs, so their strategies cannot be replaced from Python; register_sharding applies to ops "
            "defined with tessel.library.custom_op or Library.define" % (op,))
    raise TypeError("register_sharding: expected a custom op (tessel.library.custom_op / Library.define) or a list "
                    "of them, got %r" % (op,))


def _is_dtensor(x):
    return isinstance(x, _C.Tensor) and x.is_distributed


def has_dtensor(args, kwargs):
    return any(_is_dtensor(a) for a in args) or any(_is_dtensor(v) for v in kwargs.values())


class _Inputs:
    """The call's tensor arguments in torch's order (positional, then keyword), each as a DTensor: a dense one
    that is a replicated scalar (or implicitly replicated) is wrapped as Replicate."""

    def __init__(self, name, args, kwargs, mutated):
        entries = list(enumerate(args)) + list(kwargs.items())
        dtensors = [v for _, v in entries if _is_dtensor(v)]
        self.mesh = dtensors[0].device_mesh
        for d in dtensors[1:]:
            if d.device_mesh != self.mesh:
                raise ValueError("%s: DTensor inputs live on different meshes (%s and %s); cross-mesh ops are not "
                                 "supported" % (name, self.mesh, d.device_mesh))
        implicit = _C._implicit_replication_enabled()
        self.keys, self.tensors = [], []
        for key, v in entries:
            if not isinstance(v, _C.Tensor):
                continue
            if not v.is_distributed:
                if not (v.numel() == 1 or (implicit and not v.requires_grad)):
                    raise RuntimeError("%s: got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to "
                                       "DTensor before calling distributed operators!" % name)
                v = _C.from_local(v, self.mesh, [_C.Replicate()] * self.mesh.ndim, list(v.shape), None, False,
                                  None)
            self.keys.append(key)
            self.tensors.append(v)
        self.mutated = mutated

    def schema(self, args, kwargs):
        """The sharding function's arguments: each tensor replaced by its DTensorSpec."""
        specs = dict(zip(self.keys, (t._spec for t in self.tensors)))
        return (tuple(specs.get(i, a) for i, a in enumerate(args)),
                {k: specs.get(k, v) for k, v in kwargs.items()})

    def substitute(self, args, kwargs, locals_):
        pieces = dict(zip(self.keys, locals_))
        return (tuple(pieces.get(i, a) for i, a in enumerate(args)),
                {k: pieces.get(k, v) for k, v in kwargs.items()})


def _mutated_keys(op, args, kwargs):
    """The argument positions / names the op writes (its mutates_args), as keys of _Inputs."""
    names = op._mutates_args
    if not names:
        return set()
    try:
        params = list(inspect.signature(op._kernel()).parameters)
    except (TypeError, ValueError):
        params = []
    if names == "unknown":
        names = params
    keys = set(k for k in kwargs if k in names)
    keys.update(i for i in range(len(args)) if i < len(params) and params[i] in names)
    return keys


def _normalized(placement, ndim):
    if placement.is_shard() and placement.dim < 0:
        return _C.Shard(placement.dim + ndim)
    return placement


def _mixes_partials(placements):
    ops = {p.reduce_op for p in placements if p.is_partial()}
    return len(ops) > 1 and ops != {"sum", "avg"}


def _shardable(shape, placements, mesh):
    shards = [1] * len(shape)
    for axis, p in enumerate(placements):
        if p.is_shard():
            if not 0 <= p.dim < len(shape):
                return False
            shards[p.dim] *= mesh.size(axis)
            if shape[p.dim] < shards[p.dim]:
                return False
    return True


def _candidates(name, inputs, strategies, n_outputs):
    """torch's expand_to_full_mesh_op_strategy: (output placements per output, input placements per tensor input)
    for every kept combination, in itertools.product's order."""
    mesh = inputs.mesh
    rows = []
    for outs, ins in strategies:
        outs, ins = list(outs), list(ins)
        if len(outs) != n_outputs:
            raise ValueError("%s: a sharding strategy lists %d output placements for %d outputs" %
                             (name, len(outs), n_outputs))
        rows.append(outs + ins)
    if len({len(r) for r in rows}) > 1:
        raise ValueError("%s: the sharding strategies list different numbers of placements: %s" %
                         (name, [len(r) for r in rows]))
    for comb in itertools.product(rows, repeat=mesh.ndim):
        per_position = []
        for position, across in enumerate(zip(*comb)):
            if any(p is None for p in across):
                if any(p is not None for p in across):
                    raise AssertionError("%s: strategy position %d mixes None with placements across mesh dims: %s"
                                         % (name, position, across))
                per_position.append(None)
            else:
                per_position.append(tuple(across))
        if any(p is not None and _mixes_partials(p) for p in per_position):
            continue
        wanted = [p for p in per_position[n_outputs:] if p is not None]
        if len(wanted) != len(inputs.tensors):
            raise AssertionError("%s: the sharding strategy places %d tensor inputs, the call has %d" %
                                 (name, len(wanted), len(inputs.tensors)))
        wanted = [tuple(_normalized(p, t.dim()) for p in w) for w, t in zip(wanted, inputs.tensors)]
        if not all(_shardable(t.shape, w, mesh) for t, w in zip(inputs.tensors, wanted)):
            continue
        if any(key in inputs.mutated and w != t.placements for key, t, w in zip(inputs.keys, inputs.tensors, wanted)):
            continue
        yield per_position[:n_outputs], wanted


def _choose(candidates, tensors):
    """torch's _select_min_cost_strategy over (outputs, inputs) candidates: costs in torch's model."""
    if len(candidates) == 1:
        return candidates[0]
    costs, no_move, free = [], -1, -1
    for k, (_, wanted) in enumerate(candidates):
        cost = sum(_C._dtensor_redistribute_cost(t, list(w)) if w != t.placements else 0.0
                   for t, w in zip(tensors, wanted))
        costs.append(cost)
        if cost == 0:
            if all(w == t.placements for t, w in zip(tensors, wanted)):
                no_move = k
            elif free == -1:
                free = k
    if no_move != -1:
        return candidates[no_move]
    if free != -1:
        return candidates[free]
    return candidates[costs.index(min(costs))]


def sharded_call(op, args, kwargs):
    """Runs custom op `op` (its sharding function registered) on DTensor arguments."""
    return run_sharded(op._qualname, args, kwargs, op._sharding_fn, op._kernel(), _mutated_keys(op, args, kwargs))


def run_sharded(name, args, kwargs, sharding_fn, kernel, mutated=frozenset(), out_shapes=None):
    """kernel(*args, **kwargs) on DTensor arguments, as torch's dispatcher runs an op whose single-dim strategies
    sharding_fn gives (module doc): the cheapest candidate's moves, the kernel on the local pieces, the outputs
    wrapped. out_shapes: the outputs' global shapes when the caller knows them (else read from the pieces)."""
    inputs = _Inputs(name, args, kwargs, mutated)
    schema_args, schema_kwargs = inputs.schema(args, kwargs)
    strategies = sharding_fn(*schema_args, **schema_kwargs)
    n_outputs = len(strategies[0][0]) if strategies else 1
    candidates = list(_candidates(name, inputs, strategies, n_outputs))
    if not candidates:
        if inputs.mutated:
            raise ValueError("%s: every sharding strategy moves an argument the op mutates (%s); redistribute it to a "
                             "layout a strategy keeps first" % (name, sorted(map(str, inputs.mutated))))
        raise RuntimeError("%s: no valid sharding strategy for the input placements." % name)
    outs, wanted = _choose(candidates, inputs.tensors)
    moved = [t if t.placements == w else _C._dtensor_redistribute_for_strategy(t, list(w))
             for t, w in zip(inputs.tensors, wanted)]
    pieces = [m.to_local(grad_placements=_grad_placements(w, outs)) for m, w in zip(moved, wanted)]
    local_args, local_kwargs = inputs.substitute(args, kwargs, pieces)
    result = kernel(*local_args, **local_kwargs)
    if n_outputs == 0:
        return result
    single = not isinstance(result, (tuple, list))
    results = [result] if single else list(result)
    if len(results) != n_outputs:
        raise ValueError("%s: the kernel returned %d outputs, the sharding strategy places %d" %
                         (name, len(results), n_outputs))
    shapes = out_shapes or [None] * n_outputs
    wrapped = [_wrap(r, p, inputs.mesh, shape) for r, p, shape in zip(results, outs, shapes)]
    return wrapped[0] if single else type(result)(wrapped)


def _grad_placements(wanted, outs):
    """The layout of an input piece's gradient as autograd computes it through the local kernel: a Shard stays
    (each rank differentiates its own piece); a Replicate input feeding an output that is sharded or Partial on
    that mesh dim gets a share of its gradient from each rank: Partial(avg) when the outputs there are
    Partial(avg) (the output is the average of the ranks' results), else Partial(sum); otherwise Replicate (a
    Partial input's gradient is that of its combined value)."""
    grads = []
    for a, p in enumerate(wanted):
        there = [o[a] for o in outs if o is not None and not o[a].is_replicate()]
        if p.is_shard():
            grads.append(p)
        elif p.is_replicate() and there:
            avg = all(q.is_partial() and q.reduce_op == "avg" for q in there)
            grads.append(_C.Partial("avg") if avg else _C.Partial())
        else:
            grads.append(_C.Replicate())
    return grads


def _wrap(local, placements, mesh, shape=None):
    if placements is None or not isinstance(local, _C.Tensor):
        return local
    placements = [_normalized(p, local.dim()) for p in placements]
    if shape is not None:
        shape = list(shape)
    elif any(p.is_shard() for p in placements):
        shape = list(_C._dtensor_global_shape(local, mesh, placements))
    else:
        shape = list(local.shape)
    return _C.from_local(local, mesh, placements, shape, None, False, None)
