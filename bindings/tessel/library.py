"""torch.library for eager code: custom_op (torchtitan's and diffusers' custom ops), register_autograd /
register_fake / register_kernel, and the older Library(ns, "DEF" / "IMPL" / "FRAGMENT").define / impl. tessel runs
eagerly, so an op is its Python function: calling it (or torch.ops.<ns>.<name>) runs the kernel registered for
the CPU, or the function itself. With register_autograd the op is one autograd node whose backward is the one
registered (as torch's); without it, autograd records the function's own ops (torch raises at backward instead:
its op has no autograd formula), so gradients are the function's exact ones. Fake (meta) implementations are
kept for torch.compile's tracing, which tessel does not do; mutates_args is recorded, the function's writes happen
as it does them.

    @torch.library.custom_op("mylib::scale", mutates_args=())
    def scale(x: torch.Tensor, s: float) -> torch.Tensor:
        return x * s
    scale.register_autograd(lambda ctx, g: (g * ctx.s, None), setup_context=lambda ctx, inputs, output: setattr(
        ctx, "s", inputs[1]))
"""
import functools
import inspect

from . import ops as _ops

__all__ = ["custom_op", "register_fake", "register_autograd", "register_kernel", "Library", "impl", "define",
           "CustomOpDef"]

_DEFINED = {}  # "ns::name" -> CustomOpDef


class _OpsNamespace:
    """torch.ops.<ns>: the custom ops defined under ns."""

    def __init__(self, name):
        self._name = name

    def __repr__(self):
        return "tessel.ops.%s" % self._name


def _split(qualname):
    if "::" not in qualname:
        raise ValueError("custom_op(name, ...): expected name to be of the form '{namespace}::{name}', got %r"
                         % qualname)
    return qualname.split("::", 1)


