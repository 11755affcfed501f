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
from . import _norms

import threading
import types

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
    tensors = [tensors] if isinstance(tensors, _C.Tensor) else list(tensors)
    if not tensors:
        return _C._full([], 0.0, _C._get_default_dtype())  # no gradients: torch returns 0 in the default dtype
    p = float(norm_type)  # any order, as torch's vector_norm: 0 counts, a negative p is (Σ |x|^p)^(1/p) too
    _norms.check(tensors, p)
    mesh = next((t.device_mesh for t in tensors if t.is_distributed), None)
    with _C._GradMode(False):
        if mesh is None:  # plain tensors: torch's per-tensor norms, each rounded to its dtype
            total = _norms.total(tensors, p)
        elif p == float("inf"):
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
        raise RuntimeError(_NONFINITE % p)
    out = _C._full([], total, _norms.dtype_of(tensors))
    return _C.from_local(out, mesh, [_C.Replicate()] * mesh.ndim) if mesh is not None else out


_NONFINITE = ("The total norm of order %s for gradients from `parameters` is non-finite, so it cannot be clipped. To "
              "disable this error and scale the gradients by the non-finite norm anyway, set "
              "`error_if_nonfinite=False`")


def _sum_of_powers(tensors, p):
    """Σ_t Σ |t|^p as one tensor (a Partial DTensor for shards of one mesh: no communication yet)."""
    out = None
    for t in tensors:
        term = (t.double().abs() ** p).sum()
        out = term if out is None else out + term
    return out


