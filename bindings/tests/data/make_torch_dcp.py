"""Writes tests/data/torch_dcp/: a checkpoint saved by torch 2.15's DCP (torch.distributed.checkpoint.save, its
FileSystemWriter format) from 2 gloo ranks, read by torch_dcp_format_test.py. Every value follows a formula the
test recomputes: the fully_shard model's parameters i (in parameters() order) are arange(numel) / 10 + i, the
AdamW state's exp_avg / exp_avg_sq are arange(numel) / 100 and / 1000 (step 1), lr 0.25 in param_groups, and
"extra" holds an int, a string, bytes, an io.BytesIO, a bfloat16 and an int64 tensor, and a complex64 one (tessel
reads the rest).
Linear(6, 3)'s rows split 2 / 1 (uneven).

    ~/.cache/tessel/torch/python -m torch.distributed.run --nproc_per_node 2 bindings/tests/data/make_torch_dcp.py
"""
import io
import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import distribute_tensor

dist.init_process_group("gloo")
model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3))
fully_shard(model[0])
fully_shard(model)
opt = torch.optim.AdamW(model.parameters(), lr=0.25)
model(torch.ones(2, 4)).sum().backward()
opt.step()
msd, osd = get_state_dict(model, opt)
with torch.no_grad():  # parameters and moments by formula (their shards, as get_state_dict returned them)
    for i, p in enumerate(model.parameters()):
        full = torch.arange(p.numel(), dtype=torch.float32).reshape(p.shape) / 10 + i
        p.to_local().copy_(distribute_tensor(full, p.device_mesh, p.placements).to_local())
    for entry in osd["state"].values():
        for name, scale in (("exp_avg", 100), ("exp_avg_sq", 1000)):
            full = torch.arange(entry[name].numel(), dtype=torch.float32).reshape(entry[name].shape) / scale
            piece = distribute_tensor(full, entry[name].device_mesh, entry[name].placements).to_local()
            entry[name].to_local().copy_(piece)
extra = {"epoch": 3, "name": "run", "bf": torch.arange(5, dtype=torch.bfloat16) / 4, "ids": torch.arange(7) * 3,
         "rope": torch.polar(torch.ones(3), torch.arange(3.0)), "raw": b"raw\x00bytes", "blob": io.BytesIO(b"hello")}
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_dcp")
dcp.save({"model": msd, "optim": osd, "extra": extra}, checkpoint_id=out)
dist.destroy_process_group()
