"""tessel: DTensor-style composable sharding, with PyTorch's concepts, names and package layout.

A torch script ports by changing its imports: ``tessel`` (tensors, creation functions, dtypes, no_grad,
manual_seed), ``tessel.nn`` (subclassable Module, layers), ``tessel.nn.functional``, ``tessel.optim``,
``tessel.distributed`` (``device_mesh``, ``tensor``, ``fsdp``, ``checkpoint``). The package is a thin face
over the C++ core (``tessel._C``): every call converts its arguments, releases the GIL while C++ computes
or communicates, and raises the Python exception the error's code names (ValueError, RuntimeError,
TimeoutError, ...) with the same message.

    import tessel, tessel.nn as nn, tessel.nn.functional as F
    from tessel.distributed.fsdp import fully_shard

    def main():                              # the same body runs under tessel_run (gloo processes)
        tessel.distributed.init_process_group()
        model = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 8))
        fully_shard(model)
        opt = tessel.optim.AdamW(model.parameters(), lr=1e-3)
        x = tessel.randn(4, 8)
        loss = (model(x) ** 2).mean()
        loss.backward(); opt.step(); opt.zero_grad()

    tessel.run_ranks(2, lambda world: main())   # 2 rank threads (threads backend)

The original flat API stays: ``tessel.GPT``, ``tessel.AdamW(model)``, ``tessel.fully_shard(block, mesh)``,
``tessel.init_device_mesh(world, shape, names)``, ``tessel.save`` / ``tessel.load``.
"""
import builtins as _builtins
import math as _math
import threading as _threading
import os
import sys as _sys

import numpy as _np

# The extension is built with Debian 12's pybind11 2.10, whose numpy interop predates numpy 2's ABI: with
# numpy 2 installed, arrays converted both ways read garbage without an error (tensor([1., 2.]) * ...
# returned wrong values). The wheel pins numpy<2; refuse to import under numpy 2 rather than compute
# silently wrong values.
if int(_np.__version__.split(".")[0]) >= 2:
    raise ImportError("tessel is built against numpy 1.x (pybind11 2.10) and numpy %s is installed, whose array "
                      "ABI it cannot read; install numpy<2 (pip install 'numpy<2')" % _np.__version__)

from . import _C
from ._C import (  # noqa: F401
    CommTracer,
    DeviceMesh,
    GPT,
    GPTConfig,
    Generator,
    Partial,
    ProcessGroup,
    Replicate,
    Shard,
    Tensor,
    clip_grad_norm,
    clip_grad_norm_fsdp,
    distribute_tensor,
    from_local,
    fully_shard,
    get_num_threads,
    is_grad_enabled,
    manual_seed,
    memory_report,
    set_num_threads,
)
from ._dtypes import *  # noqa: F401,F403


def memory_stats(rank=None):
    """The memory ledger in bytes for this thread's device (a run_ranks rank's own; `rank` another one's):
    {"params": {"live": n, "peak": n}, "grads": ..., "optim": ..., "activations": ..., "comm": ..., "offloaded":
    ..., "other": ..., "total": ...}, the numbers memory_report() prints in MiB."""
    raw = _C._memory_stats(-1 if rank is None else int(rank))
    return {name: {"live": live, "peak": peak} for name, (live, peak) in raw.items()}


def reset_peak_memory_stats(rank=None):
    """Sets every peak of memory_stats(rank) to its live value (torch.cuda.reset_peak_memory_stats's role)."""
    _C._reset_peak_memory(-1 if rank is None else int(rank))
from ._tensor import (  # noqa: F401
    arange,
    as_tensor,
    eye,
    rand_like,
    randint_like,
    randn_like,
    randperm,
    empty,
    from_numpy,
    full,
    full_like,
    ones,
    ones_like,
    rand,
    randint,
    randn,
    tensor,
    zeros,
    zeros_like,
)
# Tensor.argmax, max(dim).values, add_(scalar), normal_, .data, pickling, ... and torch's function forms.
from . import _compat, _serialization  # noqa: E402,F401
from ._device import cuda, device  # noqa: E402,F401
from . import _extra  # noqa: E402 (torch functions composed in Python: tessel.minimum, tessel.sin, ...)
from ._autocast_policy import float32_under_autocast as _float32_under_autocast  # noqa: E402
from ._dtensor_compose import wrap_all as _wrap_composed  # noqa: E402 (their constants next to DTensors)
_wrap_composed(_extra.TORCH_FUNCTIONS)
_wrap_composed(_extra.TENSOR_METHODS)
for _name, _fn in _extra.TORCH_FUNCTIONS.items():
    globals()[_name] = _fn
