"""torch.nn.utils.prune: pruning a parameter by a mask. ``prune.l1_unstructured(module, "weight", amount=0.3)``
replaces parameter ``weight`` by ``weight_orig`` (the parameter, still trained) and buffer ``weight_mask`` (0
where pruned), and ``module.weight`` becomes ``weight_orig * weight_mask``, computed at every forward (a
computed parameter of the module, as tessel's weight_norm: the C++ layers' own forward reads it too), so the
state dict holds torch's ``weight_orig`` / ``weight_mask`` keys. Pruning a tensor again prunes among the units
still kept (torch's PruningContainer: an amount is a share of what is left); ``remove`` makes it permanent.

The masks are computed on the host (pruning is an occasional, offline step): L1 and Ln norms are torch's, and so
are the entries kept among tied scores (tessel's topk runs aten's CPU algorithm); the random methods draw from tessel's
generator (``tessel.manual_seed``), not torch's stream. Checked against torch 2.15 on the same weights: identical
masks for L1 twice, L1- then L2-structured along a dim, structured then unstructured, and global L1 over two layers.
As torch's, the method (a PruningContainer when repeated) is also listed in ``module._forward_pre_hooks``, where
scripts look for it (``hook._tensor_name``); the hook itself does nothing, the computed parameter does its work.
"""
import functools
import numbers

import numpy as np

from ... import _C

def topk_indices(scores, k, largest):
    """The positions torch.topk(scores.view(-1), k, largest=largest) picks, tied scores included (tessel's topk
    runs aten's CPU algorithm: core/ops/scan_sort.h TopKIndicesLastDim)."""
    rows = _C._from_numpy(np.ascontiguousarray(np.asarray(scores).reshape(1, -1)))
    return _C._functional._topk_indices(rows, int(k), bool(largest), True).numpy().reshape(-1)


__all__ = ["BasePruningMethod", "PruningContainer", "Identity", "RandomUnstructured", "L1Unstructured",
           "RandomStructured", "LnStructured", "CustomFromMask", "identity", "random_unstructured",
           "l1_unstructured", "random_structured", "ln_structured", "global_unstructured", "custom_from_mask",
           "remove", "is_pruned"]

_PRUNED = "_tessel_pruning"  # module.__dict__ entry: {tensor name: the method (a PruningContainer when repeated)}


def _validate_amount(amount):
    if not isinstance(amount, numbers.Real):
        raise TypeError("Invalid type for amount: %s. Must be int or float." % amount)
    if (isinstance(amount, numbers.Integral) and amount < 0) or (not isinstance(amount, numbers.Integral) and
                                                                  (float(amount) > 1.0 or float(amount) < 0.0)):
        raise ValueError("amount=%s should either be a float in the range [0, 1] or a non-negative integer" % amount)


def _to_prune(amount, size):
    """How many of `size` units `amount` prunes (an int as is, a fraction rounded as torch rounds it)."""
    if isinstance(amount, numbers.Integral):
        if amount > size:
            raise ValueError("amount=%d should be smaller than the number of parameters to prune=%d" % (amount, size))
        return int(amount)
    return int(round(amount * size))


def _host(t):
    """Scores on the host, float32 ones kept in float32 so that the norms tie (or not) as torch's do."""
    if isinstance(t, _C.Tensor):
        t = t.detach().numpy()
    t = np.asarray(t)
    return t if t.dtype in (np.float32, np.float64) else t.astype(np.float64)


def _tensor_face(like_t):
    """A built-in compute_mask, which works on numpy, given tensors (torch's signature: a user calling
    method.compute_mask(t, default_mask)) returns a tensor: of t's dtype (like_t: torch builds the mask from
    zeros_like(t)), else of default_mask's."""
    def wrap(compute):
        @functools.wraps(compute)
        def compute_mask(self, t, default_mask):
            if not isinstance(t, _C.Tensor) and not isinstance(default_mask, _C.Tensor):
                return compute(self, t, default_mask)
            dtype = t.dtype if like_t or not isinstance(default_mask, _C.Tensor) else default_mask.dtype
            mask = compute(self, _host(t), _host(default_mask))
            return _C._from_numpy(np.ascontiguousarray(mask)).to(dtype)
        return compute_mask
    return wrap