def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
    """torch.nn.utils.clip_grads_with_norm_: every gradient scaled by min(1, max_norm / (total_norm + 1e-6)),
    computed in total_norm's dtype (total_norm a tensor or get_total_norm's DTensor: torch refuses a number)."""
    params = [parameters] if isinstance(parameters, _C.Tensor) else list(parameters)
    grads = [q.grad for q in params if q.grad is not None]
    max_norm = float(max_norm)
    if not grads:
        return
    if not isinstance(total_norm, _C.Tensor):  # torch's clamp of the coefficient, a number then
        kind = type(max_norm / (total_norm + 1e-6))
        name = kind.__name__ if kind.__module__ == "builtins" else "%s.%s" % (kind.__module__, kind.__qualname__)
        raise TypeError("clamp() received an invalid combination of arguments - got (%s, max=float), but expected "
                        "one of:\n * (Tensor input, Tensor min = None, Tensor max = None, *, Tensor out = None)\n"
                        " * (Tensor input, Number min = None, Number max = None, *, Tensor out = None)\n" % name)
    if total_norm.is_distributed:
        total_norm = total_norm.full_tensor()
    coef = _norms.coefficient(max_norm, total_norm.item(), total_norm.dtype)
    if coef == 1.0:
        return
    if any(g.is_distributed for g in grads):
        with _C._GradMode(False):
            for g in grads:
                g.mul_(coef)
    else:
        _norms.scale(grads, coef, total_norm.dtype)


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
            raise RuntimeError(_NONFINITE % p)
        coef = max_norm / (total + 1e-6)
        if coef < 1.0 or coef != coef:  # torch multiplies by clamp(coef, max=1): a NaN norm makes every gradient NaN
            for g in grads:
                g.mul_(coef)
    return _norm_tensor(total, params)


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Scales the gradients in place so their global norm (L2 by default; norm_type=inf or any p > 0 too)
    is at most max_norm; returns the norm before clipping as a 0-d tensor in the gradients' dtype (computed in
    float64; a Replicate DTensor on the gradients' mesh when they are DTensors, as torch's)."""
    if isinstance(parameters, _C.Tensor):
        params = [parameters]
    else:
        generator = isinstance(parameters, types.GeneratorType)
        params = list(parameters)
        if generator and not params:
            import warnings
            warnings.warn("`parameters` is an empty generator, no gradient clipping will occur.", stacklevel=2)
    grads = [p.grad for p in params if p.grad is not None]
    if grads and not any(g.is_distributed for g in grads):
        _norms.check(grads, float(norm_type))
        dtypes = {g.dtype for g in grads}
        if len(dtypes) > 1 or dtypes & {_C.dtype.bfloat16, _C.dtype.float16}:
            # torch's rounding: the norm in the (promoted) dtype, the scale from that rounded norm
            total = get_total_norm(grads, norm_type, error_if_nonfinite)
            _norms.scale(grads, _norms.coefficient(float(max_norm), total.item(), total.dtype), total.dtype)
            return total
    if float(norm_type) != 2.0:
        return _clip_by_norm_of_order(params, float(max_norm), float(norm_type), error_if_nonfinite)
    mesh = None
    if error_if_nonfinite:
        # Measured first, with the gradients untouched when it raises (as torch; the clip below multiplies
        # them by a NaN coefficient for a non-finite norm). A DTensor's squared sum reduces over its mesh.
        with _C._GradMode(False):
            total = sum((p.grad.double() * p.grad.double()).sum().item() for p in params if p.grad is not None)
        if not abs(total) < float("inf"):
            raise RuntimeError(_NONFINITE % 2.0)
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
    """The total norm as torch returns it: a 0-d tensor in the gradients' (promoted) dtype (computed in float64
    here), a Replicate DTensor on their mesh when they are DTensors on one mesh."""
    grads = [p.grad for p in params if p.grad is not None]
    out = _C._full([], norm, _norms.dtype_of(grads) if grads else _C._get_default_dtype())
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
    """One flat vector of the parameters' values, in order (differentiable, as torch's; torch.cat's type
    promotion: a bfloat16 layer and a float32 norm give float32)."""
    from ... import cat
    return cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec, parameters):
    """Each parameter's data becomes the next slice of vec viewed in its shape, as torch's `param.data = ...`: it
    aliases vec and takes its dtype; a longer vec leaves its tail unused, a 2-D one is read in order."""
    if not isinstance(vec, _C.Tensor):
        raise TypeError("expected torch.Tensor, but got: %s" % type(vec).__name__)
    pointer = 0
    for param in parameters:
        n = param.numel()
        param.data = vec[pointer:pointer + n].view_as(param).data
        pointer += n


def weight_norm(module, name="weight", dim=0):
    """torch.nn.utils.weight_norm, the hook-based form torch deprecates (many checkpoints still hold its
    keys): parameter ``name`` becomes ``name_g`` (its 2-norm over every dim but ``dim``; None: the whole
    tensor) and ``name_v`` (itself), and ``module.<name>`` = v · g / ‖v‖ is computed at each forward (a
    computed parameter, so the C++ layers' forward reads it too)."""
    from .parametrizations import _norm_except_dim
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
    hook = WeightNorm(name, dim)
    module._set_computed_parameter(name, hook.compute_weight)
    module.register_forward_pre_hook(hook)
    return module


class _HookForm:
    """The object torch's hook-based weight_norm / spectral_norm registers as the module's forward pre-hook (scripts
    find it in module._forward_pre_hooks by its type and .name). Its call does nothing here: module.<name> is a
    computed parameter, recomputed at each forward by compute_weight."""

    def __call__(self, module, inputs):
        return None

    def remove(self, module):
        self._remove(module, self.name)


def _drop_hook(module, kind, name):
    hooks = module._forward_pre_hooks
    for key in [k for k, hook in hooks.items() if isinstance(hook, kind) and hook.name == name]:
        del hooks[key]


class WeightNorm(_HookForm):
    """torch.nn.utils.weight_norm.WeightNorm: module.<name> = v · g / ‖v‖ over every dim but `dim`."""

    def __init__(self, name, dim):
        self.name, self.dim = name, -1 if dim is None else dim

    def compute_weight(self, module):
        from .parametrizations import _weight_norm
        return _weight_norm(getattr(module, self.name + "_v"), getattr(module, self.name + "_g"), self.dim)

    @staticmethod
    def _remove(module, name):
        remove_weight_norm(module, name)


def _restore_parameter(module, name, own_params, own_buffers, form):
    """The end of a hook-based form (remove_weight_norm, remove_spectral_norm): ``name`` is a parameter again,
    holding its current value; the form's own parameters and buffers go."""
    from .. import Parameter
    if not (module._has_computed_parameter(name) and module._has_parameter(own_params[0])):
        raise ValueError("%s of '%s' not found in %s" % (form, name, type(module).__name__))
    with _C._GradMode(False):
        weight = getattr(module, name).detach().clone()
    module._set_computed_parameter(name, None)
    _drop_hook(module, WeightNorm if form == "weight_norm" else SpectralNorm, name)
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

    hook = SpectralNorm(name, n_power_iterations, dim, eps)
    hook._compute = compute
    module._set_computed_parameter(name, compute)
    module.register_forward_pre_hook(hook)
    return module


class SpectralNorm(_HookForm):
    """torch.nn.utils.spectral_norm.SpectralNorm: module.<name> = W / σ (see spectral_norm)."""

    def __init__(self, name="weight", n_power_iterations=1, dim=0, eps=1e-12):
        if n_power_iterations <= 0:
            raise ValueError("Expected n_power_iterations to be positive, but got n_power_iterations=%d"
                             % n_power_iterations)
        self.name, self.dim, self.n_power_iterations, self.eps = name, dim, n_power_iterations, eps

    def compute_weight(self, module, do_power_iteration=None):
        """W / σ; the power iteration runs (in training mode) only inside a forward, whatever is asked."""
        return self._compute(module)

    @staticmethod
    def _remove(module, name):
        remove_spectral_norm(module, name)


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