for _name, _fn in _extra.TENSOR_METHODS.items():
    setattr(Tensor, _name, _fn)
split = _compat.split
for _name in _compat.FUNCTION_FORMS:
    if _name not in globals():
        globals()[_name] = _compat._function_form(_name)
from . import _special  # noqa: E402 (atan2, lgamma, erfinv, ...: composed, differentiable)
for _name, _fn in _wrap_composed(_special.FUNCTIONS).items():
    globals()[_name] = _fn
    setattr(Tensor, _name, _fn)  # torch has every one as a method too
from ._tensor import Size, broadcast_shapes, broadcast_tensors, empty_like, is_tensor, normal  # noqa: E402,F401
from ._host_random import _sample_dirichlet, _standard_gamma, binomial, poisson  # noqa: E402,F401
from ._setitem import _index_put as index_put  # noqa: E402,F401 (torch.index_put; Tensor.index_put_ in place)
from ._grouped_mm import _grouped_mm  # noqa: E402,F401 (Mixture-of-Experts grouped GEMM)
from . import _repr  # noqa: E402 (printing with values, as torch prints)
Tensor.__repr__ = Tensor.__str__ = _repr.tensor_repr
Tensor.__format__ = _repr.tensor_format
Tensor.__array_priority__ = 1000  # numpy defers ndarray + tensor to Tensor.__radd__: a tensor, as in torch
set_printoptions = _repr.set_printoptions  # (get_printoptions and printoptions stay in _repr, as in torch._tensor_str)
from . import _complex  # noqa: E402 (complex tensors over interleaved real parts: rotary embeddings)
globals().update(_complex.TORCH_FUNCTIONS)
ComplexTensor = _complex.ComplexTensor
from ._stft import istft, stft  # noqa: E402 (torch.stft / istft, composed around tessel.fft)
Tensor.stft, Tensor.istft = stft, istft
_complex.ComplexTensor.istft = istft
Tensor.is_complex = lambda self: False
is_floating_point = lambda input: input.is_floating_point()  # noqa: E731 (torch.is_floating_point)
get_default_dtype = _dtypes.default_float  # torch.get_default_dtype


def set_default_dtype(d):
    """torch.set_default_dtype: the floating dtype that factories (zeros, randn, tensor of Python floats,
    arange / linspace of floats, ...), layers' parameters (nn.Linear, LayerNorm, ...) and float-scalar promotion
    of integer tensors (int_tensor * 0.5, int / int) take when no dtype is given; float32 until set.
    Process-wide, as torch's: every rank thread of run_ranks shares it. C++ code (tessel::Zeros, the C++ GPT)
    keeps its own float32 defaults."""
    if not isinstance(d, dtype) or not d.is_floating_point:  # noqa: F405
        raise TypeError("only floating-point types are supported as the default type")
    _C._set_default_dtype(d)


_matmul_precision = ["highest"]  # torch.backends.cuda.matmul.allow_tf32 reads and writes it, as torch's


def set_float32_matmul_precision(precision):
    """torch.set_float32_matmul_precision: 'high' and 'medium' permit TF32 / bfloat16 internal precision,
    which torch's CPU GEMMs do not use either; tessel's float32 GEMMs always compute in float32, so every
    setting is honoured (the value is kept for get_float32_matmul_precision). Another string warns and
    changes nothing, as torch's."""
    if precision not in ("highest", "high", "medium"):
        import warnings
        warnings.warn("%s is not one of 'highest', 'high', or 'medium'; the currentsetFloat32MatmulPrecision call "
                      "has no effect." % (precision,), stacklevel=2)
        return
    _matmul_precision[0] = precision


get_float32_matmul_precision = lambda: _matmul_precision[0]  # noqa: E731
_deterministic = [False, False]


