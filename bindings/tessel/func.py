"""tessel.func: torch.func's transforms over tessel's reverse-mode autograd: functional_call (a module run with
other parameters and buffers, gradients flowing into them: MAML-style fast weights, model ensembles), grad and
grad_and_value (nestable: grad(grad(f))), vjp, jvp (the double-vjp identity), jacrev, jacfwd (the same values,
computed in reverse mode), hessian, and vmap.

vmap calls the function once per mapped index and stacks the results along out_dims, so its results are
exactly the per-sample function's (with the per-sample cost: there are no batching rules). Its randomness
modes are torch's: "error" (the default) raises if the function drew from the default generator, "different"
lets every sample draw its own, "same" replays the generator's state for every sample.

    from tessel.func import functional_call, grad, vmap
    fast = {name: p - 0.1 * g for (name, p), g in zip(model.named_parameters(), grads)}
    loss = loss_fn(functional_call(model, fast, (x,)), y)        # differentiable in fast and in model's params
    per_sample_grads = vmap(grad(loss_of_one), in_dims=(None, 0, 0))(params, xs, ys)
"""
import builtins

from . import _C

Tensor = _C.Tensor


# ---- functional_call --------------------------------------------------------------------------------------

def _owner(module, name):
    prefix, _, local = name.rpartition(".")
    return (module.get_submodule(prefix) if prefix else module), local


def _tie(values, named):
    groups = []
    for name, t in named:
        if t is None:
            continue
        group = next((g for g in groups if g[0][1]._is_same(t)), None)
        if group is None:
            groups.append([(name, t)])
        else:
            group.append((name, t))
    for group in groups:
        names = [n for n, _ in group]
        given = [n for n in names if n in values]
        if len(names) < 2 or not given:
            continue
        if any(values[n] is not values[given[0]] for n in given[1:]):
            raise ValueError("functional_call got multiple values for keys %s, which are tied. Consider using "
                             "tie_weights=False" % sorted(given))
        for n in names:
            values[n] = values[given[0]]


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *, tie_weights=True, strict=False):
    """module(*args, **kwargs) with the named parameters and buffers in the dict(s) standing in for the module's
    own during the call (restored afterwards, also on an exception); the given tensors are used as they are, so
    gradients reach them. strict=True requires every parameter and buffer to be given."""
    dicts = parameter_and_buffer_dicts if isinstance(parameter_and_buffer_dicts, (tuple, list)) else \
        [parameter_and_buffer_dicts]
    values = {}
    for d in dicts:
        for name, value in d.items():
            if name in values:
                raise ValueError("functional_call got multiple values for keys ['%s'], which are used in more than "
                                 "one of the dictionaries" % name)
            values[name] = value
    params = dict(module.named_parameters(remove_duplicate=False))
    buffers = dict(module.named_buffers())
    unknown = [n for n in values if n not in params and n not in buffers]
    if unknown and strict:
        raise RuntimeError("Unexpected key(s): %s." % ", ".join("'%s'" % n for n in unknown))
    attributes = {}  # without strict torch sets the other names as attributes for the call (a plain tensor one)
    for n in unknown:
        value = values.pop(n)
        try:
            owner, local = _owner(module, n)
        except AttributeError:  # (no such submodule: left out)
            continue
        attributes[n] = (owner, local, value)
    if tie_weights:  # torch's: a value given for one name of a tied tensor stands in for all of its names
        _tie(values, list(params.items()) + list(buffers.items()))
    if strict:
        missing = [n for n in list(params) + list(buffers) if n not in values]
        if missing:
            raise RuntimeError("Missing key(s): %s." % ", ".join("'%s'" % n for n in missing))
    restore = []
    try:
        for name, value in values.items():
            owner, local = _owner(module, name)
            if name in params:
                restore.append(("param", owner, local, params[name], None))
                owner._set_parameter(local, value, True)
            else:
                from .nn.modules import _persistent_buffer_names
                persistent = local in _persistent_buffer_names(owner)
                restore.append(("buffer", owner, local, buffers[name], persistent))
                owner.register_buffer(local, value, persistent=persistent)
        for owner, local, value in attributes.values():
            old = getattr(owner, local, _MISSING)
            if old is not _MISSING and old is not None and not isinstance(old, Tensor):
                raise TypeError("attribute `%s`: %s is not an instance of torch.Tensor" % (local, old))
            restore.append(("attribute", owner, local, old, None))
            setattr(owner, local, value)
        args = () if args is None else (args if isinstance(args, tuple) else (args,))
        return module(*args, **(kwargs or {}))
    finally:
        for kind, owner, local, old, persistent in reversed(restore):
            if kind == "param":
                owner._set_parameter(local, old, True)
            elif kind == "buffer":
                owner.register_buffer(local, old, persistent=persistent)
            elif old is _MISSING:
                delattr(owner, local)
            else:
                setattr(owner, local, old)


