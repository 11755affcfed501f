"""tessel.distributed, tessel.optim and tessel.distributed.checkpoint from Python, laid out like torch:
fully_shard acts on Python-defined modules with exactly FSDP2's collectives (counted by the comm
tracer), FSDPModule's methods steer it, clip_grad_norm_ costs one all-reduce, optimizers over parameter
groups equal the C++ optimizers, and a DCP checkpoint saved on 2 ranks loads into 1."""
import os
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.distributed.checkpoint as dcp
import tessel.nn as nn
import tessel.nn.functional as F
from tessel.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method
from tessel.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from dcp_testing import raises_on_ranks


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return x + F.gelu(self.fc(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def _train_squares(net, opt, x, steps):
    """`steps` optimizer steps on mean(net(x)²); the losses."""
    out = []
    for _ in range(steps):
        loss = net(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        out.append(loss.item())
    return out


def sharded_net():
    tessel.manual_seed(0)
    net = Net()
    for block in net.layers:
        fully_shard(block)
    return fully_shard(net)


def test_fully_shard_on_a_python_module_issues_exactly_fsdp2s_collectives():
    summaries = {}

    def rank_fn(world):
        dist.init_process_group()
        net = sharded_net()
        assert isinstance(net, FSDPModule) and isinstance(net, Net) and isinstance(net.layers[0], FSDPModule)
        p = next(net.parameters())
        assert isinstance(p, DTensor) and p.placements == (Shard(0),)
        opt = tessel.optim.AdamW(net.parameters(), lr=0.1)
        steps = []
        for phase, fn in [("forward", lambda: net(tessel.randn(4, 8)).pow(2).mean()), ("backward", None),
                          ("clip", None), ("step", None)]:
            with tessel.CommTracer() as t:
                if phase == "forward":
                    loss = fn()
                elif phase == "backward":
                    loss.backward()
                elif phase == "clip":
                    norm = tessel.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
                else:
                    opt.step()
                    opt.zero_grad()
            steps.append(t.summary())
        summaries[world.rank] = steps
        assert norm.item() > 0 and isinstance(norm, DTensor) and norm.placements == (Replicate(),)
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    # 3 groups (2 blocks + root): 3 all-gathers forward; blocks re-gathered in backward (the root keeps its
    # parameters: reshard_after_forward defaults to False for it), 3 reduce-scatters; clipping: 1 all-reduce.
    assert summaries[0] == summaries[1] == [
        "all_gather(axis0) x3", "all_gather(axis0) x2, reduce_scatter(axis0) x3", "all_reduce(axis0) x1", ""]


def test_fully_shard_on_a_list_makes_one_group_for_its_modules():
    # torch 2.6's fully_shard([m1, m2]) (torchtitan groups the final norm with the output layer): the
    # second block and the head share one all-gather and one reduce-scatter; gradients equal one process
    # on the whole batch.
    rng = np.random.default_rng(6)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    tessel.manual_seed(0)
    ref = Net()
    ref(tessel.tensor(x)).pow(2).mean().backward()
    want = {n: p.grad.numpy() for n, p in ref.named_parameters()}
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        tessel.manual_seed(0)
        net = Net()
        fully_shard(net.layers[0])
        pair = [net.layers[1], net.head]
        assert fully_shard(pair) is pair
        fully_shard(net)
        assert isinstance(net.layers[1], FSDPModule) and isinstance(net.head, FSDPModule)  # a C++ Linear too
        with tessel.CommTracer() as fwd:
            loss = net(tessel.tensor(x[world.rank * 2:(world.rank + 1) * 2])).pow(2).mean()
        with tessel.CommTracer() as bwd:
            loss.backward()
        net.head.unshard()  # either module steers the one group: both now see plain unsharded tensors
        assert not isinstance(net.layers[1].fc.weight, DTensor) and not isinstance(net.head.weight, DTensor)
        net.layers[1].reshard()
        assert isinstance(net.head.weight, DTensor)
        got[world.rank] = (fwd.summary(), bwd.summary(),
                           {n: p.grad.full_tensor().numpy() for n, p in net.named_parameters()})
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    for fwd, bwd, grads in got.values():
        assert fwd == "all_gather(axis0) x2"  # layers.0, and [layers.1, head]: the root has no parameters
        assert bwd == "all_gather(axis0) x2, reduce_scatter(axis0) x2"
        for n, w in want.items():
            np.testing.assert_allclose(grads[n], w, rtol=1e-5, atol=1e-6, err_msg=n)


def test_fully_shard_ignored_params_stay_plain_and_keep_local_gradients():
    # FSDP2's ignored_params, one set passed to every call: head.bias is neither sharded nor in any
    # collective, and each rank's gradient of it is its own rows' (not averaged); the rest equals one process.
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 8)).astype(np.float32)

    def grads_of(rows):
        tessel.manual_seed(0)
        ref = Net()
        ref(tessel.tensor(rows)).pow(2).mean().backward()
        return {n: p.grad.numpy() for n, p in ref.named_parameters()}

    want, local = grads_of(x), [grads_of(x[0:2]), grads_of(x[2:4])]
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        tessel.manual_seed(0)
        net = Net()
        ignored = {net.head.bias}
        for block in net.layers:
            fully_shard(block, ignored_params=ignored)
        fully_shard(net, ignored_params=ignored)
        assert not isinstance(net.head.bias, DTensor) and isinstance(net.head.weight, DTensor)
        with tessel.CommTracer() as fwd:
            loss = net(tessel.tensor(x[world.rank * 2:(world.rank + 1) * 2])).pow(2).mean()
        with tessel.CommTracer() as bwd:
            loss.backward()
        grads = {n: (p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad).numpy()
                 for n, p in net.named_parameters()}
        got[world.rank] = (fwd.summary(), bwd.summary(), grads, isinstance(net.head.bias.grad, DTensor))
        with pytest.raises(TypeError, match="ignored_params must hold parameters"):
            fully_shard(nn.Linear(2, 2), ignored_params=["head.bias"])
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    for rank, (fwd, bwd, grads, bias_grad_is_dtensor) in got.items():
        assert fwd == "all_gather(axis0) x3" and bwd == "all_gather(axis0) x2, reduce_scatter(axis0) x3"
        assert not bias_grad_is_dtensor
        for n, w in want.items():
            expect = local[rank][n] if n == "head.bias" else w
            np.testing.assert_allclose(grads[n], expect, rtol=1e-5, atol=1e-6, err_msg=n)
        assert not np.allclose(grads["head.bias"], want["head.bias"], rtol=1e-3)  # the ranks' rows differ


def test_fully_shard_shard_placement_fn_shards_columns_and_trains_like_one_process():
    # FSDP2's shard_placement_fn: every matrix on its columns (Shard(1)), vectors on the default dim 0;
    # two AdamW steps on two ranks equal one process, and a bad placement is the error torch raises.
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 8)).astype(np.float32)

    def columns(p):
        return Shard(1) if p.ndim == 2 else None

    tessel.manual_seed(0)
    ref = Net()
    ref_opt = tessel.optim.AdamW(ref.parameters(), lr=1e-2)
    want_losses = _train_squares(ref, ref_opt, tessel.tensor(x), 2)
    want = {n: p.detach().numpy() for n, p in ref.named_parameters()}
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        tessel.manual_seed(0)
        net = Net()
        seen = []
        for block in net.layers:
            fully_shard(block, shard_placement_fn=lambda p: seen.append(tuple(p.shape)) or columns(p))
        fully_shard(net, shard_placement_fn=columns)
        assert len(seen) == 4 and (8, 8) in seen and (8,) in seen  # each block's weight and bias
        placements = {n: p.placements for n, p in net.named_parameters()}
        local_shapes = {n: tuple(p.to_local().shape) for n, p in net.named_parameters()}
        opt = tessel.optim.AdamW(net.parameters(), lr=1e-2)
        rows = tessel.tensor(x[world.rank * 2:(world.rank + 1) * 2])
        losses = []
        for _ in range(2):
            loss = net(rows).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        params = {n: p.full_tensor().numpy() for n, p in net.named_parameters()}
        got[world.rank] = (placements, local_shapes, losses, params)
        with pytest.raises(NotImplementedError, match="uneven sharding on dim 1"):
            fully_shard(nn.Linear(3, 2), shard_placement_fn=columns)  # 3 columns over 2 ranks
        with pytest.raises(ValueError, match="^Invalid shard_placement_fn result: 1$"):  # torch's
            fully_shard(nn.Linear(2, 2), shard_placement_fn=lambda p: 1)
        with pytest.raises(ZeroDivisionError):  # the function's own error comes through
            fully_shard(nn.Linear(2, 2), shard_placement_fn=lambda p: 1 / 0)
        with pytest.raises(TypeError, match="must be callable"):
            fully_shard(nn.Linear(2, 2), shard_placement_fn=Shard(1))
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    np.testing.assert_allclose((np.array(got[0][2]) + np.array(got[1][2])) / 2, want_losses, rtol=1e-5)
    for rank, (placements, local_shapes, _, params) in got.items():
        assert placements["head.weight"] == (Shard(1),) and placements["head.bias"] == (Shard(0),)
        assert local_shapes["head.weight"] == (3, 4) and local_shapes["layers.0.fc.weight"] == (8, 4)
        for n, w in want.items():
            np.testing.assert_allclose(params[n], w, rtol=1e-4, atol=1e-6, err_msg=n)


