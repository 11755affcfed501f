"""Driver: runs run_sweep.py for one backend over a mesh in chunks, resuming after a crash/hang.
usage: driver.py BACKEND MESH OUTDIR [CHUNK] [TIMEOUT]"""

import json, os, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases as CS

MESHES = {"w2": (2,), "w4": (4,), "m22": (2, 2)}
backend, mesh, outdir = sys.argv[1], sys.argv[2], sys.argv[3]
chunk = int(sys.argv[4]) if len(sys.argv) > 4 else 400
tmo = int(sys.argv[5]) if len(sys.argv) > 5 else 900
_, runs = CS.enumerate_runs(MESHES[mesh])
world = 1
for m in MESHES[mesh]:
    world *= m
here = os.path.dirname(os.path.abspath(__file__))
if backend == "torch":
    cmd = [os.environ.get("TESSEL_TORCH_PYTHON", os.path.expanduser("~/.cache/tessel/torch/python"))]
    env = dict(os.environ)
else:
    cmd = ["/usr/bin/python3"]
    env = dict(os.environ, PYTHONPATH=os.environ["TESSEL_PROBE"])
os.makedirs(outdir, exist_ok=True)


def done_upto():
    p = os.path.join(outdir, "%s_%s_r0.jsonl" % (backend, mesh))
    if not os.path.exists(p):
        return 0
    m = -1
    for l in open(p):
        try:
            m = max(m, json.loads(l)["idx"])
        except Exception:
            pass
    return m + 1


start = done_upto()
while start < len(runs):
    end = min(start + chunk, len(runs))
    try:
        r = subprocess.run(
            cmd + [os.path.join(here, "run_sweep.py"), backend, mesh, str(start), str(end), outdir],
            env=env,
            timeout=tmo,
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(outdir, "stderr_%s_%s.txt" % (backend, mesh)), "a"),
        )
        rc = r.returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    nd = done_upto()
    if nd >= end:
        start = end
        continue
    # crash or hang: mark the next case and skip it
    bad = nd
    print("failure rc=%s at idx %d (%s)" % (rc, bad, runs[bad][0] if bad < len(runs) else "-"), flush=True)
    for rk in range(world):
        with open(os.path.join(outdir, "%s_%s_r%d.jsonl" % (backend, mesh, rk)), "a") as fh:
            fh.write(json.dumps({"idx": bad, "id": runs[bad][0], "err": "CRASH_OR_HANG: rc=%s" % rc}) + "\n")
    start = bad + 1
print("done", backend, mesh, len(runs), flush=True)
