"""torch's module paths for the distributed pieces import from tessel's (a script ports by changing its
imports: `from torch.distributed.checkpoint.default_planner import DefaultSavePlanner` and the like), giving
the same objects as the packages; torch's pipelining.microbatch helpers split and merge as torch's do
(values recorded from torch 2.15)."""
import sys

import pytest

import tessel
import tessel.distributed as dist
import tessel.distributed.checkpoint as dcp
from tessel.distributed import pipelining as pp
from tessel.distributed.pipelining.microbatch import (TensorChunkSpec, _Replicate, merge_chunks,
                                                      split_args_kwargs_into_chunks)


def test_torchs_submodule_paths_give_the_packages_objects():
    from tessel.distributed.checkpoint.default_planner import DefaultLoadPlanner, DefaultSavePlanner
    from tessel.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
    from tessel.distributed.checkpoint.planner import LoadPlanner, SavePlanner
    from tessel.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
    from tessel.distributed.checkpoint.storage import StorageReader, StorageWriter
    from tessel.distributed.device_mesh import DeviceMesh
    from tessel.distributed.pipelining.schedules import Schedule1F1B
    from tessel.distributed.pipelining.stage import PipelineStage
    from tessel.distributed.tensor.device_mesh import DeviceMesh as OldPathMesh, init_device_mesh
    from tessel.distributed.tensor.parallel.style import ColwiseParallel, ParallelStyle
    from tessel.distributed.tensor.parallel import ColwiseParallel as Colwise
    from tessel.distributed.tensor.parallel.api import parallelize_module
    from tessel.distributed.tensor.parallel.loss import loss_parallel
    import tessel.distributed.tensor.parallel as tp
    from tessel.nn.parallel import GradBucket
    assert (DefaultSavePlanner, DefaultLoadPlanner) == (dcp.DefaultSavePlanner, dcp.DefaultLoadPlanner)
    assert (FileSystemWriter, FileSystemReader) == (dcp.FileSystemWriter, dcp.FileSystemReader)
    assert issubclass(DefaultSavePlanner, SavePlanner) and issubclass(DefaultLoadPlanner, LoadPlanner)
    assert (SavePlanner, LoadPlanner, StorageWriter, StorageReader) == (dcp.SavePlanner, dcp.LoadPlanner,
                                                                        dcp.StorageWriter, dcp.StorageReader)
    for writer in (dcp.FileSystemWriter, dcp.HuggingFaceStorageWriter):
        assert issubclass(writer, StorageWriter)
    for reader in (dcp.FileSystemReader, dcp.HuggingFaceStorageReader):
        assert issubclass(reader, StorageReader)
    assert [t.value for t in AsyncCheckpointerType] == ["thread", "process"]
    assert PipelineStage is pp.PipelineStage and Schedule1F1B is pp.Schedule1F1B
    assert pp.stage.PipelineStage is pp.PipelineStage and pp.microbatch.TensorChunkSpec is TensorChunkSpec
    assert OldPathMesh is DeviceMesh and init_device_mesh is dist.init_device_mesh
    assert ColwiseParallel is Colwise and issubclass(ColwiseParallel, ParallelStyle)
    assert (parallelize_module, loss_parallel) == (tp.parallelize_module, tp.loss_parallel)
    assert tp.api.parallelize_module is tp.parallelize_module and tp.style.RowwiseParallel is tp.RowwiseParallel
    assert dist.GradBucket is GradBucket
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        dist.NoSuchThing  # noqa: B018


def test_async_save_takes_torchs_checkpointer_types(tmp_path):
    from tessel.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
    for kind in AsyncCheckpointerType:
        future = dcp.async_save({"w": tessel.arange(3.0)}, checkpoint_id=str(tmp_path / kind.value),
                                async_checkpointer_type=kind)
        future.result(timeout=60)
        back = {"w": tessel.zeros(3)}
        dcp.load(back, checkpoint_id=str(tmp_path / kind.value))
        assert back["w"].tolist() == [0.0, 1.0, 2.0]


