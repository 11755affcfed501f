"""torch.save / torch.load files crossing between torch and tessel, found by a side-by-side sweep against torch
2.15: tensors over one storage share it after loading (views, tied weights: they came back as copies, and tessel
wrote each view's bytes again), tessel's files name torch's classes (torch.load could not read a dtype, device
or Size tessel saved), a 0-d bfloat16 tensor and complex tensors cross, torch's weights_only allowlist
(Counter, set, complex, bytearray, dtypes, devices, Parameters with attributes), a file that is not a zip never
reaches pickle.load under weights_only (it ran the code the file named), map_location as torch's, and
dcp_to_torch_save of a checkpoint torch wrote. Expected values: tests/data/torch_saved.pt and torch_dcp (written
by torch 2.15: tests/data/make_torch_*.py) and torch's rules in torch/serialization.py."""
import collections
import os
import pickle
import pickletools
import sys
import zipfile

import numpy as np
import pytest

import tessel
import tessel.nn as nn
from dcp_testing import dotted

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def _globals_in(path):
    """The (module, name) globals a torch.save file's pickle names."""
    with zipfile.ZipFile(path) as z:
        pkl = z.read([n for n in z.namelist() if n.endswith("data.pkl")][0])
    return {tuple(arg.split(" ", 1)) for op, arg, _ in pickletools.genops(pkl) if op.name == "GLOBAL"}


def test_a_torch_files_views_and_tied_tensors_share_their_storage_after_loading():
    d = tessel.load(os.path.join(DATA, "torch_saved.pt"))
    d["strided"].fill_(-1.0)  # base[2:8:2] in torch's file: writes through to "whole" and "tied"
    assert d["whole"].tolist() == [0.0, 1.0, -1.0, 3.0, -1.0, 5.0, -1.0, 7.0, 8.0, 9.0]
    assert d["tied"].data_ptr() == d["whole"].data_ptr() and d["strided"].stride() == (2,)
    assert d["whole"].is_leaf and d["whole"]._base is None  # leaves over the storage, as torch's set_


def test_tessel_writes_each_storage_once_and_keeps_views_sharing(tmp_path):
    big = tessel.arange(4096, dtype=tessel.float32)
    base = tessel.arange(12, dtype=tessel.float32).reshape(3, 4)
    path = tmp_path / "views.pt"
    tessel.save({"big": big, "head": big[:4], "base": base, "row": base[1], "t": base.t()}, str(path))
    assert os.path.getsize(path) < 4096 * 4 + 48 * 4 + 4096  # one copy of each storage (was one per view)
    d = tessel.load(str(path))
    d["row"].fill_(-1.0)
    assert d["base"][1].tolist() == [-1.0] * 4 and d["t"].stride() == (1, 4) and not d["t"].is_contiguous()
    assert d["head"].data_ptr() == d["big"].data_ptr()
    with pytest.raises(RuntimeError, match="view the same data as different types"):  # torch's refusal
        tessel.save({"a": base, "b": base.view(tessel.int32)}, str(tmp_path / "types.pt"))


def test_torch_classes_cross_both_ways_under_weights_only(tmp_path):
    d = tessel.load(os.path.join(DATA, "torch_saved.pt"), weights_only=True)
    meta = d["meta"]
    assert meta["dtype"] is tessel.bfloat16 and meta["device"] == tessel.device("cpu")
    assert isinstance(meta["shape"], tessel.Size) and tuple(meta["shape"]) == (2, 3)
    assert meta["counter"] == collections.Counter(a=2) and meta["set"] == {1, 2} and meta["complex"] == 1 + 2j
    assert meta["bytes"] == bytearray(b"ab")
    assert isinstance(d["hf_param"], nn.Parameter) and d["hf_param"]._is_hf_initialized is True
    assert isinstance(d["param"], nn.Parameter) and d["param"].requires_grad
    assert d["bf16_0d"].dtype == tessel.bfloat16 and d["bf16_0d"].shape == () and d["bf16_0d"].item() == 1.5
    cplx = d["cplx"]
    assert cplx.dtype == tessel.complex64 and tessel.view_as_real(cplx).tolist() == [[1.0, 2.0], [3.0, -4.0]]
    out = tmp_path / "back.pt"  # and tessel's own file of the same values names torch's classes
    h = tessel.ones(2, requires_grad=True) * 2  # a non-leaf that requires grad: torch keeps the flag
    tessel.save({"meta": meta, "cplx": cplx, "param": d["param"], "bf16_0d": d["bf16_0d"], "h": h}, str(out))
    names = _globals_in(out)
    assert {("torch", "bfloat16"), ("torch", "device"), ("torch", "Size"), ("torch._utils", "_rebuild_parameter"),
            ("torch", "ComplexFloatStorage")} <= names
    assert not any(module.startswith("tessel") for module, _ in names)
    back = tessel.load(str(out), weights_only=True)
    assert back["meta"]["dtype"] is tessel.bfloat16 and tuple(back["meta"]["shape"]) == (2, 3)
    assert isinstance(back["param"], nn.Parameter) and back["h"].requires_grad and back["h"].is_leaf
    assert tessel.view_as_real(back["cplx"]).tolist() == [[1.0, 2.0], [3.0, -4.0]]
    assert back["bf16_0d"].item() == 1.5


