"""Runs the sweep cases on one backend.

  torch : ~/.cache/tessel/torch/python run_sweep.py torch  MESH START END OUTDIR
  tessel: PYTHONPATH=$TESSEL_PROBE /usr/bin/python3 run_sweep.py tessel MESH START END OUTDIR
MESH: w2 (1-D, 2 ranks), w4 (1-D, 4 ranks), m22 (2x2). START/END: run indices (see cases.enumerate_runs).
Each rank appends one JSON line per run to OUTDIR/<backend>_<mesh>_r<rank>.jsonl.
"""

import datetime
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import cases as CS  # noqa: E402

MESHES = {"w2": (2,), "w4": (4,), "m22": (2, 2)}


def fmt_pl(p):
    n = type(p).__name__
    if "Strided" in n:
        return "_S(%s,sf=%s)" % (getattr(p, "dim", "?"), getattr(p, "split_factor", "?"))
    if n == "Shard":
        return "S(%d)" % p.dim
    if n == "Replicate":
        return "R"
    if n == "Partial" or "Partial" in n:
        return "P(%s)" % getattr(p, "reduce_op", "?")
    return n


def short_dtype(dt):
    return str(dt).split(".")[-1]


def record_out(out, DTensor, depth=0):
    if isinstance(out, DTensor):
        loc = out.to_local()
        return {
            "t": "dt",
            "pl": [fmt_pl(p) for p in out.placements],
            "shape": list(out.shape),
            "dtype": short_dtype(out.dtype),
            "lshape": list(loc.shape),
            "local": loc.detach().tolist(),
            "_dt": out,
        }
    if isinstance(out, (tuple, list)) and depth == 0:
        return {"t": "seq", "items": [record_out(o, DTensor, 1) for o in out]}
    if out is None:
        return {"t": "none"}
    if hasattr(out, "shape") and hasattr(out, "tolist"):
        return {"t": "plain", "shape": list(out.shape), "dtype": short_dtype(out.dtype), "val": out.detach().tolist()}
    return {"t": type(out).__name__, "val": repr(out)[:200]}


def fill_full(rec):
    if rec["t"] == "dt":
        d = rec.pop("_dt")
        try:
            rec["full"] = d.full_tensor().detach().tolist()
        except Exception as e:  # noqa
            rec["full_err"] = "%s: %s" % (type(e).__name__, str(e)[:300])
    elif rec["t"] == "seq":
        for it in rec["items"]:
            fill_full(it)


def main():
    backend, meshtag, start, end, outdir = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    mesh_shape = MESHES[meshtag]
    world = int(np.prod(mesh_shape))
    os.makedirs(outdir, exist_ok=True)

    if backend == "torch":
        import torch as T
        import torch.nn.functional as F
        import torch.distributed as dist
        import torch.multiprocessing as mp
        from torch.distributed.tensor import DTensor, Shard, Replicate, Partial
        from torch.distributed.device_mesh import init_device_mesh

        T.set_num_threads(1)
        initfile = tempfile.mktemp(prefix="sweep_store_")
        mp.spawn(torch_worker, args=(world, initfile, meshtag, start, end, outdir, mesh_shape), nprocs=world, join=True)
    else:
        import tessel as T
        import tessel.nn.functional as F
        import tessel.distributed as dist
        from tessel.distributed.tensor import DTensor, Shard, Replicate, Partial
        from tessel.distributed.device_mesh import init_device_mesh

        def fn(w):
            dist.init_process_group()
            rank = dist.get_rank()
            mesh = init_device_mesh("cpu", mesh_shape)
            body(T, F, DTensor, Shard, Replicate, Partial, mesh, rank, backend, meshtag, start, end, outdir, mesh_shape)

        T.run_ranks(world, fn)


def torch_worker(rank, world, initfile, meshtag, start, end, outdir, mesh_shape):
    import torch as T
    import torch.nn.functional as F
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor, Shard, Replicate, Partial
    from torch.distributed.device_mesh import init_device_mesh

    T.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method="file://" + initfile, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60)
    )
    mesh = init_device_mesh("cpu", mesh_shape)
    body(T, F, DTensor, Shard, Replicate, Partial, mesh, rank, "torch", meshtag, start, end, outdir, mesh_shape)
    dist.barrier()
    os._exit(0)  # destroy_process_group sometimes aborts at exit ("terminate called without an active exception")


def body(T, F, DTensor, Shard, Replicate, Partial, mesh, rank, backend, meshtag, start, end, outdir, mesh_shape):
    cases, runs = CS.enumerate_runs(mesh_shape)
    coord = list(np.unravel_index(rank, mesh_shape))
    path = os.path.join(outdir, "%s_%s_r%d.jsonl" % (backend, meshtag, rank))
    fh = open(path, "a")

    def tok2pl(t):
        if t == "R":
            return Replicate()
        if t == "P":
            return Partial()
        return Shard(int(t[1:]))

    for idx in range(start, min(end, len(runs))):
        cid, ci, combo = runs[idx]
        name, specs, fn = cases[ci]
        rec = {"idx": idx, "id": cid}
        try:
            ins = []
            for i, ((kind, shape), toks) in enumerate(zip(specs, combo)):
                full = CS.make_full(kind, shape, i)
                loc = CS.local_piece(full, mesh_shape, coord, toks)
                lt = T.from_numpy(np.ascontiguousarray(loc))
                stride = [int(np.prod(shape[j + 1 :])) for j in range(len(shape))]
                ins.append(
                    DTensor.from_local(
                        lt, mesh, [tok2pl(t) for t in toks], run_check=False, shape=tuple(shape), stride=tuple(stride)
                    )
                )
        except Exception as e:
            rec["setup_err"] = "%s: %s" % (type(e).__name__, str(e)[:300])
            fh.write(json.dumps(rec) + "\n")
            fh.flush()
            continue
        try:
            out = fn(T, F, *ins)
            rec["out"] = record_out(out, DTensor)
        except Exception as e:
            rec["err"] = "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0][:400] if str(e).strip() else "")
            rec["err_full"] = str(e)[:1500]
        if "out" in rec:
            fill_full(rec["out"])
        fh.write(json.dumps(rec) + "\n")
        fh.flush()
    fh.close()


if __name__ == "__main__":
    main()
