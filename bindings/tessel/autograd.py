"""tessel.autograd: torch.autograd's grad and backward (core/autograd/engine.h's Grad and Backward).

    gx, = tessel.autograd.grad(loss, [x])                 # no .grad changes; only x's paths run
    loss.backward(inputs=[w])                             # accumulates into w.grad only

create_graph=True (torch's higher-order gradients): the gradients carry their own graph and can be
differentiated again (Hessian-vector products, gradient penalties); an op whose backward is not itself
differentiable raises NotImplementedError naming it. is_grads_batched=True (torch's batch of vector-Jacobian
products, e.g. a Jacobian's rows) runs one backward per row of grad_outputs and stacks them (torch uses vmap;
the values are the same).
"""
import contextlib
import inspect
import threading
import weakref

from . import _C


def _seq(x):
    from ._complex import ComplexTensor
    return [x] if isinstance(x, (_C.Tensor, ComplexTensor)) else list(x)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, only_inputs=True,
         allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """The gradients of outputs with respect to inputs, as a tuple in inputs' order (None for an unused
    input with allow_unused, zeros with materialize_grads)."""
    outputs, inputs = _seq(outputs), _seq(inputs)
    if not inputs:
        raise RuntimeError("grad requires non-empty inputs.")
    seeds = [None] * len(outputs) if grad_outputs is None else _seq(grad_outputs)
    if len(seeds) != len(outputs):
        raise ValueError("grad_outputs has %d entries for %d outputs" % (len(seeds), len(outputs)))
    (outputs, complex_outputs), (inputs, complex_inputs) = _real_views(outputs), _real_views(inputs)
    for o, c, s in zip(outputs, complex_outputs, seeds):
        if c and s is None:
            _implicit_complex_seed(o)
    seeds = _real_views(seeds)[0]
    if allow_unused is None:
        allow_unused = materialize_grads
    if materialize_grads and not allow_unused:
        raise ValueError("Expected allow_unused to be True or not passed when materialize_grads=True, but "
                         "got: allow_unused=False.")
    retain_graph = create_graph if retain_graph is None else retain_graph  # torch's default
    if is_grads_batched:
        result = _batched_grad(outputs, inputs, seeds, bool(retain_graph), bool(allow_unused), bool(create_graph))
    else:
        with _checkpoint_errors():
            result = _C._grad(outputs, inputs, seeds, bool(retain_graph), bool(allow_unused), bool(create_graph))
    if materialize_grads:
        from ._tensor import zeros_like
        result = [g if g is not None else zeros_like(x, requires_grad=bool(create_graph))  # (torch's)
                  for g, x in zip(result, inputs)]
    if any(complex_inputs):
        from ._complex import ComplexTensor
        result = [ComplexTensor(g) if c and g is not None else g for g, c in zip(result, complex_inputs)]
    return tuple(result)


def _implicit_complex_seed(real_view):
    """torch's errors for a complex output without its gradient (real_view: its parts, [..., 2])."""
    if real_view.numel() != 2:
        raise RuntimeError("grad can be implicitly created only for scalar outputs")
    from ._complex import _OF_REAL
    raise RuntimeError("grad can be implicitly created only for real scalar outputs but got %s"
                       % _OF_REAL[real_view.dtype])


def _real_views(values):
    """Complex tensors (tessel/_complex.py) as their real views [..., 2], which C++'s autograd differentiates (their
    gradients are torch's conjugate-Wirtinger ones, dL/da + i dL/db), and which of them were complex."""
    from ._complex import ComplexTensor
    flags = [type(v) is ComplexTensor for v in values]
    return [v._r if c else v for v, c in zip(values, flags)], flags


