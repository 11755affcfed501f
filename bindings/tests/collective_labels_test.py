"""Collective labels from Python (comm/collective.h's CollectiveLabel): fully_shard names each group's all-gathers and
reduce-scatters, so ranks whose forwards took different paths fail at the first diverging group, naming both, even
when the groups' sizes agree (they used to swap shards silently); the labels are compared whole (long names that
differ only at the end) and printed whole (non-ASCII, control characters); a collective that user code issues
from a hook is not labelled (it ran under the group's label and failed a correct job); and the composable APIs
refuse the modules C++ created with the reason."""
import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn as nn
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.fsdp import fully_shard, register_fsdp_forward_method


class Skipping(nn.Module):
    """Equally sized children; `skip` is the one this rank's forward leaves out."""

    def __init__(self, names, skip):
        super().__init__()
        self.names, self.skip = names, skip
        for n in names:
            self.add_module(n, nn.Linear(4, 4, bias=False))

    def forward(self, x):
        for i, n in enumerate(self.names):
            if i != self.skip:
                x = getattr(self, n)(x)
        return x


def _diverge(names):
    """Rank 1 skips names[1]; returns each rank's error message."""
    out = {}

    def fn(_):
        dist.init_process_group()
        rank = dist.get_rank()
        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))
        m = Skipping(names, 1 if rank == 1 else -1)
        for n in names:
            fully_shard(getattr(m, n), mesh=mesh)
        fully_shard(m, mesh=mesh)
        with pytest.raises(Exception) as info:
            m(tessel.ones(2, 4)).sum().backward()
        out[rank] = str(info.value)

    dist.run_ranks(2, fn)
    return out


def test_ranks_taking_different_paths_fail_at_the_first_diverging_group_naming_both():
    out = _diverge(["a", "b", "c"])
    for msg in out.values():
        assert "collective mismatch on group" in msg, msg
        assert "for fully_shard 'c' while rank 0 called all_gather" in msg and "for fully_shard 'b'" in msg, msg


def test_long_names_that_differ_only_at_the_end_are_compared_whole():
    names = ["x" * 50 + "_a", "x" * 50 + "_b", "x" * 50 + "_c"]  # labels past 64 bytes
    for msg in _diverge(names).values():
        assert "for fully_shard '%s' while" % names[2] in msg and "for fully_shard '%s'" % names[1] in msg, msg


def test_non_ascii_and_control_characters_keep_the_message():
    names = ["é" * 30 + "a", "é" * 30 + "b", "é" * 30 + "c"]  # two bytes each
    for msg in _diverge(names).values():
        assert "fully_shard '%s'" % names[1] in msg and "fully_shard '%s'" % names[2] in msg, msg
    for msg in _diverge(["a\tone", "b\ttwo", "c\tthree"]).values():
        assert "for fully_shard 'c three' while" in msg and "for fully_shard 'b two'" in msg, msg


class Stage(nn.Module):
    def __init__(self, name):
        super().__init__()
        self.name = name
        self.add_module(name, nn.Linear(4, 4, bias=False))

    def forward(self, x):
        return getattr(self, self.name)(x)


def test_a_collective_a_gradient_hook_issues_is_the_users_not_the_groups():
    # A weight tied across two pipeline stages: 'emb' on rank 0, 'head' on rank 1, each fully_shard'ed over its
    # own one-rank dp mesh; the all-reduce hook sums the tied gradient over the world (Megatron's embedding group).
    # It failed with "all_reduce ... for fully_shard 'head' while rank 0 ... for fully_shard 'emb'".
    grads = {}

    def fn(_):
        dist.init_process_group()
        rank = dist.get_rank()
        mesh = init_device_mesh("cpu", (2, 1), mesh_dim_names=("pp", "dp"))
        tessel.manual_seed(0)
        name = "emb" if rank == 0 else "head"
        m = Stage(name)
        child = getattr(m, name)
        fully_shard(child, mesh=mesh["dp"])
        fully_shard(m, mesh=mesh["dp"])
        child.set_all_reduce_hook(lambda g: dist.all_reduce(g))
        m(tessel.ones(2, 4) * (rank + 1)).sum().backward()
        grads[rank] = child.weight.grad.full_tensor().numpy()

    dist.run_ranks(2, fn)
    # d/dW sum(x W^T) = column sums of x per output row: 2 rows of (rank + 1), summed over the two ranks
    np.testing.assert_allclose(grads[0], np.full((4, 4), 2.0 * 1 + 2.0 * 2))
    np.testing.assert_allclose(grads[1], grads[0])


class Up(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(4, 6, bias=False) for _ in range(2)])

    def forward(self, x):
        return self.blocks[1](self.blocks[0](x)[..., :4])


def test_tensor_parallel_collectives_are_labelled_with_the_module_path():
    # sequence shards of different lengths: the column-parallel layer's input all-gather fails naming the module
    # by its path in the model (from Python it read "tp '<root>'": each style was applied with its module as root)
    from tessel.distributed.tensor import Shard
    from tessel.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    def fn(_):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
        m = Up()
        parallelize_module(m, mesh, {"blocks.0": ColwiseParallel(input_layouts=Shard(0))})
        with pytest.raises(Exception, match="for tp 'blocks.0' while rank 0 called all_gather"):
            m(tessel.ones(2 + dist.get_rank(), 4))

    dist.run_ranks(2, fn)


def test_python_state_apis_on_modules_created_in_cpp_say_why():
    from tessel.distributed._composable import checkpoint, replicate

    def fn(_):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))
        model = tessel.nn.GPT(tessel.GPTConfig(vocab_size=16, d_model=8, n_layers=2, n_heads=2, seq_len=4), 1)
        block = model.layers[0]
        with pytest.raises(TypeError, match="checkpoint cannot be applied to TransformerBlock: a module created in C"):
            checkpoint([model.layers[1], block])  # nothing is recorded on either
        fully_shard(block, mesh=mesh)
        with pytest.raises(TypeError, match="replicate cannot be applied to TransformerBlock \\(it is managed by "
                                            "fully_shard\\)"):
            replicate(block)
        with pytest.raises(TypeError, match="register_fsdp_forward_method: TransformerBlock was created in C"):
            register_fsdp_forward_method(block, "forward")
        with pytest.raises(AttributeError, match="cannot set attribute 'forward' on TransformerBlock"):
            block.forward = lambda x: x
        with pytest.raises(AttributeError, match="'TransformerBlock' object has no attribute 'tag'"):
            block.tag  # (it named the generic class, 'Module')

    dist.run_ranks(2, fn)
