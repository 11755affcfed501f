"""tessel.distributed.pipelining.microbatch: torch's chunking helpers, with torch's rules. TensorChunkSpec(d)
splits a tensor argument along dim d (tensor_split: the first size % chunks chunks are one longer),
_Replicate gives it whole to every chunk; without specs tensors split along dim 0 and other values are
replicated; merge_chunks concatenates the chunks' tensors back along their spec's dim. The schedules split
their inputs along dim 0 (TensorChunkSpec(0) for every argument is what they accept)."""
from ... import _C
from ...utils._pytree import tree_flatten, tree_map, tree_unflatten

DEFAULT_CHUNK_DIM = 0


class TensorChunkSpec:
    """Split a tensor argument along `split_dim`."""

    def __init__(self, split_dim):
        self.split_dim = split_dim

    def __repr__(self):
        return "%s.%s(%d)" % (type(self).__module__, type(self).__name__, self.split_dim)

    def __str__(self):
        return "TensorChunkSpec(%d)" % self.split_dim

    def __eq__(self, other):
        return isinstance(other, TensorChunkSpec) and other.split_dim == self.split_dim

    __hash__ = None

    @staticmethod
    def from_tuple(chunk_dims):
        """(d0, d1, ...) -> (TensorChunkSpec(d0), TensorChunkSpec(d1), ...)."""
        return tuple(TensorChunkSpec(d) for d in chunk_dims)

    @staticmethod
    def from_dict(chunk_dims):
        """{name: d} -> {name: TensorChunkSpec(d)}."""
        return {k: TensorChunkSpec(d) for k, d in chunk_dims.items()}


class _Replicate:
    """Give the argument whole to every chunk (torch's)."""


def _spec_leaf(x):
    """A leaf of a chunk spec's tree (None included, as torch's pytree treats it)."""
    return x is None or x is _Replicate or isinstance(x, (TensorChunkSpec, _Replicate))


def _replicated(spec):
    return spec is _Replicate or isinstance(spec, _Replicate)


def _shard_dict_of_args(args, specs, chunks):
    """torch's: the chunks of a dict of arguments, each leaf by its spec (TensorChunkSpec or _Replicate);
    fewer than `chunks` when a split tensor is shorter than that along its dim."""
    if not args:
        return [{} for _ in range(chunks)]
    if specs is None or len(specs) != len(args):
        raise ValueError("split_args_kwargs_into_chunks: arguments %s but chunk specs for %s"
                         % (list(args), list(specs or {})))
    values, treespec = tree_flatten(args)
    leaf_specs, _ = tree_flatten(specs, is_leaf=_spec_leaf)
    if len(leaf_specs) != len(values):
        raise ValueError("split_args_kwargs_into_chunks: the chunk specs %r do not match the arguments' structure"
                         % (specs,))
    sizes = []
    for v, spec in zip(values, leaf_specs):
        if _replicated(spec):
            sizes.append(chunks)
        elif isinstance(v, _C.Tensor) and isinstance(spec, TensorChunkSpec):
            sizes.append(v.size(spec.split_dim))
        else:
            raise ValueError("Unsupported chunk spec: %s and value: %s combination." % (spec, v))
    n = min(sizes + [chunks])
    pieces = [[v] * n if _replicated(spec) else list(v.tensor_split(n, spec.split_dim))
              for v, spec in zip(values, leaf_specs)]
    return [tree_unflatten([p[c] for p in pieces], treespec) for c in range(n)]


def split_args_kwargs_into_chunks(args, kwargs, chunks, args_chunk_spec=None, kwargs_chunk_spec=None):
    """torch's: (list of args tuples, list of kwargs dicts), one per chunk. Without specs, tensors split along
    dim 0 and other values go whole to every chunk; with specs, each leaf needs a TensorChunkSpec (a tensor)
    or _Replicate. A tensor shorter than `chunks` along its dim makes that many chunks instead."""
    kwargs = kwargs or {}

    def default(v):
        return TensorChunkSpec(DEFAULT_CHUNK_DIM) if isinstance(v, _C.Tensor) else _Replicate()

    if args_chunk_spec is None:
        args_chunk_spec = tuple(tree_map(default, a) for a in args)
    if kwargs_chunk_spec is None:
        kwargs_chunk_spec = {k: tree_map(default, v) for k, v in kwargs.items()}
    arg_chunks = _shard_dict_of_args(dict(enumerate(args)), dict(enumerate(args_chunk_spec)), chunks)
    kwarg_chunks = _shard_dict_of_args(kwargs, kwargs_chunk_spec, len(arg_chunks))
    if len(kwarg_chunks) < len(arg_chunks):  # kwargs split into fewer chunks: split args again to match
        arg_chunks = _shard_dict_of_args(dict(enumerate(args)), dict(enumerate(args_chunk_spec)), len(kwarg_chunks))
    return [tuple(c[i] for i in range(len(c))) for c in arg_chunks], kwarg_chunks


def merge_chunks(chunks, chunk_spec):
    """The inverse of the split: leaves with a TensorChunkSpec (every leaf when chunk_spec is None, along dim
    0, as torch's: a non-tensor there is a TypeError) concatenated across the chunks; others taken from the
    first chunk."""
    from ... import cat
    first, treespec = tree_flatten(chunks[0])
    if chunk_spec is None:  # torch's default: every leaf concatenated along dim 0
        specs = [TensorChunkSpec(DEFAULT_CHUNK_DIM)] * len(first)
    else:
        specs, _ = tree_flatten(chunk_spec, is_leaf=_spec_leaf)
    flat = []
    for chunk in chunks:
        leaves, _ = tree_flatten(chunk)
        if len(leaves) != len(specs):
            raise ValueError("merge_chunks: chunk %r does not match the chunk spec %r" % (chunk, chunk_spec))
        flat.append(leaves)
    merged = []
    for i, spec in enumerate(specs):
        if not isinstance(spec, TensorChunkSpec):
            merged.append(flat[0][i])
            continue
        parts = [f[i] for f in flat]
        for p in parts:
            if not isinstance(p, _C.Tensor):
                raise TypeError("merge_chunks: expected Tensor as element %d of the chunks to concatenate along dim "
                                "%d, but got %s" % (i, spec.split_dim, type(p).__name__))
        merged.append(cat(parts, dim=spec.split_dim))
    return tree_unflatten(merged, treespec)
