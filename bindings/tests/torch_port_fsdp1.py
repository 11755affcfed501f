"""PyTorch's FSDP1 tutorial shape, written against PyTorch: torch.multiprocessing.spawn starts the ranks, each
joins a gloo group and wraps its model in FullyShardedDataParallel with a transformer_auto_wrap_policy over the
blocks (FULL_SHARD, or the strategy named by the fifth argument), reads its share of a TensorDataset through a
DistributedSampler, trains 6 epochs with AdamW, FSDP's clip_grad_norm_ and a StepLR, then saves a full state dict
on rank 0 (FULL_STATE_DICT, offload_to_cpu, rank0_only) and the optimizer state by name. A fresh wrapped model
loads the saved file on every rank and must give the trained model's loss. Each rank prints the mean over its
batches of each epoch's loss, that reload check and a checksum of the full weights. torch_port_test.py runs it
after replacing its import lines with tessel's. (Checked to run under PyTorch 2.15 as written: its one-process
losses equal the mean of its two processes'.)"""
import functools
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.fsdp import FullStateDictConfig, FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy, StateDictType
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

DIM, BLOCKS, ROWS, GLOBAL_BATCH, EPOCHS = 16, 3, 64, 16, 6


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        return x + self.ff(self.norm(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, DIM)
        self.blocks = nn.ModuleList([Block(DIM) for _ in range(BLOCKS)])
        self.out = nn.Linear(DIM, 1)

    def forward(self, x):
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        return self.out(h)


def wrapped(strategy):
    torch.manual_seed(0)
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
    return FSDP(Net(), auto_wrap_policy=policy, sharding_strategy=ShardingStrategy[strategy],
                device_id=torch.device("cpu"))


def run(rank, world_size, port, out_dir, strategy):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    model = wrapped(strategy)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(ROWS, 8, generator=g)
    y = torch.sin(x[:, :1] * 2) + x[:, 1:2] * x[:, 2:3]
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=2)
    loader = DataLoader(data, batch_size=GLOBAL_BATCH // world_size, sampler=sampler)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    epoch_losses = []
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        losses = []
        for xb, yb in loader:
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            model.clip_grad_norm_(0.5)
            opt.step()
            losses.append(loss.item())
        sched.step()
        epoch_losses.append(sum(losses) / len(losses))
    save_policy = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, save_policy):
        cpu_state = model.state_dict()
        optim_state = FSDP.optim_state_dict(model, opt)
    path = os.path.join(out_dir, "fsdp1_model.pt")
    if rank == 0:
        torch.save(cpu_state, path)
        torch.save(optim_state, os.path.join(out_dir, "fsdp1_optim.pt"))
    dist.barrier()
    reloaded = wrapped(strategy)
    reloaded.load_state_dict(torch.load(path))
    with torch.no_grad():
        trained_loss = nn.functional.mse_loss(model(x), y).item()
        reloaded_loss = nn.functional.mse_loss(reloaded(x), y).item()
    with FSDP.summon_full_params(model, writeback=False):
        checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
    sys.stdout.write("rank %d losses %s reload %.6f %.6f checksum %.6f\n" % (
        rank, " ".join("%.6f" % v for v in epoch_losses), trained_loss, reloaded_loss, checksum))  # one write
    sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size, port, out_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    strategy = sys.argv[4] if len(sys.argv) > 4 else "FULL_SHARD"
    mp.spawn(run, args=(world_size, port, out_dir, strategy), nprocs=world_size, join=True)
