#!/usr/bin/env bash
# tools/dev/attention_ab/attention_ab.sh — developer tool: A/B timing of the AVX-512 float32 attention
# kernels of a git revision (A, default HEAD) against the working tree's (B), both compiled into one
# process that alternates them per iteration (attention_ab.cc says why). Needs an AVX-512 CPU and g++.
#
# Usage: tools/dev/attention_ab/attention_ab.sh [REV] [HEADS T D ITERS]
# Example: tools/dev/attention_ab/attention_ab.sh HEAD~1 128 128 32 200
set -euo pipefail
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
rev=${1:-HEAD}
shift || true
grep -q avx512f /proc/cpuinfo || { echo "skipped: this CPU has no AVX-512F"; exit 0; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The baseline's kernels include their own vector layer (by absolute path, so B's is not picked up).
git -C "$root" show "$rev:core/ops/attention_kernels_vec.inc" > "$work/a_vec.inc"
git -C "$root" show "$rev:core/ops/attention_kernels.inc" |
  sed "s|#include \"core/ops/attention_kernels_vec.inc\"|#include \"$work/a_vec.inc\"|" > "$work/a.inc"
# The flags of core/ops/BUILD.bazel's _ATTENTION_AVX512_COPTS and .bazelrc (-O3, x86-64-v3).
g++ -std=c++20 -O3 -DNDEBUG -march=x86-64-v3 -mavx512f -mavx512vl -mavx512dq -mavx512bw \
  -mprefer-vector-width=512 -ffp-contract=fast -I"$root" \
  -DVARIANT_A="\"$work/a.inc\"" -DVARIANT_B="\"$root/core/ops/attention_kernels.inc\"" \
  "$root/tools/dev/attention_ab/attention_ab.cc" -o "$work/attention_ab"
"$work/attention_ab" "$@"
