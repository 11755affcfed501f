"""tessel.nn.functional: torch.nn.functional's names, each one C++ op (bindings/functional_py.cc).

    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    loss = F.cross_entropy(logits.view(-1, V), targets.view(-1))
"""
import math

from .. import _C
from .._autocast_policy import autocast_off as _autocast_off_eb, float32_under_autocast as _float32_under_autocast_ce
from .._C._functional import (  # noqa: F401
    embedding,
    gelu,
    linear,
    log_softmax,
    sigmoid,
    softmax,
    tanh,
)


from .. import backends as _backends  # (its sdp flags: scaled_dot_product_attention reads them)
from .._grouped_mm import grouped_mm  # noqa: F401,E402 (Mixture-of-Experts grouped GEMM)

_NO_VIABLE_BACKEND = ("No viable backend for scaled_dot_product_attention was found. This is likely due to turning "
                      "off both the math kernel and the fused kernels.")


def scaled_dot_product_attention(*args, **kwargs):
    """torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
    is_causal=False, scale=None, enable_gqa=False): one C++ op. Before it, torch's two Python-visible rules:
    a CausalBias attn_mask (nn/attention/bias.py) picks its own call, and the sdp flags (sdpa_kernel) must leave
    a CPU backend that can run it."""
    mask = args[3] if len(args) > 3 else kwargs.get("attn_mask")
    if mask is not None and not isinstance(mask, _C.Tensor):
        from .attention.bias import CausalBias
        if isinstance(mask, CausalBias):
            return CausalBias._dispatch(*args, **kwargs)
    sdp = _backends._sdp
    if not (sdp["math"] and sdp["flash"]):
        _check_sdpa_backends(sdp, args, kwargs)
    dropout_p = args[4] if len(args) > 4 else kwargs.get("dropout_p", 0.0)
    if dropout_p > 0.0 and len(args) >= 3 and all(
            isinstance(t, _C.Tensor) and t.device.type == "cpu" for t in args[:3]):
        return _sdpa_math_with_dropout(*args, **kwargs)
    return _C._functional.scaled_dot_product_attention(*args, **kwargs)