def use_deterministic_algorithms(mode, *, warn_only=False):
    """torch.use_deterministic_algorithms: every tessel kernel is already deterministic for a given thread
    count and world size (fixed reduction orders, no atomics in the CUDA kernels, fixed ring orders in
    the collectives), so the setting only records the mode."""
    for name, value in (("mode' (position 1)", mode), ("warn_only'", warn_only)):
        if not isinstance(value, _builtins.bool):
            raise TypeError("_set_deterministic_algorithms(): argument '%s must be bool, not %s"
                            % (name, type(value).__name__))
    _deterministic[0], _deterministic[1] = mode, warn_only


are_deterministic_algorithms_enabled = lambda: _deterministic[0]  # noqa: E731
is_deterministic_algorithms_warn_only_enabled = lambda: _deterministic[1]  # noqa: E731


def set_deterministic_debug_mode(debug_mode):
    """torch.set_deterministic_debug_mode: 0 / "default", 1 / "warn", 2 / "error" (use_deterministic_algorithms
    off, on with warn_only, on)."""
    if not isinstance(debug_mode, (_builtins.int, str)):
        raise TypeError(f"debug_mode must be str or int, but got {type(debug_mode)}")
    if isinstance(debug_mode, str):
        if debug_mode not in ("default", "warn", "error"):
            raise RuntimeError("invalid value of debug_mode, expected one of `default`, `warn`, `error`, but got "
                               + debug_mode)
        debug_mode = ("default", "warn", "error").index(debug_mode)
    if debug_mode not in (0, 1, 2):
        raise RuntimeError(f"invalid value of debug_mode, expected 0, 1, or 2, but got {debug_mode}")
    _deterministic[0], _deterministic[1] = debug_mode != 0, debug_mode == 1


def get_deterministic_debug_mode():
    return (2 if not _deterministic[1] else 1) if _deterministic[0] else 0
from . import _inplace  # noqa: E402 (in-place methods recorded by autograd)
_inplace.install()
for _name in _extra._FLOAT_OPS:  # t.exp(), t.sqrt(), ...: C++ for a plain floating tensor (inplace_py.cc)
    setattr(Tensor, _name, _C._fast_unary(_name, getattr(Tensor, _name)))
relu_ = lambda input: input.relu_()  # noqa: E731 (torch.relu_)
from . import autograd, backends, linalg, nn, optim, distributed, distributions, multiprocessing, profiler, special, utils  # noqa: E402,F401,E501
from . import amp, fft, func, futures, ops, random, testing, _higher_order_ops  # noqa: E402,F401
from . import _namespace  # noqa: E402 (torch.add / div(rounding_mode) / dot / hsplit / cov / x.tril_() / ...)
_namespace.install(globals())
from . import accelerator, serialization  # noqa: E402,F401 (torch.accelerator, torch.serialization)
from . import _namespace_more  # noqa: E402 (torch.gradient, torch.FloatTensor & co, frombuffer, torch.abs_, ...)
_namespace_more.install(globals())
from . import _tensor_extras  # noqa: E402 (memory formats, layouts, shifts, nextafter, index_reduce, ...)
_tensor_extras.install(globals())
is_anomaly_enabled = autograd.is_anomaly_enabled
is_anomaly_check_nan_enabled = autograd.is_anomaly_check_nan_enabled
set_anomaly_enabled = lambda enabled, check_nan=True: _C._set_anomaly_enabled(enabled, check_nan)  # noqa: E731
from .random import get_rng_state, initial_seed, seed, set_rng_state  # noqa: E402,F401
from .amp import (autocast, get_autocast_dtype, is_autocast_enabled, set_autocast_enabled,  # noqa: E402,F401
                  set_autocast_dtype, is_autocast_cpu_enabled, get_autocast_cpu_dtype, set_autocast_cpu_enabled,
                  set_autocast_cpu_dtype, is_autocast_cache_enabled, set_autocast_cache_enabled, clear_autocast_cache)
from .func import vmap  # noqa: E402,F401  (torch.vmap)
from ._device import _cuda_amp  # noqa: E402
cuda.amp = _sys.modules["tessel.cuda.amp"] = _cuda_amp()  # torch.cuda.amp's GradScaler / autocast
import types as _types  # noqa: E402

