"""tessel.nn.utils: clip_grad_norm_ (torch.nn.utils.clip_grad_norm_), get_total_norm and clip_grads_with_norm_
(its two halves, as torchtitan calls them to all-reduce the norm across pipeline stages in between),
clip_grad_value_, parameters_to_vector,
weight_norm (the hook-based form; parametrizations.weight_norm is the current one), parametrize, rnn.

Sharded (DTensor) gradients, e.g. under fully_shard, are clipped with exactly one all-reduce of one
number over the group spanning their mesh (one per mesh when they live on several, as under TP + FSDP
where the norms and embeddings are on the dp mesh and the TP weights on dp x tp); plain gradients need no
communication.

    total_norm = tessel.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
"""
from ... import _C

import threading

# Per rank thread: (the world's group, axis names, shape) -> (the world's group, the flattened mesh's group).
# Flatten is collective, so each rank creates it once per world; a cache shared by rank threads handed
# rank 0's group to the others (their all-reduces then timed out), and one outliving a world would hand a
# destroyed group to the next (the world's group is kept in the value so its id is not reused).
_FLAT_GROUPS = threading.local()


def _mesh_group(mesh):
    """A group spanning the mesh (torch reduces each DTensor's norm over its own mesh: tensor parallel on
    mesh["tp"] sums over the tp group only); a 2-D mesh is flattened once (collective)."""
    if mesh.ndim == 1:
        return mesh.get_group()
    from ...distributed import _default_group
    world = _default_group("clip_grad_norm_")
    cache = _FLAT_GROUPS.__dict__.setdefault("groups", {})
    key = (id(world), tuple(mesh.mesh_dim_names or ()), tuple(mesh.shape))
    if key not in cache:
        from ...distributed.device_mesh import _flatten_dims  # (an unnamed mesh too, which _flatten refuses)
        cache[key] = (world, _flatten_dims(mesh, "clip_grad_norm_" + "_".join(key[1])).get_group())
    return cache[key][1]


def _by_mesh(params):
    """[(mesh, params)] in the order the meshes first appear (the same on every rank); plain parameters go
    with the first mesh (counted once: they are alike on its ranks)."""
    groups, plain = [], []
    for p in params:
        if not p.is_distributed:
            plain.append(p)
            continue
        for mesh, ps in groups:
            if p.device_mesh == mesh:
                ps.append(p)
                break
        else:
            groups.append((p.device_mesh, [p]))
    groups[0][1].extend(plain)
    return groups


def _extreme(pick, values):
    """max / min of the per-tensor norms, NaN if any is (Python's max skips a NaN that is not first: a NaN
    gradient after the first was missed by the inf-norm, its clipping and error_if_nonfinite)."""
    return float("nan") if any(v != v for v in values) else pick(values)


def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """torch.nn.utils.get_total_norm: the norm of the norms of `tensors` (gradients, not parameters), in their
    dtype; DTensors reduce over their meshes (one all-reduce per mesh) and the result is then a Replicate DTensor
    on the first one, so `total.full_tensor()` (torchtitan's next line) is the number on every rank."""
    tensors = [tensors] if isinstance(tensors, _C.Tensor) else [t for t in tensors if t is not None]
    if not tensors:
        return _C._full([], 0.0, _C._get_default_dtype())  # no gradients: torch returns 0 in the default dtype
    p = float(norm_type)  # any order, as torch's vector_norm: 0 counts, a negative p is (Σ |x|^p)^(1/p) too
    mesh = next((t.device_mesh for t in tensors if t.is_distributed), None)
    with _C._GradMode(False):
        if p == float("inf"):
            total = _extreme(max, [t.double().abs().amax().item() for t in tensors if t.numel()])
        elif p == -float("inf"):  # torch's: the smallest magnitude of any element
            total = _extreme(min, [t.double().abs().amin().item() for t in tensors if t.numel()])
        elif p == 0:  # torch's: the 0-"norm" of the per-tensor 0-norms, i.e. how many tensors hold a nonzero
            total = float(sum(1 for t in tensors if bool((t != 0).any())))
        else:
            # one reduction per mesh: its tensors' (Partial) sums add up locally first, then one .item()
            sharded = [t for t in tensors if t.is_distributed]
            plain = [t for t in tensors if not t.is_distributed]
            groups = [ts for _, ts in _by_mesh(sharded)] if sharded else []
            terms = [_sum_of_powers(ts, p) for ts in groups + ([plain] if plain else [])]
            total = sum(term.item() for term in terms) ** (1.0 / p)
    if error_if_nonfinite and not abs(total) < float("inf"):
        raise RuntimeError("The total norm of order %s for gradients from `parameters` is non-finite, so it cannot "
                           "be clipped. To disable this error and scale the gradients by the non-finite norm "
                           "anyway, set `error_if_nonfinite=False`" % p)
    out = _C._full([], total, tensors[0].dtype)
    return _C.from_local(out, mesh, [_C.Replicate()] * mesh.ndim) if mesh is not None else out


