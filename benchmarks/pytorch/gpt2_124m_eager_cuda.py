#!/usr/bin/env python3
"""PyTorch eager side of the gpu_gpt2_124m_mfu figure (not part of tessel): the same GPT-2 124M step as
benchmarks/gpu_gpt2_124m_mfu.cc on the same GPU, in the same session.

Model: 12 layers, d 768, 12 heads, seq 1024, vocab 50257, pre-LayerNorm, separate q/k/v/o projections
with bias, causal F.scaled_dot_product_attention, GELU (tanh) MLP 4x with bias, learned positions, lm head
tied to the token embedding, cross-entropy; parameters and AdamW (lr 6e-4) in bf16; batch 8. Eager mode
(no torch.compile). Timing: 2 warm-up steps, then `--steps` steps between cuda synchronizations.

Prints:  pytorch_gpt2_124m_tokens_per_s <v> (step <ms> ms, torch <version>)
Usage:   python3 gpt2_124m_eager_cuda.py [--steps=5]
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

V, C, L, H, T, B = 50257, 768, 12, 12, 1024, 8


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(C, C) for _ in range(4))
        self.fc, self.proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        b, t, _ = x.shape
        h = self.ln1(x)
        split = lambda y: y.view(b, t, H, C // H).transpose(1, 2)
        y = F.scaled_dot_product_attention(split(self.wq(h)), split(self.wk(h)), split(self.wv(h)), is_causal=True)
        x = x + self.wo(y.transpose(1, 2).reshape(b, t, C))
        return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.layers = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def loss(self, idx, tgt):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for layer in self.layers:
            x = layer(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.view(-1, V), tgt.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = GPT().cuda().to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4)
    idx = torch.randint(0, V, (B, T), device="cuda")
    tgt = torch.randint(0, V, (B, T), device="cuda")

    def step():
        model.loss(idx, tgt).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / args.steps
    print(f"pytorch_gpt2_124m_tokens_per_s {B * T / dt:.0f} (step {dt * 1e3:.1f} ms, torch {torch.__version__})")


if __name__ == "__main__":
    main()
