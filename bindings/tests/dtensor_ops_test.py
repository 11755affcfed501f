"""DTensor ops from Python against the same ops on the full tensors: seeded random cases (elementwise, broadcasting,
reductions, matmul / bmm / einsum / linear, views, indexing, cat / stack, softmax, layer norm, cumsum, sort / topk,
flip / roll, tril / triu, ...) on random placements, Partial inputs and uneven or empty shards included, on a 2 x 2
mesh and a 3-rank one, values and gradients; the *_like and new_* factories keep a DTensor's placements as torch
2.15's do (checked there: Partial becomes Replicate, new_* of another shape is replicated), and random ones agree
across the ranks that share a piece. (Where torch raises on a DTensor mixed with a dense index, e.g. gather and
index_select, tessel computes the result.)"""
import random
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn.functional as F
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

OPS = {  # name: (arity, fn) applied alike to the full tensors and to the DTensors
    "exp": (1, lambda a: a.exp()), "tanh": (1, lambda a: a.tanh()), "relu": (1, lambda a: a.relu()),
    "gelu": (1, lambda a: F.gelu(a)), "neg": (1, lambda a: -a), "mulc": (1, lambda a: a * 3.0),
    "sigmoid": (1, lambda a: a.sigmoid()), "pow": (1, lambda a: a.pow(2)), "clamp": (1, lambda a: a.clamp(-0.5, 0.5)),
    "add": (2, lambda a, b: a + b), "mul": (2, lambda a, b: a * b), "sub": (2, lambda a, b: a - b),
    "div": (2, lambda a, b: a / (b * b + 1.0)), "where": (2, lambda a, b: tessel.where(a > 0, a, b)),
    "sum_d": (1, lambda a: a.sum(-1)), "sum": (1, lambda a: a.sum()), "mean_d": (1, lambda a: a.mean(0)),
    "amax": (1, lambda a: a.amax(-1)), "max_d": (1, lambda a: a.max(-1)[0]), "var": (1, lambda a: a.var(-1)),
    "std": (1, lambda a: a.std(0)), "norm": (1, lambda a: a.norm()), "sq_mean": (1, lambda a: (a * a).mean()),
    "softmax": (1, lambda a: a.softmax(-1)), "logsoftmax": (1, lambda a: F.log_softmax(a, -1)),
    "ln": (1, lambda a: F.layer_norm(a, [a.shape[-1]])), "cumsum": (1, lambda a: a.cumsum(-1)),
    "t": (1, lambda a: a.transpose(0, -1)), "contig_t": (1, lambda a: a.transpose(0, -1).contiguous()),
    "reshape": (1, lambda a: a.reshape(-1)), "flatten": (1, lambda a: a.flatten(0, -1)),
    "permute": (1, lambda a: a.permute(*reversed(range(a.dim())))), "unsq": (1, lambda a: a.unsqueeze(1)),
    "expand": (1, lambda a: a.unsqueeze(0).expand(3, *a.shape)),
    "getitem": (1, lambda a: a[1:] if a.shape[0] > 1 else a[0]), "getitem2": (1, lambda a: a[..., ::2]),
    "chunk0": (1, lambda a: a.chunk(2, dim=-1)[0]), "split1": (1, lambda a: a.split(1, dim=0)[-1]),
    "matmul": (2, lambda a, b: a @ b), "bmm": (2, lambda a, b: a @ b), "cat": (2, lambda a, b: tessel.cat([a, b], 0)),
    "masked_fill": (1, lambda a: a.masked_fill(a > 0.5, 0.0)), "sum_keep": (1, lambda a: a.sum(0, keepdim=True)),
    "mean_all": (1, lambda a: a.mean(list(range(a.dim())))), "squeeze": (1, lambda a: a.unsqueeze(0).squeeze(0)),
    "repeat": (1, lambda a: a.repeat(*([2] + [1] * (a.dim() - 1)))), "flip": (1, lambda a: a.flip(0)),
    "roll": (1, lambda a: a.roll(1, 0)), "stack": (2, lambda a, b: tessel.stack([a, b * 0 + a], 0)),
    "tril": (1, lambda a: a.tril() if a.dim() >= 2 else a), "triu": (1, lambda a: a.triu(1) if a.dim() >= 2 else a),
    "argmax": (1, lambda a: a.argmax(-1)), "topk": (1, lambda a: a.topk(1, dim=-1)[0]),
    "sort": (1, lambda a: a.sort(-1)[0]),
    "index_select": (1, lambda a: a.index_select(0, tessel.tensor([0] * a.shape[0]))),
    "gather": (1, lambda a: a.gather(-1, tessel.zeros(*a.shape, dtype=tessel.int64))),
    "linear": (2, lambda a, b: F.linear(a, b)), "silu": (1, lambda a: F.silu(a)),
    "rms": (1, lambda a: a * (a.pow(2).mean(-1, keepdim=True) + 1e-6).rsqrt()),
    "logsumexp": (1, lambda a: a.logsumexp(-1)), "abs": (1, lambda a: a.abs()),
    "sqrt_abs": (1, lambda a: (a.abs() + 1).sqrt()),
    "minimum": (2, lambda a, b: tessel.minimum(a, b)), "maximum": (2, lambda a, b: tessel.maximum(a, b)),
    "outer_ish": (1, lambda a: a.unsqueeze(-1) * a.unsqueeze(-2)),
    "einsum": (2, lambda a, b: tessel.einsum("ij,jk->ik", a, b)),
}
# Linear in each input: a Partial (pending sum) input gives the sum of the per-rank results.
LINEAR = {"add", "sub", "mulc", "neg", "sum", "sum_d", "mean_d", "t", "contig_t", "reshape", "flatten", "permute",
          "unsq", "expand", "getitem", "getitem2", "chunk0", "split1", "cat", "matmul", "bmm", "cumsum"}


