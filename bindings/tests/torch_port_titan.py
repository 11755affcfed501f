"""A torchtitan-shaped training script written against PyTorch's API, as a PyTorch user would write it.

torch_port_test.py runs it under tessel after replacing only the import lines (``torch`` -> ``tessel``).
What it uses, in torchtitan's order: a Llama-style model (RMSNorm, causal SDPA attention, SiLU MLP) whose
blocks get Megatron tensor parallelism on mesh["tp"], then activation checkpointing
(``ptd_checkpoint_wrapper``, re-registered with ``register_module``), then ``fully_shard`` over mesh["dp"];
AdamW with a LambdaLR warmup, the data-parallel mean loss through
``_functional_collectives.all_reduce``, and a DCP checkpoint of an ``AppState(Stateful)`` plus the LR
scheduler that a second run resumes from. Nothing below the imports mentions tessel.
"""
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper as ptd_checkpoint_wrapper
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

VOCAB, DIM, HEADS, LAYERS, SEQ, BATCH = 64, 32, 4, 2, 16, 8


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq = nn.Linear(DIM, DIM, bias=False)
        self.wk = nn.Linear(DIM, DIM, bias=False)
        self.wv = nn.Linear(DIM, DIM, bias=False)
        self.wo = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        # -1 heads: this rank's share of them under tensor parallelism
        q, k, v = (w(x).view(b, t, -1, DIM // HEADS).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(DIM, 4 * DIM, bias=False)
        self.w2 = nn.Linear(4 * DIM, DIM, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)))


class TransformerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm = nn.RMSNorm(DIM)
        self.attention = Attention()
        self.ffn_norm = nn.RMSNorm(DIM)
        self.feed_forward = FeedForward()

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleDict({str(i): TransformerBlock() for i in range(LAYERS)})
        self.norm = nn.RMSNorm(DIM)
        self.output = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h)
        return self.output(self.norm(h))


class AppState(Stateful):
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer

    def state_dict(self):
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        return {"model": model_sd, "optim": optim_sd}

    def load_state_dict(self, state_dict):
        set_state_dict(self.model, self.optimizer, model_state_dict=state_dict["model"],
                       optim_state_dict=state_dict["optim"])


def build(world_mesh):
    torch.manual_seed(0)
    model = Transformer()
    tp_plan = {"attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(),
               "attention.wv": ColwiseParallel(), "attention.wo": RowwiseParallel(),
               "feed_forward.w1": ColwiseParallel(), "feed_forward.w2": RowwiseParallel()}
    for layer_id, block in model.layers.named_children():
        parallelize_module(block, world_mesh["tp"], tp_plan)
        block = ptd_checkpoint_wrapper(block, preserve_rng_state=False)
        model.layers.register_module(layer_id, block)
        fully_shard(block, mesh=world_mesh["dp"], reshard_after_forward=True)
    fully_shard(model, mesh=world_mesh["dp"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 3))
    return model, optimizer, scheduler


def main(steps=6, tp=1, checkpoint_dir=None, save_after=None, resume=False):
    dist.init_process_group("gloo")
    world_mesh = init_device_mesh("cpu", (dist.get_world_size() // tp, tp), mesh_dim_names=("dp", "tp"))
    dp_mesh = world_mesh["dp"]
    model, optimizer, scheduler = build(world_mesh)
    start = 0
    if resume:
        state = {"app": AppState(model, optimizer), "lr_scheduler": scheduler, "step": 0}
        dcp.load(state, checkpoint_id=checkpoint_dir)
        start = state["step"]
    losses = []
    for step in range(start, steps):
        torch.manual_seed(100 + step)  # the same global batch on every rank: counting sequences from random starts
        tokens = (torch.randint(0, VOCAB, (BATCH, 1)) + torch.arange(SEQ + 1)) % VOCAB
        rows = BATCH // dp_mesh.size()
        local = tokens[dp_mesh.get_local_rank() * rows:(dp_mesh.get_local_rank() + 1) * rows]
        logits = model(local[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), local[:, 1:].flatten(0, 1))
        loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        losses.append(funcol.all_reduce(loss.detach(), reduceOp="avg", group=dp_mesh).item())
        if save_after is not None and step + 1 == save_after:
            dcp.save({"app": AppState(model, optimizer), "lr_scheduler": scheduler, "step": step + 1},
                     checkpoint_id=checkpoint_dir)
    dist.destroy_process_group()
    return losses


if __name__ == "__main__":  # steps tp [checkpoint_dir save=<step> | checkpoint_dir resume]
    args = sys.argv[1:] + [None, ""]
    mode = args[3]
    losses = main(int(args[0]), tp=int(args[1]), checkpoint_dir=args[2],
                  save_after=int(mode[5:]) if mode.startswith("save=") else None, resume=mode == "resume")
    print("rank losses:", repr(losses), flush=True)
