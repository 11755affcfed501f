"""PyTorch's DDP tutorial shape, written against PyTorch: torch.multiprocessing.spawn starts the ranks,
each joins a gloo group (MASTER_ADDR / MASTER_PORT), wraps its model in DistributedDataParallel, reads its
share of a TensorDataset through a DistributedSampler (set_epoch per epoch), trains 16 epochs with SGD and a
StepLR, and rank 0 saves a checkpoint of model.module's state dict. With a fifth argument "zero" the optimizer
is ZeroRedundancyOptimizer over SGD (each rank steps its share of the parameters), whose state dict is
consolidated on rank 0 and saved too. Each rank prints its losses and a checksum of its final weights. torch_port_test.py runs it after replacing its import lines with
tessel's. (Checked to run under PyTorch 2.15 as written.)"""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def run(rank, world_size, port, out_dir, zero):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(rank)  # different on purpose: DDP starts every rank from rank 0's weights
    model = DDP(nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1)))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    y = x.sum(dim=1, keepdim=True)
    sampler = DistributedSampler(TensorDataset(x, y), num_replicas=world_size, rank=rank, shuffle=True, seed=1)
    loader = DataLoader(TensorDataset(x, y), batch_size=8, sampler=sampler)
    if zero:
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, lr=0.05)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
    epoch_losses = []
    for epoch in range(16):
        sampler.set_epoch(epoch)
        losses = []
        for xb, yb in loader:
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        sched.step()
        epoch_losses.append(sum(losses) / len(losses))
    if zero:
        opt.consolidate_state_dict(to=0)
    if rank == 0:
        torch.save(model.module.state_dict(), os.path.join(out_dir, "model.pt"))
        if zero:
            torch.save(opt.state_dict(), os.path.join(out_dir, "optim.pt"))
    checksum = sum(float(p.detach().double().sum()) for p in model.module.parameters())
    print("rank %d losses %.4f %.4f checksum %.10f" % (rank, epoch_losses[0], epoch_losses[-1], checksum),
          flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size, port, out_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    mp.spawn(run, args=(world_size, port, out_dir, sys.argv[4:] == ["zero"]), nprocs=world_size, join=True)