_MISSING = object()


# ---- grad / vjp / jvp / jacobians -------------------------------------------------------------------------

def _argnums(argnums, n):
    nums = argnums if isinstance(argnums, tuple) else (argnums,)
    for a in nums:
        if not isinstance(a, int) or not -n <= a < n:
            raise RuntimeError("Got argnums=%s but only %d positional inputs" % (argnums, n))
    return tuple(a % n for a in nums), isinstance(argnums, tuple)


def _leaf(x):
    """x made differentiable here: an alias of x (a view, connected to x's graph) when an enclosing transform or
    the caller already tracks x, else a fresh leaf (whose results this transform detaches before returning). The
    alias keeps this level's input apart from x's other uses: with x itself, a function closing over x (the inner
    function of grad(lambda a: grad(lambda b: a * b)(a))) was differentiated through those too (2, torch's 1)."""
    if not isinstance(x, Tensor):
        raise RuntimeError("grad: the differentiated inputs must be Tensors, got %s" % type(x).__name__)
    return (x.view_as(x), False) if x.requires_grad else (x.detach().requires_grad_(True), True)


def _reaches_other_leaves(out, leaves):
    """Whether out's graph reaches a leaf that requires grad other than `leaves` (a tensor f closes over)."""
    stack, seen = [out.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)
        if variable is not None:
            if not any(variable._is_same(leaf) for leaf in leaves):
                return True
            continue
        stack.extend(f for f, _ in node.next_functions)
    return False


def _detach_tree(tree):
    from .utils._pytree import tree_map
    return tree_map(lambda t: t.detach() if isinstance(t, Tensor) else t, tree)


def _grads_of(outputs, leaves, cotangents=None, **kwargs):
    """autograd.grad of `outputs` (with `cotangents`) w.r.t. `leaves`, unused leaves' gradients zeros; outputs that do
    not depend on any leaf contribute nothing, and when none does every gradient is zeros, as torch.func's (autograd
    .grad refuses an output that does not require grad)."""
    from .autograd import grad as autograd_grad
    from ._tensor import zeros_like
    cotangents = [None] * len(outputs) if cotangents is None else cotangents
    live = [(o, c) for o, c in zip(outputs, cotangents) if o.requires_grad]
    if not live:
        return tuple(zeros_like(leaf) for leaf in leaves)
    seeds = [c for _, c in live]
    return autograd_grad([o for o, _ in live], leaves, None if all(c is None for c in seeds) else seeds,
                         allow_unused=True, materialize_grads=True, **kwargs)


def grad_and_value(func, argnums=0, has_aux=False):
    """torch.func.grad_and_value: (gradients w.r.t. args[argnums], func's output) of a scalar func. An argument
    may be a pytree of tensors (a dict of parameters for functional_call): its gradient has the same structure."""
    from .utils._pytree import tree_flatten, tree_unflatten

    def wrapper(*args, **kwargs):
        nums, many = _argnums(argnums, len(args))
        with _C._GradMode(True):
            args = list(args)
            fresh = True
            trees = []  # per argnum: (its leaves made differentiable, its structure)
            for i in nums:
                leaves, spec = tree_flatten(args[i])
                made = []
                for leaf in leaves:
                    leaf, new = _leaf(leaf)
                    fresh = fresh and new
                    made.append(leaf)
                trees.append((made, spec))
                args[i] = tree_unflatten(made, spec)
            out = func(*args, **kwargs)
            aux = None
            if has_aux:
                if not (isinstance(out, tuple) and len(out) == 2):
                    raise RuntimeError("grad_and_value(f)(*args): output of function f should be a tuple: "
                                       "(output, aux) if has_aux is True")
                out, aux = out
            if not isinstance(out, Tensor):
                raise RuntimeError("grad_and_value(f)(*args): Expected f(*args) to return a Tensor, got %s"
                                   % type(out).__name__)
            if out.dim() != 0:
                raise RuntimeError("grad_and_value(f)(*args): Expected f(*args) to return a scalar Tensor, got tensor "
                                   "with %d dims. Maybe you wanted to use the vjp or jacrev APIs instead?" % out.dim())
            flat = [leaf for made, _ in trees for leaf in made]
            # a captured tensor that requires grad (MAML's parameters): the result stays connected to it, as torch's
            fresh = fresh and not _reaches_other_leaves(out, flat)
            grads = _grads_of([out.reshape([])], flat, create_graph=not fresh) if flat else ()
        if fresh:
            grads = tuple(g.detach() for g in grads)
            out = out.detach()
            aux = _detach_tree(aux)  # torch's aux comes out of the transform untracked
        per_arg, at = [], 0
        for made, spec in trees:
            per_arg.append(tree_unflatten(list(grads[at:at + len(made)]), spec))
            at += len(made)
        result = tuple(per_arg) if many else per_arg[0]
        return ((result, (out, aux)) if has_aux else (result, out))
    return wrapper


