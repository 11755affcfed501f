#!/bin/bash
# Runs gloo_test_worker (a gtest binary) in 1, 2 and 4 processes on loopback through the launcher.
set -u
# Every worker process is a gtest binary; left set, they would all write Bazel's XML_OUTPUT_FILE at
# once and interleave it into a file that does not parse. Bazel writes this test's XML instead.
unset XML_OUTPUT_FILE GTEST_OUTPUT
launcher="$1"
worker="$2"
for n in 1 2 4; do
  echo "=== $n processes"
  # The last test ends one process early on purpose; the others must still finish their checks.
  "$launcher" --nproc-per-node "$n" --master-port 0 --exit-grace-s 60 "$worker" || { echo "FAIL with $n processes"; exit 1; }
done
echo PASS
