"""The Python face: numpy round trips, one-rank training against fully_shard on 2 and 4 ranks (same
losses to 1e-5, the C++ equivalence guarantee seen from Python), errors as Python exceptions, and a
checkpoint saved on 4 ranks loaded into 1."""
import ast
import os
import subprocess
import sys

import numpy as np
import pytest

import tessel

CFG = dict(vocab_size=61, d_model=32, n_layers=2, n_heads=2, seq_len=16)
STEPS, BATCH = 4, 8


def batches():
    rng = np.random.default_rng(0)
    for _ in range(STEPS):
        idx = rng.integers(0, CFG["vocab_size"], size=(BATCH, CFG["seq_len"]), dtype=np.int64)
        yield idx, np.roll(idx, -1, axis=1)


def test_numpy_round_trip_keeps_values_shape_and_dtype():
    for dtype in (np.float32, np.float64, np.int64, np.int32, np.float16, np.bool_):
        a = (np.arange(24).reshape(2, 3, 4) % 5).astype(dtype)
        t = tessel.tensor(a)
        assert t.shape == (2, 3, 4)
        back = t.numpy()
        assert back.dtype == a.dtype and np.array_equal(back, a)
    # A non-contiguous view is copied in its logical order.
    a = np.arange(12, dtype=np.float32).reshape(3, 4).T
    assert np.array_equal(tessel.tensor(a).numpy(), a)


def test_unsupported_dtype_is_a_type_error():
    with pytest.raises(TypeError, match="unsupported numpy dtype <U1"):
        tessel.tensor(np.array(["a", "b"]))
    t = tessel.tensor(np.array([1 + 2j, 3 - 1j], dtype=np.complex64))  # complex arrays convert, as torch's
    assert t.dtype == tessel.complex64 and t.real.tolist() == [1.0, 3.0] and t.imag.tolist() == [2.0, -1.0]


def train_losses(world_size):
    """Per-step mean loss of the same global batches: unsharded on 1 rank, fully_shard on more."""
    cfg = tessel.GPTConfig(**CFG)
    if world_size == 1:
        model = tessel.GPT(cfg, seed=3)
        opt = tessel.AdamW(model, lr=1e-2)
        out = []
        for idx, tgt in batches():
            loss = model.loss(tessel.tensor(idx), tessel.tensor(tgt))
            loss.backward()
            tessel.clip_grad_norm(model, 1.0)
            opt.step()
            opt.zero_grad()
            out.append(loss.item())
        return out
    losses = {}

    def rank_fn(world):
        mesh = tessel.init_device_mesh(world, [world.size], ["dp"])
        model = tessel.GPT(cfg, seed=3)
        for block in model.layers:
            tessel.fully_shard(block, mesh)
        root = tessel.fully_shard(model, mesh)
        opt = tessel.AdamW(model, lr=1e-2)
        rows = BATCH // world.size
        mine = []
        for idx, tgt in batches():
            lo = world.rank * rows
            loss = model.loss(tessel.tensor(idx[lo:lo + rows]), tessel.tensor(tgt[lo:lo + rows]))
            loss.backward()
            tessel.clip_grad_norm_fsdp(root, 1.0)
            opt.step()
            opt.zero_grad()
            mine.append(loss.item())
        losses[world.rank] = mine

    tessel.run_ranks(world_size, rank_fn)
    return list(np.mean([losses[r] for r in range(world_size)], axis=0))


def test_fully_shard_training_matches_one_rank():
    single = train_losses(1)
    assert single[-1] < single[0]
    for world_size in (2, 4):
        np.testing.assert_allclose(train_losses(world_size), single, rtol=0, atol=1e-5)


def test_dtensor_placements_redistribute_and_ops_follow_torch_semantics():
    full = np.arange(15, dtype=np.float64).reshape(5, 3)
    w = np.arange(12, dtype=np.float64).reshape(3, 4) / 7.0
    out = {}

    def rank_fn(world):
        mesh = tessel.init_device_mesh(world, [2], ["x"])
        d = tessel.distribute_tensor(tessel.tensor(full), mesh, [tessel.Shard(0)])
        assert d.is_distributed and d.shape == (5, 3) and d.placements == (tessel.Shard(0),)
        assert {d.placements: "key"}[(tessel.Shard(0),)] == "key"  # a tuple, hashable, as torch's
        dense = tessel.ones(2)
        assert not hasattr(dense, "placements") and getattr(dense, "device_mesh", None) is None
        assert hasattr(d, "device_mesh") and d.device_mesh.ndim == 1
        local = d.to_local().numpy()
        # torch.chunk layout: 5 rows over 2 ranks -> 3 and 2.
        np.testing.assert_array_equal(local, full[:3] if world.rank == 0 else full[3:])
        with tessel.CommTracer() as tracer:
            r = d.redistribute(mesh, [tessel.Replicate()])
        assert tracer.summary() == "all_gather(x) x1"
        np.testing.assert_array_equal(r.to_local().numpy(), full)
        # A sharded sum is Partial(sum); reading it reduces across ranks.
        s = (d * d).sum()
        assert s.placements == (tessel.Partial("sum"),)
        out.setdefault("sumsq", []).append(s.item())
        # Replicated x @ column-sharded w: the output is column-sharded, no communication.
        wd = tessel.distribute_tensor(tessel.tensor(w), mesh, [tessel.Shard(1)])
        with tessel.CommTracer() as tracer:
            y = r @ wd
        assert tracer.total() == 0 and y.placements == (tessel.Shard(1),)
        out.setdefault("y", []).append(y.numpy())  # .numpy() gathers the full value

    tessel.run_ranks(2, rank_fn)
    assert out["sumsq"] == [float((full * full).sum())] * 2
    for y in out["y"]:
        np.testing.assert_allclose(y, full @ w, rtol=1e-12)


