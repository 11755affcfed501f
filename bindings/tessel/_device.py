"""torch.device and the CUDA queries for scripts that pick their device: tessel's Python face computes on
the CPU, so tessel.device("cpu") is the one device, tessel.cuda.is_available() is False, and asking for
"cuda" anywhere raises NotImplementedError (never a silent CPU run of what the script meant for a GPU).

    device = "cuda" if tessel.cuda.is_available() else "cpu"
    model.to(device); x = tessel.zeros(4, device=device).to(device)
"""
import sys
import threading
import types


# torch's device types, in the order its parse error lists them (tessel's Python face computes on the CPU only;
# naming another device is fine, computing on it raises: check_cpu)
_DEVICE_TYPES = ("cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve", "fpga", "maia",
                 "xla", "lazy", "vulkan", "mps", "meta", "hpu", "mtia", "privateuseone")


class device:
    """torch.device: device("cpu"), device("cpu", 0), device("cuda:1"); as torch 2.15's, equal only to a device
    (device("cpu") == "cpu" is False), and its type and index are read-only."""

    def __init__(self, type, index=None):  # noqa: A002 (torch's argument name)
        if isinstance(type, device):
            type, index = type.type, type.index if index is None else index
        elif isinstance(type, int):  # torch's: an ordinal is a CUDA device (using it here raises: check_cpu)
            type, index = "cuda", type
        elif isinstance(type, str):
            if not type:
                raise RuntimeError("Device string must not be empty")
            name, colon, idx = type.partition(":")
            if colon:
                # torch's parse: a non-negative decimal index without a sign, spaces or a leading zero
                if not idx.isdigit() or not idx.isascii() or (len(idx) > 1 and idx[0] == "0"):
                    raise RuntimeError("Invalid device string: '%s'" % type)
                if index is not None:
                    raise RuntimeError("type (string) must not include an index because index was passed "
                                       "explicitly: %s" % type)
                index = int(idx)
            if name not in _DEVICE_TYPES:
                raise RuntimeError("Expected one of %s device type at start of device string: %s"
                                   % (", ".join(_DEVICE_TYPES), name))
            type = name
        if index is not None and index < 0:
            raise RuntimeError("Device index must not be negative")
        object.__setattr__(self, "_type", type)
        object.__setattr__(self, "_index", index)

    type = property(lambda self: self._type)  # noqa: A003
    index = property(lambda self: self._index)

    def __setattr__(self, name, value):
        if name in ("type", "index"):
            raise AttributeError("attribute '%s' of 'torch.device' objects is not writable" % name)
        object.__setattr__(self, name, value)

    def __str__(self):
        return self.type if self.index is None else "%s:%d" % (self.type, self.index)

    def __repr__(self):
        if self.index is None:
            return "device(type='%s')" % self.type
        return "device(type='%s', index=%d)" % (self.type, self.index)

    def __eq__(self, other):
        if not isinstance(other, device):
            return NotImplemented  # torch 2.15: a device never equals its string
        return (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __enter__(self):
        """torch's `with torch.device(...)`: "cpu" changes nothing (tessel's Python face computes there);
        "meta" builds modules and tensors without writing their values or drawing random numbers, as torch's
        meta construction (then fully_shard, to_empty, init_weights: torchtitan's order). Unlike torch's,
        tessel's meta tensors are CPU tensors whose pages are not yet written: address space, not resident
        memory ([Note: deferred init] in core/tensor/factory.h)."""
        if self.type not in ("cpu", "meta"):
            check_cpu(self, "with device(...)")
        from . import _C
        _entered_here().append(_C._set_deferred_init(self.type == "meta"))
        return self

    def __exit__(self, *exc):
        from . import _C
        entered = _entered_here()
        _C._set_deferred_init(entered.pop() if entered else False)
        return False


# The deferred-init flags `with device(...)` blocks replaced, innermost last, per thread: the flag itself is
# per thread (core/tensor/factory.cc), and rank threads enter and leave their blocks independently (a list shared
# by the process let one rank restore another's flag, leaving it in meta mode or building real tensors in a block).
_entered = threading.local()


def _entered_here():
    stack = getattr(_entered, "stack", None)
    if stack is None:
        stack = _entered.stack = []
    return stack


CPU = device("cpu")


def check_cpu(dev, op):
    """Raises unless dev is None or a CPU device (string or device)."""
    if dev is None:
        return
    d = dev if isinstance(dev, device) else device(dev)
    if d.type != "cpu":
        raise NotImplementedError("%s: device '%s' is not available from Python (tessel's Python face computes "
                                  "on the CPU; tessel.cuda.is_available() is False)" % (op, d))


def factory_device(dev, op):
    """A factory's device= argument: None builds as the enclosing `with device(...)` says; "meta" (torch's) builds
    without writing the values (device.__enter__); "cpu" builds real values even inside a meta block (torch's
    explicit device wins over the context); anything else raises as check_cpu."""
    import contextlib
    if dev is None:
        return contextlib.nullcontext()
    d = dev if isinstance(dev, device) else device(dev)
    if d.type == "meta":
        return device("meta")
    check_cpu(d, op)
    return device("cpu")


def parse_to_args(args, kwargs, op, allow_copy):
    """The arguments of Tensor.to / Module.to as torch reads them: a dtype, a device (string or device),
    a tensor (its dtype), positional non_blocking then copy flags, or the keywords; returns (dtype,
    device, copy) and checks the device is the CPU."""
    from ._C import Tensor
    from ._dtypes import dtype as dtype_type
    kwargs = dict(kwargs)
    dtype, dev = kwargs.pop("dtype", None), kwargs.pop("device", None)
    copy = kwargs.pop("copy", False) if allow_copy else False
    kwargs.pop("non_blocking", None)
    kwargs.pop("memory_format", None)
    if kwargs:
        raise TypeError("%s() got unexpected keyword arguments %s" % (op, sorted(kwargs)))
    flags = []
    for i, a in enumerate(args):
        if a is None and i == 0:  # to(None) / to(None, dtype): no device, as torch (HF's `.to(device)` with None)
            continue
        if isinstance(a, bool):
            flags.append(a)
        elif isinstance(a, dtype_type):
            dtype = a
        elif isinstance(a, Tensor):
            dtype = a.dtype
        elif isinstance(a, (str, device)):
            dev = a
        else:
            raise TypeError("%s() received an invalid combination of arguments: %r" % (op, args))
    if len(flags) > (2 if allow_copy else 1):
        raise TypeError("%s() received an invalid combination of arguments: %r" % (op, args))
    check_cpu(dev, op)
    return dtype, dev, bool(copy or (len(flags) == 2 and flags[1]))


def _no_cuda(*args, **kwargs):
    return None


cuda = types.ModuleType("tessel.cuda", "torch.cuda's queries: no CUDA device from Python.")
cuda.is_available = lambda: False
cuda.device_count = lambda: 0
cuda.is_bf16_supported = lambda including_emulation=True: False
cuda.manual_seed = _no_cuda  # no CUDA generator to seed, as torch without a GPU
cuda.manual_seed_all = _no_cuda
cuda.empty_cache = _no_cuda  # torch: a no-op until CUDA was initialized, which it never is here


def _needs_cuda(name):
    def fn(*args, **kwargs):
        raise RuntimeError("tessel.cuda.%s: no CUDA device from tessel's Python face (tessel.cuda.is_available() "
                           "is False); guard it with `if torch.cuda.is_available():` as on a machine without a "
                           "GPU" % name)
    fn.__name__ = name
    return fn


for _name in ("synchronize", "reset_peak_memory_stats", "set_device", "current_device", "get_device_name",
              "get_device_properties", "mem_get_info"):
    setattr(cuda, _name, _needs_cuda(_name))
# torch's counters of a CUDA caching allocator that never allocated: 0 (and no stats), so memory logging in a
# CPU run works as it does there
for _name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved", "memory_cached",
              "max_memory_cached"):
    setattr(cuda, _name, lambda device=None: 0)
