#!/usr/bin/env python3
"""The ddp_gloo_step_vs_pytorch workload: the reference GPT (benchmarks/python/reference_gpt.py, the model of
benchmarks/pytorch/gpt_step.py; AdamW lr 1e-4) under DistributedDataParallel on `--world` gloo processes started by
multiprocessing.spawn (loopback TCP), the global batch of 16 split by rank. Written once against the torch API
and run either on tessel (`--lib=tessel`, Debian's python3 with the bindings) or on PyTorch (`--lib=torch`,
$TESSEL_TORCH_PYTHON). Each process runs max(1, cores / world) intra-op threads. Timing: 2 warm-up steps, then
the median over `--reps` runs of `--steps` steps, each run between two barriers.

Prints (rank 0):  ddp_gloo_step_tokens_per_s: <v> tokens/s (<lib> <version>, W=<w> gloo processes, <n> threads each)
Usage:            python3 benchmarks/python/ddp_gloo_step.py --lib=tessel [--world=2] [--reps=5] [--steps=4]
"""
import argparse
import importlib
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_gpt import B, T, V, gpt, median_rate  # noqa: E402  (the model of gpt_step.py)


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
    rate = median_rate(step, reps, steps, B * T, barrier=dist.barrier)
    if rank == 0:
        print("ddp_gloo_step_tokens_per_s: %.0f tokens/s (%s %s, W=%d gloo processes, %d threads each)" % (
            rate, lib_name, getattr(lib, "__version__", "?"), world, lib.get_num_threads()),
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