def shapes_for(rng, name):
    if name in ("matmul", "einsum"):
        k = rng.choice([1, 2, 3, 5])
        return [rng.choice([1, 2, 3, 5]), k], [k, rng.choice([1, 2, 3, 5])]
    if name == "bmm":
        k, b = rng.choice([1, 2, 4]), rng.choice([1, 2, 3])
        return [b, rng.choice([1, 2, 5]), k], [b, k, rng.choice([1, 3])]
    shape = [rng.choice([1, 2, 3, 4, 5, 6]) for _ in range(rng.choice([1, 2, 3]))]
    if name == "linear":
        k = rng.choice([1, 2, 3, 4])
        return [rng.choice([1, 2, 3]), k], [rng.choice([1, 2, 5]), k]
    if name == "cat":
        return shape, [rng.choice([1, 2, 3])] + shape[1:]
    if OPS[name][0] == 2 and len(shape) > 1 and rng.random() < 0.3:
        return shape, shape[1:]  # broadcast
    return shape, list(shape)


def random_dtensor(rng, shape, mesh, mesh_shape, partial_ok):
    """(full tensor, a DTensor of it on random placements): Shard / Replicate, and Partial (the full values split
    between the ranks of that mesh dim by fixed weights) where the op is linear."""
    full = tessel.tensor(np.random.default_rng(rng.randrange(1 << 30)).standard_normal(shape).astype(np.float32))
    placements = []
    for _ in range(mesh.ndim):
        c = rng.random()
        placements.append(Replicate() if c < 0.35 else Shard(rng.randrange(len(shape))) if c < 0.85
                          else Partial() if partial_ok else Replicate())
    d = distribute_tensor(full, mesh, [Replicate() if isinstance(p, Partial) else p for p in placements])
    if any(isinstance(p, Partial) for p in placements):
        coord, weight = mesh.get_coordinate(), 1.0
        for i, p in enumerate(placements):
            if isinstance(p, Partial):
                weight *= ([0.3, 0.7] if mesh_shape[i] == 2 else [0.2, 0.5, 0.3])[coord[i]]
        d = DTensor.from_local(d.to_local() * weight, mesh, placements, shape=list(full.shape),
                               stride=list(full.stride()))
    return full, d


def run_cases(world, mesh_shape, seed, cases):
    """The failures (empty when every case matched), each a description of the case."""
    dist.init_process_group()
    mesh = init_device_mesh("cpu", mesh_shape)
    rng, failures, sharded = random.Random(seed), [], 0
    for case in range(cases):
        name = rng.choice(sorted(OPS))
        arity, fn = OPS[name]
        shape_a, shape_b = shapes_for(rng, name)
        with_grad = rng.random() < 0.5 and name not in ("amax", "max_d", "argmax", "topk", "sort")
        desc = (case, name, shape_a, shape_b if arity == 2 else None)
        try:
            pairs = [random_dtensor(rng, s, mesh, mesh_shape, name in LINEAR and not (name == "mul" and i))
                     for i, s in enumerate([shape_a, shape_b][:arity])]
            fulls, dts = [p[0] for p in pairs], [p[1] for p in pairs]
            sharded += any(isinstance(pl, Shard) for d in dts for pl in d.placements)
            if with_grad:
                for t in fulls + dts:
                    t.requires_grad_(True)
            want, got = fn(*fulls), fn(*dts)
            got_full = got.full_tensor() if got.is_distributed else got
            if not np.allclose(got_full.detach().numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-5, equal_nan=True):
                failures.append(desc + ("value",))
                continue
            if with_grad:
                seed_grad = tessel.tensor(
                    np.random.default_rng(case).standard_normal(list(want.shape)).astype(np.float32))
                (want * seed_grad).sum().backward()
                g = distribute_tensor(seed_grad, mesh, [Replicate()] * mesh.ndim) if got.is_distributed else seed_grad
                (got * g).sum().backward()
                for f, d in zip(fulls, dts):
                    dg = d.grad.full_tensor() if d.grad is not None and d.grad.is_distributed else d.grad
                    if dg is None or not np.allclose(dg.numpy(), f.grad.numpy(), rtol=1e-4, atol=1e-5, equal_nan=True):
                        failures.append(desc + ("gradient",))
        except Exception as e:  # noqa: BLE001 - every error is a failure of the case, reported with it
            failures.append(desc + ("%s: %s" % (type(e).__name__, str(e).splitlines()[0][:200]),))
    assert sharded > cases // 2  # most cases have a sharded input
    return failures


