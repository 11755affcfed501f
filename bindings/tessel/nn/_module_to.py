"""Module.to / .cuda / .to_empty for the Python face (torch.nn.Module's): casting a module's floating parameters
(in place, as torch's `param.data = cast`) and buffers, refusing devices other than the CPU, and materializing a
module built under tessel.device("meta"). Split from nn/modules.py by concept; modules.py installs these as methods.

    model.to(tessel.bfloat16)   # the same Parameter objects, now bfloat16
"""
from .. import _C, _dtypes
from ._state_dict import _persistent_buffer_names


def _module_to(self, *args, **kwargs):
    """Module.to(device | dtype | tensor, non_blocking=): a CPU device is where the module already is
    (returns self; any other device raises); a floating dtype casts every floating parameter in place, as
    torch's `param.data = cast` (the same Parameter objects, so an optimizer built before keeps training them;
    their .grad cast too; DTensor parameters too: after fully_shard its groups gather and reduce in the new dtype
    unless a MixedPrecisionPolicy names one, as torch's FSDPModule._apply) and every floating buffer (BatchNorm's
    running statistics, rotary tables: new tensors, as torch's; complex ones become real, as torch 2.15's), each
    kept persistent or not as it was."""
    from .._device import parse_to_args
    memory_format = kwargs.get("memory_format")
    dtype, _, _ = parse_to_args(args, kwargs, "Module.to", allow_copy=False)
    if memory_format is not None:
        _to_memory_format(self, memory_format)
    if dtype is None:
        return self
    return _cast_floating(self, dtype, complex_to_real=True)


def _module_cast(dtype):
    """Module.float / double / half / bfloat16: torch casts only the tensors whose is_floating_point() is true,
    so a complex buffer (a rotary table) stays complex, unlike under Module.to(dtype)."""
    def cast(self):
        return _cast_floating(self, dtype, complex_to_real=False)
    cast.__name__ = {_dtypes.float32: "float", _dtypes.float64: "double", _dtypes.float16: "half",
                     _dtypes.bfloat16: "bfloat16"}[dtype]
    return cast


def _cast_floating(self, dtype, complex_to_real):
    floating = (_dtypes.float32, _dtypes.float64, _dtypes.bfloat16, _dtypes.float16)
    if dtype not in floating:
        raise TypeError("nn.Module.to only accepts floating point dtypes, but got desired dtype=%s" % dtype)
    # fully_shard's groups take their cast shards afterwards (torch's FSDPModule._apply): first check that every
    # group may change (between iterations, resharded) so that a refusal leaves the model as it was.
    fsdp_states = [st for st in (_C._fsdp_state(m) for m in self.modules()) if st is not None]
    for st in fsdp_states:
        st._check_params_changeable()
    for m in self.modules():
        persistent = None
        for name, b in list(m._named_buffers(False)):
            if b is not None and b.dtype in floating and b.dtype != dtype:
                if persistent is None:
                    persistent = _persistent_buffer_names(m)
                m.register_buffer(name, b.to(dtype), persistent=name in persistent)
        if complex_to_real:
            _complex_buffers_to_real(m, dtype)
    # Every name of a shared (tied) parameter gets the same cast tensor, and its .grad is cast too.
    casts = {}
    for name, p in list(self.named_parameters(remove_duplicate=False)):
        if p.dtype not in floating or p.dtype == dtype:
            continue
        if p.grad_fn is None:  # in place: a tied parameter's other names follow
            grad = p.grad
            if p.is_distributed:  # torch's `param.data = cast`: the DTensor takes the cast one's shards (`.data =`
                p._set_data(p.detach().to(dtype))  # on a DTensor copies values, keeping fully_shard's storage)
            else:
                p.data = p.detach().to(dtype)
            if grad is not None:
                if grad.is_distributed or grad.grad_fn is not None:
                    p.grad = grad.to(dtype)
                else:
                    grad.data = grad.detach().to(dtype)
            continue
        key = hash(p)
        if key not in casts:
            cast = p.detach().to(dtype)
            cast.requires_grad_(p.requires_grad)
            if p.grad is not None:
                cast.grad = p.grad.to(dtype)
            casts[key] = cast
        self._set_parameter(name, casts[key])
    for st in fsdp_states:
        st._reset_sharded_params()
    return self


def _complex_buffers_to_real(module, dtype):
    """torch 2.15's Module.to(float dtype) casts complex buffers too: each becomes a real buffer (its real part,
    torch's warning once), kept persistent or not."""
    from .modules import _complex_buffers
    held = _complex_buffers(module)
    for name, (value, persistent) in list((held or {}).items()):
        real = value.to(dtype)
        del held[name]
        module.register_buffer(name, real, persistent=persistent)


def _module_type(self, dst_type):
    """torch's Module.type(dst_type): every parameter and buffer cast to dst_type, integer and bool ones included
    (as torch's _apply(t.type(dst_type)); through .to's floating-only rule BatchNorm's num_batches_tracked and
    bool masks were left as they were)."""
    if dst_type in (_dtypes.float32, _dtypes.float64, _dtypes.bfloat16, _dtypes.float16):
        _module_to(self, dst_type)
    for m in self.modules():
        persistent = None
        for name, b in list(m._named_buffers(False)):
            if b is not None and b.dtype != dst_type:
                if persistent is None:
                    persistent = _persistent_buffer_names(m)
                m.register_buffer(name, b.to(dst_type), persistent=name in persistent)
    for p in self.parameters():
        if p.dtype != dst_type and not p.is_distributed:
            p.data = p.detach().to(dst_type)
    return self


def _to_memory_format(module, memory_format):
    """torch's Module.to(memory_format=): every 4-D / 5-D parameter (in place: the same Parameter objects, their
    .grad too) and buffer laid out in that format (channels_last for convolution weights)."""
    for p in module.parameters():
        if p.dim() in (4, 5) and not p.is_distributed:
            p.data = p.detach().contiguous(memory_format=memory_format)
            if p.grad is not None and p.grad.grad_fn is None and not p.grad.is_distributed:
                p.grad.data = p.grad.detach().contiguous(memory_format=memory_format)
    for m in module.modules():
        persistent = None
        for name, b in list(m._named_buffers(False)):
            if b is not None and b.dim() in (4, 5):
                if persistent is None:
                    persistent = _persistent_buffer_names(m)
                m.register_buffer(name, b.contiguous(memory_format=memory_format), persistent=name in persistent)


def _module_cuda(self, device=None):
    raise NotImplementedError("Module.cuda(): tessel's Python face computes on the CPU "
                              "(tessel.cuda.is_available() is False)")


def _to_empty(self, *, device, recurse=True):
    """torch's Module.to_empty(device=): the parameters and buffers on `device` with undefined values.
    Modules built under tessel.device("meta") already hold CPU tensors whose values were never written
    ([Note: deferred init] in core/tensor/factory.h): they stay where they are (sharded by fully_shard if it
    ran first) and stop reporting is_meta; an initializer (init_weights) writes them, as after torch's."""
    from .._device import check_cpu
    check_cpu(device, "to_empty")
    tensors = list(self.parameters(recurse=recurse)) + [b for b in self.buffers(recurse=recurse) if b is not None]
    for t in tensors:
        t._clear_meta()
    return self