def grad(func, argnums=0, has_aux=False):
    """torch.func.grad: the gradient of a scalar func w.r.t. args[argnums] (a tuple for a tuple of argnums);
    nestable (grad(grad(f))(x) is f'')."""
    inner = grad_and_value(func, argnums, has_aux)

    def wrapper(*args, **kwargs):
        g, value = inner(*args, **kwargs)
        return (g, value[1]) if has_aux else g
    return wrapper


def vjp(func, *primals, has_aux=False):
    """torch.func.vjp: (func(*primals), vjp_fn) with vjp_fn(cotangents) -> a tuple of one gradient per primal.
    Primals, outputs and cotangents may be pytrees (dicts, lists, tuples of tensors), as torch's."""
    from .utils._pytree import tree_flatten, tree_unflatten
    flats = [tree_flatten(p) for p in primals]
    # inside another transform (a primal tracked already) vjp_fn's gradients keep their graph, so grad(vjp) works
    nested = builtins.any(isinstance(leaf, Tensor) and leaf.requires_grad for leaves, _ in flats for leaf in leaves)
    with _C._GradMode(True):
        made = [[_leaf(leaf)[0] for leaf in leaves] for leaves, _ in flats]
        out = func(*[tree_unflatten(m, spec) for m, (_, spec) in zip(made, flats)])
        aux = None
        if has_aux:
            out, aux = out
    outs, out_spec = tree_flatten(out)
    leaves = [leaf for m in made for leaf in m]

    def vjp_fn(*cotangents):
        tree = cotangents[0] if len(cotangents) == 1 else cotangents
        cts, ct_spec = tree_flatten(tree)
        if len(cts) != len(outs) or (len(outs) > 1 and ct_spec != out_spec):
            raise RuntimeError("Expected pytree structure of cotangents to be the same as pytree structure of outputs")
        graph = nested or builtins.any(isinstance(c, Tensor) and c.requires_grad for c in cts)
        with _C._GradMode(True):
            grads = _grads_of(outs, leaves, cts, retain_graph=True, create_graph=graph)
        if not graph:
            grads = tuple(g.detach() for g in grads)
        per_primal, at = [], 0
        for m, (_, spec) in zip(made, flats):
            per_primal.append(tree_unflatten(list(grads[at:at + len(m)]), spec))
            at += len(m)
        return tuple(per_primal)
    detached = tree_unflatten([o.detach() for o in outs], out_spec)
    return (detached, vjp_fn, aux) if has_aux else (detached, vjp_fn)


