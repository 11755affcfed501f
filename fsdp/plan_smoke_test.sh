#!/bin/bash
# //fsdp:plan prints the plan (with given activations: no step is run) and refuses a bad batch split.
set -euo pipefail
out="$("$1" --nproc=2 --batch=4 --d_model=32 --layers=2 --heads=2 --seq=16 --vocab=61 --activations=1000)"
echo "$out"
grep -q "^memory plan: GPT .* 2 ranks, local batch 2; activations given" <<<"$out"
grep -Eq "^  activations +1000 " <<<"$out"
# vocab 61 is uneven over 2 ranks: rank 1 holds one row less of wte and lm_head, so less optimizer state.
totals="$(grep "^total per rank:" <<<"$out")"
read -r _ _ _ t0 t1 <<<"$totals"
[[ "$t0" -gt "$t1" ]] || { echo "expected rank 0's total ($t0) above rank 1's ($t1)"; exit 1; }
if "$1" --nproc=3 --batch=4 --activations=1 2>"${TEST_TMPDIR:-/tmp}/err"; then echo "batch 4 over 3 ranks must fail"; exit 1; fi
grep -q "must be divisible by --nproc=3" "${TEST_TMPDIR:-/tmp}/err"