def test_async_save_with_torchs_stagers_returns_what_torchs_returns(tmp_path):
    # torch 2.15 on the CPU: DefaultStager(StagingOptions(False, False, True, False)) -> AsyncSaveResponse
    # (staging_completion None, upload_completion the save); use_async_staging=False -> a Future; the default
    # options (non-blocking copy) -> AssertionError without an accelerator.
    import concurrent.futures
    from tessel.distributed.checkpoint.staging import AsyncStager, DefaultStager, StagingOptions
    from tessel.distributed.checkpoint.state_dict_saver import AsyncSaveResponse
    with pytest.raises(AssertionError, match="Non-blocking copy requires that the current accelerator"):
        DefaultStager(StagingOptions())
    w = tessel.arange(3.0)
    stager = DefaultStager(StagingOptions(False, False, True, False))
    response = dcp.async_save({"w": w}, checkpoint_id=str(tmp_path / "a"), async_stager=stager)
    assert isinstance(response, AsyncSaveResponse)
    assert response.staging_completion.result(timeout=60) is None
    response.upload_completion.result(timeout=60)
    staged = stager.stage({"w": w, "n": {"step": 3}})
    assert isinstance(staged, concurrent.futures.Future)
    copy = staged.result(timeout=60)
    w.add_(1.0)  # the staged copy does not see later updates
    assert copy["w"].tolist() == [0.0, 1.0, 2.0] and copy["n"] == {"step": 3}
    stager.close()
    blocking = DefaultStager(StagingOptions(False, False, False, False))
    future = dcp.async_save({"w": w}, checkpoint_id=str(tmp_path / "b"), async_stager=blocking)
    assert isinstance(future, concurrent.futures.Future)
    future.result(timeout=60)

    class Halving(AsyncStager):  # a stager of the user's: its copy is what is saved
        def __init__(self):
            self.synced = False

        def stage(self, state_dict):
            return {k: v / 2 for k, v in state_dict.items()}

        def synchronize_staging(self):
            self.synced = True

    mine = Halving()
    dcp.async_save({"w": w}, checkpoint_id=str(tmp_path / "c"), async_stager=mine).result(timeout=60)
    back = {"w": tessel.zeros(3)}
    dcp.load(back, checkpoint_id=str(tmp_path / "c"))
    assert back["w"].tolist() == [0.5, 1.0, 1.5] and mine.synced
    with pytest.raises(TypeError, match="must be an AsyncStager"):
        dcp.async_save({"w": w}, checkpoint_id=str(tmp_path / "d"), async_stager=object())


def test_dtensor_linspace_and_logspace_as_torchs():
    # torch 2.15 on one rank: linspace(0, 1, 5) [S(0)] -> [0, .25, .5, .75, 1]; logspace(tensor(0.), 2, 3,
    # base=2) -> [1, 2, 4] (Replicate); here on 2 ranks, each holding its torch.chunk rows.
    from tessel.distributed.tensor import Replicate, Shard, linspace, logspace
    import tessel.distributed.tensor as dt
    assert dt.device_mesh.DeviceMesh is dist.device_mesh.DeviceMesh and dt.placement_types.Shard is Shard
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = dist.init_device_mesh("cpu", (2,))
        a = linspace(0, 1, 5, device_mesh=mesh, placements=[Shard(0)], requires_grad=True)
        b = logspace(tessel.tensor(0.0), 2, 3, base=2.0, device_mesh=mesh)
        got[world.rank] = (a.to_local().tolist(), a.full_tensor().tolist(), a.requires_grad,
                           b.full_tensor().tolist(), list(b.placements))
        with pytest.raises(RuntimeError, match="only supports 0-dimensional start and end tensors"):
            linspace(tessel.zeros(2), 1, 3, device_mesh=mesh)
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    assert got[0][0] == [0.0, 0.25, 0.5] and got[1][0] == [0.75, 1.0]
    for r in (0, 1):
        assert got[r][1:] == ([0.0, 0.25, 0.5, 0.75, 1.0], True, [1.0, 2.0, 4.0], [Replicate()])