def _bf16(x):
    """x rounded to bfloat16 (nearest, ties to even), as float32."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)


def test_futures_follow_torch_futures():
    from tessel.futures import Future, collect_all, wait_all
    f = Future()
    chained = f.then(lambda fut: fut.value() + 1)
    calls = []
    f.add_done_callback(lambda fut: calls.append(fut.value()))
    assert not f.done() and not chained.done()
    with pytest.raises(RuntimeError, match="has not completed"):
        f.value()
    f.set_result(41)
    assert calls == [41] and chained.done() and chained.wait() == 42 and chained.value() == 42
    with pytest.raises(RuntimeError, match="only be marked completed once"):
        f.set_result(0)
    bad = Future()
    bad.set_exception(ValueError("boom"))
    with pytest.raises(ValueError, match="boom"):
        bad.then(lambda fut: fut.value()).wait()
    g = Future()
    g.set_result("x")
    assert [h.value() for h in collect_all([f, g]).wait()] == [41, "x"] and wait_all([f, g]) == [41, "x"]

    def rank_fn(world):
        dist.init_process_group()
        t = tessel.full((2,), float(world.rank + 1))
        work = dist.all_reduce(t, async_op=True)
        fut = work.get_future().then(lambda fu: fu.value()[0] * 2)
        assert fut.wait().tolist() == [6.0, 6.0] and work.is_completed() and t.tolist() == [3.0, 3.0]
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)


def test_ddp_comm_hooks_follow_torchs_default_hooks_and_futures():
    from tessel.distributed.algorithms.ddp_comm_hooks import default_hooks
    from tessel.futures import Future
    from tessel.nn.parallel import DistributedDataParallel as DDP
    x = np.random.default_rng(6).standard_normal((4, 8)).astype(np.float32)

    def local_grads(rows):  # one process on a rank's rows: what that rank's backward produces
        tessel.manual_seed(0)
        net = Net()
        net(tessel.tensor(x[rows])).pow(2).mean().backward()
        return {n: p.grad.numpy() for n, p in net.named_parameters()}

    g0, g1 = local_grads(slice(0, 2)), local_grads(slice(2, 4))
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        out = {}
        for mode in ("none", "allreduce", "bf16", "fp16", "local"):
            tessel.manual_seed(0)
            model = DDP(Net())
            seen = []
            if mode == "allreduce":
                model.register_comm_hook(None, default_hooks.allreduce_hook)
                with pytest.raises(RuntimeError, match="can only be called once"):
                    model.register_comm_hook(None, default_hooks.allreduce_hook)
            elif mode == "bf16":
                model.register_comm_hook(None, default_hooks.bf16_compress_hook)
            elif mode == "fp16":
                model.register_comm_hook(world, default_hooks.fp16_compress_hook)  # state: the group
            elif mode == "local":  # no communication: a completed future of another tensor, 3x the local buffer
                def keep(state, bucket):
                    seen.append((state, bucket.index(), bucket.is_last(), [tuple(t.shape) for t in bucket.gradients()],
                                 len(bucket.parameters())))
                    fut = Future()
                    fut.set_result(bucket.buffer() * 3)
                    return fut
                model.register_comm_hook("my state", keep)
            model(tessel.tensor(x[world.rank * 2:(world.rank + 1) * 2])).pow(2).mean().backward()
            out[mode] = ({n: p.grad.numpy().copy() for n, p in model.module.named_parameters()}, seen)
        got[world.rank] = out
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    for r, local in ((0, g0), (1, g1)):
        res = got[r]
        for n in g0:
            mean = (g0[n] + g1[n]) / 2
            np.testing.assert_allclose(res["none"][0][n], mean, rtol=1e-6, atol=1e-7, err_msg=n)
            np.testing.assert_allclose(res["allreduce"][0][n], mean, rtol=1e-6, atol=1e-7, err_msg=n)
            # bf16 on the wire: each rank's bf16(g) / 2 summed, the sum rounded to bf16.
            np.testing.assert_array_equal(res["bf16"][0][n], _bf16(_bf16(g0[n]) / 2 + _bf16(g1[n]) / 2), err_msg=n)
            halves = [(g[n].astype(np.float16).astype(np.float32) / 2).astype(np.float16) for g in (g0, g1)]
            np.testing.assert_array_equal(res["fp16"][0][n], (halves[0].astype(np.float32) + halves[1].astype(
                np.float32)).astype(np.float16).astype(np.float32), err_msg=n)
            np.testing.assert_array_equal(res["local"][0][n], local[n] * 3, err_msg=n)
        (state, index, last, grad_shapes, count), = res["local"][1]
        assert (state, index, last, count) == ("my state", 0, True, 6)
        assert sorted(grad_shapes) == sorted(tuple(p.shape) for p in Net().parameters())
        assert not np.array_equal(res["bf16"][0]["head.weight"], res["none"][0]["head.weight"])


def test_gradient_penalty_under_ddp_equals_one_process_and_fsdp_refuses_create_graph():
    # WGAN-GP's critic step: the penalty on the input gradient (autograd.grad(create_graph=True)), then a
    # synchronized backward. DDP averages as one process on the whole batch; backward(create_graph=True)
    # under DDP and any create_graph pass through fully_shard raise instead of training wrong.
    from tessel.nn.parallel import DistributedDataParallel as DDP
    rng = np.random.default_rng(7)
    x_all = rng.standard_normal((4, 3)).astype(np.float32)

    def make():
        tessel.manual_seed(2)
        return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1))

    def penalty(model, x):
        x = tessel.tensor(x, requires_grad=True)
        (gx,) = tessel.autograd.grad(model(x).sum(), [x], create_graph=True)
        return ((gx ** 2).sum(1) - 1.0).pow(2).mean()

    ref = make()
    penalty(ref, x_all).backward()
    want = [p.grad.numpy() if p.grad is not None else None for p in ref.parameters()]
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        model = DDP(make(), find_unused_parameters=True)  # the last bias has no gradient (as torch needs it)
        penalty(model, x_all[world.rank * 2:(world.rank + 1) * 2]).backward()
        got[world.rank] = [p.grad.numpy() if p.grad is not None else None for p in model.module.parameters()]
        with pytest.raises(NotImplementedError, match="cannot average gradients that carry a graph across ranks"):
            model(tessel.tensor(x_all)).sum().backward(create_graph=True)
        model.zero_grad()  # the .grads that carry a graph reference their parameters (a cycle): drop them
        sharded = fully_shard(make())
        with pytest.raises(NotImplementedError, match="fully_shard: create_graph"):
            penalty(sharded, x_all)
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    assert want[-1] is None  # the last bias does not move the input gradient
    for r in range(2):
        for g, w in zip(got[r], want):
            if w is None:
                assert g is None
            else:
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_async_save_snapshots_at_the_call_and_loads_on_one_rank(tmp_path):
    # dcp.async_save returns once each rank's shard is snapshotted: parameters changed right after the
    # call do not reach the checkpoint; result() waits for the commit. The 2-rank checkpoint then loads
    # into one unsharded model with the values of the call.
    from tessel.distributed.checkpoint.state_dict import get_model_state_dict
    ckpt = str(tmp_path / "async")
    saved = {}

    def rank_fn(world):
        dist.init_process_group()
        net = sharded_net()
        sd = get_model_state_dict(net)
        saved[world.rank] = {k: v.full_tensor().numpy().copy() for k, v in sd.items()}
        future = dcp.async_save(sd, checkpoint_id=ckpt)
        with tessel.no_grad():
            for p in net.parameters():
                p.mul_(0.0)  # after the snapshot: must not be in the checkpoint
        import concurrent.futures
        assert isinstance(future, concurrent.futures.Future)  # as torch's async_save returns
        result = future.result(timeout=60)
        assert future.done() and future.exception() is None
        assert isinstance(result, dcp.Metadata) and list(result.state_dict_metadata) == list(sd)  # torch's result
        future2 = dcp.async_save(sd, checkpoint_id=str(tmp_path / "zeros"))  # the same saver, again
        future2.result()
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    tessel.manual_seed(1)
    fresh = Net()
    back = {k: v for k, v in fresh.state_dict().items()}
    dcp.load(back, checkpoint_id=ckpt)
    for k, v in saved[0].items():
        np.testing.assert_array_equal(back[k].numpy(), v, err_msg=k)
    zeros = {k: v for k, v in Net().state_dict().items()}
    dcp.load(zeros, checkpoint_id=str(tmp_path / "zeros"))
    assert all(not np.any(v.numpy()) for v in zeros.values())


def _write_safetensors(path, tensors):
    """A safetensors file written by hand (8-byte header length, JSON header, raw little-endian data)."""
    import json
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        raw = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": {np.float32: "F32", np.int64: "I64"}[a.dtype.type], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))


def _read_safetensors(path):
    import json
    with open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    kinds = {"F32": np.float32, "I64": np.int64}
    return {k: np.frombuffer(data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
                             dtype=kinds[v["dtype"]]).reshape(v["shape"])
            for k, v in header.items() if k != "__metadata__"}


def test_huggingface_safetensors_load_into_shards_and_save_from_them(tmp_path):
    # HF's layout: two shard files and model.safetensors.index.json (written by hand here), loaded with
    # dcp.load(storage_reader=HuggingFaceStorageReader) into fully_shard's DTensor shards on 2 ranks; then
    # saved with HuggingFaceStorageWriter as one model.safetensors of full tensors, read back by hand.
    import json
    from tessel.distributed.checkpoint.state_dict import get_model_state_dict
    rng = np.random.default_rng(8)
    tessel.manual_seed(0)
    shapes = {k: tuple(v.shape) for k, v in Net().state_dict().items()}
    want = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    names = sorted(want)
    hf = tmp_path / "hf"
    hf.mkdir()
    first, second = names[:2], names[2:]
    _write_safetensors(hf / "model-00001-of-00002.safetensors", {k: want[k] for k in first})
    _write_safetensors(hf / "model-00002-of-00002.safetensors", dict({k: want[k] for k in second},
                                                                     extra=np.arange(3, dtype=np.int64)))
    (hf / "model.safetensors.index.json").write_text(json.dumps({"weight_map": dict(
        [(k, "model-00001-of-00002.safetensors") for k in first] +
        [(k, "model-00002-of-00002.safetensors") for k in second] + [("extra", "model-00002-of-00002.safetensors")])}))
    out = tmp_path / "out"
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        net = sharded_net()
        sd = get_model_state_dict(net)
        result = dcp.state_dict_loader._load(sd, storage_reader=dcp.HuggingFaceStorageReader(str(hf)))
        assert result["missing_keys"] == [] and result["unexpected_keys"] == ["extra"]
        got[world.rank] = {k: v.full_tensor().numpy().copy() for k, v in get_model_state_dict(net).items()}
        with raises_on_ranks(RuntimeError, "in no safetensors file", ranks=(0, 1)):
            dcp.load(dict(sd, **{"nope.weight": tessel.zeros(2)}), storage_reader=dcp.HuggingFaceStorageReader(str(hf)))
        dcp.save(get_model_state_dict(net), storage_writer=dcp.HuggingFaceStorageWriter(str(out)))
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    for r in range(2):
        for k in names:
            np.testing.assert_array_equal(got[r][k], want[k], err_msg=k)
    # the staging checkpoint is gone; the index names the file, as torch's
    assert sorted(os.listdir(out)) == ["model.safetensors", "model.safetensors.index.json"]
    written = _read_safetensors(out / "model.safetensors")
    assert sorted(written) == names
    for k in names:
        np.testing.assert_array_equal(written[k], want[k], err_msg=k)
    tessel.manual_seed(5)
    plain = Net()
    back = plain.state_dict()
    dcp.load(back, storage_reader=dcp.HuggingFaceStorageReader(str(out)))
    for k in names:
        np.testing.assert_array_equal(back[k].numpy(), want[k], err_msg=k)


def test_broadcast_from_rank0_loads_rank_0s_full_state_dict_into_every_ranks_shards():
    # torchtune/torchtitan's load of a full checkpoint read on rank 0 only: the others pass {}.
    from tessel.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                          set_model_state_dict)
    tessel.manual_seed(5)
    ref = Net()
    want = {k: v.numpy().copy() for k, v in ref.state_dict().items()}
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        net = sharded_net()  # seed 0: other values than ref's
        full = {k: tessel.tensor(v) for k, v in want.items()} if world.rank == 0 else {}
        opts = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        missing, unexpected = set_model_state_dict(net, full, options=opts)
        assert list(missing) == [] and list(unexpected) == []
        got[world.rank] = {k: v.numpy() for k, v in
                           get_model_state_dict(net, options=StateDictOptions(full_state_dict=True)).items()}
        # A key rank 0 lacks is missing on every rank alike (strict raises everywhere; no rank waits).
        partial = {k: v for k, v in full.items() if k != "head.bias"}
        with pytest.raises(RuntimeError, match=r"missing keys \['head.bias'\]"):
            set_model_state_dict(net, partial, options=opts)
        # A wrong shape on rank 0 raises on every rank before anything loads (no rank left waiting).
        bad = dict(full, **{"head.weight": tessel.zeros(3, 9)}) if world.rank == 0 else {}
        with pytest.raises(ValueError, match=r"'head.weight' has shape \(3, 9\) on rank 0, the model's is \(3, 8\)"):
            set_model_state_dict(net, bad, options=opts)
        after = get_model_state_dict(net, options=StateDictOptions(full_state_dict=True))
        np.testing.assert_array_equal(after["layers.0.fc.weight"].numpy(), want["layers.0.fc.weight"])
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    for r in range(2):
        assert sorted(got[r]) == sorted(want)
        for k, v in want.items():
            np.testing.assert_array_equal(got[r][k], v, err_msg=k)
    bad = StateDictOptions(broadcast_from_rank0=True)  # torch checks the options where they are used
    with pytest.raises(ValueError, match="full_state_dict must be True"):
        get_model_state_dict(ref, options=bad)
    with pytest.raises(NotImplementedError, match="submodules"):
        get_model_state_dict(ref, submodules={ref.head})


def test_broadcast_from_rank0_restores_the_optimizer_so_training_resumes_exactly():
    # A full model + AdamW checkpoint held by rank 0 only (torch.save-style); the others pass {}. Fresh
    # sharded models and optimizers loaded with broadcast_from_rank0 continue with the uninterrupted run's
    # losses, and each rank holds only its shards of the optimizer state.
    from tessel.distributed.checkpoint.state_dict import (StateDictOptions, get_state_dict, set_state_dict,
                                                          set_optimizer_state_dict, set_model_state_dict)
    batch = tessel.from_numpy(np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32))
    full_opts = StateDictOptions(full_state_dict=True)
    bcast = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    got = {}

    train = _train_squares

    def rank_fn(world):
        dist.init_process_group()
        x = batch[world.rank * 2:(world.rank + 1) * 2]
        net = sharded_net()
        opt = tessel.optim.AdamW(net.parameters(), lr=1e-2, weight_decay=0.1)
        before = train(net, opt, x, 2)
        model_sd, optim_sd = get_state_dict(net, opt, options=full_opts)
        if world.rank != 0:
            model_sd, optim_sd = {}, {}
        after = train(net, opt, x, 2)
        for one_call in (True, False):
            tessel.manual_seed(world.rank + 11)  # other weights than the checkpoint's
            fresh = Net()
            for block in fresh.layers:
                fully_shard(block)
            fully_shard(fresh)
            fresh_opt = tessel.optim.AdamW(fresh.parameters(), lr=5e-2, weight_decay=0.0)
            if one_call:
                set_state_dict(fresh, fresh_opt, model_state_dict=model_sd, optim_state_dict=optim_sd, options=bcast)
            else:
                set_model_state_dict(fresh, model_sd, options=bcast)
                set_optimizer_state_dict(fresh, fresh_opt, optim_sd, options=bcast)
            assert fresh_opt.param_groups[0]["lr"] == 1e-2 and fresh_opt.param_groups[0]["weight_decay"] == 0.1
            state = get_state_dict(fresh, fresh_opt)[1]
            avg = state["state"]["head.weight"]["exp_avg"]
            assert avg.is_distributed and tuple(avg.to_local().shape) == ((2, 8) if world.rank == 0 else (1, 8))
            got[(world.rank, one_call)] = (before, after, train(fresh, fresh_opt, x, 2))
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    for r in range(2):
        for one_call in (True, False):
            before, after, resumed = got[(r, one_call)]
            assert resumed == after, (r, one_call, resumed, after)


def _assert_state_dicts_equal(got, want, where="state dict"):
    """The same structure (nested dicts and lists, the same keys); tensors bitwise equal, other values equal."""
    if isinstance(want, dict):
        assert sorted(got) == sorted(want), where
        for k, v in want.items():
            _assert_state_dicts_equal(got[k], v, "%s[%r]" % (where, k))
    elif isinstance(want, list):
        assert len(got) == len(want), where
        for i, (a, b) in enumerate(zip(got, want)):
            _assert_state_dicts_equal(a, b, "%s[%d]" % (where, i))
    elif isinstance(want, tessel.Tensor):
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=where)
    else:
        assert got == want, where


def test_state_dicts_of_several_optimizers_merge_and_load_back_into_each():
    # torch's get_state_dict(model, [opt1, opt2]) (e.g. separate optimizers for the embeddings and the rest):
    # one merged optimizer dict; each optimizer takes back its parameters' entries and its hyperparameters.
    from tessel.distributed.checkpoint.state_dict import (StateDictOptions, get_optimizer_state_dict,
                                                          get_state_dict, set_optimizer_state_dict, set_state_dict)

    def build():
        tessel.manual_seed(0)
        m = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
        return m, [tessel.optim.AdamW(m[0].parameters(), lr=0.1), tessel.optim.SGD(m[1].parameters(), lr=0.2,
                                                                                    momentum=0.9)]

    m, opts = build()
    m(tessel.randn(4, 2)).pow(2).sum().backward()
    for o in opts:
        o.step()
    singles = [get_optimizer_state_dict(m, o) for o in opts]
    for flatten in (False, True):
        options = StateDictOptions(flatten_optimizer_state_dict=flatten)
        msd, osd = get_state_dict(m, opts, options=options)
        if flatten:
            assert len(osd) == sum(len(get_optimizer_state_dict(m, o, options=options)) for o in opts)
        else:  # torch's merge: the states side by side, the param groups one after the other
            assert [g["params"] for g in osd["param_groups"]] == [["0.weight", "0.bias"], ["1.weight", "1.bias"]]
            assert osd["param_groups"][0]["lr"] == 0.1 and osd["param_groups"][1]["lr"] == 0.2
            assert osd["param_groups"][1]["momentum"] == 0.9 and "momentum_buffer" in osd["state"]["1.weight"]
        m2, opts2 = build()
        opts2[0].param_groups[0]["lr"], opts2[1].param_groups[0]["lr"] = 0.5, 0.5
        set_state_dict(m2, opts2, model_state_dict=msd, optim_state_dict=osd, options=options)
        assert [o.param_groups[0]["lr"] for o in opts2] == [0.1, 0.2]
        for o, want in zip(opts2, singles):
            _assert_state_dicts_equal(get_optimizer_state_dict(m2, o), want)
        # torch's superset rule: state of a parameter no optimizer holds is left out (a whole model's dict loads
        # into one stage's optimizers); a dict naming none of their parameters is refused
        stray = dict(osd, **{"state.9.weight.x": 1.0}) if flatten else \
            dict(osd, state=dict(osd["state"], **{"9.weight": {"x": 1.0}}))
        set_optimizer_state_dict(m2, opts2, stray, options=options)
        for o, want in zip(opts2, singles):
            _assert_state_dicts_equal(get_optimizer_state_dict(m2, o), want)
        alien = {"state.9.weight.x": 1.0} if flatten else {"state": {"9.weight": {"x": 1.0}}, "param_groups": []}
        with pytest.raises(ValueError, match=r"the state names none of the optimizer's parameters \(saved: "
                                             r"\['9.weight'\]"):
            set_optimizer_state_dict(m2, opts2, alien, options=options)


def test_torchtitan_style_flattened_checkpoint_saved_on_two_ranks_resumes_on_one(tmp_path):
    # torchtitan's checkpoint: {"model": get_model_state_dict, "optimizer": get_optimizer_state_dict with
    # flatten_optimizer_state_dict=True} through dcp.save on the fully_shard ranks; here loaded into one
    # unsharded process, whose next steps on the whole batch match the two ranks' continued run.
    from tessel.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                          get_optimizer_state_dict, set_state_dict)
    flat = StateDictOptions(flatten_optimizer_state_dict=True)
    batch = tessel.from_numpy(np.random.default_rng(4).standard_normal((4, 8)).astype(np.float32))
    ckpt = str(tmp_path / "titan")
    after = {}

    def rank_fn(world):
        dist.init_process_group()
        x = batch[world.rank * 2:(world.rank + 1) * 2]
        net = sharded_net()
        opt = tessel.optim.AdamW(net.parameters(), lr=1e-2, weight_decay=0.1)
        _train_squares(net, opt, x, 2)
        dcp.save({"model": get_model_state_dict(net), "optimizer": get_optimizer_state_dict(net, opt, options=flat)},
                 checkpoint_id=ckpt)
        after[world.rank] = _train_squares(net, opt, x, 2)
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    tessel.manual_seed(9)  # other weights than the checkpoint's
    net = Net()
    opt = tessel.optim.AdamW(net.parameters(), lr=0.5)
    _train_squares(net, opt, batch, 1)  # some state of its own, overwritten by the load
    state = {"model": get_model_state_dict(net), "optimizer": get_optimizer_state_dict(net, opt, options=flat)}
    assert "state.head.weight.exp_avg" in state["optimizer"] and "param_groups.head.weight.lr" in state["optimizer"]
    dcp.load(state, checkpoint_id=ckpt)
    set_state_dict(net, opt, model_state_dict=state["model"], optim_state_dict=state["optimizer"], options=flat)
    assert opt.param_groups[0]["lr"] == 1e-2 and opt.param_groups[0]["weight_decay"] == 0.1
    resumed = _train_squares(net, opt, batch, 2)
    np.testing.assert_allclose(resumed, [(a + b) / 2 for a, b in zip(after[0], after[1])], rtol=1e-5)


class MaybeSecond(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x, use_b):
        y = self.a(x)
        return self.b(y) if use_b else y


def test_flatten_optimizer_state_dict_and_ignore_frozen_params_follow_torchs_names():
    # torchtitan saves get_optimizer_state_dict(..., StateDictOptions(flatten_optimizer_state_dict=True)).
    from tessel.distributed.checkpoint.state_dict import (StateDictOptions, get_optimizer_state_dict, get_state_dict,
                                                          set_optimizer_state_dict, set_state_dict)

    def build():
        tessel.manual_seed(0)
        m = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
        m[0].bias.requires_grad_(False)  # frozen (fine-tuning)
        opt = tessel.optim.AdamW([{"params": [m[0].weight]}, {"params": list(m[1].parameters()), "lr": 0.5}],
                                 lr=0.1)
        return m, opt

    m, opt = build()
    m(tessel.randn(4, 2)).pow(2).sum().backward()
    opt.step()
    plain = get_optimizer_state_dict(m, opt)
    flat_opts = StateDictOptions(flatten_optimizer_state_dict=True, ignore_frozen_params=True)
    msd, osd = get_state_dict(m, opt, options=flat_opts)
    assert sorted(msd) == ["0.weight", "1.bias", "1.weight"]  # no frozen 0.bias
    assert sorted(k for k in osd if k.startswith("param_groups.") and k.endswith(".lr")) == [
        "param_groups.0.weight.lr", "param_groups.1.bias.lr", "param_groups.1.weight.lr"]
    assert osd["param_groups.0.weight.lr"] == 0.1 and osd["param_groups.1.bias.lr"] == 0.5
    assert float(osd["state.1.weight.step"]) == float(plain["state"]["1.weight"]["step"]) == 1
    assert osd["state.1.weight.step"].dtype == tessel.float32 and osd["state.1.weight.step"].dim() == 0  # torch's
    np.testing.assert_array_equal(osd["state.1.weight.exp_avg_sq"].numpy(),
                                  plain["state"]["1.weight"]["exp_avg_sq"].numpy())
    assert not any(k.startswith("optim.") for k in osd)
    # Loading the flattened names restores the state and each group's hyperparameters.
    m2, opt2 = build()
    opt2.param_groups[1]["lr"] = 0.01
    set_state_dict(m2, opt2, model_state_dict=msd, optim_state_dict=osd,
                   options=StateDictOptions(flatten_optimizer_state_dict=True, strict=False))
    assert opt2.param_groups[1]["lr"] == 0.5
    _assert_state_dicts_equal(get_optimizer_state_dict(m2, opt2), plain)
    with pytest.raises(ValueError, match="'bogus' is neither a nested optimizer state dict"):
        set_optimizer_state_dict(m2, opt2, {"bogus": 1.0})
    StateDictOptions(keep_submodule_prefixes=False)  # only meaningful with submodules= (which raises)


def test_a_fully_shard_list_whose_forward_skips_a_module_completes_at_the_roots_end_of_forward():
    # Iteration 1 runs only `a` of the list [a, b]; iteration 2 runs both. The root completes the list's
    # group at the end of its forward (as torch), so iteration 2 gathers it again; gradients as one process.
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 4)).astype(np.float32)
    tessel.manual_seed(0)
    ref = MaybeSecond()
    want = []
    for use_b in (False, True):
        ref.zero_grad()
        ref(tessel.tensor(x), use_b).pow(2).mean().backward()
        want.append({n: p.grad.numpy().copy() for n, p in ref.named_parameters() if p.grad is not None})
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        tessel.manual_seed(0)
        m = MaybeSecond()
        fully_shard([m.a, m.b])
        fully_shard(m)
        got[world.rank] = []
        for use_b in (False, True):
            m.zero_grad()
            m(tessel.tensor(x[world.rank * 2:(world.rank + 1) * 2]), use_b).pow(2).mean().backward()
            got[world.rank].append({n: p.grad.full_tensor().numpy() for n, p in m.named_parameters()
                                    if p.grad is not None})
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    for r in range(2):
        for step in range(2):
            assert sorted(got[r][step]) == sorted(want[step])
            for n, w in want[step].items():
                np.testing.assert_allclose(got[r][step][n], w, rtol=1e-5, atol=1e-7, err_msg=n)


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 3), nn.Linear(8, 3)

    def forward(self, x):
        return self.a(x), self.b(x)


class UsesOneHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads, self.out = TwoHeads(), nn.Linear(3, 2)

    def forward(self, x):
        p, _ = self.heads(x)  # the second output is unused
        return self.out(p.tanh())


def test_a_wrapped_modules_unused_output_leaves_its_parameters_without_grad():
    # torch: .grad is None for parameters behind an output the loss never used, so AdamW skips them. The
    # FSDP boundary node materialized a zero gradient for that output: zero grads, and weight decay moved
    # the parameters.
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        tessel.manual_seed(0)
        m = UsesOneHead()
        fully_shard(m.heads)
        fully_shard(m)
        before = m.heads.b.bias.full_tensor().numpy().copy()
        opt = tessel.optim.AdamW(m.parameters(), lr=0.1, weight_decay=0.5)
        for _ in range(3):
            m(tessel.randn(4, 8)).pow(2).mean().backward()
            assert m.heads.b.weight.grad is None and m.heads.b.bias.grad is None
            assert m.heads.a.weight.grad is not None
            opt.step()
            opt.zero_grad()
        got[world.rank] = (before, m.heads.b.bias.full_tensor().numpy())
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    for before, after in got.values():
        np.testing.assert_array_equal(after, before)


class Maybe(nn.Module):  # its parameters get a gradient only where `on`; its backward runs either way
    def __init__(self):
        super().__init__()
        self.lin, self.on = nn.Linear(4, 4), True

    def forward(self, x):
        return self.lin(x) if self.on else x * 2.0


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.maybe, self.b, self.unused = nn.Linear(4, 4), Maybe(), nn.Linear(4, 4), nn.Linear(4, 4)
        self.use_b = True

    def forward(self, x):
        y = self.maybe(self.a(x).tanh())
        return self.b(y) if self.use_b else y


@pytest.mark.parametrize("world_size,hsdp", [(2, False), (3, False), (4, True)])
def test_ranks_that_disagree_on_which_parameters_got_gradients_train_as_one_rank(world_size, hsdp):
    # Rank 0's batch takes both branches, the others' neither: one-rank training on the whole batch gives
    # b and maybe.lin gradients (the other rows contribute zeros), so every rank's shard must get one
    # (torch's FSDP2 leaves .grad None where the local backward did not reach, and the ranks' AdamW
    # steps then update different parameter sets). `unused` got none anywhere: it keeps None. Under HSDP
    # (2 replicas x 2 shards) rank 0's gradients reach the other replica through the all-reduce.
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((2, 4)).astype(np.float32) for _ in range(world_size)]

    def make():
        tessel.manual_seed(3)
        return Branchy()

    def set_branches(m, rank):
        m.use_b = m.maybe.on = rank == 0

    ref = make()
    opt = tessel.optim.AdamW(ref.parameters(), lr=0.1, weight_decay=0.1)
    for _ in range(2):
        opt.zero_grad()
        for r in range(world_size):  # the mean over ranks of each rank's loss
            set_branches(ref, r)
            (ref(tessel.tensor(xs[r])).pow(2).sum() / world_size).backward()
        want_grads = {n: (None if p.grad is None else p.grad.numpy().copy()) for n, p in ref.named_parameters()}
        opt.step()
    want = {n: p.detach().numpy() for n, p in ref.named_parameters()}
    assert want_grads["unused.weight"] is None and want_grads["b.weight"] is not None
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        m = make()
        kw = {}
        if hsdp:
            kw = dict(mesh=init_device_mesh("cpu", (2, 2), mesh_dim_names=("ddp", "fsdp")), shard_axis="fsdp",
                      replicate_axis="ddp")
        fully_shard(m.maybe, **kw)
        fully_shard(m, **kw)
        set_branches(m, world.rank)
        opt = tessel.optim.AdamW(m.parameters(), lr=0.1, weight_decay=0.1)
        for _ in range(2):
            opt.zero_grad()
            m(tessel.tensor(xs[world.rank])).pow(2).sum().backward()
            grads = {n: p.grad for n, p in m.named_parameters()}
            opt.step()
        # Every rank gave .grad to the same parameters, so every full_tensor below is a matched collective.
        got[world.rank] = ({n: (None if g is None else g.full_tensor().numpy()) for n, g in grads.items()},
                           {n: p.full_tensor().numpy() for n, p in m.named_parameters()})
        dist.destroy_process_group()

    tessel.run_ranks(world_size, rank_fn)
    for grads, params in got.values():
        for n, w in want_grads.items():
            if w is None:
                assert grads[n] is None, n
            else:
                np.testing.assert_allclose(grads[n], w, rtol=1e-5, atol=1e-6, err_msg=n)
        for n, w in want.items():
            np.testing.assert_allclose(params[n], w, rtol=1e-5, atol=1e-6, err_msg=n)


def test_fsdp_porting_details_handles_kwargs_casts_layers_lists_and_hsdp_axis_names():
    def rank_fn(world):
        dist.init_process_group()
        net = sharded_net()
        h = net.layers[0].unshard(async_op=True)  # torch's UnshardHandle
        h.wait()
        net.layers[0].reshard()
        lin = nn.Linear(4, 4)
        fully_shard(lin)  # a C++ layer keeps its class but gets FSDPModule's methods
        lin.set_requires_gradient_sync(False)
        lin.set_requires_gradient_sync(True)
        twice = nn.Linear(2, 2)
        with pytest.raises(ValueError, match="is listed twice"):
            fully_shard([twice, twice])

        class KwOnly(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 4)

            def forward(self, *, x):
                return self.fc(x)

        k = KwOnly()
        fully_shard(k, mp_policy=MixedPrecisionPolicy(param_dtype=tessel.bfloat16))
        assert k(x=tessel.randn(2, 4)).dtype == tessel.bfloat16  # the keyword input was cast, as torch
        mesh = init_device_mesh("cpu", (1, 2), mesh_dim_names=("ddp", "fsdp"))
        h1 = fully_shard(nn.Linear(4, 4), mesh=mesh)  # torch's reading of a 2-D mesh: (replicate, shard)
        assert h1.weight.placements == (Replicate(), Shard(0))
        h2 = fully_shard(nn.Linear(4, 4), mesh=mesh, shard_axis="fsdp", replicate_axis="ddp")
        assert h2.weight.placements == (Replicate(), Shard(0))
        from tessel.distributed.fsdp import DataParallelMeshDims
        h3 = fully_shard(nn.Linear(4, 4), mesh=mesh, dp_mesh_dims=DataParallelMeshDims(shard="ddp", replicate="fsdp"))
        assert h3.weight.placements == (Shard(0), Replicate())  # torch 2.15's names, read as they say
        with pytest.raises(NotImplementedError, match="would be flattened"):
            fully_shard(nn.Linear(4, 4), mesh=mesh, dp_mesh_dims=DataParallelMeshDims(shard=("ddp", "fsdp")))
        with pytest.raises(ValueError, match="At least one of shard or replicate"):
            DataParallelMeshDims()
        tp_like = init_device_mesh("cpu", (1, 2), mesh_dim_names=("dp", "tp"))
        with pytest.raises(ValueError, match='named like another parallelism. HINT: shard_axis="tp", replicate_axis'):
            fully_shard(nn.Linear(4, 4), mesh=tp_like)
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)


def test_hsdp_set_requires_all_reduce_false_accumulates_reduce_scatters_until_the_all_reduce():
    # torch's HSDP gradient accumulation: micro-batch 1 only reduce-scatters, micro-batch 2 all-reduces both.
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((8, 4)).astype(np.float32) for _ in range(2)]
    tessel.manual_seed(1)
    ref = nn.Linear(4, 4)
    for x in xs:
        ref(tessel.tensor(x)).pow(2).mean().backward()
    want = {n: p.grad.numpy() for n, p in ref.named_parameters()}
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp_replicate", "dp_shard"))
        tessel.manual_seed(1)
        lin = nn.Linear(4, 4)
        fully_shard(lin, mesh=mesh)
        summaries = []
        for step, x in enumerate(xs):
            lin.set_requires_all_reduce(step == 1)
            with tessel.CommTracer() as t:
                lin(tessel.tensor(x[world.rank * 2:(world.rank + 1) * 2])).pow(2).mean().backward()
            summaries.append((t.summary(), lin.weight.grad is None))
        got[world.rank] = (summaries, {n: p.grad.full_tensor().numpy() for n, p in lin.named_parameters()})
        dist.destroy_process_group()

    tessel.run_ranks(4, rank_fn)
    for summaries, grads in got.values():
        assert summaries[0] == ("all_gather(dp_shard) x1, reduce_scatter(dp_shard) x1", True)
        assert summaries[1] == ("all_gather(dp_shard) x1, reduce_scatter(dp_shard) x1, all_reduce(dp_replicate) x1",
                                False)
        for n, w in want.items():
            np.testing.assert_allclose(grads[n], w, rtol=1e-5, atol=1e-6, err_msg=n)


def test_set_separate_reduce_scatter_group_moves_only_the_reduce_scatters_and_keeps_the_gradients():
    # torch's set_separate_reduce_scatter_group: the reduce-scatter runs on its own group over the shard
    # ranks (one for every module sharded over "dp"); the all-gathers stay; gradients equal one rank's.
    rng = np.random.default_rng(6)
    x = rng.standard_normal((8, 4)).astype(np.float32)
    tessel.manual_seed(2)
    ref = nn.Sequential(nn.Linear(4, 6), nn.Linear(6, 4))
    ref(tessel.tensor(x)).pow(2).mean().backward()
    want = {n: p.grad.numpy() for n, p in ref.named_parameters()}
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))
        tessel.manual_seed(2)
        net = nn.Sequential(nn.Linear(4, 6), nn.Linear(6, 4))
        fully_shard(net[0], mesh=mesh)
        fully_shard(net, mesh=mesh)
        net.set_separate_reduce_scatter_group()
        with tessel.CommTracer() as t:
            net(tessel.tensor(x[world.rank * 4:(world.rank + 1) * 4])).pow(2).mean().backward()
        got[world.rank] = (t.summary(), {n: p.grad.full_tensor().numpy() for n, p in net.named_parameters()})
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    for summary, grads in got.values():
        assert summary == "all_gather(dp) x3, reduce_scatter(dp.reduce_scatter) x2", summary
        for n, w in want.items():
            np.testing.assert_allclose(grads[n], w, rtol=1e-5, atol=1e-6, err_msg=n)


def test_receives_that_wait_for_each_other_raise_a_deadlock_on_both_ranks_at_once():
    # Each rank receives before it sends (a torch script's classic p2p deadlock): both raise torch's
    # DistBackendError naming both receives, within seconds instead of the 300 s group timeout.
    import time
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        start = time.monotonic()
        with pytest.raises(dist.DistBackendError) as info:
            dist.recv(tessel.zeros(2), src=1 - world.rank)
            dist.send(tessel.ones(2), dst=1 - world.rank)
        got[world.rank] = (time.monotonic() - start, str(info.value))
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    for seconds, message in got.values():
        assert seconds < 10, got
        assert message.startswith("deadlock: rank 0 waits in recv from rank 1 (tag 0, 8 B, float32) on group "
                                  "'world' (global ranks [0, 1]) for rank 1, which has not posted its side; rank 1 "
                                  "waits in recv from rank 0"), message


def test_torchs_deprecated_coalesced_collectives_debug_levels_and_constants():
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        r = world.rank
        a, b = tessel.full((2,), float(r + 1)), tessel.full((3,), 10.0 * (r + 1))
        dist.all_reduce_coalesced([a, b])
        outs = [[tessel.zeros(2), tessel.zeros(1)] for _ in range(2)]
        work = dist.all_gather_coalesced(outs, [tessel.full((2,), float(r)), tessel.full((1,), 5.0 + r)],
                                         async_op=True)
        work.wait()
        got[r] = (a.tolist(), b.tolist(), [[t.tolist() for t in out] for out in outs])
        with pytest.raises(ValueError, match="does not support"):
            dist.all_reduce_coalesced([tessel.zeros(2, dtype=tessel.complex64)], op=dist.ReduceOp.MAX)
        dist.destroy_process_group()

    with pytest.warns(FutureWarning) as warned:  # recorded here: the rank threads share the warnings state
        tessel.run_ranks(2, rank_fn)
    texts = [str(w.message) for w in warned]
    for name in ("all_reduce_coalesced", "all_gather_coalesced"):
        assert any(t.startswith("`torch.distributed.%s` will be deprecated" % name) for t in texts), texts
    for r in (0, 1):
        assert got[r] == ([3.0, 3.0], [30.0, 30.0, 30.0], [[[0.0, 0.0], [5.0]], [[1.0, 1.0], [6.0]]]), got[r]
    assert dist.supports_complex(dist.ReduceOp.SUM) and not dist.supports_complex(dist.ReduceOp.MAX)
    assert dist.default_pg_timeout.total_seconds() == 300  # tessel's default group timeout
    assert not dist.is_ucc_available() and not dist.is_xccl_available()
    assert [m.name for m in dist.DebugLevel] == ["OFF", "INFO", "DETAIL"]
    before = dist.get_debug_level()
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    assert dist.get_debug_level() is dist.DebugLevel.DETAIL
    os.environ["TORCH_DISTRIBUTED_DEBUG"] = "info"
    try:
        dist.set_debug_level_from_env()
        assert dist.get_debug_level() is dist.DebugLevel.INFO
        os.environ["TORCH_DISTRIBUTED_DEBUG"] = "loud"
        with pytest.raises(ValueError, match="OFF, INFO or DETAIL"):
            dist.set_debug_level_from_env()
    finally:
        del os.environ["TORCH_DISTRIBUTED_DEBUG"]
        dist.set_debug_level(before)


def test_pg_count_backend_config_and_deprecated_reduce_op_follow_torch():
    # torch 2.15 on 4 gloo processes (probed): 0 before init, 1 after, +1 per new_group on every rank, +1 per
    # split_group, +2 for new_subgroups(2), +4 for a 2 x 2 mesh (init_device_mesh or the DeviceMesh constructor),
    # +0 for a 1-D mesh over the world, 0 after destroy_process_group.
    got = {}

    def rank_fn(world):
        counts = [dist.get_pg_count()]
        dist.init_process_group()
        counts.append(dist.get_pg_count())
        dist.new_group([0, 1])
        counts.append(dist.get_pg_count())
        dist.split_group(split_ranks=[[0, 1], [2, 3]])
        counts.append(dist.get_pg_count())
        dist.new_subgroups(2)
        counts.append(dist.get_pg_count())
        dist.init_device_mesh("cpu", (2, 2))
        counts.append(dist.get_pg_count())
        dist.init_device_mesh("cpu", (4,))
        counts.append(dist.get_pg_count())
        dist.DeviceMesh("cpu", [[0, 1], [2, 3]])
        counts.append(dist.get_pg_count())
        config = dist.get_backend_config()
        dist.destroy_process_group()
        counts.append(dist.get_pg_count())
        got[world.rank] = (counts, config)

    tessel.run_ranks(4, rank_fn)
    for r in range(4):
        assert got[r] == ([0, 1, 2, 3, 5, 9, 9, 13, 0], "cpu:threads"), got[r]
    with pytest.warns(UserWarning, match=r"`torch.distributed.reduce_op` is deprecated, please use "
                                         r"`torch.distributed.ReduceOp` instead"):
        assert dist.reduce_op.SUM == dist.ReduceOp.SUM


def test_flatten_is_cached_counted_and_sliceable_from_the_root_as_torch():
    # torch 2.15 on 4 gloo processes (probed): after a 2 x 2 mesh (count 5), flattening its whole world adds no
    # group, the same name again returns the cached mesh; a (2, 1, 2) mesh adds 8; flattening (x, y) adds 2 and
    # (y, z) under the default name "y_z" 2 more; the root mesh slices a flattened name with a deprecation
    # UserWarning; torchtitan's (dp_replicate, dp_shard_cp) HSDP mesh mixes a root dim and a flattened one.
    import warnings
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        counts = []
        m = init_device_mesh("cpu", (2, 2), mesh_dim_names=("a", "b"))
        counts.append(dist.get_pg_count())
        f = m["a", "b"]._flatten("ab")
        counts.append(dist.get_pg_count())
        again = m["a", "b"]._flatten("ab")
        counts.append(dist.get_pg_count())
        m3 = init_device_mesh("cpu", (2, 1, 2), mesh_dim_names=("x", "y", "z"))
        counts.append(dist.get_pg_count())
        m3["x", "y"]._flatten("xy")
        counts.append(dist.get_pg_count())
        yz = m3["y", "z"]._flatten()
        counts.append(dist.get_pg_count())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            by_name = m["ab"]
            hsdp = m3["x", "y_z"]
        t = tessel.tensor([float(world.rank)])
        dist.all_reduce(t, group=hsdp.get_group("y_z"))
        got[world.rank] = (counts, yz.mesh_dim_names, f.mesh.tolist(), f == again, by_name.mesh.tolist(),
                           [str(w.message) for w in caught], hsdp.shape, hsdp.mesh_dim_names, float(t[0]))
        dist.destroy_process_group()

    tessel.run_ranks(4, rank_fn)
    message = ("Slicing a flattened dim from root mesh will be deprecated in PT 2.11. Users need to bookkeep the "
               "flattened mesh directly. ")
    for r in range(4):
        counts, yz_names, flat_ranks, same, root_ranks, warned, shape, names, total = got[r]
        assert counts == [5, 5, 5, 13, 15, 17]
        assert yz_names == ("y_z",)
        assert flat_ranks == [0, 1, 2, 3] and same and root_ranks == [0, 1, 2, 3]
        assert warned == [message, message]
        assert shape == (2, 2) and names == ("x", "y_z")
        assert total == (0.0 + 1.0 if r < 2 else 2.0 + 3.0)  # y_z groups: ranks {0, 1} and {2, 3}


def test_hsdp_over_a_root_dim_and_a_flattened_one_matches_one_rank_training():
    # torchtitan's HSDP + CP layout: fully_shard on root["dp_replicate", "dp_shard_cp"] (dp_shard x cp flattened)
    # replicates over dp_replicate, shards over the flattened group and averages gradients over all four ranks:
    # one SGD step equals one rank's step on the mean of the four ranks' losses.
    import warnings
    from tessel.distributed.fsdp import fully_shard
    got = {}

    def make_model():
        tessel.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

    def batch(r):
        tessel.manual_seed(1 + r)
        return tessel.randn(4, 8)

    def rank_fn(world):
        dist.init_process_group()
        root = init_device_mesh("cpu", (2, 2, 1), mesh_dim_names=("dp_replicate", "dp_shard", "cp"))
        root["dp_shard", "cp"]._flatten("dp_shard_cp")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mesh = root["dp_replicate", "dp_shard_cp"]
        model = make_model()
        fully_shard(model, mesh=mesh)
        opt = tessel.optim.SGD(model.parameters(), lr=0.1)
        model(batch(world.rank)).pow(2).sum().backward()
        opt.step()
        got[world.rank] = (tuple(model[0].weight.placements),
                           [p.full_tensor().detach().numpy().copy() for p in model.parameters()])
        dist.destroy_process_group()

    tessel.run_ranks(4, rank_fn)
    ref = make_model()
    opt = tessel.optim.SGD(ref.parameters(), lr=0.1)
    (sum(ref(batch(r)).pow(2).sum() for r in range(4)) / 4).backward()
    opt.step()
    for r in range(4):
        placements, params = got[r]
        assert placements == (Replicate(), Shard(0))
        for p, want in zip(params, ref.parameters()):
            np.testing.assert_allclose(p, want.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_fully_shard_over_a_flattened_dim_composes_with_tensor_parallelism():
    # torchtitan: tensor parallelism on root["tp"], fully_shard over the flattened (dp_shard, cp) mesh; FSDP joins
    # the two into a [dp_shard_cp, tp] mesh. With cp of size 1 the flattened dim is dp_shard itself, so a step
    # must give the same parameters as fully_shard over root["dp_shard"], and clip_grad_norm_ (which flattens the
    # parameters' 2-D mesh) the gradient norm of one rank training on both dp batches.
    from tessel.distributed.fsdp import fully_shard
    from tessel.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    got = {}

    def step(root, dp_mesh, rank):
        tessel.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
        parallelize_module(model, root["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
        fully_shard(model, mesh=dp_mesh)
        opt = tessel.optim.SGD(model.parameters(), lr=0.1)
        tessel.manual_seed(1 + rank // 2)  # one batch per dp rank, shared by its tp pair
        model(tessel.randn(4, 8)).pow(2).sum().backward()
        norm = tessel.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # flattens the [dp_shard_cp, tp] mesh
        opt.step()
        w = model[0].weight
        norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        return str(w.device_mesh), [p.full_tensor().detach().numpy().copy() for p in model.parameters()], norm

    def rank_fn(world):
        dist.init_process_group()
        root = init_device_mesh("cpu", (2, 1, 2), mesh_dim_names=("dp_shard", "cp", "tp"))
        flat = root["dp_shard", "cp"]._flatten("dp_shard_cp")
        got[world.rank] = (step(root, flat, world.rank), step(root, root["dp_shard"], world.rank))
        dist.destroy_process_group()

    tessel.run_ranks(4, rank_fn)
    tessel.manual_seed(0)  # one rank: the gradient of the mean of the two dp batches' losses
    ref = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    losses = []
    for d in range(2):
        tessel.manual_seed(1 + d)
        losses.append(ref(tessel.randn(4, 8)).pow(2).sum())
    ((losses[0] + losses[1]) / 2).backward()
    want_norm = float(tessel.nn.utils.clip_grad_norm_(ref.parameters(), 1.0))
    for r in range(4):
        (mesh_flat, flat_params, flat_norm), (mesh_plain, plain_params, plain_norm) = got[r]
        assert flat_norm == plain_norm and abs(flat_norm - want_norm) <= 1e-5 * want_norm, (flat_norm, want_norm)
        assert mesh_flat == "DeviceMesh(shape=[2, 2], axes=[dp_shard_cp, tp], ranks=[[0, 1], [2, 3]])"
        assert mesh_plain == "DeviceMesh(shape=[2, 2], axes=[dp_shard, tp], ranks=[[0, 1], [2, 3]])"
        for a, b in zip(flat_params, plain_params):
            np.testing.assert_array_equal(a, b)


def test_c10d_and_constants_modules_are_attributes_without_their_own_import():
    import subprocess
    import sys
    code = ("import tessel.distributed as d; print(d.distributed_c10d._get_default_group.__name__, "
            "d.constants.default_pg_timeout.total_seconds(), d.constants.default_pg_nccl_timeout.total_seconds())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["_get_default_group", "300.0", "300.0"]


def test_group_world_and_the_low_level_process_group_calls_follow_torch():
    # torch 2.15 on 2 gloo processes (probed): group.WORLD is None before init and after destroy, the default
    # group in between; pg.allreduce takes [t], t, ([t], op) or ([t], AllreduceOptions) and returns a Work whose
    # future gives [t]; pg.broadcast([t], BroadcastOptions) roots at a group rank.
    got = {}

    def rank_fn(world):
        before = dist.group.WORLD
        dist.init_process_group()
        pg = dist.group.WORLD
        r = world.rank
        t = tessel.ones(2) * (r + 1)
        out = [before, pg is dist.distributed_c10d._get_default_group(), pg.size(), pg.rank()]
        out += [pg.allreduce([t]).wait(), t.tolist()]
        out += [[x.tolist() for x in pg.allreduce([t]).get_future().wait()]]
        opts = dist.AllreduceOptions()
        opts.reduceOp = dist.ReduceOp.MAX
        pg.allreduce([t], opts).wait()
        pg.allreduce(t).wait()
        pg.allreduce([t], dist.ReduceOp.SUM).wait()
        out += [t.tolist()]
        b = tessel.full((2,), float(r))
        bo = dist.BroadcastOptions()
        bo.rootRank = 1
        pg.broadcast([b], bo).wait()
        out += [b.tolist()]
        with pytest.raises(ValueError, match="one tensor per call, got 2"):
            pg.allreduce([t, t])
        dist.destroy_process_group()
        out += [dist.group.WORLD]
        got[r] = out

    tessel.run_ranks(2, rank_fn)
    for r in (0, 1):
        assert got[r] == [None, True, 2, r, True, [3.0, 3.0], [[6.0, 6.0]], [24.0, 24.0], [1.0, 1.0], None], got[r]


def test_clip_grad_norm_of_other_orders_follows_torchs_formula():
    def grads():
        a = tessel.tensor([[3.0, -4.0], [1.0, 0.5]])
        b = tessel.tensor([-6.0, 2.0])
        a.grad, b.grad = a.clone(), b.clone()
        return a, b
    for p, total in [(float("inf"), 6.0), (1.0, 16.5), (3.0, (27 + 64 + 1 + 0.125 + 216 + 8) ** (1 / 3))]:
        a, b = grads()
        norm = tessel.nn.utils.clip_grad_norm_([a, b], 2.0, norm_type=p)
        assert norm.dtype == tessel.float32  # the gradients' dtype, as torch's (computed in float64)
        np.testing.assert_allclose(norm.item(), total, rtol=1e-7)
        coef = 2.0 / (total + 1e-6)
        np.testing.assert_allclose(a.grad.numpy(), np.array([[3.0, -4.0], [1.0, 0.5]]) * coef, rtol=1e-6)
        np.testing.assert_allclose(b.grad.numpy(), np.array([-6.0, 2.0]) * coef, rtol=1e-6)
    a, b = grads()
    assert tessel.nn.utils.clip_grad_norm_([a, b], 100.0, norm_type="inf").item() == 6.0
    assert a.grad.tolist() == [[3.0, -4.0], [1.0, 0.5]]  # under max_norm: untouched

    def rank_fn(world):  # sharded gradients reduce over their mesh
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))
        w = distribute_tensor(tessel.tensor([[3.0, -4.0], [1.0, 0.5]]), mesh, [Shard(0)])
        w.grad = distribute_tensor(tessel.tensor([[3.0, -4.0], [1.0, 0.5]]), mesh, [Shard(0)])
        assert tessel.nn.utils.clip_grad_norm_([w], 1.0, norm_type=float("inf")).item() == 4.0
        np.testing.assert_allclose(w.grad.full_tensor().numpy(), np.array([[3.0, -4.0], [1.0, 0.5]]) / (4 + 1e-6),
                                   rtol=1e-6)

    tessel.run_ranks(2, rank_fn)


def test_clip_grad_norm_error_if_nonfinite_leaves_the_gradients_untouched():
    lin = nn.Linear(3, 1)
    lin(tessel.ones(1, 3)).sum().backward()
    with tessel.no_grad():
        lin.bias.grad.fill_(float("inf"))
    before = lin.weight.grad.numpy().copy()
    with pytest.raises(RuntimeError, match="non-finite"):
        tessel.nn.utils.clip_grad_norm_(lin.parameters(), 0.1, error_if_nonfinite=True)
    np.testing.assert_array_equal(lin.weight.grad.numpy(), before)  # zeroed before the raise, before
    with tessel.no_grad():
        lin.bias.grad.fill_(0.0)
    norm = tessel.nn.utils.clip_grad_norm_(lin.parameters(), 0.1, error_if_nonfinite=True).item()
    np.testing.assert_allclose(norm, np.sqrt((before ** 2).sum()), rtol=1e-6)
    np.testing.assert_allclose(lin.weight.grad.numpy(), before * 0.1 / (norm + 1e-6), rtol=1e-6)


def test_fsdp_module_methods_control_unshard_and_gradient_sync():
    def rank_fn(world):
        dist.init_process_group()
        net = sharded_net()
        net.layers[0].unshard()
        with tessel.CommTracer() as t:
            net.layers[0].reshard()
            net.unshard()
        assert t.summary() == "all_gather(axis0) x1"
        net.reshard()
        net.set_requires_gradient_sync(False)
        with tessel.CommTracer() as t:
            net(tessel.randn(2, 8)).sum().backward()
        assert "reduce_scatter" not in t.summary()  # gradients accumulate locally
        net.set_requires_gradient_sync(True)
        with tessel.CommTracer() as t:
            net(tessel.randn(2, 8)).sum().backward()
        assert "reduce_scatter(axis0) x3" in t.summary()

    tessel.run_ranks(2, rank_fn)


class Scorer(nn.Module):
    """An embedding and a projection; `score` is a second entry point that does not call forward."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.fc = nn.Linear(8, 8)

    def forward(self, idx):
        return self.fc(self.emb(idx))

    def score(self, idx, *, scale=1.0):
        return {"loss": (self.fc(self.emb(idx)) * scale).pow(2).mean(), "tokens": idx.numel()}


