"""torch's PowerSGD DDP communication hook (Vogels et al., 2019): each bucket's matrix-shaped gradients M are
sent as two thin factors instead of M. Per bucket, with Q [m, r] orthonormal (random the first time, the last
step's with warm_start):

    P = M Q  -> all-reduce -> orthonormalize (Gram-Schmidt)  -> Q = Mᵀ P -> all-reduce -> M ≈ P Qᵀ / world

so the result is the average gradient projected on an r-dimensional column space (exactly the average when the
summed gradient has rank <= r). Vectors (biases) and matrices too small to gain min_compression_rate are
all-reduced as they are; the first start_powerSGD_iter steps use plain all-reduce; with use_error_feedback what
the approximation dropped on this rank is added to its next gradient.

    state = PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=10)
    ddp_model.register_comm_hook(state, powerSGD_hook)

batched_powerSGD_hook is torch's simplified variant: the whole bucket, padded with zeros to the next square side
s, is one [s, s] matrix compressed with the same P / Q steps (s·r·2 elements sent instead of the bucket).

The algorithm and its defaults are torch's; its random Q draws come from numpy seeded by random_seed on every
rank (so all ranks agree), not from torch's generator, so the values differ from torch's run for run.
batch_tensors_with_same_shape is accepted and changes nothing here (a speed option in torch: same results).
"""
import math

import numpy as np

from .... import _C
from ... import all_reduce, get_world_size
from ..._flat import flatten, views
from .default_hooks import _allreduce_fut, _group

__all__ = ["PowerSGDState", "powerSGD_hook", "batched_powerSGD_hook"]


class PowerSGDState:
    """The hyperparameters and the per-bucket memory (errors, P and Q) of powerSGD_hook."""

    def __init__(self, process_group, matrix_approximation_rank=1, start_powerSGD_iter=1_000, min_compression_rate=2,
                 use_error_feedback=True, warm_start=True, orthogonalization_epsilon=0, random_seed=0,
                 compression_stats_logging_frequency=10_000, batch_tensors_with_same_shape=False):
        if (use_error_feedback or warm_start) and start_powerSGD_iter <= 1:
            raise ValueError("Expect `start_powerSGD_iter` > 1 if `use_error_feedback` or `warm_start` is enabled, "
                             "because PowerSGD can only be applied after the first two iterations in DDP.")
        self.process_group = process_group
        self.matrix_approximation_rank = matrix_approximation_rank
        self.start_powerSGD_iter = start_powerSGD_iter
        self.min_compression_rate = min_compression_rate
        self.use_error_feedback, self.warm_start = use_error_feedback, warm_start
        self.orthogonalization_epsilon = orthogonalization_epsilon
        self.rng = np.random.RandomState(random_seed)
        self.error_dict, self.p_memory_dict, self.q_memory_dict = {}, {}, {}
        self.iter = 0
        self.total_numel_before_compression = self.total_numel_after_compression = 0
        self.compression_stats_logging_frequency = max(1, compression_stats_logging_frequency)
        self.batch_tensors_with_same_shape = batch_tensors_with_same_shape

    def maybe_increase_iter(self, bucket):
        if bucket.is_last():
            self.iter += 1

    def compression_stats(self):
        """(compression rate, elements before, elements after) since compression started."""
        after = self.total_numel_after_compression
        return (self.total_numel_before_compression / after if after > 0 else 0,
                self.total_numel_before_compression, after)


def _orthonormalize(m, epsilon):
    """Gram-Schmidt over m's columns, in place ([n, r]): torch's, including its epsilon."""
    for i in range(m.shape[1]):
        col = m[:, i:i + 1]
        norm = col.pow(2).sum().sqrt()
        col.div_(norm + epsilon if epsilon else norm)
        if i + 1 < m.shape[1]:
            rest = m[:, i + 1:]
            rest.sub_((col * rest).sum(0, keepdim=True) * col)


def _should_compress(n, m, rank, min_rate):
    return (n + m) * rank * min_rate < n * m, n * m, (n + m) * rank


def _prologue(state, bucket):
    """The bucket's group and buffer, and before start_powerSGD_iter the plain all-reduce's future (else None)."""
    group = _group(state.process_group, bucket)
    buffer = bucket.buffer()
    if state.iter < state.start_powerSGD_iter:
        state.maybe_increase_iter(bucket)
        return group, buffer, _allreduce_fut(group, buffer)
    return group, buffer, None


