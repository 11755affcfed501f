"""torch.nn.functional.ctc_loss and nn.CTCLoss (connectionist temporal classification, speech and handwriting
recognition), composed from bound ops: the forward (alpha) recursion over the blank-interleaved targets runs
in log space, batched over samples and their 2S + 1 label positions, one step per time frame, so autograd
gives the gradient. Each sample's loss is read at its own last frame; impossible alignments are +inf (0 with
zero_infinity=True, gradient 0 too).

Gradient note: torch's kernel returns, for log_probs, exp(log_probs) - posterior (the gradient with respect to
the logits of a log_softmax) rather than the derivative with respect to log_probs itself, -posterior; this
returns torch's: autograd's -posterior plus exp(log_probs) over each sample's frames (_TorchGradientTerm), so
a leaf log_probs gets torch's gradient too, and NaN for an impossible alignment when zero_infinity is False.
Through log_softmax(logits) both forms give the logits the same gradient.

    loss = F.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean")
"""
import numpy as np

from .. import _C
from ..autograd import Function
from ._conv_ops import _as_tensor
from .modules import Module
from .._autocast_policy import float32_under_autocast as _float32_under_autocast


def _lengths(x, name, n):
    values = np.asarray(x.tolist() if hasattr(x, "tolist") else x, dtype=np.int64).reshape(-1)
    if values.shape[0] != n:
        raise RuntimeError("ctc_loss: %s must have one entry per batch element (%d), got %d"
                           % (name, n, values.shape[0]))
    return values


def _padded_targets(targets, target_lengths, n):
    """The targets as an int64 numpy array [N, S_max] (from a padded [N, S] tensor or a 1-D concatenation)."""
    t = np.asarray(targets.tolist() if hasattr(targets, "tolist") else targets, dtype=np.int64)
    if t.ndim == 2:
        if t.shape[0] != n:
            raise RuntimeError("ctc_loss: targets [N, S] must have N = %d rows, got shape %s" % (n, list(t.shape)))
        if target_lengths.size and target_lengths.max() > t.shape[1]:
            raise RuntimeError("Expected tensor to have size at least %d at dimension 1, but got size %d for "
                               "argument #2 'targets' (while checking arguments for ctc_loss_cpu)"
                               % (target_lengths.max(), t.shape[1]))
        return t
    if t.ndim != 1 or t.shape[0] < target_lengths.sum():
        raise RuntimeError("ctc_loss: 1-D targets must concatenate the %d target sequences (%d labels), got shape %s"
                           % (n, int(target_lengths.sum()), list(t.shape)))
    out = np.zeros((n, max(int(target_lengths.max()) if n else 0, 1)), dtype=np.int64)
    start = 0
    for i, length in enumerate(target_lengths):
        out[i, :length] = t[start:start + length]
        start += length
    return out


def _logaddexp(terms):
    """log Σ exp(term) elementwise over a list of same-shape tensors; -inf (gradient 0, never NaN) where every
    term is -inf."""
    stacked = _C._functional.stack(terms, 0)
    m = stacked.detach().amax(0)
    finite = m > float("-inf")
    from .._tensor import zeros_like
    shift = _C._functional.where(finite, m, zeros_like(m))
    total = (stacked - shift.unsqueeze(0)).exp().sum(0)
    safe = _C._functional.where(finite, total, total * 0.0 + 1.0)
    return _C._functional.where(finite, safe.log() + shift, m)


