"""tessel.amp: torch.amp's autocast and GradScaler on tessel's ops (core/autograd/autocast.h).

Inside ``autocast("cpu")`` the matrix products (linear, matmul, the fused linear + GELU, scaled dot-product
attention) run on bfloat16 (or float16) casts of their float32 inputs and cross-entropy goes up to float32,
as torch's CPU autocast lists say; the casts are on the autograd graph, so parameters and their gradients
stay float32. The backward runs outside the region whatever encloses it (as torch's), and an
activation-checkpointing rerun restores its forward's region. Per thread: each run_ranks rank has its own.

    with tessel.autocast(device_type="cpu", dtype=tessel.bfloat16):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
"""
import functools
import math
import warnings

from . import _C, _dtypes
from ._device import check_cpu


def _device_name(device_type):
    return device_type if isinstance(device_type, str) else getattr(device_type, "type", str(device_type))


def _device_type(device_type):
    name = _device_name(device_type)
    check_cpu(name, "autocast")
    return "cpu"


def is_autocast_available(device_type):
    return str(device_type) == "cpu"


class autocast:
    """torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None): a context manager and a
    decorator. dtype defaults to bfloat16 (torch's CPU default); float16 is accepted too."""

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if not isinstance(device_type, str):
            raise ValueError("Expected `device_type` of type `str`, got: `%s`" % type(device_type))
        if _device_name(device_type) == "cuda":  # torch on a machine without CUDA: a warning, then no region
            if enabled:
                warnings.warn("CUDA is not available or torch_xla is imported. Disabling autocast.", stacklevel=2)
            self.device, self.fast_dtype, self._enabled, self._prev = "cuda", dtype or _dtypes.float16, False, []
            return
        self.device = _device_type(device_type)
        self.fast_dtype = _C._autocast_state()[1] if dtype is None else dtype  # torch's get_autocast_dtype
        if self.fast_dtype not in (_dtypes.bfloat16, _dtypes.float16):  # torch's: a warning, then no region
            warnings.warn("In CPU autocast, but the target dtype is not supported. Disabling autocast.\nCPU Autocast "
                          "only supports dtypes of torch.bfloat16, torch.float16 currently.", stacklevel=2)
            enabled = False
        self._enabled = bool(enabled)
        self._prev = []

    def __enter__(self):
        if self.device == "cuda":  # a disabled CUDA region leaves the CPU one as it is
            return self
        self._prev.append(_C._autocast_state())
        # An unsupported dtype (float32, ...) is the region's dtype too, with the region off, as torch's: its
        # get_autocast_dtype reports it, and a nested autocast("cpu") without a dtype inherits it (and warns and
        # stays off; it enabled bfloat16 there)
        _C._set_autocast(self._enabled, self.fast_dtype)
        return self

    def __exit__(self, *exc):
        if self.device != "cuda":
            _C._set_autocast(*self._prev.pop())
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with autocast(self.device, self.fast_dtype, self._enabled):
                return fn(*args, **kwargs)
        return wrapper


def is_autocast_enabled(device_type=None):
    """Whether this thread is in a CPU autocast region (device_type "cpu"); without an argument torch reads
    its CUDA flag, and tessel's Python face has no other device, so that and any other type read False."""
    if device_type is None or str(getattr(device_type, "type", device_type)) != "cpu":
        return False
    return bool(_C._autocast_state()[0])


def get_autocast_dtype(device_type="cpu"):
    """torch.get_autocast_dtype: "cuda" answers torch's default (float16) though no CUDA region runs here."""
    if _device_name(device_type) == "cuda":
        return _dtypes.float16
    _device_type(device_type)
    return _C._autocast_state()[1]


def set_autocast_enabled(device_type, enabled):
    """torch.set_autocast_enabled(device_type, enabled): this thread's region flag, with no scope."""
    if _device_name(device_type) == "cpu":
        _C._set_autocast(bool(enabled), _C._autocast_state()[1])


def set_autocast_dtype(device_type, dtype):
    if _device_name(device_type) == "cpu":
        _C._set_autocast(_C._autocast_state()[0], dtype)


def _deprecated_cpu(old, new):
    warnings.warn("torch.%s is deprecated. Please use torch.%s instead." % (old, new), DeprecationWarning,
                  stacklevel=3)


def is_autocast_cpu_enabled():
    _deprecated_cpu("is_autocast_cpu_enabled()", "is_autocast_enabled('cpu')")
    return is_autocast_enabled("cpu")


def get_autocast_cpu_dtype():
    _deprecated_cpu("get_autocast_cpu_dtype()", "get_autocast_dtype('cpu')")
    return get_autocast_dtype("cpu")


