"""Acceptance: torch_port_fsdp.py, an FSDP2 training script written against PyTorch's API (Python
Transformer blocks, fully_shard per block then the root with a MixedPrecisionPolicy, AdamW, gradient
clipping, a 10-step loop), runs under tessel after replacing only its import lines, on 2 rank threads
and on 2 gloo processes under tessel_run, and its losses equal one rank's within 1e-5."""
import os
import re
import subprocess
import sys
import types

import numpy as np
import pytest

import tessel

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_port_fsdp.py")
STEPS = 10


def port(source):
    """`import torch...` / `from torch... import` lines only: torch -> tessel (the module keeps the name
    `torch` in the script, exactly as a user's sed would do it)."""
    lines = []
    for line in source.splitlines():
        if re.match(r"(import|from)\s+torch\b", line):
            line = "import tessel as torch" if line == "import torch" else re.sub(r"\btorch\b", "tessel", line)
        lines.append(line)
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def ported():
    with open(SCRIPT) as f:
        source = f.read()
    text = port(source)
    changed = [(a, b) for a, b in zip(source.splitlines(), text.splitlines()) if a != b]
    assert len(changed) == 6 and all(re.match(r"(import|from) ", a) for a, _ in changed), changed
    module = types.ModuleType("torch_port_fsdp_ported")
    exec(compile(text, SCRIPT + " (ported)", "exec"), module.__dict__)
    return text, module


def threads_losses(module, world_size):
    per_rank = {}

    def rank_fn(world):
        per_rank[world.rank] = module.main(STEPS)

    tessel.run_ranks(world_size, rank_fn)
    return np.mean([per_rank[r] for r in range(world_size)], axis=0)


@pytest.fixture(scope="module")
def one_rank(ported):
    losses = threads_losses(ported[1], 1)
    # It trains: the two alternating batches' losses fall (a script that skipped the update would not).
    assert losses[-2:].mean() < losses[:2].mean() - 0.05, losses
    return losses


def test_ported_script_on_two_rank_threads_matches_one_rank(ported, one_rank):
    np.testing.assert_allclose(threads_losses(ported[1], 2), one_rank, rtol=0, atol=1e-5)


def test_ported_script_on_two_gloo_processes_matches_one_rank(ported, one_rank, tmp_path):
    script = tmp_path / "torch_port_fsdp_ported.py"
    script.write_text(ported[0])
    runfiles = os.path.join(os.environ["TEST_SRCDIR"], "tessel")
    env = dict(os.environ, PYTHONPATH=os.path.join(runfiles, "bindings"))
    out = subprocess.run([os.path.join(runfiles, "comm", "tessel_run"), "--nproc-per-node", "2", "--master-port", "0",
                          sys.executable, str(script), str(STEPS)], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [eval(line.split("rank losses:", 1)[1]) for line in out.stdout.splitlines() if "rank losses:" in line]
    assert len(rows) == 2, out.stdout
    np.testing.assert_allclose(np.mean(rows, axis=0), one_rank, rtol=0, atol=1e-5)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
