"""Checkpoints in torch's DCP format (distributed/checkpoint/_torch_format.py, _torch_zip.py).

tests/data/torch_dcp/ was written by torch 2.15's dcp.save from 2 ranks (tests/data/make_torch_dcp.py): tessel's
dcp.load reads it into a fully_shard model and AdamW at 1, 2 and 3 ranks (the 3-rank pieces straddle torch's
chunks) and every value equals make_torch_dcp.py's formula. The other way: dcp_to_torch_dcp writes tessel's
checkpoint in torch's format (torch 2.15's dcp.load read it at 1, 2 and 3 ranks when this was written; here the
files are checked for torch's names, archives and alignment, and tessel reads them back at another world size),
and dcp_to_torch_save and tessel.save write torch.save's zip format."""
import io
import os
import pickle
import pickletools
import sys
import zipfile

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.distributed.checkpoint as dcp
from tessel.distributed.checkpoint import CheckpointException
import tessel.nn as nn
from tessel.distributed.checkpoint.format_utils import dcp_to_torch_dcp, dcp_to_torch_save
from tessel.distributed.checkpoint.metadata import BytesStorageMetadata, TensorStorageMetadata
from tessel.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from tessel.distributed.fsdp import fully_shard
from tessel.distributed.tensor import distribute_tensor
from dcp_testing import dotted, raises_on_ranks

TORCH_DCP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "torch_dcp")
SHAPES = [(6, 4), (6,), (3, 6), (3,)]
FQNS = ["0.weight", "0.bias", "2.weight", "2.bias"]


def formula(i, shape, scale=None):
    n = int(np.prod(shape))
    if scale is None:  # parameter i
        return (np.arange(n, dtype=np.float32) / 10 + i).reshape(shape)
    return (np.arange(n, dtype=np.float32) / scale).reshape(shape)


