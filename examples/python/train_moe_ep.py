"""examples/python/train_moe_ep.py — train a small Mixture-of-Experts Transformer defined in Python with expert
parallelism, written as a PyTorch script would be (only the imports name tessel): the dropless top-k MoE of
torchtitan, whose experts run as grouped GEMMs (F.grouped_mm) and travel between ranks by differentiable
all-to-alls (torch.distributed._functional_collectives.all_to_all_single).

Expert parallelism (EP) over every rank: rank r holds experts [r·E/ep, (r+1)·E/ep) and its own share of the global
batch (data parallel); the dense parameters are replicated and their gradients summed over the ranks, or with --fsdp
sharded by fully_shard over the same ranks (each block, then the root; the experts are its ignored_params, as
torchtitan keeps expert weights out of the dense FSDP groups when EP spans the data-parallel ranks). Per MoE layer:
  route   each token's top-k experts (softmax router scores), the (token, expert) pairs sorted by expert
  send    all_to_all of the pair counts, then of the tokens: each rank receives the pairs of its experts
  compute grouped_mm over the local experts (SwiGLU: w2·(silu(w1·x) ⊙ w3·x))
  return  the all_to_all back, scattered to the pairs' tokens and summed with their router weights
The backward runs the two all-to-alls in reverse (autograd). With --ep 1 the same script is the one-rank model on
the whole global batch, and training equals it step for step (train_moe_ep_test.py). The expert weights are
DTensors sharded by expert over the "ep" mesh, so --save writes a distributed checkpoint (torch.distributed.checkpoint)
that --resume loads on any number of ranks, FSDP or not.

    python3 examples/python/train_moe_ep.py --ep 2 --steps 20      # 2 rank threads
    python3 examples/python/train_moe_ep.py --ep 2 --fsdp          # dense weights fully sharded
    python3 examples/python/train_moe_ep.py --ep 2 --save /tmp/moe      # then, on one rank:
    python3 examples/python/train_moe_ep.py --resume /tmp/moe
    tessel_run --nproc-per-node 2 python3 examples/python/train_moe_ep.py --ep 2
Prints one progress line per step from rank 0.

Shape legend: B = batch, T = sequence, C = model width, V = vocabulary, N = tokens (B·T), E = experts, K = top-k.
The data is synthetic: each sequence counts up from a random start (mod V), so the loss falls well below ln(V).
"""
import argparse
import os
import time

import tessel as torch
import tessel.distributed as dist
import tessel.distributed._functional_collectives as funcol
import tessel.distributed.checkpoint as dcp
import tessel.nn as nn
import tessel.nn.functional as F
from tessel.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.fsdp import fully_shard
from tessel.distributed.tensor import Shard, distribute_tensor