def _sum_of_powers(tensors, p):
    """Σ_t Σ |t|^p as one tensor (a Partial DTensor for shards of one mesh: no communication yet)."""
    out = None
    for t in tensors:
        term = (t.double().abs() ** p).sum()
        out = term if out is None else out + term
    return out


def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
    """torch.nn.utils.clip_grads_with_norm_: every gradient scaled by min(1, max_norm / (total_norm + 1e-6))
    (total_norm a number, a tensor or get_total_norm's DTensor)."""
    params = [parameters] if isinstance(parameters, _C.Tensor) else list(parameters)
    if isinstance(total_norm, _C.Tensor):
        total_norm = (total_norm.full_tensor() if total_norm.is_distributed else total_norm).item()
    coef = float(max_norm) / (float(total_norm) + 1e-6)
    if coef >= 1.0:
        return
    with _C._GradMode(False):
        for q in params:
            if q.grad is not None:
                q.grad.mul_(coef)


def clip_grad_norm(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """torch.nn.utils.clip_grad_norm (deprecated there in favour of clip_grad_norm_): the same."""
    import warnings
    warnings.warn("`torch.nn.utils.clip_grad_norm` is now deprecated in favor of `torch.nn.utils.clip_grad_norm_`.",
                  FutureWarning, stacklevel=2)
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


def _clip_by_norm_of_order(params, max_norm, p, error_if_nonfinite):
    """clip_grad_norm_ for norm_type != 2 (torch's formula): the total norm is the max of the gradients'
    largest magnitudes for inf, else (Σ_g Σ |g|^p)^(1/p); the gradients are scaled by
    min(1, max_norm / (total + 1e-6)). DTensor gradients reduce over their mesh through the DTensor ops
    (one small collective per gradient: the 2-norm path above does one in all)."""
    grads = [q.grad for q in params if q.grad is not None]
    if not grads:
        return _C._full([], 0.0, _C._get_default_dtype())  # no gradients: torch returns 0 in the default dtype
    with _C._GradMode(False):
        if p == float("inf"):
            total = _extreme(max, [g.double().abs().amax().item() for g in grads])
        elif p == -float("inf"):  # torch's: the smallest magnitude of any element
            total = _extreme(min, [g.double().abs().amin().item() for g in grads if g.numel()])
        elif p == 0:  # torch's: the 0-"norm" of the per-gradient 0-norms, i.e. how many gradients hold a nonzero
            total = float(sum(1 for g in grads if bool((g != 0).any())))
        else:
            total = sum((g.double().abs() ** p).sum().item() for g in grads) ** (1.0 / p)
        if error_if_nonfinite and not abs(total) < float("inf"):
            raise RuntimeError("clip_grad_norm_: the total norm of order %s for gradients from `parameters` is "
                               "non-finite, so it cannot be clipped; the gradients are left as they were" % p)
        coef = max_norm / (total + 1e-6)
        if coef < 1.0 or coef != coef:  # torch multiplies by clamp(coef, max=1): a NaN norm makes every gradient NaN
            for g in grads:
                g.mul_(coef)
    return _norm_tensor(total, params)


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Scales the gradients in place so their global norm (L2 by default; norm_type=inf or any p > 0 too)
    is at most max_norm; returns the norm before clipping as a 0-d tensor in the gradients' dtype (computed in
    float64; a Replicate DTensor on the gradients' mesh when they are DTensors, as torch's)."""
    params = [parameters] if isinstance(parameters, _C.Tensor) else list(parameters)
    if float(norm_type) != 2.0:
        return _clip_by_norm_of_order(params, float(max_norm), float(norm_type), error_if_nonfinite)
    mesh = None
    if error_if_nonfinite:
        # Measured first, with the gradients untouched when it raises (as torch; the clip below multiplies
        # them by a NaN coefficient for a non-finite norm). A DTensor's squared sum reduces over its mesh.
        with _C._GradMode(False):
            total = sum((p.grad.double() * p.grad.double()).sum().item() for p in params if p.grad is not None)
        if not abs(total) < float("inf"):
            raise RuntimeError("clip_grad_norm_: the total norm of order 2.0 for gradients from `parameters` is "
                               "non-finite, so it cannot be clipped; the gradients are left as they were")
    if any(p.is_distributed for p in params):
        groups = _by_mesh(params)
        if len(groups) == 1:  # one all-reduce of one number, and the clip, in C++
            mesh = groups[0][0]
            norm = _C._clip_grad_norm_sharded(params, float(max_norm), _mesh_group(mesh))
        else:
            # Gradients on several meshes (tensor-parallel weights on dp x tp, the rest on dp, as torchtitan's
            # models): each mesh's squared norm over its own group (one all-reduce each, nothing clipped
            # yet), summed, then one scale for all (torch's clip_grad_norm_ raises here: "All operands in
            # aten.stack.default must have the same mesh").
            # (max_norm 1e308: nothing is clipped unless a norm is inf or NaN, where the scale below agrees)
            norm = sum(_C._clip_grad_norm_sharded(ps, 1e308, _mesh_group(m)) ** 2 for m, ps in groups) ** 0.5
            coef = float(max_norm) / (norm + 1e-6)
            if not coef >= 1.0:  # NaN too, as torch's clamp
                with _C._GradMode(False):
                    for p in params:
                        if p.grad is not None:
                            p.grad.mul_(coef)
    else:
        norm = _C._clip_grad_norm(params, float(max_norm))
    return _norm_tensor(norm, params, mesh)


def _norm_tensor(norm, params, mesh=None):
    """The total norm as torch returns it: a 0-d tensor in the gradients' dtype (computed in float64 here),
    a Replicate DTensor on their mesh when they are DTensors on one mesh."""
    grads = [p.grad for p in params if p.grad is not None]
    out = _C._full([], norm, grads[0].dtype if grads else _C._get_default_dtype())
    if mesh is None and grads and all(g.is_distributed for g in grads) and len(_by_mesh(params)) == 1:
        mesh = grads[0].device_mesh
    if mesh is not None:
        out = _C.from_local(out, mesh, [_C.Replicate()] * mesh.ndim)
    return out


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamps every gradient in place to [-clip_value, clip_value] (elementwise; DTensor gradients clamp
    their local shards, which is the same elementwise result)."""
    params = [parameters] if isinstance(parameters, _C.Tensor) else list(parameters)
    v = float(clip_value)
    with _C._GradMode(False):
        for p in params:
            if p.grad is not None:
                p.grad.copy_(p.grad.clamp(-v, v))