_SCORER_IDX = np.array([[1, 4, 7], [2, 9, 0], [5, 5, 3], [8, 6, 1]], dtype=np.int64)


def _scorer_reference_grads(scale=1.0):
    tessel.manual_seed(3)
    ref = Scorer()
    ref.score(tessel.tensor(_SCORER_IDX), scale=scale)["loss"].backward()
    return {n: p.grad.numpy() for n, p in ref.named_parameters()}


def test_register_fsdp_forward_method_gathers_and_reshards_around_a_method_that_is_not_forward():
    want = _scorer_reference_grads(scale=0.5)
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        tessel.manual_seed(3)
        net = fully_shard(Scorer(), reshard_after_forward=True)
        idx = tessel.tensor(_SCORER_IDX[world.rank * 2:(world.rank + 1) * 2])
        with pytest.raises(RuntimeError, match="materialized"):
            net.score(idx)  # fully_shard's hooks run around forward only
        register_fsdp_forward_method(net, "score")
        with tessel.CommTracer() as fwd:
            out = net.score(idx, scale=0.5)
        assert out["tokens"] == 6 and isinstance(net.fc.weight, DTensor)  # the dict kept; resharded after it
        with tessel.CommTracer() as bwd:
            out["loss"].backward()
        got[world.rank] = (fwd.summary(), bwd.summary(), {n: p.grad.full_tensor().numpy()
                                                          for n, p in net.named_parameters()})
        with pytest.raises(ValueError, match="does not have a method"):
            register_fsdp_forward_method(net, "generate")
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    plain = nn.Linear(2, 2)
    register_fsdp_forward_method(plain, "forward")  # not fully_shard's: a no-op, as torch
    assert "forward" not in plain.__dict__
    for fwd, bwd, grads in got.values():
        assert (fwd, bwd) == ("all_gather(axis0) x1", "all_gather(axis0) x1, reduce_scatter(axis0) x1")
        for n, w in want.items():
            np.testing.assert_allclose(grads[n], w, rtol=1e-5, atol=1e-7, err_msg=n)


