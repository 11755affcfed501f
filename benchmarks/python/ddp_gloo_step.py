#!/usr/bin/env python3
"""The ddp_gloo_step_vs_pytorch workload: the reference GPT of benchmarks/pytorch/gpt_step.py (vocab 256, d_model
256, 4 layers, 8 heads, seq 128, fp32, pre-LN blocks, causal softmax attention written out, GELU (tanh) MLP,
cross-entropy, AdamW lr 1e-4) under DistributedDataParallel on `--world` gloo processes started by
multiprocessing.spawn (loopback TCP), the global batch of 16 split by rank. Written once against the torch API
and run either on tessel (`--lib=tessel`, Debian's python3 with the bindings) or on PyTorch (`--lib=torch`,
$TESSEL_TORCH_PYTHON). Each process runs max(1, cores / world) intra-op threads. Timing: 2 warm-up steps, then
the median over `--reps` runs of `--steps` steps, each run between two barriers.

Prints (rank 0):  ddp_gloo_step_tokens_per_s: <v> tokens/s (<lib> <version>, W=<w> gloo processes, <n> threads each)
Usage:            python3 benchmarks/python/ddp_gloo_step.py --lib=tessel [--world=2] [--reps=5] [--steps=4]
"""
import argparse
import importlib
import math
import os
import socket
import statistics
import time

V, C, L, H, T, B = 256, 256, 4, 8, 128, 16


def gpt(lib):
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

        def forward(self, idx, tgt):  # the loss: DDP synchronizes what runs through forward
            x = self.wte(idx) + self.wpe(lib.arange(idx.shape[1]))
            for layer in self.layers:
                x = layer(x)
            return F.cross_entropy(self.lm_head(self.ln_f(x)).view(-1, V), tgt.view(-1))

    return GPT()


def run(rank, lib_name, world, port, reps, steps):
    lib = importlib.import_module(lib_name)
    dist = importlib.import_module(lib_name + ".distributed")
    DDP = importlib.import_module(lib_name + ".nn.parallel").DistributedDataParallel
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    lib.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    lib.manual_seed(0)
    model = DDP(gpt(lib))
    opt = lib.optim.AdamW(model.parameters(), lr=1e-4)
    idx, tgt = lib.randint(0, V, (B, T)), lib.randint(0, V, (B, T))
    local = B // world
    idx, tgt = idx[rank * local:(rank + 1) * local], tgt[rank * local:(rank + 1) * local]

    def step():
        model(idx, tgt).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    rates = []
    for _ in range(reps):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        dist.barrier()
        rates.append(steps * B * T / (time.perf_counter() - t0))
    if rank == 0:
        print("ddp_gloo_step_tokens_per_s: %.0f tokens/s (%s %s, W=%d gloo processes, %d threads each)" % (
            statistics.median(rates), lib_name, getattr(lib, "__version__", "?"), world, lib.get_num_threads()),
            flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", choices=("tessel", "torch"), required=True)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp = importlib.import_module(args.lib + ".multiprocessing")
    mp.spawn(run, args=(args.lib, args.world, port, args.reps, args.steps), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