def _batched_grad(outputs, inputs, seeds, retain_graph, allow_unused, create_graph):
    """is_grads_batched: dim 0 of every grad_output is a batch of seeds; one backward per batch row (the graph
    kept until the last), each input's gradients stacked along a new dim 0 (None where unused)."""
    if any(s is None for s in seeds):
        raise ValueError("autograd.grad(is_grads_batched=True): every output needs a grad_outputs tensor whose "
                         "dim 0 is the batch")
    sizes = {s.shape[0] if s.dim() > 0 else None for s in seeds}
    if len(sizes) != 1 or None in sizes:
        raise ValueError("autograd.grad(is_grads_batched=True): the grad_outputs' dim 0 sizes differ or are "
                         "missing: %s" % [tuple(s.shape) for s in seeds])
    (batch,) = sizes
    if batch == 0:
        raise ValueError("autograd.grad(is_grads_batched=True): an empty batch of grad_outputs")
    for s, o in zip(seeds, outputs):
        if tuple(s.shape[1:]) != tuple(o.shape):
            raise RuntimeError("autograd.grad(is_grads_batched=True): a grad_outputs batch of shape %s for an output "
                               "of shape %s" % (tuple(s.shape), tuple(o.shape)))
    rows = [_C._grad(outputs, inputs, [s[b] for s in seeds], retain_graph or b + 1 < batch, allow_unused,
                     create_graph) for b in range(batch)]
    return [None if rows[0][i] is None else _C._functional.stack([r[i] for r in rows], 0)
            for i in range(len(inputs))]


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, grad_variables=None, inputs=None):
    """torch.autograd.backward: accumulates into the .grad of the leaves (or only of `inputs`)."""
    retain_graph = create_graph if retain_graph is None else retain_graph  # torch's default
    tensors = _seq(tensors)
    seeds = [None] * len(tensors) if grad_tensors is None else _seq(grad_tensors)
    if len(seeds) != len(tensors):
        raise ValueError("grad_tensors has %d entries for %d tensors" % (len(seeds), len(tensors)))
    if inputs is None:
        with _checkpoint_errors():
            _C._backward(tensors, seeds, bool(retain_graph), bool(create_graph))
        _post_backward()
        return
    inputs = _seq(inputs)
    if not inputs:
        raise RuntimeError("'inputs' argument to backward() cannot be empty.")
    # only the nodes on a path to the inputs run; their leaves accumulate as in a full backward (hooks,
    # post-accumulate hooks), non-leaf inputs get .grad (core/autograd/engine.h) and, as torch's, retain it from
    # then on (retain_grad(); it refuses a tensor that does not require grad with torch's words)
    for t in inputs:
        if not t.is_leaf or not t.requires_grad:
            t.retain_grad()
    with _checkpoint_errors():
        _C._backward(tensors, seeds, bool(retain_graph), bool(create_graph), list(inputs))
    _post_backward()


# What a checkpoint's recompute raises in the engine (core/autograd/checkpoint.cc), which torch raises as
# torch.utils.checkpoint.CheckpointError: `except CheckpointError` catches them as in torch.
_CHECKPOINT_MESSAGES = ("torch.utils.checkpoint: Recomputed values",
                        "Tensor cached during selective activation checkpoint has been mutated",
                        "the checkpointed function is not deterministic")


@contextlib.contextmanager
def _checkpoint_errors():
    try:
        yield
    except RuntimeError as e:
        from .utils.checkpoint import CheckpointError
        if isinstance(e, CheckpointError) or not any(m in str(e) for m in _CHECKPOINT_MESSAGES):
            raise
        raise CheckpointError(str(e)) from e


def _post_backward():
    """What runs once a backward returns: DistributedDataParallel's gradient averaging."""
    from .nn import parallel
    parallel._run_pending()


def _tensor_backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """Tensor.backward with torch's arguments (inputs=: accumulate into those tensors' .grad only)."""
    backward([self], None if gradient is None else [gradient], retain_graph, create_graph, inputs=inputs)


_C.Tensor.backward = _tensor_backward


# ---- torch.autograd.Function -------------------------------------------------------------------------------

def _expandable(shape, to):
    """Whether `shape` broadcasts to `to` (torch's is_expandable_to)."""
    if len(shape) > len(to):
        return False
    return all(a == b or a == 1 for a, b in zip(reversed(shape), reversed(to)))


class _VariableMeta(type):
    def __instancecheck__(cls, obj):  # every tensor is a Variable, as in torch since 0.4
        return isinstance(obj, _C.Tensor)


def queue_callback(callback):
    """torch.autograd.graph.queue_callback: callback() runs once the backward pass running now has run every node
    (not when it raised); queued several times, it runs several times, in order. Only inside a backward."""
    _C._queue_callback(callback)


class _ExecutionEngine:
    """torch.autograd.Variable._execution_engine, as FSDP1- / DDP-style code reaches the engine's queue_callback."""

    @staticmethod
    def queue_callback(callback):
        queue_callback(callback)


class Variable(metaclass=_VariableMeta):
    """torch.autograd.Variable (old code: the WGAN-GP paper's `Variable(interpolates, requires_grad=True)`): a leaf
    tensor sharing data's memory."""
    _execution_engine = _ExecutionEngine()

    def __new__(cls, data, requires_grad=False, volatile=False):
        return data.detach().requires_grad_(requires_grad)


