"""torch.autograd.functional (vjp, jvp, jacobian, hessian, vhp, hvp) and torch.autograd.gradcheck /
gradgradcheck, over tessel's reverse mode (core/autograd/engine.h through tessel.autograd.grad).

Forward-mode products (jvp, hvp) use the double-vjp identity, as torch's own autograd.functional does: for
g(u) = Jᵀu, Jv = ∂(g(u)·v)/∂u, so they need create_graph through the function's ops (every differentiable
tessel op's backward is itself differentiable or raises naming the op). jacobian and hessian build their rows
one vjp per output element (strategy "reverse-mode"; vectorize=True computes the same rows one at a time).
gradcheck compares those rows against central finite differences (eps 1e-6) with torch's tolerances
(|analytical - numerical| <= atol + rtol·|numerical|) and raises GradcheckError with both Jacobians, or
returns False with raise_exception=False.

    from tessel.autograd.functional import jacobian, hessian
    H = hessian(lambda x: (x ** 3).sum(), x)
    assert tessel.autograd.gradcheck(my_function.apply, (x.double().requires_grad_(),))
"""
import builtins

import numpy as np

from . import _C

Tensor = _C.Tensor


def _as_tuple(x):
    return (x, False) if isinstance(x, tuple) else ((x,), True)


def _grad(outputs, inputs, grad_outputs, create_graph, allow_unused=True):
    """Gradients of the outputs that depend on the inputs; an output that does not (a constant, the gradient of a
    linear function under hessian) contributes zeros, as torch's non-strict mode."""
    from .autograd import grad
    given = grad_outputs is not None
    pairs = [(o, g) for o, g in zip(outputs, grad_outputs if given else [None] * len(outputs)) if o.requires_grad]
    if not pairs:
        return (None,) * len(inputs)
    return grad([o for o, _ in pairs], inputs, [g for _, g in pairs] if given else None, retain_graph=True,
                create_graph=create_graph, allow_unused=allow_unused)


def _prepare(inputs, create_graph):
    """Fresh leaves of the inputs that require grad (the caller's tensors untouched); with create_graph an input that
    requires grad is aliased (a view in its graph, as torch's _grad_preprocess), so the function's other uses of
    it (a closure over it) are not differentiated as this input."""
    out = []
    for x in inputs:
        if not isinstance(x, Tensor):
            raise TypeError("The inputs given to the function must be Tensors, got %s" % type(x).__name__)
        leaf = x.view_as(x) if create_graph and x.requires_grad else x.detach()
        if not leaf.requires_grad:
            leaf = leaf.requires_grad_(True)
        out.append(leaf)
    return tuple(out)


_STAGE_MESSAGES = {  # torch's strict-mode errors, per backward stage, for a gradient that is None
    "back": "The output of the user-provided function is independent of input %d. This is not allowed in strict mode.",
    "back_trick": "The gradient with respect to the input is independent of entry %d in the grad_outputs when using "
                  "the double backward trick to compute forward mode gradients. This is not allowed in strict mode.",
    "double_back": "The jacobian of the user-provided function is independent of input %d. This is not allowed in "
                   "strict mode.",
    "double_back_trick": "The hessian of the user-provided function is independent of entry %d in the grad_jacobian. "
                         "This is not allowed in strict mode as it prevents from using the double backward trick to "
                         "replace forward mode AD.",
}


def _check_strict(grads, strict, stage):
    if strict:
        for i, g in enumerate(grads):
            if g is None:
                raise RuntimeError(_STAGE_MESSAGES[stage] % i)


def _check_outputs_require_grad(outputs, strict, kind="outputs"):
    """torch's _check_requires_grad in strict mode."""
    if not strict:
        return
    for i, o in enumerate(outputs):
        if o.requires_grad:
            continue
        if kind == "jacobian":
            raise RuntimeError("While computing the hessian, found that the jacobian of the user-provided function "
                               "with respect to input %d is independent of the input. This is not allowed in strict "
                               "mode. You should ensure that your function is twice differentiable and that the "
                               "jacobian depends on the inputs (this would be violated by a linear function for "
                               "example)." % i)
        raise RuntimeError("Output %d of the user-provided function does not require gradients. The outputs must be "
                           "computed in a differentiable manner from the input when running in strict mode." % i)