def set_autocast_cpu_enabled(enabled):
    _deprecated_cpu("set_autocast_cpu_enabled(enabled)", "set_autocast_enabled('cpu', enabled)")
    set_autocast_enabled("cpu", enabled)


def set_autocast_cpu_dtype(dtype):
    _deprecated_cpu("set_autocast_cpu_dtype(dtype)", "set_autocast_dtype('cpu', dtype)")
    set_autocast_dtype("cpu", dtype)


def _cast_inputs(value, dtype):
    """torch.amp's cast of a custom Function's arguments: floating tensors other than float64 to dtype, through
    lists, tuples and dicts (strings and other values unchanged)."""
    if isinstance(value, _C.Tensor):
        return value.to(dtype) if value.is_floating_point() and value.dtype != _dtypes.float64 else value
    if isinstance(value, (list, tuple)):
        return type(value)(_cast_inputs(v, dtype) for v in value)
    if isinstance(value, dict):
        return {k: _cast_inputs(v, dtype) for k, v in value.items()}
    return value


_cache = {"enabled": True}


def is_autocast_cache_enabled():
    return _cache["enabled"]


def set_autocast_cache_enabled(enabled):
    """torch's flag for its cache of casted weights; tessel casts per op and keeps no cache, so the flag
    changes no result (as torch's, where the cache only saves time)."""
    _cache["enabled"] = bool(enabled)


def clear_autocast_cache():
    """torch's: drops the casted weights it keeps in a region; tessel keeps none."""


def _cpu_amp_autocast(enabled=True, dtype=_dtypes.bfloat16, cache_enabled=True):
    """torch.cpu.amp.autocast, deprecated in torch for torch.amp.autocast("cpu", ...)."""
    warnings.warn("`torch.cpu.amp.autocast(args...)` is deprecated. Please use `torch.amp.autocast('cpu', args...)` "
                  "instead.", FutureWarning, stacklevel=2)
    return autocast("cpu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


def custom_fwd(fwd=None, *, device_type, cast_inputs=None):
    """torch.amp.custom_fwd: decorates a custom autograd Function's forward. Without cast_inputs the forward runs
    in the current autocast state; with it, inside a region, floating arguments are cast to cast_inputs and the
    forward runs with autocast off. ctx records the state for custom_bwd."""
    if not isinstance(device_type, str):
        raise ValueError("Expected `device_type` of type `str`, got: `%s`" % type(device_type))
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)

    @functools.wraps(fwd)
    def decorate_fwd(*args, **kwargs):
        args[0]._dtype = get_autocast_dtype(device_type) if device_type == "cpu" else _dtypes.float16
        if cast_inputs is None:
            args[0]._fwd_used_autocast = is_autocast_enabled(device_type)
            return fwd(*args, **kwargs)
        args[0]._fwd_used_autocast = False
        if not is_autocast_enabled(device_type):
            return fwd(*args, **kwargs)
        with autocast(device_type=device_type, enabled=False):
            return fwd(*_cast_inputs(args, cast_inputs), **_cast_inputs(kwargs, cast_inputs))
    return decorate_fwd


def custom_bwd(bwd=None, *, device_type):
    """torch.amp.custom_bwd: runs a custom Function's backward in the autocast state its forward ran in."""
    if not isinstance(device_type, str):
        raise ValueError("Expected `device_type` of type `str`, got: `%s`" % type(device_type))
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)

    @functools.wraps(bwd)
    def decorate_bwd(*args, **kwargs):
        with autocast(device_type=device_type, enabled=args[0]._fwd_used_autocast, dtype=args[0]._dtype):
            return bwd(*args, **kwargs)
    return decorate_bwd


def _f32(v):
    """v rounded to float32, inf when it overflows (the precision of torch's scale tensor)."""
    import numpy as np
    with np.errstate(over="ignore"):
        return float(np.float32(v))


