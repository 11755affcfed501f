#!/usr/bin/env python3
"""PyTorch side of the gpu_attention_vs_torch_sdpa figure (not part of tessel): F.scaled_dot_product_attention
forward + backward, causal, bf16, [8, 12, 1024, 64] (GPT-2 124M's heads), on the GPU, timed with CUDA
events after 3 warm-up iterations, 10 timed — the shapes and timing of benchmarks/gpu_attention_vs_torch_sdpa.cc.

Prints:  pytorch_sdpa_fwd_bwd_ms <ms> (torch <version>)
Usage:   python3 sdpa_cuda.py
"""
import torch
import torch.nn.functional as F


def main():
    torch.manual_seed(0)
    shape = (8, 12, 1024, 64)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dout = torch.randn(shape, device="cuda", dtype=torch.bfloat16)

    def step():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.125)
        torch.autograd.grad(out, (q, k, v), dout)

    for _ in range(3):
        step()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        step()
    stop.record()
    torch.cuda.synchronize()
    print(f"pytorch_sdpa_fwd_bwd_ms {start.elapsed_time(stop) / 10:.3f} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