def parameters_to_vector(parameters):
    """One flat vector of the parameters' values, in order (differentiable, as torch's)."""
    return _C._functional.cat([p.reshape(-1) for p in parameters], 0)


def vector_to_parameters(vec, parameters):
    """Copies consecutive slices of vec into the parameters' values (in place, outside autograd)."""
    if not isinstance(vec, _C.Tensor):
        raise TypeError("expected torch.Tensor, but got: %s" % type(vec).__name__)
    params = list(parameters)
    total = sum(p.numel() for p in params)
    if vec.ndim != 1 or vec.shape[0] != total:
        raise RuntimeError("vector_to_parameters: vec has shape %s, the parameters hold %d elements"
                           % (list(vec.shape), total))
    offset = 0
    with _C._GradMode(False):
        for p in params:
            n = p.numel()
            p.copy_(vec.narrow(0, offset, n).reshape(*p.shape))
            offset += n


def weight_norm(module, name="weight", dim=0):
    """torch.nn.utils.weight_norm, the hook-based form torch deprecates (many checkpoints still hold its
    keys): parameter ``name`` becomes ``name_g`` (its 2-norm over every dim but ``dim``; None: the whole
    tensor) and ``name_v`` (itself), and ``module.<name>`` = v · g / ‖v‖ is computed at each forward (a
    computed parameter, so the C++ layers' forward reads it too)."""
    from .parametrizations import _norm_except_dim, _weight_norm
    from .. import Parameter
    import warnings
    warnings.warn("`torch.nn.utils.weight_norm` is deprecated in favor of `torch.nn.utils.parametrizations."
                  "weight_norm`.", FutureWarning, stacklevel=2)
    if module._has_computed_parameter(name) or module._has_parameter(name + "_g"):
        raise RuntimeError("Cannot register two weight_norm hooks on the same parameter %s" % name)
    dim = -1 if dim is None else dim
    weight = module._remove_parameter(name)
    with _C._GradMode(False):
        g = _norm_except_dim(weight, dim)
    module._register_parameter(name + "_g", Parameter(g))
    module._register_parameter(name + "_v", Parameter(weight))
    module._set_computed_parameter(
        name, lambda m: _weight_norm(getattr(m, name + "_v"), getattr(m, name + "_g"), dim))
    return module


