#!/bin/bash
# Runs a tiny training job; train exits 1 if the loss did not fall, 2 on error.
set -euo pipefail
out="$("$1" --steps=30 --batch=4 --seq=32 --d_model=32 --layers=1 --heads=2 --lr=1e-2 --log_every=10)"
echo "$out"
grep -q "^summary: loss" <<<"$out"