def test_fully_shard_across_two_gloo_processes_under_tessel_run_matches_one_rank():
    runfiles = os.path.join(os.environ["TEST_SRCDIR"], "tessel")
    launcher = os.path.join(runfiles, "comm", "tessel_run")
    script = os.path.join(runfiles, "bindings", "tests", "gloo_train.py")
    env = dict(os.environ, PYTHONPATH=os.path.join(runfiles, "bindings"))
    out = subprocess.run([launcher, "--nproc-per-node", "2", "--master-port", "0", sys.executable, script,
                          str(STEPS)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    line = next(l for l in out.stdout.splitlines() if "losses:" in l)
    gloo = ast.literal_eval(line.split("losses:", 1)[1].strip())  # the list rank 0 printed
    np.testing.assert_allclose(gloo, train_losses(1), rtol=0, atol=1e-5)


def test_errors_arrive_as_the_python_exception_their_code_names():
    model = tessel.GPT(tessel.GPTConfig(**CFG), seed=0)
    idx = tessel.tensor(np.zeros((2, 3), dtype=np.float32))  # GPT wants int64 token ids
    with pytest.raises(ValueError, match=r"GPT: expected int64 token ids \[B, T\], got \[2, 3\] float32"):
        model.loss(idx, idx)
    with pytest.raises(FileNotFoundError, match="no checkpoint directory '/nonexistent/no_such_checkpoint' does not "
                                                "exist"):
        tessel.load(model, None, "/nonexistent/no_such_checkpoint")
    import tessel.distributed.checkpoint as dcp  # (dcp.load's message named tessel.load; a file read as missing)
    with pytest.raises(BaseException, match=r"checkpoint load: no checkpoint directory '.*tessel_test\.py' is a "
                                            "file, not a checkpoint directory"):
        dcp.load({"w": tessel.zeros(2)}, checkpoint_id=__file__, no_dist=True)
    with pytest.raises(ValueError, match="reduce op must be sum, avg, max or min, got 'prod'"):
        tessel.Partial("prod")


def test_a_rank_that_raises_fails_run_ranks_with_its_message():
    def rank_fn(world):
        if world.rank == 1:
            raise RuntimeError("rank 1 gave up")
        world.barrier()  # rank 0 must not hang waiting for rank 1

    with pytest.raises(Exception, match="rank 1 gave up"):
        tessel.run_ranks(2, rank_fn)


def test_checkpoint_saved_on_four_ranks_loads_into_one(tmp_path):
    cfg = tessel.GPTConfig(**CFG)
    ckpt = str(tmp_path / "ckpt")
    full = {}

    def save_fn(world):
        mesh = tessel.init_device_mesh(world, [world.size], ["dp"])
        model = tessel.GPT(cfg, seed=5)
        tessel.fully_shard(model, mesh)
        opt = tessel.AdamW(model, lr=1e-2)
        tessel.save(model, opt, ckpt, world)
        params = {k: v.numpy() for k, v in model.named_parameters()}  # gathers every shard
        if world.rank == 0:
            full.update(params)

    tessel.run_ranks(4, save_fn)
    model = tessel.GPT(cfg, seed=99)  # other initial values: everything must come from the file
    opt = tessel.AdamW(model, lr=1e-2)
    tessel.load(model, opt, ckpt)
    loaded = {k: v.numpy() for k, v in model.named_parameters()}
    assert sorted(loaded) == sorted(full)
    for k in full:
        assert np.array_equal(loaded[k], full[k]), k


def test_load_strict_false_reports_the_keys_strict_true_raises(tmp_path):
    small = tessel.GPT(tessel.GPTConfig(**CFG), seed=1)
    ckpt = str(tmp_path / "ckpt")
    tessel.save(small, None, ckpt)
    bigger = tessel.GPT(tessel.GPTConfig(**dict(CFG, n_layers=3)), seed=2)  # layers.2.* are not in the file
    with pytest.raises(KeyError, match="layers.2."):
        tessel.load(bigger, None, ckpt)
    result = tessel.load(bigger, None, ckpt, strict=False)
    assert result["missing_keys"] and all(k.startswith("layers.2.") for k in result["missing_keys"])
    assert result["unexpected_keys"] == []
    loaded = dict(bigger.named_parameters())
    for k, v in small.named_parameters():  # the matching keys were loaded
        assert np.array_equal(loaded[k].numpy(), v.numpy()), k


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
