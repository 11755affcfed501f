"""benchmarks/python/module_step.py — one training step (forward, backward, AdamW) of the same GPT
defined in Python (examples/python/gpt.py, tessel.nn modules) and as the C++ tessel.GPT, in one process,
timed alternately; prints `python_module_step_vs_cpp: <python tokens/s> <cpp tokens/s>`.

Run by //benchmarks:report (python_workload.cc); by hand:
    PYTHONPATH=bazel-bin/bindings:examples/python python3 benchmarks/python/module_step.py --reps 5
"""
import argparse
import statistics
import time

import numpy as np

import tessel
from gpt import PyGPT


def step_fn(model, loss_fn, idx, tgt):
    opt = tessel.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        loss = loss_fn(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad()
    return step


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--batch", type=int, default=8)
    args = p.parse_args()
    cfg = tessel.GPTConfig(vocab_size=256, d_model=128, n_layers=2, n_heads=4, seq_len=64)
    cpp = tessel.GPT(cfg, seed=0)
    py = PyGPT(cfg)
    py.load_state_dict(cpp.state_dict())
    rng = np.random.default_rng(0)
    idx_np = rng.integers(0, cfg.vocab_size, size=(args.batch, cfg.seq_len), dtype=np.int64)
    idx, tgt = tessel.tensor(idx_np), tessel.tensor(np.roll(idx_np, -1, axis=1))
    steps = {"python": step_fn(py, py.loss, idx, tgt), "cpp": step_fn(cpp, cpp.loss, idx, tgt)}
    times = {k: [] for k in steps}
    for k in steps:  # warmup
        steps[k]()
    for _ in range(args.reps):  # alternate, so load from other processes hits both alike
        for k, fn in steps.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    tokens = args.batch * cfg.seq_len
    rate = {k: tokens / statistics.median(v) for k, v in times.items()}
    print("python_module_step_vs_cpp: %.1f %.1f" % (rate["python"], rate["cpp"]), flush=True)


if __name__ == "__main__":
    main()
