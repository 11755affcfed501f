#!/bin/bash
# Runs a tiny training job; train exits 1 if the loss did not fall, 2 on error.
set -euo pipefail
out="$("$1" --nproc=2 --steps=30 --batch=4 --seq=32 --d_model=32 --layers=1 --heads=2 --lr=1e-2 --log_every=10)"
echo "$out"
grep -q "^summary: loss" <<<"$out"
grep -q "fully_shard on 2 ranks" <<<"$out"
# And the unsharded single-rank path.
single="$("$1" --nproc=1 --steps=12 --batch=2 --seq=16 --d_model=16 --layers=1 --heads=2 --lr=1e-2 --log_every=6)"
echo "$single"
grep -q "1 rank, unsharded" <<<"$single"
