"""tessel.save / tessel.load (and pickle) of DTensors, as torch.save / torch.load of them: each rank saves its pieces
with their mesh and placements, and loads them back as the same DTensors on the rank that saved them, so a per-rank
`save(model.state_dict())` of a fully_shard model (and its optimizer's state) restores training. tessel refused
with a TypeError. Beyond torch, loading a rank's file on a rank that holds another piece is a ValueError instead
of a DTensor over the wrong rows (tessel/distributed/tensor/_pickle.py)."""
import pickle

import pytest

import tessel
import tessel.distributed as dist
from tessel.distributed.fsdp import fully_shard
from tessel.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
from tessel.distributed.tensor import DTensor


def _mesh():
    dist.init_process_group()
    return tessel.distributed.device_mesh.init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))


def test_dtensors_round_trip_per_rank_with_their_placements_shapes_and_flags(tmp_path):
    def rank_fn(world):
        mesh = _mesh()
        r = dist.get_rank()
        full = tessel.arange(10.0).reshape(5, 2)
        uneven = distribute_tensor(full, mesh, [Shard(0)]).requires_grad_()  # rows 3 / 2
        partial = DTensor.from_local(tessel.full((2,), float(r + 1)), mesh, [Partial()])
        rep = distribute_tensor(tessel.tensor([1.5, -2.0]), mesh, [Replicate()])
        path = tmp_path / ("rank%d.pt" % r)
        tessel.save({"uneven": uneven, "partial": partial, "rep": rep, "step": 7}, path)
        back = tessel.load(path)
        assert back["step"] == 7
        got = back["uneven"]
        assert isinstance(got, DTensor) and got.placements == (Shard(0),) and got.shape == (5, 2)
        assert got.requires_grad and got.is_leaf
        assert got.to_local().tolist() == ([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]] if r == 0 else [[6.0, 7.0], [8.0, 9.0]])
        assert got.full_tensor().tolist() == full.tolist()
        assert back["partial"].placements == (Partial(),) and back["partial"].full_tensor().tolist() == [3.0, 3.0]
        assert back["rep"].to_local().tolist() == [1.5, -2.0] and not back["rep"].requires_grad
        again = pickle.loads(pickle.dumps(uneven))  # plain pickle too
        assert again.placements == (Shard(0),) and again.to_local().tolist() == uneven.to_local().tolist()
    tessel.run_ranks(2, rank_fn)


def test_a_fully_shard_state_dict_saved_per_rank_restores_model_and_optimizer(tmp_path):
    def rank_fn(world):
        mesh = _mesh()
        r = dist.get_rank()
        tessel.manual_seed(0)
        model = tessel.nn.Sequential(tessel.nn.Linear(4, 6), tessel.nn.GELU(), tessel.nn.Linear(6, 3))
        fully_shard(model, mesh=mesh)
        opt = tessel.optim.AdamW(model.parameters(), lr=0.05)
        x = tessel.arange(8.0).reshape(2, 4) / 8

        def step():
            opt.zero_grad()
            model(x).square().sum().backward()
            opt.step()
        step()
        path = tmp_path / ("ckpt%d.pt" % r)
        tessel.save({"model": model.state_dict(), "optim": opt.state_dict()}, path)
        saved = {k: v.full_tensor().tolist() for k, v in model.state_dict().items()}
        step()
        after_two = {k: v.full_tensor().tolist() for k, v in model.state_dict().items()}
        ck = tessel.load(path)
        assert {k: v.placements for k, v in ck["model"].items()} == {k: (Shard(0),) for k in saved}
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optim"])
        assert {k: v.full_tensor().tolist() for k, v in model.state_dict().items()} == saved
        step()  # the restored model and optimizer take the same second step
        assert {k: v.full_tensor().tolist() for k, v in model.state_dict().items()} == after_two
    tessel.run_ranks(2, rank_fn)


def test_another_ranks_shard_is_refused_and_a_replicated_file_loads_anywhere(tmp_path):
    def rank_fn(world):
        mesh = _mesh()
        r = dist.get_rank()
        tessel.save(distribute_tensor(tessel.arange(4.0), mesh, [Shard(0)]), tmp_path / ("s%d.pt" % r))
        rep = distribute_tensor(tessel.arange(3.0), mesh, [Replicate()])  # (a collective: on every rank)
        if r == 0:
            tessel.save(rep, tmp_path / "rep.pt")
        dist.barrier()
        with pytest.raises(ValueError, match=r"piece of mesh coordinate \[%d\], but rank %d is at \[%d\].*load each "
                                             r"rank's file on the rank that saved it" % (1 - r, r, r)):
            tessel.load(tmp_path / ("s%d.pt" % (1 - r)))
        assert tessel.load(tmp_path / "rep.pt").to_local().tolist() == [0.0, 1.0, 2.0]
    tessel.run_ranks(2, rank_fn)
