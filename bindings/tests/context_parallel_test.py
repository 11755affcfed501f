"""Context parallelism from Python (torch.distributed.tensor.experimental.context_parallel): attention over
sequence shards equals full-sequence attention row for row (causal and not, head-tail load balancing on and
off, 2 and 4 ranks), its input gradients equal the full gradients' shards, and a small transformer trained
under the context on 2 ranks (alone, and under fully_shard over the cp ranks as torchtitan composes them) takes
the full-sequence loss and parameter gradients of one process."""
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn as nn
import tessel.nn.functional as F
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.tensor.experimental import context_parallel, context_parallel_unshard, set_rotate_method
from tessel.distributed.tensor.experimental._attention import _cp_options

RNG = np.random.default_rng(5)


def leaf(a):
    return tessel.tensor(np.asarray(a, dtype=np.float32), requires_grad=True)


@pytest.mark.parametrize("rotate", ["allgather", "alltoall"])
@pytest.mark.parametrize("world,causal,balance", [(2, True, True), (2, False, True), (4, True, True),
                                                  (2, True, False), (3, True, True)])
def test_attention_over_sequence_shards_equals_full_attention(world, causal, balance, rotate):
    B, H, T, D = 2, 2, 24 if world == 3 else 16, 8
    q, k, v = (RNG.standard_normal((B, H, T, D)).astype(np.float32) for _ in range(3))
    w = RNG.standard_normal((B, H, T, D)).astype(np.float32)  # the loss: sum(w * out)
    fq, fk, fv = leaf(q), leaf(k), leaf(v)
    full = F.scaled_dot_product_attention(fq, fk, fv, is_causal=causal)
    (full * tessel.tensor(w)).sum().backward()
    got = {}

    def rank_fn(_):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (world,))
        xs = [tessel.tensor(a) for a in (q, k, v, w)]
        with context_parallel(mesh, buffers=xs, buffer_seq_dims=[2] * 4):
            assert xs[0].shape[2] == T // world  # sharded in place
            r, n, L = dist.get_rank(), world, T // (2 * world)  # head-tail: chunks r and 2n-1-r of 2n
            mine = np.concatenate([q[:, :, c * L:(c + 1) * L] for c in (r, 2 * n - 1 - r)], 2) if balance else \
                q[:, :, r * T // n:(r + 1) * T // n]
            np.testing.assert_array_equal(xs[0].numpy(), mine)
            lq, lk, lv = (x.detach().requires_grad_(True) for x in xs[:3])
            out = F.scaled_dot_product_attention(lq, lk, lv, is_causal=causal)
            (out * xs[3]).sum().backward()
            full_out, dq, dk, dv = context_parallel_unshard(mesh, [out.detach(), lq.grad, lk.grad, lv.grad],
                                                            [2] * 4)
        assert xs[0].shape[2] == T  # restored
        got[dist.get_rank()] = [t.numpy() for t in (full_out, dq, dk, dv)]

    old = _cp_options.enable_load_balance, _cp_options.rotate_method
    _cp_options.enable_load_balance = balance
    set_rotate_method(rotate)
    try:
        tessel.run_ranks(world, rank_fn)
    finally:
        _cp_options.enable_load_balance = old[0]
        set_rotate_method(old[1])
    want = [full.detach().numpy(), fq.grad.numpy(), fk.grad.numpy(), fv.grad.numpy()]
    for r in range(world):
        for g, ref in zip(got[r], want):
            np.testing.assert_allclose(g, ref, rtol=2e-4, atol=2e-5)


class TinyLM(nn.Module):
    """Token and position embeddings, one causal attention block through F.scaled_dot_product_attention, a head.
    `pos` (the positions 0..T-1) is a buffer, sharded with the batch so each token keeps its global position."""

    def __init__(self, vocab=11, dim=8, heads=2, seq=16):
        super().__init__()
        self.tok, self.posemb = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
        self.qkv, self.proj, self.head = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim), nn.Linear(dim, vocab)
        self.heads = heads
        self.register_buffer("pos", tessel.arange(seq))

    def forward(self, idx, targets):
        b, t = idx.shape
        x = self.tok(idx) + self.posemb(self.pos)
        q, k, v = self.qkv(x).chunk(3, -1)
        split = lambda y: y.view(b, t, self.heads, -1).transpose(1, 2)  # noqa: E731
        a = F.scaled_dot_product_attention(split(q), split(k), split(v), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, -1))
        return F.cross_entropy(self.head(x).view(-1, self.head.out_features), targets.view(-1))


