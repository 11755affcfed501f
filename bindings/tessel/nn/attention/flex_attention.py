"""torch.nn.attention.flex_attention for eager CPU code (torchtitan's document masking and sliding windows,
ALiBi / soft-capping score mods): flex_attention(q, k, v, score_mod, block_mask), create_block_mask,
create_mask, and_masks / or_masks / noop_mask, BlockMask.

torch compiles flex_attention into a fused kernel that skips the blocks a BlockMask rules out; here it runs as
attention over the whole [B, H, L, S] score matrix, written with tessel's differentiable ops: score_mod and
mask_mod are called once on broadcast index tensors (b [B, 1, 1, 1], h [1, H, 1, 1], q_idx [1, 1, L, 1],
kv_idx [1, 1, 1, S]), which gives torch's per-element values for the element-wise functions these mods are
(comparisons, arithmetic, torch.where, indexing a lookup table by q_idx / kv_idx). The results and gradients are
those of torch's kernel (a query whose keys are all masked gets zeros and log-sum-exp -inf, as torch's); the
cost is a dense attention's, not a block-sparse one.

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx
    mask = create_block_mask(causal, None, None, T, T)
    out = flex_attention(q, k, v, block_mask=mask)
"""
import math

from ... import _C
from ..._tensor import arange

__all__ = ["flex_attention", "create_block_mask", "create_mask", "and_masks", "or_masks", "noop_mask",
           "BlockMask"]

_DEFAULT_SPARSE_BLOCK_SIZE = 128


def noop_mask(batch, head, token_q, token_kv):
    """torch's mask_mod that keeps every score (a 0-d True)."""
    return _C._full([], 1.0, _C.dtype.bool)


def _indices(B, H, L, S):
    i64 = _C.dtype.int64
    return (arange(B, dtype=i64).reshape(B, 1, 1, 1), arange(H, dtype=i64).reshape(1, H, 1, 1),
            arange(L, dtype=i64).reshape(1, 1, L, 1), arange(S, dtype=i64).reshape(1, 1, 1, S))


def create_mask(mod_fn, B, H, Q_LEN, KV_LEN, device="cpu"):
    """The dense boolean mask [B, H, Q_LEN, KV_LEN] of a mask_mod (B / H None: 1, broadcast)."""
    B, H = B or 1, H or 1
    out = mod_fn(*_indices(B, H, Q_LEN, KV_LEN))
    if not isinstance(out, _C.Tensor):
        out = _C._full([], 1.0 if out else 0.0, _C.dtype.bool)
    return out.to(_C.dtype.bool).expand(B, H, Q_LEN, KV_LEN).contiguous()


def and_masks(*mask_mods):
    """The mask_mod keeping a score where every mask_mod does."""
    if not all(callable(m) for m in mask_mods):
        raise RuntimeError("All inputs should be callable mask_mods: %s" % (mask_mods,))

    def and_mask(b, h, q_idx, kv_idx):
        result = noop_mask(b, h, q_idx, kv_idx)
        for mod in mask_mods:
            result = result & mod(b, h, q_idx, kv_idx)
        return result
    return and_mask


def or_masks(*mask_mods):
    """The mask_mod keeping a score where any mask_mod does."""
    if not all(callable(m) for m in mask_mods):
        raise RuntimeError("All inputs should be callable mask_mods: %s" % (mask_mods,))

    def or_mask(b, h, q_idx, kv_idx):
        result = _C._full([], 0.0, _C.dtype.bool)
        for mod in mask_mods:
            result = result | mod(b, h, q_idx, kv_idx)
        return result
    return or_mask


