"""The DTensor strategies that follow torch 2.15's single-dim expansion (pointwise on meshes of several dims,
softmax, reductions, max(dim), cat, stack, layer_norm, matmul, addmm / baddbmm) on uneven shards: a 2 x 3 mesh of
thread ranks, dims of 5 and 7 split over 2 and 3 ranks, random input placements (Partial included); every output
and every input gradient of sum(y * y) against the same ops on dense tensors."""
import itertools
import random

import numpy as np

import tessel
import tessel.nn.functional as F
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.tensor import Partial, Replicate, Shard
from ranks_testing import on_ranks as ranks, placed

MESH = (2, 3)
rng = np.random.default_rng(3)
SH = {"a": (5, 7), "row": (7,), "col": (5, 1), "b3": (3, 5, 7), "m": (7, 6), "bm": (3, 7, 4), "c56": (5, 6), "c6": (6,),
      "c354": (3, 5, 4)}
DATA = {k: rng.standard_normal(s).astype(np.float32) for k, s in SH.items()}
OPS = {
    "add_row": (("a", "row"), lambda T, x, y: x + y),
    "mul_col": (("a", "col"), lambda T, x, y: x * y),
    "sub": (("a", "a"), lambda T, x, y: x - y),
    "where": (("a", "a"), lambda T, x, y: T.where(x > 0, x, y)),
    "softmax1": (("a",), lambda T, x: T.softmax(x, 1)),
    "logsoftmax0": (("a",), lambda T, x: T.log_softmax(x, 0)),
    "sum0": (("a",), lambda T, x: x.sum(0)),
    "sum_all": (("b3",), lambda T, x: x.sum()),
    "amax1": (("b3",), lambda T, x: x.amax(1)),
    "max1": (("a",), lambda T, x: x.max(1)[0]),
    "argmax1": (("a",), lambda T, x: x.max(1)[1].float()),
    "cat0": (("a", "a"), lambda T, x, y: T.cat([x, y], 0)),
    "cat1": (("a", "a"), lambda T, x, y: T.cat([x, y], 1)),
    "stack1": (("a", "a"), lambda T, x, y: T.stack([x, y], 1)),
    "layer_norm": (("b3", "row", "row"), lambda T, x, w, b: F.layer_norm(x, [7], w, b)),
    "mm": (("a", "m"), lambda T, x, y: x @ y),
    "bmm": (("b3", "bm"), lambda T, x, y: x @ y),
    "addmm": (("c56", "a", "m"), lambda T, c, x, y: T.addmm(c, x, y, beta=0.5, alpha=2.0)),
    "addmm_row": (("c6", "a", "m"), lambda T, c, x, y: T.addmm(c, x, y)),
    "baddbmm": (("c354", "b3", "bm"), lambda T, c, x, y: T.baddbmm(c, x, y)),
}

def placements_for(ndim):
    one = [Shard(d) for d in range(ndim)] + [Replicate(), Partial()]
    return list(itertools.product(one, repeat=len(MESH)))

random.seed(0)
cases = []
for name, (keys, fn) in OPS.items():
    combos = list(itertools.product(*[placements_for(len(SH[k])) for k in keys]))
    random.shuffle(combos)
    for c in combos[:6]:
        cases.append((name, keys, c))

def body(rank):
    mesh = init_device_mesh("cpu", MESH)
    bad = []
    for name, keys, pls in cases:
        fn = OPS[name][1]
        grad_ok = name not in ("argmax1",)
        try:
            args = [placed(DATA[k], mesh, p) for k, p in zip(keys, pls)]
            if grad_ok:
                args = [a.requires_grad_(True) for a in args]
            res = fn(tessel, *args)
            out = res.full_tensor().numpy()
            if grad_ok:
                (res * res).sum().backward()
                grads = [a.grad.full_tensor().numpy() if a.grad is not None else None for a in args]
        except Exception as e:
            bad.append((name, pls, "raise " + type(e).__name__ + ": " + str(e)[:120]))
            continue
        dense = [tessel.tensor(DATA[k]).requires_grad_(grad_ok) for k in keys]
        ref = fn(tessel, *dense)
        want = ref.detach().numpy()
        if out.shape != want.shape or not np.allclose(out, want, rtol=1e-4, atol=1e-5):
            bad.append((name, pls, "value"))
            continue
        if grad_ok:
            (ref * ref).sum().backward()
            for i, (g, d) in enumerate(zip(grads, dense)):
                w = d.grad.numpy() if d.grad is not None else None
                if (g is None) != (w is None) or (g is not None and not np.allclose(g, w, rtol=1e-3, atol=1e-4)):
                    bad.append((name, pls, "grad %d" % i))
                    break
    return bad


def test_uneven_shards_give_dense_values_and_gradients():
    got = ranks(int(np.prod(MESH)), body)
    assert len(cases) > 100
    for r in got:
        assert got[r] == [], got[r][:5]


if __name__ == "__main__":
    import pytest
    raise SystemExit(pytest.main([__file__, "-q"]))