def _restore_parameter(module, name, own_params, own_buffers, form):
    """The end of a hook-based form (remove_weight_norm, remove_spectral_norm): ``name`` is a parameter again,
    holding its current value; the form's own parameters and buffers go."""
    from .. import Parameter
    if not (module._has_computed_parameter(name) and module._has_parameter(own_params[0])):
        raise ValueError("%s of '%s' not found in %s" % (form, name, type(module).__name__))
    with _C._GradMode(False):
        weight = getattr(module, name).detach().clone()
    module._set_computed_parameter(name, None)
    for p in own_params:
        module._remove_parameter(p)
    for b in own_buffers:
        module._remove_buffer(b)
    module._register_parameter(name, Parameter(weight))
    return module


def remove_weight_norm(module, name="weight"):
    """Undoes weight_norm: ``name`` is a parameter again, holding the current v · g / ‖v‖."""
    return _restore_parameter(module, name, [name + "_g", name + "_v"], [], "weight_norm")


def spectral_norm(module, name="weight", n_power_iterations=1, eps=1e-12, dim=None):
    """torch.nn.utils.spectral_norm, the hook-based form (parametrizations.spectral_norm is the current
    one): parameter ``name`` becomes ``name_orig`` and buffers ``name_u`` / ``name_v`` hold the power
    iteration's vectors; ``module.<name>`` = W / σ, σ = uᵀ W v, is computed at each forward after
    ``n_power_iterations`` steps (v first, then u) in training mode; eval mode and accesses outside a forward
    use the stored u and v."""
    from .. import Parameter, functional as F
    from .parametrizations import _as_matrix, _divided_by_sigma, _random_unit, _transposed_convs
    if module._has_parameter(name + "_orig"):
        raise RuntimeError("Cannot register two spectral_norm hooks on the same parameter %s" % name)
    if n_power_iterations <= 0:
        raise ValueError("Expected n_power_iterations to be positive, but got n_power_iterations=%d"
                         % n_power_iterations)
    if dim is None:
        dim = 1 if isinstance(module, _transposed_convs()) else 0
    weight = module._remove_parameter(name)
    with _C._GradMode(False):
        h, w = _as_matrix(weight, dim).shape
        u, v = _random_unit(h, weight.dtype, eps), _random_unit(w, weight.dtype, eps)
    module._register_parameter(name + "_orig", Parameter(weight))
    module.register_buffer(name + "_u", u)
    module.register_buffer(name + "_v", v)

    ran = []  # whether a forward has run: before the first, module.<name> is the raw weight, as torch's

    def compute(m):
        w_orig, u, v = getattr(m, name + "_orig"), getattr(m, name + "_u"), getattr(m, name + "_v")
        if m._in_forward():
            ran[:] = [True]
        elif not ran:  # (torch sets weight.data at registration; W / σ with the unrun random u, v was read here)
            return w_orig.detach()
        mat = _as_matrix(w_orig, dim)
        if m.training and m._in_forward():
            with _C._GradMode(False):
                fixed = mat.detach()
                for _ in range(n_power_iterations):  # torch's order here: v, then u
                    v.copy_(F.normalize(fixed.transpose(0, 1) @ u, dim=0, eps=eps))
                    u.copy_(F.normalize(fixed @ v, dim=0, eps=eps))
        return _divided_by_sigma(w_orig, mat, u, v)

    module._set_computed_parameter(name, compute)
    return module


