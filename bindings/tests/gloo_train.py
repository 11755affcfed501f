"""One process of a multi-process run under tessel-run (gloo backend), driven by tessel_test.py:
fully_shard training of a small GPT on this process's rows of the same global batches; rank 0 prints
`losses: <mean over ranks per step, repr>`. Argument: the number of steps."""
import sys

import numpy as np
import tessel

steps = int(sys.argv[1])
world = tessel.init_process_group()
mesh = tessel.init_device_mesh(world, [world.size], ["dp"])
cfg = tessel.GPTConfig(vocab_size=61, d_model=32, n_layers=2, n_heads=2, seq_len=16)
model = tessel.GPT(cfg, seed=3)
for block in model.layers:
    tessel.fully_shard(block, mesh)
root = tessel.fully_shard(model, mesh)
opt = tessel.AdamW(model, lr=1e-2)
rng = np.random.default_rng(0)
rows = 8 // world.size
losses = []
for _ in range(steps):
    idx = rng.integers(0, cfg.vocab_size, size=(8, cfg.seq_len), dtype=np.int64)
    tgt = np.roll(idx, -1, axis=1)
    lo = world.rank * rows
    loss = model.loss(tessel.tensor(idx[lo:lo + rows]), tessel.tensor(tgt[lo:lo + rows]))
    loss.backward()
    tessel.clip_grad_norm_fsdp(root, 1.0)
    opt.step()
    opt.zero_grad()
    # Every rank's loss: one element per rank, wrapped as a [W] DTensor sharded on dim 0, gathered.
    local = tessel.tensor(np.array([loss.item()], dtype=np.float64))
    all_losses = tessel.from_local(local, mesh, [tessel.Shard(0)]).numpy()
    losses.append(float(all_losses.mean()))
if world.rank == 0:
    print("losses:", repr(losses), flush=True)
