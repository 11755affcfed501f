#!/bin/bash
# //planner:plan prints a plan, says which ledger blows the budget, ranks the fitting layouts, and
# refuses bad input with the field named.
set -euo pipefail
plan="$1"
tmp="${TEST_TMPDIR:-/tmp}"
# The exact fully_shard plan of a small GPT with measured activations (vocab 61: uneven over 2 ranks,
# so rank 1 holds one row less of wte and lm_head, less state, and a smaller total).
out="$("$plan" --model=gpt --world=2 --vocab=61 --d_model=32 --layers=2 --heads=2 --seq=16 --global_batch=4 --micro_batch=2 \
  --param_dtype=fp32 --reduce_dtype=fp32 --measure_activations --memory_per_rank=1GiB --top=0)"
echo "$out"
grep -q "exact fully_shard plan, activations measured" <<<"$out"
grep -q "^  fits: " <<<"$out"
read -r _ _ _ t0 t1 <<<"$(grep "^total per rank:" <<<"$out")"
[[ "$t0" -gt "$t1" ]] || { echo "expected rank 0's total ($t0) above rank 1's ($t1)"; exit 1; }
# LLaMA-7B unsharded on one 80 GiB rank does not fit, and the optimizer state is the largest ledger.
out="$("$plan" --model=llama-7b --world=1 --memory_per_rank=80GiB --top=0)"
echo "$out"
grep -q "DOES NOT FIT: .*the largest ledger is optim" <<<"$out"
# On 8 ranks with 40 GiB each, the search lists fitting layouts, fastest first.
out="$("$plan" --model=llama-7b --world=8 --memory_per_rank=40GiB --zero=3 --top=5)"
echo "$out"
grep -q "^layouts of 8 ranks that fit" <<<"$out"
grep -Eq "^  1 +pp" <<<"$out"
# Bad input: a field named, exit 2.
if "$plan" --model=llama-7b --world=8 --tp=3 --dp_shard=1 --top=0 2>"$tmp/err"; then echo "tp 3 must fail"; exit 1; fi
grep -q "world size is 8" "$tmp/err"
if "$plan" --model=llama-7b --world=6 --tp=3 --dp_shard=2 --top=0 2>"$tmp/err"; then echo "tp 3 must fail"; exit 1; fi
grep -q "n_heads 32 is not divisible by tp 3" "$tmp/err"
if "$plan" --model=nope --top=0 2>"$tmp/err"; then echo "unknown preset must fail"; exit 1; fi
grep -q "known presets: gpt2-small, llama-7b" "$tmp/err"
if "$plan" --memory_per_rank=80Gb --top=0 2>"$tmp/err"; then echo "unknown unit must fail"; exit 1; fi
grep -q "unknown unit 'Gb'" "$tmp/err"
if "$plan" --micro_batch=0 --top=0 2>"$tmp/err"; then echo "micro_batch 0 must fail"; exit 1; fi
grep -q "micro_batch must be >= 1, got 0" "$tmp/err"
if "$plan" --model=llama-7b --world=8 --dp_shard=8 --zero=0 --top=0 2>"$tmp/err"; then echo "zero 0 on dp_shard must fail"; exit 1; fi
grep -q "zero_stage 0 replicates everything, so dp_shard must be 1" "$tmp/err"
