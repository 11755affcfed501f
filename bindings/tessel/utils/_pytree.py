"""tessel.utils._pytree: torch.utils._pytree's tree functions over nested Python containers.

    leaves, spec = tree_flatten({"a": (x, 1), "b": [y, None]})   # [x, 1, y, None]; None is a leaf, as torch 2.15's
    tree_unflatten([2 * v for v in leaves], spec)
    tree_map(lambda t: t * 2, tree); tree_map_only(tessel.Tensor, fn, tree)

Nodes: tuple, list, dict (insertion order), OrderedDict, defaultdict, namedtuples, and any
type given to register_pytree_node; everything else is a leaf. Written here because tessel's Python face
depends only on numpy: torch's module is the reference for these semantics.
"""
import collections

__all__ = ["TreeSpec", "LeafSpec", "tree_flatten", "tree_unflatten", "tree_leaves", "tree_structure", "tree_map",
           "tree_map_only", "tree_any", "tree_all", "register_pytree_node"]

# type -> (flatten(node) -> (children, context), unflatten(children, context) -> node)
_NODES = {
    tuple: (lambda t: (list(t), None), lambda c, _: tuple(c)),
    list: (lambda t: (list(t), None), lambda c, _: list(c)),
    dict: (lambda d: (list(d.values()), list(d.keys())), lambda c, keys: dict(zip(keys, c))),
    collections.OrderedDict: (lambda d: (list(d.values()), list(d.keys())),
                              lambda c, keys: collections.OrderedDict(zip(keys, c))),
    collections.defaultdict: (lambda d: (list(d.values()), (d.default_factory, list(d.keys()))),
                              lambda c, ctx: collections.defaultdict(ctx[0], zip(ctx[1], c))),
}


def register_pytree_node(cls, flatten_fn, unflatten_fn, *, serialized_type_name=None, to_dumpable_context=None,
                         from_dumpable_context=None, flatten_with_keys_fn=None):
    """Makes `cls` a node: flatten_fn(node) -> (children, context); unflatten_fn(children, context) -> node."""
    if cls in _NODES:
        raise ValueError("%s is already registered as a pytree node." % cls)
    _NODES[cls] = (flatten_fn, unflatten_fn)


def _is_namedtuple(node):
    return isinstance(node, tuple) and hasattr(type(node), "_fields")


def _handler(node):
    if _is_namedtuple(node):
        cls = type(node)
        return (lambda t: (list(t), cls), lambda c, k: k(*c))
    return _NODES.get(type(node))


class TreeSpec:
    """The shape of a tree: its node type, context (dict keys, ...) and children's specs."""

    def __init__(self, type, context, children_specs):
        self.type, self.context, self.children_specs = type, context, list(children_specs)
        self.num_leaves = sum(c.num_leaves for c in self.children_specs)
        self.num_children = len(self.children_specs)

    def is_leaf(self):
        return self.type is None

    def __eq__(self, other):
        return (isinstance(other, TreeSpec) and self.type is other.type and self.context == other.context
                and self.children_specs == other.children_specs)

    def __repr__(self):
        if self.is_leaf():
            return "*"
        return "TreeSpec(%s, %r, [%s])" % (self.type.__name__, self.context,
                                           ", ".join(repr(c) for c in self.children_specs))


class LeafSpec(TreeSpec):
    def __init__(self):
        super().__init__(None, None, [])
        self.num_leaves = 1


def _flatten(node, leaves, is_leaf):
    h = None if (is_leaf is not None and is_leaf(node)) else _handler(node)
    if h is None:
        leaves.append(node)
        return LeafSpec()
    children, context = h[0](node)
    return TreeSpec(type(node), context, [_flatten(c, leaves, is_leaf) for c in children])


def tree_flatten(tree, is_leaf=None):
    """(leaves in depth-first order, TreeSpec)."""
    leaves = []
    spec = _flatten(tree, leaves, is_leaf)
    return leaves, spec


def tree_leaves(tree, is_leaf=None):
    return tree_flatten(tree, is_leaf)[0]


def tree_structure(tree, is_leaf=None):
    return tree_flatten(tree, is_leaf)[1]


def tree_unflatten(leaves, treespec):
    leaves = list(leaves)
    if len(leaves) != treespec.num_leaves:
        raise ValueError("tree_unflatten(leaves, treespec): `leaves` has length %d but the spec refers to a pytree "
                         "that holds %d items (%r)." % (len(leaves), treespec.num_leaves, treespec))
    it = iter(leaves)

    def build(spec):
        if spec.is_leaf():
            return next(it)
        children = [build(c) for c in spec.children_specs]
        if _NODES.get(spec.type) is None and isinstance(spec.context, type):  # a namedtuple
            return spec.context(*children)
        return _NODES[spec.type][1](children, spec.context)

    return build(treespec)


def tree_map(func, tree, *rests, is_leaf=None):
    """func applied to every leaf (with the matching leaves of `rests`, which must have the same structure)."""
    leaves, spec = tree_flatten(tree, is_leaf)
    others = []
    for r in rests:
        r_leaves, r_spec = tree_flatten(r, is_leaf)
        if r_spec != spec:
            raise ValueError("tree_map: the trees' structures differ: %r vs %r" % (spec, r_spec))
        others.append(r_leaves)
    return tree_unflatten([func(*xs) for xs in zip(leaves, *others)], spec)


def tree_map_only(type_or_types, func, tree, is_leaf=None):
    """func applied to the leaves that are instances of type_or_types; other leaves kept."""
    return tree_map(lambda x: func(x) if isinstance(x, type_or_types) else x, tree, is_leaf=is_leaf)


def tree_any(pred, tree, is_leaf=None):
    return any(pred(x) for x in tree_leaves(tree, is_leaf))


def tree_all(pred, tree, is_leaf=None):
    return all(pred(x) for x in tree_leaves(tree, is_leaf))