def test_set_unshard_in_backward_all_reduce_hook_and_force_sum_follow_torch():
    want = _scorer_reference_grads()
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        tessel.manual_seed(3)
        net = Scorer()
        fully_shard(net.emb)
        fully_shard(net)
        idx = tessel.tensor(_SCORER_IDX[world.rank * 2:(world.rank + 1) * 2])
        # The embedding's backward reads no weight: no all-gather for it in backward.
        net.emb.set_unshard_in_backward(False)
        seen = []

        def hook(reduced):  # the root's reduced block: fc's weight and bias shards, padding included
            seen.append(reduced.numel())
            reduced.mul_(2.0)

        net.set_all_reduce_hook(hook)
        net.set_force_sum_reduction_for_comms(True)
        loss = net(idx).pow(2).mean()
        with tessel.CommTracer() as bwd:
            loss.backward()
        got[world.rank] = (bwd.summary(), seen, {n: p.grad.full_tensor().numpy() for n, p in net.named_parameters()})
        # On a module whose backward reads its weights, the same setting is an error, not a read of freed bytes.
        net.emb.set_unshard_in_backward(True)
        tessel.manual_seed(4)
        block = Net()
        fully_shard(block.layers[1])  # its input's gradient (layers[0] needs it) reads its weight
        fully_shard(block)
        block.layers[1].set_unshard_in_backward(False)
        out = block(tessel.randn(2, 8)).sum()
        with pytest.raises(RuntimeError, match="bytes were freed"):
            out.backward()
        with pytest.raises(ValueError, match="stream"):
            net.set_all_reduce_hook(hook, stream=object())
        with pytest.warns(FutureWarning):
            net.set_reduce_scatter_divide_factor(2.0)
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    for summary, seen, grads in got.values():
        assert summary == "reduce_scatter(axis0) x2"
        assert seen == [(8 * 8 + 8) // 2]
        for n, w in want.items():
            np.testing.assert_allclose(grads[n], w * (2.0 if n.startswith("fc.") else 1.0), rtol=1e-5, atol=1e-7,
                                       err_msg=n)


def test_reshard_after_forward_as_an_int_gathers_backward_within_groups_and_trains_as_true():
    # torch's fully_shard(reshard_after_forward=2) on 4 ranks: backward all-gathers over 2-rank groups
    # ([0, 1], [2, 3]); the gradients are bit for bit those of reshard_after_forward=True.
    x = np.random.default_rng(3).standard_normal((8, 8)).astype(np.float32)
    results = {}

    def rank_fn(world):
        dist.init_process_group()
        rows = tessel.tensor(x[2 * world.rank:2 * world.rank + 2])
        grads = {}
        for reshard in (2, True):
            tessel.manual_seed(0)
            net = Net()
            for block in net.layers:
                fully_shard(block, reshard_after_forward=reshard)
            fully_shard(net)
            loss = net(rows).pow(2).mean()
            with tessel.CommTracer() as t:
                loss.backward()
            grads[reshard] = ([p.grad.full_tensor().numpy() for p in net.parameters()], t.summary())
        for a, b in zip(grads[2][0], grads[True][0]):
            np.testing.assert_array_equal(a, b)
        results[world.rank] = (grads[2][1], grads[True][1])
        tessel.manual_seed(0)
        net = Net()
        with pytest.raises(ValueError, match="it should be a factor of 4.*not 3"):
            fully_shard(net.layers[0], reshard_after_forward=3)
        with pytest.raises(ValueError, match="should be a bool or an int"):
            fully_shard(net.layers[1], reshard_after_forward="2")
        fully_shard(net.layers[1], reshard_after_forward=2)
        with pytest.raises(ValueError, match="should be a bool, got"):
            net.layers[1].set_reshard_after_forward(2)
        dist.destroy_process_group()

    tessel.run_ranks(4, rank_fn)
    for rank in range(4):
        assert results[rank] == ("all_gather(axis0.post_forward) x2, reduce_scatter(axis0) x3",
                                 "all_gather(axis0) x2, reduce_scatter(axis0) x3")


def test_process_group_functions_and_device_mesh_follow_torch():
    seen = {}

    def rank_fn(world):
        assert not dist.is_initialized()
        with pytest.raises(ValueError, match="Default process group has not been initialized, please make sure to "
                                             r"call init_process_group. \(get_rank\)") as caught:
            dist.get_rank()
        assert isinstance(caught.value, RuntimeError)  # both, as tessel's error classes are
        dist.init_process_group("gloo")
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        assert mesh.shape == (2, 2) and mesh.mesh_dim_names == ("dp", "tp") and mesh["tp"].size() == 2
        unnamed = init_device_mesh("cpu", (4,))
        assert unnamed.mesh_dim_names is None  # torch's None without names, and no flattening then
        with pytest.raises(RuntimeError, match="^Cannot flatten a DeviceMesh without mesh_dim_names!$"):
            unnamed._flatten()
        seen[dist.get_rank()] = (dist.get_world_size(), mesh.get_local_rank("dp"), mesh.get_local_rank("tp"))
        d = distribute_tensor(tessel.arange(8, dtype=tessel.float32), mesh["tp"], [Shard(0)])
        assert isinstance(d, DTensor) and not isinstance(d.to_local(), DTensor)
        assert d.to_local().tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]][mesh.get_local_rank("tp")]
        assert d.redistribute(mesh["tp"], [Replicate()]).to_local().tolist() == list(range(8))
        dist.barrier()
        with pytest.raises(NotImplementedError, match="device_type 'cuda'"):
            init_device_mesh("cuda", (4,))
        dist.destroy_process_group()
        assert not dist.is_initialized()

    tessel.run_ranks(4, rank_fn)
    assert seen == {0: (4, 0, 0), 1: (4, 0, 1), 2: (4, 1, 0), 3: (4, 1, 1)}
    with pytest.raises(RuntimeError, match="run under tessel_run"):
        dist.init_process_group()


