"""tessel.nn's attention and transformer layers: MultiheadAttention and TransformerEncoderLayer /
TransformerEncoder / TransformerDecoderLayer / TransformerDecoder / Transformer, composed of linear, matmul,
softmax, LayerNorm and dropout, with torch's parameter names, submodule order and mask conventions. Split
from modules.py by concept.
"""
import builtins
import copy
import warnings

from .. import _C, _dtypes
from . import functional
from ._containers import ModuleList
from ._layers import Dropout
from .modules import Module, Parameter


class NonDynamicallyQuantizableLinear(_C.Linear):
    """torch.nn.modules.linear.NonDynamicallyQuantizableLinear: MultiheadAttention's out_proj, a Linear."""


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention (same parameter names: in_proj_weight [3E, E], or q/k/v_proj_weight [E, E],
    [E, kdim], [E, vdim] when kdim / vdim differ from embed_dim; in_proj_bias, out_proj; bias_k / bias_v [1, 1, E]
    with add_bias_kv), composed of linear, matmul, softmax and dropout: inputs [L, N, E] ([N, L, E] with
    batch_first), a bool attn_mask marks what is NOT attended (torch's MHA convention, the opposite of SDPA's), a
    float one is added; key_padding_mask [N, S] True drops a key; add_bias_kv appends the learned key / value, and
    add_zero_attn a zero one, to every sequence (the masks padded so both are attended); returns (output,
    attention weights averaged over heads, or per head, or None). Initialized as torch (xavier-uniform
    projections, zero biases, xavier-normal bias_k / bias_v)."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None):
        super().__init__()
        from .._device import check_cpu
        check_cpu(device, "MultiheadAttention")
        if embed_dim % num_heads:
            raise AssertionError("embed_dim must be divisible by num_heads")
        dtype = dtype or _dtypes.default_float()
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.head_dim = embed_dim // num_heads
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(_C._empty([3 * embed_dim, embed_dim], dtype))
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            for name, width in (("q_proj_weight", embed_dim), ("k_proj_weight", self.kdim),
                                ("v_proj_weight", self.vdim)):
                setattr(self, name, Parameter(_C._empty([embed_dim, width], dtype)))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(_C._empty([3 * embed_dim], dtype))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, dtype=dtype)
        if add_bias_kv:
            self.bias_k = Parameter(_C._empty([1, 1, embed_dim], dtype))
            self.bias_v = Parameter(_C._empty([1, 1, embed_dim], dtype))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self):
        """torch's: xavier-uniform projections, zero biases (out_proj's too), xavier-normal bias_k / bias_v."""
        from . import init
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        for b in (self.bias_k, self.bias_v):
            if b is not None:
                init.xavier_normal_(b)

    def merge_masks(self, attn_mask, key_padding_mask, query):
        """torch's (its fast path's helper): (mask, type) with type 1 for a key_padding_mask alone, 2 with an
        attn_mask, both then expanded to [batch, heads, L, L] and added; (None, None) without masks."""
        mask_type, merged = None, None
        if key_padding_mask is not None:
            mask_type, merged = 1, key_padding_mask
        if attn_mask is not None:
            batch, L, _ = query.shape
            mask_type = 2
            if attn_mask.dim() == 3:
                merged = attn_mask.view(batch, -1, L, L)
            else:
                merged = attn_mask.view(1, 1, L, L).expand(batch, self.num_heads, -1, -1)
            if key_padding_mask is not None:
                merged = merged + key_padding_mask.view(batch, 1, 1, L).expand(-1, self.num_heads, -1, -1)
        return merged, mask_type

    def _projections(self):
        """(weight, bias) of the q, k and v projections."""
        E, b = self.embed_dim, self.in_proj_bias
        if self._qkv_same_embed_dim:
            W = self.in_proj_weight
            weights = [W[i * E:(i + 1) * E] for i in range(3)]
        else:
            weights = [self.q_proj_weight, self.k_proj_weight, self.v_proj_weight]
        return [(w, None if b is None else b[i * E:(i + 1) * E]) for i, w in enumerate(weights)]

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        import math
        import numpy as np
        from .._tensor import tensor
        w = _C._functional.where
        _check_mask_dtypes(key_padding_mask, attn_mask)
        if self.batch_first and query.ndim == 3:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        unbatched = not _mha_shape_check(query, key, value, key_padding_mask, attn_mask, self.num_heads)
        if unbatched:  # torch's unbatched form: [L, E], key_padding_mask [S]
            query, key, value = (t.unsqueeze(1) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        L, N, E = query.shape
        S, H, hd = key.shape[0], self.num_heads, self.head_dim
        if is_causal and attn_mask is None:
            raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the Transformer module "
                               "method `generate_square_subsequent_mask` to create this mask.")
        if E != self.embed_dim:
            raise AssertionError("was expecting embedding dimension of %d, but got %d" % (self.embed_dim, E))
        if self._qkv_same_embed_dim and tuple(key.shape) != tuple(value.shape):
            raise AssertionError("key shape %s does not match value shape %s"
                                 % (_size_text(key.shape), _size_text(value.shape)))
        if not self._qkv_same_embed_dim and tuple(key.shape[:2]) != tuple(value.shape[:2]):
            raise AssertionError("key's sequence and batch dims %s do not match value's %s"
                                 % (_size_text(key.shape[:2]), _size_text(value.shape[:2])))
        attn_mask = _checked_attn_mask_shape(attn_mask, L, S, N * H)
        if is_causal and key_padding_mask is None and not need_weights:
            # torch's: the hint wins over the mask given (scaled_dot_product_attention's is_causal)
            attn_mask = tensor(np.triu(np.ones((L, S), dtype=bool), 1))
        q, k, v = (functional.linear(t, weight, bias) for t, (weight, bias) in zip((query, key, value),
                                                                                  self._projections()))
        if self.bias_k is not None:  # one more (learned) key and value per sequence, attended by every query
            k = _C._functional.cat([k, self.bias_k.expand(1, N, E)], 0)
            v = _C._functional.cat([v, self.bias_v.expand(1, N, E)], 0)
            attn_mask, key_padding_mask, S = _pad_key(attn_mask), _pad_key(key_padding_mask), S + 1
        q, k, v = (t.reshape(t.shape[0], N * H, hd).transpose(0, 1) for t in (q, k, v))  # [N·H, len, hd]
        if self.add_zero_attn:  # and a zero one
            k = _C._functional.cat([k, _C._full([N * H, 1, hd], 0.0, k.dtype)], 1)
            v = _C._functional.cat([v, _C._full([N * H, 1, hd], 0.0, v.dtype)], 1)
            attn_mask, key_padding_mask, S = _pad_key(attn_mask), _pad_key(key_padding_mask), S + 1
        if key_padding_mask is not None:
            for d, want in enumerate((N, S)):
                if key_padding_mask.shape[d] != want:
                    raise AssertionError("Expected key_padded_mask.shape[%d] to be %d, but got %d"
                                         % (d, want, key_padding_mask.shape[d]))
        scores = (q * (1.0 / math.sqrt(hd))) @ k.transpose(1, 2)  # [N·H, L, S]
        neg = _C._full([], -math.inf, scores.dtype)
        zero = _C._full([], 0.0, scores.dtype)
        if attn_mask is not None:
            add = w(attn_mask, neg, zero) if attn_mask.dtype == _dtypes.bool else attn_mask
            scores = scores + add
        if key_padding_mask is not None:  # bool: True drops the key; float: added to the scores
            kpm = key_padding_mask
            add = w(kpm, neg, zero) if kpm.dtype == _dtypes.bool else kpm.to(scores.dtype)
            scores = scores + add.reshape(N, 1, 1, S).expand(N, H, 1, S).reshape(N * H, 1, S)
        if need_weights or (attn_mask is None and key_padding_mask is None):
            attn = scores.softmax(-1)
        else:
            # torch computes this case with scaled_dot_product_attention, whose rows with every key masked are 0
            # (left padding under a causal mask; the encoder and decoder layers pass need_weights=False), with 0
            # gradients, where the softmax's are NaN: such rows' scores become 0 before it, their weights 0 after
            dead = (scores == neg).all(-1, keepdim=True)
            attn = w(dead, zero, w(dead, zero, scores).softmax(-1))
        if self.dropout > 0.0 and self.training:
            attn = functional.dropout(attn, self.dropout)
        out = (attn @ v).transpose(0, 1).reshape(L, N, E)
        out = self.out_proj(out)
        if unbatched:
            out = out.squeeze(1)
        elif self.batch_first:
            out = out.transpose(0, 1)
        if not need_weights:
            return out, None
        weights = attn.reshape(N, H, L, S)
        weights = weights.mean(1) if average_attn_weights else weights
        return out, (weights.squeeze(0) if unbatched else weights)


