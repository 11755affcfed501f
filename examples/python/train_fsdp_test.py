"""Smoke test of examples/python/train_fsdp.py: 2 rank threads, a few steps; it prints a progress line
per step and the memory ledger, and its loss falls."""
import contextlib
import io
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tessel  # noqa: E402
import train_fsdp  # noqa: E402


def test_train_fsdp_prints_progress_and_the_ledger_and_learns():
    args = train_fsdp.parse_args(["--steps", "12", "--dim", "32", "--seq-len", "16"])
    out, losses = io.StringIO(), {}
    with contextlib.redirect_stdout(out):
        tessel.run_ranks(2, lambda world: losses.setdefault(world.rank, train_fsdp.main(args)))
    text = out.getvalue()
    lines = [l for l in text.splitlines() if l.startswith("step ")]
    assert len(lines) == 12 and all(re.search(r"\| [0-9]+ tokens/s$", l) for l in lines), text
    assert "memory ledger" in text and "optim" in text
    assert losses[0][-1] < losses[0][0] - 0.5, losses[0]


if __name__ == "__main__":
    import pytest
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