class CustomOpDef:
    """torch.library.CustomOpDef: a callable op with its registrations."""

    def __init__(self, qualname, fn, mutates_args=(), schema=None):
        self._namespace, self._name = _split(qualname)
        self._qualname, self._init_fn, self._mutates_args, self._schema = qualname, fn, mutates_args, schema
        self._kernels = {}  # device type -> fn
        self._abstract_fn = None
        self._backward_fn = self._setup_context_fn = None
        self._function = None
        self._sharding_fn = None  # tessel.distributed.tensor.experimental.register_sharding's strategies
        if fn is not None:
            functools.update_wrapper(self, fn)
        ns = getattr(_ops, self._namespace, None)
        if ns is None:
            ns = _OpsNamespace(self._namespace)
            setattr(_ops, self._namespace, ns)
        setattr(ns, self._name, self)
        _DEFINED[qualname] = self

    def __repr__(self):
        return "<CustomOpDef(%s)>" % self._qualname

    @property
    def default(self):  # torch.ops.ns.name.default
        return self

    def _kernel(self):
        fn = self._kernels.get("cpu") or self._kernels.get(None) or self._init_fn
        if fn is None:
            raise NotImplementedError("%s: no implementation registered for the CPU (torch.library.impl / "
                                      "register_kernel)" % self._qualname)
        return fn

    def _run(self, *args, **kwargs):
        """The kernel on these arguments; on DTensors through the strategies register_sharding gave the op."""
        if self._sharding_fn is not None:
            from .distributed.tensor.experimental import _register_sharding
            if _register_sharding.has_dtensor(args, kwargs):
                return _register_sharding.sharded_call(self, args, kwargs)
        return self._kernel()(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        if self._backward_fn is None:
            return self._run(*args, **kwargs)
        if kwargs:  # the autograd node takes its inputs by position: bind keywords to the signature
            bound = inspect.signature(self._kernel()).bind(*args, **kwargs)
            bound.apply_defaults()
            args = tuple(bound.arguments.values())
        return self._autograd_function().apply(*args)

    def _autograd_function(self):
        if self._function is None:
            from . import _C
            from .autograd import Function
            op = self

            class CustomOpFunction(Function):
                @staticmethod
                def forward(*args):
                    with _C._GradMode(False):
                        return op._run(*args)

                @staticmethod
                def setup_context(ctx, inputs, output):
                    if op._setup_context_fn is not None:
                        op._setup_context_fn(ctx=ctx, inputs=inputs, output=output)  # by name, as torch

                @staticmethod
                def backward(ctx, *grads):
                    result = op._backward_fn(ctx, *grads)
                    return result if isinstance(result, tuple) else (result,)
            CustomOpFunction.__name__ = CustomOpFunction.__qualname__ = self._name
            self._function = CustomOpFunction
        return self._function

    def register_kernel(self, device_types, fn=None):
        def register(f):
            for d in ([device_types] if device_types is None or isinstance(device_types, str) else device_types):
                self._kernels[d] = f
            return f
        return register if fn is None else register(fn)

    def register_fake(self, fn):
        self._abstract_fn = fn
        return fn

    def register_autograd(self, backward, /, *, setup_context=None):
        self._backward_fn, self._setup_context_fn, self._function = backward, setup_context, None

    def register_torch_dispatch(self, torch_dispatch_class, fn=None):
        return (lambda f: f) if fn is None else fn

    def register_vmap(self, func=None):
        return (lambda f: f) if func is None else func

    def set_kernel_enabled(self, device_type, enabled=True):
        pass


def custom_op(name, fn=None, /, *, mutates_args, device_types=None, schema=None):
    """torch.library.custom_op: `fn` (or the decorated function) as the op `name` ("namespace::op")."""
    def make(f):
        op = CustomOpDef(name, None if device_types is not None else f, mutates_args, schema)
        if device_types is not None:
            op.register_kernel(device_types, f)
        functools.update_wrapper(op, f)
        return op
    return make if fn is None else make(fn)


def _op(op):
    if isinstance(op, CustomOpDef):
        return op
    if isinstance(op, str) and op in _DEFINED:
        return _DEFINED[op]
    raise ValueError("torch.library: %r is not a custom op defined with custom_op or Library.define" % (op,))


def register_fake(op, fn=None, /, *, lib=None, _stacklevel=1):
    return (lambda f: _op(op).register_fake(f)) if fn is None else _op(op).register_fake(fn)


def register_autograd(op, backward, /, *, setup_context=None, lib=None):
    _op(op).register_autograd(backward, setup_context=setup_context)


def register_kernel(op, device_types, fn=None, /, *, lib=None):
    return _op(op).register_kernel(device_types, fn)


_AUTOGRAD_KEYS = ("Autograd", "AutogradCPU", "CompositeImplicitAutograd")


def impl(qualname, types, func=None, *, lib=None):
    """torch.library.impl(qualname, device types): registers the kernel of an op Library.define made."""
    def register(f):
        op = _DEFINED.get(qualname) or CustomOpDef(qualname, None)
        op.register_kernel(None if types in ("default", "CompositeExplicitAutograd") else
                           ("cpu" if types in ("CPU",) + _AUTOGRAD_KEYS else types), f)
        return f
    return register if func is None else register(func)


def define(qualname, schema, *, lib=None, tags=()):
    CustomOpDef(qualname, None, schema=schema)


class Library:
    """torch.library.Library(ns, kind): define(schema) then impl(name, fn, dispatch_key) registers ops under
    torch.ops.<ns>."""

    def __init__(self, ns, kind, dispatch_key=""):
        if kind not in ("DEF", "IMPL", "FRAGMENT"):
            raise ValueError("Unsupported kind: ", kind)
        self.ns, self.kind, self.dispatch_key = ns, kind, dispatch_key

    def define(self, schema, alias_analysis="", *, tags=()):
        name = schema.split("(", 1)[0].strip()
        CustomOpDef("%s::%s" % (self.ns, name), None, schema=schema)
        return name

    def impl(self, op_name, fn, dispatch_key="", *, with_keyset=False):
        name = op_name if isinstance(op_name, str) else getattr(op_name, "_name", str(op_name))
        name = name.split("::")[-1].split(".")[0]
        impl("%s::%s" % (self.ns, name), dispatch_key or self.dispatch_key or "CPU", fn)

    def _destroy(self):
        pass
