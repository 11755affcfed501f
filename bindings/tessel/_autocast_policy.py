"""torch's CPU autocast lists for the functions tessel composes in Python (the C++ ops carry theirs in
core/autograd/autocast.h): a float32-list op casts bfloat16 / float16 tensor arguments up first
(float32_under_autocast: the losses, cdist, trace, quantile, the 3-D pools, reflect / replicate padding,
grid_sample, fft, the linear-algebra solvers and factorizations); a lower-precision-list op casts its float32 /
float16 / bfloat16 tensor arguments to the region's dtype (lower_precision_under_autocast: the convolutions,
prelu, linalg.vecdot; float64 stays, as torch's); an op on neither list runs in its inputs' dtypes
(autocast_off: interpolate, the adaptive average pools, mv / dot / addmv / inner, embedding_bag, which tessel
composes from matmul, an op the region would lower, so float32 inputs lost precision)."""
import functools

from . import _C, _dtypes

_LOW = _dtypes.REDUCED
_ELIGIBLE = (_dtypes.float32, _dtypes.float16, _dtypes.bfloat16)


def float32_under_autocast(fn):
    """Inside an autocast region, bfloat16 / float16 tensor arguments are cast up to float32 first (recorded by
    autograd), as torch's float32 list."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _C._autocast_state()[0]:
            def up(a):
                return a.to(_dtypes.float32) if isinstance(a, _C.Tensor) and a.dtype in _LOW else a
            args = tuple(up(a) for a in args)
            kwargs = {k: up(v) for k, v in kwargs.items()}
        return fn(*args, **kwargs)
    return wrapper


def lower_precision_under_autocast(fn):
    """Inside an autocast region, float32 / float16 / bfloat16 tensor arguments are cast to the region's dtype
    first (recorded by autograd), as torch's lower-precision list: a convolution's bias too, so its output is in
    the region's dtype (a float32 bias left the output float32)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        enabled, dtype = _C._autocast_state()
        if enabled:
            def down(a):
                return a.to(dtype) if isinstance(a, _C.Tensor) and a.dtype in _ELIGIBLE and a.dtype != dtype else a
            args = tuple(down(a) for a in args)
            kwargs = {k: down(v) for k, v in kwargs.items()}
        return fn(*args, **kwargs)
    return wrapper


def widest_under_autocast(fn):
    """Inside an autocast region, floating tensor arguments are cast to the widest floating dtype among them
    first, as torch's CPU promote list (cat, stack, index_copy): index_copy of a bfloat16 source into a float32
    tensor gives float32 where it raised "source and destination dtypes match"."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _C._autocast_state()[0]:
            floats = [a.dtype for a in list(args) + list(kwargs.values())
                      if isinstance(a, _C.Tensor) and a.dtype.is_floating_point]
            if len(set(floats)) > 1:
                widest = functools.reduce(_C._promote_types, floats)  # (bfloat16 with float16: float32)

                def up(a):
                    return a.to(widest) if isinstance(a, _C.Tensor) and a.dtype.is_floating_point else a
                args = tuple(up(a) for a in args)
                kwargs = {k: up(v) for k, v in kwargs.items()}
        return fn(*args, **kwargs)
    return wrapper


def autocast_off(fn):
    """Runs fn with the autocast region suspended: an op on neither of torch's lists keeps its inputs' dtypes even
    where tessel composes it from ops the region would lower."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        state = _C._autocast_state()
        if not state[0]:
            return fn(*args, **kwargs)
        _C._set_autocast(False, state[1])
        try:
            return fn(*args, **kwargs)
        finally:
            _C._set_autocast(*state)
    return wrapper
