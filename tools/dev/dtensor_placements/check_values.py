"""For the cases where torch's and tessel's full_tensor() disagree, says which side matches a numpy reference.
usage: check_values.py OUTDIR"""

import json, os, sys
import numpy as np
import cases as CS

outdir = sys.argv[1]
D = json.load(open(os.path.join(outdir, "diffs.json")))
x, y = CS.make_full("f", (4, 8), 0), CS.make_full("f", (4, 8), 1)
REF = {
    "bw_mse": lambda: 2 * (x - y) / 32,
    "argmax_all": lambda: np.int64(x.argmax()),
    "argmax_d1": lambda: x.argmax(1),
    "argmax_d0": lambda: x.argmax(0),
    "argmin_d1": lambda: x.argmin(1),
    "embedding": lambda: CS.make_full("f", (8, 4), 1)[CS.make_full("idx8", (4, 3), 0)],
}


def load(b, m, cid):
    rec = None
    for l in open(os.path.join(outdir, "%s_%s_r0.jsonl" % (b, m))):
        if cid in l:
            q = json.loads(l)
            if q["id"] == cid:
                rec = q
    return rec


def first(out):
    return out["items"][0] if out["t"] == "seq" else out


summary = {}
for r in D["rows"]:
    if r.get("full_ok") is not False:
        continue
    ref = REF[r["op"]]()
    res = []
    for b in ("torch", "tessel"):
        o = first(load(b, r["mesh"], r["id"])["out"])
        if "full" not in o:
            res.append("%s: full_tensor raised (%s)" % (b, o.get("full_err", "")[:90]))
        else:
            res.append("%s %s" % (b, "matches numpy" if np.allclose(np.array(o["full"]), ref) else "WRONG"))
    key = (r["op"], tuple(res))
    summary.setdefault(key, []).append("%s %s" % (r["mesh"], r["inp"]))
for (op, res), v in summary.items():
    print(op, "|", "; ".join(res), "|", len(v), v[:6])
