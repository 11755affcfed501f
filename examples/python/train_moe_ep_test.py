"""examples/python/train_moe_ep.py: expert parallelism over 2 and 4 rank threads, with the dense weights replicated or
fully sharded, equals the one-rank model on the same global batch step for step, its loss falls, each rank runs
exactly the collectives the schedule implies, and a layout the ranks cannot split is refused with a message."""
import contextlib
import io
import os
import re
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tessel  # noqa: E402
import train_moe_ep  # noqa: E402


def run(ep, flags, traced=False):
    """(rank 0's printed text, rank 0's losses, {rank: collective summary} when traced)."""
    args = train_moe_ep.parse_args(flags + ["--ep", str(ep)])
    out, losses, traces = io.StringIO(), {}, {}

    def rank_fn(world):
        tracer = tessel.CommTracer() if traced else contextlib.nullcontext()
        with tracer:
            got = train_moe_ep.main(args)
        if traced:
            traces[world.rank] = tracer.summary()
        if got:
            losses[world.rank] = got

    with contextlib.redirect_stdout(out):
        tessel.run_ranks(ep, rank_fn)
    assert list(losses) == [0], losses  # rank 0 reports
    return out.getvalue(), np.array(losses[0]), traces


def test_two_expert_parallel_ranks_train_as_one_rank():
    flags = ["--steps", "10"]
    text, losses, _ = run(2, flags)
    lines = [l for l in text.splitlines() if l.startswith("step ")]
    assert len(lines) == 10 and all(re.search(r"\| [0-9]+ tokens/s$", l) for l in lines), text
    assert losses[-1] < losses[0] - 1.0, losses
    _, one, _ = run(1, flags)
    # the experts see the same tokens in the same order (rank 0's pairs, then rank 1's); only the all-reduced
    # dense gradients and losses add in another order
    np.testing.assert_allclose(losses, one, rtol=0, atol=2e-6)


def test_four_ranks_with_two_experts_each_train_as_one_rank():
    flags = ["--steps", "4", "--experts", "8"]
    np.testing.assert_allclose(run(4, flags)[1], run(1, flags)[1], rtol=0, atol=2e-6)


def test_each_step_runs_the_schedules_collectives():
    # building the model: distribute_tensor of the 6 expert weights (rank 0's values, as torch's src_data_rank).
    # per MoE layer: forward all_to_alls of the counts, the tokens out and back (3), backward the two token
    # all_to_alls (2); 2 layers. all_reduce: the 13 dense gradients (embedding, 2 x (2 norms, wqkv, wo, router),
    # final norm, output) and the loss.
    _, _, traces = run(2, ["--steps", "1"], traced=True)
    assert traces == {r: "broadcast(ep) x6, all_to_all(world) x10, all_reduce(world) x14" for r in (0, 1)}, traces


def test_fully_sharded_dense_weights_with_expert_parallelism_train_as_one_rank():
    # fully_shard per block and the root over the same 2 ranks, the experts left to expert parallelism
    flags = ["--steps", "8"]
    _, losses, _ = run(2, flags + ["--fsdp"])
    np.testing.assert_allclose(losses, run(1, flags)[1], rtol=0, atol=2e-6)
    np.testing.assert_allclose(run(4, ["--steps", "3", "--experts", "8", "--fsdp"])[1],
                               run(1, ["--steps", "3", "--experts", "8"])[1], rtol=0, atol=2e-6)
    # FSDP's collectives replace the 13 gradient all_reduces: forward all-gathers for the 2 blocks and the root,
    # backward ones for the 2 blocks (the root keeps its weights), a reduce-scatter per group; the all_to_alls stay
    _, _, traces = run(2, ["--steps", "1", "--fsdp"], traced=True)
    want = "broadcast(ep) x6, all_gather(dp) x5, all_to_all(world) x10, reduce_scatter(dp) x3, all_reduce(world) x1"
    assert traces == {0: want, 1: want}, traces



def test_a_checkpoint_saved_on_two_ranks_resumes_on_one_and_on_four(tmp_path):
    # 3 steps on 2 ranks, saved (experts Shard(0) over "ep", dense weights replicated, AdamW states, the step);
    # resumed for 3 more on 1 rank and, with FSDP, on 4: the losses of an uninterrupted 6-step run on one rank
    ckpt = str(tmp_path / "step-3")
    head = run(2, ["--steps", "3", "--save", ckpt])[1]
    whole = run(1, ["--steps", "6"])[1]
    np.testing.assert_allclose(head, whole[:3], rtol=0, atol=2e-6)
    np.testing.assert_allclose(run(1, ["--steps", "3", "--resume", ckpt])[1], whole[3:], rtol=0, atol=2e-6)
    np.testing.assert_allclose(run(4, ["--steps", "3", "--resume", ckpt, "--fsdp"])[1], whole[3:], rtol=0,
                               atol=2e-6)

def test_a_layout_the_ranks_cannot_split_is_refused():
    with pytest.raises(SystemExit, match="--experts and --global-batch must be multiples of --ep"):
        run(2, ["--steps", "1", "--experts", "3"])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