class BasePruningMethod:
    """torch's base: compute_mask(t, default_mask) gives the new mask (numpy in, numpy out here);
    apply(module, name, ...) installs it (combining with an earlier one)."""
    PRUNING_TYPE = None

    def __init_subclass__(cls, **kwargs):
        """A user's method (defined outside this module) gets tensors, as torch's, and may return a tensor."""
        super().__init_subclass__(**kwargs)
        user = cls.__dict__.get("compute_mask")
        if user is None or cls.__module__ == __name__:
            return

        def compute_mask(self, t, default_mask):
            as_tensor = (lambda a: _C._from_numpy(np.ascontiguousarray(a, dtype=np.float32))
                         if isinstance(a, np.ndarray) else a)
            return _host(user(self, as_tensor(t), as_tensor(default_mask)))
        compute_mask.__doc__, compute_mask.__name__ = user.__doc__, "compute_mask"
        cls.compute_mask = compute_mask

    def compute_mask(self, t, default_mask):
        raise NotImplementedError

    def __call__(self, module, inputs=None):
        """The forward pre-hook torch's method is: a no-op here (module.<name> is computed from the mask)."""
        return None

    def apply_mask(self, module):
        """module.<name>_orig times module.<name>_mask (torch's)."""
        if getattr(self, "_tensor_name", None) is None:
            raise AssertionError("Module %s has to be pruned" % type(module).__name__)
        return _apply_mask(module, self._tensor_name)

    @classmethod
    def apply(cls, module, name, *args, importance_scores=None, **kwargs):
        method = cls(*args, **kwargs)
        return _install(module, name, method, importance_scores)

    def prune(self, t, default_mask=None, importance_scores=None):
        scores = _host(importance_scores if importance_scores is not None else t)
        mask = np.ones(scores.shape) if default_mask is None else _host(default_mask)
        return t * _C._from_numpy(self.compute_mask(scores, mask)).to(t.dtype)

    def remove(self, module):
        remove(module, self._tensor_name)


class PruningContainer(BasePruningMethod):
    """A sequence of pruning methods applied to one tensor, each among the units the earlier ones kept."""

    def __init__(self, *methods):
        self._pruning_methods = tuple(methods)
        self._tensor_name = methods[0]._tensor_name if methods else None
        self.PRUNING_TYPE = methods[-1].PRUNING_TYPE if methods else None

    def add_pruning_method(self, method):
        if self._tensor_name is not None and method._tensor_name != self._tensor_name:
            raise ValueError("Can only add pruning methods acting on the parameter named '%s' to PruningContainer. "
                             "Found '%s'" % (self._tensor_name, method._tensor_name))
        self._pruning_methods += (method,)

    def __len__(self):
        return len(self._pruning_methods)

    def __iter__(self):
        return iter(self._pruning_methods)

    def __getitem__(self, idx):
        return self._pruning_methods[idx]

    @_tensor_face(like_t=True)
    def compute_mask(self, t, default_mask):
        return _combine(self._pruning_methods[-1], t, default_mask)


def _combine(method, t, mask):
    """torch's PruningContainer._combine_masks: `method` prunes among the entries (unstructured) or the
    channels along its dim (structured) that `mask` still keeps."""
    new = mask.copy()
    if method.PRUNING_TYPE == "unstructured":
        keep = mask == 1
        new[keep] = method.compute_mask(t[keep], mask[keep])
    elif method.PRUNING_TYPE == "structured":
        dim = method.dim % t.ndim
        others = tuple(d for d in range(t.ndim) if d != dim)
        channels = np.nonzero(mask.sum(axis=others) != 0)[0]
        part = method.compute_mask(np.take(t, channels, axis=dim), np.take(mask, channels, axis=dim))
        index = [slice(None)] * t.ndim
        index[dim] = channels
        new[tuple(index)] = part
    else:  # global
        new = method.compute_mask(t, mask)
    return new


class Identity(BasePruningMethod):
    PRUNING_TYPE = "unstructured"

    @_tensor_face(like_t=False)
    def compute_mask(self, t, default_mask):
        return default_mask.copy()


class _Unstructured(BasePruningMethod):
    """Prunes the `amount` entries with the smallest scores (_scores: per entry, flattened)."""
    PRUNING_TYPE = "unstructured"

    def __init__(self, amount):
        _validate_amount(amount)
        self.amount = amount

    @_tensor_face(like_t=False)
    def compute_mask(self, t, default_mask):
        k = _to_prune(self.amount, t.size)
        mask = default_mask.copy()
        if k:
            if self.amount is True:  # torch hands it to topk as k, which takes no bool
                raise TypeError("topk(): argument 'k' must be int, not bool")
            mask.reshape(-1)[topk_indices(self._scores(t), k, self._LARGEST)] = 0
        return mask