def remove_spectral_norm(module, name="weight"):
    """Undoes spectral_norm: ``name`` is a parameter again, holding W / σ with the stored u and v."""
    return _restore_parameter(module, name, [name + "_orig"], [name + "_u", name + "_v"], "spectral_norm")


def skip_init(module_cls, *args, **kwargs):
    """torch.nn.utils.skip_init: the module built on the meta device (no initializer runs, no random number is
    drawn), then given uninitialized storage on `device` (to_empty)."""
    import inspect
    from ... import device as _device
    try:
        params = inspect.signature(module_cls).parameters
        takes_device = "device" in params or any(p.kind == p.VAR_KEYWORD for p in params.values())
    except (TypeError, ValueError):  # a C++ layer's constructor: all of tessel's take device=
        takes_device = True
    if not takes_device:
        raise RuntimeError("Module must support a 'device' arg to skip initialization")
    final_device = kwargs.pop("device", "cpu")
    with _device("meta"):
        module = module_cls(*args, **kwargs)
    return module.to_empty(device=final_device)


def convert_conv2d_weight_memory_format(module, memory_format):
    """torch's layout hint for cuDNN (Conv2d / ConvTranspose2d weights in channels_last). tessel's convolutions
    read any layout at the same speed and `p.data = t` keeps a parameter's own layout here, so the module is
    returned as it is: same parameters, same values (a model ported with this call runs unchanged)."""
    return module


def convert_conv3d_weight_memory_format(module, memory_format):
    """torch's channels_last_3d hint for Conv3d / ConvTranspose3d weights: as convert_conv2d_weight_memory_format,
    the module itself."""
    return module


from . import rnn  # noqa: E402,F401 (torch.nn.utils.rnn)
from . import clip_grad, stateless  # noqa: E402,F401 (torch.nn.utils.clip_grad / .stateless)
from . import parametrize, parametrizations, prune  # noqa: E402,F401


from .fusion import (  # noqa: E402,F401 (torch.nn.utils.fuse_conv_bn_eval and friends)
    fuse_conv_bn_eval, fuse_conv_bn_weights, fuse_linear_bn_eval, fuse_linear_bn_weights)
from . import fusion  # noqa: E402,F401