cpu = _types.ModuleType("tessel.cpu", "torch.cpu: its amp namespace (cpu.amp.autocast, the older spelling).")
cpu.amp = _types.ModuleType("tessel.cpu.amp")
cpu.amp.autocast = amp._cpu_amp_autocast
cpu.amp.GradScaler = amp._cpu_amp_grad_scaler
cpu.is_available = lambda: True
cpu.device_count = lambda: 1  # torch.cpu's answers: one CPU device, nothing to wait for
cpu.synchronize = lambda *args, **kwargs: None  # torch.cpu.synchronize(device=None)
cpu.current_device = lambda: "cpu"
_sys.modules["tessel.cpu"], _sys.modules["tessel.cpu.amp"] = cpu, cpu.amp
mps, xpu = _sys.modules["tessel.mps"], _sys.modules["tessel.xpu"]  # torch.mps / torch.xpu: not available here


def set_default_tensor_type(t):
    """torch.set_default_tensor_type (deprecated in torch): torch.DoubleTensor or "torch.DoubleTensor" sets the
    default dtype, with torch's deprecation warning; a non-floating type raises as set_default_dtype."""
    import warnings
    warnings.warn("torch.set_default_tensor_type() is deprecated as of PyTorch 2.1, please use "
                  "torch.set_default_dtype() and torch.set_default_device() as alternatives.", stacklevel=2)
    if isinstance(t, str):
        module, _, name = t.rpartition(".")
        if module not in ("torch", "tessel"):
            raise ModuleNotFoundError("No module named '%s'" % (module or t), name=module or t)
        t = getattr(_sys.modules[__name__], name)
    d = getattr(t, "dtype", None)
    if not isinstance(d, _C.dtype) or not d.is_floating_point:
        raise TypeError("only floating-point types are supported as the default type")
    _C._set_default_dtype(d)


set_flush_denormal = lambda mode: True  # noqa: E731 (torch's answer on an x86 CPU with SSE3: supported)
_warn_always = [False]


def set_warn_always(b):
    """torch.set_warn_always: kept for is_warn_always_enabled (tessel's warnings follow Python's filters)."""
    _warn_always[0] = _builtins.bool(b)


is_warn_always_enabled = lambda: _warn_always[0]  # noqa: E731
from .distributed import run_ranks  # noqa: F401


def init_device_mesh(world, shape, axis_names):
    """A mesh over `world` (a run_ranks rank's handle or a ProcessGroup) of `shape`, its dims named `axis_names`;
    kept in this rank's table of meshes, so DTensors over it pickle and load back (tessel.save / tessel.load)."""
    from .distributed.device_mesh import _register
    return _register(_C.init_device_mesh(world, shape, axis_names))

AdamW = _C.AdamW  # the flat API's AdamW(model, lr=...); tessel.optim.AdamW is torch's


def compile(model=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None, options=None,
            disable=False):
    """torch.compile's signature for ported scripts: tessel runs eagerly (its kernels are already fused where
    the step profile asked for it), so a function comes back unchanged, and a module inside torch's wrapper
    (`_dynamo.eval_frame.OptimizedModule`: `compiled._orig_mod`, state-dict keys under `_orig_mod.`), with
    torch.compile's promise kept: the same results. Usable as a decorator, with or without arguments."""
    if model is None:
        return lambda fn: fn
    if disable or not isinstance(model, nn.Module) or isinstance(model, _dynamo.OptimizedModule):
        return model
    return _dynamo.OptimizedModule(model)
_promoted = _dtypes.promoted


def cat(tensors, dim=0):
    """torch.cat, with torch's type promotion across the tensors' dtypes. As torch, a 1-D empty tensor (shape
    [0]) is skipped whatever the others' shapes: the `acc = torch.tensor([]); acc = torch.cat([acc, x])`
    accumulator of research code."""
    if type(tensors) is list or type(tensors) is tuple:
        try:  # fast path: the C++ cat takes only tensors of one dtype and matching shapes, where neither the
            return _C._functional.cat(tensors, dim)  # promotion nor the skip below changes anything
        except Exception:  # noqa: BLE001 (the general path below: it promotes, skips, or raises its own error)
            pass
    tensors = _promoted(list(tensors))  # the skipped ones still take part in the type promotion
    for t in tensors:  # (a loop, not any(genexpr): cat is called per step in loops)
        if isinstance(t, Tensor) and t.ndim == 1 and t.numel() == 0:
            break
    else:
        return _C._functional.cat(tensors, dim)
    kept = [t for t in tensors if not (isinstance(t, Tensor) and t.ndim == 1 and t.numel() == 0)]
    if kept and _builtins.any(t.ndim != 1 for t in kept):  # (tessel.any shadows the builtin here)
        tensors = kept
    return _C._functional.cat(tensors, dim)