def test_a_transformer_under_context_parallel_takes_the_full_sequence_loss_and_gradients():
    idx = RNG.integers(0, 11, size=(2, 16))
    tgt = RNG.integers(0, 11, size=(2, 16))
    tessel.manual_seed(4)
    ref = TinyLM()
    loss = ref(tessel.tensor(idx), tessel.tensor(tgt))
    loss.backward()
    want = {n: p.grad.numpy() for n, p in ref.named_parameters()}
    got = {}

    def rank_fn(_):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("cp",))
        tessel.manual_seed(4)
        model = TinyLM()
        x, y = tessel.tensor(idx), tessel.tensor(tgt)
        with context_parallel(mesh, buffers=[x, y, model.pos], buffer_seq_dims=[1, 1, 0]):
            local = model(x, y)  # the mean over this rank's tokens: the global mean is the ranks' average
            local.backward()
        assert model.pos.tolist() == list(range(16)) and tuple(x.shape) == (2, 16)
        total = local.detach().clone()
        dist.all_reduce(total, op=dist.ReduceOp.AVG)
        grads = {}
        for n, p in model.named_parameters():
            g = p.grad.clone()
            dist.all_reduce(g, op=dist.ReduceOp.AVG)  # what fully_shard / DDP over the cp ranks does
            grads[n] = g.numpy()
        got[dist.get_rank()] = (total.item(), grads)

    tessel.run_ranks(2, rank_fn)
    for r in range(2):
        assert got[r][0] == pytest.approx(loss.item(), rel=1e-5)
        for n, g in want.items():
            np.testing.assert_allclose(got[r][1][n], g, rtol=2e-4, atol=2e-6, err_msg=n)


def test_fully_shard_over_the_cp_ranks_composes_with_context_parallel():
    # torchtitan's layout with dp 1: fully_shard's mesh is the cp ranks, so its reduce-scatter averages the
    # ranks' gradients of their sequence shards; the full gradients equal one process on the whole sequence.
    from tessel.distributed.fsdp import fully_shard
    idx = RNG.integers(0, 11, size=(2, 16))
    tgt = RNG.integers(0, 11, size=(2, 16))
    tessel.manual_seed(6)
    ref = TinyLM()
    ref(tessel.tensor(idx), tessel.tensor(tgt)).backward()
    want = {n: p.grad.numpy() for n, p in ref.named_parameters()}
    got = {}

    def rank_fn(_):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("cp",))
        tessel.manual_seed(6)
        model = fully_shard(TinyLM(), mesh=mesh)
        x, y = tessel.tensor(idx), tessel.tensor(tgt)
        with context_parallel(mesh, buffers=[x, y, model.pos], buffer_seq_dims=[1, 1, 0]):
            model(x, y).backward()
        got[dist.get_rank()] = {n: p.grad.full_tensor().numpy() for n, p in model.named_parameters()}

    tessel.run_ranks(2, rank_fn)
    for r in range(2):
        for n, g in want.items():
            np.testing.assert_allclose(got[r][n], g, rtol=2e-4, atol=2e-6, err_msg=n)


