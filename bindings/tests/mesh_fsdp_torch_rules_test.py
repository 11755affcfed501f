"""DeviceMesh and fully_shard against torch's rules on 2 rank threads, each expectation what torch 2.15 printed for
the same script on 2 gloo ranks: the root mesh's get_group / get_local_rank of a flattened dim (torchtitan's
dp_cp), _flatten returning its cached mesh, the KeyErrors of an unknown dim name, a mesh built without
mesh_dim_names (no slicing, no flattening, no 2-D fully_shard: tessel's internal axisN names stay inside), and
fully_shard's errors: containers without forward, prefetching a module that is not an FSDPModule, a
shard_placement_fn result that is not a Shard, a second fully_shard, copy.deepcopy; set_post_optim_event and
fully_shard.state; fully_shard without a process group joining the launched one (RANK, WORLD_SIZE, ... set)."""
import copy
import os
import socket
import subprocess
import sys
import textwrap

import pytest

import tessel
import tessel.distributed as dist
import tessel.nn as nn
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.fsdp import DataParallelMeshDims, fully_shard
from ranks_testing import on_ranks


def on_two_ranks(fn):
    """{rank: fn(rank)} on 2 rank threads, each in its default process group."""
    return on_ranks(2, fn)


def outcome(fn):
    """("OK", fn()) or (the exception's class name, its args), as the torch sweep printed them."""
    try:
        return "OK", fn()
    except Exception as e:  # noqa: BLE001 (the class and args are the result)
        return type(e).__name__, e.args


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x):
        return self.lin(x)


def test_the_root_mesh_gets_the_group_and_local_rank_of_a_flattened_dim():
    def run(rank):
        w = init_device_mesh("cpu", (1, 2), mesh_dim_names=("dp", "tp"))
        flat = w._flatten("dp_tp")
        return (w.get_group("dp_tp").size(), w.get_local_rank("dp_tp"), w["tp"].get_group("dp_tp").size(),
                w["tp"].get_local_rank("dp_tp"), dist.get_process_group_ranks(w.get_group("dp_tp")),
                w.get_group("dp_tp") is flat.get_group())

    # torch: 2, the rank, the same from the root's slice, ranks [0, 1], the flattened mesh's own group
    assert on_two_ranks(run) == {r: (2, r, 2, r, [0, 1], True) for r in (0, 1)}


def test_flatten_returns_the_cached_mesh_and_a_1d_mesh_under_its_own_name_itself():
    def run(rank):
        w = init_device_mesh("cpu", (1, 2), mesh_dim_names=("dp", "tp"))
        flat = w._flatten("dp_tp")
        a = init_device_mesh("cpu", (2,), mesh_dim_names=("a",))
        return (flat is w._flatten("dp_tp"), w._flatten() is flat, w["dp", "tp"]._flatten() is flat,
                a._flatten("a") is a, a._flatten("b").mesh_dim_names)

    assert on_two_ranks(run) == {r: (True, True, True, True, ("b",)) for r in (0, 1)}


def test_an_unknown_dim_name_is_torchs_key_error():
    def run(rank):
        w = init_device_mesh("cpu", (1, 2), mesh_dim_names=("dp", "tp"))
        w._flatten("dp_tp")
        return [outcome(f) for f in (lambda: w.get_local_rank("pp"), lambda: w.get_group("pp"), lambda: w["pp"],
                                     lambda: w["dp", "pp"], lambda: w["pp", "dp"], lambda: w["tp"]["dp_tp"])]

    missing = ("KeyError", ("Mesh dimension 'pp' does not exist.",
                            "Available mesh dimensions are: mesh_dim_names=('dp', 'tp')"))
    valid = "Valid mesh_dim_names are ['dp', 'tp', 'dp_tp']."
    want = [missing, missing,
            ("KeyError", ("Invalid mesh_dim_names ('pp',) specified. " + valid,)),
            ("KeyError", ("Invalid mesh_dim_names ('dp', 'pp') specified. " + valid,)),
            ("KeyError", ("Invalid mesh_dim_names ('pp', 'dp') specified. " + valid,)),
            # a slice of the root does not slice the root's flattened dims
            ("KeyError", ("Invalid mesh_dim_names ('dp_tp',) specified. Valid mesh_dim_names are ['tp'].",))]
    assert on_two_ranks(run) == {0: want, 1: want}