class BlockMask:
    """torch's BlockMask: the mask_mod with its shape (B, H, Q_LEN, KV_LEN) and block size; to_dense() gives
    the block-level mask ([B, H, Q blocks, KV blocks], 1 where a block holds any kept score), sparsity() the
    percentage of blocks holding none."""

    def __init__(self, mask_mod, shape, BLOCK_SIZE, dense):
        self.mask_mod, self.shape, self._dense = mask_mod, tuple(shape), dense
        self.BLOCK_SIZE = (BLOCK_SIZE, BLOCK_SIZE) if isinstance(BLOCK_SIZE, int) else tuple(BLOCK_SIZE)
        self.seq_lengths = self.shape[2:]

    def to_dense(self):
        B, H, L, S = self._dense.shape
        bq, bk = self.BLOCK_SIZE
        nq, nk = -(-L // bq), -(-S // bk)
        padded = _C._full([B, H, nq * bq, nk * bk], 0.0, _C.dtype.float32)
        padded[:, :, :L, :S] = self._dense.to(_C.dtype.float32)
        blocks = padded.reshape(B, H, nq, bq, nk, bk).amax(-1).amax(-2)
        return (blocks > 0).to(_C.dtype.int32)

    def sparsity(self):
        dense = self.to_dense()
        return 100.0 * (1.0 - float(dense.sum().item()) / dense.numel())

    def __repr__(self):
        return "BlockMask(shape=%s, sparsity=%.2f%%, mask_mod=%s)" % (
            self.shape, self.sparsity(), getattr(self.mask_mod, "__name__", self.mask_mod))


def create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device="cuda", BLOCK_SIZE=_DEFAULT_SPARSE_BLOCK_SIZE,
                      _compile=False):
    """torch's create_block_mask (B / H None: broadcast over them)."""
    dense = create_mask(mask_mod, B, H, Q_LEN, KV_LEN)
    return BlockMask(mask_mod, (B or 1, H or 1, Q_LEN, KV_LEN), BLOCK_SIZE, dense)


def flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                   return_lse=False, kernel_options=None, *, return_aux=None):
    """softmax(score_mod(q·kᵀ·scale) masked by block_mask) · v for q [B, Hq, L, E], k [B, Hkv, S, E],
    v [B, Hkv, S, Ev] (Hq a multiple of Hkv with enable_gqa); with return_lse also the log-sum-exp [B, Hq, L]."""
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise ValueError("NYI: query, key, and value must be 4D tensors")
    B, Hq, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    if Hq != Hkv:
        if not enable_gqa:
            raise ValueError("Expect query and key/value to have the same number of heads but got Hq=%d and "
                             "Hkv=%d. Try setting enable_gqa=True for GQA." % (Hq, Hkv))
        if Hq % Hkv:
            raise ValueError("Expect number of query heads to be a multiple of kv heads for GQA but got Hq=%d and "
                             "Hkv=%d." % (Hq, Hkv))
        key, value = key.repeat_interleave(Hq // Hkv, 1), value.repeat_interleave(Hq // Hkv, 1)
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    scores = (query @ key.transpose(-2, -1)) * scale
    if score_mod is not None:
        scores = score_mod(scores, *_indices(B, Hq, L, S))
    neg = _C._full([], -math.inf, scores.dtype)
    if block_mask is not None:
        if tuple(block_mask.seq_lengths) != (L, S):
            raise ValueError("block_mask was created for block_mask.shape=%s but got q_len=%d and kv_len=%d. As the "
                             "block mask was created for a larger length than you're using it for, you can either "
                             "1. create a new block mask with the correct length, or 2. 'adjust' the existing block "
                             "mask to the correct length by calling block_mask._adjust(q_len, kv_len). This "
                             "essentially 'crops' the block mask to the upper left corner, which does not work for "
                             "all mask_mods!" % (block_mask.shape, L, S))
        scores = _C._functional.where(block_mask._dense, scores, neg)
    lse = scores.logsumexp(-1)  # -inf for a query whose keys are all masked
    finite = lse > neg
    safe_lse = _C._functional.where(finite, lse, _C._full([], 0.0, scores.dtype))
    probs = (scores - safe_lse.unsqueeze(-1)).exp()  # exp(-inf) = 0 where masked: zeros for an all-masked row
    out = (probs @ value).to(query.dtype)
    if return_lse or (return_aux is not None and getattr(return_aux, "lse", False)):
        wide = query.dtype in (_C.dtype.float32, _C.dtype.float64)
        return out, lse if wide else lse.to(_C.dtype.float32)  # torch's: float32 for half-precision inputs
    return out