def sharded_model_and_state(lr=0.5):
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))
    fully_shard(model[0])
    fully_shard(model)
    opt = tessel.optim.AdamW(model.parameters(), lr=lr)
    model(tessel.ones(2, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
    msd, osd = get_state_dict(model, opt)
    extra = {"epoch": 0, "name": "", "bf": tessel.zeros(5, dtype=tessel.bfloat16),
             "ids": tessel.zeros(7, dtype=tessel.int64)}
    return model, opt, {"model": msd, "optim": osd, "extra": extra}


def full(t):
    return (t.full_tensor() if t.is_distributed else t).detach().numpy()


def test_read_metadata_describes_the_checkpoint_torch_wrote():
    md = dcp.FileSystemReader(TORCH_DCP).read_metadata()
    w = md.state_dict_metadata["model.2.weight"]
    assert isinstance(w, TensorStorageMetadata) and w.size == (3, 6) and w.properties.dtype == tessel.float32
    assert [(tuple(c.offsets), tuple(c.sizes)) for c in w.chunks] == [((0, 0), (2, 6)), ((2, 0), (1, 6))]
    assert md.state_dict_metadata["extra.bf"].properties.dtype == tessel.bfloat16
    assert isinstance(md.state_dict_metadata["optim.param_groups.0.lr"], BytesStorageMetadata)
    assert md.planner_data["optim.param_groups.0.lr"] == ("optim", "param_groups", 0, "lr")
    # a complex64 entry is described (it made the whole checkpoint unreadable); asked for, it raises by name
    assert md.state_dict_metadata["extra.rope"].properties.dtype == tessel.complex64
    with pytest.raises(CheckpointException, match="'extra.rope' is a tessel.complex64 tensor"):
        dcp.load({"extra": {"rope": tessel.zeros(3, dtype=tessel.complex64)}}, checkpoint_id=TORCH_DCP)


@pytest.mark.parametrize("world", [1, 2, 3])
def test_dcp_load_reads_torchs_checkpoint_into_any_world_size(world):
    def rank_fn(w):
        dist.init_process_group()
        model, opt, sd = sharded_model_and_state()
        sd["extra"].update(raw=b"", blob=io.BytesIO())
        result = dcp.state_dict_loader._load(sd, checkpoint_id=TORCH_DCP)  # (load's report; dcp.load returns None)
        assert result["missing_keys"] == [] and result["unexpected_keys"] == ["extra.rope"]  # complex64: left out
        set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        for i, (fqn, shape) in enumerate(zip(FQNS, SHAPES)):
            np.testing.assert_array_equal(full(model.state_dict()[fqn]), formula(i, shape), err_msg=fqn)
        state = get_state_dict(model, opt)[1]["state"]
        for fqn, shape in zip(FQNS, SHAPES):
            np.testing.assert_array_equal(full(state[fqn]["exp_avg"]), formula(0, shape, 100), err_msg=fqn)
            np.testing.assert_array_equal(full(state[fqn]["exp_avg_sq"]), formula(0, shape, 1000), err_msg=fqn)
            assert float(state[fqn]["step"]) == 1.0
        assert opt.param_groups[0]["lr"] == 0.25 and opt.param_groups[0]["betas"] == (0.9, 0.999)
        extra = sd["extra"]
        assert extra["epoch"] == 3 and extra["name"] == "run"
        assert extra["bf"].dtype == tessel.bfloat16 and extra["bf"].float().tolist() == [0, 0.25, 0.5, 0.75, 1.0]
        assert extra["ids"].tolist() == [0, 3, 6, 9, 12, 15, 18]
        assert extra["raw"] == b"raw\x00bytes" and extra["blob"].getvalue() == b"hello"  # (they were refused)

    tessel.run_ranks(world, rank_fn)


def test_mismatches_raise_on_every_rank_with_the_key():
    def rank_fn(w):
        dist.init_process_group()
        # torch's errors: ValueError "Size mismatch between saved torch.Size([6, 4]) and current: ...", RuntimeError
        # "Missing key in checkpoint state_dict: model.nope."
        with raises_on_ranks(ValueError, r"Size mismatch between saved tessel.Size\(\[6, 4\]\) and current: "
                             r"tessel.Size\(\[4, 6\]\) for model.0.weight", ranks=(0, 1)):
            dcp.load({"model": {"0.weight": tessel.zeros(4, 6)}}, checkpoint_id=TORCH_DCP)
        with raises_on_ranks(RuntimeError, r"^Missing key in checkpoint state_dict: model.nope.$", ranks=(0, 1)):
            dcp.load({"model": {"nope": tessel.zeros(2)}}, checkpoint_id=TORCH_DCP)
        partial = {"model": {"nope": tessel.zeros(2), "0.bias": tessel.zeros(6)}}
        result = dcp.state_dict_loader._load(partial, checkpoint_id=TORCH_DCP, strict=False)
        assert result["missing_keys"] == ["model.nope"]
        assert partial["model"]["0.bias"].tolist()[:2] == [1.0, np.float32(1.1)]
        replaced = {"extra": {"epoch": tessel.zeros(1)}}  # a value saved where the state dict holds a tensor
        dcp.load(replaced, checkpoint_id=TORCH_DCP)
        assert replaced["extra"]["epoch"] == 3  # torch: the saved value replaces the tensor

    tessel.run_ranks(2, rank_fn)


def test_a_truncated_file_is_named_on_every_rank(tmp_path):
    import shutil
    broken = tmp_path / "ck"
    shutil.copytree(TORCH_DCP, broken)
    data = (broken / "__1_0.distcp").read_bytes()
    (broken / "__1_0.distcp").write_bytes(data[:len(data) // 2])

    def rank_fn(w):
        dist.init_process_group()
        model, opt, sd = sharded_model_and_state()
        with pytest.raises(dcp.CheckpointException, match=r"__1_0.distcp ends before byte"):
            dcp.load(sd, checkpoint_id=str(broken))

    tessel.run_ranks(2, rank_fn)


def test_a_foreign_class_in_the_metadata_is_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("true",))

    (tmp_path / ".metadata").write_bytes(pickle.dumps(Evil(), protocol=2))
    with pytest.raises(pickle.UnpicklingError, match="system in .metadata is not part of torch's DCP metadata"):
        dcp.FileSystemReader(str(tmp_path)).read_metadata()


def _saved_by_tessel(path):
    def rank_fn(w):
        dist.init_process_group()
        model, opt, sd = sharded_model_and_state(lr=0.125)
        with tessel.no_grad():
            for i, p in enumerate(model.parameters()):
                full_p = tessel.from_numpy(formula(i, tuple(p.shape)))
                p.to_local().copy_(distribute_tensor(full_p, p.device_mesh, p.placements).to_local())
        sd["model"] = get_state_dict(model, opt)[0]
        sd["extra"] = {"epoch": 7, "name": "tessel", "bf": tessel.arange(5, dtype=tessel.bfloat16) / 2,
                       "ids": tessel.arange(7) * 2}
        dcp.save(sd, checkpoint_id=path)

    tessel.run_ranks(2, rank_fn)


def test_dcp_to_torch_dcp_writes_torchs_format_and_tessel_reads_it_back(tmp_path):
    ours, theirs = str(tmp_path / "tessel"), str(tmp_path / "torch")
    _saved_by_tessel(ours)
    dcp_to_torch_dcp(ours, theirs)
    assert sorted(os.listdir(theirs)) == [".metadata", "__0_0.distcp"]
    raw = open(os.path.join(theirs, ".metadata"), "rb").read()
    names = {arg for op, arg, _ in pickletools.genops(raw) if op.name == "GLOBAL"}
    assert "torch.distributed.checkpoint.metadata Metadata" in names and "torch Size" in names
    assert "torch float32" in names and "torch.distributed.checkpoint.filesystem _StorageInfo" in names
    assert not any("tessel" in n for n in names)
    md = dcp.FileSystemReader(theirs).read_metadata()
    assert sorted(k for k in md.state_dict_metadata if k.startswith("optim.param_groups.0."))[:2] == [
        "optim.param_groups.0.amsgrad", "optim.param_groups.0.betas"]  # the list entered, as torch flattens it
    blob = open(os.path.join(theirs, "__0_0.distcp"), "rb").read()
    info = md.storage_data[[k for k in md.storage_data if k.fqn == "model.2.weight"][0]]
    archive = zipfile.ZipFile(io.BytesIO(blob[info.offset:info.offset + info.length]))
    assert archive.namelist()[0] == "archive/data.pkl" and archive.read("archive/byteorder") == b"little"
    record = archive.getinfo("archive/data/0")
    data_start = record.header_offset + 30 + len(record.filename) + \
        int.from_bytes(blob[info.offset + record.header_offset + 28:info.offset + record.header_offset + 30], "little")
    assert data_start % 64 == 0  # torch aligns every record's data to 64 bytes
    np.testing.assert_array_equal(np.frombuffer(archive.read("archive/data/0"), "<f4").reshape(3, 6),
                                  formula(2, (3, 6)))

    def rank_fn(w):  # back into tessel at another world size
        dist.init_process_group()
        model, opt, sd = sharded_model_and_state()
        dcp.load(sd, checkpoint_id=theirs)
        set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        for i, (fqn, shape) in enumerate(zip(FQNS, SHAPES)):
            np.testing.assert_array_equal(full(model.state_dict()[fqn]), formula(i, shape), err_msg=fqn)
        assert opt.param_groups[0]["lr"] == 0.125 and sd["extra"]["epoch"] == 7 and sd["extra"]["name"] == "tessel"
        assert sd["extra"]["bf"].float().tolist() == [0.0, 0.5, 1.0, 1.5, 2.0]
        assert sd["extra"]["ids"].tolist() == [0, 2, 4, 6, 8, 10, 12]

    tessel.run_ranks(3, rank_fn)


def test_dcp_to_torch_save_writes_torch_saves_zip(tmp_path):
    ours, pt = str(tmp_path / "tessel"), str(tmp_path / "whole.pt")
    _saved_by_tessel(ours)
    dcp_to_torch_save(ours, pt)
    with zipfile.ZipFile(pt) as z:
        assert "archive/data.pkl" in z.namelist() and z.read("archive/version") == b"3\n"
        names = {arg for op, arg, _ in pickletools.genops(z.read("archive/data.pkl")) if op.name == "GLOBAL"}
    assert names == {"torch._utils _rebuild_tensor_v2", "collections OrderedDict", "torch FloatStorage",
                     "torch BFloat16Storage", "torch LongStorage"}  # what torch.load(weights_only=True) allows
    whole = tessel.load(pt)
    assert set(whole) == {"model", "optim", "extra"}  # nested as saved (torch's planner_data mapping)
    whole = dotted(whole)
    np.testing.assert_array_equal(whole["model.2.weight"].numpy(), formula(2, (3, 6)))
    assert whole["extra.bf"].dtype == tessel.bfloat16 and whole["extra.bf"].float().tolist() == [0, 0.5, 1, 1.5, 2]
    # keys as torch's flattening makes them (param_groups, a list of dicts, is entered)
    assert whole["extra.epoch"] == 7 and whole["optim.param_groups.0.lr"] == 0.125


def test_weights_only_false_builds_other_classes_of_a_torch_zip(tmp_path):
    from tessel._torch_zip import dumps
    path = tmp_path / "rng.pt"
    path.write_bytes(dumps({"w": tessel.ones(2), "rng": np.random.default_rng(0).bit_generator.state}))
    assert tessel.load(str(path), weights_only=False)["rng"]["bit_generator"] == "PCG64"
    path.write_bytes(dumps({"arr": np.arange(3)}))
    with pytest.raises(pickle.UnpicklingError, match="numpy"):
        tessel.load(str(path))
    assert tessel.load(str(path), weights_only=False)["arr"].tolist() == [0, 1, 2]


def test_tessel_save_writes_torch_saves_zip_and_its_older_pickles_still_load(tmp_path):
    model = nn.Sequential(nn.Linear(3, 2), nn.LayerNorm(2))
    opt = tessel.optim.AdamW(model.parameters(), lr=0.1)
    model(tessel.ones(4, 3)).sum().backward()
    opt.step()
    ck = {"model": model.state_dict(), "optim": opt.state_dict(), "step": 5,
          "bf": tessel.arange(4, dtype=tessel.bfloat16) / 8, "b": tessel.tensor([True, False]),
          "p": nn.Parameter(tessel.ones(2)), "t": tessel.arange(6.0).reshape(2, 3).t()}
    path = tmp_path / "ck.pt"
    tessel.save(ck, str(path))
    with zipfile.ZipFile(path) as z:
        names = {arg for op, arg, _ in pickletools.genops(z.read("archive/data.pkl")) if op.name == "GLOBAL"}
    # torch.load(weights_only=True) accepts exactly these (torch 2.15 loaded this file into its Linear /
    # LayerNorm / AdamW when this test was written).
    assert names == {"torch._utils _rebuild_tensor_v2", "collections OrderedDict", "torch FloatStorage",
                     "torch BFloat16Storage", "torch BoolStorage", "torch._utils _rebuild_parameter"}
    back = tessel.load(str(path))
    np.testing.assert_array_equal(back["model"]["0.weight"].numpy(), model.state_dict()["0.weight"].numpy())
    assert back["optim"]["param_groups"][0]["lr"] == 0.1 and sorted(back["optim"]["state"][0]) == [
        "exp_avg", "exp_avg_sq", "step"]
    assert back["bf"].dtype == tessel.bfloat16 and back["bf"].float().tolist() == [0, 0.125, 0.25, 0.375]
    assert back["b"].tolist() == [True, False] and back["p"].requires_grad and back["step"] == 5
    assert back["t"].tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]  # a transposed view, saved by value
    buf = io.BytesIO()
    tessel.save({"w": tessel.ones(2)}, buf)
    assert buf.getvalue()[:4] == b"PK\x03\x04" and tessel.load(io.BytesIO(buf.getvalue()))["w"].tolist() == [1, 1]
    old = tmp_path / "old.pt"  # what tessel.save wrote before: a plain pickle of numpy arrays
    old.write_bytes(pickle.dumps({"w": _Old(np.arange(3.0))}, protocol=4))
    assert tessel.load(str(old))["w"].tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(NotImplementedError, match="legacy"):
        tessel.save({}, str(tmp_path / "x.pt"), _use_new_zipfile_serialization=False)


class _Old:
    """Pickles as tessel.save's former tensors did: _serialization._rebuild(array, dtype name, requires_grad)."""

    def __init__(self, array):
        self.array = array

    def __reduce__(self):
        from tessel._serialization import _rebuild
        return _rebuild, (self.array, str(self.array.dtype), False)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
