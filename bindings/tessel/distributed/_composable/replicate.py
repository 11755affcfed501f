"""tessel.distributed._composable.replicate: torch's composable DDP, ``replicate(module, **ddp_kwargs)``.

The module itself stays in the tree (no ``.module`` wrapper, no ``module.`` prefix in state-dict keys): its class
becomes ``DDP<Class>`` (isinstance(m, DDP) holds; methods set_requires_gradient_sync and register_comm_hook), and
its first forward builds a DistributedDataParallel over its parameters, as torch's does lazily: rank 0's parameters
are broadcast then, and from then on each synchronized backward averages the gradients over the group in buckets
(the Reducer of tessel.nn.parallel, C++ fsdp::Replicate). Parameters of submodules under fully_shard, of
``ignored_modules`` and those not requiring grad are left to themselves. Buffers are not broadcast (torch's
replicate hands DDP its parameters only). kwargs are DistributedDataParallel's (device_mesh, bucket_cap_mb,
find_unused_parameters, static_graph, ...; device_id as torch's: an int or a device). A C++ layer (nn.Linear, ...)
keeps its class and gets the two methods on the instance. Parameters that are DTensors (tensor parallelism below
a 1-D data-parallel mesh) are refused with a clear error: use fully_shard's HSDP for data parallelism over them.

    replicate(model, device_mesh=dp_mesh, bucket_cap_mb=100)   # torchtitan's apply_ddp
    loss_fn(model(x), y).backward()                            # gradients averaged over dp_mesh
"""
import types

from .contract import _get_registry, _State, contract


def _is_fully_sharded(module):
    return "fully_shard" in (_get_registry(module) or {})


def _replicated_params(module, ignored_modules):
    """(name, parameter) of module and its submodules, except those under fully_shard or in ignored_modules and
    the parameters of fully sharded submodules (torch's _collect_params)."""
    ignored_params = {p for m in ignored_modules for p in m.parameters()}
    for sub in module.modules():
        if _is_fully_sharded(sub):
            ignored_params.update(sub.parameters())
    found = []

    def walk(m, head):
        if _is_fully_sharded(m) or m in ignored_modules:
            return
        for name, p in m.named_parameters(recurse=False):
            if p not in ignored_params:
                found.append((head + name, p))
        for name, child in m.named_children():
            walk(child, head + name + ".")
    walk(module, "")
    return found


class _ReplicateState(_State):
    def __init__(self):
        super().__init__()
        self.has_initialized = False
        self._param_list = None
        self._no_sync = False
        self._init_args = None
        self._init_kwargs = {}
        self._comm_hook_args = []
        self._ddp = None

    def record_init_args(self, *args, **kwargs):
        self._init_args, self._init_kwargs = args, kwargs

    def lazy_init(self):
        self.init(*self._init_args, **self._init_kwargs)
        for args, kwargs in self._comm_hook_args:
            self._ddp.register_comm_hook(*args, **kwargs)
        self._comm_hook_args.clear()
        self._init_args, self._init_kwargs = (), {}

    def init(self, module, ignored_modules, **kwargs):
        if self.has_initialized:
            return
        from ...nn import ParameterList
        from ...nn.parallel import DistributedDataParallel
        self.has_initialized = True
        self._param_list = ParameterList([p for _, p in _replicated_params(module, ignored_modules)])
        if "device_id" in kwargs:
            device_id = kwargs.pop("device_id")
            kwargs["device_ids"] = None if device_id is None or str(device_id) == "cpu" else [device_id]
        self._ddp = DistributedDataParallel(self._param_list, **kwargs)

    def forward_pre_hook(self, module, args, kwargs):
        if self._init_args or self._init_kwargs:
            self.lazy_init()
        self._ddp.require_backward_grad_sync = not self._no_sync
        self._ddp._pre_forward()

    def forward_post_hook(self, module, inputs, output):
        return self._ddp._post_forward(output)


def unimplemented_deepcopy(*args, **kwargs):
    raise AssertionError("DDP does not support deepcopy. Please use state dict for serialization.")


class DDP:
    """Mixed into the class of a module under replicate (torch's class of that name)."""

    def __new__(cls, *args, **kwargs):
        # a container under replicate sliced (type(self)(...)) builds the original class, as torch's
        orig = cls.__mro__[2]
        self = orig.__new__(orig, *args, **kwargs) if orig.__new__ is not object.__new__ else orig.__new__(orig)
        self.__init__(*args, **kwargs)
        return self

    def set_requires_gradient_sync(self, requires_gradient_sync):
        """Whether the next backwards average the gradients (False: they accumulate locally, as no_sync)."""
        replicate.state(self)._no_sync = not requires_gradient_sync

    def register_comm_hook(self, *args, **kwargs):
        """DistributedDataParallel.register_comm_hook, applied when the first forward builds the reducer."""
        replicate.state(self)._comm_hook_args.append((args, kwargs))


_classes = {}


@contract(state_cls=_ReplicateState)
def replicate(module, ignored_modules=None, **kwargs):
    if "device_id" in kwargs and not isinstance(kwargs["device_id"], int) and \
            type(kwargs["device_id"]).__name__ != "device":
        raise RuntimeError("Expected device_id to be int or torch.device, but got %s" % type(kwargs["device_id"]))
    if _is_fully_sharded(module):
        raise RuntimeError("Cannot apply `replicate()` on a Module already managed by `fully_shard`")
    ignored_modules = set() if ignored_modules is None else set(ignored_modules)
    if any(getattr(p, "is_distributed", False) for _, p in _replicated_params(module, ignored_modules)):
        raise NotImplementedError("replicate: the module has DTensor parameters (tensor parallelism); data "
                                  "parallelism over them is fully_shard's HSDP (a 2-D mesh) in tessel")
    state = replicate.state(module)
    module.register_forward_pre_hook(state.forward_pre_hook, with_kwargs=True)
    module.register_forward_hook(state.forward_post_hook)
    state.record_init_args(module, ignored_modules, **kwargs)
    if getattr(module, "_has_python_forward", False):
        cls = type(module)
        new_cls = _classes.get(cls)
        if new_cls is None:
            new_cls = _classes[cls] = type("DDP" + cls.__name__, (DDP, cls),
                                           {"__deepcopy__": unimplemented_deepcopy, "__module__": cls.__module__})
        module.__class__ = new_cls
    else:  # a C++ layer keeps its class
        for name in ("set_requires_gradient_sync", "register_comm_hook"):
            setattr(module, name, types.MethodType(getattr(DDP, name), module))
    return module