class RandomUnstructured(_Unstructured):
    _LARGEST = True  # torch prunes the entries with the k largest draws

    def _scores(self, t):
        return _C._rand([int(t.size)], None, _C.dtype.float64).numpy()


class L1Unstructured(_Unstructured):
    _LARGEST = False

    def _scores(self, t):
        return np.abs(t).reshape(-1)


class RandomStructured(BasePruningMethod):
    PRUNING_TYPE = "structured"

    def __init__(self, amount, dim=-1):
        _validate_amount(amount)
        self.amount, self.dim = amount, dim

    @_tensor_face(like_t=True)
    def compute_mask(self, t, default_mask):
        _check_structured(t, self.dim)
        return _structured(t, default_mask, self.amount, self.dim,
                           _C._rand([int(t.shape[self.dim % t.ndim])], None, _C.dtype.float64).numpy())


class LnStructured(BasePruningMethod):
    PRUNING_TYPE = "structured"

    def __init__(self, amount, n, dim=-1):
        _validate_amount(amount)
        self.amount, self.n, self.dim = amount, n, dim

    @_tensor_face(like_t=True)
    def compute_mask(self, t, default_mask):
        _check_structured(t, self.dim)
        dim = self.dim % t.ndim
        flat = np.moveaxis(t, dim, 0).reshape(t.shape[dim], -1)
        order = np.inf if self.n in ("inf", float("inf")) else (-np.inf if self.n == "-inf" else self.n)
        norms = np.linalg.norm(flat, ord=order, axis=1) if order not in ("fro", "nuc") else \
            np.linalg.norm(flat, axis=1)
        return _structured(t, default_mask, self.amount, self.dim, norms.astype(t.dtype))


def _check_structured(t, dim):
    if t.ndim <= 1:
        from ..._size import Size
        raise ValueError("Structured pruning can only be applied to multidimensional tensors. Found tensor of shape "
                         "%s with %d dims" % (Size(t.shape), t.ndim))
    if dim >= t.ndim:
        from ..._size import Size
        raise IndexError("Invalid index %s for tensor of size %s" % (dim, Size(t.shape)))


def _structured(t, default_mask, amount, dim, scores):
    """Keeps the channels along dim with the largest scores (torch keeps nparams_tokeep by topk), within
    default_mask."""
    dim = dim % t.ndim
    n = t.shape[dim]
    k = _to_prune(amount, n)
    if not k:
        return default_mask.copy()
    keep = np.zeros(n)
    keep[topk_indices(scores, n - k, True)] = 1
    shape = [1] * t.ndim
    shape[dim] = n
    return default_mask * keep.reshape(shape)


class CustomFromMask(BasePruningMethod):
    PRUNING_TYPE = "global"

    def __init__(self, mask):
        self.mask = mask

    @_tensor_face(like_t=False)
    def compute_mask(self, t, default_mask):
        mask = _host(self.mask)
        if mask.shape != default_mask.shape:
            raise ValueError("custom_from_mask: mask of shape %s for a tensor of shape %s"
                             % (list(mask.shape), list(default_mask.shape)))
        return default_mask * mask


def _apply_mask(module, name):
    return getattr(module, name + "_orig") * getattr(module, name + "_mask")


def _install(module, name, method, importance_scores):
    """Prunes module.<name> by `method` (after any earlier pruning of it) and returns the method installed."""
    from .. import Parameter
    method._tensor_name = name
    pruned = getattr(module, "__dict__").setdefault(_PRUNED, {})
    if name in pruned:  # again: a container over the methods so far, the new one among what they kept
        earlier = pruned[name]
        container = earlier if isinstance(earlier, PruningContainer) else PruningContainer(earlier)
        container.add_pruning_method(method)
        method, orig = container, getattr(module, name + "_orig")
        old_mask = _host(getattr(module, name + "_mask"))
    else:
        if not module._has_parameter(name):
            raise AttributeError("Parameter '%s' of module %s has to be pruned but does not exist"
                                 % (name, type(module).__name__))
        removed = module._remove_parameter(name)
        # the Parameter object itself becomes <name>_orig, as torch's (a new one left an optimizer made before
        # pruning stepping a tensor the module no longer uses)
        orig = removed if isinstance(removed, Parameter) else Parameter(removed)
        module._register_parameter(name + "_orig", orig)
        old_mask = np.ones(tuple(orig.shape))
    try:
        # torch's default scores: the tensor as it is now (module.<name>: already masked after an earlier pruning)
        scores = _host(importance_scores if importance_scores is not None else
                       (getattr(module, name) if name in pruned else orig))
        if scores.shape != old_mask.shape:
            raise ValueError("importance_scores should have the same shape as parameter %s of %s"
                             % (name, type(module).__name__))
        mask = method.compute_mask(scores, old_mask)
    except Exception:
        if name not in pruned:  # a first pruning that failed leaves the module as it was, as torch's (it was
            module._remove_parameter(name + "_orig")  # left with <name>_orig and no mask: forward raised)
            module._register_parameter(name, orig)
        raise
    module.register_buffer(name + "_mask", _C._from_numpy(np.ascontiguousarray(mask)).to(orig.dtype))
    if name not in pruned:
        module._set_computed_parameter(name, lambda m: _apply_mask(m, name))
    _drop_hooks(module, name)  # torch's: the earlier method's hook goes, the container's comes last
    module.register_forward_pre_hook(method)
    pruned[name] = method
    return method


