#!/usr/bin/env bash
# tools/dev/report_ab.sh — developer tool: A/B of `//benchmarks:report` figures between a git revision (A)
# and the working tree (B). Builds both report binaries (-c opt; A in a git worktree kept at
# ~/.cache/tessel/report_ab/tree, or $TESSEL_REPORT_AB_TREE, so that its Bazel output base survives from one
# use to the next: the first use builds for minutes, later ones take seconds), then runs them alternately
# PAIRS times on --filter=FILTER and prints, per figure, each side's ratios sorted and their medians.
#
# Why: on these shared 2-vCPU VMs one figure drifts 10-20% between runs minutes apart (docs/PERFORMANCE.md,
# fifteenth session: the vCPUs are slowed one at a time by the host), so two single report runs cannot
# resolve a 5% change; alternating the two binaries many times, close together, can.
# PyTorch figures need TESSEL_TORCH_PYTHON as for the report itself.
#
# Usage: tools/dev/report_ab.sh REV FILTER [PAIRS]
# Example: tools/dev/report_ab.sh HEAD~1 attention 12
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n 's/^# \{0,1\}//p' "$0" | sed -n '2,/^Example/p'
  exit 2
fi
filter=$2
pairs=${3:-10}
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
# Resolved here: inside the kept worktree, HEAD~1 would mean its own HEAD's parent.
rev=$(git -C "$root" rev-parse --verify "$1^{commit}")
label=$1
work=$(mktemp -d)
tree=${TESSEL_REPORT_AB_TREE:-$HOME/.cache/tessel/report_ab/tree}
cleanup() {
  [ -d "$tree" ] && (cd "$tree" && bazel shutdown > /dev/null 2>&1) || true  # its server holds memory
  rm -rf "$work"
}
trap cleanup EXIT
if [ -d "$tree" ]; then
  git -C "$tree" checkout --quiet --force --detach "$rev"
else
  mkdir -p "$(dirname "$tree")"
  git -C "$root" worktree prune
  git -C "$root" worktree add --quiet --detach "$tree" "$rev"
fi
# The worktree needs the same user settings (the disk cache) as the checkout.
[ -f "$root/.bazelrc.user" ] && cp "$root/.bazelrc.user" "$tree/"
build() {  # $1: workspace, $2: where the binary goes; Bazel's output only when the build fails
  if ! (cd "$1" && bazel build -c opt //benchmarks:report && cp "$(bazel info -c opt bazel-bin)/benchmarks/report" "$2") \
    > "$work/build.log" 2>&1; then
    cat "$work/build.log" >&2
    exit 1
  fi
}
build "$tree" "$work/a"
build "$root" "$work/b"
# Each run appends "side figure ratio" lines; the two sides alternate so both see the same drift.
for ((i = 0; i < pairs; ++i)); do
  for side in a b; do
    "$work/$side" --filter="$filter" 2>/dev/null | awk -v s="$side" '/^[a-z].* ratio /{sub(":", "", $1); print s, $1, $NF} /^# one thread: .* ratio /{print s, "one_thread_note", $NF}'
  done
done > "$work/runs"
python3 - "$work/runs" "$label" <<'EOF'
import statistics
import sys

runs = {}
for line in open(sys.argv[1]):
    side, figure, ratio = line.split()
    runs.setdefault(figure, {"a": [], "b": []})[side].append(float(ratio))
for figure, sides in sorted(runs.items()):
    print(figure)
    for side, name in (("a", "A " + sys.argv[2]), ("b", "B working tree")):
        values = sorted(sides[side])
        if values:
            print("  %-22s median %.3f  sorted %s" % (name, statistics.median(values), " ".join("%.3f" % v for v in values)))
    if sides["a"] and sides["b"]:
        print("  B/A of the medians %.3f" % (statistics.median(sides["b"]) / statistics.median(sides["a"])))
EOF