def _zeros_for_none(grads, like):
    from ._tensor import zeros_like
    return tuple(g if g is not None else zeros_like(x) for g, x in zip(grads, like))


def _check_v(v, outputs, name):
    if v is None:
        if builtins.any(o.numel() != 1 for o in outputs):
            raise RuntimeError("The vector v can only be None if the user-provided function returns a single "
                               "Tensor with a single element.")
        from ._tensor import ones_like
        return tuple(ones_like(o) for o in outputs)
    v, _ = _as_tuple(v)
    if len(v) != len(outputs) or builtins.any(tuple(a.shape) != tuple(b.shape) for a, b in zip(v, outputs)):
        raise RuntimeError("%s: v has shapes %s but the function's outputs have shapes %s"
                           % (name, [list(a.shape) for a in v], [list(b.shape) for b in outputs]))
    return v


def _detached(xs, create_graph):
    return tuple(x if create_graph else x.detach() for x in xs)


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), vᵀ J): the outputs and the vector-Jacobian product (v defaults to 1 for a scalar)."""
    inputs, single_in = _as_tuple(inputs)
    with _C._GradMode(True):
        leaves = _prepare(inputs, create_graph)
        outputs, single_out = _as_tuple(func(*leaves))
        _check_outputs_require_grad(outputs, strict)
        v = _check_v(v, outputs, "vjp")
        grads = _grad(list(outputs), list(leaves), list(v), create_graph)
    _check_strict(grads, strict, "back")
    grads = _zeros_for_none(grads, leaves)
    outs = _detached(outputs, create_graph)
    grads = _detached(grads, create_graph)
    return (outs[0] if single_out else outs), (grads[0] if single_in else grads)


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), J v), through the double-vjp identity."""
    inputs, single_in = _as_tuple(inputs)
    from ._tensor import zeros_like
    with _C._GradMode(True):
        leaves = _prepare(inputs, True)
        outputs, single_out = _as_tuple(func(*leaves))
        _check_outputs_require_grad(outputs, strict)
        if v is None:
            if builtins.any(x.numel() != 1 for x in leaves):
                raise RuntimeError("The vector v can only be None if the input to the user-provided function is a "
                                   "single Tensor with a single element.")
            from ._tensor import ones_like
            v = tuple(ones_like(x) for x in leaves)
        v, _ = _as_tuple(v)
        dummies = tuple(zeros_like(o).requires_grad_(True) for o in outputs)
        g = _grad(list(outputs), list(leaves), list(dummies), True)
        _check_strict(g, strict, "back")
        pairs = [(gi, vi) for gi, vi in zip(g, v) if gi is not None]
        if pairs:
            products = _grad([gi for gi, _ in pairs], list(dummies), [vi for _, vi in pairs], create_graph)
        else:
            products = (None,) * len(dummies)
    _check_strict(products, strict, "back_trick")
    products = _detached(_zeros_for_none(products, outputs), create_graph)
    outs = _detached(outputs, create_graph)
    return (outs[0] if single_out else outs), (products[0] if single_out else products)


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False, strategy="reverse-mode"):
    """J[i][j] = ∂outputs[i] / ∂inputs[j], shaped output.shape + input.shape (tuples mirror func's outputs and
    the inputs; a single tensor each gives a single tensor)."""
    if strategy not in ("reverse-mode", "forward-mode"):
        raise ValueError('Expected strategy to be either "forward-mode" or "reverse-mode". Hint: If your '
                         'function has more outputs than inputs, "forward-mode" tends to be more performant. '
                         'Otherwise, prefer to use "reverse-mode".')
    if strategy == "forward-mode" and not vectorize:
        raise NotImplementedError("Computing Jacobian using forward-AD or forward-over-reverse Hessian is only "
                                  "implemented for `vectorize=True`.")
    inputs, single_in = _as_tuple(inputs)
    from ._tensor import zeros_like
    with _C._GradMode(True):
        leaves = _prepare(inputs, create_graph)
        outputs, single_out = _as_tuple(func(*leaves))
        _check_outputs_require_grad(outputs, strict)
        if strict and vectorize:
            raise RuntimeError("torch.autograd.functional.jacobian: `strict=True` and `vectorized=True` are not "
                               "supported together. Please either set `strict=False` or `vectorize=False`.")
        rows = []
        for i, out in enumerate(outputs):
            flat = out.reshape(-1)
            per_input = [[] for _ in leaves]
            for k in range(flat.numel()):
                g = _grad([flat[k]], list(leaves), None, create_graph)
                if strict and builtins.any(gj is None for gj in g):
                    raise RuntimeError("Output %d of the user-provided function is independent of input %d. This is "
                                       "not allowed in strict mode." % (i, [gj is None for gj in g].index(True)))
                for j, (gj, x) in enumerate(zip(g, leaves)):
                    per_input[j].append(gj if gj is not None else zeros_like(x))
            blocks = []
            for j, x in enumerate(leaves):
                shape = list(out.shape) + list(x.shape)
                if per_input[j]:
                    block = _C._functional.stack(per_input[j], 0).reshape(shape)
                else:
                    block = _C._full(shape, 0.0, x.dtype)
                blocks.append(block if create_graph else block.detach())
            rows.append(tuple(blocks))
    if single_out and single_in:
        return rows[0][0]
    if single_out:
        return rows[0]
    if single_in:
        return tuple(r[0] for r in rows)
    return tuple(rows)


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False, outer_jacobian_strategy="reverse-mode"):
    """The Hessian of a scalar func: the jacobian of its gradient."""
    inputs_t, single_in = _as_tuple(inputs)

    def gradient(*xs):
        out = func(*xs)
        if not isinstance(out, Tensor) or out.numel() != 1:
            raise RuntimeError("The function given to hessian should return a single Tensor with a single element")
        g = _grad([out.reshape([])], list(xs), None, True)
        _check_strict(g, strict, "back")
        g = _zeros_for_none(g, xs)
        _check_outputs_require_grad(g, strict, "jacobian")
        return g[0] if single_in else tuple(g)
    return jacobian(gradient, inputs_t[0] if single_in else inputs_t, create_graph=create_graph, strict=strict,
                    vectorize=vectorize)


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), vᵀ H) for a scalar func."""
    inputs, single_in = _as_tuple(inputs)
    with _C._GradMode(True):
        leaves = _prepare(inputs, True)
        out = func(*leaves)
        if not isinstance(out, Tensor) or out.numel() != 1:
            raise RuntimeError("The function given to vhp should return a single Tensor with a single element")
        _check_outputs_require_grad([out], strict)
        g = _grad([out.reshape([])], list(leaves), None, True)
        _check_strict(g, strict, "back")
        g = _zeros_for_none(g, leaves)
        v = _check_v(v, leaves, "vhp") if v is not None else _check_v(None, leaves, "vhp")
        products = _grad(list(g), list(leaves), list(v), create_graph) if builtins.any(
            x.requires_grad for x in g) else (None,) * len(leaves)
        _check_strict(products, strict, "double_back")
        products = _zeros_for_none(products, leaves)
    products = _detached(products, create_graph)
    value = out if create_graph else out.detach()
    return value, (products[0] if single_in else products)


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), H v) for a scalar func (H is symmetric for twice-differentiable func: equals vhp)."""
    return vhp(func, inputs, v, create_graph, strict)