def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias,
                                 bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias,
                                 training=True, key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None, k_proj_weight=None,
                                 v_proj_weight=None, static_k=None, static_v=None, average_attn_weights=True,
                                 is_causal=False):
    """torch.nn.functional.multi_head_attention_forward (CLIP-style code calls it with a module's tensors):
    MultiheadAttention's computation over the given weights, inputs [L, N, E] or [L, E]."""
    import types
    if static_k is not None or static_v is not None:
        raise NotImplementedError("multi_head_attention_forward: static_k / static_v are not supported by tessel")
    E = query.shape[-1]
    if E != embed_dim_to_check:
        raise AssertionError("was expecting embedding dimension of %d, but got %d" % (embed_dim_to_check, E))
    if E % num_heads:
        raise AssertionError("embed_dim %d not divisible by num_heads %d" % (E, num_heads))
    shim = types.SimpleNamespace(
        batch_first=False, num_heads=num_heads, head_dim=E // num_heads, embed_dim=E,
        _qkv_same_embed_dim=not use_separate_proj_weight, in_proj_weight=in_proj_weight, in_proj_bias=in_proj_bias,
        q_proj_weight=q_proj_weight, k_proj_weight=k_proj_weight, v_proj_weight=v_proj_weight, bias_k=bias_k,
        bias_v=bias_v, add_zero_attn=add_zero_attn, dropout=dropout_p, training=training,
        out_proj=lambda t: functional.linear(t, out_proj_weight, out_proj_bias))
    shim._projections = lambda: MultiheadAttention._projections(shim)
    return MultiheadAttention.forward(shim, query, key, value, key_padding_mask, need_weights, attn_mask,
                                      average_attn_weights, is_causal)