@pytest.mark.parametrize("mesh_shape,seed,cases", [((2, 2), 1, 250), ((3,), 2, 150)])
def test_random_ops_on_random_placements_match_the_full_tensors(mesh_shape, seed, cases):
    failures = {}

    def rank_fn(world):
        failures[world.rank] = run_cases(world, mesh_shape, seed, cases)

    tessel.run_ranks(int(np.prod(mesh_shape)), rank_fn)
    assert failures[0] == [], failures[0]


def test_like_and_new_factories_keep_torchs_placements():
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        d = distribute_tensor(tessel.randn(5, 3), mesh, [Shard(0)])
        p = DTensor.from_local(tessel.ones(5, 3), mesh, [Partial()])
        r = distribute_tensor(tessel.randn(4, 3), mesh, [Replicate()])
        out = {
            "zeros_like": tessel.zeros_like(d), "ones_like_partial": tessel.ones_like(p),
            "full_like": tessel.full_like(d, 2.0), "empty_like": tessel.empty_like(d),
            "randn_like": tessel.randn_like(d), "rand_like_replicated": tessel.rand_like(r),
            "new_zeros_same": d.new_zeros(d.shape), "new_ones_same": d.new_ones((5, 3)),
            "new_full_same": d.new_full((5, 3), 7.0), "new_zeros_other": d.new_zeros((2, 2)),
        }
        got[world.rank] = {k: (v.placements, tuple(v.to_local().shape), v.to_local().numpy().copy(),
                               v.full_tensor().numpy()) for k, v in out.items()}

    tessel.run_ranks(2, rank_fn)
    s0, rep = (Shard(0),), (Replicate(),)
    expected = {"zeros_like": s0, "ones_like_partial": rep, "full_like": s0, "empty_like": s0, "randn_like": s0,
                "rand_like_replicated": rep, "new_zeros_same": s0, "new_ones_same": s0, "new_full_same": s0,
                "new_zeros_other": rep}
    for r in range(2):
        for k, placements in expected.items():
            assert got[r][k][0] == placements, k
        assert got[r]["zeros_like"][1] == ((3, 3) if r == 0 else (2, 3))  # torch's chunks of 5 rows
        np.testing.assert_array_equal(got[r]["zeros_like"][3], np.zeros((5, 3), np.float32))
        np.testing.assert_array_equal(got[r]["ones_like_partial"][3], np.ones((5, 3), np.float32))  # not 2s
        np.testing.assert_array_equal(got[r]["new_full_same"][3], np.full((5, 3), 7.0, np.float32))
        assert got[r]["new_zeros_other"][1] == (2, 2)
    # A replicated random tensor holds the same values on every rank; a sharded one is one draw split in two.
    np.testing.assert_array_equal(got[0]["rand_like_replicated"][2], got[1]["rand_like_replicated"][2])
    np.testing.assert_array_equal(got[0]["randn_like"][3], got[1]["randn_like"][3])
    np.testing.assert_array_equal(np.concatenate([got[0]["randn_like"][2], got[1]["randn_like"][2]]),
                                  got[0]["randn_like"][3])


def test_distribute_tensor_onto_a_partial_placement_as_torch():
    # torch's Partial._partition_value: sum gives t / n on each rank, avg / max / min t itself (tessel refused)
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (3,))
        t = tessel.arange(10.0).reshape(5, 2)
        out = {}
        for op in ("sum", "avg", "max", "min"):
            x = distribute_tensor(t.clone(), mesh, [Partial(op)])
            out[op] = (x.placements, x.to_local().numpy().copy(), x.full_tensor().numpy())
        got[world.rank] = out

    tessel.run_ranks(3, rank_fn)
    full = np.arange(10.0, dtype=np.float32).reshape(5, 2)
    for r in range(3):
        for op in ("sum", "avg", "max", "min"):
            assert got[r][op][0] == (Partial(op),)
            np.testing.assert_allclose(got[r][op][1], full / 3 if op == "sum" else full, rtol=1e-6)
            np.testing.assert_allclose(got[r][op][2], full, rtol=1e-6)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