def _sdpa_math_with_dropout(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
                            enable_gqa=False):
    """torch's CPU attention with dropout: its math kernel (the fused one takes none), composed as torch composes
    it, so the dropout mask is F.dropout's on the probabilities, torch's draws: q and k each scaled by √scale,
    q·kᵀ plus the mask, a softmax that gives 0 to fully masked rows, dropout, then ·v; float16 / bfloat16 in
    float32, rounded at the end. DTensors (heads sharded by tensor parallelism) take the same ops, so their
    dropout is their piece of the whole tensor's torch mask (F.dropout). (The fused C++ op draws its masks from
    the counter-based stream.)"""
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    dtype = query.dtype
    low = dtype in (_C.dtype.float16, _C.dtype.bfloat16)
    q, k, v = (t.float() if low else t for t in (query, key, value))
    factor = math.sqrt(1.0 / math.sqrt(q.size(-1)) if scale is None else abs(scale))
    q = q * (-factor if scale is not None and scale < 0 else factor)
    if enable_gqa and q.size(-3) != k.size(-3):
        k = k.repeat_interleave(q.size(-3) // k.size(-3), -3)
        v = v.repeat_interleave(q.size(-3) // v.size(-3), -3)
    scores = q @ (k.transpose(-2, -1) * factor)
    if is_causal:
        attn_mask = _C._full([q.size(-2), k.size(-2)], 1.0, _C.dtype.bool).tril()
    if attn_mask is not None:
        if attn_mask.dtype == _C.dtype.bool:
            attn_mask = _C._full(list(attn_mask.shape), 0.0, scores.dtype).masked_fill(~attn_mask, -math.inf)
        if scores.is_distributed and not attn_mask.is_distributed:  # the mask replicated on the heads' mesh
            from ..distributed.tensor.experimental import implicit_replication
            with implicit_replication():
                scores = scores + attn_mask
        else:
            scores = scores + attn_mask
    weights = scores.softmax(-1)
    weights = weights.masked_fill(scores.isneginf().all(-1, keepdim=True), 0.0)  # torch's _safe_softmax
    out = dropout(weights, dropout_p, True) @ v
    return out.to(dtype) if low else out


def _check_sdpa_backends(sdp, args, kwargs):
    """torch's CPU choice: the math kernel takes anything; the flash one (the only fused CPU kernel) no dropout
    and no value head size other than the query's and key's. Neither possible: torch's RuntimeErrors (after
    its warnings naming why flash could not run)."""
    if sdp["math"]:
        return
    if not sdp["flash"]:
        raise RuntimeError(_NO_VIABLE_BACKEND)
    named = ("query", "key", "value", "attn_mask", "dropout_p")
    got = dict(zip(named, args), **{k: v for k, v in kwargs.items() if k in named})
    if any(got.get(k) is None for k in named[:3]):
        return  # (the op itself reports the missing argument)
    reasons = []
    if got.get("dropout_p", 0.0) > 0.0:
        reasons.append("Both fused kernels do not support non-zero dropout.")
    q, k, v = (got[name].size(-1) for name in named[:3])
    if not q == k == v:
        reasons.append("Flash attention requires q,k,v to have the same last dimension. Got Query.size(-1): %d, "
                       "Key.size(-1): %d, Value.size(-1): %d instead." % (q, k, v))
    if reasons:
        import warnings
        for text in ["Flash attention kernel not used because:"] + reasons:
            warnings.warn(text, stacklevel=3)
        raise RuntimeError("No available kernel.  Aborting execution.")


_TORCH_TYPE_NAMES = {"float64": "double", "float32": "float", "float16": "c10::Half", "bfloat16": "c10::BFloat16"}


def _check_int_tuple(function, normalized_shape):
    """torch's argument parser: normalized_shape is a sequence of ints (the bound op took a bare int as [n])."""
    if not isinstance(normalized_shape, (tuple, list)):  # (tessel.Size is a tuple)
        raise TypeError("%s(): argument 'normalized_shape' (position 2) must be tuple of ints, not %s"
                        % (function, type(normalized_shape).__name__))
    for i, n in enumerate(normalized_shape):
        if isinstance(n, float):
            raise TypeError("%s(): argument 'normalized_shape' (position 2) must be tuple of ints, but found "
                            "element of type float at pos %d" % (function, i))


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """torch.nn.functional.layer_norm: one C++ op, after torch's check of normalized_shape."""
    _check_int_tuple("layer_norm", normalized_shape)
    return _C._functional.layer_norm(input, normalized_shape, weight, bias, eps)


_rms_norm_warned = []  # torch's TORCH_WARN_ONCE: the mismatch warning once per process


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """torch.nn.functional.rms_norm: one C++ op; a weight of another floating dtype than the input takes torch's
    unfused path (its warning, once): the input normalized in float32 (float64 for float64 input), times the
    weight, cast back to the input's dtype (bfloat16 x with a float32 weight is bfloat16, as torch's)."""
    _check_int_tuple("rms_norm", normalized_shape)
    if weight is not None and weight.dtype != input.dtype and weight.dtype.is_floating_point and \
            input.dtype.is_floating_point:
        if not _rms_norm_warned:
            import warnings
            _rms_norm_warned.append(True)
            name = lambda t: _TORCH_TYPE_NAMES.get(str(t.dtype).rsplit(".", 1)[-1], str(t.dtype))  # noqa: E731
            warnings.warn("Mismatch dtype between input and weight: input dtype = %s, weight dtype = %s, Cannot "
                          "dispatch to fused implementation." % (name(input), name(weight)), stacklevel=2)
    return _C._functional.rms_norm(input, normalized_shape, weight, eps)  # (the unfused path: core/ops/norm.h)


def relu(input, inplace=False):
    """torch.nn.functional.relu (inplace=True: input holds the result, tessel/_inplace.py's apply)."""
    if inplace:
        from .. import _inplace
        return _inplace.apply(input, _C._functional.relu, "relu_")
    return _C._functional.relu(input)


def silu(input, inplace=False):
    """torch.nn.functional.silu (inplace=True: input holds the result, tessel/_inplace.py's apply)."""
    if inplace:
        from .. import _inplace
        return _inplace.apply(input, _C._functional.silu, "silu_")
    return _C._functional.silu(input)


def relu_(input):
    return relu(input, inplace=True)


def bilinear(input1, input2, weight, bias=None):
    """torch.nn.functional.bilinear: out[..., o] = Σ_ij input1[..., i] · weight[o, i, j] · input2[..., j] + bias[o]."""
    lead = list(input1.shape[:-1])
    x1 = input1.reshape(-1, input1.shape[-1])
    x2 = input2.reshape(-1, input2.shape[-1])
    o, i, j = weight.shape
    # (x1 · W_o) for every o at once: [B, in1] @ [in1, o·in2] -> [B, o, in2], then the dot with x2
    projected = (x1 @ weight.permute(1, 0, 2).reshape(i, o * j)).reshape(-1, o, j)
    out = (projected * x2.unsqueeze(1)).sum(-1)
    if bias is not None:
        out = out + bias
    return out.reshape(*(lead + [o]))


def gumbel_softmax(logits, tau=1.0, hard=False, eps=1e-10, dim=-1):
    """torch.nn.functional.gumbel_softmax: softmax((logits + Gumbel noise) / tau) from the default generator;
    hard=True returns the one-hot of the argmax with the soft sample's gradient (straight-through)."""
    from .. import rand_like
    if not logits.is_distributed:  # torch's: exponential_ noise (its CPU draws, value for value), contiguous
        gumbels = -_C._empty(list(logits.shape), logits.dtype).exponential_().log()
    else:
        u = rand_like(logits)
        gumbels = -((-(u.clamp(min=1e-20)).log()).clamp(min=1e-20)).log()
    y = ((logits + gumbels) / tau).softmax(dim)
    if not hard:
        return y
    index = y.argmax(dim, keepdim=True)
    from .._extra import one_hot
    d = dim % y.ndim
    hot = one_hot(index.squeeze(d), y.shape[d]).to(y.dtype).movedim(-1, d)
    return hot - y.detach() + y


def dropout(input, p=0.5, training=True, inplace=False):
    """torch.nn.functional.dropout: in training, zeroes each element with probability p and scales the
    rest by 1 / (1 - p), drawing from tessel's default generator (tessel.manual_seed). A CPU tensor's mask is
    torch's (its CPU dropout: input * bernoulli_(1 - p) / (1 - p) from the generator's host stream,
    core/tensor/torch_random.h), so a seeded script drops what torch drops; a DTensor's shards take their blocks
    of one counter-based mask (the same seed on every rank). Not training or p == 0 returns input."""
    if p < 0 or p > 1:
        raise ValueError("dropout probability has to be between 0 and 1, but got %s" % p)
    if not training or p == 0:
        return input  # the object itself, as torch
    if p < 1 and input.device.type == "cpu" and input.dtype.is_floating_point and not (
            input.is_distributed and any(pl.is_partial() for pl in input.placements)):
        noise = _torch_dropout_noise(input, p)
        return input.mul_(noise) if inplace else input * noise
    if inplace:
        from .. import _inplace
        return _inplace.apply(input, lambda t: _C._functional.dropout(t, p, training), "dropout_")
    return _C._functional.dropout(input, p, training)


def _torch_dropout_noise(input, p):
    """torch's CPU dropout noise for input: bernoulli_(1 - p) / (1 - p) in input's dtype, drawn in its memory order
    (empty_like keeps the strides). A DTensor's is its piece of the noise the whole tensor draws, so sharded
    dropout drops what it drops on one rank (every rank draws the whole mask, the same seed on each)."""
    from .._tensor import empty_like
    whole = _C._empty(list(input.shape), input.dtype) if input.is_distributed else empty_like(input.detach())
    noise = _C._torch_random_(whole, "bernoulli", 1.0 - p, 0.0, None).div_(1.0 - p)
    if not input.is_distributed:
        return noise
    piece = empty_like(input.detach())
    _C._assign_full(piece, noise)
    return piece


def _no_weight_grad(function, **weights):
    """torch's refusal of a weight that requires grad where its kernel has no gradient for it (nll_loss, the
    BCE losses, multi_margin_loss): tessel would otherwise give it none, silently."""
    for name, w in weights.items():
        if w is not None and w.requires_grad and _C.is_grad_enabled():
            raise RuntimeError("The function '%s' is not differentiable with respect to argument '%s'. This input "
                               "cannot have requires_grad True." % (function, name))


def _check_weight_dtype(input, weight):
    """torch's nll_loss kernel takes class weights of the input's dtype only (a float64 weight next to float32
    logits is an error there, not a promotion)."""
    if weight is not None and weight.dtype != input.dtype:
        from .._subscript import _torch_dtype_name
        raise RuntimeError("expected scalar type %s but found %s" % (_torch_dtype_name(input.dtype),
                                                                     _torch_dtype_name(weight.dtype)))


def _soft_cross_entropy(input, target, weight, reduction, label_smoothing):
    """torch's cross-entropy against class probabilities: -sum_c w_c t_c log softmax(x)_c per element, the
    targets first smoothed to t (1 - eps) + eps / C; "mean" divides by the number of elements (not the weights)."""
    class_dim = 0 if input.ndim == 1 else 1
    classes = input.shape[class_dim]
    if label_smoothing > 0:
        target = target * (1 - label_smoothing) + label_smoothing / classes
    terms = log_softmax(input, class_dim) * target
    if weight is not None:
        shape = [1] * input.ndim
        shape[class_dim] = classes
        terms = terms * weight.reshape(*shape)  # differentiable in weight; dtypes promote, as torch's composite
    loss = -terms.sum(class_dim)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.mean()
    raise ValueError("%s is not a valid value for reduction" % reduction)


@_float32_under_autocast_ce  # (torch's float32 list: probability targets too)
def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    """torch.nn.functional.cross_entropy over class indices: (N, C), (C,) or (N, C, d1, ...) logits; one fused
    C++ op (log-softmax, pick, ignore_index, label smoothing, reduction) when there are no class weights.
    With `weight` (C,), as torch: row i costs weight[target_i] * -log p(target_i) and the mean divides by
    the sum of weight[target_i] over the rows not ignored; label smoothing adds eps/C * sum_c weight[c] *
    -log p(c), normalized the same way. The weights take no gradient (torch's nll_loss has none for them).
    A floating target of the input's shape holds class probabilities (_soft_cross_entropy)."""
    if size_average is not None or reduce is not None:
        from .._losses import _legacy
        reduction = _legacy(size_average, reduce, reduction)
    if target.dtype == _C.dtype.uint8:  # torch takes Byte class indices as well as Long
        target = target.long()
    if target.dtype.is_floating_point and tuple(target.shape) == tuple(input.shape):
        if ignore_index != -100:
            raise RuntimeError("ignore_index is not supported for floating point target")
        return _soft_cross_entropy(input, target, weight, reduction, label_smoothing)
    _no_weight_grad("nll_loss_forward", weight=weight)
    _check_weight_dtype(input, weight)
    loss = _C._functional.cross_entropy(input, target, None, None, ignore_index, None,
                                        reduction if weight is None else "none", 0.0 if weight is not None
                                        else label_smoothing)
    if weight is None:
        return loss
    if reduction not in ("none", "mean", "sum"):
        raise ValueError("%s is not a valid value for reduction" % reduction)
    class_dim = 0 if input.ndim == 1 else 1
    classes = input.shape[class_dim]
    if tuple(weight.shape) != (classes,):
        raise RuntimeError("weight tensor should be defined either for all %d classes or no classes but got weight "
                           "tensor of shape: %s" % (classes, list(weight.shape)))
    weight = weight.detach().to(loss.dtype)
    valid = (target != ignore_index).to(loss.dtype)
    rows = (target * (target != ignore_index).to(target.dtype)).reshape(-1)  # ignored rows read class 0
    picked = weight[rows].reshape(*target.shape) * valid
    loss = loss * picked
    smooth = None
    if label_smoothing > 0:
        shape = [1] * input.ndim
        shape[class_dim] = classes
        smooth = -(log_softmax(input, class_dim) * weight.reshape(*shape)).sum(class_dim) * valid
    if reduction == "none":
        return loss if smooth is None else loss * (1 - label_smoothing) + smooth * (label_smoothing / classes)
    loss, total = loss.sum(), picked.sum()
    smooth = None if smooth is None else smooth.sum()
    if reduction == "mean":
        loss = loss / total
        smooth = None if smooth is None else smooth / total
    return loss if smooth is None else loss * (1 - label_smoothing) + smooth * (label_smoothing / classes)


def _channel_dropout(name, spatial):
    def fn(input, p=0.5, training=True, inplace=False):
        """torch.nn.functional.%s: zeroes whole channels (dim 1 of [N, C, *spatial], dim 0 without the
        batch) with probability p and scales the others by 1 / (1 - p): one draw per channel.""" % name
        if input.ndim not in (spatial + 1, spatial + 2):
            raise RuntimeError("%s: Expected %dD or %dD input, but received a %dD input"
                               % (name, spatial + 1, spatial + 2, input.ndim))
        return _feature_dropout(input, p, training, 2 if input.ndim == spatial + 2 else 1)
    fn.__name__ = name
    return fn


def _feature_dropout(input, p, training, channel_dims):
    """Zeroes whole slices: one keep/drop draw per entry of the first `channel_dims` dims (torch's feature
    dropout), the survivors scaled by 1 / (1 - p)."""
    if not training or p == 0:
        return input
    keep = list(input.shape[:channel_dims]) + [1] * (input.ndim - channel_dims)
    return input * dropout(_C._full(keep, 1.0, input.dtype), p, True)


def _deprecated_dims(name, spatial, ndim):
    import warnings
    warnings.warn("%s: Received a %d-D input to %s, which is deprecated and will result in an error in a future "
                  "release. To retain the behavior and silence this warning, please use dropout instead. Note that "
                  "%s exists to provide channel-wise dropout on inputs with %d spatial dimensions, a channel "
                  "dimension, and an optional batch dimension (i.e. %dD or %dD inputs)."
                  % (name, ndim, name, name, spatial, spatial + 1, spatial + 2), stacklevel=3)


def dropout2d(input, p=0.5, training=True, inplace=False):
    """torch.nn.functional.dropout2d, torch's rules: whole (n, c) slices of [N, C, ...] are dropped; a 3-D input
    is read as (N, C, L) (torch warns so), other ranks than 3 and 4 are deprecated (a warning) and dropped the
    same way over their first two dims."""
    if input.ndim not in (3, 4):
        _deprecated_dims("dropout2d", 2, input.ndim)
    if input.ndim == 3:
        import warnings
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D dropout behavior "
                      "is desired - input is interpreted as shape (N, C, L), where C is the channel dim. This "
                      "behavior will change in a future release to interpret the input as one without a batch "
                      "dimension, i.e. shape (C, H, W). To maintain the 1D channel-wise dropout behavior, please "
                      "switch to using dropout1d instead.", stacklevel=2)
    return _feature_dropout(input, p, training, 2)


def dropout3d(input, p=0.5, training=True, inplace=False):
    """torch.nn.functional.dropout3d: whole channels of [N, C, D, H, W] ([C, D, H, W] unbatched); other ranks
    are deprecated (a warning) and read as unbatched, as torch's."""
    if input.ndim not in (4, 5):
        _deprecated_dims("dropout3d", 3, input.ndim)
    return _feature_dropout(input, p, training, 2 if input.ndim == 5 else 1)


dropout1d = _channel_dropout("dropout1d", 1)


@_autocast_off_eb  # (on neither of torch's autocast lists: the weight's dtype)
def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False, mode="mean",
                  sparse=False, per_sample_weights=None, include_last_offset=False, padding_idx=None):
    """torch.nn.functional.embedding_bag: each bag's rows of weight summed, averaged or maxed. input is
    [B, L] (B bags of L) or 1-D with offsets (bag starts); per_sample_weights scale the rows ("sum" only);
    entries equal to padding_idx are left out (an empty bag gives zeros). Composed of embedding and a
    matmul with the bag membership (gradients to weight and per_sample_weights)."""
    import numpy as np
    from .._tensor import tensor as make_tensor, zeros
    if sparse:
        raise NotImplementedError("embedding_bag: sparse gradients are not supported (tessel has no sparse tensors)")
    if mode not in ("sum", "mean", "max"):
        raise ValueError("mode has to be one of sum, mean or max")
    if mode == "max" and scale_grad_by_freq:
        raise ValueError("max mode does not support scaling the gradient by the frequency")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError("embedding_bag: per_sample_weights was not None. per_sample_weights is only "
                                  "supported for mode='sum' (got mode='%s'). Please open a feature request on "
                                  "GitHub." % mode)
    if per_sample_weights is not None and tuple(per_sample_weights.shape) != tuple(input.shape):
        raise ValueError("embedding_bag: If per_sample_weights (%s) is not None, then it must have the same shape as "
                         "the input (%s)" % (list(per_sample_weights.shape), list(input.shape)))
    idx = input.numpy().astype(np.int64)
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError("if input is 2D, then offsets has to be None, as input is treated is a mini-batch of "
                             "fixed length sequences.")
        bags, length = idx.shape
        starts = np.arange(bags) * length
        flat = idx.reshape(-1)
    elif input.ndim == 1:
        if offsets is None:
            raise ValueError("offsets has to be a 1D Tensor but got None")
        flat = idx
        starts = offsets.numpy().astype(np.int64)
        if len(starts) and starts[0] != 0:
            raise RuntimeError("offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from "
                               "position 0. However, got %d" % starts[0])
        if len(starts) and starts[-1] > len(flat):
            raise RuntimeError("offsets[-1] can not be greater than input's length %d but got offsets[-1] of %d"
                               % (len(flat), starts[-1]))
        last_end = len(flat)
        if include_last_offset:  # the last offset ends the last bag (entries after it are left out, as torch)
            starts, last_end = starts[:-1], int(starts[-1])
        bags = len(starts)
    else:
        raise ValueError("input has to be 1D or 2D Tensor, but got Tensor of dimension %d" % input.ndim)
    if max_norm is not None:
        from .._C import _functional as _f
        _f.embedding(input.reshape(-1), weight, None, max_norm, norm_type)  # renormalize the rows in place
    ends = list(starts[1:]) + [last_end if input.ndim == 1 else len(flat)]
    keep = np.ones(len(flat), dtype=bool) if padding_idx is None else flat != padding_idx % weight.shape[0]
    rows = embedding(make_tensor(flat if len(flat) else np.zeros(0, np.int64)), weight, None, None, 2.0,
                     scale_grad_by_freq)  # [N, D]
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.reshape(-1, 1)
    if mode == "max":
        out = []
        for s, e in zip(starts, ends):
            members = [i for i in range(s, e) if keep[i]]
            out.append(rows[members].max(0).values if members else zeros(weight.shape[1], dtype=weight.dtype))
        from .. import stack
        return stack(out, 0) if out else zeros(0, weight.shape[1], dtype=weight.dtype)
    member = np.zeros((bags, len(flat)), dtype=np.float64)
    for b, (s, e) in enumerate(zip(starts, ends)):
        member[b, s:e] = keep[s:e]
    if mode == "mean":
        member /= np.maximum(member.sum(1, keepdims=True), 1.0)
    return make_tensor(member, dtype=weight.dtype) @ rows


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """Mean (or sum, or none) of the squared differences; with torch 2.15's weight (input's shape), the weighted
    ones, their mean being Σ w·e / Σ w."""
    if size_average is not None or reduce is not None:
        from . import _reduction
        reduction = _reduction.legacy_get_string(size_average, reduce)
    from .._extra import _reduce
    if tuple(input.shape) != tuple(target.shape):
        import warnings
        warnings.warn("Using a target size (%s) that is different to the input size (%s). This will likely lead to "
                      "incorrect results due to broadcasting. Please ensure they have the same size."
                      % (_size_text(target), _size_text(input)), stacklevel=2)
    from .._losses import _weighted_reduce
    return _weighted_reduce((input - target).pow(2.0), input, weight, reduction)


