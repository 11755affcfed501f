#!/usr/bin/env python3
"""The gpt_step_tokens_per_s workload in PyTorch, for a same-machine comparison (not part of tessel).

Same model and step as benchmarks/gpt_workload.cc (the model in benchmarks/python/reference_gpt.py: vocab 256,
d_model 256, 4 layers, 8 heads, seq 128, batch 16, fp32), AdamW (lr 1e-4).
Timing: `--warmup` untimed steps, then the median over `--reps` runs of `--steps` steps each, on
`--threads` intra-op threads (default: all cores, like the tessel report).

Prints:  pytorch_gpt_step_tokens_per_s: <v> tokens/s (torch <version>, <n> threads)
Usage:   python3 benchmarks/pytorch/gpt_step.py [--threads=N] [--reps=5] [--steps=4] [--warmup=2]
         --profile=N prints torch.profiler's per-op table (self CPU time) over N steps instead.
Needs:   PyTorch (Debian: apt install python3-torch).
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from reference_gpt import B, T, V, gpt, median_rate  # noqa: E402  (the model, written once for torch and tessel)


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
    model = gpt(torch)
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
    rate = median_rate(step, args.reps, args.steps, B * T)
    print(f"pytorch_gpt_step_tokens_per_s: {rate:.0f} tokens/s "
          f"(torch {torch.__version__}, {torch.get_num_threads()} threads)")


if __name__ == "__main__":
    main()
