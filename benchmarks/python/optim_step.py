#!/usr/bin/env python3
"""The python_optim_vs_pytorch workload: an optimizer written by hand in Python against the torch API, as
research code and ports of newer optimizers are (torch's single-tensor AdamW algorithm: decoupled weight decay
with `p.mul_`, `exp_avg.lerp_`, `exp_avg_sq.mul_().addcmul_()`, `sqrt` / `add_` for the denominator,
`p.addcdiv_`), plus an exponential moving average of the weights with `_foreach_lerp_`, over the parameters of
the reference GPT's shapes (vocab 256, d_model 256, 4 blocks: 52 tensors, 3.3M parameters). It times per-call
cost (8 in-place or small ops per parameter) and memory-bound elementwise work together. Run either on tessel
(`--lib=tessel`) or on PyTorch (`--lib=torch`), same threads and seed.

Prints:  optim_steps_per_s: <v> steps/s (<lib> <version>, <n> threads)
Usage:   python3 benchmarks/python/optim_step.py --lib=tessel [--threads=N] [--reps=5]
"""
import math

from tessel_or_torch import best_seconds, library

D, LAYERS, VOCAB, STEPS = 256, 4, 256, 10


def gpt_shapes():
    shapes = [(VOCAB, D), (128, D)]  # token and position embeddings
    for _ in range(LAYERS):
        shapes += [(D,), (D,), (3 * D, D), (3 * D,), (D, D), (D,), (D,), (D,), (4 * D, D), (4 * D,), (D, 4 * D), (D,)]
    return shapes + [(D,), (D,)]  # the final norm


class HandAdamW:
    """torch.optim.AdamW's single-tensor update, written as a user writes it."""

    def __init__(self, lib, params, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1):
        self.lib, self.params, self.lr, self.betas, self.eps, self.wd = lib, params, lr, betas, eps, weight_decay
        self.state = [(lib.zeros_like(p), lib.zeros_like(p)) for p in params]
        self.t = 0

    def step(self):
        self.t += 1
        b1, b2 = self.betas
        bias1, bias2_sqrt = 1 - b1 ** self.t, math.sqrt(1 - b2 ** self.t)
        with self.lib.no_grad():
            for p, (m, v) in zip(self.params, self.state):
                g = p.grad
                p.mul_(1 - self.lr * self.wd)
                m.lerp_(g, 1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                denom = (v.sqrt() / bias2_sqrt).add_(self.eps)
                p.addcdiv_(m, denom, value=-self.lr / bias1)


def main():
    args, lib = library(__doc__)
    params = [lib.nn.Parameter(lib.randn(*s) * 0.02) for s in gpt_shapes()]
    for p in params:
        p.grad = lib.randn(*p.shape) * 1e-3
    opt = HandAdamW(lib, params)
    ema = [p.detach().clone() for p in params]

    def steps():
        for _ in range(STEPS):
            opt.step()
            with lib.no_grad():
                lib._foreach_lerp_(ema, params, 1 - 0.999)

    best = best_seconds(steps, args.reps)
    n = sum(p.numel() for p in params)
    print("optim_steps_per_s: %.1f steps/s (%s %s, %d threads, %d tensors, %.1fM parameters)" % (
        STEPS / best, args.lib, getattr(lib, "__version__", "?"), lib.get_num_threads(), len(params), n / 1e6))


if __name__ == "__main__":
    main()
