#!/bin/bash
# Runs gloo_test_worker (a gtest binary) in 1, 2 and 4 processes on loopback through the launcher.
set -u
launcher="$1"
worker="$2"
for n in 1 2 4; do
  echo "=== $n processes"
  "$launcher" --nproc-per-node "$n" --master-port 0 "$worker" || { echo "FAIL with $n processes"; exit 1; }
done
echo PASS