# ---- gradcheck ------------------------------------------------------------------------------------------

class GradcheckError(RuntimeError):
    """torch.autograd.gradcheck.GradcheckError: an analytical Jacobian differs from the numerical one."""


def _numerical_columns(func, inputs, j, eps):
    """∂(every output, flattened and concatenated) / ∂inputs[j][k] for each k, by central differences in the
    inputs' own dtype (float64 expected, as torch's gradcheck)."""
    x = inputs[j]
    base = x.detach().numpy().astype(np.float64)
    cols = []
    for k in range(base.size):
        values = []
        for sign in (1.0, -1.0):
            moved = base.copy().reshape(-1)
            moved[k] += sign * eps
            args = list(inputs)
            # .copy(), not np.ascontiguousarray: that makes a 0-d input (a grad_output of a scalar) 1-d
            args[j] = _C._from_numpy(moved.reshape(base.shape).copy()).to(x.dtype)
            with _C._GradMode(False):
                outs, _ = _as_tuple(func(*args))
            values.append(np.concatenate([o.detach().to(_C.dtype.float64).numpy().reshape(-1) for o in outs
                                          if isinstance(o, Tensor)]))
        cols.append((values[0] - values[1]) / (2 * eps))
    return np.stack(cols, 1) if cols else np.zeros((0, 0))