@_float32_under_autocast
def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean", zero_infinity=False):
    """torch.nn.functional.ctc_loss: -log p(target | log_probs) summed over every alignment, per sample;
    log_probs [T, N, C] (or [T, C]) log-softmaxed over C, targets [N, S] padded or 1-D concatenated; reduction
    'mean' averages loss / target length over the batch, 'sum' adds, 'none' keeps [N]."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError("%s is not a valid value for reduction" % reduction)
    unbatched = log_probs.ndim == 2
    lp = log_probs.unsqueeze(1) if unbatched else log_probs
    if lp.ndim != 3:
        raise RuntimeError("ctc_loss: log_probs must be [T, N, C] or [T, C], got %s" % list(log_probs.shape))
    steps, n, classes = lp.shape
    if not 0 <= blank < classes:
        raise RuntimeError("blank must be in label range")
    if unbatched:
        targets = targets.unsqueeze(0) if hasattr(targets, "unsqueeze") else [targets]
    in_len = _lengths(input_lengths, "input_lengths", n)
    tgt_len = _lengths(target_lengths, "target_lengths", n)
    if (in_len > steps).any():
        raise RuntimeError("Expected input_lengths to have value at most %d, but got value %d (while checking "
                           "arguments for ctc_loss_cpu)" % (steps, int(in_len.max())))
    if (in_len < 0).any() or (tgt_len < 0).any():
        raise RuntimeError("ctc_loss: input_lengths and target_lengths must be non-negative")
    tgt = _padded_targets(targets, tgt_len, n)
    width = 2 * tgt.shape[1] + 1
    ext = np.full((n, width), blank, dtype=np.int64)  # blank, l1, blank, l2, ..., blank
    ext[:, 1::2] = tgt
    position = np.arange(width)
    valid = position[None, :] < (2 * tgt_len + 1)[:, None]  # positions of each sample's own labels
    # a transition from s - 2 into a label position holding another label than s - 2's; by position, as torch's
    # kernel: a target equal to blank may still be skipped into
    skip = np.zeros((n, width), dtype=bool)
    skip[:, 2:] = (position[2:] % 2 == 1) & (ext[:, 2:] != ext[:, :-2])
    acc = _C.dtype.float64 if lp.dtype == _C.dtype.float64 else _C.dtype.float32
    emit = lp.to(acc).transpose(0, 1).gather(2, _as_tensor(ext[:, None, :].repeat(steps, 1)))  # [N, T, width]
    neg_inf = float("-inf")

    def minus_inf(*shape):  # a constant (-inf * 0 would be NaN, so never derived from a tensor)
        return _as_tensor(np.full(shape, neg_inf)).to(acc)
    masked = _as_tensor(np.where(valid, 0.0, neg_inf)).to(acc)
    can_skip = _as_tensor(skip)
    start = np.full((n, width), neg_inf)
    start[:, 0] = 0.0
    start[:, 1] = np.where(tgt_len > 0, 0.0, neg_inf)
    alpha = emit[:, 0] + _as_tensor(start).to(acc) + masked
    last = _as_tensor(in_len - 1)
    # a sample without frames ends where it starts: probability 1 of the empty target (loss 0), 0 of any other
    before = np.full((n, width), neg_inf)
    before[:, 0] = np.where(in_len == 0, 0.0, neg_inf)
    final = _C._functional.where((last == 0).unsqueeze(1), alpha, _as_tensor(before).to(acc))
    ninf_col, no_skip = minus_inf(n, 1), minus_inf(n, width)
    for t in range(1, steps):
        one = _C._functional.cat([ninf_col, alpha[:, :-1]], 1)
        two = _C._functional.cat([ninf_col, ninf_col, alpha[:, :-2]], 1)
        two = _C._functional.where(can_skip, two, no_skip)
        alpha = _logaddexp([alpha, one, two]) + emit[:, t] + masked
        final = _C._functional.where((last == t).unsqueeze(1), alpha, final)
    end = _as_tensor(2 * tgt_len)  # the last blank; the last label sits just before it
    tail = final.gather(1, end.unsqueeze(1)).squeeze(1)
    label = final.gather(1, _as_tensor(np.maximum(2 * tgt_len - 1, 0)).unsqueeze(1)).squeeze(1)
    label = _C._functional.where(_as_tensor(tgt_len > 0), label, minus_inf(n))
    loss = -_logaddexp([tail, label])
    impossible = (loss == float("inf")).detach()
    if _C.is_grad_enabled() and log_probs.requires_grad:
        frames = (np.arange(steps)[:, None] < in_len[None, :]).astype(np.float64)  # [T, N]
        dead = np.asarray(impossible.tolist(), dtype=bool)
        kept = ~dead if zero_infinity else np.ones(n, dtype=bool)
        extra = _blank_label_quirk(tgt, tgt_len, in_len, blank, dead, tail.detach() + loss.detach(), lp.shape)
        loss = loss + _TorchGradientTerm.apply(lp.to(acc), _as_tensor(frames * kept[None, :]).to(acc),
                                               _as_tensor(dead & (not zero_infinity)),
                                               _as_tensor(extra * kept[None, :, None]).to(acc))
    if zero_infinity:
        loss = _C._functional.where(impossible, _as_tensor(np.zeros(n)).to(acc), loss)
    loss = loss.to(log_probs.dtype)
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return (loss / _as_tensor(np.maximum(tgt_len, 1)).to(loss.dtype)).mean()
    return loss.squeeze(0) if unbatched else loss


def _blank_label_quirk(tgt, tgt_len, in_len, blank, dead, log_end_share, shape):
    """[T, N, C]: what torch's backward adds, beyond the true gradient, for a target whose last label is the
    blank itself (which its docs rule out, but it runs): at the sample's last frame it assigns the blank's
    posterior from the last label's position alone, dropping the final blank position's share, the paths'
    probability of ending there (exp(log_end_share))."""
    extra = np.zeros(shape)
    last_label = tgt[np.arange(len(tgt_len)), np.maximum(tgt_len - 1, 0)]
    odd = (tgt_len > 0) & (last_label == blank) & (in_len > 0) & ~dead
    if odd.any():
        share = np.exp(np.asarray(log_end_share.tolist(), dtype=np.float64))
        for i in np.nonzero(odd)[0]:
            extra[in_len[i] - 1, i, blank] = share[i]
    return extra


class _TorchGradientTerm(Function):
    """A zero per sample whose gradient to log_probs [T, N, C] is exp(log_probs) · g_n over the sample's frames
    (torch's extra term), NaN for the samples whose alignment is impossible (torch's, without zero_infinity),
    plus extra · g_n (_blank_label_quirk)."""

    @staticmethod
    def forward(ctx, lp, frames, nan_rows, extra):
        ctx.save_for_backward(lp, frames, nan_rows, extra)
        return _C._full([lp.shape[1]], 0.0, lp.dtype)

    @staticmethod
    def backward(ctx, g):
        lp, frames, nan_rows, extra = ctx.saved_tensors
        scale = _C._functional.where(nan_rows, _C._full([], float("nan"), g.dtype), g)
        # frames past a sample's input length keep gradient 0 (not 0 · NaN), as torch's
        per_frame = _C._functional.where(frames > 0, frames * scale.unsqueeze(0), frames * 0.0)
        return lp.exp() * per_frame.unsqueeze(2) + extra * g.reshape(1, -1, 1), None, None, None


class CTCLoss(Module):
    """torch.nn.CTCLoss(blank=0, reduction='mean', zero_infinity=False)."""

    def __init__(self, blank=0, reduction="mean", zero_infinity=False):
        super().__init__()
        self.blank, self.reduction, self.zero_infinity = blank, reduction, zero_infinity

    def forward(self, log_probs, targets, input_lengths, target_lengths):
        return ctc_loss(log_probs, targets, input_lengths, target_lengths, self.blank, self.reduction,
                        self.zero_infinity)


FUNCTIONAL = dict(ctc_loss=ctc_loss)
MODULES = dict(CTCLoss=CTCLoss)
