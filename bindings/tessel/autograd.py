"""tessel.autograd: torch.autograd's grad and backward (core/autograd/engine.h's Grad and Backward).

    gx, = tessel.autograd.grad(loss, [x])                 # no .grad changes; only x's paths run
    loss.backward(inputs=[w])                             # accumulates into w.grad only

create_graph=True (torch's higher-order gradients): the gradients carry their own graph and can be
differentiated again (Hessian-vector products, gradient penalties); an op whose backward is not itself
differentiable raises NotImplementedError naming it. Not supported: is_grads_batched (NotImplementedError).
"""
from . import _C


def _seq(x):
    return [x] if isinstance(x, _C.Tensor) else list(x)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, only_inputs=True,
         allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """The gradients of outputs with respect to inputs, as a tuple in inputs' order (None for an unused
    input with allow_unused, zeros with materialize_grads)."""
    if is_grads_batched:
        raise NotImplementedError("autograd.grad(is_grads_batched=True) is not supported")
    outputs, inputs = _seq(outputs), _seq(inputs)
    seeds = [None] * len(outputs) if grad_outputs is None else _seq(grad_outputs)
    if len(seeds) != len(outputs):
        raise ValueError("grad_outputs has %d entries for %d outputs" % (len(seeds), len(outputs)))
    if allow_unused is None:
        allow_unused = materialize_grads
    if materialize_grads and not allow_unused:
        raise ValueError("Expected allow_unused to be True or not passed when materialize_grads=True, but "
                         "got: allow_unused=False.")
    retain_graph = create_graph if retain_graph is None else retain_graph  # torch's default
    result = _C._grad(outputs, inputs, seeds, bool(retain_graph), bool(allow_unused), bool(create_graph))
    if materialize_grads:
        from ._tensor import zeros_like
        result = [g if g is not None else zeros_like(x) for g, x in zip(result, inputs)]
    return tuple(result)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, grad_variables=None, inputs=None):
    """torch.autograd.backward: accumulates into the .grad of the leaves (or only of `inputs`)."""
    retain_graph = create_graph if retain_graph is None else retain_graph  # torch's default
    tensors = _seq(tensors)
    seeds = [None] * len(tensors) if grad_tensors is None else _seq(grad_tensors)
    if len(seeds) != len(tensors):
        raise ValueError("grad_tensors has %d entries for %d tensors" % (len(seeds), len(tensors)))
    if inputs is None:
        _C._backward(tensors, seeds, bool(retain_graph), bool(create_graph))
        _post_backward()
        return
    inputs = _seq(inputs)
    if not inputs:
        raise RuntimeError("'inputs' argument to backward() cannot be empty.")
    before = [x.grad for x in inputs]  # a retained non-leaf's hook sets .grad during the pass: add once
    grads = _C._grad(tensors, inputs, seeds, bool(retain_graph), True, bool(create_graph))
    for x, b, g in zip(inputs, before, grads):
        if g is not None:
            if not create_graph:
                g = g.detach()
            x.grad = g if b is None else b + g
    _post_backward()


def _post_backward():
    """What runs once a backward returns: DistributedDataParallel's gradient averaging."""
    from .nn import parallel
    parallel._run_pending()


def _tensor_backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """Tensor.backward with torch's arguments (inputs=: accumulate into those tensors' .grad only)."""
    backward([self], None if gradient is None else [gradient], retain_graph, create_graph, inputs=inputs)


_C.Tensor.backward = _tensor_backward
