"""examples/python/train_pp_tp.py — train a small Transformer defined in Python with pipeline parallelism
(1F1B over 2 stages) and Megatron tensor parallelism inside each stage, written as a PyTorch script
would be (only the imports name tessel).

Composition order (DESIGN.md, torchtitan): split the model into stage modules, apply tensor parallelism to
each stage on mesh["tp"], then wrap it in a PipelineStage on mesh["pp"]'s group. Ranks: pp x tp.

    python3 examples/python/train_pp_tp.py --pp 2 --tp 2 --steps 20      # 4 rank threads
    tessel_run --nproc-per-node 4 python3 examples/python/train_pp_tp.py --pp 2 --tp 2
Prints one progress line per step from the rank that holds the loss (last stage, tp rank 0).

Shape legend: B = batch, T = sequence, C = model width, V = vocabulary. The data is synthetic: each
sequence counts up from a random start (mod V), so the loss falls well below ln(V) as the model learns.
"""
import argparse
import os
import time

import tessel as torch
import tessel.distributed as dist
import tessel.nn as nn
import tessel.nn.functional as F
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.pipelining import PipelineStage, Schedule1F1B
from tessel.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


class Block(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.head_dim = dim // n_heads
        self.attn_norm, self.ffn_norm = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.wq, self.wk, self.wv = (nn.Linear(dim, dim, bias=False) for _ in range(3))
        self.wo = nn.Linear(dim, dim, bias=False)
        self.w1, self.w2 = nn.Linear(dim, 4 * dim, bias=False), nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x_BTC):
        B, T, _ = x_BTC.shape
        h = self.attn_norm(x_BTC)
        # -1 heads: all of them unsharded, this rank's under tensor parallelism.
        q, k, v = (w(h).view(B, T, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x_BTC = x_BTC + self.wo(y.transpose(1, 2).reshape(B, T, -1))
        return x_BTC + self.w2(F.silu(self.w1(self.ffn_norm(x_BTC))))


class FirstStage(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.tok_embeddings = nn.Embedding(args.vocab, args.dim)
        self.pos_embeddings = nn.Embedding(args.seq_len, args.dim)
        self.layers = nn.ModuleList([Block(args.dim, args.heads) for _ in range(args.layers // 2)])

    def forward(self, tokens_BT):
        h = self.tok_embeddings(tokens_BT) + self.pos_embeddings(torch.arange(tokens_BT.shape[1]))
        for layer in self.layers:
            h = layer(h)
        return h


class LastStage(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.layers = nn.ModuleList([Block(args.dim, args.heads) for _ in range(args.layers - args.layers // 2)])
        self.norm = nn.RMSNorm(args.dim)
        self.output = nn.Linear(args.dim, args.vocab, bias=False)

    def forward(self, h):
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h))


class Whole(nn.Module):
    """Both stages in one module: the --pp 1 run."""

    def __init__(self, first, last):
        super().__init__()
        self.first, self.last = first, last

    def forward(self, tokens_BT):
        return self.last(self.first(tokens_BT))


TP_PLAN = {"layers.*.w[qkv]": ColwiseParallel(), "layers.*.wo": RowwiseParallel(),
           "layers.*.w1": ColwiseParallel(), "layers.*.w2": RowwiseParallel()}


def batch(step, global_batch, seq_len, vocab):
    """The same batch on every rank: counting sequences from random starts."""
    torch.manual_seed(10_000 + step)
    starts = torch.randint(0, vocab, (global_batch,)).tolist()
    return torch.tensor([[(s + t) % vocab for t in range(seq_len + 1)] for s in starts])


def main(args):
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (args.pp, args.tp), mesh_dim_names=("pp", "tp"))
    torch.manual_seed(0)  # every rank builds the same initial stages and keeps its own
    stages = [FirstStage(args), LastStage(args)]
    s = mesh.get_local_rank("pp")
    parts = [stages[s]] if args.pp == 2 else stages
    if args.tp > 1:
        for part in parts:
            parallelize_module(part, mesh["tp"], TP_PLAN)
    model = parts[0] if args.pp == 2 else Whole(*stages)

    def loss_fn(logits_BTV, targets_BT):
        return F.cross_entropy(logits_BTV.reshape(-1, args.vocab), targets_BT.reshape(-1))

    schedule = None
    if args.pp == 2:
        stage = PipelineStage(model, s, 2, "cpu", group=mesh.get_group("pp"))
        schedule = Schedule1F1B(stage, n_microbatches=args.microbatches, loss_fn=loss_fn)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    reports = s == args.pp - 1 and mesh.get_local_rank("tp") == 0
    losses = []
    for step in range(args.steps):
        t0 = time.perf_counter()
        tokens = batch(step, args.global_batch, args.seq_len, args.vocab)
        if schedule is None:
            loss = loss_fn(model(tokens[:, :-1]), tokens[:, 1:])
            loss.backward()
            loss = loss.item()
        elif s == 0:
            schedule.step(tokens[:, :-1])
            loss = None
        else:
            mb_losses = []  # torch's: each microbatch's mean loss; they split the batch evenly
            schedule.step(target=tokens[:, 1:], losses=mb_losses)
            loss = sum(v.item() for v in mb_losses) / len(mb_losses)
        optimizer.step()
        optimizer.zero_grad()
        if reports:
            losses.append(loss)
            print("step %3d/%d | loss %.4f | %.0f tokens/s" % (step + 1, args.steps, loss,
                  args.global_batch * args.seq_len / (time.perf_counter() - t0)), flush=True)
    dist.destroy_process_group()
    return losses


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pp", type=int, default=2, choices=(1, 2), help="pipeline stages (1: no pipeline)")
    p.add_argument("--tp", type=int, default=2, help="tensor-parallel ranks per stage (divides --heads)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--microbatches", type=int, default=4)
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
        torch.run_ranks(args.pp * args.tp, lambda world: main(args))
