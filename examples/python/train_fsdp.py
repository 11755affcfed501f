"""examples/python/train_fsdp.py — train a small GPT-style Transformer defined in Python with FSDP2's
fully_shard, written exactly as a PyTorch FSDP2 script (only the imports name tessel).

Runs as N rank threads in one process (default), or as N processes under tessel_run:
    python3 examples/python/train_fsdp.py --nproc 2 --steps 20
    tessel_run --nproc-per-node 2 python3 examples/python/train_fsdp.py --steps 20
Prints one progress line per step (loss, lr, tokens/s over all ranks) from rank 0, then the memory
ledger of rank 0 (params / grads / optimizer state / activations / comm buffers, live and peak).

Shape legend: B = batch per rank, T = sequence, C = model width, H = heads, V = vocabulary.
The data is synthetic: each sequence counts up from a random start (mod V), so the loss must fall well
below ln(V) as the model learns to predict the next number.
"""
import argparse
import os
import time

import tessel as torch
import tessel.distributed as dist
import tessel.nn as nn
import tessel.nn.functional as F
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.fsdp import MixedPrecisionPolicy, fully_shard


class Block(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.attn_norm = nn.RMSNorm(dim)
        self.wqkv = nn.Linear(dim, 3 * dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.ffn_norm = nn.RMSNorm(dim)
        self.w1 = nn.Linear(dim, 4 * dim, bias=False)
        self.w2 = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x_BTC):
        B, T, C = x_BTC.shape
        q, k, v = self.wqkv(self.attn_norm(x_BTC)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2) for t in (q, k, v))
        y_BHTD = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x_BTC = x_BTC + self.wo(y_BHTD.transpose(1, 2).reshape(B, T, C))
        return x_BTC + self.w2(F.silu(self.w1(self.ffn_norm(x_BTC))))


class Transformer(nn.Module):
    def __init__(self, vocab, dim, n_layers, n_heads, seq_len):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.pos_embeddings = nn.Embedding(seq_len, dim)
        self.layers = nn.ModuleList([Block(dim, n_heads) for _ in range(n_layers)])
        self.norm = nn.RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens_BT):
        h_BTC = self.tok_embeddings(tokens_BT) + self.pos_embeddings(torch.arange(tokens_BT.shape[1]))
        for layer in self.layers:
            h_BTC = layer(h_BTC)
        return self.output(self.norm(h_BTC))


def batch(step, global_batch, seq_len, vocab):
    """The same global batch on every rank: counting sequences from random starts."""
    torch.manual_seed(10_000 + step)
    starts = torch.randint(0, vocab, (global_batch,)).tolist()
    return torch.tensor([[(s + t) % vocab for t in range(seq_len + 1)] for s in starts])


def main(args):
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # every rank builds the same initial model
    model = Transformer(args.vocab, args.dim, args.layers, args.heads, args.seq_len)
    mesh = init_device_mesh("cpu", (world_size,), mesh_dim_names=("dp",))
    mp_policy = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32)
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp_policy)
    fully_shard(model, mesh=mesh, mp_policy=mp_policy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    scheduler = torch.optim.lr_scheduler.warmup_cosine(optimizer, warmup_steps=max(1, args.steps // 10),
                                                      total_steps=args.steps)
    rows = args.global_batch // world_size
    losses = []
    for step in range(args.steps):
        t0 = time.perf_counter()
        tokens = batch(step, args.global_batch, args.seq_len, args.vocab)[rank * rows:(rank + 1) * rows]
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        optimizer.zero_grad()
        lr = scheduler.get_last_lr()[0]
        scheduler.step()
        losses.append(loss.item())
        dt = time.perf_counter() - t0
        if rank == 0:
            print("step %3d/%d | loss %.4f | grad norm %.3f | lr %.2e | %.0f tokens/s"
                  % (step + 1, args.steps, losses[-1], grad_norm.item(), lr, args.global_batch * args.seq_len / dt),
                  flush=True)
    if rank == 0:
        print(torch.memory_report(), flush=True)
    dist.destroy_process_group()
    return losses


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nproc", type=int, default=2, help="rank threads when not started by tessel_run")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--global-batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    return p.parse_args(argv)


if __name__ == "__main__":
    args = parse_args()
    if "WORLD_SIZE" in os.environ:  # started by tessel_run: this process is one rank
        main(args)
    else:
        torch.run_ranks(args.nproc, lambda world: main(args))