def _size_text(shape):
    """A shape as torch's messages print it (`f"{t.shape}"`): tessel.Size([...]) here."""
    from .._size import Size
    return repr(Size([int(n) for n in shape]))


def _mha_shape_check(query, key, value, key_padding_mask, attn_mask, num_heads):
    """torch's checks of MultiheadAttention's input ranks (AssertionErrors): True for batched (3-D) inputs."""
    if query.dim() not in (2, 3):
        raise AssertionError("query should be unbatched 2D or batched 3D tensor but received %d-D query tensor"
                             % query.dim())
    batched = query.dim() == 3
    form = "batched (3-D)" if batched else "unbatched (2-D)"
    if key.dim() != query.dim() or value.dim() != query.dim():
        raise AssertionError("For %s `query`, expected `key` and `value` to be %d-D but found %d-D and %d-D tensors "
                             "respectively" % (form, query.dim(), key.dim(), value.dim()))
    if key_padding_mask is not None and key_padding_mask.dim() != query.dim() - 1:
        raise AssertionError("For %s `query`, expected `key_padding_mask` to be `None` or %d-D but found %d-D tensor "
                             "instead" % (form, query.dim() - 1, key_padding_mask.dim()))
    if attn_mask is not None:
        if attn_mask.dim() not in (2, 3):
            raise AssertionError("For %s `query`, expected `attn_mask` to be `None`, 2-D or 3-D but found %d-D "
                                 "tensor instead" % (form, attn_mask.dim()))
        want = (num_heads, query.shape[0], key.shape[0])
        if not batched and attn_mask.dim() == 3 and tuple(attn_mask.shape) != want:
            raise AssertionError("Expected `attn_mask` shape to be %s but got %s" % (want, _size_text(attn_mask.shape)))
    return batched