def stack(tensors, dim=0):
    """torch.stack, with torch's type promotion across the tensors' dtypes."""
    if type(tensors) is list or type(tensors) is tuple:
        try:  # fast path: the C++ stack takes only tensors of one dtype, where the promotion changes nothing
            return _C._functional.stack(tensors, dim)
        except Exception:  # noqa: BLE001 (the general path below: it promotes or raises its own error)
            pass
    return _C._functional.stack(_promoted(tensors), dim)


_NUMBERS = (_builtins.float, _builtins.int)  # (tessel.float / tessel.int are dtypes here, as torch's)


def where(condition, input=None, other=None):
    """torch.where: elementwise choice (with a Python number on either side, in torch.result_type of the two:
    where(cond, int_tensor, 0.5) is floating), or with the condition alone the indices of its true entries
    (nonzero(as_tuple=True))."""
    if input is None and other is None:
        return _extra.nonzero(condition, as_tuple=True)
    if not isinstance(input, Tensor) or not isinstance(other, Tensor):  # a Python number: torch's result type
        tensor = input if isinstance(input, Tensor) else other if isinstance(other, Tensor) else None
        number = other if tensor is input else input
        if tensor is not None and tensor.dtype.is_floating_point and type(number) in _NUMBERS:
            dtype = tensor.dtype  # a float tensor with a number: its own dtype (the common mask-fill case)
        else:
            from ._namespace import result_type
            dtype = result_type(input, other)
        input, other = [(v if v.dtype == dtype else v.to(dtype)) if isinstance(v, Tensor)
                        else _C._full([], _builtins.float(v), dtype) for v in (input, other)]
    try:
        return _C._functional.where(condition, input, other)
    except _C.InvalidArgumentError:
        if not isinstance(condition, Tensor) or condition.dtype == _dtypes.bool:
            raise
    if condition.dtype != _dtypes.uint8:
        from ._subscript import _torch_dtype_name
        raise RuntimeError("where expected condition to be a boolean tensor, but got a tensor with dtype %s"
                           % _torch_dtype_name(condition.dtype))
    if not _warned_uint8_where:  # torch warns once per process
        _warned_uint8_where.append(True)
        import warnings
        warnings.warn("where received a uint8 condition tensor. This behavior is deprecated and will be removed in a "
                      "future version of PyTorch. Use a boolean condition instead.", UserWarning, stacklevel=2)
    return _C._functional.where(condition.to(_dtypes.bool), input, other)


_warned_uint8_where = []


@_float32_under_autocast  # (torch's CPU autocast float32 list)
def cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """torch.cdist: the p-norm distance between each row of x1 [..., P, M] and each row of x2 [..., R, M]; p = inf
    gives every coordinate tied at the maximum the whole gradient, as torch's cdist (the norm's split it)."""
    if compute_mode not in ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist",
                            "donot_use_mm_for_euclid_dist"):
        raise ValueError("%s is not a valid value for compute_mode" % compute_mode)
    for name, x in (("X1", x1), ("X2", x2)):
        if x.ndim < 2:
            raise RuntimeError("cdist only supports at least 2D tensors, %s got: %dD" % (name, x.ndim))
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError("X1 and X2 must have the same number of columns. X1: %d X2: %d"
                           % (x1.shape[-1], x2.shape[-1]))
    for name, x in (("X1", x1), ("X2", x2)):
        if not x.dtype.is_floating_point:
            from ._subscript import _torch_dtype_name
            raise RuntimeError("cdist only supports floating-point dtypes, %s got: %s"
                               % (name, _torch_dtype_name(x.dtype)))
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    if p == _math.inf and _C.is_grad_enabled() and diff.requires_grad:
        from ._cdist import max_abs_with_tied_gradients
        return max_abs_with_tied_gradients(diff)
    return diff.norm(p, -1)


matmul = _C.Tensor.matmul
softmax = _C._functional.softmax
log_softmax = _C._functional.log_softmax


def _unary(name):
    def fn(input):
        return getattr(input, name)()
    fn.__name__ = name
    return fn


exp, log, sqrt, rsqrt, tanh, sigmoid, relu, abs = (  # noqa: A001
    _unary(n) for n in ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "abs"))


