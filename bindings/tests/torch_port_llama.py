"""A Llama-architecture language model written the way Meta's reference implementation and torchtitan
write it, against PyTorch's API only: rotary embeddings through complex numbers (theta ** (i / d),
torch.polar, view_as_complex, a complex product, view_as_real) from a registered complex buffer sliced at
the decoding position, grouped-query attention (repeat_kv), a hand-written RMSNorm, a SwiGLU feed-forward,
a key/value cache for incremental decoding, AdamW with a warmup-cosine LambdaLR and gradient clipping.
torch_port_test.py runs it under tessel after changing only its import lines. (Checked to run under
PyTorch 2.15 as written.)"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ModelArgs:
    dim: int = 32
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    vocab_size: int = 24
    multiple_of: int = 16
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_seq_len: int = 16


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def precompute_freqs_cis(dim, end, theta):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device, dtype=torch.float32)
    freqs = torch.outer(t, freqs)
    return torch.polar(torch.ones_like(freqs), freqs)  # complex64


def reshape_for_broadcast(freqs_cis, x):
    assert freqs_cis.shape == (x.shape[1], x.shape[-1])
    shape = [d if i == 1 or i == x.ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def repeat_kv(x, n_rep):
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return x[:, :, :, None, :].expand(bs, slen, n_kv_heads, n_rep, head_dim).reshape(
        bs, slen, n_kv_heads * n_rep, head_dim)


class Attention(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.n_heads, self.n_kv_heads = args.n_heads, args.n_kv_heads
        self.n_rep = self.n_heads // self.n_kv_heads
        self.head_dim = args.dim // args.n_heads
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)
        self.cache_k = self.cache_v = None

    def forward(self, x, start_pos, freqs_cis, use_cache):
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xk = self.wk(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xv = self.wv(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)
        if use_cache:
            if start_pos == 0:
                self.cache_k, self.cache_v = xk, xv
            else:
                self.cache_k = torch.cat([self.cache_k, xk], dim=1)
                self.cache_v = torch.cat([self.cache_v, xv], dim=1)
            keys, values = self.cache_k, self.cache_v
        else:
            keys, values = xk, xv
        keys, values = repeat_kv(keys, self.n_rep), repeat_kv(values, self.n_rep)
        xq, keys, values = xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2)
        scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
        if seqlen > 1:
            mask = torch.full((seqlen, seqlen), float("-inf"))
            mask = torch.triu(mask, diagonal=1)
            mask = torch.hstack([torch.zeros((seqlen, start_pos)), mask]).type_as(xq)
            scores = scores + mask
        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        output = torch.matmul(scores, values).transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(output)


class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim, multiple_of):
        super().__init__()
        hidden_dim = int(2 * hidden_dim / 3)
        hidden_dim = multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args.dim, 4 * args.dim, args.multiple_of)
        self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)

    def forward(self, x, start_pos, freqs_cis, use_cache):
        h = x + self.attention(self.attention_norm(x), start_pos, freqs_cis, use_cache)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList([TransformerBlock(args) for _ in range(args.n_layers)])
        self.norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        self.register_buffer("freqs_cis", precompute_freqs_cis(
            args.dim // args.n_heads, args.max_seq_len * 2, args.rope_theta), persistent=False)

    def forward(self, tokens, start_pos=0, use_cache=False):
        _bsz, seqlen = tokens.shape
        h = self.tok_embeddings(tokens)
        freqs_cis = self.freqs_cis[start_pos: start_pos + seqlen]
        for layer in self.layers:
            h = layer(h, start_pos, freqs_cis, use_cache)
        return self.output(self.norm(h)).float()


def batches(args, steps, batch, generator):
    """Sequences that count up by a random stride modulo the vocabulary: the next token follows from the
    two before it, which attention with positions can learn."""
    for _ in range(steps):
        start = torch.randint(0, args.vocab_size, (batch, 1), generator=generator)
        stride = torch.randint(1, 4, (batch, 1), generator=generator)
        pos = torch.arange(args.max_seq_len + 1).unsqueeze(0)
        seq = (start + stride * pos) % args.vocab_size
        yield seq[:, :-1], seq[:, 1:]


def main(steps=40, seed=0):
    torch.manual_seed(seed)
    args = ModelArgs()
    model = Transformer(args)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    warmup = 5
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (
        1 + math.cos(math.pi * min(s, steps) / steps)))
    gen = torch.Generator().manual_seed(seed)
    losses = []
    for inputs, targets in batches(args, steps, 8, gen):
        logits = model(inputs)
        loss = F.cross_entropy(logits.view(-1, args.vocab_size), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
    # Incremental decoding with the cache against the full forward of the same tokens.
    model.eval()
    with torch.no_grad():
        prompt = torch.tensor([[3, 5, 7, 9], [1, 2, 3, 4]])
        full = model(prompt)
        cached = [model(prompt[:, :2], 0, use_cache=True)]
        for pos in range(2, prompt.shape[1]):
            cached.append(model(prompt[:, pos: pos + 1], pos, use_cache=True))
        cached = torch.cat(cached, dim=1)
    return losses, full, cached, model


if __name__ == "__main__":
    losses, full, cached, _ = main()
    print(" ".join("%.6f" % v for v in losses))
    print("decode max diff %.3g" % (full - cached).abs().max().item())
