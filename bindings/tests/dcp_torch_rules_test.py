"""torch.distributed.checkpoint as torch 2.15 does it (values and messages printed by torch 2.15): load's errors and
its all-or-nothing check across ranks, what load puts where the state dict held a tensor, save / async_save /
load's results, the Metadata a save describes, set_model_state_dict's full state dicts, the storages' and
StateDictOptions' attributes, and planners whose hooks rename or filter keys."""
import concurrent.futures
import dataclasses
import os
import pathlib

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.distributed.checkpoint as dcp
from tessel.distributed.checkpoint import default_planner as dp
from tessel.distributed.checkpoint import state_dict_loader, staging
from tessel.distributed.checkpoint.format_utils import dcp_to_torch_save
from tessel.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.tensor import Shard, distribute_tensor
from dcp_testing import raises_on_ranks

TORCH_DCP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "torch_dcp")


def _linear():
    m = tessel.nn.Linear(2, 2)
    with tessel.no_grad():
        m.weight.copy_(tessel.arange(4.0).reshape(2, 2))
        m.bias.copy_(tessel.tensor([5.0, 6.0]))
    return m


def test_set_model_state_dict_full_keeps_the_models_values_for_keys_the_dict_lacks():
    m = _linear()
    full = StateDictOptions(full_state_dict=True)
    r = set_model_state_dict(m, {"weight": tessel.ones(2, 2)}, options=full)
    assert (str(r), r.missing_keys, r.unexpected_keys) == ("<All keys matched successfully>", [], [])  # torch's
    assert m.weight.tolist() == [[1.0, 1.0], [1.0, 1.0]] and m.bias.tolist() == [5.0, 6.0]  # torch's
    r = set_model_state_dict(m, {"weight": tessel.ones(2, 2) * 2, "zz": tessel.ones(1)},
                             options=StateDictOptions(full_state_dict=True, strict=False))
    assert (r.missing_keys, r.unexpected_keys) == ([], ["zz"])  # torch: _IncompatibleKeys(missing_keys=[], ['zz'])
    assert m.weight.tolist() == [[2.0, 2.0], [2.0, 2.0]]
    with pytest.raises(RuntimeError, match='Error\\(s\\) in loading state_dict for Linear:\n\tUnexpected key\\(s\\) '
                                           'in state_dict: "zz"'):
        set_model_state_dict(m, {"weight": tessel.ones(2, 2), "zz": tessel.ones(1)}, options=full)
    assert str(set_model_state_dict(m, {})) == "<All keys matched successfully>"  # torch: an empty dict loads nothing


