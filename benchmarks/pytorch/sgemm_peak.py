#!/usr/bin/env python3
"""PyTorch's (MKL's) float32 GEMM on a large square matrix, for the `gemm_vs_peak` note (not part of tessel).

Timing: 2 untimed products, then the median GFLOP/s over `--reps` runs of `--iters` products each of
[n, n] @ [n, n] on `--threads` intra-op threads (default: all cores, like the tessel report).

Prints:  pytorch_sgemm_gflops: <v> GFLOP/s (torch <version>, <n> threads, n=<n>)
Usage:   python3 benchmarks/pytorch/sgemm_peak.py [--threads=N] [--n=2048] [--reps=5] [--iters=3]
"""
import argparse
import os
import statistics
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--iters", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    a, b = torch.randn(args.n, args.n), torch.randn(args.n, args.n)
    c = torch.empty(args.n, args.n)
    for _ in range(2):
        torch.mm(a, b, out=c)
    rates = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        for _ in range(args.iters):
            torch.mm(a, b, out=c)
        rates.append(2.0 * args.n ** 3 * args.iters / (time.perf_counter() - t0) / 1e9)
    print(f"pytorch_sgemm_gflops: {statistics.median(rates):.1f} GFLOP/s "
          f"(torch {torch.__version__}, {torch.get_num_threads()} threads, n={args.n})")


if __name__ == "__main__":
    main()
