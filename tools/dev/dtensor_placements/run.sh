#!/usr/bin/env bash
# tools/dev/dtensor_placements/run.sh — developer tool, never part of the product or CI: the DTensor
# output-placement sweep against PyTorch (239 op cases x every input placement on 1-D meshes of 2 and 4 ranks
# and a 2 x 2 mesh; the same local pieces on both sides through from_local). torch runs on gloo processes
# (tools/dev/install_torch.sh installs it), tessel on run_ranks threads from this checkout's build.
#
# Usage: bash tools/dev/dtensor_placements/run.sh [OUTDIR]   (default /tmp/dtensor_placements)
#   torch's results are kept in OUTDIR and reused by later runs (~15 min on 2 cores the first time); tessel's
#   (~1 min) are redone every run. Prints the counts (same, placement, local_only, raise, value) and, for runs
#   whose values differ, which side matches a numpy reference. OUTDIR/diffs.json lists every differing run.
#
# Files: cases.py (the op cases and placements), run_sweep.py (runs a range of them on one backend),
# driver.py (chunks and resumes, marking a crashed or hung case), compare.py (diffs.json and the counts),
# check_values.py (numpy references for value differences).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ws="$(cd "$here/../../.." && pwd)"
out="${1:-/tmp/dtensor_placements}"
torch_py="${TESSEL_TORCH_PYTHON:-$HOME/.cache/tessel/torch/python}"
cd "$ws"
bazel build //bindings:tessel/_C.so
probe="$(mktemp -d)"
trap 'rm -rf "$probe"' EXIT
cp -r bindings/tessel "$probe/"
cp bazel-bin/bindings/tessel/_C.so "$probe/tessel/"
export TESSEL_PROBE="$probe" TESSEL_TORCH_PYTHON="$torch_py"
mkdir -p "$out"
for mesh in w2 w4 m22; do
  "$torch_py" "$here/driver.py" torch "$mesh" "$out"
  rm -f "$out"/tessel_"$mesh"_r*.jsonl
  "$torch_py" "$here/driver.py" tessel "$mesh" "$out"
done
/usr/bin/python3 "$here/compare.py" "$out" > "$out/compare.txt"  # the counts, then differing runs per op
head -1 "$out/compare.txt"
/usr/bin/python3 "$here/check_values.py" "$out"
