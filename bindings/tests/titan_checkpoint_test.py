"""torchtitan's checkpointing flow, from a side-by-side sweep against torch 2.15: a committed tessel checkpoint
has the .metadata file torchtitan's step scan and keep_latest_k purge probe (a restarted job found none and
silently started from scratch); a model's state dict loads out of the whole checkpoint dict, non-tensor values
of other Statefuls reported as unexpected keys (it raised TypeError); a bfloat16 HF export loads into a float32
model, cast (it raised), and has torch's model.safetensors.index.json."""
import json
import os
import re

import pytest

import tessel
import tessel.distributed.checkpoint as dcp
import tessel.nn as nn
from tessel.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict


def find_load_step(folder):
    """torchtitan's CheckpointManager._find_load_step: the largest step-N holding .metadata or an HF index."""
    steps = [int(m.group(1)) for name in os.listdir(folder) if (m := re.search(r"step-(\d+)", name))
             and (os.path.isfile(os.path.join(folder, name, ".metadata"))
                  or os.path.isfile(os.path.join(folder, name, "model.safetensors.index.json")))]
    return max(steps, default=-1)


def test_a_torchtitan_step_scan_finds_tessels_checkpoints_and_they_still_load(tmp_path):
    m = nn.Linear(3, 2)
    for step, future in ((1, False), (2, True)):
        sd = {"model": get_model_state_dict(m), "train_state": {"step": step}}
        if future:
            dcp.async_save(sd, checkpoint_id=str(tmp_path / ("step-%d" % step))).result()
        else:
            dcp.save(sd, checkpoint_id=str(tmp_path / ("step-%d" % step)))
    assert find_load_step(str(tmp_path)) == 2
    target = {"model": {k: tessel.zeros_like(v) for k, v in get_model_state_dict(m).items()},
              "train_state": {"step": 0}}
    dcp.load(target, checkpoint_id=str(tmp_path / "step-2"))
    assert target["train_state"]["step"] == 2 and tessel.equal(target["model"]["weight"], m.weight.detach())
    md = dcp.FileSystemReader(str(tmp_path / "step-2")).read_metadata()
    assert "model.weight" in md.state_dict_metadata  # tessel's metadata.json, not the marker



def test_torchs_reader_is_told_to_convert_and_an_earlier_builds_marker_still_reads(tmp_path):
    import pickle
    m = nn.Linear(3, 2)
    dcp.save({"model": get_model_state_dict(m)}, checkpoint_id=str(tmp_path / "ckpt"))
    # torch's FileSystemReader.read_metadata is pickle.load(.metadata): it raised "pickle data was truncated" on
    # the text marker; the marker's pickle names the conversion instead (no module of that name exists)
    with open(tmp_path / "ckpt" / ".metadata", "rb") as f:
        with pytest.raises(ModuleNotFoundError, match="convert_with_tessel_dcp_to_torch_dcp"):
            pickle.load(f)
    # a checkpoint an earlier build wrote (the plain-text marker) is still tessel's
    with open(tmp_path / "ckpt" / ".metadata", "wb") as f:
        f.write(b"TESSEL-DCP: this checkpoint is in tessel's format, described by metadata.json; "
                b"tessel.distributed.checkpoint.format_utils.dcp_to_torch_dcp converts it to torch's.\n")
    target = {"model": {k: tessel.zeros_like(v) for k, v in get_model_state_dict(m).items()}}
    dcp.load(target, checkpoint_id=str(tmp_path / "ckpt"))
    assert tessel.equal(target["model"]["weight"], m.weight.detach())

def test_a_model_loads_out_of_the_whole_checkpoint_dict():
    m = nn.Linear(2, 2)
    whole = {k: tessel.zeros_like(v) for k, v in get_model_state_dict(m).items()}
    whole.update(step=3, train_state={"step": tessel.tensor(3)}, optimizer=object())
    result = set_model_state_dict(m, whole, options=StateDictOptions(strict=False))
    assert sorted(result.unexpected_keys) == ["optimizer", "step", "train_state"] and result.missing_keys == []
    assert float(m.weight.detach().abs().sum()) == 0.0
    m2 = nn.Linear(2, 2)
    result = m2.load_state_dict(whole, strict=False)
    assert sorted(result.unexpected_keys) == ["optimizer", "step", "train_state"]
    assert float(m2.weight.detach().abs().sum()) == 0.0
    with pytest.raises(RuntimeError, match=r'Unexpected key\(s\) in state_dict: "step"'):
        m2.load_state_dict(dict(get_model_state_dict(m2), step=3))
    with pytest.raises(RuntimeError, match=r'Unexpected key\(s\) in state_dict: "step"'):
        set_model_state_dict(m2, dict(get_model_state_dict(m2), step=3))
    with pytest.raises(RuntimeError, match='While copying the parameter named "weight", expected torch.Tensor'):
        m2.load_state_dict(dict(get_model_state_dict(m2), weight=1.0))


def test_a_bfloat16_hf_export_loads_into_a_float32_model(tmp_path):
    path = str(tmp_path / "hf")
    values = tessel.tensor([0.1, 0.2, 0.3])
    dcp.save({"w": values.to(tessel.bfloat16)},
             storage_writer=dcp.HuggingFaceStorageWriter(path=path, save_distributed=True, enable_consolidation=True))
    with open(os.path.join(path, "model.safetensors.index.json")) as f:
        assert json.load(f)["weight_map"] == {"w": "model.safetensors"}
    sd = {"w": tessel.zeros(3)}
    dcp.load(sd, storage_reader=dcp.HuggingFaceStorageReader(path))
    assert sd["w"].dtype == tessel.float32
    assert sd["w"].tolist() == values.to(tessel.bfloat16).float().tolist()  # 0.10009765625, ...


def test_a_statefuls_own_error_on_load_reaches_the_caller_as_raised(tmp_path):
    class Loader:  # a dataloader whose state refuses another data-parallel size, as torchtitan's does
        def __init__(self, world):
            self.world = world

        def state_dict(self):
            return {"world": self.world, "offset": 7}

        def load_state_dict(self, sd):
            assert sd["world"] == self.world, "dp degree changed"
            self.offset = sd["offset"]

    dcp.save({"dataloader": Loader(2)}, checkpoint_id=str(tmp_path / "ck"))
    ok = Loader(2)
    dcp.load({"dataloader": ok}, checkpoint_id=str(tmp_path / "ck"))
    assert ok.offset == 7
    with pytest.raises(AssertionError, match="dp degree changed"):  # as torch's (it came wrapped: CheckpointException)
        dcp.load({"dataloader": Loader(4)}, checkpoint_id=str(tmp_path / "ck"))
