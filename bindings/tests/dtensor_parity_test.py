"""torch.distributed.tensor behaviours that torch scripts rely on, each found by running the same script under
torch 2.15 and tessel: Module.register_parameter replaces an existing parameter (distribute_module's
partition_fn pattern), distribute_module replicates the buffers and takes torch's two-argument input_fn /
output_fn, DTensor.from_local(run_check=True) broadcasts rank 0's piece along Replicate mesh dims; indexing
that slices a sharded dim whole (x[:, 2:5]) keeps its sharding, and so do sort / topk / argsort / gather along
an unsharded dim; .shape is a Size; chunk / split give tuples; redistribute's forward_dtype / backward_dtype choose
the dtypes its collectives run in, and its Partial targets are torch's public ones."""
import re
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn as nn
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_module, distribute_tensor


def test_register_parameter_replaces_a_parameter_and_refuses_other_attributes_as_torch():
    lin = nn.Linear(2, 3)
    new = nn.Parameter(tessel.ones(4, 2))  # any shape, as torch
    lin.register_parameter("weight", new)
    assert lin.weight is new and dict(lin.named_parameters())["weight"] is new
    frozen = nn.Parameter(tessel.zeros(3), requires_grad=False)
    lin.register_parameter("bias", frozen)
    assert lin.bias is frozen and not lin.bias.requires_grad
    lin.register_parameter("bias", None)
    assert lin.bias is None and "bias" not in dict(lin.named_parameters())
    lin.tag = 3
    with pytest.raises(KeyError, match="attribute 'tag' already exists"):
        lin.register_parameter("tag", nn.Parameter(tessel.ones(1)))
    with pytest.raises(KeyError, match="attribute 'forward' already exists"):
        lin.register_parameter("forward", nn.Parameter(tessel.ones(1)))
    with pytest.raises(KeyError, match="parameter name can"):
        lin.register_parameter("a.b", nn.Parameter(tessel.ones(1)))
    lin.register_buffer("stat", tessel.ones(2))
    with pytest.raises(KeyError, match="attribute 'stat' already exists"):
        lin.register_parameter("stat", nn.Parameter(tessel.ones(1)))


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("scale", tessel.full((4,), 2.0))
        self.register_buffer("scratch", tessel.zeros(4), persistent=False)

    def forward(self, x):
        return self.lin(x) * self.scale


def test_distribute_module_partitions_replicates_the_rest_and_takes_two_argument_hooks():
    w = np.arange(16, dtype=np.float32).reshape(4, 4) / 10

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        model = Scaled()
        model.lin.weight.data.copy_(tessel.from_numpy(w))

        def shard_linear(name, module, mesh):  # torch's docs' partition_fn: re-register each parameter
            if isinstance(module, nn.Linear):
                for pname, p in list(module.named_parameters(recurse=False)):
                    module.register_parameter(pname, nn.Parameter(distribute_tensor(p.detach(), mesh, [Shard(0)])))

        seen = []
        distribute_module(model, mesh, shard_linear,
                          input_fn=lambda inputs, mesh: (seen.append("in"),
                                                         tuple(distribute_tensor(x, mesh, [Replicate()])
                                                               for x in inputs))[1],
                          output_fn=lambda outputs, mesh: (seen.append("out"), outputs.full_tensor())[1])
        assert model.lin.weight.placements == (Shard(0),) and model.lin.bias.placements == (Shard(0),)
        assert isinstance(model.scale, DTensor) and model.scale.placements == (Replicate(),)
        assert isinstance(model.scratch, DTensor)
        assert set(model.state_dict()) == {"lin.weight", "lin.bias", "scale"}  # persistence kept
        x = np.ones((2, 4), np.float32)
        y = model(tessel.from_numpy(x))
        assert seen == ["in", "out"] and not isinstance(y, DTensor)
        np.testing.assert_allclose(y.numpy(), (x @ w.T + model.lin.bias.full_tensor().detach().numpy()) * 2.0,
                                   rtol=1e-6)
        with pytest.raises(RuntimeError, match="only be called once"):
            distribute_module(model, mesh)
        with pytest.raises(ValueError, match="input_fn should take in 3 arguments, but got 1"):
            distribute_module(Scaled(), mesh, input_fn=lambda inputs: inputs)

    tessel.run_ranks(2, rank_fn)


