"""tessel.distributed.tensor.parallel against torch's rules on 2 rank threads, each expectation what torch 2.15
printed for the same script on 2 gloo ranks: PrepareModuleOutput over outputs that hold None or an int, nested
plan dicts, the styles' attributes (read and set), plan entries applied in the dict's order, distribute_tensor
refusing a non-leaf tensor, the unresolved-key warnings (one per matched parent, naming the rest of the key),
the styles' AssertionErrors, and parallelize_module without a mesh outside `with mesh:`."""
import sys
import warnings

import numpy as np
import pytest

import tessel
import tessel.nn as nn
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from tessel.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, PrepareModuleInputOutput,
                                                PrepareModuleOutput, RowwiseParallel, SequenceParallel,
                                                parallelize_module)
from ranks_testing import on_ranks as ranks

W = 2


def on_ranks(fn):
    """fn(rank, mesh) on 2 rank threads with a 1-D "tp" mesh; returns {rank: result}."""
    return ranks(W, lambda rank: fn(rank, init_device_mesh("cpu", (W,), mesh_dim_names=("tp",))))


def rows(rank):
    """This rank's 2 rows of arange(12).reshape(4, 3) / 4."""
    return (tessel.arange(12, dtype=tessel.float32).reshape(4, 3) / 4)[2 * rank:2 * rank + 2].clone()


def det(mod):
    """Parameters set alike in torch and tessel: linspace(-0.5, 0.5) scaled per parameter (sorted by name)."""
    with tessel.no_grad():
        for i, (_, p) in enumerate(sorted(mod.named_parameters())):
            p.copy_(tessel.linspace(-0.5, 0.5, p.numel()).reshape(p.shape) * (1 + 0.1 * i))
    return mod


def r4(t):
    return np.round(t.detach().numpy().astype(np.float64), 4).tolist()


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.proj = nn.Linear(4, 8), nn.Linear(8, 4)

    def forward(self, x):
        return self.proj(tessel.relu(self.fc(x)))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = MLP()

    def forward(self, x):
        return x + self.mlp(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer(), Layer()])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


TWICE_ALL_ROWS = [[0.0, 0.5, 1.0], [1.5, 2.0, 2.5], [3.0, 3.5, 4.0], [4.5, 5.0, 5.5]]


def test_prepare_module_output_passes_none_and_int_outputs_as_torch():
    # tessel flattened the output to its tensors for a C++ hook: "the module returned 1 outputs but output_layouts
    # has 2 entries"; torch's hook walks the raw output position by position and skips the None layouts
    class Pair(nn.Module):
        def forward(self, a):
            return a * 2, None

    class WithInt(nn.Module):
        def forward(self, a):
            return a * 2, 7

    class Triple(nn.Module):
        def forward(self, a):
            return a * 2, None, a + 1

    def fn(rank, mesh):
        gathered = PrepareModuleOutput(output_layouts=(Shard(0), None), desired_output_layouts=(Replicate(), None))
        pair = parallelize_module(Pair(), mesh, gathered)(rows(rank))
        with_int = parallelize_module(WithInt(), mesh, gathered)(rows(rank))
        triple = parallelize_module(Triple(), mesh, PrepareModuleOutput(
            output_layouts=(Shard(0), None, Shard(0)), desired_output_layouts=(Replicate(), None, Shard(0)),
            use_local_output=False))(rows(rank))
        return ((type(pair).__name__, r4(pair[0]), pair[1], isinstance(pair[0], DTensor)),
                (r4(with_int[0]), with_int[1]),
                (triple[0].placements, r4(triple[0].to_local()), triple[1], triple[2].placements,
                 tuple(triple[2].shape), r4(triple[2].to_local())))

    got = on_ranks(fn)
    assert got[0][0] == ("tuple", TWICE_ALL_ROWS, None, False)  # torch's, both ranks
    assert got[0][1] == (TWICE_ALL_ROWS, 7)
    assert got[0][2] == ((Replicate(),), TWICE_ALL_ROWS, None, (Shard(0),), (4, 3), [[1.0, 1.25, 1.5],
                                                                                   [1.75, 2.0, 2.25]])
    assert got[1][2][5] == [[2.5, 2.75, 3.0], [3.25, 3.5, 3.75]] and got[1][:2] == got[0][:2]