def test_collectives_on_tensors_follow_torch_distributed():
    def rank_fn(world):
        dist.init_process_group()
        r = dist.get_rank()
        t = tessel.tensor(np.array([r + 1.0, 10.0 * r]))
        dist.all_reduce(t)
        assert t.tolist() == [1 + 2 + 3, 0 + 10 + 20]
        t = tessel.tensor(np.array([float(r)]))
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        assert t.tolist() == [2.0]
        out = tessel.zeros(6, dtype=tessel.float64)
        with tessel.CommTracer() as tracer:
            work = dist.all_gather_into_tensor(out, tessel.tensor(np.array([r, -r], dtype=np.float64)), async_op=True)
            work.wait()
        assert tracer.summary() == "all_gather(world) x1" and out.tolist() == [0, 0, 1, -1, 2, -2]
        part = tessel.zeros(1, dtype=tessel.float64)
        dist.reduce_scatter_tensor(part, tessel.tensor(np.arange(3, dtype=np.float64) * (r + 1)))
        assert part.tolist() == [r * (1 + 2 + 3)]
        b = tessel.tensor(np.array([float(r)]))
        dist.broadcast(b, src=2)
        assert b.tolist() == [2.0]

    tessel.run_ranks(3, rank_fn)


def test_list_collectives_object_p2p_and_batch_isend_irecv_follow_torch_distributed():
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        r, n = dist.get_rank(), dist.get_world_size()
        out = tessel.zeros(2)
        dist.reduce_scatter(out, [tessel.full((2,), float(r + 10 * j)) for j in range(n)])  # sum over ranks
        outs = [tessel.zeros(j + 1) for j in range(n)]
        dist.all_to_all(outs, [tessel.full((r + 1,), float(10 * r + j)) for j in range(n)])
        # Per-peer shapes may differ and be empty (uneven MoE routing): rank r sends j rows of width r + 1.
        uneven = [tessel.zeros(r, j + 1) for j in range(n)]
        dist.all_to_all(uneven, [tessel.full((j, r + 1), float(r)) for j in range(n)])
        assert [tuple(u.shape) for u in uneven] == [(r, j + 1) for j in range(n)]
        assert all(u.tolist() == [[float(j)] * (j + 1)] * r for j, u in enumerate(uneven))
        objs = [None] * n if r == 0 else None
        dist.gather_object({"rank": r}, objs, dst=0)
        mine = [None]
        dist.scatter_object_list(mine, ["a", "b", "c"] if r == 0 else None, src=0)
        received = None
        if r == 0:
            dist.send_object_list([1, "x"], dst=1)
        elif r == 1:
            received = [None, None]
            assert dist.recv_object_list(received, src=0) == 0
        # A ring: every rank sends to the next and receives from the previous, in one batch (issued one by
        # one the sends would wait for each other in a cycle).
        buf = tessel.zeros(1)
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, tessel.full((1,), float(r)), (r + 1) % n),
                                        dist.P2POp(dist.irecv, buf, (r - 1) % n)])
        assert [w.wait() for w in works] == [True, True]  # torch's Work.wait() returns True
        assert dist.all_reduce(tessel.ones(1), async_op=True).wait() is True
        dist.monitored_barrier()
        got[r] = (out.tolist(), [o.tolist() for o in outs], objs, mine[0], received, buf.tolist(),
                  dist.get_process_group_ranks(dist.group.WORLD), dist.get_backend())
        dist.destroy_process_group()

    tessel.run_ranks(3, rank_fn)
    for r in range(3):
        out, outs, objs, mine, received, buf, ranks, backend = got[r]
        assert out == [3.0 + 30 * r] * 2
        assert outs == [[10.0 * j + r] * (j + 1) for j in range(3)]
        assert objs == ([{"rank": 0}, {"rank": 1}, {"rank": 2}] if r == 0 else None)
        assert mine == "abc"[r] and received == ([1, "x"] if r == 1 else None)
        assert buf == [float((r - 1) % 3)] and ranks == [0, 1, 2] and backend == "threads"
    assert dist.is_available() and dist.is_gloo_available() and not dist.is_nccl_available()
    assert dist.get_node_local_rank(fallback_rank=3) == 3 and dist.Backend("GLOO") == dist.Backend.GLOO
    assert dist.init_device_mesh is init_device_mesh


def test_new_subgroups_by_enumeration_makes_one_group_per_list_as_torch():
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        mine, groups = dist.new_subgroups_by_enumeration([[0, 2], [3, 1]])
        t = tessel.full((1,), float(world.rank))
        dist.all_reduce(t, group=mine)
        got[world.rank] = (t.item(), dist.get_process_group_ranks(mine), len(groups),
                           dist.get_process_group_ranks(groups[0]) if world.rank in (0, 2) else None)
        with pytest.raises(ValueError, match="Rank 2 has appeared in both subgroup"):
            dist.new_subgroups_by_enumeration([[0, 2], [2, 3]])
        dist.destroy_process_group()

    tessel.run_ranks(4, rank_fn)
    assert got[0] == (2.0, [0, 2], 2, [0, 2]) and got[2] == (2.0, [0, 2], 2, [0, 2])
    assert got[1] == (4.0, [1, 3], 2, None) and got[3] == (4.0, [1, 3], 2, None)


def test_stores_follow_torchs_api():
    import datetime
    import socket
    import threading
    short = datetime.timedelta(milliseconds=50)
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=datetime.timedelta(seconds=10))
    client = dist.TCPStore("127.0.0.1", master.port, timeout=datetime.timedelta(seconds=10))
    for a, b in [(master, client), (dist.HashStore(),) * 2]:
        a.set("k", "v")  # str values are stored as their UTF-8 bytes, as torch's
        assert b.get("k") == b"v" and b.check(["k"]) and not b.check(["k", "nope"])
        assert a.add("n", 2) == 2 and b.add("n", 3) == 5 and a.get("n") == b"5"  # decimal text, as torch's
        later = threading.Timer(0.05, lambda: a.set("late", b"x"))
        later.start()
        b.wait(["late"])  # blocks until the other client sets it
        later.join()
        with pytest.raises(TimeoutError, match="'never' not set after 50 ms"):
            b.wait(["never"], short)
        b.set_timeout(short)
        with pytest.raises(TimeoutError, match="'never'"):
            b.get("never")
        b.set_timeout(datetime.timedelta(seconds=10))
        keys = a.num_keys()
        assert a.compare_set("cas", "", "first") == b"first" and b.compare_set("cas", "nope", "x") == b"first"
        assert b.compare_set("cas", b"first", b"second") == b"second" and a.get("cas") == b"second"
        assert b.num_keys() == keys + 1 and a.delete_key("cas") and not b.delete_key("cas")
        assert a.num_keys() == keys
    base = dist.HashStore()
    p1, p2 = dist.PrefixStore("job1", base), dist.PrefixStore("job2", base)
    p1.set("k", b"1")
    assert not p2.check(["k"]) and base.get("job1/k") == b"1" and p2.add("n", 1) == 1
    with socket.socket() as s:  # a free port for a master that waits for its workers
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    made = {}
    t = threading.Thread(target=lambda: made.setdefault("m", dist.TCPStore("127.0.0.1", port, 2, True)))
    t.start()
    worker = dist.TCPStore("127.0.0.1", port, 2, False)
    t.join(30)
    assert "m" in made and worker.add("tessel/tcp_store/joined", 0) == 2


def test_recv_without_src_takes_a_send_from_any_rank_and_returns_the_sender():
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        r = dist.get_rank()
        pair = dist.new_group([1, 2])  # group rank 0 is global rank 1
        if r == 0:
            seen = []
            for _ in range(2):
                t = tessel.zeros(2)
                seen.append((dist.recv(t), t.tolist()))  # torch's recv(src=None)
            t = tessel.zeros(2)
            w = dist.irecv(t, tag=3)
            w.wait()
            seen.append((w._source_rank(), t.tolist()))
            box = [None]
            seen.append((dist.recv_object_list(box), box[0]))
            with pytest.raises(RuntimeError, match=r"sourceRank\(\) may only be called on work objects"):
                dist.isend(tessel.zeros(1), dst=1)._source_rank()
            got[r] = seen
        elif r == 1:
            dist.send(tessel.full((2,), 10.0), dst=0)
            dist.send(tessel.full((2,), 30.0), dst=0, tag=3)
            t = tessel.zeros(1)
            got[r] = (dist.recv(t, group=pair), t.tolist())  # a global rank, from a subgroup
            dist.recv(tessel.zeros(1), src=0)
        else:
            dist.send(tessel.full((2,), 20.0), dst=0)
            dist.send(tessel.full((1,), 5.0), dst=1, group=pair)
            dist.send_object_list(["from 2"], dst=0)
        dist.destroy_process_group()

    tessel.run_ranks(3, rank_fn)
    assert sorted(got[0][:2]) == [(1, [10.0, 10.0]), (2, [20.0, 20.0])]
    assert got[0][2:] == [(1, [30.0, 30.0]), (2, "from 2")]
    assert got[1] == (2, [5.0])


def test_from_local_takes_uneven_shards_with_the_global_shape_or_run_check():
    full = np.arange(10, dtype=np.float32).reshape(5, 2)
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        rows = (0, 3) if world.rank == 0 else (3, 5)  # torch.chunk's split of 5 rows: 3 and 2
        local = tessel.tensor(full[rows[0]:rows[1]])
        given = DTensor.from_local(local, mesh, [Shard(0)], shape=(5, 2), stride=(2, 1))
        checked = DTensor.from_local(local, mesh, [Shard(0)], run_check=True)
        same = distribute_tensor(tessel.tensor(full), mesh, [Shard(0)]).to_local().tolist() == local.tolist()
        with pytest.raises(ValueError, match=r"holds a local tensor of shape \[%d, 2\]" % local.shape[0]):
            DTensor.from_local(local, mesh, [Shard(0)], shape=(7, 2))  # chunks of 7 rows: 4 and 3
        got[world.rank] = (tuple(given.shape), given.full_tensor().numpy(), tuple(checked.shape),
                           checked.full_tensor().numpy(), same)
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    for shape, values, checked_shape, checked_values, same in got.values():
        assert shape == checked_shape == (5, 2) and same
        np.testing.assert_array_equal(values, full)
        np.testing.assert_array_equal(checked_values, full)


