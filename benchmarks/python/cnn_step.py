#!/usr/bin/env python3
"""The cnn_step_vs_pytorch workload: one SGD training step of a small ResNet-style CNN (CIFAR-sized
[64, 3, 32, 32] batch; conv-BN-ReLU blocks of 32/64/128 channels, one 2x2 max pool, a strided block,
global average pool, linear head; cross-entropy; SGD with momentum), written once against the torch API
and run either on tessel (`--lib=tessel`, Debian's python3 with the bindings) or on PyTorch
(`--lib=torch`, $TESSEL_TORCH_PYTHON) with the same threads and seed.

Prints:  cnn_step_images_per_s: <v> images/s (<lib> <version>, <n> threads)
Usage:   python3 benchmarks/python/cnn_step.py --lib=tessel [--threads=N] [--reps=5] [--steps=3] [--warmup=2]
         --profile prints the per-op table (tessel.profiler / torch.profiler) of one step instead;
         --autocast runs the forward and loss under autocast("cpu", dtype=bfloat16) (fp32 parameters).
"""
import argparse
import importlib
import statistics
import time

import numpy as np

N, CLASSES = 64, 10


def model(lib):
    nn = lib.nn

    def block(c_in, c_out, stride):
        return nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(),
                             nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())
    return nn.Sequential(nn.Conv2d(3, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
                         block(32, 32, 1), nn.MaxPool2d(2), block(32, 64, 1), block(64, 128, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, CLASSES))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", choices=("tessel", "torch"), required=True)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--autocast", action="store_true")
    args = ap.parse_args()
    lib = importlib.import_module(args.lib)
    if args.threads:
        lib.set_num_threads(args.threads)
    lib.manual_seed(0)
    m = model(lib)
    opt = lib.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    rng = np.random.default_rng(0)
    x = lib.tensor(rng.normal(size=(N, 3, 32, 32)).astype(np.float32))
    y = lib.tensor(rng.integers(0, CLASSES, size=N))

    def step():
        with lib.autocast("cpu", dtype=lib.bfloat16, enabled=args.autocast):
            loss = lib.nn.functional.cross_entropy(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    for _ in range(args.warmup):
        step()
    if args.profile:
        with lib.profiler.profile() as prof:
            step()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))
        return
    rates = []
    for _ in range(args.reps):
        t = time.perf_counter()
        for _ in range(args.steps):
            step()
        rates.append(args.steps * N / (time.perf_counter() - t))
    print("cnn_step_images_per_s: %.1f images/s (%s %s, %d threads%s)" % (
        statistics.median(rates), args.lib, getattr(lib, "__version__", "?"), lib.get_num_threads(),
        ", bf16 autocast" if args.autocast else ""))


if __name__ == "__main__":
    main()