def powerSGD_hook(state, bucket):
    """The PowerSGD-compressed average of `bucket` (a future of its buffer, as every comm hook)."""
    group, buffer, plain = _prologue(state, bucket)
    if plain is not None:
        return plain
    world, index = get_world_size(group), bucket.index()
    if state.use_error_feedback:
        if index not in state.error_dict:
            state.error_dict[index] = buffer * 0
        buffer.add_(state.error_dict[index])
        before = buffer.clone()
    matrices, plain = [], []
    for grad in bucket.gradients():  # views of the buffer: results written into them land in it
        matrix = grad.view(grad.shape[0], -1) if grad.dim() > 1 else None
        if matrix is None:
            plain.append(grad)
            state.total_numel_before_compression += grad.numel()
            state.total_numel_after_compression += grad.numel()
            continue
        rank = min(matrix.shape[0], matrix.shape[1], state.matrix_approximation_rank)
        worth, numel, compressed = _should_compress(matrix.shape[0], matrix.shape[1], rank, state.min_compression_rate)
        state.total_numel_before_compression += numel
        state.total_numel_after_compression += compressed if worth else numel
        if worth:
            matrices.append((matrix, rank))
        else:
            plain.append(grad)
    if plain:
        for t, total in zip(plain, _summed(plain, group)):
            t.copy_(total / world)
    if matrices:
        _compress(state, index, matrices, group, world)
    if state.use_error_feedback:
        state.error_dict[index] = before - buffer
    state.maybe_increase_iter(bucket)
    return _done(buffer)


def batched_powerSGD_hook(state, bucket):
    """torch's batched variant: the bucket (zero-padded to s² elements) compressed as one [s, s] matrix."""
    group, buffer, plain = _prologue(state, bucket)
    if plain is not None:
        return plain
    world, index = get_world_size(group), bucket.index()
    n = buffer.numel()
    side = math.ceil(math.sqrt(n))
    state.total_numel_before_compression += n
    state.total_numel_after_compression += side * state.matrix_approximation_rank * 2
    padded = _C._full([side * side], 0.0, buffer.dtype)
    padded[:n] = buffer
    if state.use_error_feedback:
        if index in state.error_dict:
            padded.add_(state.error_dict[index])
        before = padded.clone()
    _compress(state, index, [(padded.view(side, side), state.matrix_approximation_rank)], group, world)
    if state.use_error_feedback:
        state.error_dict[index] = before - padded
    buffer.copy_(padded[:n])
    state.maybe_increase_iter(bucket)
    return _done(buffer)


def _compress(state, index, matrices, group, world):
    """Each [n, m] matrix (written in place) replaced by P Qᵀ / world from the summed P = M Q and Q = Mᵀ P, the
    Q's random at first (or without warm_start), the last step's otherwise; two all-reduces for all of them."""
    fresh = not state.warm_start or index not in state.q_memory_dict
    if fresh:
        rng = np.random.RandomState(state.rng.randint(1_000_000_000))
        qs = [_C._from_numpy(rng.standard_normal((m.shape[1], r))).to(m.dtype) for m, r in matrices]
    else:
        qs = state.q_memory_dict[index]
    for q in qs:
        _orthonormalize(q, state.orthogonalization_epsilon)
    ps = _summed([m @ q for (m, _), q in zip(matrices, qs)], group)
    for p in ps:
        _orthonormalize(p, state.orthogonalization_epsilon)
    qs = [q / world for q in _summed([m.t() @ p for (m, _), p in zip(matrices, ps)], group)]
    for (m, _), p, q in zip(matrices, ps, qs):
        m.copy_(p @ q.t())
    if state.warm_start:
        state.p_memory_dict[index], state.q_memory_dict[index] = ps, qs


def _done(buffer):
    from ....futures import Future
    fut = Future()
    fut.set_result(buffer)
    return fut


def _summed(tensors, group):
    """The tensors summed over the group in one all-reduce (views of its flat buffer)."""
    flat = flatten(tensors)
    all_reduce(flat, group=group)
    return views(flat, tensors)
