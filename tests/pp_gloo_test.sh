#!/bin/bash
# Runs pp_gloo_worker (a gtest binary) in 1, 2 and 4 processes on loopback through the launcher.
set -u
unset XML_OUTPUT_FILE GTEST_OUTPUT  # one XML per worker would interleave; Bazel writes this test's XML
launcher="$1"
worker="$2"
for n in 1 2 4; do
  echo "=== $n processes"
  "$launcher" --nproc-per-node "$n" --master-port 0 "$worker" || { echo "FAIL with $n processes"; exit 1; }
done
echo PASS