def test_device_mesh_unflatten_splits_a_world_mesh_as_torchtitan_does():
    # torchtitan builds a 1-D "world" mesh and unflattens it into its parallel dims: row-major ranks, one
    # working group per new dim; a sub-mesh (not the whole group) is refused rather than hanging.
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = dist.init_device_mesh("cpu", (4,), mesh_dim_names=("world",))
        dims = mesh._unflatten("world", (2, 2), ("dp", "tp"))
        t = tessel.ones(1) * world.rank
        dist.all_reduce(t, group=dims.get_group("tp"))
        got[world.rank] = (dims.mesh.tolist(), dims.mesh_dim_names, dims["tp"].mesh.tolist(), t.item())
        with pytest.raises(NotImplementedError, match="spans 2 of the default group's 4 ranks"):
            dims["dp"]._unflatten(0, (2, 1), ("a", "b"))
        with pytest.raises(ValueError, match=r"sizes \(3, 2\) do not multiply to dim 0's size 4"):
            mesh._unflatten(0, (3, 2), ("a", "b"))
        with pytest.raises(RuntimeError, match="mesh_dim_names must have same length as mesh_sizes"):
            mesh._unflatten(0, (2, 2), ("a",))
        dist.destroy_process_group()

    tessel.run_ranks(4, rank_fn)
    for r in range(4):
        tp = [0, 1] if r < 2 else [2, 3]
        assert got[r] == ([[0, 1], [2, 3]], ("dp", "tp"), tp, float(sum(tp))), got[r]


def test_split_args_kwargs_into_chunks_follows_torchs_rules():
    x = tessel.arange(14.0).reshape(7, 2)
    y = tessel.arange(12.0).reshape(2, 6)
    args, kwargs = split_args_kwargs_into_chunks(
        (x, y, 5), {"m": tessel.arange(3.0), "flag": "a"}, 3,
        (TensorChunkSpec(0), TensorChunkSpec(1), _Replicate()), {"m": TensorChunkSpec(0), "flag": _Replicate()})
    # torch 2.15: 7 rows in 3 chunks are 3, 2, 2 (tensor_split); y's 6 columns 2 each; 5 and "a" replicated
    assert [a[0].tolist() for a in args] == [[[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]], [[6.0, 7.0], [8.0, 9.0]],
                                             [[10.0, 11.0], [12.0, 13.0]]]
    assert [a[1].tolist() for a in args] == [[[0.0, 1.0], [6.0, 7.0]], [[2.0, 3.0], [8.0, 9.0]],
                                             [[4.0, 5.0], [10.0, 11.0]]]
    assert [a[2] for a in args] == [5, 5, 5]
    assert [(k["m"].tolist(), k["flag"]) for k in kwargs] == [([0.0], "a"), ([1.0], "a"), ([2.0], "a")]
    # Without specs: nested tensors split along dim 0, other values whole; no kwargs: empty dicts.
    nested, empty = split_args_kwargs_into_chunks(([x, {"z": y}],), None, 2)
    assert [[tuple(c[0][0].shape), tuple(c[0][1]["z"].shape)] for c in nested] == [[(4, 2), (1, 6)],
                                                                                   [(3, 2), (1, 6)]]
    assert empty == [{}, {}]
    # A tensor shorter than the chunk count makes that many chunks (torch's min), kwargs included.
    short_args, short_kwargs = split_args_kwargs_into_chunks((tessel.ones(2, 3), tessel.arange(6.0)), {"k": 1}, 3)
    assert len(short_args) == 2 and [tuple(c[1].shape) for c in short_args] == [(3,), (3,)]
    assert short_kwargs == [{"k": 1}, {"k": 1}]
    with pytest.raises(ValueError, match="Unsupported chunk spec: None and value: 5 combination"):
        split_args_kwargs_into_chunks((tessel.ones(4), 5), None, 2, (TensorChunkSpec(0), None))
    with pytest.raises(ValueError, match=r"arguments \['a'\] but chunk specs for \[\]"):
        split_args_kwargs_into_chunks((tessel.ones(4),), {"a": tessel.ones(4)}, 2, None, {})
    # merge_chunks undoes the split; a leaf without a spec comes from the first chunk.
    assert merge_chunks([c[0] for c in args], TensorChunkSpec(0)).tolist() == x.tolist()
    assert merge_chunks([(c[0], c[1]) for c in args], (TensorChunkSpec(0), TensorChunkSpec(1)))[1].tolist() == \
        y.tolist()
    assert merge_chunks([[c[0][0], 7] for c in nested], [TensorChunkSpec(0), None])[1] == 7
    with pytest.raises(TypeError, match="expected Tensor"):  # None: every leaf along dim 0, as torch
        merge_chunks([[c[0][0], 7] for c in nested], None)
    assert str(TensorChunkSpec(1)) == "TensorChunkSpec(1)"
    assert TensorChunkSpec.from_tuple((0, 1)) == (TensorChunkSpec(0), TensorChunkSpec(1))
    assert TensorChunkSpec.from_dict({"a": 2}) == {"a": TensorChunkSpec(2)}


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