class _MultiHandle:
    """register_multi_grad_hook's handle: removes every per-tensor hook."""

    def __init__(self, handles):
        self.handles = handles

    def remove(self):
        for h in self.handles:
            h.remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def register_multi_grad_hook(tensors, fn, *, mode="all"):
    """torch.autograd.graph.register_multi_grad_hook. mode "all": fn(grads) once per backward pass that computes a
    gradient for any of `tensors`, with None for those it computed none for; it runs when the pass has run every
    node (torch runs it as the last of those gradients arrives: the same gradients, later). mode "any": fn(grad)
    with the first such gradient of each pass, as it arrives."""
    if mode not in ("all", "any"):
        raise ValueError("Expects mode to be one of ('all', 'any') but got %s" % (mode,))
    tensors = list(tensors)
    if mode == "any":
        seen = set()

        def first(grad):
            pass_id = _C._backward_pass_id()
            if pass_id not in seen:
                seen.add(pass_id)
                queue_callback(lambda: seen.discard(pass_id))
                fn(grad)
        return _MultiHandle([t.register_hook(first) for t in tensors if t.requires_grad])
    buffers = {}

    def collect(i):
        def hook(grad):
            pass_id = _C._backward_pass_id()
            if pass_id not in buffers:
                buffers[pass_id] = [None] * len(tensors)
                queue_callback(lambda: fn(buffers.pop(pass_id)))
            buffers[pass_id][i] = grad
        return hook
    return _MultiHandle([t.register_hook(collect(i)) for i, t in enumerate(tensors)])


def _type_name(obj):
    """A type as torch's messages name it (CPython's tp_name): a class statement's by its name, a built-in type
    by its module and name (float, numpy.ndarray)."""
    t = type(obj)
    if t.__flags__ & (1 << 9) or t.__module__ == "builtins":  # Py_TPFLAGS_HEAPTYPE
        return t.__name__
    return "%s.%s" % (t.__module__, t.__name__)


_FREED = ("Trying to backward through the graph a second time (or directly access saved tensors after they have "
          "already been freed). Saved intermediate values of the graph are freed when you call .backward() or "
          "autograd.grad(). Specify retain_graph=True if you need to backward through the graph a second time or "
          "if you need to access saved tensors after calling backward.")
_CLEARED = ("saved_tensors can only be accessed once when clear_saved_tensors_on_access=True is set on the "
            "autograd.Function. Either access saved_tensors only once, or set clear_saved_tensors_on_access=False.")


def _unpacked(unpack_hook, packed):
    t = unpack_hook(packed)
    if not isinstance(t, _C.Tensor):
        raise TypeError("Output of saved tensor unpack_hook expected to be a Tensor but got result of type %s"
                        % _type_name(t))
    return t


class FunctionCtx:
    """What forward and backward share (torch's ctx): save_for_backward / saved_tensors, needs_input_grad,
    mark_non_differentiable, mark_dirty, set_materialize_grads, and any attribute the function sets."""

    def __init__(self):
        self._to_save = ()  # save_for_backward's tensors: saved_tensors shows them once apply() has ended
        self._saved = None  # set when apply() ends (None before: torch's saved_tensors is empty in forward)
        self._packed = None  # under saved_tensors_hooks: (unpack_hook, packed) per saved tensor (None for None)
        self._saved_versions = None  # recorded when apply() ends, checked on every read (torch's SavedVariable)
        self._saved_outputs = {}  # saved index -> output index, for the function's own outputs it saved
        self._released = self._cleared = self._clear_on_access = False
        self._name = "Function"
        self.needs_input_grad = ()
        self._non_differentiable = set()
        self._dirty = ()
        self._materialize_grads = True

    def save_for_backward(self, *tensors):
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, _C.Tensor):
                raise TypeError("save_for_backward can only save variables, but argument %d is of type %s"
                                % (i, _type_name(t)))
        self._to_save = tuple(tensors)

    @property
    def saved_tensors(self):
        """The tensors save_for_backward kept (empty inside forward, as torch's): freed by a backward without
        retain_graph, refused if one was written in place since apply(), read through the unpack hook of the
        saved_tensors_hooks in force at apply() (on every read), and readable once with the Function's
        clear_saved_tensors_on_access (all as torch's)."""
        if self._cleared:
            raise RuntimeError(_CLEARED)
        if self._saved is None:  # (a read in forward is the one read clear_saved_tensors_on_access allows, as torch)
            self._cleared = self._clear_on_access
            return ()
        if self._released:
            raise RuntimeError(_FREED)
        if self._packed is not None:  # (torch checks no versions for what the hooks hold)
            saved = tuple(None if p is None else _unpacked(*p) for p in self._packed)
        else:
            saved = self._saved
            for i, (t, v) in enumerate(zip(saved, self._saved_versions or ())):
                if t is not None and t._version != v:
                    raise RuntimeError("one of the variables needed for gradient computation has been modified by "
                                       "an inplace operation: saved tensor %d of '%s' (shape %s) is at version %d; "
                                       "expected version %d" % (i, self._name, list(t.shape), t._version, v))
        if self._saved_outputs and _C.is_grad_enabled():  # a create_graph backward: saved outputs keep their graph
            saved = tuple(_C._reattach_function_output(t, self._saved_outputs[i]) if i in self._saved_outputs
                          else t for i, t in enumerate(saved))
        if self._clear_on_access:
            self._cleared, self._saved, self._packed, self._saved_handles = True, (), None, ()
        return saved

    def _release(self):
        if self._saved or self._packed:
            self._released, self._saved, self._packed, self._saved_handles = True, (), None, ()

    def mark_non_differentiable(self, *tensors):
        self._non_differentiable.update(id(t) for t in tensors)

    def set_materialize_grads(self, value):
        self._materialize_grads = bool(value)

    def mark_dirty(self, *tensors):
        """The inputs forward modified in place (and returns): after apply each of them *is* the output, with
        this function's node as its history, as torch's in-place Functions."""
        self._dirty = tuple(tensors)