def _check_mask_dtypes(key_padding_mask, attn_mask):
    """torch's _canonical_mask checks of MultiheadAttention's masks: bool or floating dtypes, and the deprecation
    warning for a key_padding_mask whose dtype is not the attn_mask's."""
    for name, mask in (("key_padding_mask", key_padding_mask), ("attn_mask", attn_mask)):
        if mask is not None and mask.dtype != _dtypes.bool and not mask.dtype.is_floating_point:
            raise AssertionError("only bool and floating types of %s are supported" % name)
    if key_padding_mask is not None and attn_mask is not None and \
            (key_padding_mask.dtype == _dtypes.bool) != (attn_mask.dtype == _dtypes.bool):
        warnings.warn("Support for mismatched key_padding_mask and attn_mask is deprecated. Use same type for both "
                      "instead.")


def _checked_attn_mask_shape(attn_mask, L, S, batch_heads):
    """torch's shape check of the attn_mask: [L, S] or [N·heads, L, S] (RuntimeErrors)."""
    if attn_mask is None:
        return None
    want = {2: (L, S), 3: (batch_heads, L, S)}.get(attn_mask.ndim)
    if want is None:
        raise RuntimeError("attn_mask's dimension %d is not supported" % attn_mask.ndim)
    if tuple(attn_mask.shape) != want:
        raise RuntimeError("The shape of the %dD attn_mask is %s, but should be %s."
                           % (attn_mask.ndim, _size_text(attn_mask.shape), want))
    return attn_mask


def _pad_key(mask):
    """A mask over keys with one more key at the end, attended (False, or 0.0 for a float mask); None stays."""
    if mask is None:
        return None
    return _C._functional.cat([mask, _C._full(list(mask.shape[:-1]) + [1], 0.0, mask.dtype)], mask.ndim - 1)


def _transformer_activation(layer, activation):
    """The feed-forward activation: "relu" / "gelu" (torch's F.relu / F.gelu, plain attributes) or a callable; a
    module is a child named "activation", as torch's (its parameters, hooks, printing; TransformerEncoder's
    deep copies give each layer its own)."""
    if isinstance(activation, str):
        activation = _get_activation_fn(activation)
    layer.activation = activation


def _init_transformer_layer(layer, cross, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                            batch_first, norm_first, bias, device, dtype):
    """The submodules of an encoder (cross=False) or decoder (cross=True: multihead_attn, norm3, dropout3)
    layer, registered in torch's order so parameters() and the state dict list as torch's."""
    from . import LayerNorm, Linear
    dtype = dtype or _dtypes.default_float()

    def attention():
        return MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, device=device,
                                  dtype=dtype)
    layer.self_attn = attention()
    if cross:
        layer.multihead_attn = attention()
    layer.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
    layer.dropout = Dropout(dropout)
    layer.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
    layer.norm_first = norm_first
    for i in range(1, 4 if cross else 3):
        setattr(layer, "norm%d" % i, LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype))
    for i in range(1, 4 if cross else 3):
        setattr(layer, "dropout%d" % i, Dropout(dropout))
    _transformer_activation(layer, activation)
    if not cross:  # torch's encoder-layer flag: 1 for relu, 2 for gelu, 0 for anything else
        from . import GELU, ReLU
        act = layer.activation
        layer.activation_relu_or_gelu = 1 if act is functional.relu or isinstance(act, ReLU) else \
            2 if act is functional.gelu or isinstance(act, GELU) else 0


class TransformerEncoderLayer(Module):
    """torch.nn.TransformerEncoderLayer: self-attention (MultiheadAttention) and a feed-forward block, each
    with dropout, a residual and a LayerNorm (after, or before with norm_first); torch's submodules in torch's
    order (self_attn, linear1, dropout, linear2, norm1, norm2, dropout1, dropout2), so parameters() and the
    state dict list as torch's do."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu", layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True, device=None, dtype=None):
        super().__init__()
        _init_transformer_layer(self, False, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                                batch_first, norm_first, bias, device, dtype)

    def _sa_block(self, x, mask, key_padding_mask, is_causal, drop=None):
        out = self.self_attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False, attn_mask=mask,
                             is_causal=is_causal)[0]
        return (drop or self.dropout1)(out)

    def _ff_block(self, x, drop=None):
        return (drop or self.dropout2)(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x))


def _why_not_nested(layer):
    """torch's reason for a TransformerEncoder not to take its nested-tensor fast path ("" when it would)."""
    name = "encoder_layer"
    attn = getattr(layer, "self_attn", None)
    if not isinstance(layer, TransformerEncoderLayer):
        return "%s was not TransformerEncoderLayer" % name
    if layer.norm_first:
        return "%s.norm_first was True" % name
    if not attn.batch_first:
        return "%s.self_attn.batch_first was not True(use batch_first for better inference performance)" % name
    if not attn._qkv_same_embed_dim:
        return "%s.self_attn._qkv_same_embed_dim was not True" % name
    if attn.in_proj_bias is None:
        return "%s.self_attn was passed bias=False" % name
    if not layer.activation_relu_or_gelu:
        return "%s.activation_relu_or_gelu was not True" % name
    if layer.norm1.eps != layer.norm2.eps:
        return "%s.norm1.eps was not equal to %s.norm2.eps" % (name, name)
    if attn.num_heads % 2 == 1:
        return "%s.self_attn.num_heads is odd" % name
    return ""


