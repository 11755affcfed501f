#!/usr/bin/python3
"""tessel checkpoints read and written by the official Python packages, with no tessel code here.

1. interop_driver saves a checkpoint from 4 ranks (mesh 2x2; float32, float16, int64 and float64
   tensors in four layouts). Then, guided only by metadata.json (the language-neutral index):
   - every data file opens with safetensors.numpy.load_file;
   - every chunk named in the metadata is an entry whose values equal that box of the known full
     tensor;
   - every 1 MiB block checksum equals xxhash.xxh3_64 of the file's bytes;
   - each fully replicated tensor is stored exactly once across the files.
   The exported CKPT.full.safetensors (beside the checkpoint directory) holds the full tensors and the small values as metadata.
2. safetensors.numpy.save_file writes a file; interop_driver imports it into 2-rank sharded tensors
   and checks every local value.

Needs the `safetensors` and `xxhash` wheels: tools/setup.sh installs them with pip --target into
~/.cache/tessel/pydeps and passes that directory as TESSEL_PYDEPS (.bazelrc.user --test_env).
"""
import json
import math
import os
import subprocess
import sys

deps = os.environ.get("TESSEL_PYDEPS", "")
if not deps or not os.path.isdir(os.path.join(deps, "safetensors")):
    sys.exit(f"TESSEL_PYDEPS={deps!r} has no safetensors package: run tools/setup.sh")
sys.path.insert(0, deps)

import numpy as np  # noqa: E402
import safetensors.numpy  # noqa: E402
import xxhash  # noqa: E402

driver = sys.argv[1]
tmp = os.environ.get("TEST_TMPDIR", "/tmp")


def pattern(shape, dtype, fn):
    n = int(np.prod(shape))
    return np.array([fn(k) for k in range(n)], dtype=np.float64).astype(dtype).reshape(shape)


EXPECTED = {  # the values interop_driver.cc saves
    "w": pattern((6, 5), np.float32, lambda k: k * 0.5 - 3),
    "h": pattern((7,), np.float16, lambda k: k * 0.25),
    "ids": np.array([k * 1000003 - 7 for k in range(12)], dtype=np.int64).reshape(3, 4),
    "rep": pattern((2, 3), np.float64, lambda k: math.sqrt(2.0) * k),
}


def check(cond, what):
    if not cond:
        sys.exit("FAILED: " + what)


# 1. tessel -> Python
ckpt = os.path.join(tmp, "ckpt")
subprocess.run([driver, "save", ckpt], check=True)
md = json.load(open(os.path.join(ckpt, "metadata.json")))
check(md["magic"] == "tessel-checkpoint" and md["checksum"]["algorithm"] == "xxh3-64", "metadata header")
block = md["checksum"]["block_bytes"]
files = [os.path.join(ckpt, f["name"]) for f in md["files"]]
loaded = [safetensors.numpy.load_file(f) for f in files]  # every data file is plain safetensors
raw = [open(f, "rb").read() for f in files]
check(sorted(md["tensors"]) == sorted(EXPECTED), f"tensor keys {sorted(md['tensors'])}")
chunks_checked = blocks_checked = 0
for fqn, tm in md["tensors"].items():
    full = EXPECTED[fqn]
    check(tuple(tm["shape"]) == full.shape, f"{fqn} shape")
    covered = np.zeros(full.shape, dtype=np.int64)
    for c in tm["chunks"]:
        box = tuple(slice(o, o + s) for o, s in zip(c["offsets"], c["sizes"]))
        got = loaded[c["file"]][c["entry"]]
        check(got.dtype == full.dtype and np.array_equal(got, full[box]), f"{fqn} chunk {c['entry']} values")
        covered[box] += 1
        data = raw[c["file"]][c["byte_offset"]:c["byte_offset"] + c["byte_length"]]
        check(data == np.ascontiguousarray(full[box]).tobytes(), f"{fqn} chunk {c['entry']} bytes at byte_offset")
        for k, want in enumerate(c["checksums"]):
            check(format(xxhash.xxh3_64_intdigest(data[k * block:(k + 1) * block]), "016x") == want,
                  f"{fqn} chunk {c['entry']} block {k} checksum")
            blocks_checked += 1
        chunks_checked += 1
    check(np.all(covered == 1), f"{fqn}: every element saved exactly once (replicas deduplicated)")
check(md["values"]["step"]["value"] == 42, "small value 'step'")
full = safetensors.numpy.load_file(ckpt + ".full.safetensors")
check(sorted(full) == sorted(EXPECTED), "exported keys")
for fqn, want in EXPECTED.items():
    check(full[fqn].dtype == want.dtype and np.array_equal(full[fqn], want), f"exported {fqn}")
print(f"tessel -> python: {len(files)} data files, {chunks_checked} chunks, {blocks_checked} checksum blocks OK")

# 2. Python -> tessel
path = os.path.join(tmp, "from_python.safetensors")
safetensors.numpy.save_file({
    "a": pattern((5, 3), np.float32, lambda k: k - 1.5),
    "b": pattern((4,), np.float16, lambda k: k / 4.0),
    "c": np.array([[1, 2], [3, 4]], dtype=np.int32),
}, path, metadata={"format": "np"})
out = subprocess.run([driver, "import", path], check=True, capture_output=True, text=True).stdout
check("import OK" in out, "import: " + out)
print("python -> tessel: import OK")