def test_a_nested_plan_dict_applies_to_each_matched_submodule_as_torch():
    # tessel: TypeError "plan['layers.*'] must be a ParallelStyle"; torch recurses with the inner dict
    x = tessel.arange(8, dtype=tessel.float32).reshape(2, 4) / 8

    def fn(rank, mesh):
        m = det(Model())
        parallelize_module(m, mesh, {"layers.*": {"mlp.fc": ColwiseParallel(), "mlp.proj": RowwiseParallel()}})
        return {n: str(p.placements) for n, p in m.named_parameters()}, r4(m(x))

    for placements, y in on_ranks(fn).values():
        assert placements == {  # torch's
            "layers.0.mlp.fc.weight": "(Shard(dim=0),)", "layers.0.mlp.fc.bias": "(Shard(dim=0),)",
            "layers.0.mlp.proj.weight": "(Shard(dim=1),)", "layers.0.mlp.proj.bias": "(Replicate(),)",
            "layers.1.mlp.fc.weight": "(Shard(dim=0),)", "layers.1.mlp.fc.bias": "(Shard(dim=0),)",
            "layers.1.mlp.proj.weight": "(Shard(dim=1),)", "layers.1.mlp.proj.bias": "(Replicate(),)"}
        np.testing.assert_allclose(y, [[-5.0377, -0.917, 3.2036, 7.3242], [-8.1985, -0.9703, 6.2579, 13.4861]],
                                   rtol=0, atol=2e-4)  # torch's (the unsharded model's too)


def test_styles_keep_torchs_attributes():
    c, r, s = ColwiseParallel(), RowwiseParallel(), SequenceParallel()
    pmi = PrepareModuleInput(input_layouts=Shard(0), desired_input_layouts=Replicate())
    pmo = PrepareModuleOutput(output_layouts=Shard(0), desired_output_layouts=Replicate())
    pmio = PrepareModuleInputOutput(input_layouts=(Shard(0), None), desired_input_layouts=(Replicate(), None),
                                    output_layouts=Replicate(), desired_output_layouts=Shard(0))
    got = [str(v) for v in (
        c.input_layouts, c.output_layouts, c.desired_input_layouts, c.use_local_output,
        r.input_layouts, r.output_layouts, r.use_local_output, s.sequence_sharding, s.use_local_output,
        pmi.input_layouts, pmi.desired_input_layouts, pmi.input_kwarg_layouts, pmi.desired_input_kwarg_layouts,
        pmi.use_local_output, pmi.with_kwargs, pmo.output_layouts, pmo.desired_output_layouts, pmo.use_local_output,
        pmio.prepare_module_input.input_layouts, pmio.prepare_module_input.use_local_output,
        pmio.prepare_module_output.output_layouts, pmio.prepare_module_output.desired_output_layouts)]
    assert got == ["(Replicate(),)", "(Shard(dim=-1),)", "(Replicate(),)", "True", "(Shard(dim=-1),)",
                   "(Replicate(),)", "True", "(Shard(dim=1),)", "False", "(Shard(dim=0),)", "(Replicate(),)", "{}",
                   "{}", "False", "False", "(Shard(dim=0),)", "(Replicate(),)", "True", "(Shard(dim=0), None)",
                   "False", "(Replicate(),)", "(Shard(dim=0),)"]  # torch's
    assert c.output_layouts == (Shard(-1),) and isinstance(c.output_layouts, tuple)