class TransformerEncoder(Module):
    """torch.nn.TransformerEncoder: num_layers copies of encoder_layer (same initial weights, as torch's
    deepcopy) in `layers`, then an optional norm."""

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True, mask_check=True):
        super().__init__()
        # torch deep-copies the layer (any layer class, a user's own included)
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers, self.norm = num_layers, norm
        self.enable_nested_tensor = self.use_nested_tensor = enable_nested_tensor
        self.mask_check = mask_check
        why = _why_not_nested(encoder_layer)
        if enable_nested_tensor and why:  # torch's warning (tessel has no nested-tensor path either way)
            warnings.warn("enable_nested_tensor is True, but self.use_nested_tensor is False because %s" % why,
                          stacklevel=2)
            self.use_nested_tensor = False

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        x, keep = src, None
        if self._takes_nested_path(src, mask, src_key_padding_mask):
            # torch's inference path packs each sequence's first sum(keep) tokens into a nested tensor (which
            # ones are padding is not looked at again: with mask_check=False an interior hole keeps a padded
            # token and drops a kept one at the end), runs the layers on it and pads it back with zeros: the
            # same as a padding mask that keeps those first tokens, their tail zeroed before the final norm
            import numpy as np
            from .._tensor import tensor
            counts = (src_key_padding_mask.numpy() == 0).sum(-1)  # a float mask's 0 keeps a token, as a bool False
            keep_np = np.arange(src_key_padding_mask.shape[-1])[None, :] < counts[:, None]
            keep = tensor(keep_np)
            src_key_padding_mask = tensor(~keep_np)
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        if keep is not None:
            x = _C._functional.where(keep.unsqueeze(-1), x, _C._full([], 0.0, x.dtype))
        return self.norm(x) if self.norm is not None else x

    def _takes_nested_path(self, src, mask, key_padding_mask):
        """torch's conditions for TransformerEncoder's sparsity fast path (inference with a padding mask)."""
        from .. import is_grad_enabled
        from ..amp import is_autocast_enabled
        first = self.layers[0] if len(self.layers) else None
        if first is None or not getattr(self, "use_nested_tensor", False) or first.training or src.dim() != 3:
            return False
        if key_padding_mask is None or mask is not None or is_autocast_enabled("cpu"):
            return False
        if is_grad_enabled() and (src.requires_grad or builtins.any(p.requires_grad for p in first.parameters())):
            return False
        if getattr(self, "mask_check", True):  # the padding must be at the end of each sequence (left aligned)
            import numpy as np
            pad = key_padding_mask.numpy() if key_padding_mask.dtype == _dtypes.bool else \
                key_padding_mask.numpy() != 0
            if (np.diff(pad.astype(np.int8), axis=-1) < 0).any():
                return False
        return True


class TransformerDecoderLayer(Module):
    """torch.nn.TransformerDecoderLayer: masked self-attention, cross-attention over the encoder's memory
    (multihead_attn) and the feed-forward block, each with dropout, a residual and a LayerNorm (norm1..3,
    after, or before with norm_first); torch's submodules in torch's order."""

    _sa_block = TransformerEncoderLayer._sa_block

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu", layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True, device=None, dtype=None):
        super().__init__()
        _init_transformer_layer(self, True, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                                batch_first, norm_first, bias, device, dtype)

    def _mha_block(self, x, memory, mask, key_padding_mask, is_causal):
        return self.dropout2(self.multihead_attn(x, memory, memory, key_padding_mask=key_padding_mask,
                                                 need_weights=False, attn_mask=mask, is_causal=is_causal)[0])

    def _ff_block(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))
        return self.norm3(x + self._ff_block(x))


