#!/usr/bin/env python3
"""PyTorch FSDP2 on 2 gloo processes, for the fsdp_gloo_step_vs_pytorch figure (not part of tessel).

The model and step of gpt_step.py (vocab 256, d_model 256, 4 layers, 8 heads, seq 128, fp32, AdamW
lr 1e-4) under torch.distributed.fsdp.fully_shard — each block, then the root — on a 1-D CPU device
mesh over `--world` processes (gloo, loopback TCP), the global batch of 16 split by rank. Each process
runs max(1, cores / world) intra-op threads, as benchmarks/fsdp_gloo_step.cc does. Timing: 2 warm-up
steps, then the median over `--reps` runs of `--steps` steps (each run between two barriers).

Prints (rank 0):  pytorch_fsdp_gloo_tokens_per_s: <v> tokens/s (torch <version>, W=<w> gloo processes, <n> threads each)
Usage:            python3 benchmarks/pytorch/fsdp_gloo_step.py [--world=2] [--reps=5] [--steps=4]
"""
import argparse
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from reference_gpt import B, T, V, gpt, median_rate  # noqa: E402  (the model of gpt_step.py)


def run(rank, world, port, reps, steps):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    torch.manual_seed(0)
    model = gpt(torch)
    mesh = init_device_mesh("cpu", (world,))
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    register_fsdp_forward_method(model, "loss")  # the step calls model.loss, not forward
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx, tgt = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))
    local = B // world
    idx, tgt = idx[rank * local:(rank + 1) * local], tgt[rank * local:(rank + 1) * local]

    def step():
        model.loss(idx, tgt).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    rate = median_rate(step, reps, steps, B * T, barrier=dist.barrier)
    if rank == 0:
        print(f"pytorch_fsdp_gloo_tokens_per_s: {rate:.0f} tokens/s "
              f"(torch {torch.__version__}, W={world} gloo processes, {torch.get_num_threads()} threads each)",
              flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()
    with socket.socket() as s:  # a free loopback port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(run, args=(args.world, port, args.reps, args.steps), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
