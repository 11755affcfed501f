"""Smoke test of examples/python/train_pp_tp.py: 2 pipeline stages x 2-way tensor parallelism on 4 rank
threads prints a progress line per step, its loss falls, and it equals the same script on one rank
(--pp 1 --tp 1: no pipeline, no tensor parallelism) step for step."""
import contextlib
import io
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tessel  # noqa: E402
import train_pp_tp  # noqa: E402

FLAGS = ["--steps", "12", "--dim", "32", "--seq-len", "16", "--heads", "2"]


def run(pp, tp):
    args = train_pp_tp.parse_args(FLAGS + ["--pp", str(pp), "--tp", str(tp)])
    out, losses = io.StringIO(), {}

    def rank_fn(world):
        got = train_pp_tp.main(args)
        if got:
            losses[world.rank] = got

    with contextlib.redirect_stdout(out):
        tessel.run_ranks(pp * tp, rank_fn)
    assert len(losses) == 1, losses  # one rank reports: the last stage's tp rank 0
    return out.getvalue(), next(iter(losses.values()))


def test_pp_by_tp_training_prints_progress_learns_and_equals_one_rank():
    text, losses = run(2, 2)
    lines = [l for l in text.splitlines() if l.startswith("step ")]
    assert len(lines) == 12 and all(re.search(r"\| [0-9]+ tokens/s$", l) for l in lines), text
    assert losses[-1] < losses[0] - 0.5, losses
    _, one = run(1, 1)
    np.testing.assert_allclose(losses, one, rtol=0, atol=1e-4)


if __name__ == "__main__":
    import pytest
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
