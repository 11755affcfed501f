"""torch's out= argument: the result written into the tensor(s) given, resized to the result's shape as torch
does, and returned. Used by the functions' fallback overload (module.cc: _add_numpy_arg_names) and by
tessel/__init__.py's wrappers of the functions written in Python."""
from . import _C


def write_out(result, out):
    if isinstance(out, (tuple, list)):  # (values, indices) forms: torch.max(x, 1, out=(v, i))
        if not isinstance(result, tuple) or len(result) != len(out):
            raise TypeError("out= must hold %d tensors for this function" % (len(result) if isinstance(result, tuple)
                                                                             else 1))
        for r, o in zip(result, out):
            write_out(r, o)
        return type(out)(out) if isinstance(out, tuple) else out
    if not isinstance(out, _C.Tensor):
        raise TypeError("out= must be a Tensor, got %s" % type(out).__name__)
    if _C.is_grad_enabled() and (out.requires_grad or (isinstance(result, _C.Tensor) and result.requires_grad)):
        raise RuntimeError("functions with out=... arguments don't support automatic differentiation, but one of the "
                           "arguments requires grad.")
    if isinstance(result, _C.Tensor) and result.dtype != out.dtype:
        from ._namespace import can_cast
        if not can_cast(result.dtype, out.dtype):  # torch's rule: a float result never truncates into an int out
            from ._subscript import _torch_dtype_name
            raise RuntimeError("result type %s can't be cast to the desired output type %s"
                               % (_torch_dtype_name(result.dtype), _torch_dtype_name(out.dtype)))
    if tuple(out.shape) != tuple(result.shape):
        out.resize_(*result.shape)
    with _C._GradMode(False):
        out.copy_(result)
    return out
