"""tessel: DTensor-style composable sharding, with PyTorch's concepts and names.

The package is a thin face over the C++ core (``tessel._C``): every call converts its arguments,
releases the GIL while C++ computes or communicates, and raises the Python exception that the
error's code names (ValueError, RuntimeError, TimeoutError, ...), with the same message.

    import numpy as np, tessel
    cfg = tessel.GPTConfig(vocab_size=256, d_model=64, n_layers=2, n_heads=4, seq_len=32)

    def train(world):                          # runs on every rank (threads backend)
        mesh = tessel.init_device_mesh(world, [world.size], ["dp"])
        model = tessel.GPT(cfg, seed=0)
        for block in model.layers:
            tessel.fully_shard(block, mesh)
        root = tessel.fully_shard(model, mesh)
        opt = tessel.AdamW(model, lr=1e-3)
        loss = model.loss(tessel.tensor(idx), tessel.tensor(tgt))
        loss.backward()
        tessel.clip_grad_norm_fsdp(root, 1.0)
        opt.step(); opt.zero_grad()

    tessel.run_ranks(4, train)
"""
from ._C import (  # noqa: F401
    AdamW,
    CommTracer,
    DeviceMesh,
    FSDPModule,
    GPT,
    GPTConfig,
    Module,
    Optimizer,
    Partial,
    ProcessGroup,
    Replicate,
    Shard,
    Tensor,
    clip_grad_norm,
    clip_grad_norm_fsdp,
    distribute_tensor,
    from_local,
    fully_shard,
    init_device_mesh,
    init_process_group,
    load,
    memory_report,
    run_ranks,
    save,
    tensor,
)

__all__ = [name for name in dir() if not name.startswith("_")]