class _GradModeContext:
    _enabled = None

    def __new__(cls, orig_func=None):
        # Bare `@no_grad` (torch accepts it): no_grad(fn) returns the wrapped function.
        if orig_func is not None and callable(orig_func):
            return cls()(orig_func)
        return super().__new__(cls)

    def __init__(self, orig_func=None):
        pass

    def __enter__(self):
        # The mode is set, not guarded: only __exit__ restores it, as torch's (`torch.no_grad().__enter__()` with
        # the object dropped at once keeps grad off; a guard object restored it when collected).
        self.__dict__.setdefault("_prev", []).append(_C.is_grad_enabled())
        _C._set_grad_enabled(self._enabled)

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._prev.pop())

    def __call__(self, fn):
        import functools
        import inspect
        mode = getattr(self, "clone", type(self))  # a fresh context per call, with this one's arguments
        if inspect.isgeneratorfunction(fn):
            # The mode must hold while the generator's body runs, resume by resume (torch's
            # _wrap_generator), not only while the generator object is created.
            @functools.wraps(fn)
            def generator(*args, **kwargs):
                gen = fn(*args, **kwargs)
                try:
                    with mode():
                        item = next(gen)
                    while True:
                        try:
                            sent = yield item
                        except GeneratorExit:
                            gen.close()
                            raise
                        except BaseException as e:  # noqa: BLE001 (thrown into the generator)
                            with mode():
                                item = gen.throw(e)
                        else:
                            with mode():
                                item = gen.send(sent)
                except StopIteration as stop:
                    return stop.value
            return generator

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with mode():
                return fn(*args, **kwargs)
        return wrapper


class no_grad(_GradModeContext):
    """Ops inside record no autograd history (this thread only; each rank thread has its own mode)."""
    _enabled = False


class enable_grad(_GradModeContext):
    _enabled = True


class set_grad_enabled(_GradModeContext):
    """torch.set_grad_enabled(mode): sets the mode at once (as a function) or for a with block."""

    def __new__(cls, mode):
        self = object.__new__(cls)
        self._prev = _C.is_grad_enabled()
        _C._set_grad_enabled(_builtins.bool(mode))  # takes effect now, as torch's; __exit__ restores the previous mode
        return self

    def __init__(self, mode):
        self.mode = _builtins.bool(mode)

    def clone(self):
        return set_grad_enabled(self.mode)

    def __call__(self, fn):
        # @set_grad_enabled(False) as a decorator: the mode holds inside fn only (construction set it for the
        # whole process: the previous mode is back at once, as torch's; a fresh context per call)
        _C._set_grad_enabled(self._prev)
        return super().__call__(fn)

    def __enter__(self):
        pass

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._prev)


_inference = _threading.local()  # this thread's inference_mode nesting: a stack of modes


class inference_mode(_GradModeContext):
    """torch.inference_mode(mode=True): no autograd history inside (mode=False: history as usual, as torch's
    nested inference_mode(False)); is_inference_mode_enabled() tells. tessel makes no separate inference
    tensors, so Tensor.is_inference() stays False and such tensors carry no restrictions afterwards."""

    def __new__(cls, mode=True):
        if callable(mode):  # bare @inference_mode
            return cls()(mode)
        self = object.__new__(cls)
        self._mode = _builtins.bool(mode)
        return self

    def __init__(self, mode=True):
        pass

    @property
    def _enabled(self):
        return not self._mode

    def __enter__(self):
        super().__enter__()
        _inference.__dict__.setdefault("stack", []).append(self._mode)

    def __exit__(self, *exc):
        _inference.stack.pop()
        super().__exit__(*exc)

    def clone(self):
        return inference_mode(self._mode)


def is_inference_mode_enabled():
    stack = getattr(_inference, "stack", None)
    return _builtins.bool(stack) and stack[-1]
InvalidArgumentError = _C.InvalidArgumentError


def init_process_group():
    """The flat API: this thread's world group (gloo under tessel_run), returned."""
    return distributed._init_world()


def _is_file_target(f):
    return isinstance(f, (str, bytes, os.PathLike)) or hasattr(f, "write") or hasattr(f, "read")


def _is_optimizer(x):
    from .optim import Optimizer
    return isinstance(x, (_C.Optimizer, Optimizer))


