"""The launch of torch's distributed tutorials, written against PyTorch: torch.multiprocessing.spawn
starts the ranks, each sets MASTER_ADDR / MASTER_PORT and calls init_process_group("gloo", rank=...,
world_size=...), all-reduces its rank + 1 and prints the sum. FAIL_RANK=r makes rank r raise.
torch_port_test.py runs it after replacing its import lines with tessel's."""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    if os.environ.get("FAIL_RANK") == str(rank):
        raise ValueError("rank %d fails on purpose" % rank)
    t = torch.ones(3) * (rank + 1)
    dist.all_reduce(t)
    print("rank %d of %d: %s" % (dist.get_rank(), dist.get_world_size(), t.tolist()), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size, port = int(sys.argv[1]), int(sys.argv[2])
    mp.spawn(run, args=(world_size, port), nprocs=world_size, join=True)