def test_dtensor_factories_and_distribute_module_follow_torch():
    from tessel.distributed.tensor import (Placement, distribute_module, full, ones, randn, zeros)
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        z = zeros(5, 3, device_mesh=mesh, placements=[Shard(0)])
        o = ones((2, 2), device_mesh=mesh)
        f = full((3,), 2.5, device_mesh=mesh, placements=[Shard(0)])
        tessel.manual_seed(world.rank)  # different seeds: the random DTensor is still one global tensor
        r = randn(4, device_mesh=mesh, placements=[Shard(0)], requires_grad=True)
        tessel.manual_seed(3)
        lin = nn.Linear(3, 2)
        want = lin(tessel.ones(1, 3)).detach().numpy()
        calls = []
        distribute_module(lin, mesh,
                          input_fn=lambda m, args, mesh: (calls.append("in"), (distribute_tensor(args[0], mesh),))[1],
                          output_fn=lambda m, out, mesh: (calls.append("out"), out.to_local())[1])
        y = lin(tessel.ones(1, 3))
        got[world.rank] = (z.placements, tuple(z.to_local().shape), o.placements, tuple(o.shape), f.to_local().tolist(),
                           r.full_tensor().tolist(), r.requires_grad, lin.weight.placements, isinstance(y, DTensor),
                           np.abs(y.detach().numpy() - want).max(), calls)
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    for rank, g in got.items():
        assert g[0] == (Shard(0),) and g[1] == ((3, 3) if rank == 0 else (2, 3))  # torch.chunk rows of 5
        assert g[2] == (Replicate(),) and g[3] == (2, 2)
        assert g[4] == ([2.5, 2.5] if rank == 0 else [2.5])
        assert g[6] and g[7] == (Replicate(),) and not g[8] and g[9] < 1e-6 and g[10] == ["in", "out"]
    assert got[0][5] == got[1][5]  # one global random tensor
    assert isinstance(Shard(0), Placement) and isinstance(Replicate(), Placement)


def test_broadcast_src_is_a_global_rank_on_a_subgroup_as_in_torch():
    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        dp = mesh.get_group("dp")  # global ranks {0, 2} or {1, 3}
        r = dist.get_rank()
        assert list(dp.global_ranks) == [r % 2, r % 2 + 2]
        t = tessel.tensor(np.array([float(r)]))
        dist.broadcast(t, src=r % 2 + 2, group=dp)  # the group's second member, by its global rank
        assert t.tolist() == [float(r % 2 + 2)]
        t = tessel.tensor(np.array([float(r)]))
        dist.broadcast(t, group_src=0, group=dp)
        assert t.tolist() == [float(r % 2)]
        assert dist.get_global_rank(dp, 1) == r % 2 + 2 and dist.get_group_rank(dp, r) == r // 2
        with pytest.raises(ValueError, match="not part of the group"):
            dist.broadcast(t, src=(r + 1) % 2, group=dp)  # a rank of the other dp group
        with pytest.raises(ValueError, match="exactly one of src"):
            dist.broadcast(t, src=0, group_src=0)

    tessel.run_ranks(4, rank_fn)


def test_distribute_tensor_takes_src_data_rank_values_as_torch():
    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
        r = dist.get_rank()
        mine = tessel.full((4,), float(r))
        assert distribute_tensor(mine, mesh, [Shard(0)]).full_tensor().tolist() == [0.0] * 4  # default 0
        assert distribute_tensor(mine, mesh, [Shard(0)], src_data_rank=1).full_tensor().tolist() == [1.0] * 4
        own = distribute_tensor(mine, mesh, [Shard(0)], src_data_rank=None)  # each rank's own rows
        assert own.full_tensor().tolist() == [0.0, 0.0, 1.0, 1.0]
        with pytest.raises(ValueError, match="src_data_rank 2 is not a rank of mesh dim 0"):
            distribute_tensor(mine, mesh, [Shard(0)], src_data_rank=2)

    tessel.run_ranks(2, rank_fn)


def test_zero_grad_without_set_to_none_and_fill_work_on_sharded_parameters():
    def rank_fn(world):
        dist.init_process_group()
        net = sharded_net()
        opt = tessel.optim.SGD(net.parameters(), lr=0.1)
        net(tessel.randn(4, 8)).sum().backward()
        opt.zero_grad(set_to_none=False)  # used to raise "FillInPlace works on local tensors"
        for p in net.parameters():
            assert p.grad is not None and p.grad.full_tensor().abs().sum().item() == 0.0
        with tessel.no_grad():
            net.head.weight.fill_(0.5)
        assert net.head.weight.full_tensor().numpy().tolist() == [[0.5] * 8] * 3
        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))
        partial = DTensor.from_local(tessel.ones(2), mesh, [Partial()])
        with pytest.raises(ValueError, match=r"filling a Partial\(sum\) DTensor would sum a copy of the value"):
            partial.fill_(1.0)
        partial.zero_()  # zero is exact under every reduce op (sequence-parallel norm grads are Partial)
        assert partial.full_tensor().tolist() == [0.0, 0.0]
        for op in ("avg", "max", "min"):  # W copies of v reduce to v (as torch's; refused as for sum before)
            d = DTensor.from_local(tessel.ones(2), mesh, [Partial(op)])
            with tessel.no_grad():
                d.fill_(2.5)
            assert d.full_tensor().tolist() == [2.5, 2.5] and d.placements == (Partial(op),)

    tessel.run_ranks(2, rank_fn)


def test_redistribute_defaults_to_the_tensors_own_mesh_as_torch():
    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))
        d = distribute_tensor(tessel.arange(4, dtype=tessel.float32), mesh, [Shard(0)])
        r = d.redistribute(placements=[Replicate()])  # used to require device_mesh
        assert r.placements == (Replicate(),) and r.to_local().tolist() == [0.0, 1.0, 2.0, 3.0]
        with pytest.raises(RuntimeError, match="placements is needed for redistribute!"):  # torch 2.15's code
            d.redistribute()

    tessel.run_ranks(2, rank_fn)


def test_dropout_on_a_sharded_dtensor_equals_dropout_on_the_full_tensor():
    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
        full = tessel.arange(60, dtype=tessel.float32).view(6, 10) + 1.0
        tessel.manual_seed(5)  # the same seed on every rank, as torch's TP requires
        want = F.dropout(full, 0.5).tolist()
        tessel.manual_seed(5)
        got = F.dropout(distribute_tensor(full, mesh, [Shard(1)]), 0.5)
        assert got.placements == (Shard(1),)
        assert got.full_tensor().tolist() == want
        assert 0 < sum(v == 0.0 for row in want for v in row) < 60
        # Attention dropout on tensor-parallel heads (Shard(1) of [B, H, T, D]) draws the dense mask too.
        q, k, v = (tessel.randn(2, 4, 6, 8) for _ in range(3))
        tessel.manual_seed(3)
        want = F.scaled_dot_product_attention(q, k, v, dropout_p=0.3, is_causal=True).numpy()
        tessel.manual_seed(3)
        dq, dk, dv = (distribute_tensor(t, mesh, [Shard(1)]) for t in (q, k, v))
        got = F.scaled_dot_product_attention(dq, dk, dv, dropout_p=0.3, is_causal=True)
        assert got.placements == (Shard(1),)
        np.testing.assert_array_equal(got.full_tensor().numpy(), want)

    tessel.run_ranks(2, rank_fn)


def test_new_group_p2p_and_list_and_object_collectives_follow_torch_distributed():
    def rank_fn(world):
        dist.init_process_group()
        rank = dist.get_rank()
        g = dist.new_group([1, 2])  # every rank calls it; rank 0 is outside
        if rank == 0:
            assert g is dist.GroupMember.NON_GROUP_MEMBER
            assert dist.get_rank(g) == -1 and dist.get_world_size(g) == -1  # torch's values outside
            t = tessel.ones(1)
            with pytest.warns(UserWarning, match="does not belong to the given group"):
                assert dist.all_reduce(t, group=g) is None and t.tolist() == [1.0]  # a no-op, as torch
            with pytest.warns(UserWarning, match="does not belong"):
                dist.all_gather([tessel.zeros(1)] * 2, t, group=g)
            with pytest.raises(ValueError, match="not part of the group"):
                dist.get_global_rank(g, 0)
        else:
            t = tessel.full((2,), float(rank))
            dist.all_reduce(t, group=g)
            assert t.tolist() == [3.0, 3.0] and dist.get_rank(g) == rank - 1 and dist.get_world_size(g) == 2
        dist.destroy_process_group(g)  # a subgroup (or NON_GROUP_MEMBER): the default group stays
        assert dist.is_initialized()
        mesh = init_device_mesh("cpu", (3,), mesh_dim_names=("dp",))
        assert mesh.get_coordinate() == (rank,)  # a tuple, as torch 2.15's
        parts = [tessel.zeros(2) for _ in range(3)]
        dist.all_gather(parts, tessel.full((2,), float(rank) + 0.5))
        assert [p.tolist() for p in parts] == [[0.5, 0.5], [1.5, 1.5], [2.5, 2.5]]
        objs = [None] * 3
        dist.all_gather_object(objs, {"rank": rank, "tag": "x" * rank})
        assert objs == [{"rank": r, "tag": "x" * r} for r in range(3)]
        lst = [rank, "from %d" % rank] if rank == 2 else [None, None]
        dist.broadcast_object_list(lst, src=2)
        assert lst == [2, "from 2"]
        r = tessel.full((1,), float(rank + 1))
        dist.reduce(r, dst=1)
        assert r.tolist() == ([6.0] if rank == 1 else [float(rank + 1)])
        got = [tessel.zeros(1) for _ in range(3)] if rank == 0 else None
        dist.gather(tessel.full((1,), float(rank * 10)), got, dst=0)
        if rank == 0:
            assert [x.tolist() for x in got] == [[0.0], [10.0], [20.0]]
        mine = tessel.zeros(2)
        dist.scatter(mine, [tessel.full((2,), float(i)) for i in range(3)] if rank == 2 else None, src=2)
        assert mine.tolist() == [float(rank)] * 2
        out = tessel.zeros(3)
        dist.all_to_all_single(out, tessel.tensor([rank * 3.0, rank * 3.0 + 1, rank * 3.0 + 2]))
        assert out.tolist() == [float(rank), 3.0 + rank, 6.0 + rank]
        if rank == 0:
            dist.send(tessel.tensor([42.0]), dst=2)
            w = dist.isend(tessel.tensor([43.0]), dst=1)
            w.wait()
        elif rank == 2:
            buf = tessel.zeros(1)
            assert dist.recv(buf, src=0) == 0 and buf.tolist() == [42.0]
        else:
            buf = tessel.zeros(1)
            dist.irecv(buf, src=0).wait()
            assert buf.tolist() == [43.0]

    tessel.run_ranks(3, rank_fn)


def test_distributed_data_parallel_broadcasts_buffers_from_the_first_rank():
    # torch 2.15: rank 0's buffers at construction (not with the deprecated broadcast_buffers=False, which warns) and,
    # with forward_sync_buffers (the default), before a forward whose previous forward synced (not after a no_sync
    # or no_grad forward).
    import warnings
    from tessel.nn.parallel import DistributedDataParallel as DDP
    seen = {}

    def rank_fn(world):
        dist.init_process_group()
        rank = dist.get_rank()
        models, caught = [], []
        for kwargs in ({}, {"broadcast_buffers": False}, {"forward_sync_buffers": False}):
            m = nn.Linear(2, 2)
            m.register_buffer("count", tessel.full([3], float(10 + rank)))
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                models.append(DDP(m, **kwargs))
            caught.append([str(x.message)[:44] for x in w if issubclass(x.category, FutureWarning)])
        at_construction = [ddp.module.count.tolist()[0] for ddp in models]
        after = []
        for ddp in models:
            ddp.module.count.fill_(float(20 + rank))  # the ranks' buffers diverge after construction
            ddp(tessel.ones(1, 2))
            after.append(ddp.module.count.tolist()[0])
        ddp = models[0]
        with ddp.no_sync():
            ddp(tessel.ones(1, 2))
        ddp.module.count.fill_(float(30 + rank))
        ddp(tessel.ones(1, 2))  # follows an unsynced forward: no broadcast
        skipped = ddp.module.count.tolist()[0]
        ddp(tessel.ones(1, 2))
        seen[rank] = (caught, at_construction, after, skipped, ddp.module.count.tolist()[0])

    tessel.run_ranks(2, rank_fn)
    for rank in (0, 1):
        caught, at_construction, after, skipped, synced = seen[rank]
        assert caught == [[], ["`broadcast_buffers` is deprecated. Use `forw"], []]
        assert at_construction == [10.0, 10.0 + rank, 10.0]
        assert after == [20.0, 20.0 + rank, 20.0 + rank]
        assert (skipped, synced) == (30.0 + rank, 30.0)


def test_distributed_data_parallel_trains_as_one_rank_on_the_whole_batch():
    from tessel.nn.parallel import DistributedDataParallel as DDP
    rng = np.random.default_rng(4)
    x_all, y_all = rng.standard_normal((8, 3)).astype(np.float32), rng.standard_normal((8, 2)).astype(np.float32)

    def make(seed):
        tessel.manual_seed(seed)
        return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))

    ref = make(0)  # one rank, the whole batch, three SGD steps
    opt = tessel.optim.SGD(ref.parameters(), lr=0.5)
    for _ in range(3):
        opt.zero_grad()
        ((ref(tessel.tensor(x_all)) - tessel.tensor(y_all)) ** 2).mean().backward()
        opt.step()
    want = [p.detach().numpy() for p in ref.parameters()]
    results = {}

    def rank_fn(world):
        dist.init_process_group()
        rank = dist.get_rank()
        model = DDP(make(rank))  # different initial weights per rank: DDP starts them all from rank 0's
        assert list(model.state_dict())[0].startswith("module.")
        opt = tessel.optim.SGD(model.parameters(), lr=0.5)
        x, y = tessel.tensor(x_all[rank * 4:(rank + 1) * 4]), tessel.tensor(y_all[rank * 4:(rank + 1) * 4])
        for _ in range(3):
            opt.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            opt.step()
        results[rank] = [p.detach().numpy() for p in model.module.parameters()]
        # no_sync: local accumulation, then one averaging of the sums.
        opt.zero_grad()
        with model.no_sync():
            ((model(x) - y) ** 2).mean().backward()
        local = model.module[0].weight.grad.numpy().copy()
        ((model(x) - y) ** 2).mean().backward()  # synchronized: the mean over ranks of the local sums
        total = tessel.tensor(2 * local)
        dist.all_reduce(total)
        np.testing.assert_allclose(model.module[0].weight.grad.numpy(), total.numpy() / 2, rtol=1e-5, atol=1e-6)

    tessel.run_ranks(2, rank_fn)
    for r in range(2):
        for got, w in zip(results[r], want):
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)

    def gan(world):  # G's output used detached by the first backward: G averages after the second
        dist.init_process_group()
        rank = dist.get_rank()
        G, D = DDP(nn.Linear(2, 2)), DDP(nn.Linear(2, 1))
        fake = G(tessel.full((1, 2), float(rank + 1)))
        D(fake.detach()).sum().backward()
        assert G.module.weight.grad is None
        D(fake).sum().backward()
        g = G.module.weight.grad.numpy()
        total = tessel.tensor(g.copy())
        dist.all_reduce(total)
        np.testing.assert_allclose(total.numpy() / 2, g, rtol=1e-6)  # the same mean on both ranks
        results[rank] = g

    tessel.run_ranks(2, gan)
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)


def test_bad_distributed_input_raises_python_errors_with_tessels_message():
    def rank_fn(world):
        dist.init_process_group()
        with pytest.raises(ValueError, match=r"\[3\]"):  # the mesh shape's product must be the world size
            init_device_mesh("cpu", (3,))
        with pytest.raises(TypeError):
            fully_shard("not a module")
        with pytest.raises(TypeError):
            fully_shard(nn.Linear(2, 2), mesh="dp")
        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))
        with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-1, 0\], but "
                                             r"got 3\)"):  # torch's error for a Shard dim the tensor lacks
            distribute_tensor(tessel.ones(4), mesh, [Shard(3)])

    tessel.run_ranks(2, rank_fn)

    class Forgot(nn.Module):
        def __init__(self):
            pass  # no super().__init__()

    with pytest.raises(TypeError, match="__init__"):
        Forgot()
    with pytest.raises(TypeError, match="optimizer can only optimize Tensors, got str"):
        tessel.optim.AdamW(["w"])


