"""A small FSDP2 training script written against PyTorch's API, as a PyTorch user would write it.

torch_port_test.py runs it under tessel after replacing only the import lines (``torch`` -> ``tessel``):
on 2 rank threads (tessel.run_ranks), on 2 gloo processes (tessel_run), and on one rank, and requires
the same losses. Nothing below the imports mentions tessel. ``main()`` returns the per-step
losses of this rank (each rank trains on its rows of the same global batch; their mean over ranks
is the global batch's loss).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

VOCAB, DIM, HEADS, LAYERS, SEQ, BATCH = 37, 32, 4, 2, 8, 4


class Block(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.attn_norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.mlp_norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).split(C, dim=2)
        q = q.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
        k = k.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
        v = v.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp(self.mlp_norm(x))


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Parameter(torch.randn(SEQ, DIM) * 0.02)
        self.layers = nn.ModuleList([Block(DIM, HEADS) for _ in range(LAYERS)])
        self.norm = nn.RMSNorm(DIM)
        self.output = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens) + self.pos[: tokens.shape[1]]
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h))


def main(steps=10):
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = Transformer()
    mesh = init_device_mesh("cpu", (world_size,), mesh_dim_names=("dp",))
    mp_policy = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32)
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp_policy)
    fully_shard(model, mesh=mesh, mp_policy=mp_policy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    losses = []
    for step in range(steps):
        torch.manual_seed(1000 + step % 2)  # the same global batch on every rank (two batches, alternating)
        tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1))
        rows = BATCH // world_size
        local = tokens[rank * rows:(rank + 1) * rows]
        inputs, targets = local[:, :-1], local[:, 1:]
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    dist.destroy_process_group()
    return losses


if __name__ == "__main__":
    losses = main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
    print("rank losses:", repr(losses), flush=True)
