"""Compares torch vs tessel sweep results. usage: compare.py OUTDIR > diffs.json (and prints a summary).
Writes OUTDIR/diffs.json: a list of per-case comparisons where anything differs."""

import json
import os
import sys
from collections import defaultdict

import numpy as np

MESHES = {"w2": 2, "w4": 4, "m22": 4}
NOVALUE = ("empty_like_shape",)


def load(outdir, backend, mesh, world):
    ranks = []
    for r in range(world):
        p = os.path.join(outdir, "%s_%s_r%d.jsonl" % (backend, mesh, r))
        d = {}
        if os.path.exists(p):
            for l in open(p):
                try:
                    rec = json.loads(l)
                except Exception:
                    continue
                d[rec["id"]] = rec
        ranks.append(d)
    return ranks


def close(a, b, name):
    if name.split("|")[0] in NOVALUE:
        return True
    try:
        x = np.asarray(a, dtype=np.float64)
        y = np.asarray(b, dtype=np.float64)
    except Exception:
        return a == b
    if x.shape != y.shape:
        return False
    tol = 2e-2 if "bf16" in name else 1e-4
    return bool(np.allclose(x, y, rtol=tol, atol=tol, equal_nan=True))


def items(out):
    if out is None:
        return []
    if out["t"] == "seq":
        return out["items"]
    return [out]


def desc_items(out):
    res = []
    for it in items(out):
        if it["t"] == "dt":
            res.append("(" + ",".join(it["pl"]) + ")")
        else:
            res.append(it["t"])
    return " ".join(res) if len(res) <= 1 else "[" + " ".join(res) + "]"


def compare(outdir):
    rows = []
    stats = defaultdict(int)
    for mesh, world in MESHES.items():
        tr = load(outdir, "torch", mesh, world)
        te = load(outdir, "tessel", mesh, world)
        for cid, t0 in tr[0].items():
            if cid not in te[0]:
                stats["missing_tessel"] += 1
                continue
            stats["compared"] += 1
            e0 = te[0][cid]
            row = {"mesh": mesh, "id": cid, "op": cid.split("|")[0], "inp": cid.split("|")[1]}
            terr, eerr = t0.get("err") or t0.get("setup_err"), e0.get("err") or e0.get("setup_err")
            if terr or eerr:
                if terr and eerr:
                    stats["both_raise"] += 1
                    continue
                row["kind"] = "raise"
                row["torch"] = terr or desc_items(t0.get("out"))
                row["tessel"] = eerr or desc_items(e0.get("out"))
                row["torch_raises"] = bool(terr)
                rows.append(row)
                stats["one_raises"] += 1
                continue
            ti, ei = items(t0["out"]), items(e0["out"])
            row["torch"], row["tessel"] = desc_items(t0["out"]), desc_items(e0["out"])
            if len(ti) != len(ei) or [i["t"] for i in ti] != [i["t"] for i in ei]:
                row["kind"] = "structure"
                rows.append(row)
                stats["structure_diff"] += 1
                continue
            pl_diff = any(a.get("pl") != b.get("pl") for a, b in zip(ti, ei))
            shape_diff = any(a.get("shape") != b.get("shape") for a, b in zip(ti, ei))
            dtype_diff = any(a.get("dtype") != b.get("dtype") for a, b in zip(ti, ei))
            full_ok = True
            for a, b in zip(ti, ei):
                if a["t"] == "dt":
                    if "full" in a and "full" in b:
                        full_ok &= close(a["full"], b["full"], cid)
                    elif ("full" in a) != ("full" in b):
                        full_ok = False
                elif a["t"] == "plain":
                    full_ok &= close(a["val"], b["val"], cid)
            local_diff_ranks = []
            for r in range(world):
                ta, ea = tr[r].get(cid), te[r].get(cid)
                if not ta or not ea or "out" not in ta or "out" not in ea:
                    continue
                for a, b in zip(items(ta["out"]), items(ea["out"])):
                    if a["t"] == "dt" and b["t"] == "dt":
                        if a["lshape"] != b["lshape"] or not close(a["local"], b["local"], cid):
                            local_diff_ranks.append(r)
                            break
            row.update(
                pl_diff=pl_diff,
                shape_diff=shape_diff,
                dtype_diff=dtype_diff,
                full_ok=full_ok,
                local_diff=sorted(set(local_diff_ranks)),
            )
            if pl_diff:
                row["kind"] = "placement"
                stats["placement_diff"] += 1
            elif shape_diff or dtype_diff or not full_ok:
                row["kind"] = "value/shape/dtype"
                stats["value_diff"] += 1
            elif local_diff_ranks:
                row["kind"] = "local_only"
                stats["local_only_diff"] += 1
            else:
                stats["same"] += 1
                continue
            rows.append(row)
    return rows, stats


if __name__ == "__main__":
    outdir = sys.argv[1]
    rows, stats = compare(outdir)
    json.dump({"stats": stats, "rows": rows}, open(os.path.join(outdir, "diffs.json"), "w"), indent=0)
    print(json.dumps(stats))
    by = defaultdict(list)
    for r in rows:
        by[(r["kind"], r["op"])].append(r)
    for (k, op), rs in sorted(by.items()):
        print(k, op, len(rs))