def test_optimizers_with_param_groups_equal_the_cpp_optimizers():
    tessel.manual_seed(1)
    a, b = Net(), Net()
    b.load_state_dict(a.state_dict())
    x = tessel.randn(4, 8)
    head = [p for n, p in a.named_parameters() if n.startswith("head")]
    rest = [p for n, p in a.named_parameters() if not n.startswith("head")]
    opt_a = tessel.optim.AdamW([{"params": rest}, {"params": head, "lr": 0.0}], lr=0.05, betas=(0.8, 0.9))
    # The C++ AdamW, one per group, over (fqn, parameter) pairs.
    opts_b = [tessel._C.AdamW([(n, p) for n, p in b.named_parameters() if n.startswith("head") == is_head],
                              lr=0.0 if is_head else 0.05, beta1=0.8, beta2=0.9) for is_head in (False, True)]
    head_before = [p.numpy() for p in head]
    for _ in range(3):
        for model, opts in ((a, [opt_a]), (b, opts_b)):
            model(x).pow(2).mean().backward()
            for opt in opts:
                opt.step()
                opt.zero_grad()
    for (n, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        np.testing.assert_array_equal(pa.numpy(), pb.numpy(), err_msg=n)
    for before, p in zip(head_before, head):  # lr 0 group: untouched
        np.testing.assert_array_equal(p.numpy(), before)
    # SGD with momentum: torch's formula, by hand.
    w = nn.Parameter(tessel.tensor(np.array([1.0, -2.0])))
    sgd = tessel.optim.SGD([w], lr=0.1, momentum=0.9)
    buf, ref = np.zeros(2), np.array([1.0, -2.0])
    for _ in range(3):
        (w * w).sum().backward()
        sgd.step()
        sgd.zero_grad()
        buf = 0.9 * buf + 2 * ref if buf.any() else 2 * ref
        ref = ref - 0.1 * buf
    np.testing.assert_allclose(w.numpy(), ref, rtol=1e-12)
    with pytest.raises(ValueError, match="empty parameter list"):
        tessel.optim.AdamW([])
    with pytest.raises(TypeError, match="should be an iterable of Tensors or dicts"):
        tessel.optim.SGD(w)


def test_warmup_cosine_scheduler_sets_each_groups_lr():
    opt = tessel.optim.SGD([nn.Parameter(tessel.ones(1))], lr=2.0)
    sched = tessel.optim.lr_scheduler.warmup_cosine(opt, warmup_steps=2, total_steps=6, min_lr_ratio=0.1)
    lrs = [opt.param_groups[0]["lr"]]
    for _ in range(6):
        sched.step()
        lrs.append(sched.get_last_lr()[0])
    np.testing.assert_allclose(lrs, [2.0 * tessel._C._warmup_cosine_lr(1.0, 0.1, 2, 6, s) for s in range(7)])
    # Linear warmup reaches the peak at the last warmup step, then cosine down to min_lr_ratio × lr.
    assert lrs[0] == pytest.approx(1.0) and lrs[1] == pytest.approx(2.0) and lrs[6] == pytest.approx(0.2)
    assert lrs[2] > lrs[3] > lrs[4] > lrs[5] > lrs[6]


def test_init_process_group_timeout_is_each_calls_deadline():
    # torch's init_process_group(timeout=): rank 1 comes 2 s late to an all_reduce; rank 0 raises
    # TimeoutError after about the 0.3 s given (it used to be ignored: the 300 s default applied).
    import datetime
    import time
    waited = {}

    def rank_fn(world):
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=0.3))
        assert world.timeout == datetime.timedelta(seconds=0.3)
        t = tessel.ones(2)
        if world.rank == 1:
            time.sleep(2.0)
            return
        start = time.monotonic()
        with pytest.raises(TimeoutError, match="never arrived|timed out"):
            dist.all_reduce(t)
        waited[0] = time.monotonic() - start

    tessel.run_ranks(2, rank_fn)
    assert 0.25 < waited[0] < 1.5


def two_group_adamw(net, lr_decay, lr_no_decay):
    """torch's usual decay / no-decay split (weights / biases), each group with its own lr."""
    named = list(net.named_parameters())
    return tessel.optim.AdamW([{"params": [p for n, p in named if n.endswith("weight")], "weight_decay": 0.1},
                               {"params": [p for n, p in named if n.endswith("bias")], "weight_decay": 0.0,
                                "lr": lr_no_decay}], lr=lr_decay)


def test_an_optimizer_with_two_parameter_groups_checkpoints_and_resumes_exactly(tmp_path):
    # Saved on 2 fully_shard ranks after 2 steps (through get_state_dict + dcp.save and through tessel.save),
    # loaded into fresh optimizers with other learning rates: the next 2 steps' losses equal the
    # uninterrupted run's, and param_groups hold the saved hyperparameters again (torch's load_state_dict).
    batches = [tessel.from_numpy(np.random.default_rng(s).standard_normal((4, 8)).astype(np.float32))
               for s in range(4)]
    got = {}

    def run(world, resume, how):
        dist.init_process_group()
        net = sharded_net()
        opt = two_group_adamw(net, 0.5, 0.5) if resume else two_group_adamw(net, 0.05, 0.02)
        ckpt = str(tmp_path / how)
        if resume:
            if how == "dcp":
                model_sd, optim_sd = get_state_dict(net, opt)
                assert [g["lr"] for g in optim_sd["param_groups"]] == [0.5, 0.5]
                dcp.load({"model": model_sd, "optim": optim_sd}, checkpoint_id=ckpt)
                set_state_dict(net, opt, model_state_dict=model_sd, optim_state_dict=optim_sd)
            else:
                tessel.load(net, opt, ckpt)
            assert [g["lr"] for g in opt.param_groups] == [0.05, 0.02]
            assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0]
        losses = []
        for step in range(2, 4) if resume else range(4):
            if step == 2 and not resume:
                model_sd, optim_sd = get_state_dict(net, opt)
                dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(tmp_path / "dcp"))
                tessel.save(net, opt, str(tmp_path / "flat"))
            loss = net(batches[step]).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        got[(resume, how, world.rank)] = losses[-2:]
        dist.destroy_process_group()

    tessel.run_ranks(2, lambda world: run(world, False, "ref"))
    for how in ("dcp", "flat"):
        tessel.run_ranks(2, lambda world: run(world, True, how))
        for rank in range(2):
            assert got[(True, how, rank)] == got[(False, "ref", rank)], how


def test_dcp_keeps_bools_big_ints_lists_none_and_rng_states_and_refuses_colliding_keys(tmp_path):
    rng = np.random.default_rng(5)
    rng.standard_normal(3)
    state = {"flag": True, "off": False, "big": 2 ** 64 - 1, "neg": -2 ** 63 - 1, "groups": [{"lr": 0.1}, (1, 2)],
             "none": None, "rng": rng.bit_generator.state, "n": 7, "w": tessel.ones(2)}
    want_draws = rng.standard_normal(3)
    dcp.save(state, checkpoint_id=str(tmp_path / "values"))
    fresh = np.random.default_rng(0)
    back = {"flag": False, "off": True, "big": 0, "neg": 0, "groups": [], "none": 1, "rng": fresh.bit_generator.state,
            "n": 0, "w": tessel.zeros(2)}
    dcp.load(back, checkpoint_id=str(tmp_path / "values"))
    assert back["flag"] is True and back["off"] is False and back["n"] == 7
    assert back["big"] == 2 ** 64 - 1 and back["neg"] == -2 ** 63 - 1  # were rounded through float64
    assert back["groups"] == [{"lr": 0.1}, (1, 2)] and back["none"] is None and back["w"].tolist() == [1.0, 1.0]
    fresh.bit_generator.state = back["rng"]
    np.testing.assert_array_equal(fresh.standard_normal(3), want_draws)
    # A key the checkpoint lacks keeps its value under strict=False (it was rewritten: True became 1).
    extra = {"flag": False, "absent": True}
    dcp.load(extra, checkpoint_id=str(tmp_path / "values"), strict=False)
    assert extra == {"flag": True, "absent": True} and extra["absent"] is True
    with raises_on_ranks(ValueError, "duplicated flatten key layers.0.w"):
        dcp.save({"layers.0": {"w": tessel.ones(2)}, "layers": {"0": {"w": tessel.ones(2)}}},
                 checkpoint_id=str(tmp_path / "collide"))
    with raises_on_ranks(ValueError, "duplicated flatten key a.0"):
        dcp.save({"a": {0: 1, "0": 2}}, checkpoint_id=str(tmp_path / "collide2"))
    with raises_on_ranks(TypeError, "'fn' is a function"):
        dcp.save({"fn": lambda: 0}, checkpoint_id=str(tmp_path / "unpicklable"))


def test_dcp_checkpoint_saved_on_two_ranks_loads_into_one(tmp_path):
    ckpt = str(tmp_path / "dcp")
    saved = {}

    def save_fn(world):
        dist.init_process_group()
        net = sharded_net()
        opt = tessel.optim.AdamW(net.parameters(), lr=0.1)
        net(tessel.randn(4, 8)).sum().backward()
        opt.step()
        model_sd, optim_sd = get_state_dict(net, opt)
        assert sorted(optim_sd) == ["param_groups", "state"] and "head.weight" in model_sd
        dcp.save({"model": model_sd, "optim": optim_sd, "step": 7, "rng": b"\x80\x01rng"}, checkpoint_id=ckpt)
        full = {n: p.full_tensor().numpy() for n, p in net.named_parameters()}
        if world.rank == 0:
            saved.update(full)

    tessel.run_ranks(2, save_fn)
    tessel.manual_seed(42)
    net = Net()  # other values: everything must come from the checkpoint
    opt = tessel.optim.AdamW(net.parameters(), lr=0.1)
    model_sd, optim_sd = get_state_dict(net, opt)
    state = {"model": model_sd, "optim": optim_sd, "step": 0, "rng": b""}
    dcp.load(state, checkpoint_id=ckpt)
    set_state_dict(net, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    assert state["step"] == 7
    assert isinstance(state["rng"], bytes) and state["rng"] == b"\x80\x01rng"  # bytes stay bytes (DCP)
    for n, p in net.named_parameters():
        np.testing.assert_array_equal(p.numpy(), saved[n], err_msg=n)
    with raises_on_ranks(FileNotFoundError, "no checkpoint directory"):
        dcp.load(state, checkpoint_id=str(tmp_path / "missing"))
    with raises_on_ranks(RuntimeError, r"Missing key in checkpoint state_dict: extra\."):  # strict (torch's text)
        dcp.load({"extra": tessel.ones(1)}, checkpoint_id=ckpt)
    result = dcp.state_dict_loader._load({"extra": tessel.ones(1)}, checkpoint_id=ckpt, strict=False)
    assert result["missing_keys"] == ["extra"] and "model.head.weight" in result["unexpected_keys"]
    # As in DCP: a state dict may name a subset of the checkpoint (the model only) ...
    only_model = {"model": {"head.weight": tessel.zeros(*net.head.weight.shape)}}
    dcp.load(only_model, checkpoint_id=ckpt)
    np.testing.assert_array_equal(only_model["model"]["head.weight"].numpy(), saved["head.weight"])
    # ... and a shape mismatch raises whatever strict says, never leaving the old values in place.
    with raises_on_ranks(ValueError, r"Size mismatch between saved tessel.Size\(\[.*\]\) and current: "
                         r"tessel.Size\(\[1\]\) for model.head.weight"):
        dcp.load({"model": {"head.weight": tessel.zeros(1)}}, checkpoint_id=ckpt, strict=False)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))


def test_dcp_storage_writer_reader_planners_and_set_optimizer_state_dict_resume_exactly(tmp_path):
    # torch's DCP recipe: save through storage_writer=FileSystemWriter, load through FileSystemReader, then
    # set_model_state_dict + set_optimizer_state_dict into a fresh model and optimizer: the next 2 steps'
    # losses equal the uninterrupted run's exactly (Adam's moments came back, not zeros).
    from tessel.distributed.checkpoint.state_dict import (get_model_state_dict, get_optimizer_state_dict,
                                                          set_model_state_dict, set_optimizer_state_dict)
    batches = [tessel.from_numpy(np.random.default_rng(s).standard_normal((4, 8)).astype(np.float32))
               for s in range(4)]

    def steps(net, opt, which):
        out = []
        for s in which:
            loss = net(batches[s]).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            out.append(loss.item())
        return out

    tessel.manual_seed(0)
    net = Net()
    opt = tessel.optim.Adam(net.parameters(), lr=0.05)
    steps(net, opt, range(2))
    path = str(tmp_path / "ckpt")
    dcp.save({"model": get_model_state_dict(net), "optim": get_optimizer_state_dict(net, opt)},
             storage_writer=dcp.FileSystemWriter(path), planner=dcp.DefaultSavePlanner())
    expected = steps(net, opt, range(2, 4))

    tessel.manual_seed(1)  # other initial weights: everything must come from the checkpoint
    fresh = Net()
    fresh_opt = tessel.optim.Adam(fresh.parameters(), lr=0.05)
    state = {"model": get_model_state_dict(fresh), "optim": get_optimizer_state_dict(fresh, fresh_opt),
             "absent": tessel.zeros(2)}
    with raises_on_ranks(RuntimeError, "Missing key in checkpoint state_dict: absent"):  # strict by default
        dcp.load(state, storage_reader=dcp.FileSystemReader(path))
    result = dcp.state_dict_loader._load(state, storage_reader=dcp.FileSystemReader(path),
                                         planner=dcp.DefaultLoadPlanner(allow_partial_load=True))
    assert result["missing_keys"] == ["absent"]
    set_model_state_dict(fresh, state["model"])
    set_optimizer_state_dict(fresh, fresh_opt, state["optim"])
    assert steps(fresh, fresh_opt, range(2, 4)) == expected

    # checkpoint_id wins over the writer's path (torch resets the writer to it); overwrite=False refuses.
    writer = dcp.FileSystemWriter(str(tmp_path / "unused"))
    dcp.save({"w": tessel.ones(2)}, checkpoint_id=str(tmp_path / "given"), storage_writer=writer)
    assert writer.checkpoint_id == tmp_path / "given"  # (a pathlib.Path, as torch's)
    with pytest.raises(dcp.CheckpointException, match="overwrite=False"):  # torch's exception type
        dcp.save({"w": tessel.ones(2)}, storage_writer=dcp.FileSystemWriter(str(tmp_path / "given"), overwrite=False))

    class MyPlanner:  # not torch's planner protocol: its missing hook fails the save on every rank, as torch's
        pass
    with raises_on_ranks(AttributeError, "'MyPlanner' object has no attribute 'set_up_planner'"):
        dcp.save({"w": tessel.ones(2)}, checkpoint_id=path, planner=MyPlanner())

    # a DefaultLoadPlanner subclass that overrides a hook (renaming keys, as torch users do) has it called; one
    # that only sets options takes the default path
    class RenamingPlanner(dcp.DefaultLoadPlanner):
        def set_up_planner(self, state_dict, metadata=None, is_coordinator=False):
            super().set_up_planner({"model." + k: v for k, v in state_dict.items()}, metadata, is_coordinator)

    class Partial(dcp.DefaultLoadPlanner):
        def __init__(self):
            super().__init__(allow_partial_load=True)
    with raises_on_ranks(RuntimeError, r"^Missing key in checkpoint state_dict: model\.w\.$"):
        dcp.load({"w": tessel.ones(2)}, checkpoint_id=str(tmp_path / "given"), planner=RenamingPlanner())
    report = dcp.state_dict_loader._load({"w": tessel.ones(2), "x": tessel.ones(1)},
                                         checkpoint_id=str(tmp_path / "given"), planner=Partial())
    assert report["missing_keys"] == ["x"]
    with pytest.raises(NotImplementedError, match="FileSystemReader"):
        dcp.load({"w": tessel.ones(2)}, storage_reader=object())
    with pytest.raises(RuntimeError, match="`checkpoint_id` must be specified if storage_reader/storage_writer"):
        dcp.save({"w": tessel.ones(2)})


@pytest.mark.parametrize("make", [
    lambda ps: tessel.optim.RMSprop(ps, lr=0.01, momentum=0.5, centered=True, weight_decay=0.01),
    lambda ps: tessel.optim.Adagrad(ps, lr=0.1, lr_decay=0.1, initial_accumulator_value=0.1, weight_decay=0.01)])
