#!/usr/bin/env bash
# tools/dev/attention_ab/attention_ab.sh — developer tool: A/B timing of the float32 attention kernels
# (AVX-512, or the AVX2 copy on CPUs without it or with ISA=avx2) of a git revision (A, default HEAD)
# against the working tree's (B), both compiled into one process that alternates them per iteration
# (attention_ab.cc says why). Needs g++.
#
# Usage: tools/dev/attention_ab/attention_ab.sh [REV] [HEADS T D ITERS [H]]  (H: heads laid out as [B, T, H, D])
# Example: tools/dev/attention_ab/attention_ab.sh HEAD~1 128 128 32 200
# EXTRA_FLAGS adds compiler flags to both variants. SWAP=1 compiles the working tree as A and REV as B: two
# variants of different code can differ by up to 4% for where their code lands alone (seen on the Xeon model
# 207: a change to prefetch bookkeeping that ran identically at that layout read 1.04 in either order), so
# compare medians, and for a difference of a few percent take both orders (B/A, then 1 / (B/A) swapped).
set -euo pipefail
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
rev=${1:-HEAD}
shift || true
# The AVX-512 kernels where the CPU has them, else (or with ISA=avx2) the AVX2 copy.
isa=${ISA:-$(grep -q avx512f /proc/cpuinfo && echo avx512 || echo avx2)}
if [ "$isa" = avx512 ]; then
  isa_flags="-mavx512f -mavx512vl -mavx512dq -mavx512bw -mprefer-vector-width=512"
else
  isa_flags="-DTESSEL_HARNESS_AVX2"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The baseline's kernels include their own vector layer (by absolute path, so B's is not picked up).
git -C "$root" show "$rev:core/ops/attention_kernels_vec.inc" > "$work/a_vec.inc"
git -C "$root" show "$rev:core/ops/attention_kernels.inc" |
  sed "s|#include \"core/ops/attention_kernels_vec.inc\"|#include \"$work/a_vec.inc\"|" > "$work/a.inc"
# The flags of core/ops/BUILD.bazel's _ATTENTION_AVX512_COPTS and .bazelrc (-O3, x86-64-v3).
echo "kernels: $isa"
a=$work/a.inc b=$root/core/ops/attention_kernels.inc
if [ "${SWAP:-0}" = 1 ]; then
  echo "SWAP=1: A is the working tree, B is $rev"
  a=$root/core/ops/attention_kernels.inc b=$work/a.inc
fi
# shellcheck disable=SC2086  # isa_flags is a list of flags
g++ -std=c++20 -O3 -DNDEBUG -march=x86-64-v3 $isa_flags -ffp-contract=fast ${EXTRA_FLAGS:-} -I"$root" \
  -DVARIANT_A="\"$a\"" -DVARIANT_B="\"$b\"" \
  "$root/tools/dev/attention_ab/attention_ab.cc" -o "$work/attention_ab"
"$work/attention_ab" "$@"