cuda.memory_stats = lambda device=None: __import__("collections").OrderedDict()
# torch's answers without a GPU: no CUDA generators (empty state lists, seeding does nothing), never initialized
cuda.get_rng_state_all = lambda: []
cuda.set_rng_state_all = lambda new_states: None
cuda.seed_all = lambda: None
cuda.is_initialized = lambda: False


class _Event:
    """torch.cuda.Event for timing code that runs on the CPU here: record() stamps the host clock, and
    elapsed_time(end) is milliseconds between two recorded events."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self._t = None

    def record(self, stream=None):
        import time
        self._t = time.perf_counter()

    def synchronize(self):
        pass

    def wait(self, stream=None):
        pass

    def query(self):
        return True

    def elapsed_time(self, end_event):
        if self._t is None or end_event._t is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._t - self._t) * 1e3

    def __repr__(self):
        return "<torch.cuda.Event uninitialized>" if self._t is None else "<torch.cuda.Event recorded>"


cuda.Event = _Event
sys.modules["tessel.cuda"] = cuda  # import tessel.cuda / from tessel.cuda import is_available


def _absent_accelerator(name):
    """torch.mps / torch.xpu on a machine without one: not available, no devices."""
    m = types.ModuleType("tessel." + name, "torch.%s: no such device from tessel's Python face." % name)
    m.is_available, m.device_count = (lambda: False), (lambda: 0)
    m.manual_seed = m.manual_seed_all = m.seed = (lambda *args: None)
    m.empty_cache = m.synchronize = (lambda *args: None)
    sys.modules[m.__name__] = m
    return m


mps, xpu = _absent_accelerator("mps"), _absent_accelerator("xpu")


def _cuda_amp():
    """torch.cuda.amp (deprecated in torch for torch.amp): GradScaler and autocast for device "cuda", which on a
    machine without CUDA warn and do nothing, as torch's do (`GradScaler(enabled=use_fp16)` scripts run)."""
    import warnings
    from . import amp as _amp
    module = types.ModuleType("tessel.cuda.amp", _cuda_amp.__doc__)

    def grad_scaler(init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000, enabled=True):
        warnings.warn("`torch.cuda.amp.GradScaler(args...)` is deprecated. Please use "
                      "`torch.amp.GradScaler('cuda', args...)` instead.", FutureWarning, stacklevel=2)
        return _amp.GradScaler("cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled)

    def autocast(enabled=True, dtype=None, cache_enabled=True):
        warnings.warn("`torch.cuda.amp.autocast(args...)` is deprecated. Please use "
                      "`torch.amp.autocast('cuda', args...)` instead.", FutureWarning, stacklevel=2)
        return _amp.autocast("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    def custom_fwd(fwd=None, *, cast_inputs=None):
        warnings.warn("`torch.cuda.amp.custom_fwd(args...)` is deprecated. Please use "
                      "`torch.amp.custom_fwd(args..., device_type='cuda')` instead.", FutureWarning, stacklevel=2)
        return _amp.custom_fwd(fwd, device_type="cuda", cast_inputs=cast_inputs)

    def custom_bwd(bwd=None):
        warnings.warn("`torch.cuda.amp.custom_bwd(args...)` is deprecated. Please use "
                      "`torch.amp.custom_bwd(args..., device_type='cuda')` instead.", FutureWarning, stacklevel=2)
        return _amp.custom_bwd(bwd, device_type="cuda")

    module.GradScaler, module.autocast = grad_scaler, autocast
    module.custom_fwd, module.custom_bwd = custom_fwd, custom_bwd  # (Megatron / apex-era custom Functions)
    return module
