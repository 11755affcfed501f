"""torch.nn.attention.bias: causal biases for F.scaled_dot_product_attention's attn_mask.

    from torch.nn.attention.bias import causal_lower_right
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(L, S))  # decoding with a cache

torch's CausalBias is a Tensor subclass that intercepts scaled_dot_product_attention (__torch_function__);
here it is a plain object that tessel's scaled_dot_product_attention recognizes (nn/functional.py): the upper-left
variant (or equal lengths) is is_causal=True, the lower-right one the materialized boolean mask, as torch's CPU
path. Only that call and _materialize() take one: it is not a tessel.Tensor.
"""
from enum import IntEnum, auto
from warnings import warn

__all__ = ["causal_upper_left", "causal_lower_right", "CausalVariant", "CausalBias"]


class CausalVariant(IntEnum):
    """UPPER_LEFT: query i sees keys 0..i (torch.tril of ones [L, S]); LOWER_RIGHT: the diagonal ends at the
    bottom-right corner (tril with offset S - L), so the last query sees every key."""

    UPPER_LEFT = auto()
    LOWER_RIGHT = auto()


class CausalBias:
    """A causal pattern (variant, seq_len_q, seq_len_kv) to pass as attn_mask."""

    def __init__(self, variant, seq_len_q, seq_len_kv):
        if not isinstance(variant, CausalVariant):
            raise AssertionError("variant must be a CausalVariant, got %s" % type(variant).__name__)
        self.variant, self.seq_len_q, self.seq_len_kv = variant, seq_len_q, seq_len_kv
        if seq_len_q > seq_len_kv and variant == CausalVariant.LOWER_RIGHT:
            warn("Lower right causal bias will produce NaNs in the output when seq_len_q > seq_len_kv!", stacklevel=2)

    def _triangle(self, offset):
        from ... import ones, tril
        from ..._dtypes import bool as bool_
        return tril(ones(self.seq_len_q, self.seq_len_kv, dtype=bool_), diagonal=offset)

    def _upper_left(self, device=None):
        return self._triangle(0)

    def _lower_right(self, device=None):
        return self._triangle(self.seq_len_kv - self.seq_len_q)

    def _materialize(self, device=None):
        """The boolean mask [seq_len_q, seq_len_kv], True where a query attends a key."""
        from ..._device import check_cpu
        check_cpu(device, "CausalBias._materialize")
        if self.variant == CausalVariant.UPPER_LEFT:
            return self._upper_left(device)
        return self._lower_right(device)

    @staticmethod
    def _dispatch(query, key, value, attn_mask, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        from .. import functional as F
        if is_causal:
            raise ValueError("CausalBias should not be used with causal=True")
        if attn_mask.seq_len_q == attn_mask.seq_len_kv or attn_mask.variant == CausalVariant.UPPER_LEFT:
            return F.scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=dropout_p,
                                                  is_causal=True, scale=scale, enable_gqa=enable_gqa)
        if attn_mask.variant == CausalVariant.LOWER_RIGHT:
            return F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask._materialize(),
                                                  dropout_p=dropout_p, is_causal=False, scale=scale,
                                                  enable_gqa=enable_gqa)
        raise ValueError("CausalBias.variant must be a CausalVariant type, but found: %s" % attn_mask.variant)

    def __repr__(self):
        return repr(self._materialize())


def causal_upper_left(*size):
    """The UPPER_LEFT CausalBias of size (seq_len_q, seq_len_kv): is_causal=True's mask."""
    if len(size) != 2:
        raise AssertionError("causal_upper_left only supports 2D tensors")
    return CausalBias(CausalVariant.UPPER_LEFT, *size)


def causal_lower_right(*size):
    """The LOWER_RIGHT CausalBias of size (seq_len_q, seq_len_kv)."""
    if len(size) != 2:
        raise AssertionError("causal_lower_right only supports 2D tensors")
    return CausalBias(CausalVariant.LOWER_RIGHT, *size)
