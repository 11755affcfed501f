#!/usr/bin/env python3
"""The moe_layer_vs_pytorch workload: forward + backward of a dropless top-k Mixture-of-Experts layer written against
the torch API as torchtitan's is (softmax router, top-2 of 32 experts, the (token, expert) pairs sorted by expert,
SwiGLU experts as grouped GEMMs through torch._grouped_mm, the outputs weighted and summed back per token), on one
rank: 2048 tokens of width 128, experts of hidden width 256. Run either on tessel (`--lib=tessel`) or on PyTorch
(`--lib=torch`), same threads and seed. It times the grouped GEMMs (about 1.6 GFLOP per step) and the routing's
gathers, sorts and scatters.

Prints:  moe_steps_per_s: <v> steps/s (<lib> <version>, <n> threads)
Usage:   python3 benchmarks/python/moe_layer.py --lib=tessel [--threads=N] [--reps=5]
"""
from tessel_or_torch import best_seconds, library

TOKENS, DIM, HIDDEN, EXPERTS, TOP_K, STEPS = 2048, 128, 256, 32, 2, 3


def main():
    args, lib = library(__doc__)
    F = lib.nn.functional
    x = lib.randn(TOKENS, DIM, requires_grad=True)
    router = (lib.randn(DIM, EXPERTS) * DIM ** -0.5).requires_grad_()
    w1, w3 = ((lib.randn(EXPERTS, DIM, HIDDEN) * DIM ** -0.5).requires_grad_() for _ in range(2))
    w2 = (lib.randn(EXPERTS, HIDDEN, DIM) * HIDDEN ** -0.5).requires_grad_()
    grad = lib.randn(TOKENS, DIM)

    def step():
        scores = F.softmax(x @ router, dim=-1)
        weight, expert = scores.topk(TOP_K, dim=-1)
        order = lib.argsort(expert.reshape(-1), stable=True)
        pairs = x[order // TOP_K]
        offs = lib.cumsum(lib.bincount(expert.reshape(-1), minlength=EXPERTS), 0).to(lib.int32)
        h = F.silu(lib._grouped_mm(pairs, w1, offs=offs)) * lib._grouped_mm(pairs, w3, offs=offs)
        out = lib._grouped_mm(h, w2, offs=offs)[lib.argsort(order)]
        y = (out.view(TOKENS, TOP_K, DIM) * weight.unsqueeze(-1)).sum(1)
        y.backward(grad)

    def steps():
        for _ in range(STEPS):
            step()

    best = best_seconds(steps, args.reps)
    print("moe_steps_per_s: %.1f steps/s (%s %s, %d threads, %d tokens, %d experts, top-%d)" % (
        STEPS / best, args.lib, getattr(lib, "__version__", "?"), lib.get_num_threads(), TOKENS, EXPERTS, TOP_K))


if __name__ == "__main__":
    main()