def _drop_hooks(module, name):
    hooks = module._forward_pre_hooks
    for key in [k for k, hook in hooks.items()
                if isinstance(hook, BasePruningMethod) and getattr(hook, "_tensor_name", None) == name]:
        del hooks[key]


def identity(module, name):
    Identity.apply(module, name)
    return module


def random_unstructured(module, name, amount):
    RandomUnstructured.apply(module, name, amount)
    return module


def l1_unstructured(module, name, amount, importance_scores=None):
    L1Unstructured.apply(module, name, amount=amount, importance_scores=importance_scores)
    return module


def random_structured(module, name, amount, dim):
    RandomStructured.apply(module, name, amount, dim)
    return module


def ln_structured(module, name, amount, n, dim, importance_scores=None):
    LnStructured.apply(module, name, amount, n, dim, importance_scores=importance_scores)
    return module


def custom_from_mask(module, name, mask):
    CustomFromMask.apply(module, name, mask)
    return module


def global_unstructured(parameters, pruning_method, importance_scores=None, **kwargs):
    """torch's global_unstructured: one unstructured method (L1Unstructured, RandomUnstructured) over every
    (module, name) at once, the amount a share of all their still-kept entries; each gets its part of the mask."""
    parameters = list(parameters)
    importance_scores = importance_scores or {}
    if getattr(pruning_method, "PRUNING_TYPE", None) != "unstructured":
        raise TypeError('Only "unstructured" PRUNING_TYPE supported for the `pruning_method`. Found method %s of '
                        "type %s" % (pruning_method, getattr(pruning_method, "PRUNING_TYPE", None)))
    scores, masks, sizes = [], [], []
    for module, name in parameters:
        value = importance_scores.get((module, name), getattr(module, name))
        scores.append(_host(value).reshape(-1))
        mask = getattr(module, name + "_mask", None) if name in getattr(module, "__dict__").get(_PRUNED, {}) else None
        masks.append(_host(mask).reshape(-1) if mask is not None else np.ones(scores[-1].size))
        sizes.append(scores[-1].size)
    method = pruning_method(**kwargs)
    final = _combine(method, np.concatenate(scores), np.concatenate(masks))
    offset = 0
    for (module, name), size in zip(parameters, sizes):
        shape = tuple(getattr(module, name).shape)
        custom_from_mask(module, name, final[offset:offset + size].reshape(shape))
        offset += size


def remove(module, name):
    """Makes the pruning of module.<name> permanent: a parameter again, holding weight_orig * weight_mask;
    weight_orig, weight_mask and the forward recomputation go."""
    pruned = getattr(module, "__dict__").get(_PRUNED, {})
    if name not in pruned:
        raise ValueError("Parameter '%s' of module %s has to be pruned before pruning can be removed"
                         % (name, type(module).__name__))
    orig = getattr(module, name + "_orig")
    with _C._GradMode(False):
        weight = _apply_mask(module, name).detach().clone()
        orig.copy_(weight)  # weight_orig's Parameter object itself becomes the weight again, as torch's (a new
    module._set_computed_parameter(name, None)  # one was not in an optimizer made after pruning: never trained)
    module._remove_parameter(name + "_orig")
    module._remove_buffer(name + "_mask")
    module._register_parameter(name, orig)
    del pruned[name]
    _drop_hooks(module, name)
    return module


def is_pruned(module):
    """Whether module or any submodule has a pruned tensor."""
    return any(getattr(m, "__dict__", {}).get(_PRUNED) for m in module.modules())
