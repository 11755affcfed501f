#!/usr/bin/env python3
"""The gpt_step_tokens_per_s workload in PyTorch, for a same-machine comparison (not part of tessel).

Same model and step as benchmarks/gpt_workload.cc: vocab 256, d_model 256, 4 layers, 8 heads, seq 128,
batch 16, fp32, pre-LN blocks, separate q/k/v/o projections without bias, causal softmax attention,
GELU (tanh) MLP 4x without bias, learned positions, untied head, cross-entropy, AdamW (lr 1e-4).
Timing: `--warmup` untimed steps, then the median over `--reps` runs of `--steps` steps each, on
`--threads` intra-op threads (default: all cores, like the tessel report).

Prints:  pytorch_gpt_step_tokens_per_s: <v> tokens/s (torch <version>, <n> threads)
Usage:   python3 benchmarks/pytorch/gpt_step.py [--threads=N] [--reps=5] [--steps=4] [--warmup=2]
         --profile=N prints torch.profiler's per-op table (self CPU time) over N steps instead.
Needs:   PyTorch (Debian: apt install python3-torch).
"""
import argparse
import math
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

V, C, L, H, T, B = 256, 256, 4, 8, 128, 16


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(C, C, bias=False) for _ in range(4))
        self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).tril())

    def forward(self, x):
        b, t, _ = x.shape
        split = lambda y: y.view(b, t, H, C // H).transpose(1, 2)
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
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for layer in self.layers:
            x = layer(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, V), tgt.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--profile", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx, tgt = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))

    def step():
        model.loss(idx, tgt).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    if args.profile:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(args.profile):
                step()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
        return
    rates = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        rates.append(args.steps * B * T / (time.perf_counter() - t0))
    print(f"pytorch_gpt_step_tokens_per_s: {statistics.median(rates):.0f} tokens/s "
          f"(torch {torch.__version__}, {torch.get_num_threads()} threads)")


if __name__ == "__main__":
    main()