class TransformerDecoder(TransformerEncoder):
    """torch.nn.TransformerDecoder: num_layers copies of decoder_layer (same initial weights) in `layers`, then
    an optional norm."""

    def __init__(self, decoder_layer, num_layers, norm=None):
        Module.__init__(self)  # torch's decoder has no nested-tensor path: no warning, no such attributes
        self.layers = ModuleList([copy.deepcopy(decoder_layer) for _ in range(num_layers)])
        self.num_layers, self.norm = num_layers, norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False):
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask, tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=bool(tgt_is_causal),
                      memory_is_causal=memory_is_causal)
        return self.norm(x) if self.norm is not None else x


class Transformer(Module):
    """torch.nn.Transformer: an encoder (num_encoder_layers TransformerEncoderLayers + LayerNorm) and a decoder
    (num_decoder_layers TransformerDecoderLayers + LayerNorm); every parameter with more than one dimension
    re-initialized xavier-uniform, as torch's _reset_parameters. custom_encoder / custom_decoder replace
    them."""

    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6, dim_feedforward=2048,
                 dropout=0.1, activation="relu", custom_encoder=None, custom_decoder=None, layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True, device=None, dtype=None):
        super().__init__()
        from . import LayerNorm, init
        dtype = dtype or _dtypes.default_float()
        for name, custom, layer_cls, stack_cls, count in (
                ("encoder", custom_encoder, TransformerEncoderLayer, TransformerEncoder, num_encoder_layers),
                ("decoder", custom_decoder, TransformerDecoderLayer, TransformerDecoder, num_decoder_layers)):
            if custom is None:  # the encoder first, then the decoder: torch's parameter order
                layer = layer_cls(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first,
                                  norm_first, bias, device, dtype)
                custom = stack_cls(layer, count, LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype))
            setattr(self, name, custom)
        for p in self.parameters():
            if p.dim() > 1:
                init.xavier_uniform_(p)
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, src_key_padding_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal=False):
        batch_dim = 0 if self.batch_first else 1
        if src.ndim == 3 and tgt.ndim == 3 and src.shape[batch_dim] != tgt.shape[batch_dim]:
            raise RuntimeError("the batch number of src and tgt must be equal")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                            memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz, device=None, dtype=None):
        """[sz, sz] float: -inf above the diagonal, 0 elsewhere (torch's causal mask for tgt_mask)."""
        return _generate_square_subsequent_mask(sz, device, dtype)


# ---- torch.nn.modules.transformer's private helpers, which model code imports ---------------------------------

def _generate_square_subsequent_mask(sz, device=None, dtype=None):
    """[sz, sz] of dtype (the default float dtype): -inf above the diagonal, 0 elsewhere."""
    import numpy as np
    from .._tensor import tensor
    mask = np.triu(np.full((sz, sz), -np.inf, dtype=np.float32), 1)
    return tensor(mask).to(dtype if dtype is not None else _dtypes.default_float())


def _get_clones(module, N):
    return ModuleList([copy.deepcopy(module) for _ in range(N)])


def _get_activation_fn(activation):
    if activation == "relu":
        return functional.relu
    if activation == "gelu":
        return functional.gelu
    raise RuntimeError("activation should be relu/gelu, not %s" % activation)


def _detect_is_causal_mask(mask, is_causal=None, size=None):
    """torch's: is_causal when given; else whether mask equals the causal mask of its size (or of `size`)."""
    make_causal = is_causal is True
    if is_causal is None and mask is not None:
        sz = size if size is not None else mask.size(-2)
        causal = _generate_square_subsequent_mask(sz, dtype=mask.dtype)
        make_causal = tuple(mask.shape) == tuple(causal.shape) and bool((mask == causal).all())
    return make_causal


def _expose_helpers():
    from . import modules
    for fn in (_generate_square_subsequent_mask, _get_clones, _get_activation_fn, _detect_is_causal_mask):
        setattr(modules.transformer, fn.__name__, fn)


_expose_helpers()