class BackwardCFunction(FunctionCtx):
    """torch's class of a custom Function's ctx (one subclass per Function, named as its node: ExpBackward), which
    is also what y.grad_fn shows (its attributes, saved_tensors, needs_input_grad): apply(*grads) runs the
    Function's backward (or vjp) on them."""
    _forward_cls = None

    def apply(self, *grads):
        return _user_backward(self._forward_cls)(self, *grads)


# y.grad_fn of a custom Function's output -> its ctx (_GradFn reads the ctx's attributes): keyed by the node's
# address (its hash), not the node (which would keep the graph alive), and dropped with the ctx (the node holds
# it through its backward closure); the node's name guards against a reused address.
_FUNCTION_CTXS = weakref.WeakValueDictionary()


def _function_ctx(node):
    ctx = _FUNCTION_CTXS.get(hash(node))
    return ctx if ctx is not None and ctx._name == node.name() else None


def _user_backward(cls):
    """torch's BackwardCFunction._get_user_fn: the Function's backward, or its vjp (never both)."""
    backward_fn, vjp_fn = cls.backward, cls.vjp
    if backward_fn is not Function.backward and vjp_fn is not Function.vjp:
        raise RuntimeError("Implementing both 'backward' and 'vjp' for a custom Function is not allowed. You should "
                           "only implement one of them.")
    return vjp_fn if vjp_fn is not Function.vjp else backward_fn


def _forward_signature(cls):
    cached = cls.__dict__.get("_tessel_forward_signature")
    if cached is None or cached[0] is not cls.forward:
        cached = (cls.forward, inspect.signature(cls.forward))
        setattr(cls, "_tessel_forward_signature", cached)
    return cached[1]


def _bind_default_args(cls, args, kwargs):
    """torch's _bind_default_args, for a Function with setup_context: forward's signature binds the call with its
    defaults filled in; the bound positions are forward's arguments and setup_context's `inputs`."""
    bound = _forward_signature(cls).bind(*args, **kwargs)
    bound.apply_defaults()
    if bound.kwargs:  # (keyword-only parameters: torch's apply passes positions only)
        raise TypeError("forward() got an unexpected keyword argument '%s'" % next(iter(bound.kwargs)))
    return bound.args


def _bind_keywords(cls, args, kwargs):
    """torch's apply for forward(ctx, ...) called with keywords: each goes to the position of forward's parameter
    of that name (after ctx), and every position up to the last one given must be given (defaults are not filled
    in), so a tensor passed by keyword is an input like any other."""
    params = list(_forward_signature(cls).parameters.values())
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    names = []
    for p in params[1:] if params and params[0].kind in positional else ():
        if p.kind not in positional:
            break
        names.append(p.name)
    placed = {}
    for key, value in kwargs.items():
        i = names.index(key) if key in names else -1
        if i < 0 or params[i + 1].kind != inspect.Parameter.POSITIONAL_OR_KEYWORD:
            raise TypeError("forward() got an unexpected keyword argument '%s'" % key)
        if i < len(args):
            raise TypeError("forward() got multiple values for argument '%s'" % key)
        placed[i] = value
    bound = list(args)
    for i in range(len(args), max(placed) + 1):
        if i not in placed:
            raise TypeError("forward() missing required argument: '%s' (position %d)" % (names[i], i))
        bound.append(placed[i])
    return tuple(bound)


def _checked_gradients(name, result, arg_metas, n_args):
    """backward's result as torch's checks it: one gradient per forward argument (extra trailing Nones
    dropped), None for a non-tensor argument, a tensor or None for a tensor one; the gradients of the inputs that
    require grad, summed down to their shapes where they broadcast (those of the others are ignored)."""
    if not isinstance(result, tuple):
        result = (result,)
    if len(result) > n_args and all(r is None for r in result[n_args:]):
        result = result[:n_args]  # torch accepts extra trailing None gradients
    if len(result) != n_args:
        raise RuntimeError("function %s returned an incorrect number of gradients (expected %d, got %d)"
                           % (name, n_args, len(result)))
    picked = []
    for i, g in enumerate(result):
        meta = arg_metas.get(i)
        if meta is None:
            if g is not None:
                raise RuntimeError("function %s returned a gradient different than None at position %d, but the "
                                   "corresponding forward input was not a Variable" % (name, i + 1))
            continue
        if g is not None and not isinstance(g, _C.Tensor):
            raise RuntimeError("expected Variable or None (got %s)" % _type_name(g))
        want, wants_grad = meta
        if g is None or not wants_grad:
            picked.append(None)
            continue
        if tuple(g.shape) != want:
            if not _expandable(want, tuple(g.shape)):
                raise RuntimeError("Function %s returned an invalid gradient at index %d - got %s but expected shape "
                                   "compatible with %s" % (name, i, list(g.shape), list(want)))
            g = g.sum_to_size(*want)  # torch's: a gradient the input broadcasts to is summed down
        picked.append(g)
    return picked