def test_set_model_state_dict_full_leaves_the_callers_dict_distributed_as_the_model():
    """torch writes what it loaded back into the caller's dict as DTensors of the model's placements (a later
    load_state_dict of that dict into another tensor-parallel model works). With broadcast_from_rank0 torch rewrites
    rank 0's dict too, which then cannot be broadcast again; tessel leaves it full there."""
    from tessel.distributed.tensor import DTensor
    from tessel.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    out = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        seen = []
        for opts in (dict(full_state_dict=True), dict(full_state_dict=True, broadcast_from_rank0=True)):
            tessel.manual_seed(1)
            sd = dict(tessel.nn.Sequential(tessel.nn.Linear(6, 8), tessel.nn.ReLU(), tessel.nn.Linear(8, 4))
                      .state_dict())
            full = {k: v.clone() for k, v in sd.items()}
            if opts.get("broadcast_from_rank0") and world.rank != 0:
                sd = {}
            m = tessel.nn.Sequential(tessel.nn.Linear(6, 8), tessel.nn.ReLU(), tessel.nn.Linear(8, 4))
            parallelize_module(m, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
            set_model_state_dict(m, sd, options=StateDictOptions(**opts))
            seen.append((sorted((k, isinstance(v, DTensor), tuple(v.placements) if isinstance(v, DTensor) else None)
                                for k, v in sd.items()),
                         opts.get("broadcast_from_rank0")  # (a collective: rank 1's dict is empty there)
                         or all(np.array_equal(v.full_tensor().numpy(), full[k].numpy()) for k, v in sd.items())))
            other = tessel.nn.Sequential(tessel.nn.Linear(6, 8), tessel.nn.ReLU(), tessel.nn.Linear(8, 4))
            parallelize_module(other, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
            if not opts.get("broadcast_from_rank0"):  # (every rank's dict is full here)
                other.load_state_dict(sd)
                seen.append(np.array_equal(other[0].weight.full_tensor().numpy(), full["0.weight"].numpy()))
        out[world.rank] = seen
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    from tessel.distributed.tensor import Replicate, Shard
    placements = [("0.bias", True, (Shard(0),)), ("0.weight", True, (Shard(0),)), ("2.bias", True, (Replicate(),)),
                  ("2.weight", True, (Shard(1),))]  # torch's
    full_keys = [(k, False, None) for k, _, _ in placements]
    assert out[0] == [(placements, True), True, (full_keys, True)]
    assert out[1] == [(placements, True), True, ([], True)]


def test_a_ddp_models_state_dicts_leave_out_its_module_segment():
    """torch's get_state_dict / set_*_state_dict name a DDP model's entries as the model's own ("0.weight", not
    "module.0.weight"; printed by torch 2.15), so its checkpoints load into the unwrapped or FSDP model and back."""
    from tessel.distributed.checkpoint.state_dict import get_optimizer_state_dict
    from tessel.nn.parallel import DistributedDataParallel
    out = {}

    def rank_fn(world):
        dist.init_process_group()
        tessel.manual_seed(0)
        inner = tessel.nn.Sequential(tessel.nn.Linear(2, 2), tessel.nn.Linear(2, 1))
        m = tessel.nn.Sequential(DistributedDataParallel(inner))  # nested: the DDP's own prefix stays
        opt = tessel.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        m(tessel.ones(1, 2)).sum().backward()
        opt.step()
        keys = (list(get_model_state_dict(m)), list(get_model_state_dict(m, options=StateDictOptions(
            full_state_dict=True))), list(get_optimizer_state_dict(m, opt)["state"]),
            list(get_optimizer_state_dict(m, opt, options=StateDictOptions(flatten_optimizer_state_dict=True))))
        clean = {"0.0.weight": tessel.ones(2, 2), "0.0.bias": tessel.zeros(2), "0.1.weight": tessel.ones(1, 2),
                 "0.1.bias": tessel.zeros(1)}
        r = set_model_state_dict(m, clean)
        out[world.rank] = keys + (str(r), inner[0].weight.sum().item())
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    names = ["0.0.weight", "0.0.bias", "0.1.weight", "0.1.bias"]
    model_keys, full_keys, optim_keys, flat_keys, result, total = out[0]
    assert model_keys == names and full_keys == names and optim_keys == names
    assert flat_keys[:2] == ["state.0.0.weight.momentum_buffer", "state.0.0.bias.momentum_buffer"]
    assert result == "<All keys matched successfully>" and total == 4.0


def test_load_errors_are_torchs_and_load_returns_none(tmp_path):
    ck = str(tmp_path / "ck")
    dcp.save({"w": tessel.ones(2), "i": 3, "step": 4}, checkpoint_id=ck)
    d = {"w": tessel.zeros(2), "extra": tessel.zeros(1)}
    with raises_on_ranks(RuntimeError, r"^Missing key in checkpoint state_dict: extra\.$"):  # torch's
        dcp.load(d, checkpoint_id=ck)
    assert d["w"].tolist() == [0.0, 0.0]
    d = {"w": tessel.zeros(2)}
    assert dcp.load(d, checkpoint_id=ck) is None and d["w"].tolist() == [1.0, 1.0]  # torch: None, tensor([1., 1.])
    with raises_on_ranks(ValueError, "^Invalid checkpoint metadata for w, expected BytesStorageMetadata but found "
                                     "<class '.*TensorStorageMetadata'>$"):  # torch's (its class's module)
        dcp.load({"w": 5}, checkpoint_id=ck)
    with pytest.raises(RuntimeError, match="^`checkpoint_id` must be specified if storage_reader/storage_writer is "
                                           "None.$"):  # torch's, raised as is
        dcp.load({"w": tessel.ones(1)})
    with pytest.raises(RuntimeError, match="^`checkpoint_id` must be specified"):
        dcp.save({"w": tessel.ones(1)})
    exc = dcp.async_save({"w": tessel.ones(1)}).exception(timeout=60)  # torch: through the future
    assert isinstance(exc, RuntimeError) and str(exc).startswith("`checkpoint_id` must be specified"), exc


def test_a_value_saved_where_the_state_dict_holds_a_tensor_replaces_it(tmp_path):
    ck = str(tmp_path / "ck")
    dcp.save({"i": 3, "step": 4}, checkpoint_id=ck)
    d = {"i": tessel.zeros(()), "step": tessel.zeros(1)}
    dcp.load(d, checkpoint_id=ck)
    assert d == {"i": 3, "step": 4}  # torch: {'i': 3, 'step': 4}


def test_a_size_mismatch_against_torchs_checkpoint_is_torchs_value_error():
    # torch: ValueError('Size mismatch between saved torch.Size([6, 4]) and current: torch.Size([4, 6]) for
    # model.0.weight')
    with raises_on_ranks(ValueError, r"^Size mismatch between saved tessel.Size\(\[6, 4\]\) and current: "
                                     r"tessel.Size\(\[4, 6\]\) for model.0.weight$"):
        dcp.load({"model": {"0.weight": tessel.zeros(4, 6)}}, checkpoint_id=TORCH_DCP)


def test_metadata_keeps_the_saved_order_planner_data_and_torchs_fields(tmp_path):
    ck = str(tmp_path / "ck")
    sd = {"w": tessel.arange(6.0).reshape(2, 3), "step": 3, "n": {"a": tessel.ones(2)},
          "l": [tessel.ones(1), {"x": 2}]}
    md = dcp.save(sd, checkpoint_id=ck)
    # torch's
    keys = ["w", "step", "n.a", "l.0", "l.1.x"]
    planner_data = {"w": ("w",), "step": ("step",), "n.a": ("n", "a"), "l.0": ("l", 0), "l.1.x": ("l", 1, "x")}
    assert list(md.state_dict_metadata) == keys and md.planner_data == planner_data
    p = md.state_dict_metadata["w"].properties
    assert (p.layout, p.memory_format, p.strides, p.requires_grad, p.pin_memory) == \
        (tessel.strided, tessel.contiguous_format, (3, 1), False, False)
    assert md.version == "1.0.0" and isinstance(md.storage_meta.checkpoint_id, pathlib.PosixPath)
    back = dcp.FileSystemReader(ck).read_metadata()
    assert list(back.state_dict_metadata) == keys and back.planner_data == planner_data
    assert sorted(i.fqn for i in back.storage_data) == ["l.0", "l.1.x", "n.a", "step", "w"]
    dcp_to_torch_save(ck, str(tmp_path / "out.pt"))
    out = tessel.load(str(tmp_path / "out.pt"), weights_only=False)
    assert list(out) == ["w", "step", "n", "l"] and list(out["n"]) == ["a"]  # torch's


def test_async_save_resolves_to_the_checkpoints_metadata(tmp_path):
    future = dcp.async_save({"w": tessel.arange(2.0), "s": 1}, checkpoint_id=str(tmp_path / "a"))
    assert isinstance(future, concurrent.futures.Future)
    md = future.result(timeout=60)
    assert isinstance(md, dcp.Metadata) and list(md.state_dict_metadata) == ["w", "s"]  # torch: Metadata, [w, s]
    f = dcp.async_save({"w": tessel.arange(2.0)}, checkpoint_id=str(tmp_path / "b"),
                       async_stager=staging.BlockingAsyncStager())
    assert isinstance(f, concurrent.futures.Future) and list(f.result(timeout=60).state_dict_metadata) == ["w"]
    stager = staging.DefaultStager(staging.StagingOptions(False, False, True, False))
    response = dcp.async_save({"w": tessel.arange(2.0)}, checkpoint_id=str(tmp_path / "c"), async_stager=stager)
    assert isinstance(response.upload_completion.result(timeout=60), dcp.Metadata)  # torch: Metadata
    stager.close()


def test_two_ranks_async_save_failing_on_one_fails_both_futures_and_uneven_shards_list_empty_chunks(tmp_path):
    seen = {}

    def rank_fn(world):
        dist.init_process_group()
        bad = {"x": tessel.ones(2)}
        if world.rank == 1:
            bad["f"] = lambda: 0
        future = dcp.async_save(bad, checkpoint_id=str(tmp_path / "bad"))
        seen[world.rank] = future.exception(timeout=60)
        dist.barrier()
        mesh = init_device_mesh("cpu", (2,))
        md = dcp.save({"tiny": distribute_tensor(tessel.arange(1.0), mesh, [Shard(0)])},
                      checkpoint_id=str(tmp_path / "tiny"))
        chunks = md.state_dict_metadata["tiny"].chunks
        seen["chunks", world.rank] = [(tuple(c.offsets), tuple(c.sizes)) for c in chunks]
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    for r in (0, 1):  # torch: CheckpointException on both ranks naming rank 1 (Can't pickle local object ...)
        assert isinstance(seen[r], dcp.CheckpointException) and sorted(seen[r].failures) == [1], seen[r]
        assert "Can't pickle local object" in str(seen[r].failures[1][0])
        assert seen["chunks", r] == [((0,), (1,)), ((1,), (0,))]  # torch's


def test_a_load_failing_on_one_rank_changes_no_rank(tmp_path):
    ck = str(tmp_path / "ck")
    dcp.save({"x": tessel.ones(2)}, checkpoint_id=ck)
    seen = {}

    def rank_fn(world):
        dist.init_process_group()
        s = {"x": tessel.zeros(2)}
        if world.rank == 1:
            s["extra"] = tessel.zeros(1)
        with raises_on_ranks(RuntimeError, r"Missing key in checkpoint state_dict: extra\.", ranks=(1,)):
            dcp.load(s, checkpoint_id=ck)
        seen[world.rank] = s["x"].tolist()
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    assert seen == {0: [0.0, 0.0], 1: [0.0, 0.0]}  # torch: rank 0's tensor([0., 0.])


def test_default_planners_without_flattening_and_their_attributes(tmp_path):
    ck = str(tmp_path / "ck")
    sd = {"w": tessel.arange(6.0).reshape(2, 3), "step": 3, "n": {"a": tessel.ones(2)}}
    md = dcp.save(sd, checkpoint_id=ck, planner=dp.DefaultSavePlanner(flatten_state_dict=False))
    assert list(md.state_dict_metadata) == ["w", "step", "n"]  # torch's: the dict kept whole
    assert isinstance(md.state_dict_metadata["n"], dcp.BytesStorageMetadata)
    d = {"w": tessel.zeros(2, 3)}
    dcp.load(d, checkpoint_id=ck, planner=dp.DefaultLoadPlanner(flatten_state_dict=False))
    assert d["w"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    s = dp.DefaultSavePlanner()
    assert (s.flatten_state_dict, s.flatten_sharded_tensors, s.mappings, s.dedup_save_to_lowest_rank) == \
        (True, True, {}, False)  # torch's
    lp = dp.DefaultLoadPlanner(flatten_state_dict=False)
    assert (lp.flatten_state_dict, lp.flatten_sharded_tensors, lp.mappings, lp.original_state_dict,
            lp.allow_partial_load) == (False, True, {}, {}, False)  # torch's


def test_storages_options_and_use_collectives_as_torchs(tmp_path):
    ck = str(tmp_path / "ck")
    assert isinstance(dcp.save({"w": tessel.ones(1)}, checkpoint_id=ck, use_collectives=True), dcp.Metadata)
    w = dcp.FileSystemWriter(ck, single_file_per_rank=False, sync_files=False, thread_count=2, per_thread_copy_ahead=5)
    # torch: PosixPath False False 2 5 True str FileSystem True
    assert (type(w.path).__name__, w.single_file_per_rank, w.sync_files, w.thread_count, w.per_thread_copy_ahead,
            w.overwrite, type(w.save_id).__name__, type(w.fs).__name__, isinstance(w, staging.BlockingAsyncStager)) \
        == ("PosixPath", False, False, 2, 5, True, "str", "FileSystem", True)
    r = dcp.FileSystemReader(ck)
    assert (type(r.path).__name__, r.storage_data, type(r.load_id).__name__, type(r.fs).__name__) == \
        ("PosixPath", {}, "str", "FileSystem")  # torch's
    options = StateDictOptions(broadcast_from_rank0=True)  # torch: built; refused where used
    assert options.dsd_fqn_modifiers == "_fqn_modifiers"
    with pytest.raises(ValueError, match="^full_state_dict must be True when broadcast_from_rank0 is True.$"):
        get_model_state_dict(_linear(), options=options)


class _RenameSave(dp.DefaultSavePlanner):
    def set_up_planner(self, state_dict, storage_meta=None, is_coordinator=False):
        super().set_up_planner({"foo_" + k: v for k, v in state_dict.items()}, storage_meta, is_coordinator)


class _StripLoad(dp.DefaultLoadPlanner):
    def set_up_planner(self, state_dict, metadata=None, is_coordinator=False):
        super().set_up_planner({"foo_" + k: v for k, v in state_dict.items()}, metadata, is_coordinator)
        self.original_state_dict = state_dict

    def load_bytes(self, read_item, value):
        self.original_state_dict[read_item.dest_index.fqn[len("foo_"):]] = tessel.load(value, weights_only=False)


class _SkipStep(dp.DefaultLoadPlanner):
    def create_local_plan(self):
        plan = super().create_local_plan()
        return dataclasses.replace(plan, items=[i for i in plan.items if i.dest_index.fqn != "foo_step"])


def test_planners_renaming_and_filtering_keys_and_loading_without_a_model(tmp_path):
    ck = str(tmp_path / "ck")
    md = dcp.save({"model": {"w": tessel.arange(3.0)}, "step": 5}, checkpoint_id=ck, planner=_RenameSave())
    assert list(md.state_dict_metadata) == ["foo_model.w", "foo_step"]  # torch's
    d = {"model": {"w": tessel.zeros(3)}, "step": 0}
    dcp.load(d, checkpoint_id=ck, planner=_StripLoad())
    assert d["model"]["w"].tolist() == [0.0, 1.0, 2.0] and d["step"] == 5  # torch's
    d = {"foo_model": {"w": tessel.zeros(3)}, "foo_step": 0}
    dcp.load(d, checkpoint_id=ck, planner=_SkipStep())
    assert d["foo_model"]["w"].tolist() == [0.0, 1.0, 2.0] and d["foo_step"] == 0  # torch's: the step left out
    empty = {}
    state_dict_loader._load_state_dict(empty, dcp.FileSystemReader(ck), planner=dp._EmptyStateDictLoadPlanner(),
                                       no_dist=True)
    assert list(empty) == ["foo_model", "foo_step"] and empty["foo_step"] == 5  # torch's
    np.testing.assert_array_equal(empty["foo_model"]["w"].numpy(), [0.0, 1.0, 2.0])
    some = state_dict_loader._load_state_dict_from_keys("foo_model", checkpoint_id=ck)
    assert list(some) == ["foo_model"] and some["foo_model"]["w"].tolist() == [0.0, 1.0, 2.0]  # torch's
    untouched = {}
    dcp.load(untouched, checkpoint_id=ck, planner=dp._EmptyStateDictLoadPlanner())
    assert untouched == {}  # torch: {} (load fills a copy of the caller's dict)


def test_a_renaming_load_planner_fills_dtensors_on_two_ranks(tmp_path):
    ck = str(tmp_path / "ck")
    seen = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        dcp.save({"dt": distribute_tensor(tessel.arange(12.0).reshape(4, 3), mesh, [Shard(0)]), "step": 7},
                 checkpoint_id=ck, planner=_RenameSave())
        target = {"dt": distribute_tensor(tessel.zeros(4, 3), mesh, [Shard(1)]), "step": 0}
        dcp.load(target, checkpoint_id=ck, planner=_StripLoad())
        seen[world.rank] = (target["dt"].to_local().tolist(), target["step"])
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    assert seen == {0: ([[0.0, 1.0], [3.0, 4.0], [6.0, 7.0], [9.0, 10.0]], 7),
                    1: ([[2.0], [5.0], [8.0], [11.0]], 7)}  # torch's


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