def test_a_styles_attributes_set_after_init_are_applied_as_torch():
    # tessel kept a frozen C++ style built in __init__: a subclass's self.output_layouts and a caller's
    # s.use_local_output = False were silently ignored
    class MyCol(ColwiseParallel):
        def __init__(self):
            super().__init__()
            self.output_layouts = (Replicate(),)

    def fn(rank, mesh):
        lin = parallelize_module(det(nn.Linear(4, 6)), mesh, MyCol())
        y = lin(rows(rank)[:, :2].repeat(1, 2))
        s = RowwiseParallel()
        s.use_local_output = False
        lin2 = parallelize_module(det(nn.Linear(4, 6)), mesh, s)
        y2 = lin2(rows(rank)[:, :2])
        return r4(y), (isinstance(y2, DTensor), y2.placements, r4(y2.to_local()))

    got = on_ranks(fn)
    np.testing.assert_allclose(got[0][0], [[-0.7272, -0.4315, -0.1359, 0.7337, 2.1772, 3.6207],
                                           [-2.162, -1.2924, -0.4228, 1.0207, 3.038, 5.0554]], rtol=0, atol=2e-4)
    is_dtensor, placements, local = got[0][1]
    assert (is_dtensor, placements) == (True, (Replicate(),))  # torch's
    np.testing.assert_allclose(local, [[-2.0185, -1.1489, -0.2793, 0.5902, 1.4598, 2.3293],
                                       [-3.4533, -2.0098, -0.5663, 0.8772, 2.3207, 3.7641]], rtol=0, atol=2e-4)


def test_plan_entries_apply_in_the_dicts_order_as_torch():
    # tessel applied every C++ style first and the PrepareModuleInput hooks after, so Colwise's input hook ran
    # before the PrepareModuleInput that gathers the rows: "linear: got mixed DTensor and dense tensor inputs"
    def fn(rank, mesh):
        seq = nn.Sequential(det(nn.Linear(4, 6)))
        gather = PrepareModuleInput(input_layouts=Shard(0), desired_input_layouts=Replicate(), use_local_output=True)
        parallelize_module(seq, mesh, {"0": gather, "?": ColwiseParallel()})
        x = (tessel.arange(16, dtype=tessel.float32).reshape(4, 4) / 8)[2 * rank:2 * rank + 2].clone()
        x.requires_grad_()
        y = seq(x)
        (y * y).sum().backward()
        return isinstance(y, DTensor), tuple(y.shape), r4(y), r4(x.grad)

    is_dtensor, shape, y, grad = on_ranks(fn)[0]
    assert (is_dtensor, shape) == (False, (4, 3))  # torch's: all 4 rows, this rank's 3 columns
    np.testing.assert_allclose(y, [[-0.8288, -0.4853, -0.1418], [-1.7853, -1.0592, -0.3332],
                                   [-2.7418, -1.6332, -0.5245], [-3.6984, -2.2071, -0.7158]], rtol=0, atol=2e-4)
    np.testing.assert_allclose(grad, [[2.2741, 2.2912, 2.3084, 2.3255], [4.8359, 4.853, 4.8702, 4.8874]],
                               rtol=0, atol=2e-4)


def test_distribute_tensor_refuses_a_non_leaf_tensor_as_torch():
    def fn(rank, mesh):
        leaf = tessel.ones(4, 2, requires_grad=True)
        with pytest.raises(RuntimeError) as e:  # tessel made a new leaf silently
            distribute_tensor(leaf * 2, mesh, [Shard(0)])
        return (str(e.value), distribute_tensor(leaf, mesh, [Shard(0)]).placements,
                distribute_tensor(tessel.ones(4, 2) * 2, mesh, [Shard(0)]).placements)

    for message, *placements in on_ranks(fn).values():
        assert message == "`distribute_tensor` should be used to distribute leaf tensors! but found non-leaf tensor!"
        assert placements == [(Shard(0),), (Shard(0),)]  # a leaf, or a result that needs no grad: distributed