def test_a_file_that_is_not_a_zip_never_runs_code_under_weights_only(tmp_path):
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, ("touch %s" % marker,))
    path = tmp_path / "evil.pt"
    path.write_bytes(pickle.dumps({"x": Payload()}, protocol=4))
    for kwargs in ({}, {"weights_only": True}):
        with pytest.raises(pickle.UnpicklingError, match="Weights only load failed: unsupported global posix.system"):
            tessel.load(str(path), **kwargs)
        assert not marker.exists()
    old = tmp_path / "old.pt"  # tessel.save's own format before it wrote torch's: still loads
    old.write_bytes(pickle.dumps({"w": tessel.ones(2), "n": 3}, protocol=2))
    assert tessel.load(str(old))["w"].tolist() == [1.0, 1.0]


def test_map_location_as_torchs_on_a_machine_without_cuda():
    path = os.path.join(DATA, "torch_saved.pt")
    with pytest.raises(RuntimeError, match="Attempting to deserialize object on a CUDA device"):
        tessel.load(path, map_location="cuda")
    with pytest.raises(RuntimeError, match="Attempting to deserialize object on a CUDA device"):
        tessel.load(path, map_location={"cpu": "cuda:0"})
    seen = []

    def keep(storage, location):  # torch calls it once per storage with where it was saved
        seen.append(location)
        return storage
    d = tessel.load(path, map_location=keep)
    assert d["step"] == 7 and seen and set(seen) == {"cpu"}
    assert len(seen) == len(_storage_keys(path))
    assert tessel.load(path, map_location=tessel.device("cpu"))["name"] == "ckpt"


def _storage_keys(path):
    with zipfile.ZipFile(path) as z:
        return [n for n in z.namelist() if "/data/" in n]


def test_dcp_to_torch_save_reads_a_checkpoint_torch_wrote_and_leaves_no_file_when_it_fails(tmp_path):
    # torch_dcp's values by make_torch_dcp.py's formulas; it raised KeyError (metadata.json) and left 0 bytes
    from tessel.distributed.checkpoint.format_utils import dcp_to_torch_save
    out = tmp_path / "whole.pt"
    dcp_to_torch_save(os.path.join(DATA, "torch_dcp"), str(out))
    whole = tessel.load(str(out))
    assert list(whole) == ["model", "optim", "extra"]  # nested as saved, as torch's
    whole = dotted(whole)
    shapes = {"model.0.weight": (6, 4), "model.0.bias": (6,), "model.2.weight": (3, 6), "model.2.bias": (3,)}
    for i, (key, shape) in enumerate(shapes.items()):
        want = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) / 10 + i
        np.testing.assert_allclose(whole[key].numpy(), want, rtol=1e-6)
        np.testing.assert_allclose(whole["optim.state.%s.exp_avg" % key[6:]].numpy(), want * 0 +
                                   np.arange(want.size, dtype=np.float32).reshape(shape) / 100, rtol=1e-6)
    assert whole["optim.param_groups.0.lr"] == 0.25 and whole["extra.epoch"] == 3 and whole["extra.name"] == "run"
    assert whole["extra.bf"].dtype == tessel.bfloat16 and whole["extra.bf"].float().tolist() == [0, .25, .5, .75, 1]
    assert whole["extra.ids"].tolist() == [0, 3, 6, 9, 12, 15, 18] and whole["extra.raw"] == b"raw\x00bytes"
    rope = tessel.view_as_real(whole["extra.rope"]).numpy()  # torch.polar(ones(3), arange(3.0))
    np.testing.assert_allclose(rope, np.stack([np.cos(np.arange(3.0)), np.sin(np.arange(3.0))], 1), atol=1e-6)
    missing = tmp_path / "missing.pt"
    with pytest.raises(Exception, match="no_such_checkpoint"):
        dcp_to_torch_save(str(tmp_path / "no_such_checkpoint"), str(missing))
    assert not missing.exists()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
