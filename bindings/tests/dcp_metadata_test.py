"""torch's DCP metadata from Python: FileSystemReader(path).read_metadata() lists every key of a checkpoint saved
on 2 ranks, each tensor's dtype, global size and chunks (torch.chunk's split of a Shard(0) DTensor, one chunk for
a replicated tensor), non-tensor values as BytesStorageMetadata; save_state_dict / load_state_dict (torch's
deprecated spellings) warn and round-trip; a file torch.save wrote loads into a fully_shard model through
BroadcastingTorchSaveReader (each rank keeps its shard)."""
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.distributed.checkpoint as dcp
from tessel.distributed.checkpoint.metadata import (BytesStorageMetadata, ChunkStorageMetadata, Metadata,
                                                    TensorStorageMetadata)
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.tensor import Replicate, Shard, distribute_tensor
from dcp_testing import raises_on_ranks

W = np.arange(20, dtype=np.float32).reshape(5, 4)


def save_on_two_ranks(path, deprecated=False):
    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        sd = {"model": {"w": distribute_tensor(tessel.tensor(W), mesh, [Shard(0)]),
                        "b": distribute_tensor(tessel.ones(3, dtype=tessel.float64), mesh, [Replicate()])},
              "step": 7, "name": "run-1", "rng": [1, 2, 3]}
        if deprecated:
            dcp.save_state_dict(sd, dcp.FileSystemWriter(path))
        else:
            saved = dcp.save(sd, checkpoint_id=path)  # torch's: the checkpoint's Metadata
            assert isinstance(saved, Metadata) and sorted(saved.state_dict_metadata)[:2] == ["model.b", "model.w"]

    if deprecated:  # (recorded around both ranks: a rank thread's record could catch its peer's warning)
        with pytest.warns(FutureWarning, match="`save_state_dict` is deprecated") as record:
            tessel.run_ranks(2, rank_fn)
        assert len([w for w in record if "save_state_dict" in str(w.message)]) == 2
    else:
        tessel.run_ranks(2, rank_fn)


def test_read_metadata_lists_keys_sizes_and_chunks(tmp_path):
    save_on_two_ranks(str(tmp_path))
    md = dcp.FileSystemReader(str(tmp_path)).read_metadata()
    assert isinstance(md, Metadata) and md.world_size == 2
    assert sorted(md.state_dict_metadata) == ["model.b", "model.w", "name", "rng", "step"]
    w = md.state_dict_metadata["model.w"]
    assert isinstance(w, TensorStorageMetadata) and w.properties.dtype == tessel.float32
    assert w.size == (5, 4) and isinstance(w.size, tessel.Size)
    # torch.chunk of 5 rows over 2 ranks: 3 then 2
    chunks = sorted((tuple(c.offsets), tuple(c.sizes)) for c in w.chunks)
    assert chunks == [((0, 0), (3, 4)), ((3, 0), (2, 4))]
    assert all(isinstance(c, ChunkStorageMetadata) for c in w.chunks)
    b = md.state_dict_metadata["model.b"]
    assert b.properties.dtype == tessel.float64 and b.size == (3,)
    assert [(tuple(c.offsets), tuple(c.sizes)) for c in b.chunks] == [((0,), (3,))]  # replicas saved once
    for key in ("step", "name", "rng"):
        assert isinstance(md.state_dict_metadata[key], BytesStorageMetadata)
    assert md.storage_meta.checkpoint_id == tmp_path  # torch's: a PosixPath
    with pytest.raises(FileNotFoundError):
        dcp.FileSystemReader(str(tmp_path / "nothing")).read_metadata()


def test_deprecated_save_and_load_state_dict_round_trip(tmp_path):
    save_on_two_ranks(str(tmp_path), deprecated=True)
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        sd = {"model": {"w": distribute_tensor(tessel.zeros(5, 4), mesh, [Replicate()])}, "step": 0}
        dcp.load_state_dict(sd, dcp.FileSystemReader(str(tmp_path)))
        got[world.rank] = (sd["model"]["w"].full_tensor().numpy(), sd["step"])

    with pytest.warns(FutureWarning, match="`load_state_dict` is deprecated") as record:
        tessel.run_ranks(2, rank_fn)
    assert len([w for w in record if "load_state_dict" in str(w.message)]) == 2
    for r in (0, 1):
        np.testing.assert_array_equal(got[r][0], W)
        assert got[r][1] == 7