def jvp(func, primals, tangents, *, strict=False, has_aux=False):
    """torch.func.jvp: (func(*primals), J·tangents), and func's auxiliary output third with has_aux (func
    returns (output, aux); aux is returned as func gave it, detached). Primals, tangents and outputs may be
    pytrees of the same structures, as torch's."""
    from .autograd.functional import jvp as functional_jvp
    from .utils._pytree import tree_flatten, tree_unflatten
    primals, tangents = tuple(primals), tuple(tangents)
    leaves, spec = tree_flatten(primals)
    tangent_leaves, tangent_spec = tree_flatten(tangents)
    if tangent_spec != spec:
        raise RuntimeError("jvp(f, primals, tangents): Expected primals and tangents to have the same python "
                           "structure. For example, if primals is a tuple of 3 tensors, tangents also must be. "
                           "Got primals with structure %s and tangents with structure %s" % (spec, tangent_spec))
    aux_box, out_spec = [], []

    def flat_output(*flat):
        result = func(*tree_unflatten(list(flat), spec))
        if has_aux:
            if not (isinstance(result, tuple) and len(result) == 2):
                raise RuntimeError("jvp(f, primals, tangents): output of function f should be a tuple: (output, aux) "
                                   "if has_aux is True")
            aux_box.append(result[1])
            result = result[0]
        outs, tree = tree_flatten(result)
        out_spec.append(tree)
        return tuple(outs) if len(outs) != 1 or not isinstance(result, Tensor) else outs[0]
    # inside another transform (a primal or tangent tracked already) the product keeps its graph: grad(jvp) works
    nested = builtins.any(isinstance(t, Tensor) and t.requires_grad for t in list(leaves) + list(tangent_leaves))
    out, product = functional_jvp(flat_output, tuple(leaves) if len(leaves) != 1 else leaves[0],
                                  tuple(tangent_leaves) if len(tangent_leaves) != 1 else tangent_leaves[0],
                                  create_graph=nested)
    if not isinstance(out, tuple):
        out, product = [out], [product]
    out, product = tree_unflatten(list(out), out_spec[0]), tree_unflatten(list(product), out_spec[0])
    if not has_aux:
        return out, product
    aux = aux_box[0]
    return out, product, (aux.detach() if isinstance(aux, Tensor) else aux)


def _jacobian(func, argnums, has_aux):
    from .autograd.functional import jacobian
    from .utils._pytree import tree_flatten, tree_unflatten

    def wrapper(*args):
        nums, many = _argnums(argnums, len(args))
        aux_box = []
        flats = [tree_flatten(args[i]) for i in nums]  # an argument may be a pytree (a dict of tensors)
        sizes = [len(leaves) for leaves, _ in flats]

        def of_selected(*selected):
            full, at = list(args), 0
            for i, (leaves, spec), n in zip(nums, flats, sizes):
                full[i] = tree_unflatten(list(selected[at:at + n]), spec)
                at += n
            out = func(*full)
            if has_aux:
                out, aux = out
                aux_box.append(aux)
            plain = isinstance(out, (Tensor, tuple))
            if not plain:  # a dict / list output: its leaves, the Jacobian rebuilt in its structure
                outs, tree = tree_flatten(out)
                out_spec.append(tree)
                out = tuple(outs)
            return out
        out_spec = []
        selected = tuple(leaf for leaves, _ in flats for leaf in leaves)
        # inside another transform (its leaves require grad) the Jacobian keeps its graph, so jacrev(jacrev(f))
        # is the Hessian; at the outermost level it is detached, as torch.func's results are
        nested = builtins.any(isinstance(a, Tensor) and a.requires_grad for a in selected)
        # per input leaf for one output, per output of per input leaf for several
        jac = jacobian(of_selected, selected, create_graph=nested)
        several_outputs = isinstance(jac[0], tuple)

        def per_argument(rows):  # one entry per input leaf -> one per argnum, each in its argument's structure
            out, at = [], 0
            for (_, spec), n in zip(flats, sizes):
                out.append(tree_unflatten(list(rows[at:at + n]), spec))
                at += n
            return tuple(out) if many else out[0]
        if several_outputs:  # per output, then per argument (a dict / list output in its own structure)
            result = tuple(per_argument(list(per_output)) for per_output in jac)
            if out_spec:
                result = tree_unflatten(list(result), out_spec[0])
        else:
            result = per_argument(list(jac))
        return (result, aux_box[0]) if has_aux else result
    return wrapper


def jacrev(func, argnums=0, *, has_aux=False, chunk_size=None, _preallocate_and_copy=False):
    """torch.func.jacrev: the Jacobian of func w.r.t. args[argnums], output shape + input shape."""
    return _jacobian(func, argnums, has_aux)


def jacfwd(func, argnums=0, has_aux=False, *, randomness="error"):
    """torch.func.jacfwd: the same Jacobian as jacrev (computed in reverse mode here)."""
    return _jacobian(func, argnums, has_aux)