class _FunctionMeta(type):
    def __init__(cls, name, bases, attrs):
        super().__init__(name, bases, attrs)
        cls._backward_name = name + "Backward"
        cls._backward_cls = type(cls._backward_name, (BackwardCFunction,),
                                 {"_forward_cls": cls, "__module__": cls.__module__})


class Function(metaclass=_FunctionMeta):
    """torch.autograd.Function: subclass with static forward(ctx, *args) and backward(ctx, *grad_outputs)
    (or vjp; or forward(*args) plus setup_context(ctx, inputs, output), torch 2's form) and call Cls.apply(*args).
    forward runs without recording; its tensor outputs become one node of the graph whose backward calls
    yours: one gradient per forward argument (None for non-tensors or no gradient), each checked against
    its input's shape. Keyword arguments are bound to forward's parameters as torch's apply binds them."""
    clear_saved_tensors_on_access = False

    @staticmethod
    def forward(*args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for your custom "
                                  "autograd.Function to use it with backward mode AD.")

    vjp = backward

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError("setup_context is not overridden")

    @classmethod
    def apply(cls, *args, **kwargs):
        separate = cls.setup_context is not Function.setup_context
        if separate:
            args = _bind_default_args(cls, args, kwargs)
        elif kwargs:
            args = _bind_keywords(cls, args, kwargs)
        ctx = cls._backward_cls()
        ctx._clear_on_access = bool(cls.clear_saved_tensors_on_access)
        ctx.needs_input_grad = tuple(isinstance(a, _C.Tensor) and a.requires_grad for a in args)
        with _C._GradMode(False):
            out = cls.forward(*args) if separate else cls.forward(ctx, *args)
        if separate:
            cls.setup_context(ctx, args, out)
        single = isinstance(out, _C.Tensor)
        outs = [out] if single else list(out) if isinstance(out, (tuple, list)) else [out]
        slots = [i for i, o in enumerate(outs) if isinstance(o, _C.Tensor)]
        tensors = [outs[i] for i in slots]
        arg_slots = [i for i, a in enumerate(args) if isinstance(a, _C.Tensor)]
        inputs = [args[i] for i in arg_slots]
        differentiable = [id(t) not in ctx._non_differentiable for t in tensors]
        name = ctx._name = cls._backward_name
        metas = [(tuple(t.shape), t.dtype) for t in tensors]
        # (as _C._apply_function decides: a node is recorded, and saved tensors packed, only then)
        recording = _C.is_grad_enabled() and any([t.requires_grad for t in inputs])
        # What backward needs of the call, and nothing that holds its outputs: the closure lives in the graph node
        # the outputs point at (a C++ reference the cycle collector cannot see), so a closure over `outs` or
        # `args` (a dirty input becomes an output) kept every output, its storage and the ctx alive for good.
        n_outs, n_args = len(outs), len(args)
        arg_metas = {i: (tuple(args[i].shape), args[i].requires_grad) for i in arg_slots}

        def backward(grads):
            # one gradient per output, as torch: None for a non-tensor output, zeros for a tensor output nobody
            # used (or marked non-differentiable) unless set_materialize_grads(False)
            full = [None] * n_outs
            for slot, g, (shape, dtype) in zip(slots, grads, metas):
                full[slot] = g if g is not None or not ctx._materialize_grads else _C._full(list(shape), 0.0, dtype)
            return _checked_gradients(name, _user_backward(cls)(ctx, *full), arg_metas, n_args)

        dirty, ctx._dirty = ctx._dirty, ()  # (the ctx lives in the node: holding the outputs, it would keep them)
        for d in dirty:
            if not any(d is a for a in args):
                raise RuntimeError("%s: mark_dirty was given a tensor that is not an input of the function" % name)
            if not any(d is o for o in tensors):
                raise RuntimeError("Some elements marked as dirty during the forward method were not returned as "
                                   "output. The inputs that are modified inplace must all be outputs of the Function.")
            if recording and d.is_leaf and d.requires_grad:  # (under no_grad: a plain in-place write, as torch)
                raise RuntimeError("a leaf Variable that requires grad has been used in an in-place operation.")
        recorded = _C._apply_function(name, inputs, tensors, differentiable, backward, ctx._materialize_grads,
                                      ctx._release)
        # torch's SavedVariable of an output: read in a create_graph backward, it is the output with this node's
        # history again (Exp's `grad * result` is then differentiable in x), not a constant
        to_save, ctx._to_save = ctx._to_save, ()
        ctx._saved_outputs = {i: k for i, t in enumerate(to_save) for k, o in enumerate(tensors) if t is o}
        for i, t in zip(slots, recorded):
            d = next((d for d in dirty if d is outs[i]), None)
            if d is None:
                outs[i] = t
            elif not recording:  # torch's: the write counts (its version moves on), no history; one that requires
                d._bump_version_()  # grad comes back as a detached alias
                if d.requires_grad:
                    outs[i] = d.detach()
            else:  # torch's retain_grad follows the tensor (and a view's base) to the new history
                base = d._base
                retained = [r for r in (d, base) if r is not None and r.retains_grad]
                if d._sole_handle():
                    d._rebind_(t)  # the input object becomes the output: its history is now this node
                else:  # a view or a shared tensor: the values are in its memory already; give it (and its base) the
                    d._record_in_place(t)  # history
                for r in retained:
                    r.retain_grad()
        if recording:  # (y.grad_fn.foo, y.grad_fn.apply: _GradFn reads the ctx)
            for t in recorded:
                node = _grad_fn_cpp.__get__(t)
                if node is not None and node.name() == name:
                    _FUNCTION_CTXS[hash(node)] = ctx
                    break
        # Saved outputs (a dirty input included) are kept without this node's history, as torch's SavedVariable of
        # an output: the output itself would hold the node that holds the ctx (a cycle through C++ the collector
        # cannot see, so a saved dirty input lived forever); a create_graph read re-attaches them (saved_tensors).
        # The handles and versions are taken after the rebind above, so it does not count as a write to them.
        saved = tuple(t.detach() if i in ctx._saved_outputs else t for i, t in enumerate(to_save))
        hooks = _saved_tensors_hooks_in_force() if recording else None
        if hooks is not None:  # torch's: packed once here, unpacked on every read (nothing else kept)
            pack, unpack = hooks
            ctx._saved, ctx._packed = (), tuple(None if t is None else (unpack, pack(t)) for t in saved)
        else:
            # A second handle on each saved tensor (as torch's SavedVariable holds one): an in-place write to it then
            # goes into its memory and bumps its version (tessel/_inplace.py rebinds only unshared tensors), so the
            # version read at backward tells whether it changed.
            ctx._saved = saved
            ctx._saved_handles = tuple(_C.Tensor(t) if t is not None else None for t in saved)
            ctx._saved_versions = tuple(t._version if t is not None else 0 for t in saved)
        if single:
            return outs[0]
        return tuple(outs) if isinstance(out, tuple) else outs if isinstance(out, list) else outs[0]


