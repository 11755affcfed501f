"""tessel.nn.utils: clip_grad_norm_ (torch.nn.utils.clip_grad_norm_).

Sharded (DTensor) gradients, e.g. under fully_shard, are clipped with exactly one all-reduce of one
number over the group spanning their mesh (the default group when they live on several meshes); plain
gradients need no communication.

    total_norm = tessel.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
"""
from .. import _C

_FLAT_GROUPS = {}  # (axis names, shape) -> the flattened mesh's group; Flatten is collective, so create once


def _norm_mesh_and_group(params):
    """The mesh the sharded gradients live on and a group spanning it (torch reduces each DTensor's norm
    over its own mesh: tensor parallel on mesh["tp"] sums over the tp group only), or (None, the default
    group) when they live on several meshes."""
    meshes = []
    for p in params:
        if p.is_distributed and not any(p.device_mesh == m for m in meshes):
            meshes.append(p.device_mesh)
    if len(meshes) != 1:
        from ..distributed import _default_group
        return None, _default_group("clip_grad_norm_")
    mesh = meshes[0]
    if mesh.ndim == 1:
        return mesh, mesh.get_group()
    key = (tuple(mesh.mesh_dim_names), tuple(mesh.shape))
    if key not in _FLAT_GROUPS:
        _FLAT_GROUPS[key] = mesh._flatten("clip_grad_norm_" + "_".join(key[0])).get_group()
    return mesh, _FLAT_GROUPS[key]


def _clip_by_norm_of_order(params, max_norm, p, error_if_nonfinite):
    """clip_grad_norm_ for norm_type != 2 (torch's formula): the total norm is the max of the gradients'
    largest magnitudes for inf, else (Σ_g Σ |g|^p)^(1/p); the gradients are scaled by
    min(1, max_norm / (total + 1e-6)). DTensor gradients reduce over their mesh through the DTensor ops
    (one small collective per gradient: the 2-norm path above does one in all)."""
    grads = [q.grad for q in params if q.grad is not None]
    if not grads:
        return _C._full([], 0.0, _C.dtype.float64)
    if p <= 0:
        raise ValueError("clip_grad_norm_: norm_type must be positive, got %s" % p)
    with _C._GradMode(False):
        if p == float("inf"):
            total = max(g.double().abs().amax().item() for g in grads)
        else:
            total = sum((g.double().abs() ** p).sum().item() for g in grads) ** (1.0 / p)
        if error_if_nonfinite and not abs(total) < float("inf"):
            raise RuntimeError("clip_grad_norm_: the total norm of order %s for gradients from `parameters` is "
                               "non-finite, so it cannot be clipped; the gradients are left as they were" % p)
        coef = max_norm / (total + 1e-6)
        if coef < 1.0:
            for g in grads:
                g.mul_(coef)
    return _C._full([], total, _C.dtype.float64)


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Scales the gradients in place so their global norm (L2 by default; norm_type=inf or any p > 0 too)
    is at most max_norm; returns the norm before clipping as a 0-d float64 tensor (a Replicate DTensor on the gradients' mesh when they are
    DTensors, as torch's)."""
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
        mesh, group = _norm_mesh_and_group(params)
        norm = _C._clip_grad_norm_sharded(params, float(max_norm), group)
    else:
        norm = _C._clip_grad_norm(params, float(max_norm))
    out = _C._full([], norm, _C.dtype.float64)
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