def test_unresolved_plan_keys_warn_as_torch_once_per_matched_parent_naming_the_rest_of_the_key():
    def fn(rank, mesh):
        parallelize_module(Model(), mesh, {"layers.*.mlp.nope": ColwiseParallel(),
                                           "layers.*.mlp.fc": ColwiseParallel(), "norm": SequenceParallel(),
                                           "layers.1.mlp.fc.weight": ColwiseParallel()})

    with warnings.catch_warnings(record=True) as caught:  # (on the main thread: catch_warnings is process-wide)
        warnings.simplefilter("always")
        on_ranks(fn)
    mlp = ("MLP(\n  (fc): Linear(in_features=4, out_features=8, bias=True)\n  (proj): Linear(in_features=8, "
           "out_features=4, bias=True)\n)")
    model = ("Model(\n  (layers): ModuleList(\n    (0-1): 2 x Layer(\n      (mlp): MLP(\n        (fc): Linear("
             "in_features=4, out_features=8, bias=True)\n        (proj): Linear(in_features=8, out_features=4, "
             "bias=True)\n      )\n    )\n  )\n)")
    want = ["Parallelize plan key 'nope' could not be resolved: no submodule matching token 'nope' in module %s, "
            "skipping this plan entry." % mlp] * 2 + [
        "Parallelize plan key 'norm' could not be resolved: no submodule matching token 'norm' in module %s, "
        "skipping this plan entry." % model,
        "Parallelize plan key 'weight' could not be resolved: no submodule matching token 'weight' in module "
        "Linear(in_features=4, out_features=8, bias=True), skipping this plan entry."]  # torch's, per rank
    assert sorted(str(w.message) for w in caught) == sorted(want * W)


def test_the_styles_checks_raise_torchs_assertion_errors():
    with pytest.raises(AssertionError, match="^input_layouts and desired_input_layouts should have same length!$"):
        PrepareModuleInput(input_layouts=(Shard(0), Shard(1)), desired_input_layouts=Replicate())
    with pytest.raises(AssertionError, match="^desired module inputs should not be None!$"):
        PrepareModuleInput(input_layouts=Shard(0))
    with pytest.raises(AssertionError, match="^input_kwarg_layouts and desired_input_kwarg_layouts should have same "
                                             "length!$"):
        PrepareModuleInput(input_kwarg_layouts={"mask": Shard(0)})
    PrepareModuleInput(desired_input_kwarg_layouts={"mask": Shard(0)})  # torch: no kwarg hook, nothing to check
    with pytest.raises(AssertionError, match="^output_layouts and desired_output_layouts should have same length!$"):
        PrepareModuleOutput(output_layouts=(Shard(0), Shard(1)), desired_output_layouts=Replicate())

    class Two(nn.Module):
        def forward(self, a, n):
            return a * n

    def fn(rank, mesh):
        two = parallelize_module(Two(), mesh, PrepareModuleInput(input_layouts=(Shard(0), Shard(0)),
                                                                 desired_input_layouts=(Replicate(), Replicate())))
        with pytest.raises(AssertionError) as e:
            two(rows(rank), 3)
        return str(e.value)

    assert set(on_ranks(fn).values()) == {"expecting input to be a torch.Tensor!"}


def test_parallelize_module_without_a_mesh_takes_the_current_one_as_torch():
    # tessel took a mesh over the whole world when none was given and none was entered
    def fn(rank, mesh):
        with pytest.raises(RuntimeError, match="^No device mesh is currently active!$"):
            parallelize_module(nn.Linear(4, 6), parallelize_plan=ColwiseParallel())
        with pytest.raises(RuntimeError, match="^No device mesh is currently active!$"):
            parallelize_module(nn.Linear(4, 6))  # (the mesh before the plan, as torch)
        with mesh:
            return parallelize_module(nn.Linear(4, 6), parallelize_plan=ColwiseParallel()).weight.placements

    assert set(on_ranks(fn).values()) == {(Shard(0),)}


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
