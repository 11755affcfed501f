"""A small tensor-parallel training script written against PyTorch's API, as a PyTorch user would write it.

torch_port_test.py runs it under tessel after replacing only the import lines (``torch`` -> ``tessel``):
on 2 rank threads (tessel.run_ranks), on 2 gloo processes (tessel_run), and on one rank, and requires the
same losses. Nothing below the imports mentions tessel. Megatron's MLP split: the first Linear column-wise,
the second row-wise; every rank sees the whole batch, so ``main()`` returns the global loss on each rank.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

DIM, HIDDEN, CLASSES, BATCH = 16, 64, 10, 8


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.in_proj = nn.Linear(DIM, HIDDEN)
        self.out_proj = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        return self.out_proj(F.relu(self.in_proj(x)))


def main(steps=10):
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = MLP()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("tp",))
    model = parallelize_module(model, mesh, {"in_proj": ColwiseParallel(), "out_proj": RowwiseParallel()})
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    losses = []
    for step in range(steps):
        torch.manual_seed(1000 + step % 2)  # the same batch on every rank (two batches, alternating)
        x = torch.randn(BATCH, DIM)
        labels = torch.randint(0, CLASSES, (BATCH,))
        loss = F.cross_entropy(model(x), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    dist.destroy_process_group()
    return losses


if __name__ == "__main__":
    losses = main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
    print("rank losses:", repr(losses), flush=True)