def test_dims_sliced_out_of_mesh_order_are_torchs_key_error():
    """mesh["tp", "dp"] on a ("dp", "tp") mesh: torch's KeyError (tessel raised its ValueError)."""
    def run(rank):
        w = init_device_mesh("cpu", (1, 2), mesh_dim_names=("dp", "tp"))
        return [outcome(f) for f in (lambda: w["tp", "dp"], lambda: w["dp", "dp"])]

    want = [("KeyError", ("Invalid mesh_dim_names ('tp', 'dp') specified. Mesh dim indices should be in ascending "
                          "order.",)),
            ("KeyError", ("Invalid mesh_dim_names ('dp', 'dp') specified. Mesh dim indices should be in ascending "
                          "order.",))]
    assert on_two_ranks(run) == {0: want, 1: want}


def test_a_mesh_without_dim_names_is_not_sliced_flattened_or_taken_by_2d_fully_shard():
    def run(rank):
        u = init_device_mesh("cpu", (1, 2))
        u1 = init_device_mesh("cpu", (2,))
        return [u.mesh_dim_names] + [outcome(f) for f in (
            lambda: u["axis1"], lambda: u._flatten(), lambda: u._flatten("x"), lambda: u.get_local_rank("axis1"),
            lambda: u.get_group("axis1"), lambda: u.get_local_rank(1),
            lambda: fully_shard(nn.Linear(4, 4), mesh=u),
            lambda: fully_shard(Net(), mesh=u1, dp_mesh_dims=DataParallelMeshDims(shard="x")),
            lambda: fully_shard(Net(), mesh=u1).lin.weight.placements)]

    got = on_two_ranks(run)
    for r in (0, 1):
        assert [repr(x) for x in got[r][-1:]] == ["('OK', (Shard(dim=0),))"]  # a 1-D one shards as torch's
        assert got[r][:-1] == [
            None,
            ("RuntimeError", ("Cannot slice a DeviceMesh without mesh_dim_names!",)),
            ("RuntimeError", ("Cannot flatten a DeviceMesh without mesh_dim_names!",)),
            ("RuntimeError", ("Cannot flatten a DeviceMesh without mesh_dim_names!",)),
            ("KeyError", ("No `mesh_dim_names` found.",)),
            ("KeyError", ("No `mesh_dim_names` found.",)),
            ("OK", r),
            ("AssertionError", ("Please init the 2D mesh for HSDP with mesh_dim_names specified",)),
            ("ValueError", ("mesh must have mesh_dim_names when dp_mesh_dims is provided",))]


def test_fully_shard_refuses_containers_without_forward():
    def run(rank):
        return [outcome(lambda: fully_shard(nn.ModuleList([nn.Linear(2, 2)]))),
                outcome(lambda: fully_shard(nn.ModuleDict({"a": nn.Linear(2, 2)})))]

    lin = "Linear(in_features=2, out_features=2, bias=True)"
    msg = "fully_shard does not support containers that do not implement forward: "
    want = [("ValueError", (msg + "ModuleList(\n  (0): %s\n)" % lin,)),
            ("ValueError", (msg + "ModuleDict(\n  (a): %s\n)" % lin,))]
    assert on_two_ranks(run) == {0: want, 1: want}


def test_fully_shard_errors_have_torchs_types_and_texts():
    def run(rank):
        m = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
        fully_shard(m[0])
        fully_shard(m)
        n = fully_shard(Net())
        return ([outcome(lambda: m.set_modules_to_forward_prefetch([m[1]])),
                 outcome(lambda: m.set_modules_to_backward_prefetch([m[1]])),
                 outcome(lambda: fully_shard(nn.Linear(2, 2), shard_placement_fn=lambda p: 1)),
                 outcome(lambda: fully_shard(n)), outcome(lambda: fully_shard([Net(), n])),
                 outcome(lambda: copy.deepcopy(n)), outcome(lambda: copy.deepcopy(m)),
                 outcome(lambda: copy.deepcopy(m[0]))], type(m[1]), repr(n))

    twice = ("Each distinct composable distributed API can only be applied to a module once. fully_shard has "
             "already been applied to the following module:\n")
    deepcopy = ("AssertionError", ("FSDP does not support deepcopy. Please use state dict for serialization.",))
    for got, cls, net in on_two_ranks(run).values():
        # torch's class is torch.nn.modules.linear.Linear, and it prints the sharded Net as FSDPNet(...)
        assert net == "Net(\n  (lin): Linear(in_features=2, out_features=2, bias=True)\n)"
        prefetch = ("ValueError", ("Expects FSDPModule but got %s: Linear(in_features=4, out_features=1, bias=True)"
                                   % cls,))
        assert got == [prefetch, prefetch, ("ValueError", ("Invalid shard_placement_fn result: 1",)),
                       ("AssertionError", (twice + net,)), ("AssertionError", (twice + net,)),
                       deepcopy, deepcopy, deepcopy]


