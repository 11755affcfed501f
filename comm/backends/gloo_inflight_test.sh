#!/bin/bash
# Runs gloo_inflight_test_worker once per scenario in 2 and 3 processes: the last rank dies mid-payload.
set -u
unset XML_OUTPUT_FILE GTEST_OUTPUT  # see gloo_test.sh
launcher="$1"
worker="$2"
for n in 2 3; do
  for s in all_gather broadcast broadcast_from_dying reduce_scatter all_reduce all_to_all send recv recv_small; do
    echo "=== $s, $n processes"
    "$launcher" --nproc-per-node "$n" --master-port 0 --exit-grace-s 60 "$worker" "$s" || { echo "FAIL: $s with $n processes"; exit 1; }
  done
done
echo PASS
