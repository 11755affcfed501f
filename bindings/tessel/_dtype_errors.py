"""torch's errors for integer and bool inputs of the ops whose kernels are floating only (mean, softmax,
log_softmax, gelu, silu, layer_norm, the vector norms): NotImplementedError with torch's text, where tessel's C++
ops raise InvalidArgumentError ("softmax: expected a floating dtype, got int64"). The C++ ops are wrapped so that
only a refused call pays for the translation; install() runs last in tessel/__init__.py, over the functions
the namespace, torch.nn.functional and Tensor hold then.

    torch.softmax(torch.tensor([1, 2]), 0)  # NotImplementedError: "softmax_lastdim_kernel_impl" not implemented
                                            # for 'Long'
"""
import functools

from . import _C
from ._promotion import _name

Tensor = _C.Tensor


def vector_norm_error(x):
    return NotImplementedError("linalg.vector_norm: Expected a floating point or complex tensor as input. Got %s"
                               % _name(x.dtype))


def _dim_arg(args, kwargs):
    return args[0] if args else kwargs.get("dim", -1)


def _softmax_kernel(op):
    """softmax / log_softmax: torch's kernel for the last dimension has its own name."""
    def message(x, args, kwargs):
        dim = _dim_arg(args, kwargs)
        last = x.dim() <= 1 or dim is None or dim in (-1, x.dim() - 1)
        return "\"%s_%skernel_impl\" not implemented for '%s'" % (op, "lastdim_" if last else "", _name(x.dtype))
    return message


def _kernel(name):
    return lambda x, args, kwargs: "\"%s\" not implemented for '%s'" % (name, _name(x.dtype))


def _mean_message(x, args, kwargs):
    dtype = kwargs.get("dtype")
    if dtype is not None:
        if dtype.is_floating_point:
            return None
        return ("mean(): could not infer output dtype. Optional dtype must be either a floating point or complex "
                "dtype. Got: %s" % _name(dtype))
    return ("mean(): could not infer output dtype. Input dtype must be either a floating point or complex dtype. "
            "Got: %s" % _name(x.dtype))


def _translating(fn, message):
    """fn, raising torch's NotImplementedError (message(input, args, kwargs)) where its C++ op refused an
    integer or bool input (or, for mean, a non-floating dtype=)."""
    @functools.wraps(fn)
    def wrapper(input, *args, **kwargs):
        try:
            return fn(input, *args, **kwargs)
        except _C.InvalidArgumentError:
            if isinstance(input, Tensor) and (not input.dtype.is_floating_point or kwargs.get("dtype") is not None):
                text = message(input, args, kwargs)
                if text is not None:
                    raise NotImplementedError(text) from None
            raise
    return wrapper


_MESSAGES = {"softmax": _softmax_kernel("softmax"), "log_softmax": _softmax_kernel("log_softmax"),
             "gelu": _kernel("GeluKernelImpl"), "silu": _kernel("silu_cpu"),
             "layer_norm": _kernel("LayerNormKernelImpl"), "mean": _mean_message}


def install(namespace):
    """The translating wrappers over torch.softmax / log_softmax, Tensor.softmax / log_softmax / mean (torch.mean
    calls the method), and torch.nn.functional's softmax / log_softmax / gelu / silu / layer_norm."""
    from .nn import functional
    for name in ("softmax", "log_softmax", "mean"):
        if name != "mean":
            namespace[name] = _translating(namespace[name], _MESSAGES[name])
        setattr(Tensor, name, _translating(getattr(Tensor, name), _MESSAGES[name]))
    for name in ("softmax", "log_softmax", "gelu", "silu", "layer_norm"):
        setattr(functional, name, _translating(getattr(functional, name), _MESSAGES[name]))