def once_differentiable(fn):
    """torch's decorator for a backward that is not itself differentiable: it runs without recording, and under
    create_graph=True its results carry a node that raises if they are differentiated again."""
    import functools

    @functools.wraps(fn)
    def wrapper(ctx, *args):
        with _C._GradMode(False):
            outputs = fn(ctx, *args)
        if not _C.is_grad_enabled() or not any(isinstance(a, _C.Tensor) and a.requires_grad for a in args):
            return outputs
        single = not isinstance(outputs, tuple)
        # torch's: each output detached and made to require grad, so the error node is recorded over it
        wrapped = tuple(_DelayedError.apply(o.detach().requires_grad_(True))
                        if isinstance(o, _C.Tensor) and o.dtype.is_floating_point else o
                        for o in ((outputs,) if single else outputs))
        return wrapped[0] if single else wrapped
    return wrapper


# torch.autograd's grad-mode context managers (torch.autograd.no_grad is tessel.no_grad), its functional
# API (tessel.autograd.functional: vjp, jvp, jacobian, hessian, vhp, hvp) and gradcheck / gradgradcheck
# (importable as torch's modules are: `from tessel.autograd.functional import jacobian`,
# `from tessel.autograd.gradcheck import GradcheckError`).
def __getattr__(name):
    """The grad-mode managers are tessel's own, read on first use (tessel is still importing this module)."""
    if name in ("no_grad", "enable_grad", "set_grad_enabled", "inference_mode"):
        import tessel
        return getattr(tessel, name)
    raise AttributeError("module 'tessel.autograd' has no attribute %r" % name)


# On this thread: .message, the innermost disable_saved_tensors_hooks' (None outside), .active, how many
# saved_tensors_hooks are entered, and .stack, their (pack_hook, unpack_hook), innermost last (a custom Function's
# save_for_backward packs with them: Function.apply).
_hooks_disabled = threading.local()