def multi_head_attention_forward(*args, **kwargs):
    """torch.nn.functional.multi_head_attention_forward (nn/_transformer.py)."""
    from ._transformer import multi_head_attention_forward as forward
    return forward(*args, **kwargs)


def _canonical_mask(mask, mask_name, other_type, other_name, target_type, check_other=True):
    """torch's private helper (model code calls it): a bool mask as a float one of target_type, -inf where
    True (a float mask as it is); AssertionError for other dtypes, the deprecation warning when check_other and
    the mask's dtype is not other_type."""
    if mask is None:
        return None
    is_float = mask.dtype.is_floating_point
    if mask.dtype != _C.dtype.bool and not is_float:
        raise AssertionError("only bool and floating types of %s are supported" % mask_name)
    if check_other and other_type is not None and mask.dtype != other_type:
        import warnings
        warnings.warn("Support for mismatched %s and %s is deprecated. Use same type for both instead."
                      % (mask_name, other_name), stacklevel=2)
    if not is_float:
        mask = _C._functional.where(mask, _C._full([], float("-inf"), target_type), _C._full([], 0.0, target_type))
    return mask


def _size_text(t):
    return "torch.Size([%s])" % ", ".join(str(int(n)) for n in t.shape)


from .._dtensor_compose import wrap_all as _wrap_composed  # noqa: E402 (their constants next to DTensors)
from .._extra import FUNCTIONAL as _EXTRA, _float32_under_autocast  # noqa: E402 (one_hot, pad, the other losses)
globals().update(_wrap_composed(_EXTRA))
from ._conv_ops import FUNCTIONAL as _CONV  # noqa: E402 (conv*, conv_transpose*, pools, fold/unfold, batch_norm)
globals().update(_wrap_composed(_CONV))
mse_loss = _float32_under_autocast(mse_loss)