def test_rmsprop_and_adagrad_on_fully_shard_equal_one_rank_and_resume_from_dcp(make, tmp_path):
    # Each rank updates its shard with the same elementwise rule: 2 fully_shard ranks on half batches equal
    # one rank on the whole batch step for step; a checkpoint after 2 steps (get_state_dict + dcp.save,
    # sharded) loaded into fresh optimizers continues with the same losses.
    batch = tessel.from_numpy(np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32))
    got = {}

    train = _train_squares

    tessel.manual_seed(0)
    ref_net = Net()
    ref_opt = make(ref_net.parameters())
    ref = train(ref_net, ref_opt, batch, 4)

    def run(world, resume):
        dist.init_process_group()
        net = sharded_net()
        opt = make(net.parameters())
        x = batch[world.rank * 2:(world.rank + 1) * 2]
        if resume:
            model_sd, optim_sd = get_state_dict(net, opt)
            dcp.load({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(tmp_path / "ckpt"))
            set_state_dict(net, opt, model_state_dict=model_sd, optim_state_dict=optim_sd)
            losses = train(net, opt, x, 2)
        else:
            losses = train(net, opt, x, 2)
            model_sd, optim_sd = get_state_dict(net, opt)
            dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(tmp_path / "ckpt"))
            losses += train(net, opt, x, 2)
        got[(resume, world.rank)] = losses
        dist.destroy_process_group()

    tessel.run_ranks(2, lambda world: run(world, False))
    tessel.run_ranks(2, lambda world: run(world, True))
    for rank in range(2):
        assert got[(True, rank)] == got[(False, rank)][2:]
    mean_loss = [(a + b) / 2 for a, b in zip(got[(False, 0)], got[(False, 1)])]  # each rank: half the batch
    np.testing.assert_allclose(mean_loss, ref, rtol=2e-5)


def test_rmsprop_and_adagrad_follow_torchs_update_state_dict_and_param_groups():
    a, g = np.array([1.0, -2.0, 0.5]), np.array([0.5, -0.25, 0.0])

    def stepped(opt_cls, steps, **kw):
        p = tessel.tensor(a.copy(), requires_grad=True)
        opt = opt_cls([p], **kw)
        for _ in range(steps):
            p.grad = tessel.tensor(g)
            opt.step()
        return p, opt

    # RMSprop, plain: p -= lr·g / (sqrt(square_avg) + eps) with square_avg = alpha·square_avg + (1-alpha)·g².
    p, opt = stepped(tessel.optim.RMSprop, 2, lr=0.01, alpha=0.9)
    sq1 = 0.1 * g * g
    p1 = a - 0.01 * g / (np.sqrt(sq1) + 1e-8)
    sq2 = 0.9 * sq1 + 0.1 * g * g
    np.testing.assert_allclose(p.detach().numpy(), p1 - 0.01 * g / (np.sqrt(sq2) + 1e-8), rtol=1e-12)
    sd = opt.state_dict()
    assert sorted(sd["state"][0]) == ["square_avg", "step"] and sd["param_groups"][0]["alpha"] == 0.9
    np.testing.assert_allclose(sd["state"][0]["square_avg"].numpy(), sq2, rtol=1e-12)
    # Loaded into a fresh optimizer with other options, it continues exactly like the original.
    q = tessel.tensor(p.detach().numpy(), requires_grad=True)
    fresh = tessel.optim.RMSprop([q], lr=1.0, alpha=0.5)
    fresh.load_state_dict(sd)
    assert fresh.param_groups[0]["alpha"] == 0.9
    for t, o in ((q, fresh), (p, opt)):
        t.grad = tessel.tensor(g)
        o.step()
    np.testing.assert_array_equal(q.detach().numpy(), p.detach().numpy())
    # Adagrad: an lr set in param_groups is read at the next step, as torch.
    p, opt = stepped(tessel.optim.Adagrad, 1, lr=0.1)
    opt.param_groups[0]["lr"] = 0.0
    before = p.detach().numpy().copy()
    p.grad = tessel.tensor(g)
    opt.step()
    np.testing.assert_array_equal(p.detach().numpy(), before)
    np.testing.assert_allclose(before, a - 0.1 * g / (np.abs(g) + 1e-10), rtol=1e-12)
    with pytest.raises(NotImplementedError, match="capturable is not supported"):
        tessel.optim.RMSprop([p], capturable=True)


def test_new_subgroups_cut_the_world_into_consecutive_groups_and_offload_policy_base_is_no_offload():
    got = {}

    def run(world):
        dist.init_process_group()
        mine, groups = dist.new_subgroups(2)
        t = tessel.tensor([float(world.rank + 1)])
        dist.all_reduce(t, group=mine)
        got[world.rank] = (t.item(), len(groups), dist.get_process_group_ranks(mine))
        with pytest.raises(ValueError, match="must be divisible by 'group_size=3'"):
            dist.new_subgroups(3)
        # subgroups of a subgroup (torch's group=): the odd / even ranks, each cut in singletons, over that
        # parent only; the parent's rank order decides the cut
        parent = dist.split_group(split_ranks=[[0, 2], [1, 3]])
        solo, pieces = dist.new_subgroups(1, group=parent)
        s = tessel.tensor([float(world.rank + 1)])
        dist.all_reduce(s, group=solo)
        in_pairs, _ = dist.new_subgroups(2, group=parent)
        p = tessel.tensor([float(world.rank + 1)])
        dist.all_reduce(p, group=in_pairs)
        got[world.rank] += (s.item(), len(pieces), dist.get_process_group_ranks(solo), p.item())
        net = Net()
        from tessel.distributed.fsdp import OffloadPolicy, UnshardHandle
        fully_shard(net, offload_policy=OffloadPolicy())
        handle = net.unshard(async_op=True)
        assert isinstance(handle, UnshardHandle)
        handle.wait()
        net.reshard()
        dist.destroy_process_group()

    tessel.run_ranks(4, run)
    assert got == {0: (3.0, 2, [0, 1], 1.0, 2, [0], 4.0), 1: (3.0, 2, [0, 1], 2.0, 2, [1], 6.0),
                   2: (7.0, 2, [2, 3], 3.0, 2, [2], 4.0), 3: (7.0, 2, [2, 3], 4.0, 2, [3], 6.0)}


def test_dcp_saves_and_loads_stateful_objects_as_the_dcp_tutorials_app_state(tmp_path):
    # torch's DCP tutorial: an AppState(Stateful) wrapping get_state_dict / set_state_dict, saved and loaded
    # as {"app": AppState(...)}; a plain module and an optimizer are Stateful too.
    from tessel.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from tessel.distributed.checkpoint.stateful import Stateful

    class AppState(Stateful):
        def __init__(self, model, optimizer):
            self.model, self.optimizer = model, optimizer

        def state_dict(self):
            model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
            return {"model": model_sd, "optim": optim_sd}

        def load_state_dict(self, sd):
            set_state_dict(self.model, self.optimizer, model_state_dict=sd["model"], optim_state_dict=sd["optim"])

    x = tessel.from_numpy(np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32))

    def steps(net, opt, n):
        return _train_squares(net, opt, x, n)

    tessel.manual_seed(0)
    net = Net()
    opt = tessel.optim.AdamW(net.parameters(), lr=0.05)
    steps(net, opt, 2)
    dcp.save({"app": AppState(net, opt), "epoch": 3}, checkpoint_id=str(tmp_path / "app"))
    dcp.save({"model": net}, checkpoint_id=str(tmp_path / "module"))  # a module is Stateful itself
    saved_head = net.head.weight.detach().numpy().copy()
    expected = steps(net, opt, 2)

    tessel.manual_seed(1)
    fresh = Net()
    fresh_opt = tessel.optim.AdamW(fresh.parameters(), lr=0.05)
    state = {"app": AppState(fresh, fresh_opt), "epoch": 0}
    dcp.load(state, checkpoint_id=str(tmp_path / "app"))
    assert state["epoch"] == 3 and isinstance(state["app"], AppState)
    assert steps(fresh, fresh_opt, 2) == expected

    tessel.manual_seed(2)
    other = Net()
    dcp.load({"model": other}, checkpoint_id=str(tmp_path / "module"))
    np.testing.assert_array_equal(other.head.weight.detach().numpy(), saved_head)


def test_functional_broadcast_src_is_a_rank_within_the_group_as_torchs():
    """funcol.broadcast(t, 1, mesh["dp"]) on a (2, 2) mesh: each dp group ([0, 2] and [1, 3]) gets its own second
    rank's tensor (torch passes src to ProcessGroup::broadcast as the root within the group). tessel read src as a
    global rank: ranks 1 and 3 got rank 1's tensor and ranks 0 and 2 raised."""
    import tessel.distributed._functional_collectives as funcol
    got = {}

    def run(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        got[world.rank] = funcol.wait_tensor(funcol.broadcast(tessel.tensor([float(world.rank)]), 1, mesh["dp"]))
        dist.destroy_process_group()

    tessel.run_ranks(4, run)
    assert {r: t.tolist() for r, t in got.items()} == {0: [2.0], 1: [3.0], 2: [2.0], 3: [3.0]}


def test_functional_collectives_return_new_tensors_over_meshes_and_groups():
    import tessel.distributed._functional_collectives as funcol
    got = {}

    def run(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        x = tessel.tensor([[1.0, 2.0], [3.0, 4.0]]) * (world.rank + 1)
        got[world.rank] = [funcol.all_reduce(x, "avg", mesh).tolist(),
                           funcol.all_reduce(x, dist.ReduceOp.MAX.name, (mesh, 0)).tolist(),
                           funcol.all_gather_tensor(x, 1, mesh.get_group()).tolist(),
                           funcol.reduce_scatter_tensor(x, "sum", 0, mesh).tolist(),
                           funcol.all_to_all_single(x, None, None, mesh).tolist(),
                           funcol.wait_tensor(funcol.broadcast(x, 1, mesh)).tolist(),
                           x.tolist()]
        with pytest.raises(ValueError, match="Unrecognized reduce_op: mean"):  # (also a RuntimeError, as torch's)
            funcol.all_reduce(x, "mean", mesh)
        dist.destroy_process_group()

    tessel.run_ranks(2, run)
    x0, x1 = [[1.0, 2.0], [3.0, 4.0]], [[2.0, 4.0], [6.0, 8.0]]
    for rank, x in ((0, x0), (1, x1)):
        assert got[rank][0] == [[1.5, 3.0], [4.5, 6.0]] and got[rank][1] == x1
        assert got[rank][2] == [[1.0, 2.0, 2.0, 4.0], [3.0, 4.0, 6.0, 8.0]]
        assert got[rank][3] == ([[3.0, 6.0]] if rank == 0 else [[9.0, 12.0]])
        assert got[rank][4] == ([[1.0, 2.0], [2.0, 4.0]] if rank == 0 else [[3.0, 4.0], [6.0, 8.0]])
        assert got[rank][5] == x1 and got[rank][6] == x  # the input is left as it was


def test_implicit_replication_takes_plain_tensors_as_replicate_and_sdpa_kernel_accepts_backends():
    from tessel.distributed.tensor.experimental import implicit_replication
    from tessel.nn.attention import SDPBackend, sdpa_kernel
    got = {}

    def run(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        full = tessel.arange(8).float().reshape(4, 2)
        d = distribute_tensor(full, mesh, [Shard(0)])
        bias = tessel.tensor([10.0, 20.0])
        with pytest.raises(ValueError, match="got mixed DTensor and dense tensor inputs"):
            d + bias  # a plain tensor next to a DTensor: an error outside the region
        with implicit_replication():
            out = d + bias
        got[world.rank] = out.full_tensor().tolist()
        with pytest.raises(ValueError, match="got mixed DTensor and dense tensor inputs"):
            d + bias  # the region ended
        dist.destroy_process_group()

    tessel.run_ranks(2, run)
    want = (np.arange(8.0).reshape(4, 2) + [10.0, 20.0]).tolist()
    assert got == {0: want, 1: want}
    q = tessel.randn(1, 2, 4, 8)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]):
        inside = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    np.testing.assert_array_equal(inside.numpy(), F.scaled_dot_product_attention(q, q, q, is_causal=True).numpy())
    with pytest.raises(AssertionError, match="SDPBackend"):
        with sdpa_kernel(["flash"]):
            pass


def test_clip_grad_norm_on_a_2d_mesh_and_across_meshes_in_rank_threads_equals_one_rank():
    # A 2-D mesh's flattened group is per rank thread (a cache shared by the threads handed rank 0's group
    # to all four and the all-reduce timed out), and gradients on two meshes (TP-only weights on mesh["tp"],
    # fully_shard weights on mesh["dp"]) each reduce over their own mesh: the norm and the clipped
    # gradients equal one rank's.
    from tessel.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = Block(), Block()
            self.up, self.down = nn.Linear(8, 16), nn.Linear(16, 8)

        def forward(self, x):
            return self.b(self.a(x)) + self.down(F.gelu(self.up(x)))

    x = tessel.from_numpy(np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32))
    tessel.manual_seed(0)
    ref = Two()
    ref(x).pow(2).mean().backward()
    want_norm = tessel.nn.utils.clip_grad_norm_(ref.parameters(), 0.05).item()
    want = {n: p.grad.numpy() for n, p in ref.named_parameters()}
    got = {}

    def run(world, mixed):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        tessel.manual_seed(0)
        net = Two()
        parallelize_module(net, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
        if mixed:  # a and b on mesh["dp"]; up and down on mesh["tp"] only
            fully_shard(net.a, mesh=mesh["dp"])
            fully_shard(net.b, mesh=mesh["dp"])
            rows = slice(None)  # no data parallelism over the TP weights: every rank takes the whole batch
        else:
            fully_shard(net, mesh=mesh["dp"])
            rows = slice(2 * (world.rank // 2), 2 * (world.rank // 2) + 2)
        net(x[rows]).pow(2).mean().backward()
        # two meshes either way: fully_shard(net, mesh["dp"]) puts the TP weights on dp x tp and the plain ones
        # on mesh["dp"] (torch's layout)
        meshes = {str(p.device_mesh) for p in net.parameters() if p.is_distributed}
        assert len(meshes) == 2, meshes
        norm = tessel.nn.utils.clip_grad_norm_(net.parameters(), 0.05)
        got[(mixed, world.rank)] = (norm.item() if not norm.is_distributed else norm.full_tensor().item(),
                                    {n: (p.grad.full_tensor() if p.grad.is_distributed else p.grad).numpy()
                                     for n, p in net.named_parameters()})
        dist.destroy_process_group()

    for mixed in (False, True):
        tessel.run_ranks(4, lambda world: run(world, mixed))
        for rank in range(4):
            norm, grads = got[(mixed, rank)]
            assert norm == pytest.approx(want_norm, rel=1e-5), (mixed, rank)
            for n, g in want.items():
                np.testing.assert_allclose(grads[n], g, rtol=1e-4, atol=1e-7, err_msg="%s %s" % (mixed, n))


@pytest.mark.parametrize("backend", [None, "gloo"])
def test_new_group_with_local_synchronization_needs_only_its_members(backend):
    # torch's use_local_synchronization=True: ranks 2 and 3 never call new_group for [0, 1] (rank 3 may, and
    # gets NON_GROUP_MEMBER at once); two such groups over the same ranks pair up call by call; the default
    # group's own new_group sequence is untouched, so a later every-rank new_group still agrees
    got = {}

    def rank_fn(world):
        dist.init_process_group(*([backend] if backend else []))
        r = dist.get_rank()
        out = []
        if r in (0, 1):
            groups = [dist.new_group([1, 0], use_local_synchronization=True),
                      dist.new_group([0, 1], use_local_synchronization=True)]
            values = [1.0, 10.0]
        else:
            if r == 3:
                assert dist.new_group([0, 1], use_local_synchronization=True) is dist.GroupMember.NON_GROUP_MEMBER
            groups, values = [dist.new_group([2, 3], use_local_synchronization=True)], [100.0]
        for g, v in zip(groups, values):
            x = tessel.tensor([v * (r + 1)])
            dist.all_reduce(x, group=g)
            out.append((dist.get_rank(g), dist.get_world_size(g), x.item()))
        every = dist.new_group([0, 2])
        if r in (0, 2):
            y = tessel.tensor([1.0])
            dist.all_reduce(y, group=every)
            out.append(y.item())
        y = tessel.tensor([1.0])
        dist.all_reduce(y)
        out.append(y.item())
        got[r] = out
        dist.destroy_process_group()

    tessel.run_ranks(4, rank_fn)
    assert got == {0: [(0, 2, 3.0), (0, 2, 30.0), 2.0, 4.0], 1: [(1, 2, 3.0), (1, 2, 30.0), 4.0],
                   2: [(0, 2, 700.0), 2.0, 4.0], 3: [(1, 2, 700.0), 4.0]}