def _saved_tensors_hooks_in_force():
    stack = getattr(_hooks_disabled, "stack", None)
    return stack[-1] if stack else None


class saved_tensors_hooks:
    """torch.autograd.graph.saved_tensors_hooks(pack_hook, unpack_hook): while entered (on this thread), every
    tensor autograd saves for backward goes through pack_hook (which may return any object: a compressed or
    offloaded copy, a file name) and backward gets unpack_hook(that object), which must give back a tensor of
    the saved one's shape (core/autograd/saved_tensor_hooks.h). The innermost entered hooks win. A custom
    Function's save_for_backward goes through them too, as torch's: each tensor packed once when apply() ends (if
    it recorded a node), unpacked on every read of ctx.saved_tensors."""

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook, self.unpack_hook = pack_hook, unpack_hook
        self._entered = []

    def __enter__(self):
        message = getattr(_hooks_disabled, "message", None)
        if message is not None:  # inside disable_saved_tensors_hooks(message)
            raise RuntimeError(message)
        guard = _C._SavedTensorsHooks(self.pack_hook, self.unpack_hook)
        guard.__enter__()
        self._entered.append(guard)
        _hooks_disabled.active = getattr(_hooks_disabled, "active", 0) + 1
        if not hasattr(_hooks_disabled, "stack"):
            _hooks_disabled.stack = []
        _hooks_disabled.stack.append((self.pack_hook, self.unpack_hook))
        return self

    def __exit__(self, *exc):
        self._entered.pop().__exit__(None, None, None)
        _hooks_disabled.active -= 1
        _hooks_disabled.stack.pop()
        return False


class save_on_cpu(saved_tensors_hooks):
    """torch.autograd.graph.save_on_cpu: saved activations kept in host memory until backward. tessel's Python
    face computes on the CPU, so they are there already: pack and unpack pass them through (pin_memory is
    accepted; there is no device to pin for)."""

    def __init__(self, pin_memory=False, device_type="cuda"):
        super().__init__(lambda t: t, lambda t: t)




class disable_saved_tensors_hooks:
    """torch.autograd.graph.disable_saved_tensors_hooks(error_message): inside it, entering saved_tensors_hooks
    (save_on_cpu, ...) raises RuntimeError(error_message), and so does entering it while such hooks are in force;
    ops record and save their tensors as usual (tessel refused every op that saved one)."""

    def __init__(self, error_message):
        self.error_message = error_message
        self._outer = []

    def __enter__(self):
        if getattr(_hooks_disabled, "active", 0):  # torch: not while hooks are in force
            raise RuntimeError(self.error_message)
        self._outer.append(getattr(_hooks_disabled, "message", None))
        _hooks_disabled.message = self.error_message
        return self

    def __exit__(self, *exc):
        _hooks_disabled.message = self._outer.pop()
        return False


def _register_submodules():
    import sys
    import types
    from . import _autograd_functional
    sys.modules[__name__ + ".functional"] = _autograd_functional
    graph_module = types.ModuleType(__name__ + ".graph", "torch.autograd.graph's saved-tensor hooks.")
    graph_module.saved_tensors_hooks, graph_module.save_on_cpu = saved_tensors_hooks, save_on_cpu
    graph_module.disable_saved_tensors_hooks = disable_saved_tensors_hooks
    graph_module.queue_callback, graph_module.register_multi_grad_hook = queue_callback, register_multi_grad_hook
    sys.modules[__name__ + ".graph"] = graph_module
    checks = types.ModuleType(__name__ + ".gradcheck", "torch.autograd.gradcheck's names.")
    checks.gradcheck, checks.gradgradcheck = _autograd_functional.gradcheck, _autograd_functional.gradgradcheck
    checks.GradcheckError = _autograd_functional.GradcheckError
    sys.modules[__name__ + ".gradcheck"] = checks
    # torch.autograd.profiler's record_function / profile, which older training loops annotate with: tessel's
    # profiler's, looked up on first use (tessel.profiler imports the autograd machinery itself)
    prof = types.ModuleType(__name__ + ".profiler", "torch.autograd.profiler's names (tessel.profiler's).")

    def lookup(name):
        if name in ("record_function", "profile", "EventList", "FunctionEvent", "FunctionEventAvg", "emit_nvtx",
                    "emit_itt"):
            from . import profiler
            return getattr(profiler, "_LegacyProfile" if name == "profile" else name)
        raise AttributeError("module %r has no attribute %r" % (prof.__name__, name))
    prof.__getattr__ = lookup
    sys.modules[prof.__name__] = prof
    return _autograd_functional, graph_module, prof


functional, graph, profiler = _register_submodules()
gradcheck, gradgradcheck, GradcheckError = functional.gradcheck, functional.gradgradcheck, functional.GradcheckError