def hessian(func, argnums=0):
    """torch.func.hessian: the Jacobian of the gradient."""
    return jacrev(jacrev(func, argnums), argnums)


# ---- vmap -------------------------------------------------------------------------------------------------

def _mapped_size(args, in_dims):
    size = None
    for a, d in zip(args, in_dims):
        if d is None:
            continue
        if not isinstance(a, Tensor):
            raise ValueError("vmap: in_dim=%s given for an input that is not a Tensor (%s)" % (d, type(a).__name__))
        n = a.shape[d]
        if size is not None and n != size:
            raise ValueError("vmap: Expected all tensors to have the same size in the mapped dimension, got sizes %d "
                             "and %d for the mapped dimension" % (size, n))
        size = n
    if size is None:
        raise ValueError("vmap: at least one input must be mapped over (got in_dims=%s)" % (in_dims,))
    return size


def _leaf_dims(dims, value, what):
    """One dim (or None) per leaf of `value`: `dims` an int / None for all of them, or a container of the same
    structure as value's top (torch's in_dims / out_dims as pytree prefixes)."""
    from .utils._pytree import tree_flatten
    if dims is None or isinstance(dims, int):
        return [dims] * len(tree_flatten(value)[0])
    if isinstance(dims, (tuple, list)) and isinstance(value, (tuple, list)) and len(dims) == len(value):
        return [d for sub, v in zip(dims, value) for d in _leaf_dims(sub, v, what)]
    if isinstance(dims, dict) and isinstance(value, dict) and set(dims) == set(value):
        return [d for k in value for d in _leaf_dims(dims[k], value[k], what)]
    raise ValueError("vmap: %s is not compatible with the structure of `%s`: %r against %s"
                     % (what, "inputs" if what == "in_dims" else "outputs", dims, type(value).__name__))


def vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
    """torch.func.vmap: func mapped over dim in_dims[i] of each argument (None: passed whole), results stacked
    along out_dims. Arguments and results may be pytrees (dicts, lists, tuples of tensors), in_dims / out_dims
    prefixes of them, as torch's. Computed one index at a time (exact per-sample semantics, per-sample cost)."""
    if randomness not in ("error", "different", "same"):
        raise RuntimeError("Only allowed values for randomness are 'error', 'different', or 'same'. Got %s"
                           % randomness)
    if chunk_size is not None and not (isinstance(chunk_size, int) and chunk_size > 0):
        raise ValueError("vmap: chunk_size should be None or greater than 0. (got %s)" % chunk_size)
    name = getattr(func, "__name__", repr(func))

    def wrapper(*args, **kwargs):
        from .utils._pytree import tree_flatten, tree_unflatten
        if isinstance(in_dims, (tuple, list)) and len(in_dims) != len(args):
            raise ValueError("vmap: in_dims is not compatible with the structure of `inputs`. in_dims has structure "
                             "%d but inputs has structure %d" % (len(in_dims), len(args)))
        leaves, spec = tree_flatten(tuple(args))
        dims = _leaf_dims(tuple(in_dims) if isinstance(in_dims, list) else in_dims, tuple(args), "in_dims")
        for leaf, d in zip(leaves, dims):
            if d is not None and isinstance(leaf, Tensor) and not -leaf.dim() <= d < leaf.dim():
                raise ValueError("vmap(%s, in_dims=%s, ...)(<inputs>): Got in_dim=%d for some input, but that input "
                                 "is a Tensor of dimensionality %d so expected in_dim to satisfy -%d <= in_dim < %d."
                                 % (name, in_dims, d, leaf.dim(), leaf.dim(), leaf.dim()))
        dims = [None if d is None else d % leaves[i].dim() if isinstance(leaves[i], Tensor) else d
                for i, d in enumerate(dims)]
        size = _mapped_size(leaves, dims)
        if size == 0:  # torch's batch of none: the function's output shapes with a mapped size of 0
            return _empty_batch(func, leaves, dims, spec, kwargs, out_dims)
        from . import random
        start = random.get_rng_state()
        outs, versions = [], {}
        for k in range(size):
            if randomness == "same":
                random.set_rng_state(start)
            before = random.get_rng_state() if randomness == "error" else None
            sliced = [a if d is None else a.select(d, k) for a, d in zip(leaves, dims)]
            outs.append(func(*tree_unflatten(sliced, spec), **kwargs))
            for o in tree_flatten(outs[-1])[0]:  # one tensor every call returns, written between calls: func
                if isinstance(o, Tensor):  # writes per-sample values into a tensor it closes over (torch raises)
                    seen = versions.setdefault(id(o), (o, o._version))
                    if seen[0] is o and seen[1] != o._version:
                        raise RuntimeError("vmap: %s wrote in place into a tensor it did not get through the mapped "
                                           "inputs (one it closes over) and returned it: each sample's write lands "
                                           "in that one tensor (every output row was the last write); torch "
                                           "refuses such a write; clone it or return a new tensor" % name)
            if randomness == "error" and not _same_state(before, random.get_rng_state()):
                raise RuntimeError("vmap: called random operation while in randomness error mode. Please either use "
                                   "the 'same' or 'different' randomness flags on vmap or perform the randomness "
                                   "operation out of vmap")
        flat_outs = [tree_flatten(o)[0] for o in outs]
        out_spec = tree_flatten(outs[0])[1]
        per_leaf = _leaf_dims(out_dims, outs[0], "out_dims")
        return tree_unflatten([_stack_outputs([f[n] for f in flat_outs], d, name) for n, d in enumerate(per_leaf)],
                              out_spec)
    return wrapper


