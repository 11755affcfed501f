"""addmm and baddbmm on DTensors as torch 2.15 runs them: one op whose bias takes the product's layout
(torch/distributed/tensor/_ops/_matrix_ops.py, gen_single_dim_einsum_strategies with a bias shape), not a product
followed by an add, which chose the product's layout from the two matrices alone and then moved the bias (or the
product) to meet it.

The single-dim strategies, per mesh dim, in torch's order: everything Replicate; then each batch dim sharded; the
contracted dim sharded in both matrices (output Partial(sum)); the rows of the first matrix; the columns of the
second; one matrix Partial(sum), then Partial(avg), with the other Replicate. The bias takes the output's placement,
Replicate on a dim it broadcasts over. The Shard strategies are offered only when some input is sharded, as torch
fills its Shard placeholders from the inputs' placements. Expansion over the mesh, the choice among candidates and
the run on local pieces are register_sharding's (experimental/_register_sharding.py: torch's
expand_to_full_mesh_op_strategy and cost model); the output's global shape is the product's, so no collective
reads it. Autograd records the moves, the local addmm and from_local.
"""
from .experimental import _register_sharding

_EQUATIONS = {2: ("mk", "kn", "mn"), 3: ("bmk", "bkn", "bmn")}


def einsum_strategies(lhs, rhs, out, bias_shape, any_shard):
    """torch's gen_single_dim_einsum_strategies(lhs,rhs->out, bias_shape) with its all-Replicate strategy first:
    [([output], [bias, lhs, rhs]), ...]; Shard strategies only when any_shard."""
    from . import Partial, Replicate, Shard
    pad = len(out) - len(bias_shape)
    bias_dim = [-1 if i < pad or bias_shape[i - pad] == 1 else i - pad for i in range(len(out))]

    def row(o, a, b):
        bias = (Replicate() if bias_dim[o.dim] < 0 else Shard(bias_dim[o.dim])) if o.is_shard() else o
        return ([o], [bias, a, b])

    rows = [row(Replicate(), Replicate(), Replicate())]
    if any_shard:
        for c in out:  # batch dims
            if c in lhs and c in rhs:
                rows.append(row(Shard(out.index(c)), Shard(lhs.index(c)), Shard(rhs.index(c))))
        for c in lhs:  # contracted
            if c in rhs and c not in out:
                rows.append(row(Partial(), Shard(lhs.index(c)), Shard(rhs.index(c))))
        for c in lhs:
            if c in out and c not in rhs:
                rows.append(row(Shard(out.index(c)), Shard(lhs.index(c)), Replicate()))
        for c in rhs:
            if c in out and c not in lhs:
                rows.append(row(Shard(out.index(c)), Replicate(), Shard(rhs.index(c))))
    for op in ("sum", "avg"):
        rows.append(row(Partial(op), Partial(op), Replicate()))
        rows.append(row(Partial(op), Replicate(), Partial(op)))
    return rows


def addmm(name, input, mat1, mat2, kernel):
    """kernel(input, mat1, mat2) (the dense addmm / baddbmm) on DTensor arguments, placed as torch's single op."""
    if mat1.dim() not in _EQUATIONS or mat2.dim() != mat1.dim():
        raise RuntimeError("%s: expected two matrices (or two batches of matrices) of the same rank, got %d-D and "
                           "%d-D" % (name, mat1.dim(), mat2.dim()))
    lhs, rhs, out = _EQUATIONS[mat1.dim()]
    out_shape = list(mat1.shape[:-1]) + [mat2.shape[-1]]
    any_shard = any(getattr(t, "is_distributed", False) and any(p.is_shard() for p in t.placements)
                    for t in (input, mat1, mat2))

    def strategies(bias, a, b):
        return einsum_strategies(lhs, rhs, out, list(bias.shape), any_shard)

    return _register_sharding.run_sharded(name, (input, mat1, mat2), {}, strategies, kernel, out_shapes=[out_shape])
