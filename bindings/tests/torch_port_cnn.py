"""A small-CNN DDP job written against PyTorch (the CIFAR tutorial's shape on synthetic 3x8x8 images):
torch.multiprocessing.spawn starts the ranks, each joins a gloo group, builds Conv2d -> BatchNorm2d -> ReLU
-> MaxPool2d -> Conv2d -> BatchNorm2d -> ReLU -> AdaptiveAvgPool2d -> Flatten -> Linear (SyncBatchNorm only
where CUDA is available, as CPU scripts do), wraps it in DistributedDataParallel, reads its share through
a DistributedSampler, trains with SGD (momentum, nesterov, weight decay) under CosineAnnealingLR, then
measures accuracy in eval mode, and rank 0 saves model.module's state dict. Each rank prints its first and
last epoch loss, its accuracy and a checksum of its final weights. torch_port_test.py runs it after
replacing its import lines with tessel's. (Checked to run under PyTorch 2.15 as written.)"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def make_data(n=128):
    """Class k: a bright 4x4 patch in quadrant k of channel k % 3, on noise."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, 8, 8, generator=g) * 0.5
    y = torch.arange(n) % 4
    for i in range(n):
        k = int(y[i])
        r, c = (k // 2) * 4, (k % 2) * 4
        x[i, k % 3, r:r + 4, c:c + 4] += 2.0
    return x, y


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.classifier = nn.Linear(16, 4)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def run(rank, world_size, port, out_dir):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    net = Net()
    if torch.cuda.is_available():
        net = nn.SyncBatchNorm.convert_sync_batchnorm(net)
    model = DDP(net)
    x, y = make_data()
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=3)
    loader = DataLoader(dataset, batch_size=16, sampler=sampler)
    epochs = 8
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    epoch_losses = []
    for epoch in range(epochs):
        model.train()
        sampler.set_epoch(epoch)
        losses = []
        for xb, yb in loader:
            opt.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        sched.step()
        epoch_losses.append(sum(losses) / len(losses))
    model.eval()
    with torch.no_grad():
        accuracy = (model(x).argmax(dim=1) == y).float().mean().item()
    if rank == 0:
        torch.save(model.module.state_dict(), os.path.join(out_dir, "cnn.pt"))
    checksum = sum(float(p.detach().double().sum()) for p in model.module.parameters())
    print("rank %d losses %.4f %.4f accuracy %.4f checksum %.10f"
          % (rank, epoch_losses[0], epoch_losses[-1], accuracy, checksum), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size, port, out_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    mp.spawn(run, args=(world_size, port, out_dir), nprocs=world_size, join=True)
