#!/usr/bin/env python3
"""The init_vs_pytorch workload: building and initializing a model's parameters the way torchtitan's LLaMA
does (each block's nn.Linear layers made with their default kaiming-uniform init, then init_weights:
trunc_normal_(std=0.02) on every weight, zeros on the biases, normal_ on the token embedding), written once
against the torch API and run either on tessel (`--lib=tessel`) or on PyTorch (`--lib=torch`), same threads
and seed. A 4-block d_model 512 model: 16.8M parameters.

Prints:  init_params_per_s: <v> Mparams/s (<lib> <version>, <n> threads)
Usage:   python3 benchmarks/python/init_step.py --lib=tessel [--threads=N] [--reps=5]
"""
from tessel_or_torch import best_seconds, library

D, LAYERS, VOCAB = 512, 4, 8192


def build_and_init(lib):
    nn = lib.nn
    emb = nn.Embedding(VOCAB, D)
    layers = []
    for _ in range(LAYERS):
        layers += [nn.Linear(D, D, bias=False) for _ in range(4)]  # q, k, v, o
        layers += [nn.Linear(D, 4 * D), nn.Linear(4 * D, D)]       # the MLP
    with lib.no_grad():
        nn.init.normal_(emb.weight)
        for lin in layers:
            nn.init.trunc_normal_(lin.weight, mean=0.0, std=0.02)
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)
    return sum(p.numel() for m in [emb] + layers for p in m.parameters())


def main():
    args, lib = library(__doc__)
    n = build_and_init(lib)
    best = best_seconds(lambda: build_and_init(lib), args.reps)
    print("init_params_per_s: %.2f Mparams/s (%s %s, %d threads, %.1fM parameters)" % (
        n / best / 1e6, args.lib, getattr(lib, "__version__", "?"), lib.get_num_threads(), n / 1e6))


if __name__ == "__main__":
    main()
