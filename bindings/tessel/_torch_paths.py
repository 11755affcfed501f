"""torch's module paths and small top-level names that training code imports, over tessel's objects (from a
missing-names probe against torchtitan, timm, litgpt, lightning, accelerate, torchtune, diffusers and
pytorch/examples): `import torch.backends.cudnn`, torch.amp.grad_scaler / autocast_mode, torch.nn.parameter,
torch.nn.modules.utils (_pair, ...), torch.nn.common_types, torch.distributed.fsdp._fully_shard (torchtitan's
FSDP2 path), torch.distributed._composable.fsdp.fully_shard, torch.distributed.fsdp.sharded_grad_scaler,
optim.lr_scheduler._LRScheduler, torch.GradScaler, torch.OutOfMemoryError, torch._check* / _assert and
torch.get_device_module. Each name is the tessel object itself (no copies), so isinstance checks and
identities hold across the paths.
"""
import collections.abc
import itertools
import sys
import types
import typing


def _module(path, doc, **names):
    m = types.ModuleType(path, doc)
    m.__dict__.update(names)
    sys.modules[path] = m
    return m


def _ntuple(n, name="parse"):
    def parse(x):
        if isinstance(x, collections.abc.Iterable) and not isinstance(x, str):
            return tuple(x)
        return tuple(itertools.repeat(x, n))
    parse.__name__ = name
    return parse


def _reverse_repeat_tuple(t, n):
    """torch's: each element of t repeated n times, in reverse order (F.pad's argument from conv padding)."""
    return tuple(x for x in reversed(t) for _ in range(n))


class OutOfMemoryError(RuntimeError):
    """torch.OutOfMemoryError (torch.cuda.OutOfMemoryError): raised by an allocation that did not fit."""


def _checker(exc_type, default):
    def check(cond, message=None):
        if not cond:
            raise exc_type(message() if callable(message) else (message or default))
    return check


def _assert(condition, message):
    """torch._assert: a plain assert that symbolic tracing can see."""
    assert condition, message