def test_distribute_modules_two_argument_hooks_warn_as_torch():
    def rank_fn(world):  # one rank: warnings.catch_warnings is process-wide, not per rank thread
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (1,))
        with pytest.warns(FutureWarning, match="Deprecating input_fn that takes two arguments"):
            distribute_module(Scaled(), mesh, input_fn=lambda inputs, mesh: inputs)
        with pytest.warns(FutureWarning, match="Deprecating output_fn that takes two arguments"):
            distribute_module(Scaled(), mesh, output_fn=lambda outputs, mesh: outputs)

    tessel.run_ranks(1, rank_fn)


def test_from_local_with_run_check_broadcasts_rank_zeros_replica_along_each_replicate_dim():
    def rank_fn(world):
        dist.init_process_group()
        r = dist.get_rank()
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        mine = tessel.arange(6.0).reshape(2, 3) + 10 * r
        # [Shard(0) on dp, Replicate on tp]: the tp rank 0 of each dp row (ranks 0 and 2) supplies the rows.
        d = DTensor.from_local(mine, mesh, [Shard(0), Replicate()], run_check=True)
        base = 10 * (r // 2 * 2)
        np.testing.assert_array_equal(d.to_local().numpy(), np.arange(6.0).reshape(2, 3) + base)
        np.testing.assert_array_equal(mine.numpy(), np.arange(6.0).reshape(2, 3) + base)  # in place, as torch
        full = d.full_tensor().numpy()
        np.testing.assert_array_equal(full, np.concatenate([np.arange(6.0).reshape(2, 3),
                                                            np.arange(6.0).reshape(2, 3) + 20]))
        # A non-contiguous piece is copied, not written; gradients still reach it.
        leaf = (tessel.arange(6.0).reshape(3, 2) + 10 * r).requires_grad_(True)
        rep = DTensor.from_local(leaf.t(), mesh, [Replicate(), Replicate()], run_check=True)
        np.testing.assert_array_equal(rep.to_local().detach().numpy(), np.arange(6.0).reshape(3, 2).T)
        np.testing.assert_array_equal(leaf.detach().numpy(), np.arange(6.0).reshape(3, 2) + 10 * r)
        rep.to_local().sum().backward()
        np.testing.assert_array_equal(leaf.grad.numpy(), np.ones((3, 2)))
        # Without run_check, nothing moves (torch's default trusts the caller).
        trusted = DTensor.from_local(tessel.full((2,), float(r)), mesh, [Replicate(), Replicate()])
        assert trusted.to_local().tolist() == [float(r)] * 2

    tessel.run_ranks(4, rank_fn)


def test_mesh_lookups_full_tensor_redistribute_and_clip_grad_norm_follow_torch():
    def rank_fn(world):
        dist.init_process_group()
        r = dist.get_rank()
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        assert (mesh.get_local_rank(0), mesh.get_local_rank(1), mesh.get_local_rank(-1)) == (r // 2, r % 2, r % 2)
        with pytest.raises(KeyError, match="Invalid mesh_dim_names"):
            mesh["bad"]
        with pytest.raises(KeyError, match="Invalid mesh_dim_names"):
            mesh["dp", "bad"]
        x = tessel.arange(8.0).reshape(4, 2).requires_grad_(True)
        d = distribute_tensor(x, mesh, [Shard(0), Replicate()])
        assert distribute_tensor(d, mesh, [Shard(-2), Replicate()]) is d  # torch: returned as it is
        with pytest.raises(ValueError, match="call `redistribute` instead"):
            distribute_tensor(d, mesh, [Replicate(), Replicate()])
        # full_tensor(grad_placements=[Partial(), Partial()]): each rank's gradient of the full tensor is a
        # partial sum (torch's hint), so d's gradient is their sum 1 + 2 + 3 + 4 on every rank.
        leaf = distribute_tensor(x.detach(), mesh, [Shard(0), Replicate()]).requires_grad_(True)
        (leaf.full_tensor(grad_placements=[Partial(), Partial()]) * (r + 1)).sum().backward()
        assert leaf.grad.placements == (Shard(0), Replicate())
        np.testing.assert_array_equal(leaf.grad.to_local().numpy(), np.full((2, 2), 10.0))
        half = d.redistribute(mesh, [Replicate(), Replicate()], forward_dtype=tessel.bfloat16)
        assert half.dtype == tessel.bfloat16 and half.to_local().float().tolist() == x.detach().tolist()
        # clip_grad_norm_: the gradients' dtype (float32), a Replicate DTensor for DTensor gradients, any order.
        w = nn.Parameter(distribute_tensor(tessel.ones(4, 2), mesh, [Shard(0), Replicate()]))
        w.grad = distribute_tensor(tessel.full((4, 2), 3.0), mesh, [Shard(0), Replicate()])
        for order, want in ((2.0, np.sqrt(8 * 9.0)), (1.0, 24.0), (float("inf"), 3.0)):
            norm = nn.utils.clip_grad_norm_([w], 1e9, norm_type=order)
            assert norm.dtype == tessel.float32 and isinstance(norm, DTensor), order
            assert norm.placements == (Replicate(), Replicate()), order
            np.testing.assert_allclose(float(norm.full_tensor()), want, rtol=1e-6)

    tessel.run_ranks(4, rank_fn)
    plain = nn.Parameter(tessel.ones(3))
    plain.grad = tessel.full((3,), 2.0)
    norm = nn.utils.clip_grad_norm_([plain], 1.0)
    assert norm.dtype == tessel.float32 and not isinstance(norm, DTensor)
    np.testing.assert_allclose(float(norm), np.sqrt(12.0), rtol=1e-6)


def test_indexing_that_keeps_a_sharded_dim_whole_keeps_its_sharding_without_communication():
    from tessel.distributed.tensor.debug import CommDebugMode
    full = np.arange(60, dtype=np.float32).reshape(5, 12)  # 5 rows over 2 ranks: pieces of 3 and 2

    def rank_fn(world):
        dist.init_process_group()
        r = dist.get_rank()
        mesh = init_device_mesh("cpu", (2,))
        x = distribute_tensor(tessel.from_numpy(full), mesh, [Shard(0)]).requires_grad_(True)
        rows = (3, 2)[r]
        cases = [(lambda t: t[:, 2:5], full[:, 2:5]), (lambda t: t[:, 3], full[:, 3]),
                 (lambda t: t[..., ::2], full[..., ::2]), (lambda t: t[:, None], full[:, None]),
                 (lambda t: t[:], full[:]), (lambda t: t[:, None, 1:4].expand(5, 2, 3),
                                             np.broadcast_to(full[:, None, 1:4], (5, 2, 3)))]
        for i, (index, want) in enumerate(cases):
            with CommDebugMode() as mode:
                y = index(x)
            assert mode.get_total_counts() == 0, i
            assert y.placements == (Shard(0),), i
            assert tuple(y.shape) == want.shape and y.to_local().shape[0] == rows, i
            np.testing.assert_array_equal(y.full_tensor().detach().numpy(), want)
        # The backward of x[:, 2:5] stays sharded too: a Shard(0) gradient lands in columns 2..4 of this rank's
        # rows.
        w = np.arange(15, dtype=np.float32).reshape(5, 3)
        w_d = distribute_tensor(tessel.from_numpy(w), mesh, [Shard(0)])
        with CommDebugMode() as mode:
            (x[:, 2:5] * w_d).sum().backward()
        assert mode.get_total_counts() == 0
        assert x.grad.placements == (Shard(0),)
        want = np.zeros((5, 12), np.float32)
        want[:, 2:5] = w
        np.testing.assert_array_equal(x.grad.full_tensor().numpy(), want)
        # A range that is not all of the sharded dim still needs it whole (torch: Replicate).
        with CommDebugMode() as mode:
            y = x[1:3]
        assert mode.get_total_counts() == 1 and y.placements == (Replicate(),)
        np.testing.assert_array_equal(y.to_local().detach().numpy(), full[1:3])

    tessel.run_ranks(2, rank_fn)


def test_sort_topk_argsort_and_gather_along_a_whole_dim_keep_the_layout_without_communication():
    from tessel.distributed.tensor.debug import CommDebugMode
    rng = np.random.default_rng(3)
    full = rng.standard_normal((5, 6)).astype(np.float32)  # rows split 3 / 2
    idx = rng.integers(0, 6, size=(5, 2))
    grad = rng.standard_normal((5, 2)).astype(np.float32)

    def dense(fn):
        x = tessel.from_numpy(full).requires_grad_(True)
        out = fn(x, tessel.from_numpy(idx))
        (out * tessel.from_numpy(grad)).sum().backward()
        return out.detach().numpy(), x.grad.numpy()

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        cases = {
            "topk": lambda t, i: t.topk(2, dim=1).values,
            "topk smallest": lambda t, i: tessel.topk(t, 2, dim=-1, largest=False)[0],
            "sort": lambda t, i: t.sort(dim=1, descending=True).values[:, :2],
            "gather": lambda t, i: t.gather(1, i),
        }
        for name, fn in cases.items():
            want, want_grad = dense(fn)
            x = distribute_tensor(tessel.from_numpy(full), mesh, [Shard(0)]).requires_grad_(True)
            i = distribute_tensor(tessel.from_numpy(idx), mesh, [Shard(0)])
            with CommDebugMode() as mode:
                out = fn(x, i)
            assert mode.get_total_counts() == 0, name
            assert out.placements == (Shard(0),), name
            np.testing.assert_array_equal(out.full_tensor().detach().numpy(), want, err_msg=name)
            g = distribute_tensor(tessel.from_numpy(grad), mesh, [Shard(0)])
            (out * g).sum().backward()
            assert x.grad.placements == (Shard(0),), name
            np.testing.assert_array_equal(x.grad.full_tensor().numpy(), want_grad, err_msg=name)
        x = distribute_tensor(tessel.from_numpy(full), mesh, [Shard(0)])
        order = x.argsort(dim=1)
        assert order.placements == (Shard(0),) and order.dtype == tessel.int64
        np.testing.assert_array_equal(order.full_tensor().numpy(), np.argsort(full, axis=1, kind="stable"))
        ind = x.topk(3, dim=1).indices
        assert ind.placements == (Shard(0),)
        np.testing.assert_array_equal(ind.full_tensor().numpy(), np.argsort(-full, axis=1, kind="stable")[:, :3])
        # Along the sharded dim the values must meet: Replicate, as torch.
        down = x.sort(dim=0)
        assert down.values.placements == (Replicate(),)
        np.testing.assert_array_equal(down.values.full_tensor().numpy(), np.sort(full, axis=0))

    tessel.run_ranks(2, rank_fn)


def test_ops_tessel_computes_on_the_host_work_on_dtensors_piece_by_piece():
    """pow with a tensor exponent, bit shifts, nextafter, the special functions, integer division (gcd, div
    trunc) and index_put(accumulate=True) raised on DTensors (or leaked a dense tensor); each now equals the same
    op on the full tensor and keeps the layout."""
    import tessel.special as special
    full = (np.arange(30, dtype=np.float32).reshape(5, 6) / 7 - 1)
    ints = np.arange(30).reshape(5, 6) % 7

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        for placement in (Shard(0), Shard(1), Replicate()):
            x = distribute_tensor(tessel.from_numpy(full), mesh, [placement])
            xi = distribute_tensor(tessel.from_numpy(ints), mesh, [placement])
            dx, di = tessel.from_numpy(full), tessel.from_numpy(ints)
            cases = {
                "pow": lambda a, i: tessel.pow(a.abs() + 0.5, a),
                "2 ** x": lambda a, i: 2 ** a,
                "ldexp": lambda a, i: tessel.ldexp(a, i),
                "lshift": lambda a, i: i << 2,
                "rshift": lambda a, i: i >> 1,
                "nextafter": lambda a, i: tessel.nextafter(a, a + 1),
                "i0": lambda a, i: special.i0(a),
                "i1e": lambda a, i: special.i1e(a),
                "polygamma": lambda a, i: tessel.polygamma(1, a.abs() + 0.5),
                "igamma": lambda a, i: tessel.igamma(a.abs() + 0.5, a.abs() + 0.3),
                "zeta": lambda a, i: special.zeta(a.abs() + 2.0, a.abs() + 1.0),
                "gcd": lambda a, i: tessel.gcd(i, i + 3),
                "div trunc": lambda a, i: tessel.div(i - 3, 2, rounding_mode="trunc"),
                "int %": lambda a, i: (i - 3) % 4,
            }
            for name, fn in cases.items():
                want = fn(dx, di).numpy()
                with np.errstate(all="ignore"):
                    got = fn(x, xi)
                assert isinstance(got, DTensor) and got.placements == (placement,), (name, placement)
                np.testing.assert_array_equal(got.full_tensor().numpy(), want, err_msg="%s %s" % (name, placement))
            rows, cols = tessel.tensor([0, 0, 4]), tessel.tensor([1, 1, 5])
            want = dx.index_put((rows, cols), tessel.tensor([1.0, 2.0, 3.0]), accumulate=True).numpy()
            rep = lambda t: distribute_tensor(t, mesh, [Replicate()])  # noqa: E731
            got = x.index_put((rep(rows), rep(cols)), rep(tessel.tensor([1.0, 2.0, 3.0])), accumulate=True)
            assert got.placements == (placement,)
            np.testing.assert_array_equal(got.full_tensor().numpy(), want)
        leaf = distribute_tensor(tessel.from_numpy(full), mesh, [Shard(0)]).requires_grad_(True)
        tessel.pow(2.0, leaf).sum().backward()  # the gradient flows through the pieces: 2^x ln 2
        np.testing.assert_allclose(leaf.grad.full_tensor().numpy(), 2.0 ** full * np.log(2.0), rtol=1e-6)

    tessel.run_ranks(2, rank_fn)


def test_shape_is_a_size_and_chunk_and_split_return_tuples_as_torch():
    import pickle
    x = tessel.arange(12.0).reshape(3, 4)
    assert type(x.shape) is tessel.Size and type(x.size()) is tessel.Size and x.shape == (3, 4)
    assert x.shape.numel() == 12 and x.shape[1:] == tessel.Size([4]) and type(x.shape[1:]) is tessel.Size
    assert type(x.shape[0]) is int and type(x.shape + (5,)) is tessel.Size and x.shape + (5,) == (3, 4, 5)
    assert pickle.loads(pickle.dumps(x.shape)) == (3, 4) and repr(x.shape) == "tessel.Size([3, 4])"
    assert tessel.zeros(x.shape).shape == (3, 4) and x.reshape(x.shape[::-1]).shape == (4, 3)
    for parts in (x.chunk(2, 1), x.split(3, 1), x.split([1, 3], 1), tessel.split(x, 2), tessel.chunk(x, 3),
                  x.split_with_sizes([1, 2])):
        assert type(parts) is tuple, parts
    assert [tuple(p.shape) for p in x.split([1, 3], 1)] == [(3, 1), (3, 3)]

    def rank_fn(world):
        dist.init_process_group()
        d = distribute_tensor(x, init_device_mesh("cpu", (2,)), [Shard(1)])
        assert type(d.shape) is tessel.Size and d.shape.numel() == 12
        assert type(d.chunk(2, 0)) is tuple

    tessel.run_ranks(2, rank_fn)



def test_diagonal_and_unfold_of_a_dtensor_write_through_when_their_dims_are_not_sharded():
    """x.diagonal().fill_(v) and x.unfold(...).mul_(s) on a DTensor whose diagonal / unfolded dims are not sharded
    change x, as torch's (the DTensor forms were copies: the writes were lost); out of place they keep the
    full tensor's values and gradients; under autograd the in-place write refuses clearly."""
    x = tessel.arange(18.0).reshape(2, 3, 3)
    want_diag, want_unfold = x.clone(), x.clone()
    want_diag.diagonal(0, 1, 2).fill_(-1.0)
    want_unfold.unfold(2, 1, 2).mul_(0.0)

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        for pl in (Replicate(), Shard(0)):
            d = distribute_tensor(x.clone(), mesh, [pl])
            v = d.diagonal(0, 1, 2)
            assert tuple(v.shape) == (2, 3) and list(v.placements) == [pl]
            v.fill_(-1.0)
            np.testing.assert_array_equal(d.full_tensor().numpy(), want_diag.numpy())
            d = distribute_tensor(x.clone(), mesh, [pl])
            d.unfold(2, 1, 2).mul_(0.0)
            np.testing.assert_array_equal(d.full_tensor().numpy(), want_unfold.numpy())
            leaf = distribute_tensor(x.clone(), mesh, [pl]).requires_grad_(True)
            out = leaf.diagonal(1, 1, 2) * tessel.tensor(2.0) + leaf.unfold(2, 2, 1).sum()
            np.testing.assert_array_equal(out.full_tensor().detach().numpy(), (x.diagonal(1, 1, 2) * 2 +
                                                                                x.unfold(2, 2, 1).sum()).numpy())
            out.sum().backward()
            plain = x.clone().requires_grad_(True)
            (plain.diagonal(1, 1, 2) * 2 + plain.unfold(2, 2, 1).sum()).sum().backward()
            np.testing.assert_array_equal(leaf.grad.full_tensor().numpy(), plain.grad.numpy())
        y = distribute_tensor(x.clone(), mesh, [Replicate()]).requires_grad_(True) * 1.0
        with pytest.raises(RuntimeError, match="which something else shares"):
            y.diagonal(0, 1, 2).mul_(3.0)

    tessel.run_ranks(2, rank_fn)


def test_an_in_place_write_to_a_dtensor_views_copy_refuses_instead_of_being_lost():
    """x[2:6].mul_(3) on a Shard(0) DTensor redistributes x[2:6] first, so the result is a copy: the write was lost
    silently (as in torch's DTensor); it raises now, naming the view op. Real views (a slice of an unsharded dim)
    and x[...] = v still write x."""
    x = tessel.arange(21.0).reshape(7, 3)

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (4,))
        for pl, write, op in ((0, lambda t: t[2:6].mul_(3.0), "mul_"), (0, lambda t: t[1:4].fill_(7.0), "fill_"),
                              (0, lambda t: t.view(21).add_(1.0), "view"), (1, lambda t: t[:, 0].zero_(), "zero_"),
                              (0, lambda t: t.chunk(2, 0)[1].add_(1.0), "chunk")):
            d = distribute_tensor(x.clone(), mesh, [Shard(pl)])
            with pytest.raises(ValueError, match="is a copy, not a view: the .* that made it had to redistribute") as e:
                write(d)
            assert op in str(e.value)
            np.testing.assert_array_equal(d.full_tensor().numpy(), x.numpy())  # untouched
        d = distribute_tensor(x.clone(), mesh, [Shard(0)])
        d[:, 1:3].add_(1.0)  # a view: column slices of row shards
        d[1:4] = 7.0
        want = x.clone()
        want[:, 1:3] += 1.0
        want[1:4] = 7.0
        np.testing.assert_array_equal(d.full_tensor().numpy(), want.numpy())
        y = distribute_tensor(x.clone(), mesh, [Shard(0)]).requires_grad_(True) * 1.0
        with pytest.raises(ValueError, match="is a copy, not a view"):
            y[2:5].mul_(3.0)  # under autograd it rebound the copy: wrong values and gradients, silently

    tessel.run_ranks(4, rank_fn)

if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_redistribute_runs_its_collectives_in_forward_and_backward_dtype_and_refuses_partial_targets_as_torch():
    # Rank 0's gradient is 1, rank 1's 2^-8: their sum 1 + 2^-8 is exact in float32 and a tie that bfloat16 rounds
    # to 1.0, so each gradient says which dtype the backward reduce-scatter ran in (torch 2.15 prints the same).
    def rank_fn(world):
        dist.init_process_group()
        r = dist.get_rank()
        mesh = init_device_mesh("cpu", (2,))
        bf16 = tessel.bfloat16
        for options, out_dtype, summed in ((dict(), tessel.float32, 1.00390625),
                                           (dict(forward_dtype=bf16), bf16, 1.00390625),  # backward: input's dtype
                                           (dict(backward_dtype=bf16), tessel.float32, 1.0),
                                           (dict(forward_dtype=bf16, backward_dtype=tessel.float32), bf16, 1.00390625)):
            d = distribute_tensor(tessel.arange(8.0).reshape(4, 2), mesh, [Shard(0)]).requires_grad_(True)
            y = d.redistribute(mesh, [Replicate()], **options)
            assert y.dtype == out_dtype and y.placements == (Replicate(),), options
            assert y.to_local().float().tolist() == np.arange(8.0).reshape(4, 2).tolist(), options
            g = tessel.full((4, 2), 1.0 if r == 0 else 2.0 ** -8, dtype=out_dtype)
            y.to_local(grad_placements=[Partial()]).backward(g)
            assert d.grad.dtype == tessel.float32 and d.grad.placements == (Shard(0),), options
            assert d.grad.to_local().double().tolist() == [[summed] * 2] * 2, options
        s = distribute_tensor(tessel.arange(4.0), mesh, [Shard(0)])
        assert s.redistribute(mesh, [Partial()]).to_local().tolist() == ([0.0, 1.0, 0.0, 0.0] if r == 0
                                                                          else [0.0, 0.0, 2.0, 3.0])
        rep = distribute_tensor(tessel.arange(4.0), mesh, [Replicate()])
        for source, target, text in ((rep, Partial(), "from R to P(sum)"), (rep, Partial("max"), "from R to P(max)"),
                                     (s, Partial("avg"), "from S(0) to P(avg)")):
            with pytest.raises(RuntimeError, match=re.escape(f"Can not redistribute {text}, only Shard to Partial(sum) "
                                                             "redistribution is supported!")):
                source.redistribute(mesh, [target])
        partial = DTensor.from_local(tessel.ones(4), mesh, [Partial()])
        assert partial.redistribute(mesh, [Partial()]).to_local().tolist() == [1.0] * 4  # unchanged: allowed

    tessel.run_ranks(2, rank_fn)