def _empty_batch(func, leaves, dims, spec, kwargs, out_dims):
    from .utils._pytree import tree_flatten, tree_unflatten
    sliced = [a if d is None else _C._full([n for i, n in enumerate(a.shape) if i != d], 0.0, a.dtype)
              for a, d in zip(leaves, dims)]
    out = func(*tree_unflatten(sliced, spec), **kwargs)
    flat, out_spec = tree_flatten(out)
    per_leaf = _leaf_dims(out_dims, out, "out_dims")
    empty = []
    for o, d in zip(flat, per_leaf):
        shape = list(o.shape)
        if d is not None:
            shape.insert(d % (o.dim() + 1), 0)
        empty.append(_C._full(shape, 0.0, o.dtype) if d is not None else o)
    return tree_unflatten(empty, out_spec)


def _same_state(a, b):
    if isinstance(a, Tensor):
        return builtins.bool((a == b).all().item()) if tuple(a.shape) == tuple(b.shape) else False
    return a == b


def _stack_outputs(outs, out_dims, name="func"):
    """One output leaf of every call stacked along out_dims (None: the first call's, unstacked: refused where
    the calls differ, torch's batched output)."""
    first = outs[0]
    if not isinstance(first, Tensor):
        raise ValueError("vmap: `%s` must only return Tensors, got type %s" % (name, type(first).__name__))
    if out_dims is None:
        if not all(tuple(o.shape) == tuple(first.shape) and builtins.bool(
                ((o == first) | ((o != o) & (first != first))).all().item()) for o in outs[1:]):
            raise ValueError("vmap(%s, ...): `%s` can not return a BatchedTensor when out_dim is None"
                             % (name, name))
        return first
    n = first.dim() + 1
    if not -n <= out_dims < n:
        raise IndexError("Dimension out of range (expected to be in range of [%d, %d], but got %d)"
                         % (-n, n - 1, out_dims))
    return _C._functional.stack(outs, out_dims % n)


def stack_module_state(models):
    """torch.func.stack_module_state: (params, buffers), each name's tensors of the models stacked along a new
    dim 0 (model ensembling with vmap over functional_call); stacked parameters are fresh leaves that require
    grad when the models' do."""
    models = list(models)
    if not models:
        raise RuntimeError("stack_module_state: Expected at least one model, got 0.")
    if not all(type(m) is type(models[0]) for m in models):
        raise RuntimeError("stack_module_state: Expected all models to be of the same class.")

    def stacked(tensors, name):
        grads = [t.requires_grad for t in tensors]
        if any(grads) and not all(grads):
            raise RuntimeError("Expected %s from each model to have the same .requires_grad" % name)
        out = _C._functional.stack([t.detach() for t in tensors], 0)
        return out.requires_grad_(True) if all(grads) else out

    all_params = [dict(m.named_parameters()) for m in models]
    all_buffers = [dict(m.named_buffers()) for m in models]
    params = {k: stacked([p[k] for p in all_params], k) for k in all_params[0]}
    buffers = {k: stacked([b[k] for b in all_buffers], k) for k in all_buffers[0]}
    return params, buffers