def test_broadcasting_torch_save_reader_loads_a_torch_file_into_shards():
    import os
    import tessel.nn as nn
    from tessel.distributed.checkpoint.format_utils import BroadcastingTorchSaveReader, DynamicMetaLoadPlanner
    from tessel.distributed.fsdp import fully_shard
    # written by torch 2.15 (tests/data/make_torch_saved.py): {"model": {weight: arange(6).reshape(2, 3) / 10,
    # bias: [0.5, -0.5]}, "step": 7, ...}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "torch_saved.pt")
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        model = nn.Linear(3, 2)
        fully_shard(model, mesh=init_device_mesh("cpu", (2,)))
        result = dcp.state_dict_loader._load({"model": model}, storage_reader=BroadcastingTorchSaveReader(),
                                             planner=DynamicMetaLoadPlanner(), checkpoint_id=path)
        got[world.rank] = (model.weight.to_local().numpy().copy(), model.weight.full_tensor().numpy(),
                           model.bias.full_tensor().numpy(), result["missing_keys"])
        with raises_on_ranks(RuntimeError, "Non-tensor value identified at step", ranks=(0, 1)):
            dcp.load({"step": 0}, storage_reader=BroadcastingTorchSaveReader(), checkpoint_id=path)
        with raises_on_ranks(RuntimeError, "'model.weight' has shape \\(2, 3\\)", ranks=(0, 1)):
            dcp.load({"model": {"weight": tessel.zeros(3, 2)}}, storage_reader=BroadcastingTorchSaveReader(),
                     checkpoint_id=path)
        # The coordinator cannot read the file: it is the failing rank, and rank 1 raises with it at once.
        with raises_on_ranks(FileNotFoundError, "no_such.pt", ranks=(0,)):
            dcp.load({"model": model}, storage_reader=BroadcastingTorchSaveReader(),
                     checkpoint_id=path + ".no_such.pt")

    tessel.run_ranks(2, rank_fn)
    weight = np.arange(6, dtype=np.float32).reshape(2, 3) / 10
    for r in (0, 1):
        local, full, bias, missing = got[r]
        np.testing.assert_allclose(local, weight[r:r + 1])  # this rank's row only
        np.testing.assert_allclose(full, weight)
        np.testing.assert_allclose(bias, [0.5, -0.5])
        assert missing == []


def test_tensors_in_a_list_and_complex_tensors_load_in_place_with_torchs_keys(tmp_path):
    # torch's flattening enters a list holding tensors ("params.0", "params.1"); load fills the model's own
    # tensors (a pickled list was replaced by new tensors: the model kept its old weights, silently)
    lin = tessel.nn.Linear(3, 2)
    with tessel.no_grad():
        lin.weight.copy_(tessel.tensor(W[:2, :3])), lin.bias.copy_(tessel.tensor([5.0, 6.0]))
    freqs = tessel.polar(tessel.ones(4), tessel.arange(4.0))  # complex64, a rotary table
    path = str(tmp_path / "lists")
    dcp.save({"params": [lin.weight, lin.bias], "rope": freqs.clone(), "step": 3}, checkpoint_id=path, no_dist=True)
    keys = sorted(dcp.FileSystemReader(path).read_metadata().state_dict_metadata)
    assert keys == ["params.0", "params.1", "rope", "step"]
    with tessel.no_grad():
        lin.weight.zero_(), lin.bias.zero_()
    live = tessel.zeros(4, dtype=tessel.complex64)
    sd = {"params": [lin.weight, lin.bias], "rope": live, "step": 0}
    dcp.load(sd, checkpoint_id=path, no_dist=True)
    assert sd["params"][0] is lin.weight and sd["rope"] is live and sd["step"] == 3
    np.testing.assert_array_equal(lin.weight.detach().numpy(), W[:2, :3])
    assert lin.bias.tolist() == [5.0, 6.0] and live.tolist() == freqs.tolist()


def test_the_later_of_two_formats_in_one_directory_is_the_checkpoint(tmp_path):
    import os
    from tessel.distributed.checkpoint.format_utils import dcp_to_torch_dcp
    old, path = str(tmp_path / "old"), str(tmp_path / "both")
    dcp.save({"w": tessel.full((2,), 1.0)}, checkpoint_id=old, no_dist=True)
    dcp.save({"w": tessel.full((2,), 2.0)}, checkpoint_id=path, no_dist=True)
    dcp_to_torch_dcp(old, path)  # torch's format written into the directory after tessel's: it is the newer save
    back = {"w": tessel.zeros(2)}
    dcp.load(back, checkpoint_id=path, no_dist=True)
    assert back["w"].tolist() == [1.0, 1.0]
    os.utime(os.path.join(path, "metadata.json"))  # tessel's written last: it wins
    dcp.load(back, checkpoint_id=path, no_dist=True)
    assert back["w"].tolist() == [2.0, 2.0]


def test_another_dtype_is_cast_on_load_and_bools_come_back_bools_as_torch(tmp_path):
    def run(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        path = str(tmp_path / "cast")
        w = distribute_tensor(tessel.tensor(W), mesh, [Shard(0)])
        dcp.save({"w": w, "v": tessel.tensor([0.5, 1.5, 2.5]), "flag": True, "off": False}, checkpoint_id=path)
        back = {"w": distribute_tensor(tessel.zeros(5, 4, dtype=tessel.bfloat16), mesh, [Shard(0)]),
                "v": tessel.zeros(3, dtype=tessel.int64), "flag": None, "off": 0}
        dcp.load(back, checkpoint_id=path)
        return (back["w"].dtype, back["w"].full_tensor().float().numpy(), back["v"].tolist(), back["flag"],
                back["off"])

    out = {}
    tessel.run_ranks(2, lambda world: out.__setitem__(world.rank, run(world)))
    for dtype, full, v, flag, off in out.values():
        assert dtype == tessel.bfloat16 and v == [0, 1, 2] and flag is True and off is False
        np.testing.assert_array_equal(full, tessel.tensor(W).to(tessel.bfloat16).float().numpy())


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
