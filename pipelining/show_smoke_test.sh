#!/usr/bin/env bash
# pipelining/show_smoke_test.sh — `show` prints the simulated makespan and bubble, writes a well-formed SVG with
# one box per compute action and the CSVs, and rejects a bad schedule name with a clear error.
set -euo pipefail
show="$1"
out="${TEST_TMPDIR:-/tmp}"
"$show" --schedule=ZBVZeroBubble --pp=4 --microbatches=8 --out="$out/zbv.svg" --csv="$out/c.csv" \
  --lowered_csv="$out/l.csv" > "$out/stdout.txt"
grep -q "^makespan: 51.00$" "$out/stdout.txt" || { cat "$out/stdout.txt"; echo "FAIL: makespan"; exit 1; }
grep -q "^bubble: 0.0588 " "$out/stdout.txt" || { cat "$out/stdout.txt"; echo "FAIL: bubble"; exit 1; }
[ "$(wc -l < "$out/c.csv")" -eq 4 ] || { echo "FAIL: compute CSV should have 4 rows"; exit 1; }
grep -q "SEND_F" "$out/l.csv" || { echo "FAIL: lowered CSV has no SEND_F"; exit 1; }
/usr/bin/python3 - "$out/zbv.svg" <<'PY'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
boxes = root.findall("{http://www.w3.org/2000/svg}g")
assert len(boxes) == 8 * 8 * 3, f"expected 192 action boxes, got {len(boxes)}"
PY
"$show" --schedule=1F1B --pp=4 --microbatches=8 | grep -q "^bubble: 0.2727 " || { echo "FAIL: 1F1B bubble"; exit 1; }
if "$show" --schedule=2F2B --pp=2 2> "$out/err.txt"; then echo "FAIL: bad name accepted"; exit 1; fi
grep -q "unknown pipeline schedule '2F2B'" "$out/err.txt" || { cat "$out/err.txt"; exit 1; }
if "$show" --schedule=ZBVZeroBubble --pp=2 --stages_per_rank=3 2> "$out/err.txt"; then exit 1; fi
grep -q "ZBVZeroBubble requires exactly 2 stages per rank, got 3" "$out/err.txt" || { cat "$out/err.txt"; exit 1; }
echo PASS
