"""The reference GPT of the step figures, written once against the torch API for either library (`lib` is the
torch or the tessel module), and the timing protocol the step scripts share. Same model as
benchmarks/gpt_workload.cc: vocab 256, d_model 256, 4 layers, 8 heads, seq 128, batch 16, fp32, pre-LN blocks,
separate q/k/v/o projections without bias, causal softmax attention written out, GELU (tanh) MLP 4x without bias,
learned positions, untied head, cross-entropy.

Used by benchmarks/pytorch/gpt_step.py and fsdp_gloo_step.py (PyTorch) and benchmarks/python/ddp_gloo_step.py
(PyTorch and tessel).
"""
import math
import statistics
import time

V, C, L, H, T, B = 256, 256, 4, 8, 128, 16


def gpt(lib):
    """A new GPT whose loss(idx, tgt) (also its forward, for DDP) is the mean cross-entropy."""
    nn, F = lib.nn, lib.nn.functional

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.wq, self.wk, self.wv, self.wo = (nn.Linear(C, C, bias=False) for _ in range(4))
            self.register_buffer("mask", lib.ones(T, T, dtype=lib.bool).tril())

        def forward(self, x):
            b, t, _ = x.shape
            split = lambda y: y.view(b, t, H, C // H).transpose(1, 2)  # noqa: E731
            q, k, v = split(self.wq(x)), split(self.wk(x)), split(self.wv(x))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
            att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1)
            return self.wo((att @ v).transpose(1, 2).reshape(b, t, C))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.attn, self.ln2 = nn.LayerNorm(C), Attention(), nn.LayerNorm(C)
            self.fc, self.proj = nn.Linear(C, 4 * C, bias=False), nn.Linear(4 * C, C, bias=False)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
            self.layers = nn.ModuleList(Block() for _ in range(L))
            self.ln_f, self.lm_head = nn.LayerNorm(C), nn.Linear(C, V, bias=False)

        def loss(self, idx, tgt):
            x = self.wte(idx) + self.wpe(lib.arange(idx.shape[1]))
            for layer in self.layers:
                x = layer(x)
            return F.cross_entropy(self.lm_head(self.ln_f(x)).view(-1, V), tgt.view(-1))

        def forward(self, idx, tgt):
            return self.loss(idx, tgt)

    return GPT()


def median_rate(step, reps, steps, tokens, barrier=None):
    """Tokens per second: the median over `reps` runs of `steps` calls of step() (`tokens` each), every run between
    two calls of barrier() when one is given (the processes start and end a run together)."""
    rates = []
    for _ in range(reps):
        if barrier is not None:
            barrier()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        if barrier is not None:
            barrier()
        rates.append(steps * tokens / (time.perf_counter() - t0))
    return statistics.median(rates)