def _analytical_jacobians(func, inputs, checked):
    """{j: ∂(every output, flattened and concatenated) / ∂inputs[j]} for the checked inputs, one forward and one
    vjp per output element for all of them."""
    with _C._GradMode(True):
        leaves = [x.detach().requires_grad_(x.requires_grad) for x in inputs]
        outs, _ = _as_tuple(func(*leaves))
        rows = {j: [] for j in checked}
        for o in (o for o in outs if isinstance(o, Tensor)):
            flat = o.reshape(-1)
            for k in range(flat.numel()):
                grads = _grad([flat[k]], [leaves[j] for j in checked], None, False) if flat.requires_grad else \
                    [None] * len(checked)
                for j, g in zip(checked, grads):
                    rows[j].append(np.zeros(leaves[j].numel()) if g is None else
                                   g.detach().to(_C.dtype.float64).numpy().reshape(-1))
    return {j: np.stack(r, 0) if r else np.zeros((0, leaves[j].numel())) for j, r in rows.items()}


def gradcheck(func, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True, nondet_tol=0.0,
              check_undefined_grad=True, check_grad_dtypes=False, check_batched_grad=False,
              check_batched_forward_grad=False, check_forward_ad=False, check_backward_ad=True, fast_mode=False,
              masked=None):
    """torch.autograd.gradcheck: every input that requires grad gets its analytical Jacobian (one vjp per output
    element) compared with central finite differences; True, or GradcheckError (False with
    raise_exception=False) naming the output and input and printing both Jacobians."""
    inputs, _ = _as_tuple(inputs)
    checked = [j for j, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]
    if not checked:
        raise ValueError("gradcheck expects at least one input tensor to require gradient, but none of the them have "
                         "requires_grad=True.")
    analytical_of = _analytical_jacobians(func, inputs, checked)
    for j in checked:
        numerical = _numerical_columns(func, inputs, j, eps)
        analytical = analytical_of[j]
        if numerical.shape != analytical.shape or not np.all(np.abs(analytical - numerical)
                                                             <= atol + rtol * np.abs(numerical)):
            message = ("Jacobian mismatch for output 0 with respect to input %d,\nnumerical:%s\nanalytical:%s\n"
                       % (j, np.array2string(numerical), np.array2string(analytical)))
            if raise_exception:
                raise GradcheckError(message)
            return False
    return True


def gradgradcheck(func, inputs, grad_outputs=None, *, eps=1e-6, atol=1e-5, rtol=1e-3, gen_non_contig_grad_outputs=False,
                  raise_exception=True, nondet_tol=0.0, check_undefined_grad=True, check_grad_dtypes=False,
                  check_batched_grad=False, check_fwd_over_rev=False, check_rev_over_rev=True, fast_mode=False,
                  masked=False):
    """torch.autograd.gradgradcheck: gradcheck of the function inputs, grad_outputs -> vjp (the gradients of
    the gradients); grad_outputs default to fixed random values (seeded), requiring grad."""
    inputs, _ = _as_tuple(inputs)
    with _C._GradMode(False):
        outs, _ = _as_tuple(func(*inputs))
    if grad_outputs is None:
        rng = np.random.default_rng(0)
        # np.asarray: for a 0-d output standard_normal(()) is a numpy scalar, which became a [1] tensor
        grad_outputs = tuple(_C._from_numpy(np.asarray(rng.standard_normal(tuple(o.shape)))).to(o.dtype)
                             .requires_grad_(True) for o in outs)
    grad_outputs, _ = _as_tuple(grad_outputs)
    n = len(inputs)

    differentiable = [isinstance(x, Tensor) and x.requires_grad for x in inputs]

    def first_order(*args):
        # the positions of the caller's differentiable inputs, as leaves that require grad (the numerical
        # Jacobian calls this with perturbed copies, which do not)
        xs = [x if not d or x.requires_grad else x.detach().requires_grad_(True)
              for x, d in zip(args[:n], differentiable)]
        with _C._GradMode(True):
            outputs, _ = _as_tuple(func(*xs))
            diff = [x for x, d in zip(xs, differentiable) if d]
            grads = _grad(list(outputs), diff, list(args[n:]), True)
        return _zeros_for_none(grads, diff)
    return gradcheck(first_order, tuple(inputs) + tuple(grad_outputs), eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception)