def save(*args, **kwargs):
    """save(model, optimizer=None, dir, world=None): a sharded checkpoint of the model (and optimizer) state;
    collective over world (default: the default process group once init_process_group ran).

    torch.save(obj, f, pickle_module=pickle, pickle_protocol=2) also works, positionally or by keyword (obj=, f=):
    it pickles obj (a state dict, a dict of them, a dense tensor, or a whole module: nn/_pickle.py) to the path or
    file f in torch.save's zip format; tessel.load(f) reads it (a module with weights_only=False). DTensors are
    refused there: a sharded checkpoint is DCP's. The torch form is the one whose second argument (or f=) is a
    path or a file, not an optimizer."""
    if "f" in kwargs or "obj" in kwargs or (len(args) >= 2 and _is_file_target(args[1]) and
                                            not _is_optimizer(args[1])):
        return _serialization.save(*args, **kwargs)
    return _dcp_save(*args, **kwargs)


def _dcp_save(model, optimizer=None, dir=None, world=None):
    if dir is None:
        raise TypeError("save(model, optimizer, dir): dir (the checkpoint directory) is required; "
                        "torch.save(obj, f) is save(obj, f) with obj a state dict")
    if world is None and distributed.is_initialized():
        world = distributed._default_group("tessel.save")
    if optimizer is None or isinstance(optimizer, _C.Optimizer):
        return _C.save(model, optimizer, dir, world)
    sd = _C._get_state_dict(model, None)
    sd.update(optimizer._get_checkpoint_state(model))  # every parameter group's state
    _C._dcp_save(sd, dir, world)


def load(*args, **kwargs):
    """load(model, optimizer=None, dir, *, strict=True): loads a checkpoint saved in any layout or world size into
    the model (and optimizer), in place. A missing directory is FileNotFoundError; strict=False returns missing /
    unexpected keys.

    torch.load(f, map_location=None, pickle_module=None, *, weights_only=None, mmap=None) also works, positionally
    or by keyword: it returns what save(obj, f) pickled (the torch form is the one whose first argument, or f=, is
    a path or a file)."""
    if "f" in kwargs or (args and _is_file_target(args[0])):
        return _serialization.load(*args, **kwargs)
    return _dcp_load(*args, **kwargs)


def _dcp_load(model, optimizer=None, dir=None, *, strict=True):
    if dir is None:
        raise TypeError("load(model, optimizer, dir): dir (the checkpoint directory) is required; "
                        "torch.load(f) is load(f)")
    if optimizer is None or isinstance(optimizer, _C.Optimizer):
        return _C.load(model, optimizer, dir, strict=strict)
    sd = _C._get_state_dict(model, None)
    sd.update(optimizer._get_checkpoint_state(model))
    sd, result = _C._dcp_load(sd, dir, strict, allow_unexpected_keys=False)
    optimizer._set_checkpoint_state(model, {k: v for k, v in sd.items() if k.startswith("optim.")})
    return result


