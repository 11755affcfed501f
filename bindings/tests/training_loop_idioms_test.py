"""Lines of training scripts that raised here and run in torch 2.15 on a machine without a GPU (expected values are
torch's printed results for the same lines): torch.autograd.profiler.record_function annotations, CUDA memory
counters logged from a CPU run, legacy Tensor.type casts, and clip_grad_norm_ with max_norm 0 (or negative)."""
import pickle

import pytest

import tessel


def test_autograd_profiler_record_function_annotates_as_torch():
    import tessel.autograd.profiler as legacy
    with tessel.autograd.profiler.record_function("forward"):
        y = tessel.ones(2) * 2
    assert y.tolist() == [2.0, 2.0] and legacy.record_function is tessel.profiler.record_function
    assert tessel.autograd.profiler.profile is tessel.profiler._LegacyProfile  # torch's legacy signature
    with pytest.raises(AttributeError, match="has no attribute 'emit_nothing'"):
        tessel.autograd.profiler.emit_nothing


def test_cuda_memory_counters_read_zero_without_a_gpu():
    assert not tessel.cuda.is_available()
    assert [tessel.cuda.memory_allocated(), tessel.cuda.max_memory_allocated(), tessel.cuda.memory_reserved(),
            tessel.cuda.max_memory_reserved(0)] == [0, 0, 0, 0]
    assert dict(tessel.cuda.memory_stats()) == {}
    with pytest.raises(RuntimeError, match="no CUDA device"):
        tessel.cuda.synchronize()


def test_legacy_tensor_type_casts():
    x = tessel.tensor([1.5, 2.5])
    assert x.type() == "torch.FloatTensor"
    assert x.type("torch.LongTensor").tolist() == [1, 2] and x.type("torch.LongTensor").dtype is tessel.int64
    assert x.type(tessel.LongTensor).dtype is tessel.int64 and x.type(tessel.DoubleTensor).dtype is tessel.float64
    assert x.type(tessel.float16).dtype is tessel.float16
    with pytest.raises(ValueError, match="invalid type: 'foo'"):
        x.type("foo")
    with pytest.raises(RuntimeError, match="no CUDA device"):
        x.type("torch.cuda.FloatTensor")


@pytest.mark.parametrize("max_norm,grad", [(0.0, [0.0, 0.0]), (-1.0, [-0.6, -0.8])])
def test_clip_grad_norm_takes_any_max_norm(max_norm, grad):
    p = tessel.nn.Parameter(tessel.ones(2))
    p.grad = tessel.tensor([3.0, 4.0])
    norm = tessel.nn.utils.clip_grad_norm_([p], max_norm=max_norm)
    assert norm.item() == 5.0
    assert p.grad.tolist() == pytest.approx(grad, abs=1e-6)


def test_built_in_layers_settings_are_assignable_and_copied():
    import copy
    import pickle
    ln = tessel.nn.LayerNorm(4)
    x = tessel.tensor([[1.0, 2.0, 3.0, 4.0]])
    before = ln(x)
    ln.eps = 10.0  # the next forward uses it: torch's 0.8944 largest change for these values
    assert ln.eps == 10.0 and round((before - ln(x)).abs().max().item(), 4) == 0.8944
    assert copy.deepcopy(ln).eps == 10.0 and pickle.loads(pickle.dumps(ln)).eps == 10.0
    rms = tessel.nn.RMSNorm(4)
    rms.eps = 1.0
    assert [round(v, 4) for v in rms(x).flatten().tolist()] == [0.343, 0.686, 1.029, 1.372]
    assert copy.deepcopy(rms).eps == 1.0
    emb = tessel.nn.Embedding(5, 2, padding_idx=0)
    emb.padding_idx = None  # row 0 learns again
    emb(tessel.tensor([0, 0, 1])).sum().backward()
    assert emb.padding_idx is None and emb.weight.grad[0].tolist() == [2.0, 2.0]
    assert copy.deepcopy(emb).padding_idx is None
    emb.max_norm, emb.norm_type = 1.0, 1.0
    assert (emb.max_norm, emb.norm_type) == (1.0, 1.0)


def test_deepcopy_of_a_module_keeps_its_hooks_as_torch():
    import copy
    m = tessel.nn.Linear(2, 2)
    m.register_forward_hook(lambda mod, inp, out: out * 0)  # e.g. a masking hook, then an EMA copy
    calls = []
    m.register_forward_pre_hook(lambda mod, args: calls.append("pre"))
    m.register_forward_hook(lambda mod, args, kwargs, out: calls.append("kw"), with_kwargs=True, prepend=True)
    ema = copy.deepcopy(m)
    assert ema(tessel.ones(1, 2)).abs().sum().item() == 0 and calls == ["pre", "kw"]
    assert (len(ema._forward_hooks), len(ema._forward_pre_hooks)) == (2, 1)
    ema._forward_hooks.clear()
    ema._forward_pre_hooks.clear()
    assert ema(tessel.ones(1, 2)).abs().sum().item() > 0 and len(m._forward_hooks) == 2  # the original keeps its


def test_no_grad_entered_without_a_with_stays_until_exit_as_torch():
    import gc
    tessel.no_grad().__enter__()  # the object is dropped at once: torch keeps grad off (a guard restored it here)
    gc.collect()
    assert not tessel.is_grad_enabled()
    tessel.set_grad_enabled(True)
    ctx = tessel.no_grad()
    ctx.__enter__()
    ctx.__enter__()  # nested entries of one object unwind in order
    ctx.__exit__(None, None, None)
    assert not tessel.is_grad_enabled()
    ctx.__exit__(None, None, None)
    assert tessel.is_grad_enabled()
    with tessel.enable_grad():
        with tessel.no_grad():
            assert not tessel.is_grad_enabled()
        assert tessel.is_grad_enabled()


def test_a_collective_from_a_rank_outside_the_group_is_a_runtime_error_as_torch():
    import tessel.distributed as dist

    def rank_fn(world):
        dist.init_process_group()
        with pytest.raises(RuntimeError, match="global rank 5 is not part of the group"):
            dist.broadcast(tessel.ones(1), src=5)
        with pytest.raises(ValueError, match="global rank 5 is not part of the group"):  # torch's get_group_rank
            dist.get_group_rank(dist.group.WORLD, 5)
    tessel.run_ranks(2, rank_fn)


def test_a_save_that_fails_to_pickle_leaves_the_previous_file(tmp_path):
    import os
    path = tmp_path / "rank.pt"
    tessel.save({"w": tessel.ones(2)}, path)
    with pytest.raises((AttributeError, TypeError, pickle.PicklingError)):  # a lambda: refused before the move
        tessel.save({"w": tessel.zeros(2), "fn": lambda: 0}, path)
    assert tessel.load(path)["w"].tolist() == [1.0, 1.0] and os.listdir(tmp_path) == ["rank.pt"]