class GradScaler:
    """torch.amp.GradScaler: multiplies the loss by a scale before backward, divides the gradients by it
    before the optimizer step, skips steps whose gradients hold inf or NaN and adapts the scale (halved on
    an overflow, doubled after growth_interval clean steps). enabled=False makes every method a pass-through,
    as torch's. The device defaults to "cuda", as torch's: with no CUDA here that scaler warns and passes
    through, as torch's on a CPU machine; GradScaler("cpu") scales. bfloat16 autocast needs no scaler (its range
    is float32's); float16 does."""

    def __init__(self, device="cuda", init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        if _device_name(device) == "cuda":  # torch on a machine without CUDA: a warning, then pass-through
            if enabled:
                warnings.warn("torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.",
                              stacklevel=2)
            enabled = False
        else:
            check_cpu(device, "GradScaler")
        if growth_factor <= 1.0 or not 0.0 < backoff_factor < 1.0:
            raise ValueError("GradScaler: growth_factor must be > 1 and backoff_factor in (0, 1)")
        self._enabled = bool(enabled)
        self._scale = _f32(float(init_scale))  # a float32 tensor in torch
        self._growth_factor, self._backoff_factor = float(growth_factor), float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        self._stepped = set()  # optimizers stepped since the last update()
        self._found_inf = {}    # id(optimizer) -> bool, for this iteration
        self._unscaled = set()  # id(optimizer) unscaled this iteration
        self._scaled = False    # scale() called once: torch's lazily made _scale tensor exists

    def is_enabled(self):
        return self._enabled

    def get_scale(self):
        return self._scale if self._enabled else 1.0

    def scale(self, outputs):
        if not self._enabled:
            return outputs
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        if not isinstance(outputs, _C.Tensor):
            raise ValueError("outputs must be a Tensor or an iterable of Tensors")
        self._scaled = True
        # a 0-d float32 scale, as torch's: a 0-d float16 / bfloat16 loss scales in float32 (a float16 loss of 3
        # times 2^15 was inf), a loss with dims keeps its dtype
        return outputs * _C._full([], self._scale, _dtypes.float32)

    def _grads(self, optimizer):
        return [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]

    def _check_scaled(self, what):
        # torch: its scale tensor is made by the first scale(); a step before it would divide gradients that were
        # never multiplied by the scale (they stepped 65536 times too small, with no error)
        assert self._scaled, ("Attempted %s but _scale is None.  This may indicate your script did not use "
                              "scaler.scale(loss or outputs) earlier in the iteration." % what)

    def unscale_(self, optimizer):
        if not self._enabled:
            return
        self._check_scaled("unscale_")
        if id(optimizer) in self._stepped:
            raise RuntimeError("unscale_() is being called after step().")
        if id(optimizer) in self._unscaled:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if any(p.grad.dtype == _dtypes.float16 for p in self._grads(optimizer)):
            raise ValueError("Attempting to unscale FP16 gradients.")
        inv = 1.0 / self._scale
        found = False
        with _C._GradMode(False):
            for p in self._grads(optimizer):
                total = p.grad.double().sum().item()
                found = found or not (total - total == 0.0)  # inf or NaN anywhere makes the sum non-finite
                p.grad.mul_(inv)
        self._found_inf[id(optimizer)] = found
        self._unscaled.add(id(optimizer))

    def step(self, optimizer, *args, **kwargs):
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        if id(optimizer) in self._stepped:
            raise RuntimeError("step() has already been called since the last update().")
        self._check_scaled("step")
        if id(optimizer) not in self._unscaled:
            self.unscale_(optimizer)
        # torch's: no parameter had a gradient, so nothing was checked for inf (a step would apply nothing scaled)
        assert self._grads(optimizer), "No inf checks were recorded for this optimizer."
        self._stepped.add(id(optimizer))
        if self._found_inf[id(optimizer)]:
            return None  # skipped, as torch: the parameters keep their values
        return optimizer.step(*args, **kwargs)

    def get_growth_factor(self):
        return self._growth_factor

    def set_growth_factor(self, new_factor):
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self):
        return self._backoff_factor

    def set_backoff_factor(self, new_factor):
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self):
        return self._growth_interval

    def set_growth_interval(self, new_interval):
        self._growth_interval = int(new_interval)

    def update(self, new_scale=None):
        if not self._enabled:
            return
        if new_scale is None and not self._found_inf:
            raise AssertionError("No inf checks were recorded prior to update.")
        if new_scale is not None:
            self._scale = float(new_scale.item() if hasattr(new_scale, "item") else new_scale)
        elif any(self._found_inf.values()):
            self._scale = _f32(self._scale * self._backoff_factor)  # (torch keeps the scale as a float32 tensor)
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self._growth_interval:
                grown = _f32(self._scale * self._growth_factor)
                if math.isfinite(grown):  # torch's _amp_update_scale_: never past float32's largest finite value
                    self._scale = grown
                self._growth_tracker = 0
        self._found_inf.clear()
        self._unscaled.clear()
        self._stepped.clear()

    def state_dict(self):
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor, "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval, "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict):
        if not self._enabled:
            return
        if not state_dict:
            raise RuntimeError("The source state dict is empty, possibly because it was saved from a disabled "
                               "instance of GradScaler.")
        self._scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])


def _cpu_amp_grad_scaler(init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                         enabled=True):
    """torch.cpu.amp.GradScaler (deprecated there): GradScaler("cpu", ...) with torch's FutureWarning."""
    warnings.warn("`torch.cpu.amp.GradScaler(args...)` is deprecated. Please use `torch.amp.GradScaler('cpu', "
                  "args...)` instead.", FutureWarning, stacklevel=2)
    return GradScaler("cpu", init_scale, growth_factor, backoff_factor, growth_interval, enabled)