def _accept_numpy_arg_names():
    """torch's argument parser also takes numpy's names: axis for dim, keepdims for keepdim
    (`probs.sum(axis=1, keepdims=True)`, `torch.cat(xs, axis=1)`), on these functions and methods (those
    torch 2.15 takes them on), and out= on the functions (tessel/_out.py). A bound C++ function gets a fallback
    overload (no cost to ordinary calls, module.cc); a Python one a wrapper."""
    import functools

    def renamed(kwargs):
        if "axis" in kwargs:
            kwargs["dim"] = kwargs.pop("axis")
        if "keepdims" in kwargs:
            kwargs["keepdim"] = kwargs.pop("keepdims")
        return kwargs

    def wrap(fn, name):
        @functools.wraps(fn)
        def accepting(*args, **kwargs):
            if not kwargs:
                return fn(*args)
            if "out" not in kwargs and "axis" not in kwargs and "keepdims" not in kwargs:
                return fn(*args, **kwargs)  # fast path: nothing to rename (cat(xs, dim=0), sum(dim=1))
            out = kwargs.pop("out", None)
            if out is None:
                return fn(*args, **renamed(kwargs))
            from ._out import call
            return call(fn, name, args, renamed(kwargs), out)  # torch's out= rules for this function
        return accepting

    names = ("all amax amin aminmax any argmax argmin argsort chunk count_nonzero cummax cummin cumprod cumsum diff "
             "kthvalue log_softmax logcumsumexp logsumexp max mean median min mode nanmean nanmedian nansum prod "
             "quantile size softmax sort squeeze std std_mean sum topk unbind unsqueeze var var_mean").split()
    namespace = globals()
    # torch's out= on its functions (the Tensor methods take none): the tutorials' torch.matmul(t, t.T, out=y)
    # (einsum has none in torch)
    out_names = ("add sub mul div true_divide matmul mm bmm cat concat concatenate stack exp log sqrt abs neg "
                 "pow sin cos tanh sigmoid clamp where maximum minimum addmm outer eq ne lt gt le ge remainder fmod "
                 "floor_divide bitwise_and bitwise_or bitwise_xor bitwise_not logical_and logical_or logical_xor "
                 "logical_not floor ceil round trunc sign nan_to_num addcmul lerp arange linspace zeros ones full "
                 "subtract multiply divide absolute negative greater greater_equal less less_equal not_equal clip "
                 "fix").split()
    _out_rules = ("softmax", "log_softmax")  # C++ functions whose out= has a rule of its own (tessel/_out.py)
    for owner, is_class in ((Tensor, True), (namespace, False)):
        for name in names + ([] if is_class else [n for n in out_names if n not in names]):
            fn = getattr(owner, name, None) if is_class else owner.get(name)
            if fn is None:
                continue
            if type(fn).__name__ == "builtin_function_or_method" and (is_class or name not in _out_rules):
                _C._add_numpy_arg_names(fn)  # a bound C++ function (its out= takes write_out's default rules)
            elif is_class:
                setattr(owner, name, wrap(fn, name))
            else:
                owner[name] = wrap(fn, name)


_accept_numpy_arg_names()
from . import _dtype_errors  # noqa: E402 (torch's errors for integer inputs of float-only kernels)
_dtype_errors.install(globals())
from . import _dynamo, compiler, jit  # noqa: E402,F401 (torch.jit / torch.compiler queries: eager code)


def _inductor_modules():
    """torch._inductor.config for scripts that tune torch.compile's backend: tessel.compile runs eagerly, so
    every assignment is kept and changes nothing; the flags scripts read have torch's defaults."""
    inductor = _types.ModuleType("tessel._inductor", "torch._inductor: tessel has no compiler backend.")
    config = _types.ModuleType("tessel._inductor.config", _inductor_modules.__doc__)
    config.__dict__.update(coordinate_descent_tuning=False, max_autotune=False, max_autotune_gemm=False,
                           freezing=False, epilogue_fusion=True, fx_graph_cache=True, force_fuse_int_mm_with_mul=False,
                           use_mixed_mm=True, shape_padding=True, conv_1x1_as_mm=False, split_reductions=True)
    config.triton = _types.ModuleType("tessel._inductor.config.triton")
    config.triton.__dict__.update(cudagraphs=False, unique_kernel_names=False, cudagraph_trees=True)
    config.cpp = _types.ModuleType("tessel._inductor.config.cpp")
    inductor.config = config
    for m in (inductor, config, config.triton, config.cpp):
        _sys.modules[m.__name__] = m
    return inductor


_inductor = _inductor_modules()
from . import version  # noqa: E402 (torch.version)
__version__ = version.__version__
from . import _foreach  # noqa: E402 (torch._foreach_add_, _foreach_lerp_, ...: loops over the tensors)
# torch.default_generator: a Generator (the importing thread's default one: a script's main thread; run_ranks'
# rank threads each have their own, which manual_seed and the factories use)
default_generator = _C.default_generator()
from .random import manual_seed  # noqa: E402,F811 (negative and large seeds wrap to 64 bits, as torch's)
globals().update(_foreach.functions())
_C._get_tracing_state = lambda: None  # torch._C._get_tracing_state(): nothing traces here
from . import _torch_paths  # noqa: E402 (torch.backends.cudnn, nn.parameter, fsdp._fully_shard, torch._check, ...)
_torch_paths.install(globals())
from . import _complex_torch  # noqa: E402 (last: wraps what the others installed for complex arguments)
_complex_torch.install(globals())


def __getattr__(name):
    # torch.__config__ reads the extension's ELF sections and its libraries through ctypes: only on first use
    if name == "__config__":
        import importlib
        return importlib.import_module(".__config__", __name__)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