class MoE(nn.Module):
    """Dropless top-k routed experts. The expert weights are DTensors sharded by expert over the "ep" mesh
    (Shard(0), torchtitan's layout): rank r holds experts r·E/ep ..., and a checkpoint saved on one number of ranks
    loads on another."""

    def __init__(self, dim, hidden, n_experts, top_k, ep_mesh, gen):
        super().__init__()
        self.n_experts, self.top_k, self.ep = n_experts, top_k, ep_mesh.size()
        self.n_local = n_experts // self.ep
        self.router = nn.Linear(dim, n_experts, bias=False)
        # Every rank draws all experts' weights (one generator) and keeps its own: the same model at every ep.
        def experts(*shape, fan_in):
            return nn.Parameter(distribute_tensor(torch.randn(*shape, generator=gen) * fan_in ** -0.5, ep_mesh,
                                                  [Shard(0)]))
        self.w1 = experts(n_experts, dim, hidden, fan_in=dim)
        self.w3 = experts(n_experts, dim, hidden, fan_in=dim)
        self.w2 = experts(n_experts, hidden, dim, fan_in=hidden)

    def experts(self, x, counts):
        """SwiGLU of the local experts over tokens grouped by expert (counts: tokens per local expert)."""
        offs = torch.cumsum(counts, 0).to(torch.int32)
        w1, w3, w2 = (w.to_local() for w in (self.w1, self.w3, self.w2))  # this rank's experts
        h = F.silu(F.grouped_mm(x, w1, offs=offs)) * F.grouped_mm(x, w3, offs=offs)
        return F.grouped_mm(h, w2, offs=offs)

    def forward(self, x_NC):
        N, C = x_NC.shape
        scores = F.softmax(self.router(x_NC), dim=-1)
        weight_NK, expert_NK = scores.topk(self.top_k, dim=-1)
        expert_P = expert_NK.reshape(-1)  # the (token, expert) pairs, P = N·K
        order = torch.argsort(expert_P, stable=True)  # the pairs by expert
        pairs = x_NC[order // self.top_k]
        counts_E = torch.bincount(expert_P, minlength=self.n_experts)
        if self.ep == 1:
            out = self.experts(pairs, counts_E)
        else:
            # recv_counts[s, e]: pairs rank s sends to this rank's local expert e
            recv_counts = funcol.all_to_all_single(counts_E, None, None, dist.group.WORLD).view(self.ep, self.n_local)
            send_splits = counts_E.view(self.ep, self.n_local).sum(1).tolist()
            recv_splits = recv_counts.sum(1).tolist()
            recv = funcol.all_to_all_single(pairs, recv_splits, send_splits, dist.group.WORLD)
            # recv holds [from rank 0: expert 0's pairs, expert 1's, ...][from rank 1: ...]: regroup by local expert
            src_expert = torch.repeat_interleave(torch.arange(self.ep * self.n_local) % self.n_local,
                                                 recv_counts.reshape(-1))
            by_expert = torch.argsort(src_expert, stable=True)
            local = self.experts(recv[by_expert], recv_counts.sum(0))
            back = local[torch.argsort(by_expert)]
            out = funcol.all_to_all_single(back, send_splits, recv_splits, dist.group.WORLD)
        # each pair's output goes back to its token, weighted by the router's score
        y = out[torch.argsort(order)]
        return (y.view(N, self.top_k, C) * weight_NK.unsqueeze(-1)).sum(1)


class Block(nn.Module):
    def __init__(self, args, ep_mesh, gen):
        super().__init__()
        self.head_dim = args.dim // args.heads
        self.attn_norm, self.moe_norm = nn.RMSNorm(args.dim), nn.RMSNorm(args.dim)
        self.wqkv = nn.Linear(args.dim, 3 * args.dim, bias=False)
        self.wo = nn.Linear(args.dim, args.dim, bias=False)
        self.moe = MoE(args.dim, args.hidden, args.experts, args.top_k, ep_mesh, gen)

    def forward(self, x_BTC):
        B, T, C = x_BTC.shape
        q, k, v = (t.view(B, T, -1, self.head_dim).transpose(1, 2)
                   for t in self.wqkv(self.attn_norm(x_BTC)).split(C, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x_BTC = x_BTC + self.wo(y.transpose(1, 2).reshape(B, T, C))
        return x_BTC + self.moe(self.moe_norm(x_BTC).reshape(B * T, C)).view(B, T, C)


class MoELM(nn.Module):
    def __init__(self, args, ep_mesh):
        super().__init__()
        torch.manual_seed(args.seed)  # the dense layers' own draws: equal on every rank and at every ep
        gen = torch.Generator().manual_seed(args.seed + 1)
        self.tok_embeddings = nn.Embedding(args.vocab, args.dim)
        self.layers = nn.ModuleList(Block(args, ep_mesh, gen) for _ in range(args.layers))
        self.norm = nn.RMSNorm(args.dim)
        self.output = nn.Linear(args.dim, args.vocab, bias=False)

    def forward(self, tokens_BT):
        h = self.tok_embeddings(tokens_BT)
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h))


def batch(args, step):
    """The global batch of a step (the same on every rank): sequences counting up from random starts."""
    gen = torch.Generator().manual_seed(1000 + step)
    start = torch.randint(0, args.vocab, (args.global_batch, 1), generator=gen)
    seq = (start + torch.arange(args.seq_len + 1)) % args.vocab
    return seq[:, :-1], seq[:, 1:]


def main(args):
    """Trains; returns the per-step losses on rank 0 (None elsewhere)."""
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if dist.get_world_size() != args.ep:
        raise SystemExit("--ep %d needs %d ranks, got %d" % (args.ep, args.ep, dist.get_world_size()))
    if args.experts % args.ep or args.global_batch % args.ep:
        raise SystemExit("--experts and --global-batch must be multiples of --ep")
    model = MoELM(args, init_device_mesh("cpu", (args.ep,), mesh_dim_names=("ep",)))
    experts = {p for n, p in model.named_parameters() if ".moe.w" in n}
    dense = [p for p in model.parameters() if p not in experts]
    if args.fsdp:
        mesh = init_device_mesh("cpu", (args.ep,), mesh_dim_names=("dp",))
        for module in list(model.layers) + [model]:
            fully_shard(module, mesh=mesh, ignored_params=experts)
            module.set_gradient_divide_factor(1.0)  # sum the ranks' shares of the loss, as the experts do
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    start = 0
    if args.resume:  # any number of ranks: the experts' shards and their AdamW states are resharded
        model_sd, optim_sd = get_state_dict(model, opt)
        state = {"model": model_sd, "optim": optim_sd, "train_state": {"step": 0}}
        dcp.load(state, checkpoint_id=args.resume)
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        start = state["train_state"]["step"]
    local_b = args.global_batch // args.ep
    losses = []
    for step in range(start, start + args.steps):
        t0 = time.perf_counter()
        inputs, targets = (t[rank * local_b:(rank + 1) * local_b] for t in batch(args, step))
        logits = model(inputs)
        # this rank's share of the global mean: the ranks' losses (and expert gradients) add up to it
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten()) / args.ep
        opt.zero_grad()
        loss.backward()
        if args.ep > 1:
            if not args.fsdp:
                for p in dense:  # data parallel: the replicated weights see every rank's tokens
                    dist.all_reduce(p.grad)
            dist.all_reduce(loss)
        opt.step()
        losses.append(loss.item())
        if rank == 0:
            tokens = args.global_batch * args.seq_len / (time.perf_counter() - t0)
            print("step %d | loss %.4f | %d tokens/s" % (step, losses[-1], tokens), flush=True)
    if args.save:
        model_sd, optim_sd = get_state_dict(model, opt)
        dcp.save({"model": model_sd, "optim": optim_sd, "train_state": {"step": start + args.steps}},
                 checkpoint_id=args.save)
    dist.destroy_process_group()
    return losses if rank == 0 else None


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ep", type=int, default=int(os.environ.get("WORLD_SIZE", "1")))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--hidden", type=int, default=48)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--experts", type=int, default=4)
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--global-batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fsdp", action="store_true", help="shard the dense weights with fully_shard")
    p.add_argument("--save", help="a checkpoint folder to save the model, AdamW and the step to at the end")
    p.add_argument("--resume", help="a checkpoint folder (saved on any number of ranks) to start from")
    return p.parse_args(argv)


if __name__ == "__main__":
    a = parse_args()
    if "RANK" not in os.environ:
        torch.run_ranks(a.ep, lambda world: main(a))  # rank threads in this process
    else:
        main(a)