class _AnomalyMode:
    """Shared by detect_anomaly and set_detect_anomaly: restores the previous mode on exit."""

    def _set(self, enabled, check_nan):
        self._prev = (_C._is_anomaly_enabled(), _C._is_anomaly_check_nan_enabled())
        _C._set_anomaly_enabled(bool(enabled), bool(check_nan))

    def __exit__(self, *exc):
        _C._set_anomaly_enabled(*self._prev)
        return False


class detect_anomaly(_AnomalyMode):
    """torch.autograd.detect_anomaly(check_nan=True): a context manager (or decorator) under which a backward
    function returning NaN fails at once, naming it ("Function 'DivBackward0' returned nan values in its 1th
    output."), instead of the NaN spreading into every gradient (core/autograd/anomaly.h)."""

    def __init__(self, check_nan=True):
        self.check_nan = check_nan

    def __enter__(self):
        import warnings
        warnings.warn("Anomaly Detection has been enabled. This mode will increase the runtime and should only be "
                      "enabled for debugging.", stacklevel=2)
        self._set(True, self.check_nan)
        return self

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__(self.check_nan):
                return fn(*args, **kwargs)
        return wrapper


class set_detect_anomaly(_AnomalyMode):
    """torch.autograd.set_detect_anomaly(mode, check_nan=True): sets the mode at once (as a function) or for a
    with block (restored on exit)."""

    def __init__(self, mode, check_nan=True):
        self._set(mode, check_nan)

    def __enter__(self):
        return self


def is_anomaly_enabled():
    return _C._is_anomaly_enabled()


def is_anomaly_check_nan_enabled():
    return _C._is_anomaly_check_nan_enabled()


class _DelayedError(Function):
    """once_differentiable's mark: the identity, whose backward raises as torch's DelayedError."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        raise RuntimeError("trying to differentiate twice a function that was marked with @once_differentiable")


def _register_function_module():
    import sys
    import types
    module = types.ModuleType(__name__ + ".function", "torch.autograd.function's names.")
    module.Function, module.FunctionCtx, module.once_differentiable = Function, FunctionCtx, once_differentiable
    module.InplaceFunction = Function
    sys.modules[module.__name__] = module
    return module


function = _register_function_module()


# ---- grad_fn classes: type(y.grad_fn).__name__ is the node's name, as torch's (torchviz labels nodes by it) ----
class _GradFn:
    """What grad_fn and next_functions hand out: the bound node under a class named as torch names the node
    (MulBackward0, AccumulateGrad), one class per name. The bound class cannot be switched in place (pybind11's
    deallocator), so this is a thin view: equal and hashing as its node, everything else read from it; one view
    per live node (y.grad_fn is y.grad_fn, as torch's: torchviz tells nodes apart by id())."""
    __slots__ = ("_node", "__weakref__")

    def __init__(self, node):
        object.__setattr__(self, "_node", node)

    def name(self):
        return self._node.name()

    @property
    def next_functions(self):
        return tuple((_typed_node(n), i) for n, i in self._node.next_functions)

    def __getattr__(self, name):
        try:
            return getattr(self._node, name)
        except AttributeError:
            ctx = _function_ctx(self._node)  # a custom Function's node: its ctx's (torch's grad_fn *is* the ctx)
            if ctx is None:
                raise
        return getattr(ctx, name)

    def __setattr__(self, name, value):
        ctx = _function_ctx(self._node)
        if ctx is None:
            raise AttributeError("'%s' object has no attribute '%s'" % (type(self).__name__, name))
        setattr(ctx, name, value)

    def __eq__(self, other):
        return self._node == (other._node if isinstance(other, _GradFn) else other)

    def __hash__(self):
        return hash(self._node)

    def __repr__(self):
        return repr(self._node)


graph.Node = _GradFn  # (isinstance(t.grad_fn, torch.autograd.graph.Node))
_NODE_CLASSES = {}
_grad_fn_cpp = _C.Tensor.grad_fn


_VIEWS = weakref.WeakValueDictionary()  # node -> its live _GradFn view


def _typed_node(node):
    if node is None:
        return None
    view = _VIEWS.get(node)
    if view is not None:
        return view
    name = node.name().rsplit("::", 1)[-1]  # torch's class AccumulateGrad is named torch::autograd::AccumulateGrad
    cls = _NODE_CLASSES.get(name)
    if cls is None:
        cls = _NODE_CLASSES[name] = type(name, (_GradFn,), {"__slots__": (), "__module__": "tessel.autograd"})
    view = _VIEWS[node] = cls(node)
    return view


_C.Tensor.grad_fn = property(lambda self: _typed_node(_grad_fn_cpp.__get__(self)),
                             doc="The autograd node that made this tensor (torch's grad_fn), None for leaves")