def test_set_post_optim_event_and_fully_shard_state():
    def run(rank):
        m = fully_shard(nn.Sequential(nn.Linear(2, 2)))
        net = fully_shard(Net())
        events = (m.set_post_optim_event(None), net.set_post_optim_event(None))
        out = m(tessel.ones(1, 2))
        out.sum().backward()
        return (events, tuple(out.shape), type(fully_shard.state(net)).__name__, fully_shard.state(net.lin),
                fully_shard.state(nn.Linear(2, 2)))

    assert on_two_ranks(run) == {r: ((None, None), (1, 2), "FSDPState", None, None) for r in (0, 1)}


def test_fully_shard_without_a_process_group_joins_the_launched_one():
    # torch's _init_default_mesh: init_process_group() from RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT (set in
    # a child process only, this process's environment is left alone)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = textwrap.dedent("""
        import tessel.distributed as dist
        import tessel.nn as nn
        from tessel.distributed.fsdp import fully_shard
        m = fully_shard(nn.Linear(2, 2))
        print(dist.is_initialized(), dist.get_world_size(), m.weight.placements, tuple(m.weight.to_local().shape))
        dist.destroy_process_group()
    """)
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(tessel.__file__))))
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "True 1 (Shard(dim=0),) (2, 2)"  # torch's line


class TpNet(nn.Module):
    """Two tensor-parallel Linears and two plain parameters (an input scale and a LayerNorm)."""

    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(8, 16)
        self.scale = nn.Parameter(tessel.ones(8))
        self.w2 = nn.Linear(16, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(self.w2(self.w1(x * self.scale)))


def test_fsdp_over_tp_places_plain_parameters_on_the_dp_mesh_as_torch():
    from tessel.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    tessel.manual_seed(0)
    dense = TpNet()
    x = tessel.randn(4, 8)
    dense(x).pow(2).mean().backward()
    want_grads = {n: p.grad.numpy() for n, p in dense.named_parameters()}
    want_norm = sum((g.astype("float64") ** 2).sum() for g in want_grads.values()) ** 0.5

    def body(rank, blocks):
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        tessel.manual_seed(0)
        m = TpNet()
        parallelize_module(m, mesh["tp"], {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
        for name in blocks:  # per block first, the root last (a block without TP parameters included)
            fully_shard(getattr(m, name), mesh=mesh["dp"])
        fully_shard(m, mesh=mesh["dp"])
        layout = {n: (p.device_mesh.mesh_dim_names, tuple(repr(q) for q in p.placements))
                  for n, p in m.named_parameters()}
        m(x).pow(2).mean().backward()  # every dp rank the same batch: the averaged gradients are the dense ones
        grads = {n: (p.grad.device_mesh.mesh_dim_names, p.grad.full_tensor().numpy()) for n, p in m.named_parameters()}
        norm = float(tessel.nn.utils.clip_grad_norm_(m.parameters(), 1e9))
        specs = {k: (v.device_mesh.mesh_dim_names, tuple(v.placements)) for k, v in m.state_dict().items()}
        return layout, grads, norm, specs

    # (the norm-only block first raised "parameters on different meshes" at the root's first forward)
    for blocks in ((), ("norm",), ("w1", "norm", "w2")):
        check_layout(on_ranks(4, lambda rank: body(rank, blocks)), want_grads, want_norm)


def check_layout(got, want_grads, want_norm):
    from tessel.distributed.tensor import Replicate, Shard
    # torch 2.15's fully_shard(m, mesh=mesh["dp"]) after parallelize_module on mesh["tp"] (printed by torch)
    dp, dp_tp, strided = ("dp",), ("dp", "tp"), "_StridedShard(dim=0, sf=2)"
    want_layout = {"scale": (dp, ("Shard(dim=0)",)), "w1.weight": (dp_tp, (strided, "Shard(dim=0)")),
                   "w1.bias": (dp_tp, (strided, "Shard(dim=0)")),
                   "w2.weight": (dp_tp, ("Shard(dim=0)", "Shard(dim=1)")),
                   "w2.bias": (dp_tp, ("Shard(dim=0)", "Replicate()")), "norm.weight": (dp, ("Shard(dim=0)",)),
                   "norm.bias": (dp, ("Shard(dim=0)",))}
    for r in range(4):
        layout, grads, norm, specs = got[r]
        assert layout == want_layout, layout
        for n, (mesh_names, g) in grads.items():
            assert mesh_names == want_layout[n][0], n
            assert abs(g - want_grads[n]).max() < 1e-5, n
        # torch's clip_grad_norm_ raises on these two meshes ("must have the same mesh"); tessel sums them
        assert abs(norm - want_norm) < 1e-5 * want_norm, (norm, want_norm)
        assert specs["norm.weight"] == (dp, (Shard(0),)) and specs["w2.bias"] == (dp_tp, (Shard(0), Replicate()))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