def test_buffers_take_the_sequences_positions_as_torchs():
    """torch's rules, from a side-by-side sweep: every buffer gives this rank's positions of the first buffer's
    sequence (a rotary table longer than the sequence gave its own head-tail split: silently wrong positions); a
    length that does not divide into 2·n chunks is cut into n contiguous pieces (it raised); a tensor listed
    twice is sharded once and restored whole (it was sharded twice); enable_gqa repeats the key / value heads."""
    got = {}

    def rank_fn(_):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        r = dist.get_rank()
        x, table = tessel.arange(8.0).reshape(1, 8), tessel.arange(16.0)
        with context_parallel(mesh, buffers=[x, table], buffer_seq_dims=[1, 0]):
            rope = (x.tolist(), table.tolist())
        y = tessel.arange(6.0).reshape(1, 6)
        with context_parallel(mesh, buffers=[y], buffer_seq_dims=[1]):
            uneven = y.tolist()
        z = tessel.arange(8.0).reshape(1, 8)
        with context_parallel(mesh, buffers=[z, z], buffer_seq_dims=[1, 1]):
            twice = z.tolist()
        q, k = (tessel.tensor(RNG_GQA[i]) for i in (0, 1))
        full = F.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=True)
        with context_parallel(mesh, buffers=[q, k], buffer_seq_dims=[2, 2]):
            out = F.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=True)
            whole = context_parallel_unshard(mesh, [out], [2])[0]
        got[r] = rope, uneven, twice, z.tolist(), float((whole - full).abs().max())

    tessel.run_ranks(2, rank_fn)
    for r in (0, 1):
        rope, uneven, twice, after, gqa_err = got[r]
        head_tail = [[0.0, 1.0, 6.0, 7.0], [2.0, 3.0, 4.0, 5.0]][r]
        assert rope == ([head_tail], head_tail)  # the table's rows of the sequence's positions
        assert uneven == [[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]][r]]  # 6 rows over 2 ranks: contiguous
        assert twice == [head_tail] and after == [[float(i) for i in range(8)]]
        assert gqa_err < 1e-6


RNG_GQA = [np.random.default_rng(9).standard_normal(shape).astype(np.float32) for shape in ((1, 4, 8, 4),
                                                                                            (1, 2, 8, 4))]


def test_bad_use_raises():
    def rank_fn(_):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        q = tessel.ones(1, 1, 5, 4)
        with pytest.raises(ValueError, match="must divide into 2 pieces"):
            with context_parallel(mesh, buffers=[q], buffer_seq_dims=[2]):
                pass
        assert tuple(q.shape) == (1, 1, 5, 4)
        with pytest.raises(ValueError, match="has 4 rows, fewer than the sequence's 8"):
            with context_parallel(mesh, buffers=[tessel.ones(1, 8), tessel.ones(1, 4)], buffer_seq_dims=[1, 1]):
                pass
        x = tessel.ones(1, 1, 8, 4)
        with context_parallel(mesh, buffers=[x], buffer_seq_dims=[2]):
            with pytest.raises(NotImplementedError, match="attn_mask and dropout_p are not supported"):
                F.scaled_dot_product_attention(x, x, x, dropout_p=0.5)
        with pytest.raises(ValueError, match="1-D mesh"):
            with context_parallel(init_device_mesh("cpu", (1, 2)), buffers=[x], buffer_seq_dims=[2]):
                pass
        with pytest.raises(RuntimeError, match="requires grad or has autograd history"):
            with context_parallel(mesh, buffers=[tessel.ones(1, 1, 8, 4, requires_grad=True)], buffer_seq_dims=[2]):
                pass

    tessel.run_ranks(2, rank_fn)
    a, b = tessel.ones(2), tessel.arange(6.).reshape(2, 3)
    alias = a.view(2)
    a.set_(b)  # torch's set_: every handle of a now reads b's data and shape
    assert a.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]] and alias.tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="set_: source has dtype float64"):
        a.set_(tessel.ones(2, dtype=tessel.float64))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