def install(namespace):
    from . import amp, backends, distributed, library, nn, optim
    namespace["library"] = library
    from .distributed import fsdp
    from .nn import modules
    for name in ("cudnn", "cuda", "mps", "mkldnn", "openmp", "cpu"):
        sys.modules["tessel.backends." + name] = getattr(backends, name)
    sys.modules["tessel.backends.cuda.matmul"] = backends.cuda.matmul
    backends.__path__ = []  # a package, so `import torch.backends.cudnn` resolves the entries above
    _module("tessel.amp.grad_scaler", "torch.amp.grad_scaler", GradScaler=amp.GradScaler)
    _module("tessel.amp.autocast_mode", "torch.amp.autocast_mode", autocast=amp.autocast,
            is_autocast_available=amp.is_autocast_available, custom_fwd=amp.custom_fwd, custom_bwd=amp.custom_bwd)
    amp.__path__ = []
    _module("tessel.nn.parameter", "torch.nn.parameter", Parameter=nn.Parameter, Buffer=modules.Buffer)
    nn.parameter = sys.modules["tessel.nn.parameter"]
    modules.utils = _module("tessel.nn.modules.utils", "torch.nn.modules.utils: the conv layers' argument helpers",
                            _single=_ntuple(1, "_single"), _pair=_ntuple(2, "_pair"), _triple=_ntuple(3, "_triple"),
                            _quadruple=_ntuple(4, "_quadruple"), _ntuple=_ntuple,
                            _reverse_repeat_tuple=_reverse_repeat_tuple)
    T = typing.TypeVar("T")
    sizes = {"_scalar_or_tuple_%d_t" % n: typing.Union[T, typing.Tuple[(T,) * n]] for n in (1, 2, 3, 4, 5, 6)}
    sizes.update({"_size_%d_t" % n: sizes["_scalar_or_tuple_%d_t" % n][int] for n in (1, 2, 3, 4, 5, 6)})
    sizes.update(_size_any_t=typing.Union[int, typing.Tuple[int, ...]], _ratio_any_t=typing.Union[
        float, typing.Tuple[float, ...]], _maybe_indices_t=typing.Any, _tensor_list_t=typing.Any)
    nn.common_types = _module("tessel.nn.common_types", "torch.nn.common_types: the layers' size type aliases",
                              **sizes)
    fsdp_names = {n: getattr(fsdp, n) for n in ("fully_shard", "FSDPModule", "MixedPrecisionPolicy",
                                                "OffloadPolicy", "CPUOffloadPolicy", "UnshardHandle",
                                                "register_fsdp_forward_method")}
    fsdp._fully_shard = _module("tessel.distributed.fsdp._fully_shard", "torch.distributed.fsdp._fully_shard",
                                **fsdp_names)
    fsdp._fully_shard.__path__ = []
    _module("tessel.distributed.fsdp._fully_shard._fully_shard", "torch's module of fully_shard", **fsdp_names)
    _module("tessel.distributed._composable.fsdp.fully_shard", "torch 2.4-2.5's module of fully_shard",
            **fsdp_names)
    fsdp.sharded_grad_scaler = _module("tessel.distributed.fsdp.sharded_grad_scaler",
                                       "torch.distributed.fsdp.sharded_grad_scaler",
                                       ShardedGradScaler=_sharded_grad_scaler(amp.GradScaler, distributed))
    optim.lr_scheduler._LRScheduler = optim.lr_scheduler.LRScheduler
    namespace.update(GradScaler=amp.GradScaler, OutOfMemoryError=OutOfMemoryError, _assert=_assert,
                     _check=_checker(RuntimeError, "Expected cond to be True, but got False. (Could this error "
                                     "message be improved? If so, please report an enhancement request to PyTorch.)"),
                     _check_index=_checker(IndexError, "Expected cond to be True, but got False."),
                     _check_value=_checker(ValueError, "Expected cond to be True, but got False."),
                     _check_type=_checker(TypeError, "Expected cond to be True, but got False."),
                     _check_not_implemented=_checker(NotImplementedError, "Expected cond to be True, but got False."),
                     get_device_module=lambda device=None: _device_module(namespace, device))
    namespace["cuda"].OutOfMemoryError = OutOfMemoryError
    from .nn.utils._orthogonal import geqrf, householder_product, ormqr
    namespace["linalg"].householder_product = householder_product
    namespace.update(geqrf=geqrf, orgqr=householder_product, ormqr=ormqr)


def _device_module(namespace, device):
    """torch.get_device_module: tessel.cuda for "cuda" (its queries say no GPU), tessel.cpu for the CPU and by
    default (the current accelerator: none on tessel's Python face)."""
    name = device if isinstance(device, str) or device is None else getattr(device, "type", str(device))
    name = (name or "cpu").split(":")[0]
    if name not in ("cpu", "cuda"):
        raise RuntimeError("Device '%s' does not have a corresponding module registered as 'torch.%s'."
                           % (name, name))
    return namespace[name]


def _sharded_grad_scaler(GradScaler, dist):
    class ShardedGradScaler(GradScaler):
        """torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler: a GradScaler whose inf / NaN check is
        agreed across the process group (every rank skips the same steps when any rank's gradients overflow)."""

        def __init__(self, device="cuda", init_scale=2.0 ** 16, backoff_factor=0.5, growth_factor=2.0,
                     growth_interval=2000, enabled=True, process_group=None):
            super().__init__(device, init_scale=init_scale, growth_factor=growth_factor,
                             backoff_factor=backoff_factor, growth_interval=growth_interval, enabled=enabled)
            self.process_group = process_group

        def unscale_(self, optimizer):
            super().unscale_(optimizer)
            if not self._enabled or not dist.is_initialized():
                return
            from . import _C
            flag = _C._full([1], 1.0 if self._found_inf[id(optimizer)] else 0.0, _C.dtype.float32)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.process_group)
            self._found_inf[id(optimizer)] = bool(flag.item() > 0)
    return ShardedGradScaler
